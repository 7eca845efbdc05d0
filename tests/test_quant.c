/* The quantization toolkit: reference quantizers against llama-quantize's
 * output, NF4, grids, GPTQ and AWQ on synthetic layers, whole models
 * quantized and reloaded, and bad input through the CLI. */
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <dirent.h>

#include <tokamak.h>

#include "../src/formats/gguf.h"
#include "../src/formats/quant_blocks.h"
#include "../src/kernels/qgemm.h"
#include "../src/quant/quant.h"
#include "../src/quant/quantize.h"
#include "../src/tokenizer/tokenizer.h"
#include "tk_test.h"

static char tmpdir[256];

static char *tmp_path(const char *name) {
    static char buf[8][512];
    static int slot;
    char *b = buf[slot++ & 7];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

/* deterministic normal samples */
static uint64_t rng_state = 88172645463325252ull;
static double urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((rng_state >> 11) + 0.5) * 0x1p-53;
}
static double nrand(void) { return sqrt(-2 * log(urand())) * cos(6.283185307179586 * urand()); }

/* ---- 1. RTN vs llama-quantize ---- */

/* Every quantized tensor of every llama-quantize fixture is reproduced
 * byte for byte from the F32 fixture by tk_quantize_row (no importance):
 * llama-quantize ran without an importance matrix, so it used the
 * quantize_row_*_ref path these quantizers follow.  The fixtures cover
 * Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 (their own files), Q2_K (qfix-Q2_K), Q3_K
 * (Q2_K and Q3_K_M mixes), Q4_K (Q4_K_M, Q3_K_M), Q5_K (Q5_K_M, Q3_K_M)
 * and Q6_K (every file's output.weight, qfix-Q6_K). */
static void test_rtn_fixtures(void) {
    static const char *files[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"};
    tk_gguf *f32;
    tk_err err;
    if (tk_gguf_open(tk_shared("gguf-fixtures/qfix-F32.gguf"), &f32, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    int tensors[TK_DTYPE_LIMIT] = {0};
    long bad_bytes[TK_DTYPE_LIMIT] = {0};
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        char rel[128];
        snprintf(rel, sizeof rel, "gguf-fixtures/qfix-%s.gguf", files[k]);
        tk_gguf *q;
        if (tk_gguf_open(tk_shared(rel), &q, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        for (size_t i = 0; i < tk_gguf_n_tensors(q); i++) {
            const tk_tensor *t = tk_gguf_tensor_at(q, i);
            if (t->type == TK_F32) continue;
            const tk_tensor *s = tk_gguf_find_tensor(f32, t->name);
            CHECK(s && s->type == TK_F32, "%s: %s missing in F32", files[k], t->name);
            if (!s) continue;
            const size_t rb = tk_dtype_row_bytes(t->type, t->ne[0]);
            const int64_t rows = tk_tensor_nelems(t) / t->ne[0];
            unsigned char *buf = malloc(rb);
            long bad = 0;
            for (int64_t r = 0; r < rows; r++) {
                CHECK(tk_quantize_row(t->type, (const float *)s->data + r * t->ne[0], buf, t->ne[0], NULL) == 0,
                      "quantize %s", t->name);
                const unsigned char *ref = (const unsigned char *)t->data + (size_t)r * rb;
                for (size_t j = 0; j < rb; j++) bad += buf[j] != ref[j];
            }
            free(buf);
            tensors[t->type]++;
            bad_bytes[t->type] += bad;
            CHECK(bad == 0, "%s: %s (%s): %ld bytes differ from llama-quantize", files[k], t->name,
                  tk_dtype_get(t->type)->name, bad);
        }
        tk_gguf_close(q);
    }
    static const tk_dtype want[] = {TK_Q4_0, TK_Q4_1, TK_Q5_0, TK_Q5_1, TK_Q8_0,
                                    TK_Q2_K, TK_Q3_K, TK_Q4_K, TK_Q5_K, TK_Q6_K};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(tensors[want[i]] > 0, "no fixture tensor of type %s compared", tk_dtype_get(want[i])->name);
    tk_gguf_close(f32);
}

static void test_rtn_api(void) {
    float x[512], y[512], imp[512];
    for (int i = 0; i < 512; i++) x[i] = (float)nrand() * (i % 37 == 0 ? 4.0f : 1.0f);
    unsigned char buf[1024];
    CHECK(tk_quantize_row(TK_Q4_0, x, buf, 33, NULL) == -1, "partial block rejected");
    CHECK(tk_quantize_row(TK_IQ4_XS, x, buf, 256, NULL) == -1, "no IQ4_XS quantizer");
    CHECK(tk_quantize_row(TK_Q4_K, x, buf, 288, NULL) == -1, "Q4_K needs 256-multiples");
    CHECK(tk_quantize_row((tk_dtype)77, x, buf, 32, NULL) == -1, "unknown type");
    /* importance: the weighted error with weights must not be worse than the
     * reference's on the same weights (the searches minimise it) */
    static const tk_dtype types[] = {TK_Q4_0, TK_Q4_1, TK_Q5_0, TK_Q5_1, TK_Q8_0, TK_Q2_K, TK_Q3_K, TK_Q4_K,
                                     TK_Q5_K, TK_Q6_K, TK_NF4};
    for (int i = 0; i < 512; i++) imp[i] = (float)(0.01 + (i % 5 == 0 ? 10.0 : urand()));
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        double e_ref = 0, e_imp = 0;
        CHECK(tk_quantize_roundtrip(types[k], x, y, 512, NULL) == 0, "roundtrip");
        for (int i = 0; i < 512; i++) e_ref += imp[i] * (x[i] - y[i]) * (x[i] - y[i]);
        CHECK(tk_quantize_roundtrip(types[k], x, y, 512, imp) == 0, "roundtrip imp");
        for (int i = 0; i < 512; i++) e_imp += imp[i] * (x[i] - y[i]) * (x[i] - y[i]);
        CHECK(e_imp <= e_ref * 1.02, "%s: importance-weighted error %g above the reference's %g",
              tk_dtype_get(types[k])->name, e_imp, e_ref);
    }
}

/* ---- 2. NF4 ---- */

/* Phi^-1 by bisection on erfc (test-only, slow but exact enough) */
static double norm_ppf(double p) {
    double lo = -10, hi = 10;
    for (int i = 0; i < 200; i++) {
        const double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < p)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

static void test_nf4_codebook(void) {
    /* the table printed in the QLoRA paper (appendix E) */
    static const double paper[16] = {-1.0,
                                     -0.6961928009986877,
                                     -0.5250730514526367,
                                     -0.39491748809814453,
                                     -0.28444138169288635,
                                     -0.18477343022823334,
                                     -0.09105003625154495,
                                     0.0,
                                     0.07958029955625534,
                                     0.16093020141124725,
                                     0.24611230194568634,
                                     0.33791524171829224,
                                     0.44070982933044434,
                                     0.5626170039176941,
                                     0.7229568362236023,
                                     1.0};
    for (int i = 0; i < 16; i++)
        CHECK(tk_nf4_values[i] == (float)paper[i], "NF4 value %d: %.9g vs paper %.9g", i, tk_nf4_values[i], paper[i]);
    /* and how they arise: quantiles of N(0,1) at evenly spaced probabilities
     * between offset = 0.9677 (= (1 - 1/(2*15) + 1 - 1/(2*16)) / 2) and 1/2, 8
     * on the positive side and 7 on the negative, an exact 0, normalised by
     * the largest */
    const double offset = 0.9677083;
    double v[16];
    for (int i = 0; i < 8; i++) v[8 + i] = norm_ppf(offset + (0.5 - offset) * (7 - i) / 8.0);
    for (int i = 0; i < 7; i++) v[i] = -norm_ppf(offset + (0.5 - offset) * i / 7.0);
    v[7] = 0;
    const double mx = v[15];
    for (int i = 0; i < 16; i++)
        CHECK(fabs(v[i] / mx - paper[i]) < 2e-6, "NF4 level %d from the normal quantiles: %.7f vs %.7f", i,
              v[i] / mx, paper[i]);
    for (int i = 0; i < 16; i++) CHECK(tk_nf4_code(tk_nf4_values[i]) == i, "code of level %d", i);
    CHECK(tk_nf4_code(-2.0f) == 0 && tk_nf4_code(2.0f) == 15 && tk_nf4_code(0.01f) == 7, "code clamps");
}

static void test_nf4_rows(void) {
    /* rows of 288 (4 blocks of 64 + 32) and 20480 (320 blocks: two DQ groups) */
    static const int lens[] = {288, 20480};
    for (size_t k = 0; k < 2; k++) {
        const int n = lens[k];
        float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *z = malloc(sizeof(float) * n);
        for (int i = 0; i < n; i++) x[i] = (float)nrand() * (1.0f + (float)(i / 64 % 7));
        const size_t b4 = tk_dtype_row_bytes(TK_NF4, n), bdq = tk_dtype_row_bytes(TK_NF4_DQ, n);
        const int nb = (n + 63) / 64;
        CHECK(b4 == (size_t)nb * 4 + (size_t)n / 2, "NF4 row bytes %zu", b4);
        CHECK(bdq == (size_t)((nb + 255) / 256) * 8 + (size_t)nb + (size_t)n / 2, "NF4_DQ row bytes %zu", bdq);
        CHECK(bdq < b4, "double quantization is smaller: %zu vs %zu", bdq, b4);
        unsigned char *buf = malloc(b4);
        CHECK(tk_quantize_row(TK_NF4, x, buf, n, NULL) == 0, "nf4");
        tk_dequant_row(TK_NF4, buf, y, n);
        /* every value is a level times its block's absmax, and the nearest one */
        int bad = 0;
        double e4 = 0, edq = 0;
        for (int b = 0; b < nb; b++) {
            const int L = n - 64 * b < 64 ? n - 64 * b : 64;
            float amax = 0;
            for (int i = 0; i < L; i++) amax = fmaxf(amax, fabsf(x[64 * b + i]));
            for (int i = 0; i < L; i++) {
                const float v = y[64 * b + i];
                const float want = tk_nf4_values[tk_nf4_code(x[64 * b + i] * (1.0f / amax))] * amax;
                bad += v != want;
                e4 += (double)(x[64 * b + i] - v) * (x[64 * b + i] - v);
            }
        }
        CHECK(bad == 0, "NF4 row %d: %d values are not the nearest level", n, bad);
        CHECK(tk_quantize_row(TK_NF4_DQ, x, buf, n, NULL) == 0, "nf4 dq");
        tk_dequant_row(TK_NF4_DQ, buf, z, n);
        /* double-quant round trip: each block's absmax within (max-min)/510 of
         * its group range, so values move by at most that much plus one level */
        float gmin = INFINITY, gmax = 0;
        for (int b = 0; b < nb; b++) {
            float amax = 0;
            for (int i = 0; i < 64 && 64 * b + i < n; i++) amax = fmaxf(amax, fabsf(x[64 * b + i]));
            gmin = fminf(gmin, amax);
            gmax = fmaxf(gmax, amax);
        }
        const double abs_bound = (gmax - gmin) / 510.0 * 1.0001 + 1e-6;
        int bad_a = 0;
        const int ng = (nb + 255) / 256;
        for (int b = 0; b < nb; b++) {
            float gs[2];
            memcpy(gs, buf + 8 * (b / 256), 8);
            const float a = (float)buf[8 * ng + b] * gs[0] + gs[1];
            float amax = 0;
            for (int i = 0; i < 64 && 64 * b + i < n; i++) amax = fmaxf(amax, fabsf(x[64 * b + i]));
            bad_a += fabs((double)a - amax) > abs_bound;
        }
        CHECK(bad_a == 0, "NF4_DQ row %d: %d absmax values off by more than (max-min)/510 = %g", n, bad_a, abs_bound);
        for (int i = 0; i < n; i++) edq += (double)(x[i] - z[i]) * (x[i] - z[i]);
        CHECK(edq < e4 * 1.05, "NF4_DQ error %g vs NF4 %g (should be nearly equal)", edq, e4);
        free(x), free(y), free(z), free(buf);
    }
}

/* The NF4 kernels (every ISA this CPU has, through the kernel table) on
 * quantized Gaussian rows, against the float64 dot product of the
 * dequantized weights and activations.  The kernels' int16 code book differs
 * from tk_nf4_values by at most 2^-15 (relative to absmax), which adds at
 * most 2^-15 * sum |absmax * xq| to the float rounding (tests/test_qgemm.c
 * checks the tight bounds on random codes); 1e-4 of sum |w * xq| covers
 * both with a wide margin. */
static void test_nf4_kernel(void) {
    static const int lens[] = {288, 768, 20480};
    const int R = 5, T = 3;
    for (size_t k = 0; k < 3; k++) {
        const int n = lens[k];
        float *x = malloc(sizeof(float) * (size_t)n * R), *a = malloc(sizeof(float) * (size_t)n * T);
        float *wd = malloc(sizeof(float) * (size_t)n), *ad = malloc(sizeof(float) * (size_t)n * T);
        for (int i = 0; i < n * R; i++) x[i] = (float)nrand();
        for (int i = 0; i < n * T; i++) a[i] = (float)nrand();
        for (int dq = 0; dq < 2; dq++) {
            const tk_dtype ty = dq ? TK_NF4_DQ : TK_NF4;
            const tk_qkernel *ref = tk_qkernel_get(ty, TK_ISA_SCALAR);
            CHECK(ref && ref->act_type == TK_Q8_0, "%s: scalar kernel with Q8_0 activations", tk_dtype_get(ty)->name);
            if (!ref) continue;
            const size_t arb = ref->act_row_bytes(n);
            unsigned char *act = malloc(arb * T);
            for (int t = 0; t < T; t++) {
                ref->quantize_act(a + (size_t)t * n, act + (size_t)t * arb, n);
                tk_dequant_row(TK_Q8_0, act + (size_t)t * arb, ad + (size_t)t * n, n);
            }
            const size_t wrb = tk_dtype_row_bytes(ty, n);
            unsigned char *w = malloc(wrb * R);
            for (int r = 0; r < R; r++) tk_quantize_row(ty, x + (size_t)r * n, w + (size_t)r * wrb, n, NULL);
            for (int isa = 0; isa < TK_ISA_COUNT; isa++) {
                const tk_qkernel *kern = tk_qkernel_get(ty, (tk_isa)isa);
                if (!kern) continue;
                float y[15], yd[15];
                kern->gemm(w, wrb, n, 0, R, act, arb, T, y, R);
                kern->gemm(w, wrb, n, 1, R, act, arb, T, yd, R); /* rows 1.. only */
                int bad = 0;
                for (int r = 0; r < R; r++) {
                    tk_dequant_row(ty, w + (size_t)r * wrb, wd, n);
                    for (int t = 0; t < T; t++) {
                        double want = 0, mag = 0;
                        for (int c = 0; c < n; c++) {
                            want += (double)wd[c] * ad[(size_t)t * n + c];
                            mag += fabs((double)wd[c] * ad[(size_t)t * n + c]);
                        }
                        bad += !(fabs(y[t * R + r] - want) <= 1e-4 * mag) || (r >= 1 && yd[t * R + r] != y[t * R + r]);
                    }
                }
                CHECK(bad == 0, "%s, n=%d: %d results off", kern->name, n, bad);
            }
            free(w);
            free(act);
        }
        free(x), free(a), free(wd), free(ad);
    }
}

/* ---- 3. grids ---- */

static void test_grids(void) {
    static const tk_dtype types[] = {TK_Q4_0, TK_Q4_1, TK_Q5_0, TK_Q5_1, TK_Q8_0, TK_Q4_K, TK_Q5_K};
    float x[512], y[512];
    for (int i = 0; i < 512; i++) x[i] = (float)nrand();
    tk_err err;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        tk_qmatrix q;
        CHECK(tk_qmatrix_alloc(&q, types[k], 1, 512, &err) == 0, "%s", err.msg);
        tk_threadpool *pool = tk_threadpool_new(1);
        CHECK(tk_rtn_matrix(x, 64, &q, pool, &err) == 0, "%s", err.msg);
        unsigned char buf[1024];
        CHECK(tk_qmatrix_pack(&q, buf, &err) == 0, "%s", err.msg);
        tk_dequant_row(types[k], buf, y, 512);
        int bad = 0;
        for (int i = 0; i < 512; i++) bad += y[i] != q.deq[i];
        CHECK(bad == 0, "%s: %d packed values differ from the grid values", tk_dtype_get(types[k])->name, bad);
        /* groups of 64 share one grid */
        for (int b = 0; b < 16; b += 2)
            CHECK(!memcmp(&q.grids[b], &q.grids[b + 1], sizeof(tk_qgrid)), "%s: group of 64 shares its grid",
                  tk_dtype_get(types[k])->name);
        tk_threadpool_free(pool);
        tk_qmatrix_free(&q);
    }
    /* codes out of range are refused */
    uint8_t codes[32] = {0};
    codes[3] = 16;
    tk_qgrid g[1];
    tk_qgrid_fit(TK_Q4_0, x, 32, g);
    unsigned char buf[64];
    CHECK(tk_qpack_row(TK_Q4_0, codes, g, 32, buf, &err) == -1 && strstr(err.msg, "range"), "code range: %s",
          err.msg);
}

/* ---- 4. GPTQ and AWQ on synthetic layers ---- */

/* X: n tokens x C channels with strongly correlated neighbours and a few
 * outlier channels; W: R x C. */
static void synth_layer(int R, int C, int N, float outlier, float **W, float **X) {
    *W = malloc(sizeof(float) * (size_t)R * C);
    *X = malloc(sizeof(float) * (size_t)N * C);
    float *Z = malloc(sizeof(float) * (size_t)N * C);
    for (int i = 0; i < R * C; i++) (*W)[i] = (float)nrand() * 0.02f;
    for (size_t i = 0; i < (size_t)N * C; i++) Z[i] = (float)nrand();
    for (int t = 0; t < N; t++)
        for (int c = 0; c < C; c++) {
            double v = 0;
            for (int k = 0; k < 6; k++) v += Z[(size_t)t * C + (c + k) % C] * (k ? 0.7 : 1.0);
            (*X)[(size_t)t * C + c] = (float)v * (c % 23 == 5 ? outlier : 1.0f);
        }
    free(Z);
}

static void test_gptq_synthetic(void) {
    const int R = 64, C = 256, N = 1024;
    float *W, *X;
    synth_layer(R, C, N, 4.0f, &W, &X);
    double *H = calloc((size_t)C * C, sizeof(double));
    tk_threadpool *pool = tk_threadpool_new(2);
    tk_gram_accumulate(H, X, N, C, pool);
    /* H against a direct computation */
    double d01 = 0;
    for (int t = 0; t < N; t++) d01 += (double)X[(size_t)t * C] * X[(size_t)t * C + 1];
    CHECK(fabs(H[1] - d01) < 1e-3 * fabs(d01) + 1e-3 && H[1] == H[C], "Gram entry %g vs %g", H[1], d01);
    static const struct {
        tk_dtype type;
        int group;
    } cases[] = {{TK_Q4_0, 32}, {TK_Q4_0, 128}, {TK_Q4_1, 32}, {TK_Q4_K, 32}, {TK_Q4_K, 64}};
    tk_err err;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        for (int act = 0; act < 2; act++) {
            tk_qmatrix r, g;
            tk_qmatrix_alloc(&r, cases[k].type, R, C, &err);
            tk_qmatrix_alloc(&g, cases[k].type, R, C, &err);
            tk_gptq_opts o = {cases[k].group, act != 0, 0.01, 128};
            CHECK(tk_rtn_matrix(W, cases[k].group, &r, pool, &err) == 0, "%s", err.msg);
            CHECK(tk_gptq_matrix(W, H, &o, &g, pool, &err) == 0, "%s", err.msg);
            const double er = tk_output_error(W, r.deq, R, C, H, pool), eg = tk_output_error(W, g.deq, R, C, H, pool);
            /* ||W X - Q X||^2 directly for the GPTQ result, to check the H form */
            double direct = 0;
            for (int t = 0; t < N; t += 1)
                for (int o2 = 0; o2 < R; o2++) {
                    double s = 0;
                    for (int c = 0; c < C; c++) s += ((double)W[o2 * C + c] - g.deq[o2 * C + c]) * X[(size_t)t * C + c];
                    direct += s * s;
                }
            CHECK(fabs(direct - eg) < 1e-6 * direct + 1e-9, "output error via H %g vs direct %g", eg, direct);
            CHECK(eg < 0.7 * er, "%s g%d%s: GPTQ output error %g not well below RTN's %g",
                  tk_dtype_get(cases[k].type)->name, cases[k].group, act ? " act-order" : "", eg, er);
            unsigned char *buf = malloc((size_t)R * tk_dtype_row_bytes(cases[k].type, C));
            CHECK(tk_qmatrix_pack(&g, buf, &err) == 0, "%s", err.msg);
            float row[256];
            int bad = 0;
            for (int o2 = 0; o2 < R; o2++) {
                tk_dequant_row(cases[k].type, buf + (size_t)o2 * tk_dtype_row_bytes(cases[k].type, C), row, C);
                for (int c = 0; c < C; c++) bad += row[c] != g.deq[o2 * C + c];
            }
            CHECK(bad == 0, "GPTQ container holds other values than computed (%d)", bad);
            free(buf);
            tk_qmatrix_free(&r);
            tk_qmatrix_free(&g);
        }
    }
    tk_gptq_opts bad_group = {48, false, 0.01, 128};
    tk_qmatrix g;
    tk_qmatrix_alloc(&g, TK_Q4_0, R, C, &err);
    CHECK(tk_gptq_matrix(W, H, &bad_group, &g, pool, &err) == -1, "group 48 rejected");
    tk_qmatrix_free(&g);
    tk_threadpool_free(pool);
    free(H), free(W), free(X);
}

static void test_awq_synthetic(void) {
    const int R = 64, C = 256, N = 1024;
    float *W, *X;
    synth_layer(R, C, N, 12.0f, &W, &X);
    double *H = calloc((size_t)C * C, sizeof(double)), *ma = calloc(C, sizeof(double));
    tk_threadpool *pool = tk_threadpool_new(2);
    tk_gram_accumulate(H, X, N, C, pool);
    for (int t = 0; t < N; t++)
        for (int c = 0; c < C; c++) ma[c] += fabs(X[(size_t)t * C + c]) / N;
    float s[256];
    double losses[20];
    tk_awq_result res;
    tk_err err;
    float *Ws[1] = {W};
    int64_t rows[1] = {R};
    tk_dtype types[1] = {TK_Q4_0};
    CHECK(tk_awq_search(Ws, rows, types, 1, C, H, ma, NULL, 0, 20, s, losses, &res, pool, &err) == 0, "%s", err.msg);
    CHECK(res.alpha > 0 && res.loss < 0.9 * losses[0] && res.loss_alpha0 == losses[0],
          "AWQ: best alpha %.2f loss %g vs alpha 0: %g", res.alpha, res.loss, losses[0]);
    /* the scale favours the outlier channels */
    CHECK(s[5] > s[6] * 1.5f, "outlier channel scaled up: %g vs %g", s[5], s[6]);
    /* clipping: per-group ratios never raise the output error (ratio 1 is a
     * candidate) and lower it on these heavy-tailed rows */
    {
        float *Wc = malloc(sizeof(float) * R * C), *ratios = malloc(sizeof(float) * R * (C / 128));
        for (int i = 0; i < R * C; i++) Wc[i] = W[i] * (i % 97 == 0 ? 6.0f : 1.0f);
        tk_qmatrix a, b;
        tk_qmatrix_alloc(&a, TK_Q4_0, R, C, &err);
        tk_qmatrix_alloc(&b, TK_Q4_0, R, C, &err);
        CHECK(tk_awq_clip(Wc, R, C, TK_Q4_0, 128, H, ratios, pool, &err) == 0, "%s", err.msg);
        tk_rtn_matrix(Wc, 128, &a, pool, &err);
        tk_rtn_matrix_clip(Wc, 128, ratios, &b, pool, &err);
        const double ea = tk_output_error(Wc, a.deq, R, C, H, pool), eb = tk_output_error(Wc, b.deq, R, C, H, pool);
        int clipped = 0;
        for (int i = 0; i < R * (C / 128); i++) clipped += ratios[i] < 1.0f;
        CHECK(eb < ea && clipped > 0, "clipping: error %g vs %g unclipped (%d groups clipped)", eb, ea, clipped);
        tk_qmatrix_free(&a);
        tk_qmatrix_free(&b);
        free(Wc);
        free(ratios);
    }
    /* tied channels share a scale */
    int tie[256];
    for (int c = 0; c < C; c++) tie[c] = c % 64;
    CHECK(tk_awq_search(Ws, rows, types, 1, C, H, ma, tie, 32, 5, s, NULL, &res, pool, &err) == 0, "%s", err.msg);
    CHECK(s[3] == s[67] && s[3] == s[131], "tied scales");
    tk_threadpool_free(pool);
    free(H), free(ma), free(W), free(X);
}

/* ---- 5. whole models ---- */

/* Logits of the last N_EVAL of n positions (one sequence, one batch): the
 * vocabulary projection dominates the cost, so only those are asked for. */
#define N_EVAL 96
static int eval_tokens(const char *model, int32_t *ids, int n, float **logits, int *nv) {
    tk_engine_config cfg = {.model_path = model, .n_threads = 2, .ctx_len = 256, .max_batch_tokens = 256};
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(&cfg, &e, &err)) {
        CHECK(0, "%s: %s", model, err.msg);
        return -1;
    }
    *nv = tk_engine_n_vocab(e);
    *logits = malloc(sizeof(float) * (size_t)N_EVAL * *nv);
    int32_t pos[256], seq[256];
    uint8_t flags[256];
    const int s = tk_engine_seq_new(e, &err);
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        seq[i] = s;
        flags[i] = i >= n - N_EVAL;
    }
    tk_batch b = {n, ids, pos, seq, flags};
    int rc = s < 0 ? -1 : tk_engine_decode(e, &b, *logits, &err);
    CHECK(rc == 0, "%s: %s", model, err.msg);
    tk_engine_close(e);
    return rc;
}

static int argmax(const float *r, int n) {
    int a = 0;
    for (int i = 1; i < n; i++)
        if (r[i] > r[a]) a = i;
    return a;
}

/* quantizes `model` and compares top-1 with the float model's */
static void check_model(const char *model, const char *name, const char *type, tk_qmethod method, int group,
                        const float *ref, int32_t *ids, int n, double min_agree, const char *calib) {
    tk_quant_params p;
    memset(&p, 0, sizeof p);
    tk_err err;
    p.type = type;
    p.method = method;
    p.group = group;
    p.n_threads = 2;
    p.calib_path = calib;
    p.ctx = 64;
    p.max_windows = 4;
    p.awq_grid = 6;
    tk_quant_report rep;
    const char *out = tmp_path(name);
    if (tk_quantize_model(model, out, &p, &rep, &err)) {
        CHECK(0, "%s: %s", name, err.msg);
        return;
    }
    if (method != TK_QMETHOD_RTN)
        CHECK(rep.method_error < rep.rtn_error && rep.n_calib_tokens == 4 * 64,
              "%s: calibrated error %g not below RTN %g (%d tokens)", name, rep.method_error, rep.rtn_error,
              rep.n_calib_tokens);
    float *lg;
    int nv;
    if (eval_tokens(out, ids, n, &lg, &nv)) return;
    int agree = 0, finite = 1;
    n = N_EVAL;
    for (int i = 0; i < n; i++) {
        agree += argmax(lg + (size_t)i * nv, nv) == argmax(ref + (size_t)i * nv, nv);
        for (int v = 0; v < nv; v++) finite &= isfinite(lg[(size_t)i * nv + v]) != 0;
    }
    CHECK(finite, "%s: non-finite logits", name);
    CHECK(agree >= min_agree * n, "%s: top-1 agreement with float %d/%d", name, agree, n);
    printf("  %-22s %8zu bytes %6.3f bpw  top-1 agreement %5.1f %%", name, rep.bytes,
           8.0 * (double)rep.bytes / (double)rep.n_params, 100.0 * agree / n);
    if (method != TK_QMETHOD_RTN) printf("  output error %.4g (RTN %.4g)", rep.method_error, rep.rtn_error);
    printf("\n");
    free(lg);
}

static void test_models(void) {
    const char *target = tk_shared("models/code-target"), *draft = tk_shared("models/code-draft");
    const char *calib = tk_shared("models/code-calib.txt");
    /* tokens: the start of the held-out text */
    tk_tokenizer *tok;
    tk_err err;
    if (tk_tokenizer_open(target, NULL, &tok, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    FILE *f = fopen(tk_shared("models/code-eval.txt"), "rb");
    char text[4096];
    size_t len = f ? fread(text, 1, sizeof text, f) : 0;
    if (f) fclose(f);
    int32_t ids[2048];
    int n = 0;
    CHECK(tk_tokenize(tok, text, len, true, false, ids, 2048, &n, &err) == 0, "%s", err.msg);
    tk_tokenizer_free(tok);
    if (n > 144) n = 144;
    float *ref_t, *ref_d;
    int nv;
    if (eval_tokens(target, ids, n, &ref_t, &nv) || eval_tokens(draft, ids, n, &ref_d, &nv)) return;
    check_model(target, "t-q4_0.gguf", "q4_0", TK_QMETHOD_RTN, 0, ref_t, ids, n, 0.90, NULL);
    check_model(target, "t-q4_k_m.gguf", "q4_k_m", TK_QMETHOD_RTN, 0, ref_t, ids, n, 0.90, NULL);
    check_model(target, "t-nf4.gguf", "nf4", TK_QMETHOD_RTN, 0, ref_t, ids, n, 0.90, NULL);
    check_model(target, "t-nf4_dq.gguf", "nf4_dq", TK_QMETHOD_RTN, 0, ref_t, ids, n, 0.90, NULL);
    check_model(draft, "d-gptq-q4_0.gguf", "q4_0", TK_QMETHOD_GPTQ, 32, ref_d, ids, n, 0.90, calib);
    check_model(draft, "d-gptq-q4_0-g128.gguf", "q4_0", TK_QMETHOD_GPTQ, 128, ref_d, ids, n, 0.85, calib);
    check_model(draft, "d-awq-q4_0.gguf", "q4_0", TK_QMETHOD_AWQ, 0, ref_d, ids, n, 0.90, calib);
    check_model(draft, "d-awq-q4_1-g128.gguf", "q4_1", TK_QMETHOD_AWQ, 128, ref_d, ids, n, 0.85, calib);
    /* NF4 with double quantization is smaller than NF4 */
    struct stat a, b;
    CHECK(stat(tmp_path("t-nf4.gguf"), &a) == 0 && stat(tmp_path("t-nf4_dq.gguf"), &b) == 0 && b.st_size < a.st_size,
          "NF4_DQ file smaller than NF4");
    /* the mixed type keeps norms in F32 and follows llama.cpp's rule */
    tk_gguf *g;
    if (tk_gguf_open(tmp_path("t-q4_k_m.gguf"), &g, &err) == 0) {
        const tk_tensor *t;
        CHECK((t = tk_gguf_find_tensor(g, "blk.0.attn_norm.weight")) && t->type == TK_F32, "norm F32");
        CHECK((t = tk_gguf_find_tensor(g, "token_embd.weight")) && t->type == TK_Q8_0, "tied embedding Q8_0");
        CHECK((t = tk_gguf_find_tensor(g, "blk.2.ffn_down.weight")) && t->type == TK_Q6_K, "layer 2 ffn_down Q6_K");
        CHECK((t = tk_gguf_find_tensor(g, "blk.1.ffn_down.weight")) && t->type == TK_Q4_K, "layer 1 ffn_down Q4_K");
        CHECK((t = tk_gguf_find_tensor(g, "blk.5.attn_v.weight")) && t->type == TK_Q8_0, "layer 5 attn_v Q8_0");
        CHECK((t = tk_gguf_find_tensor(g, "blk.0.attn_q.weight")) && t->type == TK_Q5_0, "288-wide Q4_K -> Q5_0");
        tk_gguf_close(g);
    } else {
        CHECK(0, "%s", err.msg);
    }
    free(ref_t);
    free(ref_d);
}

/* ---- 6. bad input through the CLI ---- */

static char err_text[1 << 16];

static int tokamak(const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s >%s/out.txt 2>%s/err.txt", TK_TOKAMAK_BIN, args, tmpdir, tmpdir);
    int st = system(cmd);
    FILE *f = fopen(tmp_path("err.txt"), "rb");
    size_t n = f ? fread(err_text, 1, sizeof err_text - 1, f) : 0;
    err_text[n] = 0;
    if (f) fclose(f);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return WEXITSTATUS(st);
}

static void expect_error(const char *what, const char *args, const char *want) {
    int rc = tokamak(args);
    CHECK(rc == 1 || rc == 2, "%s: exit code %d (stderr: %.300s)", what, rc, err_text);
    CHECK(strstr(err_text, want) != NULL, "%s: stderr lacks '%s': %.300s", what, want, err_text);
    CHECK(!strstr(err_text, "Sanitizer") && !strstr(err_text, "runtime error"), "%s: sanitizer report: %.500s", what,
          err_text);
}

static int count_tmp_files(void) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    if (d) closedir(d);
    return n;
}

static void test_cli_errors(void) {
    char args[4096];
    const char *draft = tk_shared("models/code-draft");
    char out[512];
    snprintf(out, sizeof out, "%s", tmp_path("cli-out.gguf"));
    snprintf(args, sizeof args, "quantize %s %s --type q4_9", draft, out);
    expect_error("unknown type", args, "unknown quantization type 'q4_9'");
    snprintf(args, sizeof args, "quantize %s %s --type q4_0 --method foo", draft, out);
    expect_error("unknown method", args, "--method must be rtn, gptq or awq");
    snprintf(args, sizeof args, "quantize %s %s --type q4_0 --group 48", draft, out);
    expect_error("bad group", args, "--group must be 32, 64 or 128");
    snprintf(args, sizeof args, "quantize %s %s --type nf4 --method gptq --calib %s", draft, out,
             tk_shared("models/code-calib.txt"));
    expect_error("gptq into nf4", args, "GPTQ needs");
    snprintf(args, sizeof args, "quantize %s %s --type q4_0 --method gptq", draft, out);
    expect_error("gptq without calibration", args, "calibration text");
    /* empty and too-short calibration text */
    FILE *f = fopen(tmp_path("empty.txt"), "wb");
    if (f) fclose(f);
    snprintf(args, sizeof args, "quantize %s %s --type q4_0 --method gptq --calib %s", draft, out, tmp_path("empty.txt"));
    expect_error("empty calibration", args, "fewer than one window");
    f = fopen(tmp_path("short.txt"), "wb");
    if (f) {
        fputs("def f(x):\n    return x\n", f);
        fclose(f);
    }
    snprintf(args, sizeof args, "quantize %s %s --type q4_0 --method awq --calib %s", draft, out, tmp_path("short.txt"));
    expect_error("short calibration", args, "fewer than one window of 256");
    snprintf(args, sizeof args, "quantize %s %s --type q4_0 --method awq --calib %s", draft, out,
             tmp_path("missing.txt"));
    expect_error("missing calibration", args, "missing.txt");
    /* unsupported sources: already quantized, not a model */
    snprintf(args, sizeof args, "quantize %s %s --type q4_0", tk_shared("gguf-fixtures/qfix-Q4_0.gguf"), out);
    expect_error("quantized input", args, "already quantized");
    snprintf(args, sizeof args, "quantize %s %s --type q4_0", tk_shared("models/code-calib.txt"), out);
    expect_error("text as model", args, "not a valid llama2.c checkpoint");
    snprintf(args, sizeof args, "quantize %s %s --type q4_0", tk_shared("models/stories260K.bin"), out);
    expect_error("llama2.c without tokenizer", args, "tokenizer");
    /* unwritable output */
    snprintf(args, sizeof args, "quantize %s /nonexistent-dir/x.gguf --type q4_0", draft);
    expect_error("unwritable output", args, "cannot create the output");
    /* an existing output is replaced only by a complete file */
    static const char old[] = "previous contents";
    f = fopen(out, "wb");
    if (f) {
        fwrite(old, 1, sizeof old, f);
        fclose(f);
    }
    snprintf(args, sizeof args, "quantize %s %s --type q4_0 --method gptq --calib %s", draft, out, tmp_path("short.txt"));
    expect_error("failed run keeps the old output", args, "fewer than one window");
    char buf[64] = {0};
    f = fopen(out, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    CHECK(n == sizeof old && !memcmp(buf, old, sizeof old), "existing output modified by a failed run");
    CHECK(count_tmp_files() == 0, "temporary files left behind");
    snprintf(args, sizeof args, "quantize %s %s --type q4_0 -q", draft, out);
    CHECK(tokamak(args) == 0, "quantize code-draft: %s", err_text);
    tk_gguf *g;
    tk_err err;
    CHECK(tk_gguf_open(out, &g, &err) == 0, "replaced output loads: %s", err.msg);
    if (g) tk_gguf_close(g);
    CHECK(count_tmp_files() == 0, "temporary files left behind");
    /* perplexity */
    snprintf(args, sizeof args, "perplexity -m %s -f %s --ctx 64 --chunks 2 -t 2", out, tmp_path("short.txt"));
    expect_error("perplexity on a short text", args, "fewer than one window");
    snprintf(args, sizeof args, "perplexity -m %s -f %s --ctx 64 --chunks 2 --save-logits %s", draft,
             tk_shared("models/code-eval.txt"), tmp_path("base.logits"));
    CHECK(tokamak(args) == 0, "perplexity --save-logits: %s", err_text);
    snprintf(args, sizeof args, "perplexity -m %s -f %s --ctx 64 --chunks 2 --kl-base %s", out,
             tk_shared("models/code-eval.txt"), tmp_path("base.logits"));
    CHECK(tokamak(args) == 0, "perplexity --kl-base: %s", err_text);
    snprintf(args, sizeof args, "perplexity -m %s -f %s --ctx 32 --chunks 2 --kl-base %s", out,
             tk_shared("models/code-eval.txt"), tmp_path("base.logits"));
    expect_error("kl-base on other windows", args, "other tokens");
    snprintf(args, sizeof args, "perplexity -m %s -f %s --kl-base %s", out, tk_shared("models/code-eval.txt"),
             tk_shared("models/code-calib.txt"));
    expect_error("kl-base not a logits file", args, "not a tokamak logits file");
}

/* KL and perplexity values through the CLI agree with a direct
 * computation: the float model against itself has KL 0 and 100 % top-1. */
static void test_perplexity_self(void) {
    char args[4096];
    const char *draft = tk_shared("models/code-draft");
    snprintf(args, sizeof args, "perplexity -m %s -f %s --ctx 64 --chunks 2 --kl-base %s", draft,
             tk_shared("models/code-eval.txt"), tmp_path("base.logits"));
    CHECK(tokamak(args) == 0, "perplexity self: %s", err_text);
    FILE *f = fopen(tmp_path("out.txt"), "rb");
    char out[8192] = {0};
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    if (f) fclose(f);
    CHECK(strstr(out, "KL(base || this): mean 0.000000") != NULL, "self KL is 0: %s", out);
    CHECK(strstr(out, "same top-1 as base (top-1 agreement): 100.000 %") != NULL, "self agreement 100 %%: %s", out);
    /* exact KL with the base model alongside, against the top-K file's lower bound */
    char q4[512];
    snprintf(q4, sizeof q4, "%s", tmp_path("cli-out.gguf"));
    double kl_exact = -1, kl_top = -1;
    snprintf(args, sizeof args, "perplexity -m %s -f %s --ctx 64 --chunks 2 --kl-base-model %s", q4,
             tk_shared("models/code-eval.txt"), draft);
    CHECK(tokamak(args) == 0, "perplexity --kl-base-model: %s", err_text);
    f = fopen(tmp_path("out.txt"), "rb");
    n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    if (f) fclose(f);
    const char *p = strstr(out, "KL(base || this): mean ");
    if (p) kl_exact = atof(p + strlen("KL(base || this): mean "));
    CHECK(strstr(out, "exact, full vocabulary") != NULL, "exact KL: %s", out);
    snprintf(args, sizeof args, "perplexity -m %s -f %s --ctx 64 --chunks 2 --kl-base %s", q4,
             tk_shared("models/code-eval.txt"), tmp_path("base.logits"));
    CHECK(tokamak(args) == 0, "perplexity --kl-base: %s", err_text);
    f = fopen(tmp_path("out.txt"), "rb");
    n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    if (f) fclose(f);
    p = strstr(out, "KL(base || this): mean ");
    if (p) kl_top = atof(p + strlen("KL(base || this): mean "));
    CHECK(kl_exact > 0 && kl_top > 0 && kl_top <= kl_exact * 1.0001 && kl_top > 0.3 * kl_exact,
          "top-K KL %g is a lower bound of the exact %g", kl_top, kl_exact);
    snprintf(args, sizeof args, "perplexity -m %s -f %s --kl-base %s --kl-base-model %s", q4,
             tk_shared("models/code-eval.txt"), tmp_path("base.logits"), draft);
    expect_error("two bases", args, "exclude each other");
}

#include <sys/resource.h>
#include <time.h>

/* CPU seconds of this process and its finished children */
static double cpu_s(void) {
    struct rusage a, b;
    getrusage(RUSAGE_SELF, &a);
    getrusage(RUSAGE_CHILDREN, &b);
    return (double)(a.ru_utime.tv_sec + b.ru_utime.tv_sec) + 1e-6 * (double)(a.ru_utime.tv_usec + b.ru_utime.tv_usec);
}

#define RUN(fn)                                                     \
    do {                                                            \
        const double t0_ = cpu_s();                                 \
        fn();                                                       \
        printf("%-22s %6.2f s CPU\n", #fn, cpu_s() - t0_);          \
    } while (0)

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tk_test_quant_%d", (int)getpid());
    mkdir(tmpdir, 0755);
    RUN(test_rtn_fixtures);
    RUN(test_rtn_api);
    RUN(test_nf4_codebook);
    RUN(test_nf4_rows);
    RUN(test_nf4_kernel);
    RUN(test_grids);
    RUN(test_gptq_synthetic);
    RUN(test_awq_synthetic);
    RUN(test_models);
    RUN(test_cli_errors);
    RUN(test_perplexity_self);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TK_TEST_END();
}
