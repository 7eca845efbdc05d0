/* The GLU kernels (glu.h) against a float64 reference and the scalar
 * reference tk_glu, and their independence of where an element sits: each
 * element's bits are the same in a whole row, in any slice of it and in a
 * slice's ragged tail. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/glu.h"
#include "kernels/ops.h"
#include "tk_test.h"

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double silu_ref(double x) { return x / (1.0 + exp(-x)); }

static uint32_t rng = 12345;
static float frand(float lo, float hi) {
    rng = rng * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng >> 8) / 16777216.0f;
}

#define N 40960

int main(void) {
    static float x[N], u[N], want[N], got[N], part[N];
    /* a dense sweep of the range activations take, then random points and
     * values at the edges of exp's clamps */
    int n = 0;
    for (int i = 0; i < 32768; i++) x[n++] = -24.0f + 48.0f * (float)i / 32768.0f;
    while (n < N - 16) x[n++] = frand(-200.0f, 200.0f);
    const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 87.0f, -87.0f, 88.5f, -88.5f, 1e4f, -1e4f, 3e-3f, -3e-3f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) x[n++] = edge[i];
    while (n < N) x[n++] = frand(-1.0f, 1.0f);
    for (int i = 0; i < N; i++) u[i] = i % 3 ? frand(-2.0f, 2.0f) : 1.0f;

    const tk_isa levels[] = {TK_ISA_SCALAR, TK_ISA_AVX2, TK_ISA_AVX512, TK_ISA_AMX, TK_ISA_NEON};
    for (int gelu = 0; gelu <= 1; gelu++)
        for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
            const tk_glu_fn k = tk_glu_kernel(levels[li]);
            bool seen = false; /* a level without its own kernel (or absent here) hands out a lower one's */
            for (size_t lj = 0; lj < li; lj++) seen |= tk_glu_kernel(levels[lj]) == k;
            if (seen) continue;
            const char *name = tk_isa_name(levels[li]), *act = gelu ? "gelu" : "silu";
            memcpy(got, x, sizeof got);
            k(got, u, N, gelu);
            memcpy(want, x, sizeof want);
            tk_glu(want, u, N, gelu);
            /* Error bound: 4e-7 of the exact value, plus what float
             * arithmetic allows: a rounding of z in sigmoid(z) costs up to
             * |z| 2^-24 of the value, and the reference's 1 + tanh(z/2)
             * near 0 loses about 2^-25 of |x u| (GELU). */
            double worst = 0, worst_ref = 0;
            int bad = 0;
            for (int i = 0; i < N; i++) {
                const double ex = (gelu ? gelu_ref(x[i]) : silu_ref(x[i])) * u[i];
                const double z = gelu ? 1.5957691216 * fabs(x[i] + 0.044715 * x[i] * x[i] * x[i]) : fabs(x[i]);
                const double tol = fabs(ex) * (4e-7 + z * 0x1p-24) + fabs((double)x[i] * u[i]) * 0x1p-25 + 1e-38;
                const double e = fabs(got[i] - ex) / tol, e_ref = fabs(want[i] - ex) / tol;
                if (!(e <= 1.0) && bad++ < 5)
                    fprintf(stderr, "%s %s: x=%g u=%g got %.9g want %.9g (scalar %.9g)\n", name, act, x[i], u[i],
                            got[i], ex, want[i]);
                if (e > worst) worst = e;
                if (e_ref > worst_ref) worst_ref = e_ref;
            }
            CHECK(bad == 0, "%s %s: %d elements outside the bound", name, act, bad);
            printf("%s %s: worst error %.3f of the bound (scalar reference %.3f)\n", name, act, worst, worst_ref);
            /* infinities: act(+inf) = +inf; act(-inf) times u is -0 or NaN in the references, not checked */
            float gi[1] = {INFINITY}, ui[1] = {1.0f};
            k(gi, ui, 1, gelu);
            CHECK(gi[0] == INFINITY, "%s %s: act(+inf) = %g", name, act, gi[0]);
            float gn[1] = {NAN};
            k(gn, ui, 1, gelu);
            CHECK(isnan(gn[0]), "%s %s: NaN in, %g out", name, act, gn[0]);
            /* slices: every element keeps its bits in a slice of any start and length */
            for (int trial = 0; trial < 200; trial++) {
                const int a = (int)frand(0.0f, 2000.0f), len = trial < 40 ? trial + 1 : (int)frand(1.0f, 300.0f);
                memcpy(part, x, sizeof part);
                k(part + a, u + a, len, gelu);
                CHECK(!memcmp(part + a, got + a, (size_t)len * sizeof(float)), "%s %s: slice [%d, %d) differs", name,
                      act, a, a + len);
                CHECK(!memcmp(part, x, (size_t)a * sizeof(float)) &&
                          !memcmp(part + a + len, x + a + len, (size_t)(N - a - len) * sizeof(float)),
                      "%s %s: slice [%d, %d) wrote outside itself", name, act, a, a + len);
            }
        }
    TK_TEST_END();
}
