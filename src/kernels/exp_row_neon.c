/* The exp row kernel on arm64 NEON, 4 floats per vector (reached through
 * tk_exp_row_kernel at the NEON level).  The kernel is exp_row_simd.h's. */
#include "exp_row.h"

#if defined(__aarch64__) && defined(__ARM_NEON)

#include <arm_neon.h>

#include "vec_neon.h"
#include "vec_exp.h"
#include "exp_row_simd.h"

void tk_exp_row_neon(float *out, const float *x, int64_t n, float shift, float scale) {
    exp_row_run(out, x, n, shift, scale);
}

#endif
