#include "glu.h"

#include "ops.h"

void tk_glu_scalar(float *g, const float *u, int64_t n, bool gelu) { tk_glu(g, u, n, gelu); }

tk_glu_fn tk_glu_kernel(tk_isa isa) {
#if defined(__x86_64__) || defined(_M_X64)
    if (tk_isa_uses_avx2(isa))
        return tk_glu_avx2;
#elif defined(__aarch64__)
    if (isa == TK_ISA_NEON)
        return tk_glu_neon;
#else
    (void)isa;
#endif
    return tk_glu_scalar;
}
