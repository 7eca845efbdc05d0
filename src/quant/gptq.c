/* GPTQ (Frantar, Ashkboos, Hoefler, Alistarh 2022): quantize the columns
 * (input channels) of a weight matrix one at a time and push each
 * column's rounding error onto the columns not yet quantized, weighted by
 * the inverse Hessian of the layer's squared output error
 * ||W X - Q X||^2, whose Hessian is H = 2 X X^T.
 *
 * With U the upper Cholesky factor of H^-1 (H^-1 = U^T U), quantizing
 * column i of row w to q moves the remaining columns by
 *     w[j] -= (w[i] - q) / U[i][i] * U[i][j]   (j > i),
 * which is the optimal (OBS) compensation for the columns after i.
 * Details as in the paper:
 *  - damping: lambda = damp * mean(diag(H)) added to the diagonal (1 %);
 *    inputs never seen (H[i][i] = 0) get H[i][i] = 1 and their weights 0;
 *  - lazy batches: updates inside a block of `block` columns are applied
 *    at once, the rest of the matrix is updated once per block
 *    (W[:, i2:] -= E U[i1:i2, i2:]);
 *  - groups: the grid (scale / min) of a group of `group` columns is
 *    chosen when its first column is reached, from the weights as updated
 *    so far; K containers also choose the super-block scales when a
 *    super-block (256 columns) starts (block = 256 so it lies in one
 *    lazy batch);
 *  - act-order: columns in order of decreasing H[i][i]; the grids are then
 *    fitted up front on the original weights (AutoGPTQ's "static groups"),
 *    so each stored block keeps one grid.
 * Rows are independent given H, so row tiles run in parallel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_internal.h"
#include "quantize.h"

/* In-place lower Cholesky factor of the n x n matrix A (row-major, only
 * the lower triangle is read).  -1 if A is not positive definite. */
static int cholesky(double *A, int n) {
    for (int j = 0; j < n; j++) {
        double *Aj = A + (size_t)j * n;
        double s = Aj[j];
        for (int k = 0; k < j; k++) s -= Aj[k] * Aj[k];
        if (!(s > 0)) return -1;
        const double d = sqrt(s);
        Aj[j] = d;
        for (int i = j + 1; i < n; i++) {
            double *Ai = A + (size_t)i * n;
            double t = Ai[j];
            for (int k = 0; k < j; k++) t -= Ai[k] * Aj[k];
            Ai[j] = t / d;
        }
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) A[(size_t)i * n + j] = 0;
    return 0;
}

/* U with H^-1 = U^T U, from the damped H (n x n).  -1 if not positive
 * definite. */
static int inverse_upper_factor(const double *H, int n, double *U, double *tmp) {
    memcpy(tmp, H, sizeof(double) * (size_t)n * n);
    if (cholesky(tmp, n)) return -1; /* tmp = L, H = L L^T */
    /* Linv (lower) by forward substitution, into U as scratch */
    double *Li = U;
    memset(Li, 0, sizeof(double) * (size_t)n * n);
    for (int i = 0; i < n; i++) {
        Li[(size_t)i * n + i] = 1.0 / tmp[(size_t)i * n + i];
        for (int j = 0; j < i; j++) {
            double s = 0;
            for (int k = j; k < i; k++) s += tmp[(size_t)i * n + k] * Li[(size_t)k * n + j];
            Li[(size_t)i * n + j] = -s / tmp[(size_t)i * n + i];
        }
    }
    /* H^-1 = Linv^T Linv into tmp (lower triangle suffices) */
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = 0;
            for (int k = i; k < n; k++) s += Li[(size_t)k * n + i] * Li[(size_t)k * n + j];
            tmp[(size_t)i * n + j] = s;
        }
    if (cholesky(tmp, n)) return -1; /* H^-1 = M M^T */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) U[(size_t)i * n + j] = j >= i ? tmp[(size_t)j * n + i] : 0; /* U = M^T */
    return 0;
}

typedef struct gptq_job {
    const float *W;        /* original weights, rows x cols */
    const double *U;       /* cols x cols (permuted order if act_order) */
    const int *perm;       /* processing order -> original column, or NULL */
    const bool *dead;      /* original columns never seen */
    const tk_gptq_opts *o;
    tk_qmatrix *q;
    int tile;
    int64_t n_rows;
    double *scratch;       /* per thread: tile * (cols + block) + cols doubles */
} gptq_job;

static bool is_k(tk_dtype t) { return t == TK_Q4_K || t == TK_Q5_K; }

static void gptq_task(void *ctx, int task, int thread) {
    gptq_job *j = ctx;
    const tk_gptq_opts *o = j->o;
    tk_qmatrix *q = j->q;
    const int64_t C = q->cols, B = o->block, G = o->group;
    const int64_t r0 = (int64_t)task * j->tile;
    const int R = (int)(r0 + j->tile <= j->n_rows ? j->tile : j->n_rows - r0);
    double *w = j->scratch + (size_t)thread * ((size_t)j->tile * (C + B) + C); /* R rows x C, processing order */
    double *E = w + (size_t)j->tile * C;                                       /* R rows x B */
    float *orig = (float *)(E + (size_t)j->tile * B);                          /* C floats */

    for (int r = 0; r < R; r++) {
        const float *Wr = j->W + (r0 + r) * C;
        for (int64_t a = 0; a < C; a++) {
            const int64_t c = j->perm ? j->perm[a] : a;
            w[(size_t)r * C + a] = j->dead[c] ? 0.0 : Wr[c];
        }
        if (j->perm) {
            /* static groups: grids from the original (dead-zeroed) row */
            for (int64_t c = 0; c < C; c++) orig[c] = j->dead[c] ? 0.0f : Wr[c];
            tk_rtn_row(q->type, orig, C, (int)G, q->grids + (r0 + r) * (C / 32), q->codes + (r0 + r) * C,
                       q->deq + (r0 + r) * C);
        }
    }
    float gbuf[256];
    for (int64_t i1 = 0; i1 < C; i1 += B) {
        const int64_t i2 = i1 + B < C ? i1 + B : C;
        for (int64_t i = i1; i < i2; i++) {
            const double *Ui = j->U + i * C;
            const double d = Ui[i];
            for (int r = 0; r < R; r++) {
                double *wr = w + (size_t)r * C;
                tk_qgrid *grids = q->grids + (r0 + r) * (C / 32);
                const int64_t c = j->perm ? j->perm[i] : i;
                if (!j->perm) {
                    /* dynamic grids from the updated weights */
                    if (is_k(q->type) && i % 256 == 0) {
                        const int64_t n = C - i < 256 ? C - i : 256;
                        for (int64_t k = 0; k < n; k++) gbuf[k] = (float)wr[i + k];
                        tk_qgrid_fit_k(q->type, gbuf, grids + i / 32);
                    }
                    if (i % G == 0) {
                        const int n = (int)(C - i < G ? C - i : G);
                        for (int k = 0; k < n; k++) gbuf[k] = (float)wr[i + k];
                        tk_qgrid g;
                        if (is_k(q->type)) {
                            g = grids[i / 32];
                            tk_qgrid_refit_k(&g, gbuf, n);
                        } else {
                            tk_qgrid_fit(q->type, gbuf, n, &g);
                        }
                        for (int b = 0; b < n / 32; b++) grids[i / 32 + b] = g;
                    }
                }
                const tk_qgrid *g = &grids[c / 32];
                const int code = tk_qgrid_code(g, (float)wr[i]);
                const float val = tk_qgrid_value(g, code);
                q->codes[(r0 + r) * C + c] = (uint8_t)code;
                q->deq[(r0 + r) * C + c] = val;
                const double err = (wr[i] - (double)val) / d;
                E[(size_t)r * B + (i - i1)] = err;
                for (int64_t k = i + 1; k < i2; k++) wr[k] -= err * Ui[k];
            }
        }
        /* lazy batch update of the columns after the block */
        if (i2 < C)
            for (int r = 0; r < R; r++) {
                double *wr = w + (size_t)r * C;
                const double *Er = E + (size_t)r * B;
                for (int64_t k = 0; k < i2 - i1; k++) {
                    const double e = Er[k];
                    if (e == 0) continue;
                    const double *Uk = j->U + (i1 + k) * C;
                    for (int64_t c = i2; c < C; c++) wr[c] -= e * Uk[c];
                }
            }
    }
}

int tk_gptq_matrix(const float *W, const double *H, const tk_gptq_opts *o, tk_qmatrix *q, tk_threadpool *pool,
                   tk_err *err) {
    const int64_t C = q->cols;
    if (o->group != 32 && o->group != 64 && o->group != 128)
        return tk_err_set(err, "GPTQ group size %d: expected 32, 64 or 128", o->group);
    if (C > 65536) return tk_err_set(err, "GPTQ: %lld input channels is too many", (long long)C);
    tk_gptq_opts opt = *o;
    if (opt.block <= 0) opt.block = 128;
    if (is_k(q->type) && opt.block % 256) opt.block = 256;
    if (opt.block % opt.group) opt.block = opt.group * ((opt.block + opt.group - 1) / opt.group);
    if (!(opt.damp > 0)) opt.damp = 0.01;

    const size_t n2 = (size_t)C * (size_t)C;
    double *A = malloc(sizeof(double) * n2), *U = malloc(sizeof(double) * n2), *T = malloc(sizeof(double) * n2);
    bool *dead = calloc((size_t)C, sizeof(bool));
    int *perm = o->act_order ? malloc(sizeof(int) * (size_t)C) : NULL;
    int rc = -1;
    if (!A || !U || !T || !dead || (o->act_order && !perm)) {
        tk_err_set(err, "out of memory for GPTQ on %lld channels", (long long)C);
        goto done;
    }
    /* order */
    if (perm) {
        for (int64_t i = 0; i < C; i++) perm[i] = (int)i;
        /* insertion sort by decreasing diag (stable; C is at most a few thousand) */
        for (int64_t i = 1; i < C; i++) {
            const int p = perm[i];
            const double v = H[(size_t)p * C + p];
            int64_t k = i - 1;
            while (k >= 0 && H[(size_t)perm[k] * C + perm[k]] < v) {
                perm[k + 1] = perm[k];
                k--;
            }
            perm[k + 1] = p;
        }
    }
    double mean_diag = 0;
    for (int64_t i = 0; i < C; i++) {
        dead[i] = !(H[(size_t)i * C + i] > 0);
        mean_diag += dead[i] ? 1.0 : H[(size_t)i * C + i];
    }
    mean_diag /= (double)C;
    for (int attempt = 0;; attempt++) {
        const double lambda = opt.damp * mean_diag * pow(10.0, attempt);
        for (int64_t a = 0; a < C; a++) {
            const int64_t ca = perm ? perm[a] : a;
            for (int64_t b = 0; b < C; b++) {
                const int64_t cb = perm ? perm[b] : b;
                A[(size_t)a * C + b] = dead[ca] || dead[cb] ? 0.0 : H[(size_t)ca * C + cb];
            }
            A[(size_t)a * C + a] = (dead[ca] ? 1.0 : A[(size_t)a * C + a]) + lambda;
        }
        if (inverse_upper_factor(A, (int)C, U, T) == 0) break;
        if (attempt == 4) {
            tk_err_set(err, "GPTQ: the damped Hessian is not positive definite");
            goto done;
        }
    }
    {
        const int nt = tk_threadpool_size(pool);
        const int tile = 8;
        double *scratch = malloc(sizeof(double) * (size_t)nt * ((size_t)tile * (size_t)(C + opt.block) + (size_t)C));
        if (!scratch) {
            tk_err_set(err, "out of memory for GPTQ");
            goto done;
        }
        gptq_job j = {W, U, perm, dead, &opt, q, tile, q->rows, scratch};
        tk_threadpool_run(pool, (int)((q->rows + tile - 1) / tile), gptq_task, &j);
        free(scratch);
    }
    rc = 0;
done:
    free(A);
    free(U);
    free(T);
    free(dead);
    free(perm);
    return rc;
}
