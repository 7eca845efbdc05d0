/* tk_matmul_grouped (the expert matmuls of a mixture-of-experts layer in
 * one dispatch) against tk_matmul_n / tk_matmul_fused run on each group's
 * rows alone: every element must be the same bits, since both call the same
 * kernel on the same (row, token) and only the task split differs.  Covered:
 * quantized, half and float weights; groups of different types in one call
 * (two packed activation formats, float read in place, and a third packed
 * format, which falls back to the dequantizing path and must equal the
 * reference workspace's result); matrices of different row counts; empty
 * groups; off[0] != 0; the GLU and scatter epilogues (the scatter's sums
 * built group by group in ascending order); 1, 2 and 3 threads; the
 * reference (dequantize everything) workspace; and each call again with
 * the rows given as indices into fewer token rows (src: packed once per
 * token, or gathered as floats where a path reads floats), which must give
 * the same bits. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "quant/quant.h"
#include "tk_test.h"

enum { IN = 256, MAX_ROWS = 96, N_GROUPS = 6, MAX_X = 24, N_TOK = 7 };

static uint64_t rng = 0x243F6A8885A308D3ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

typedef struct matrix {
    tk_tensor t;
    unsigned char *data;
} matrix;

static void make_matrix(matrix *m, tk_dtype type, int64_t rows) {
    const size_t row_bytes = tk_dtype_row_bytes(type, IN);
    m->data = malloc(row_bytes * (size_t)rows);
    float src[IN];
    for (int64_t r = 0; r < rows; r++) {
        for (int c = 0; c < IN; c++) src[c] = 0.5f * frand();
        if (tk_quantize_row(type, src, m->data + (size_t)r * row_bytes, IN, NULL)) abort();
    }
    m->t = (tk_tensor){.type = type, .ndim = 2, .ne = {IN, rows, 1, 1}, .data = m->data,
                       .nbytes = row_bytes * (size_t)rows};
}

/* One case: group g has its matrices' type and row count and size[g] rows. */
typedef struct grouped_case {
    const char *name;
    tk_dtype type[N_GROUPS];
    int64_t rows[N_GROUPS];
    int size[N_GROUPS];
} grouped_case;

/* Y of group g alone through tk_matmul_n / tk_matmul_fused (one matrix
 * pair), in ws `ref_ws` when the group's format cannot be packed; the GLU
 * step is then that of glu_ws, the workspace of the grouped call. */
static void plain(tk_threadpool *pool, tk_matmul_ws *mw, const tk_matmul_ws *glu_ws, const tk_tensor *const *W,
                  int n_w, const float *X, int n, float *y0, float *y1, int64_t ldy, tk_mm_epilogue epi) {
    float *y[2] = {y0, y1};
    const int64_t ld[2] = {ldy, ldy};
    if (epi == TK_MM_GLU_SILU && glu_ws != mw) {
        tk_matmul_n(pool, mw, 2, W, X, IN, n, y, ld);
        for (int s = 0; s < n; s++) glu_ws->glu(y0 + (size_t)s * ldy, y1 + (size_t)s * ldy, W[0]->ne[1], false);
    } else if (epi == TK_MM_GLU_SILU) {
        tk_matmul_fused(pool, mw, 2, W, X, IN, n, y, ld, epi, NULL);
    } else {
        tk_matmul_n(pool, mw, n_w, W, X, IN, n, y, ld);
    }
}

static void run_case(const grouped_case *c, tk_threadpool **pools, int n_pools, tk_matmul_ws *mw,
                     tk_matmul_ws *ref_ws, bool reference_only) {
    matrix mats[N_GROUPS][2];
    const tk_tensor *W[N_GROUPS * 2], *Wd[N_GROUPS];
    int off[N_GROUPS + 2] = {0};
    /* a leading unused row: the call starts at off[1] */
    off[1] = 1;
    for (int g = 0; g < N_GROUPS; g++) {
        for (int i = 0; i < 2; i++) {
            make_matrix(&mats[g][i], c->type[g], c->rows[g]);
            W[2 * g + i] = &mats[g][i].t;
        }
        Wd[g] = &mats[g][0].t;
        off[g + 2] = off[g + 1] + c->size[g];
    }
    const int n_x = off[N_GROUPS + 1];
    static float X[MAX_X * IN], want0[MAX_X * MAX_ROWS], want1[MAX_X * MAX_ROWS], got0[MAX_X * MAX_ROWS],
        got1[MAX_X * MAX_ROWS];
    static float out_want[MAX_X * MAX_ROWS], out_got[MAX_X * MAX_ROWS], weight[MAX_X];
    static float X_tok[N_TOK * IN], gather[MAX_X * IN];
    int dst[MAX_X], src[MAX_X];
    /* each row a copy of one of N_TOK token rows (a token in several groups) */
    for (int i = 0; i < N_TOK * IN; i++) X_tok[i] = frand();
    for (int s = 0; s < n_x; s++) {
        src[s] = (s * 5 + 3) % N_TOK;
        memcpy(X + (size_t)s * IN, X_tok + (size_t)src[s] * IN, IN * sizeof(float));
    }
    /* scatter targets: shared across groups and within them */
    for (int s = 0; s < n_x; s++) {
        weight[s] = frand();
        dst[s] = (s * 7) % 5;
    }
    const tk_mm_epilogue epis[] = {TK_MM_STORE, TK_MM_GLU_SILU, TK_MM_SCATTER};
    for (int ei = 0; ei < 3; ei++) {
        const tk_mm_epilogue epi = epis[ei];
        const int n_w = epi == TK_MM_SCATTER ? 1 : 2;
        /* expected: each group alone */
        memset(want0, 0, sizeof want0);
        memset(want1, 0, sizeof want1);
        for (int s = 0; s < 5 * MAX_ROWS; s++) out_want[s] = 0.25f * (float)(s % 13);
        for (int g = 0; g < N_GROUPS; g++) {
            const int a = off[g + 1], n = c->size[g];
            if (n == 0) continue;
            /* a group whose format is the third one is computed unpacked */
            tk_matmul_ws *ws = reference_only || (c->name[0] == '3' && g == N_GROUPS - 1) ? ref_ws : mw;
            const tk_tensor *const *Wg = epi == TK_MM_SCATTER ? &Wd[g] : &W[2 * g];
            plain(pools[0], ws, reference_only ? ref_ws : mw, Wg, n_w, X + (size_t)a * IN, n, want0 + (size_t)a * MAX_ROWS,
                  want1 + (size_t)a * MAX_ROWS, MAX_ROWS, epi);
            if (epi == TK_MM_SCATTER)
                for (int s = a; s < a + n; s++)
                    for (int64_t r = 0; r < c->rows[g]; r++)
                        out_want[dst[s] * MAX_ROWS + r] += weight[s] * want0[(size_t)s * MAX_ROWS + r];
        }
        for (int v = 0; v < 2 * n_pools; v++) {
            const int p = v / 2;
            const bool by_src = v % 2;
            memset(got0, 0, sizeof got0);
            memset(got1, 0, sizeof got1);
            for (int s = 0; s < 5 * MAX_ROWS; s++) out_got[s] = 0.25f * (float)(s % 13);
            tk_mm_grouped gr = {.n_groups = N_GROUPS, .n_w = n_w, .W = epi == TK_MM_SCATTER ? Wd : W, .off = off + 1,
                                .X = X, .ldx = IN, .Y = {got0, got1}, .ldy = MAX_ROWS, .epi = epi, .dst = dst,
                                .weight = weight, .out = out_got, .ldo = MAX_ROWS};
            if (by_src) {
                gr.X = X_tok;
                gr.src = src;
                gr.n_src = N_TOK;
                gr.gather = gather;
            }
            tk_matmul_grouped(pools[p], reference_only ? ref_ws : mw, &gr);
            const int threads = tk_threadpool_size(pools[p]);
            const char *how = by_src ? " (rows by src)" : "";
            CHECK(!memcmp(want0, got0, sizeof want0),
                  "%s%s, epilogue %d, %d threads: Y0 differs from each group alone", c->name, how, (int)epi, threads);
            if (n_w == 2)
                CHECK(!memcmp(want1, got1, sizeof want1), "%s%s, epilogue %d, %d threads: Y1 differs", c->name, how,
                      (int)epi, threads);
            if (epi == TK_MM_SCATTER)
                CHECK(!memcmp(out_want, out_got, sizeof out_want), "%s%s, %d threads: scattered sums differ", c->name,
                      how, threads);
        }
    }
    for (int g = 0; g < N_GROUPS; g++)
        for (int i = 0; i < 2; i++) free(mats[g][i].data);
}

int main(void) {
    tk_threadpool *pools[3] = {tk_threadpool_new(1), tk_threadpool_new(2), tk_threadpool_new(3)};
    tk_matmul_ws mw, ref_ws;
    tk_err err;
    if (tk_matmul_ws_init(&mw, tk_cpu_isa(), false, MAX_X, IN, 3, &err) ||
        tk_matmul_ws_init(&ref_ws, tk_cpu_isa(), true, MAX_X, IN, 3, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const grouped_case cases[] = {
        {"1 Q4_K experts", {TK_Q4_K, TK_Q4_K, TK_Q4_K, TK_Q4_K, TK_Q4_K, TK_Q4_K}, {80, 80, 80, 80, 80, 80},
         {3, 0, 1, 7, 2, 4}},
        {"1 Q8_0 experts and a longer shared one", {TK_Q8_0, TK_Q8_0, TK_Q8_0, TK_Q8_0, TK_Q8_0, TK_Q8_0},
         {32, 32, 32, 32, 32, 96}, {2, 2, 0, 5, 1, 10}},
        {"2 Q6_K, Q4_0, F16, F32 mixed", {TK_Q6_K, TK_Q4_0, TK_F16, TK_F32, TK_Q6_K, TK_Q4_0}, {48, 64, 40, 56, 48, 72},
         {4, 3, 2, 0, 6, 1}},
        {"3 a third packed format (Q4_1) unpacked", {TK_Q4_K, TK_Q8_0, TK_Q8_0, TK_Q4_K, TK_Q4_K, TK_Q4_1},
         {64, 64, 64, 64, 64, 64}, {1, 1, 1, 1, 1, 5}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], pools, 3, &mw, &ref_ws, false);
        run_case(&cases[i], pools, 3, &mw, &ref_ws, true);
    }
    tk_matmul_ws_free(&mw);
    tk_matmul_ws_free(&ref_ws);
    for (int p = 0; p < 3; p++) tk_threadpool_free(pools[p]);
    TK_TEST_END();
}
