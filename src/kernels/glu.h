/* The GLU step of a feed-forward layer, g[i] = act(g[i]) * u[i] with act
 * GELU (tanh) or SiLU, on the forward pass's kernel level.  tk_glu (ops.h)
 * is the scalar reference; the SIMD kernel agrees with it to float rounding
 * (its exp is a polynomial, not libm's), and computes every element the
 * same way wherever it sits in the row, so results do not depend on the
 * batch, the row split or the thread count. */
#ifndef TK_GLU_H
#define TK_GLU_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu.h"

typedef void (*tk_glu_fn)(float *g, const float *u, int64_t n, bool gelu);

/* The GLU kernel for level isa: AVX2 at the x86 SIMD levels (AVX2, AVX-512,
 * AMX) on a CPU with AVX2, NEON at the arm64 level, else the scalar
 * reference. */
tk_glu_fn tk_glu_kernel(tk_isa isa);

void tk_glu_scalar(float *g, const float *u, int64_t n, bool gelu);
/* AVX2 + FMA (glu_avx2.c); only on x86-64. */
void tk_glu_avx2(float *g, const float *u, int64_t n, bool gelu);
/* NEON (glu_neon.c); only on arm64. */
void tk_glu_neon(float *g, const float *u, int64_t n, bool gelu);

#endif
