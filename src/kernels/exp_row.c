#include "exp_row.h"

#include <math.h>

void tk_exp_row_scalar(float *out, const float *x, int64_t n, float shift, float scale) {
    for (int64_t i = 0; i < n; i++) out[i] = expf((x[i] - shift) * scale);
}

tk_exp_row_fn tk_exp_row_kernel(tk_isa isa) {
#if defined(__x86_64__) || defined(_M_X64)
    if (tk_isa_uses_avx2(isa))
        return tk_exp_row_avx2;
#elif defined(__aarch64__)
    if (isa == TK_ISA_NEON)
        return tk_exp_row_neon;
#else
    (void)isa;
#endif
    return tk_exp_row_scalar;
}
