/* The exp row kernel written once for any vector width: included by
 * exp_row_avx2.c and exp_row_neon.c after their vec_*.h and vec_exp.h. */
#ifndef TK_EXP_ROW_SIMD_H
#define TK_EXP_ROW_SIMD_H

#include <stdint.h>
#include <string.h>

/* x - shift is -inf for a token at -inf (and NaN only if shift is
 * infinite, which callers avoid); vexp gives 0 below -87. */
static inline vf exp_vec(vf x, vf shift, vf scale) { return vexp(vmul(vsub(x, shift), scale)); }

static inline void exp_row_run(float *out, const float *x, int64_t n, float shift, float scale) {
    const vf vs = vset1(shift), vk = vset1(scale);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) vstore(out + i, exp_vec(vload(x + i), vs, vk));
    if (i < n) { /* the tail through the same vector code, so its bits are the same */
        float b[VL] = {0};
        memcpy(b, x + i, (size_t)(n - i) * sizeof(float));
        vstore(b, exp_vec(vload(b), vs, vk));
        memcpy(out + i, b, (size_t)(n - i) * sizeof(float));
    }
}

#endif
