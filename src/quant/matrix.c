/* Quantized matrices (codes + grids), round to nearest with a chosen
 * group size, calibration Gram matrices and output errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_internal.h"
#include "quantize.h"

int tk_qmatrix_alloc(tk_qmatrix *q, tk_dtype type, int64_t rows, int64_t cols, tk_err *err) {
    memset(q, 0, sizeof *q);
    if (!tk_qgrid_supported(type)) return tk_err_set(err, "type %s cannot hold chosen codes", tk_dtype_get(type)->name);
    if (rows <= 0 || cols <= 0 || cols % tk_dtype_get(type)->block_elems)
        return tk_err_set(err, "a %lld x %lld matrix does not fit %s blocks", (long long)rows, (long long)cols,
                          tk_dtype_get(type)->name);
    q->type = type;
    q->rows = rows;
    q->cols = cols;
    q->codes = malloc((size_t)(rows * cols));
    q->grids = malloc(sizeof(tk_qgrid) * (size_t)(rows * (cols / 32)));
    q->deq = malloc(sizeof(float) * (size_t)(rows * cols));
    if (!q->codes || !q->grids || !q->deq) {
        tk_qmatrix_free(q);
        return tk_err_set(err, "out of memory for a %lld x %lld matrix", (long long)rows, (long long)cols);
    }
    return 0;
}

void tk_qmatrix_free(tk_qmatrix *q) {
    free(q->codes);
    free(q->grids);
    free(q->deq);
    memset(q, 0, sizeof *q);
}

int tk_qmatrix_pack(const tk_qmatrix *q, void *dst, tk_err *err) {
    const size_t rb = tk_dtype_row_bytes(q->type, q->cols);
    for (int64_t r = 0; r < q->rows; r++)
        if (tk_qpack_row(q->type, q->codes + r * q->cols, q->grids + r * (q->cols / 32), q->cols,
                         (unsigned char *)dst + (size_t)r * rb, err))
            return -1;
    return 0;
}

/* ---- round to nearest on groups ---- */

static bool is_k(tk_dtype t) { return t == TK_Q4_K || t == TK_Q5_K; }

/* Fits the grids of one row's columns [c0, c0 + n) (one group) from x
 * (the row) and writes codes and values.  K types: the super-block grids in
 * g must already hold D/Dmin (from tk_qgrid_fit_k). */
static void rtn_group(tk_dtype type, const float *x, int64_t c0, int n, bool refit_k, float ratio, tk_qgrid *grids,
                      uint8_t *codes, float *deq) {
    tk_qgrid g;
    if (is_k(type)) {
        g = grids[c0 / 32];
        if (refit_k) tk_qgrid_refit_k(&g, x + c0, n);
    } else {
        tk_qgrid_fit_clip(type, x + c0, n, ratio, &g);
    }
    for (int b = 0; b < n / 32; b++) grids[c0 / 32 + b] = g;
    for (int i = 0; i < n; i++) {
        codes[c0 + i] = (uint8_t)tk_qgrid_code(&g, x[c0 + i]);
        deq[c0 + i] = tk_qgrid_value(&g, codes[c0 + i]);
    }
}

/* Quantizes one row by RTN on groups (used by tk_rtn_matrix and AWQ). */
void tk_rtn_row(tk_dtype type, const float *x, int64_t cols, int group, tk_qgrid *grids, uint8_t *codes,
                float *deq) {
    tk_rtn_row_clip(type, x, cols, group, NULL, grids, codes, deq);
}

void tk_rtn_row_clip(tk_dtype type, const float *x, int64_t cols, int group, const float *clip, tk_qgrid *grids,
                     uint8_t *codes, float *deq) {
    if (is_k(type))
        for (int64_t s = 0; s < cols; s += 256) tk_qgrid_fit_k(type, x + s, grids + s / 32);
    for (int64_t c = 0; c < cols; c += group) {
        const int n = cols - c < group ? (int)(cols - c) : group;
        rtn_group(type, x, c, n, group > 32, clip ? clip[c / group] : 1.0f, grids, codes, deq);
    }
}

typedef struct rtn_job {
    const float *W;
    tk_qmatrix *q;
    int group;
    int64_t per_task;
    const float *clip; /* rows x groups, or NULL */
} rtn_job;

static void rtn_task(void *ctx, int task, int thread) {
    (void)thread;
    rtn_job *j = ctx;
    const int64_t cols = j->q->cols;
    int64_t r1 = (task + 1) * j->per_task;
    if (r1 > j->q->rows) r1 = j->q->rows;
    for (int64_t r = task * j->per_task; r < r1; r++)
        tk_rtn_row_clip(j->q->type, j->W + r * cols, cols, j->group,
                        j->clip ? j->clip + r * ((cols + j->group - 1) / j->group) : NULL, j->q->grids + r * (cols / 32),
                        j->q->codes + r * cols, j->q->deq + r * cols);
}

static int check_group(tk_dtype type, int group, tk_err *err) {
    if (group != 32 && group != 64 && group != 128)
        return tk_err_set(err, "group size %d: expected 32, 64 or 128", group);
    (void)type;
    return 0;
}

int tk_rtn_matrix(const float *W, int group, tk_qmatrix *q, tk_threadpool *pool, tk_err *err) {
    return tk_rtn_matrix_clip(W, group, NULL, q, pool, err);
}

int tk_rtn_matrix_clip(const float *W, int group, const float *clip, tk_qmatrix *q, tk_threadpool *pool, tk_err *err) {
    if (check_group(q->type, group, err)) return -1;
    int n_tasks = tk_threadpool_size(pool) * 4;
    rtn_job j = {W, q, group, (q->rows + n_tasks - 1) / n_tasks, clip};
    tk_threadpool_run(pool, (int)((q->rows + j.per_task - 1) / j.per_task), rtn_task, &j);
    return 0;
}

/* ---- Gram matrix ---- */

typedef struct gram_job {
    double *H;
    const float *X;
    int n_tok, dim, n_tasks;
    float *acc; /* per thread: dim floats */
} gram_job;

static void gram_task(void *ctx, int task, int thread) {
    gram_job *j = ctx;
    const int D = j->dim;
    float *acc = j->acc + (size_t)thread * D;
    /* rows task, task + n_tasks, ...: balances the triangle */
    for (int i = task; i < D; i += j->n_tasks) {
        memset(acc + i, 0, sizeof(float) * (size_t)(D - i));
        for (int t = 0; t < j->n_tok; t++) {
            const float *x = j->X + (size_t)t * D;
            const float xi = x[i];
            if (xi == 0) continue;
            for (int c = i; c < D; c++) acc[c] += xi * x[c];
        }
        double *Hi = j->H + (size_t)i * D;
        for (int c = i; c < D; c++) {
            Hi[c] += acc[c];
            if (c != i) j->H[(size_t)c * D + i] = Hi[c];
        }
    }
}

void tk_gram_accumulate(double *H, const float *X, int n_tok, int dim, tk_threadpool *pool) {
    const int nt = tk_threadpool_size(pool);
    float *acc = malloc(sizeof(float) * (size_t)dim * (size_t)nt);
    if (!acc) return;
    gram_job j = {H, X, n_tok, dim, nt * 8, acc};
    if (j.n_tasks > dim) j.n_tasks = dim;
    tk_threadpool_run(pool, j.n_tasks, gram_task, &j);
    free(acc);
}

/* ---- output error ---- */

typedef struct err_job {
    const float *W, *Q;
    int64_t rows, cols;
    const double *H;
    double *row_err;
    double *scratch; /* per thread: cols */
} err_job;

static void err_task(void *ctx, int task, int thread) {
    err_job *j = ctx;
    const int64_t C = j->cols;
    double *d = j->scratch + (size_t)thread * C;
    for (int64_t r = task; r < j->rows; r += 64) {
        for (int64_t c = 0; c < C; c++) d[c] = (double)j->W[r * C + c] - (double)j->Q[r * C + c];
        double e = 0;
        for (int64_t a = 0; a < C; a++) {
            if (d[a] == 0) continue;
            e += d[a] * tk_dotd(j->H + a * C, d, C);
        }
        j->row_err[r] = e;
    }
}

double tk_output_error(const float *W, const float *Q, int64_t rows, int64_t cols, const double *H,
                       tk_threadpool *pool) {
    double *row_err = calloc((size_t)rows, sizeof(double));
    double *scratch = malloc(sizeof(double) * (size_t)cols * (size_t)tk_threadpool_size(pool));
    if (!row_err || !scratch) {
        free(row_err);
        free(scratch);
        return NAN;
    }
    err_job j = {W, Q, rows, cols, H, row_err, scratch};
    tk_threadpool_run(pool, rows < 64 ? (int)rows : 64, err_task, &j);
    double e = 0;
    for (int64_t r = 0; r < rows; r++) e += row_err[r];
    free(row_err);
    free(scratch);
    return e;
}
