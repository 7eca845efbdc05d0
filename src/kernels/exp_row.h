/* out[i] = exp((x[i] - shift) * scale) over a row: the numerators of a
 * softmax at a temperature (the sampler's, over a whole vocabulary, where
 * libm's expf per token was most of a sampled token's time on a
 * 128k-262k vocabulary).  exp(-inf) is 0.  The SIMD kernel agrees with the
 * scalar reference (libm) to float rounding (its exp is the polynomial of
 * vec_exp.h, 1-2 ulp) and computes every element the same way wherever it
 * sits in the row. */
#ifndef TK_EXP_ROW_H
#define TK_EXP_ROW_H

#include <stdint.h>

#include "cpu.h"

typedef void (*tk_exp_row_fn)(float *out, const float *x, int64_t n, float shift, float scale);

/* The kernel for level isa: AVX2 at the x86 SIMD levels on a CPU with AVX2,
 * NEON at the arm64 level, else the scalar reference. */
tk_exp_row_fn tk_exp_row_kernel(tk_isa isa);

void tk_exp_row_scalar(float *out, const float *x, int64_t n, float shift, float scale);
/* AVX2 + FMA (exp_row_avx2.c); only on x86-64. */
void tk_exp_row_avx2(float *out, const float *x, int64_t n, float shift, float scale);
/* NEON (exp_row_neon.c); only on arm64. */
void tk_exp_row_neon(float *out, const float *x, int64_t n, float shift, float scale);

#endif
