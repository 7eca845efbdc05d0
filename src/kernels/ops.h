/* Portable reference kernels for the forward pass.  Matrices follow GGUF:
 * a weight W has ne[0] = in (row length) and ne[1] = out rows. */
#ifndef TK_OPS_H
#define TK_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../formats/tensor.h"
#include "threadpool.h"

float tk_dot_f32(const float *a, const float *b, int64_t n);

/* 1 / sqrt(mean(x^2) + eps), the sum of squares in float64 (the scale
 * every RMSNorm of the library uses, fused or not). */
float tk_rms_scale(const float *x, int64_t n, float eps);

/* y[i] = x[i] * tk_rms_scale(x) * w[i] */
void tk_rmsnorm(float *y, const float *x, const float *w, int n, float eps);

/* Dequantizes row r of a 2-D weight into out (W->ne[0] floats). */
void tk_tensor_row(const tk_tensor *W, int64_t r, float *out);

static inline float tk_silu(float x) { return x / (1.0f + __builtin_expf(-x)); }

/* GELU, tanh approximation (Gemma's gelu_pytorch_tanh). */
static inline float tk_gelu_tanh(float x) {
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    return 0.5f * x * (1.0f + __builtin_tanhf(c * (x + 0.044715f * x * x * x)));
}

/* The GLU of a gate and an up projection: g[i] = act(g[i]) * u[i], act
 * GELU (tanh) or SiLU: the scalar reference of the GLU kernels (glu.h). */
static inline void tk_glu(float *g, const float *u, int64_t n, bool gelu) {
    if (gelu)
        for (int64_t i = 0; i < n; i++) g[i] = tk_gelu_tanh(g[i]) * u[i];
    else
        for (int64_t i = 0; i < n; i++) g[i] = tk_silu(g[i]) * u[i];
}

#endif
