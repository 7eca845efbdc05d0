/* The GLU step on AVX2 + FMA, 8 floats per vector (compiled with those
 * flags only; reached through tk_glu_kernel after a CPU check).  The kernel
 * is glu_simd.h's. */
#include "glu.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include "vec_avx2.h"
#include "vec_exp.h"
#include "glu_simd.h"

void tk_glu_avx2(float *g, const float *u, int64_t n, bool gelu) { glu_rows(g, u, n, gelu); }

#endif
