/* The exp row kernels (exp_row.h) against float64 exp at every level this
 * CPU has, and their independence of where an element sits: each element's
 * bits are the same in a whole row and in any slice of it, ragged tails
 * included. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/exp_row.h"
#include "tk_test.h"

static uint32_t rng = 777;
static float frand(float lo, float hi) {
    rng = rng * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng >> 8) / 16777216.0f;
}

#define N 20000

int main(void) {
    static float x[N], xs[N], got[N], part[N];
    /* logits below a maximum of 0 (the sampler's shift), a dense sweep, then
     * random points, -inf, and values past exp's lower clamp */
    int n = 0;
    for (int i = 0; i < 16384; i++) x[n++] = -100.0f * (float)i / 16384.0f;
    while (n < N - 8) x[n++] = frand(-40.0f, 0.0f);
    const float edge[] = {0.0f, -0.0f, -INFINITY, -86.9f, -87.1f, -1e4f, -1e-30f, -INFINITY};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) x[n++] = edge[i];
    const float shifts[] = {0.0f, -3.5f}, scales[] = {1.0f, 1.0f / 0.7f, 0.4f};

    const tk_isa levels[] = {TK_ISA_SCALAR, TK_ISA_AVX2, TK_ISA_AVX512, TK_ISA_AMX, TK_ISA_NEON};
    for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
        const tk_exp_row_fn k = tk_exp_row_kernel(levels[li]);
        bool seen = false; /* a level without its own kernel (or absent here) hands out a lower one's */
        for (size_t lj = 0; lj < li; lj++) seen |= tk_exp_row_kernel(levels[lj]) == k;
        if (seen) continue;
        for (size_t si = 0; si < 2; si++)
            for (size_t ki = 0; ki < 3; ki++) {
                const float shift = shifts[si], scale = scales[ki];
                /* x - shift: shift it back so the exponent stays <= 0 */
                for (int i = 0; i < N; i++) xs[i] = x[i] + shift;
                k(got, xs, N, shift, scale);
                int bad = 0;
                for (int i = 0; i < N; i++) {
                    const double arg = (double)((xs[i] - shift) * scale), ex = exp(arg);
                    /* 4e-7 of the value (the polynomial's 1-2 ulp), and the
                     * kernel's flush to 0 below exp(-87) ~ 1.6e-38 */
                    const bool ok = fabs(got[i] - ex) <= 4e-7 * ex + 2e-38 && got[i] >= 0;
                    if (!ok && bad++ < 5)
                        fprintf(stderr, "%s: exp((%g - %g) * %g) gave %.9g, want %.9g\n", tk_isa_name(levels[li]),
                                xs[i], shift, scale, got[i], ex);
                }
                CHECK(bad == 0, "%s shift %g scale %g: %d values off", tk_isa_name(levels[li]), shift, scale, bad);
                CHECK(got[N - 1] == 0 && got[N - 6] == 0, "%s: exp(-inf) is not 0", tk_isa_name(levels[li]));
                /* the same bits in slices with every offset and ragged length */
                int moved = 0;
                for (int off = 0; off < 17; off++)
                    for (int len = 1; len < 40 && off + len <= N; len += 3) {
                        k(part, xs + off, len, shift, scale);
                        moved += memcmp(part, got + off, (size_t)len * sizeof(float)) != 0;
                    }
                CHECK(moved == 0, "%s: %d slices differ from the whole row", tk_isa_name(levels[li]), moved);
            }
    }
    TK_TEST_END();
}
