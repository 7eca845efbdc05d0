/* The GLU step on arm64 NEON, 4 floats per vector (Advanced SIMD is part of
 * every AArch64 CPU; reached through tk_glu_kernel at the NEON level).  The
 * kernel is glu_simd.h's. */
#include "glu.h"

#if defined(__aarch64__) && defined(__ARM_NEON)

#include <arm_neon.h>

#include "vec_neon.h"
#include "vec_exp.h"
#include "glu_simd.h"

void tk_glu_neon(float *g, const float *u, int64_t n, bool gelu) { glu_rows(g, u, n, gelu); }

#endif
