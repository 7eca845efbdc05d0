/* The GLU step on AVX2 + FMA, 8 floats per vector (compiled with those
 * flags only; reached through tk_glu_kernel after a CPU check).
 *
 * Both activations are x * sigmoid(z) = x / (1 + exp(-z)): SiLU with z = x,
 * GELU-tanh with z = 2 sqrt(2/pi) (x + 0.044715 x^3), since
 * 0.5 (1 + tanh(z/2)) = sigmoid(z).  One vector exp and one division per 8
 * elements instead of libm's tanhf/expf per element (Gemma 3's prefill
 * spent about 30 % of its time in tanhf before, docs/kernels.md).  The
 * sigmoid form also avoids the reference's cancellation in 1 + tanh(u) for
 * negative x. */
#include "glu.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>
#include <string.h>

#include "vec_avx2.h"
#include "vec_exp.h"

#define GELU_C 0.7978845608028654f /* sqrt(2 / pi) */

/* act(g) * u; always inlined with a constant `gelu`, so each loop below has
 * one activation. */
static inline __attribute__((always_inline)) vf glu8(vf g, vf u, bool gelu) {
    vf minus_z = gelu ? vmul(g, vfma(vmul(g, g), vset1(-2.0f * GELU_C * 0.044715f), vset1(-2.0f * GELU_C)))
                      : vsub(vzero(), g);
    return vmul(_mm256_div_ps(g, vadd(vset1(1.0f), vexp(minus_z))), u);
}

static inline __attribute__((always_inline)) void glu_run(float *g, const float *u, int64_t n, bool gelu) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) vstore(g + i, glu8(vload(g + i), vload(u + i), gelu));
    if (i < n) { /* the tail through the same vector code, so its bits are the same */
        float gb[VL] = {0}, ub[VL] = {0};
        memcpy(gb, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(ub, u + i, (size_t)(n - i) * sizeof(float));
        vstore(gb, glu8(vload(gb), vload(ub), gelu));
        memcpy(g + i, gb, (size_t)(n - i) * sizeof(float));
    }
}

void tk_glu_avx2(float *g, const float *u, int64_t n, bool gelu) {
    if (gelu)
        glu_run(g, u, n, true);
    else
        glu_run(g, u, n, false);
}

#endif
