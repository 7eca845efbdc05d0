/* The arm64 NEON GEMM kernels with the dot-product instructions (vdotq_s32,
 * armv8.2-a+dotprod; this file alone is compiled with that -march, and
 * tk_qkernel_neon calls it only when the CPU reports HWCAP_ASIMDDP).  The
 * kernels are qgemm_neon.h's; the activation quantizers qgemm_neon.c's. */
#include "qgemm_impl.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)

#define NEON_DOTPROD 1
#define NEON_SUFFIX "/neon+dotprod"
#include "qgemm_neon.h"

NEON_KERNELS(tk_qkernel_neon_dotprod)

#else /* not built with dotprod */

const tk_qkernel *tk_qkernel_neon_dotprod(tk_dtype wtype) {
    (void)wtype;
    return NULL;
}

#endif
