#include "ops.h"

#include <math.h>

#include "../formats/dtype.h"

float tk_dot_f32(const float *a, const float *b, int64_t n) {
    /* Eight independent partial sums let the compiler use SIMD lanes
     * without reassociation flags; the order is fixed, so results do not
     * depend on the thread count. */
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    float s = 0;
    for (; i < n; i++) s += a[i] * b[i];
    return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void tk_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

void tk_tensor_row(const tk_tensor *W, int64_t r, float *out) {
    size_t row_bytes = tk_dtype_row_bytes(W->type, W->ne[0]);
    tk_dequant_row(W->type, (const unsigned char *)W->data + (size_t)r * row_bytes, out, W->ne[0]);
}

size_t tk_matmul_scratch_floats(const tk_tensor *W) { return W->type == TK_F32 ? 0 : (size_t)W->ne[0]; }

typedef struct matmul_job {
    const tk_tensor *W;
    const float *X;
    int64_t ldx;
    int n_tok;
    float *Y;
    int64_t ldy;
    float *scratch;
    size_t scratch_stride;
    int64_t rows_per_task;
} matmul_job;

static void matmul_task(void *ctx, int task, int thread) {
    const matmul_job *j = ctx;
    const tk_tensor *W = j->W;
    int64_t in = W->ne[0], out = W->ne[1];
    int64_t r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > out) r1 = out;
    size_t row_bytes = tk_dtype_row_bytes(W->type, in);
    float *row = j->scratch + (size_t)thread * j->scratch_stride;
    for (int64_t r = r0; r < r1; r++) {
        const float *w;
        if (W->type == TK_F32) {
            w = (const float *)W->data + r * in;
        } else {
            tk_dequant_row(W->type, (const unsigned char *)W->data + (size_t)r * row_bytes, row, in);
            w = row;
        }
        for (int t = 0; t < j->n_tok; t++) j->Y[t * j->ldy + r] = tk_dot_f32(w, j->X + t * j->ldx, in);
    }
}

void tk_matmul(tk_pool *pool, const tk_tensor *W, const float *X, int64_t ldx, int n_tok, float *Y,
               int64_t ldy, float *scratch) {
    int64_t out = W->ne[1];
    int n_threads = tk_pool_size(pool);
    /* Enough tasks for load balance, few enough to keep per-task cost low. */
    int64_t n_tasks = (int64_t)n_threads * 8;
    if (n_tasks > out) n_tasks = out;
    matmul_job j = {W, X, ldx, n_tok, Y, ldy, scratch, tk_matmul_scratch_floats(W), 0};
    j.rows_per_task = (out + n_tasks - 1) / n_tasks;
    n_tasks = (out + j.rows_per_task - 1) / j.rows_per_task;
    tk_pool_run(pool, (int)n_tasks, matmul_task, &j);
}
