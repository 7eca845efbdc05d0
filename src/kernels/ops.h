/* Portable reference kernels for the forward pass.  Matrices follow GGUF:
 * a weight W has ne[0] = in (row length) and ne[1] = out rows. */
#ifndef TK_OPS_H
#define TK_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "../formats/tensor.h"
#include "threadpool.h"

float tk_dot_f32(const float *a, const float *b, int64_t n);

/* y[i] = x[i] / rms(x) * w[i] */
void tk_rmsnorm(float *y, const float *x, const float *w, int n, float eps);

/* Dequantizes row r of a 2-D weight into out (W->ne[0] floats). */
void tk_tensor_row(const tk_tensor *W, int64_t r, float *out);

static inline float tk_silu(float x) { return x / (1.0f + __builtin_expf(-x)); }

/* GELU, tanh approximation (Gemma's gelu_pytorch_tanh). */
static inline float tk_gelu_tanh(float x) {
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    return 0.5f * x * (1.0f + __builtin_tanhf(c * (x + 0.044715f * x * x * x)));
}

#endif
