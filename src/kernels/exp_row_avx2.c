/* The exp row kernel on AVX2 + FMA, 8 floats per vector (compiled with those
 * flags only; reached through tk_exp_row_kernel after a CPU check).  The
 * kernel is exp_row_simd.h's. */
#include "exp_row.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include "vec_avx2.h"
#include "vec_exp.h"
#include "exp_row_simd.h"

void tk_exp_row_avx2(float *out, const float *x, int64_t n, float shift, float scale) {
    exp_row_run(out, x, n, shift, scale);
}

#endif
