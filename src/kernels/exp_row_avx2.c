/* The exp row kernel on AVX2 + FMA, 8 floats per vector (compiled with those
 * flags only; reached through tk_exp_row_kernel after a CPU check). */
#include "exp_row.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>
#include <string.h>

#include "vec_avx2.h"
#include "vec_exp.h"

/* x - shift is -inf for a token at -inf (and NaN only if shift is
 * infinite, which callers avoid); vexp gives 0 below -87. */
static inline vf exp8(vf x, vf shift, vf scale) { return vexp(vmul(vsub(x, shift), scale)); }

void tk_exp_row_avx2(float *out, const float *x, int64_t n, float shift, float scale) {
    const vf vs = vset1(shift), vk = vset1(scale);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) vstore(out + i, exp8(vload(x + i), vs, vk));
    if (i < n) { /* the tail through the same vector code, so its bits are the same */
        float b[VL] = {0};
        memcpy(b, x + i, (size_t)(n - i) * sizeof(float));
        vstore(b, exp8(vload(b), vs, vk));
        memcpy(out + i, b, (size_t)(n - i) * sizeof(float));
    }
}

#endif
