/* AWQ (Lin et al. 2023): activation-aware per-channel weight scaling.
 *
 * Input channels with large activations matter more; scaling a weight
 * column by s > 1 before quantization (and the activation by 1/s, folded
 * into the preceding RMSNorm weight or linear layer) shrinks its relative
 * rounding error.  The scale is s = mean|x|^alpha with one alpha per group
 * of matrices sharing an input, chosen by grid search to minimise the
 * output error of the quantized group on calibration data:
 *     sum_m || W_m X - Q(W_m diag(s)) diag(s)^-1 X ||^2,
 * evaluated exactly through H = X X^T as sum_r d_r H d_r^T with
 * d = W - Q(W diag(s)) diag(s)^-1.  As in the reference implementation the
 * scales are normalised so that max(s) * min(s) = 1 and mean|x| is
 * clamped to 1e-4 from below. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_internal.h"
#include "quantize.h"

typedef struct awq_job {
    float *const *W;
    const int64_t *rows;
    const tk_dtype *types;
    int n_mats;
    int64_t cols;
    const double *H;
    const float *s;
    int group;
    int64_t total_rows;
    double *row_loss;
    float *scratch; /* per thread: 2 * cols floats + row bytes */
    size_t scratch_stride;
} awq_job;

/* Quantizes then dequantizes one row with the type's quantizer: the
 * native reference (group 0) or grids of `group` columns. */
int tk_quant_row_values(tk_dtype type, int group, const float *x, int64_t cols, float *out) {
    if (group > 0 && tk_qgrid_supported(type)) {
        tk_qgrid *grids = malloc(sizeof(tk_qgrid) * (size_t)(cols / 32 + 1));
        uint8_t *codes = malloc((size_t)cols);
        const int rc = grids && codes ? 0 : -1;
        if (!rc) tk_rtn_row(type, x, cols, group, grids, codes, out);
        free(grids);
        free(codes);
        return rc;
    }
    return tk_quantize_roundtrip(type, x, out, cols, NULL);
}

static void awq_task(void *ctx, int task, int thread) {
    awq_job *j = ctx;
    const int64_t C = j->cols;
    float *ws = j->scratch + (size_t)thread * j->scratch_stride, *qv = ws + C;
    double *d = (double *)(qv + C);
    for (int64_t g = task; g < j->total_rows; g += 64) {
        int m = 0;
        int64_t r = g;
        while (r >= j->rows[m]) r -= j->rows[m++];
        const float *w = j->W[m] + r * C;
        for (int64_t c = 0; c < C; c++) ws[c] = w[c] * j->s[c];
        if (tk_quant_row_values(j->types[m], j->group, ws, C, qv)) {
            j->row_loss[g] = INFINITY;
            continue;
        }
        for (int64_t c = 0; c < C; c++) d[c] = (double)w[c] - (double)qv[c] / (double)j->s[c];
        double e = 0;
        for (int64_t a = 0; a < C; a++) {
            if (d[a] == 0) continue;
            e += d[a] * tk_dotd(j->H + a * C, d, C);
        }
        j->row_loss[g] = e;
    }
}

int tk_awq_search(float *const *W, const int64_t *rows, const tk_dtype *types, int n_mats, int64_t cols,
                  const double *H, const double *mean_abs, const int *tie, int group, int n_grid, float *s,
                  double *losses, tk_awq_result *res, tk_threadpool *pool, tk_err *err) {
    if (n_grid < 2) n_grid = 2;
    if (cols > 65536) return tk_err_set(err, "AWQ: %lld channels is too many", (long long)cols);
    int64_t total = 0;
    for (int m = 0; m < n_mats; m++) total += rows[m];
    const int nt = tk_threadpool_size(pool);
    const size_t stride = (size_t)cols * 4; /* ws, qv (floats) + d (doubles) */
    double *row_loss = malloc(sizeof(double) * (size_t)total);
    double *xm = malloc(sizeof(double) * (size_t)cols);
    float *cand = malloc(sizeof(float) * (size_t)cols);
    float *scratch = malloc(sizeof(float) * stride * (size_t)nt);
    double *cls_sum = calloc((size_t)cols, sizeof(double));
    int *cls_n = calloc((size_t)cols, sizeof(int));
    if (!row_loss || !xm || !cand || !scratch || !cls_sum || !cls_n) {
        free(row_loss), free(xm), free(cand), free(scratch), free(cls_sum), free(cls_n);
        return tk_err_set(err, "out of memory for the AWQ search");
    }
    /* per-channel activation magnitude, averaged over tied channels */
    for (int64_t c = 0; c < cols; c++) {
        const int k = tie ? tie[c] : (int)c;
        cls_sum[k] += mean_abs[c];
        cls_n[k]++;
    }
    for (int64_t c = 0; c < cols; c++) {
        const int k = tie ? tie[c] : (int)c;
        xm[c] = fmax(cls_sum[k] / cls_n[k], 1e-4);
    }
    res->loss = INFINITY;
    res->alpha = 0;
    awq_job j = {W, rows, types, n_mats, cols, H, cand, group, total, row_loss, scratch, stride};
    for (int g = 0; g < n_grid; g++) {
        const double alpha = (double)g / (n_grid - 1);
        double smax = 0, smin = INFINITY;
        for (int64_t c = 0; c < cols; c++) {
            const double v = pow(xm[c], alpha);
            smax = fmax(smax, v);
            smin = fmin(smin, v);
        }
        const double norm = sqrt(smax * smin);
        for (int64_t c = 0; c < cols; c++) cand[c] = (float)(pow(xm[c], alpha) / norm);
        tk_threadpool_run(pool, total < 64 ? (int)total : 64, awq_task, &j);
        double loss = 0;
        for (int64_t r = 0; r < total; r++) loss += row_loss[r];
        if (losses) losses[g] = loss;
        if (g == 0) res->loss_alpha0 = loss;
        if (loss < res->loss) {
            res->loss = loss;
            res->alpha = (float)alpha;
            memcpy(s, cand, sizeof(float) * (size_t)cols);
        }
    }
    free(row_loss), free(xm), free(cand), free(scratch), free(cls_sum), free(cls_n);
    if (!isfinite(res->loss)) return tk_err_set(err, "AWQ: quantization failed during the scale search");
    return 0;
}

/* ---- clipping ---- */

typedef struct clip_job {
    const float *W;
    int64_t rows, cols;
    tk_dtype type;
    int group, n_groups;
    const double *H;
    float *ratios;
    double *scratch; /* per thread: 2 * group doubles */
} clip_job;

static void clip_task(void *ctx, int task, int thread) {
    clip_job *j = ctx;
    const int64_t C = j->cols;
    double *d = j->scratch + (size_t)thread * 2 * j->group;
    float qv[256];
    for (int64_t r = task; r < j->rows; r += 64) {
        const float *w = j->W + r * C;
        for (int g = 0; g < j->n_groups; g++) {
            const int64_t c0 = (int64_t)g * j->group;
            const int n = (int)(C - c0 < j->group ? C - c0 : j->group);
            double best = INFINITY;
            float best_r = 1.0f;
            for (int k = 0; k < 10; k++) {
                const float ratio = 1.0f - 0.05f * (float)k;
                tk_qgrid grid;
                tk_qgrid_fit_clip(j->type, w + c0, n, ratio, &grid);
                for (int i = 0; i < n; i++) {
                    qv[i] = tk_qgrid_value(&grid, tk_qgrid_code(&grid, w[c0 + i]));
                    d[i] = (double)w[c0 + i] - (double)qv[i];
                }
                double e = 0;
                for (int a = 0; a < n; a++) {
                    const double *Ha = j->H + (c0 + a) * C + c0;
                    e += d[a] * tk_dotd(Ha, d, n);
                }
                if (e < best) {
                    best = e;
                    best_r = ratio;
                }
            }
            j->ratios[r * j->n_groups + g] = best_r;
        }
    }
}

int tk_awq_clip(const float *W, int64_t rows, int64_t cols, tk_dtype type, int group, const double *H, float *ratios,
                tk_threadpool *pool, tk_err *err) {
    if (!tk_qgrid_supported(type)) return tk_err_set(err, "clipping needs a grid type");
    if (type == TK_Q4_K || type == TK_Q5_K) { /* their sub-block fits are least-squares already */
        for (int64_t i = 0; i < rows * ((cols + group - 1) / group); i++) ratios[i] = 1.0f;
        return 0;
    }
    if (group < 32 || group > 256 || group % 32) return tk_err_set(err, "clipping group %d", group);
    const int nt = tk_threadpool_size(pool);
    double *scratch = malloc(sizeof(double) * 2 * (size_t)group * (size_t)nt);
    if (!scratch) return tk_err_set(err, "out of memory");
    clip_job j = {W, rows, cols, type, group, (int)((cols + group - 1) / group), H, ratios, scratch};
    tk_threadpool_run(pool, rows < 64 ? (int)rows : 64, clip_task, &j);
    free(scratch);
    return 0;
}
