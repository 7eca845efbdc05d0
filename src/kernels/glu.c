#include "glu.h"

#include "ops.h"

void tk_glu_scalar(float *g, const float *u, int64_t n, bool gelu) { tk_glu(g, u, n, gelu); }

tk_glu_fn tk_glu_kernel(tk_isa isa) {
#if defined(__x86_64__) || defined(_M_X64)
    if ((isa == TK_ISA_AVX2 || isa == TK_ISA_AVX512 || isa == TK_ISA_AMX) && tk_isa_supported(TK_ISA_AVX2))
        return tk_glu_avx2;
#else
    (void)isa;
#endif
    return tk_glu_scalar;
}
