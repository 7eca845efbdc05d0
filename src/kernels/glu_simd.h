/* The GLU step written once for any vector width: included by glu_avx2.c
 * and glu_neon.c after their vec_*.h (which brings vdiv besides what
 * vec_exp.h needs) and vec_exp.h.
 *
 * Both activations are x * sigmoid(z) = x / (1 + exp(-z)): SiLU with z = x,
 * GELU-tanh with z = 2 sqrt(2/pi) (x + 0.044715 x^3), since
 * 0.5 (1 + tanh(z/2)) = sigmoid(z).  One vector exp and one division per
 * vector instead of libm's tanhf/expf per element (Gemma 3's prefill spent
 * about 30 % of its time in tanhf before, docs/kernels.md).  The sigmoid
 * form also avoids the reference's cancellation in 1 + tanh(u) for
 * negative x. */
#ifndef TK_GLU_SIMD_H
#define TK_GLU_SIMD_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define GELU_C 0.7978845608028654f /* sqrt(2 / pi) */

/* act(g) * u; always inlined with a constant `gelu`, so each loop below has
 * one activation. */
static inline __attribute__((always_inline)) vf glu_vec(vf g, vf u, bool gelu) {
    vf minus_z = gelu ? vmul(g, vfma(vmul(g, g), vset1(-2.0f * GELU_C * 0.044715f), vset1(-2.0f * GELU_C)))
                      : vsub(vzero(), g);
    return vmul(vdiv(g, vadd(vset1(1.0f), vexp(minus_z))), u);
}

static inline __attribute__((always_inline)) void glu_run(float *g, const float *u, int64_t n, bool gelu) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) vstore(g + i, glu_vec(vload(g + i), vload(u + i), gelu));
    if (i < n) { /* the tail through the same vector code, so its bits are the same */
        float gb[VL] = {0}, ub[VL] = {0};
        memcpy(gb, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(ub, u + i, (size_t)(n - i) * sizeof(float));
        vstore(gb, glu_vec(vload(gb), vload(ub), gelu));
        memcpy(g + i, gb, (size_t)(n - i) * sizeof(float));
    }
}

/* g = act(g) * u over n elements, one loop per activation */
static inline void glu_rows(float *g, const float *u, int64_t n, bool gelu) {
    if (gelu)
        glu_run(g, u, n, true);
    else
        glu_run(g, u, n, false);
}

#endif
