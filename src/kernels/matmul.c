#include "matmul.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/dtype.h"
#include "ops.h"
#include "qgemm.h"

int tk_matmul_ws_init(tk_matmul_ws *mw, tk_isa isa, bool reference, int max_tokens, int64_t max_in, int n_threads,
                      tk_err *err) {
    memset(mw, 0, sizeof *mw);
    mw->isa = isa;
    mw->reference = reference;
    mw->glu = reference ? tk_glu_scalar : tk_glu_kernel(isa);
    for (int t = 0; t < TK_DTYPE_LIMIT; t++)
        mw->kernel[t] = reference || !tk_dtype_get(t) ? NULL : tk_qkernel_get((tk_dtype)t, isa);
    mw->max_tokens = max_tokens;
    mw->max_in = max_in;
    mw->n_threads = n_threads;
    /* The largest packed row is float32 (4 bytes per element); int8 formats
     * take about 1.1 bytes. */
    mw->act_cap = (size_t)max_tokens * ((size_t)max_in * 4 + 64);
    mw->act[0] = malloc(mw->act_cap);
    mw->act[1] = malloc(mw->act_cap);
    mw->scratch_stride = (size_t)max_in;
    mw->scratch = malloc(sizeof(float) * mw->scratch_stride * (size_t)n_threads);
    if (!mw->act[0] || !mw->act[1] || !mw->scratch) {
        tk_matmul_ws_free(mw);
        return tk_err_set(err, "out of memory for matmul buffers");
    }
    return 0;
}

void tk_matmul_ws_free(tk_matmul_ws *mw) {
    free(mw->act[0]);
    free(mw->act[1]);
    free(mw->scratch);
    memset(mw, 0, sizeof *mw);
}

typedef struct mm_job {
    tk_matmul_ws *mw;
    int n_w;
    const tk_tensor *const *W;
    const tk_qkernel *k[TK_MATMUL_MAX_W];
    const void *act[TK_MATMUL_MAX_W];
    size_t act_row[TK_MATMUL_MAX_W];
    float *const *Y;
    const int64_t *ldy;
    const float *X;
    int64_t ldx;
    int n_tok;
    int64_t rows_per_task[TK_MATMUL_MAX_W];
    int first_task[TK_MATMUL_MAX_W + 1];
    tk_mm_epilogue epi;
    float *residual;
    const tk_mm_rope *rope;
    /* packing */
    const tk_qkernel *pack_k;
    unsigned char *pack_out;
    size_t pack_row;
    int pack_rows; /* rows per packing task */
} mm_job;

/* Rows [task * pack_rows, ...) of X, at most n_tok. */
static void pack_task(void *ctx, int task, int thread) {
    (void)thread;
    mm_job *j = ctx;
    int t1 = (task + 1) * j->pack_rows < j->n_tok ? (task + 1) * j->pack_rows : j->n_tok;
    for (int t = task * j->pack_rows; t < t1; t++)
        j->pack_k->quantize_act(j->X + (size_t)t * j->ldx, j->pack_out + (size_t)t * j->pack_row, j->W[0]->ne[0]);
}

/* Packs the n_tok rows of j->X for kernel k into out, in tasks of `rows`. */
static void pack_rows(tk_threadpool *pool, mm_job *j, const tk_qkernel *k, unsigned char *out, int rows) {
    j->pack_k = k;
    j->pack_out = out;
    j->pack_row = k->act_row_bytes(j->W[0]->ne[0]);
    j->pack_rows = rows;
    tk_threadpool_run(pool, (j->n_tok + rows - 1) / rows, pack_task, j);
}

/* Rows [r0, r1) of matrix i for every token. */
static void gemm_rows(mm_job *j, int i, int64_t r0, int64_t r1, int thread) {
    const tk_tensor *W = j->W[i];
    int64_t in = W->ne[0];
    size_t row_bytes = tk_dtype_row_bytes(W->type, in);
    if (j->k[i]) {
        if (W->panels && j->k[i]->gemm_panels)
            j->k[i]->gemm_panels(W->panels, row_bytes, in, r0, r1, j->act[i], j->act_row[i], j->n_tok, j->Y[i],
                                 j->ldy[i]);
        else j->k[i]->gemm(W->data, row_bytes, in, r0, r1, j->act[i], j->act_row[i], j->n_tok, j->Y[i], j->ldy[i]);
        return;
    }
    /* portable path: dequantize each row, float dot with every token */
    float *row = j->mw->scratch + (size_t)thread * j->mw->scratch_stride;
    for (int64_t r = r0; r < r1; r++) {
        const float *w;
        if (W->type == TK_F32) {
            w = (const float *)W->data + r * in;
        } else {
            tk_dequant_row(W->type, (const unsigned char *)W->data + (size_t)r * row_bytes, row, in);
            w = row;
        }
        for (int t = 0; t < j->n_tok; t++) j->Y[i][t * j->ldy[i] + r] = tk_dot_f32(w, j->X + t * j->ldx, in);
    }
}

/* Rows [r0, r1) of every token: Y0 = act(Y0) * Y1 (the GLU epilogues). */
static void glu_rows(const mm_job *j, int64_t r0, int64_t r1) {
    for (int t = 0; t < j->n_tok; t++) {
        float *g = j->Y[0] + t * j->ldy[0];
        const float *u = j->Y[1] + t * j->ldy[1];
        j->mw->glu(g + r0, u + r0, r1 - r0, j->epi == TK_MM_GLU_GELU);
    }
}

static void gemm_task(void *ctx, int task, int thread) {
    mm_job *j = ctx;
    bool glu = j->epi == TK_MM_GLU_SILU || j->epi == TK_MM_GLU_GELU;
    int i = 0;
    while (!glu && task >= j->first_task[i + 1]) i++;
    int64_t out = j->W[i]->ne[1];
    int64_t r0 = (int64_t)(task - j->first_task[i]) * j->rows_per_task[i], r1 = r0 + j->rows_per_task[i];
    if (r1 > out) r1 = out;
    gemm_rows(j, i, r0, r1, thread);
    if (glu) {
        gemm_rows(j, 1, r0, r1, thread);
        glu_rows(j, r0, r1);
    } else if (j->epi == TK_MM_ROPE && i == 0) {
        const tk_mm_rope *rp = j->rope;
        const int hd = rp->head_dim, half = hd / 2;
        for (int t = 0; t < j->n_tok; t++)
            for (int64_t r = r0; r < r1; r += hd) {
                float *q = j->Y[0] + t * j->ldy[0] + r;
                if (rp->norm_w) tk_rmsnorm(q, q, rp->norm_w, hd, rp->eps);
                tk_rope_head(q, q, hd, rp->adjacent, rp->cos + (size_t)t * half, rp->sin + (size_t)t * half);
            }
    } else if (j->epi == TK_MM_RESIDUAL) {
        for (int t = 0; t < j->n_tok; t++) {
            /* 8 at a time in GCC's generic vectors: -O2 left the plain loop
             * scalar (2 % of a 16-sequence Q4_0 decode step); the same sums */
            typedef float v8 __attribute__((vector_size(32)));
            const float *y = j->Y[0] + t * j->ldy[0];
            float *x = j->residual + t * j->ldy[0];
            int64_t r = r0;
            for (; r + 8 <= r1; r += 8) {
                v8 a, b;
                memcpy(&a, x + r, sizeof a);
                memcpy(&b, y + r, sizeof b);
                a += b;
                memcpy(x + r, &a, sizeof a);
            }
            for (; r < r1; r++) x[r] += y[r];
        }
    }
}

void tk_matmul_n(tk_threadpool *pool, tk_matmul_ws *mw, int n_w, const tk_tensor *const *W, const float *X, int64_t ldx,
                 int n_tok, float *const *Y, const int64_t *ldy) {
    tk_matmul_fused(pool, mw, n_w, W, X, ldx, n_tok, Y, ldy, TK_MM_STORE, NULL);
}

void tk_rope_head(const float *x, float *y, int head_dim, bool adjacent, const float *cos_t, const float *sin_t) {
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        int a = adjacent ? 2 * i : i;
        int b = adjacent ? 2 * i + 1 : i + half;
        float x0 = x[a], x1 = x[b]; /* both read before either is written: in place is fine */
        y[a] = x0 * cos_t[i] - x1 * sin_t[i];
        y[b] = x0 * sin_t[i] + x1 * cos_t[i];
    }
}

static void matmul_job(tk_threadpool *pool, tk_matmul_ws *mw, int n_w, const tk_tensor *const *W, const float *X,
                       int64_t ldx, int n_tok, float *const *Y, const int64_t *ldy, tk_mm_epilogue epi,
                       float *residual, const tk_mm_rope *rope);

/* Multiply-adds below which a matmul runs on the calling thread: about
 * 10 us of work, less than waking and waiting for the pool costs on a busy
 * machine. */
#define INLINE_MACS (1 << 18)

/* Rows per task for `rows` output rows: about per_thread tasks per thread
 * (enough for balance), in multiples of 16 rows so kernels can use their
 * row tiles. */
static int64_t rows_per_task(tk_threadpool *pool, int64_t rows, int per_thread) {
    int64_t target = rows / ((int64_t)tk_threadpool_size(pool) * per_thread);
    if (target < 16) target = 16;
    return (target + 15) / 16 * 16;
}

void tk_matmul_fused(tk_threadpool *pool, tk_matmul_ws *mw, int n_w, const tk_tensor *const *W, const float *X,
                     int64_t ldx, int n_tok, float *const *Y, const int64_t *ldy, tk_mm_epilogue epi,
                     float *residual) {
    matmul_job(pool, mw, n_w, W, X, ldx, n_tok, Y, ldy, epi == TK_MM_ROPE ? TK_MM_STORE : epi, residual, NULL);
}

void tk_matmul_rope(tk_threadpool *pool, tk_matmul_ws *mw, int n_w, const tk_tensor *const *W, const float *X,
                    int64_t ldx, int n_tok, float *const *Y, const int64_t *ldy, const tk_mm_rope *rope) {
    matmul_job(pool, mw, n_w, W, X, ldx, n_tok, Y, ldy, TK_MM_ROPE, NULL, rope);
}

static void matmul_job(tk_threadpool *pool, tk_matmul_ws *mw, int n_w, const tk_tensor *const *W, const float *X,
                       int64_t ldx, int n_tok, float *const *Y, const int64_t *ldy, tk_mm_epilogue epi,
                       float *residual, const tk_mm_rope *rope) {
    mm_job j = {.mw = mw, .n_w = n_w, .W = W, .Y = Y, .ldy = ldy, .X = X, .ldx = ldx, .n_tok = n_tok, .epi = epi,
                .residual = residual, .rope = rope};
    int64_t in = W[0]->ne[0];
    /* Pack the input once per distinct activation format. */
    tk_dtype packed_as[2];
    int n_packed = 0;
    for (int i = 0; i < n_w; i++) {
        const tk_qkernel *k = mw->kernel[W[i]->type];
        j.k[i] = k;
        if (!k) continue;
        if (k->act_type == TK_F32 && ldx == in) {
            j.act[i] = X; /* float input is used as it is */
            j.act_row[i] = (size_t)in * sizeof(float);
            continue;
        }
        if (mw->prepacked_x == X && mw->prepacked_n_tok == n_tok) {
            int p = 0;
            while (p < mw->n_prepacked && mw->prepacked_as[p] != k->act_type) p++;
            if (p < mw->n_prepacked) {
                j.act[i] = mw->act[p];
                j.act_row[i] = k->act_row_bytes(in);
                continue;
            }
        }
        /* buffers holding prepacked rows of this input are not reused */
        int base = mw->prepacked_x == X ? mw->n_prepacked : 0;
        int slot = 0;
        while (slot < n_packed && packed_as[slot] != k->act_type) slot++;
        if (slot == n_packed) {
            if (base + n_packed == 2 || k->act_row_bytes(in) > mw->act_cap / (size_t)n_tok) {
                j.k[i] = NULL; /* no room: portable path */
                continue;
            }
            packed_as[n_packed++] = k->act_type;
            pack_rows(pool, &j, k, mw->act[base + slot], 1);
        }
        j.act[i] = mw->act[base + slot];
        j.act_row[i] = k->act_row_bytes(in);
    }
    /* Deal out rows */
    int64_t total_rows = 0;
    for (int i = 0; i < n_w; i++) total_rows += W[i]->ne[1];
    const int64_t target = rows_per_task(pool, total_rows, 8);
    j.first_task[0] = 0;
    for (int i = 0; i < n_w; i++) {
        j.rows_per_task[i] = target;
        if (epi == TK_MM_ROPE && i == 0) /* whole heads per task: a multiple of 16 and of head_dim */
            while (j.rows_per_task[0] % rope->head_dim) j.rows_per_task[0] += 16;
        j.first_task[i + 1] = j.first_task[i] + (int)((W[i]->ne[1] + j.rows_per_task[i] - 1) / j.rows_per_task[i]);
    }
    /* GLU: tasks cover the gate's rows; each also computes the same up rows */
    int n_tasks = epi == TK_MM_GLU_SILU || epi == TK_MM_GLU_GELU ? j.first_task[1] : j.first_task[n_w];
    /* too little work to wake the workers for (a mixture-of-experts router
     * on a decode step): the same tasks on this thread */
    if ((double)total_rows * (double)in * n_tok < INLINE_MACS) {
        for (int t = 0; t < n_tasks; t++) gemm_task(&j, t, 0);
        return;
    }
    tk_threadpool_run(pool, n_tasks, gemm_task, &j);
}

/* Grouped matmuls: one packed copy of the rows per activation format (in
 * the groups' order, so a group's rows are consecutive), then tasks of
 * output row ranges. */
#define GROUPED_PACK_ROWS 8 /* X rows per packing task: a decode step's few rows pack inline */
/* Rows of the next group a task prefetches before working on a group: the
 * kernels prefetch ahead within a group's rows, not into the next group's
 * (another expert's weights, elsewhere in memory). */
#define GROUPED_PREFETCH_ROWS 4
typedef struct grouped_job {
    tk_matmul_ws *mw;
    const tk_mm_grouped *g;
    int64_t rows_per_task;
    tk_dtype packed_as[2];
    int n_packed;
    /* packing */
    const tk_qkernel *pack_k;
    unsigned char *pack_out;
    size_t pack_row;
    int64_t pack_in;
} grouped_job;

/* Packs X rows [task * GROUPED_PACK_ROWS, ...).  With src, each once, into
 * the first row reading it, copied into the others. */
static void grouped_pack_task(void *ctx, int task, int thread) {
    (void)thread;
    const grouped_job *gj = ctx;
    const tk_mm_grouped *g = gj->g;
    const int s0 = g->off[0], s1 = g->off[g->n_groups], x0 = task * GROUPED_PACK_ROWS;
    if (!g->src) {
        const int x1 = x0 + GROUPED_PACK_ROWS < s1 - s0 ? x0 + GROUPED_PACK_ROWS : s1 - s0;
        for (int x = x0; x < x1; x++)
            gj->pack_k->quantize_act(g->X + (size_t)(s0 + x) * g->ldx, gj->pack_out + (size_t)x * gj->pack_row,
                                     gj->pack_in);
        return;
    }
    int first[GROUPED_PACK_ROWS];
    for (int i = 0; i < GROUPED_PACK_ROWS; i++) first[i] = -1;
    for (int s = s0; s < s1; s++) {
        const int i = g->src[s] - x0;
        if (i < 0 || i >= GROUPED_PACK_ROWS) continue;
        unsigned char *out = gj->pack_out + (size_t)(s - s0) * gj->pack_row;
        if (first[i] < 0) {
            gj->pack_k->quantize_act(g->X + (size_t)g->src[s] * g->ldx, out, gj->pack_in);
            first[i] = s;
        } else {
            memcpy(out, gj->pack_out + (size_t)(first[i] - s0) * gj->pack_row, gj->pack_row);
        }
    }
}

/* The first group after grp with rows and more than r0 output rows. */
static int next_group(const tk_mm_grouped *g, int grp, int64_t r0) {
    for (grp++; grp < g->n_groups; grp++)
        if (g->off[grp + 1] > g->off[grp] && r0 < g->W[(size_t)grp * g->n_w]->ne[1]) break;
    return grp;
}

static void prefetch_rows(const tk_mm_grouped *g, int grp, int64_t r0) {
    for (int i = 0; i < g->n_w; i++) {
        const tk_tensor *W = g->W[(size_t)grp * g->n_w + i];
        const size_t rb = tk_dtype_row_bytes(W->type, W->ne[0]);
        const int64_t r1 = r0 + GROUPED_PREFETCH_ROWS < W->ne[1] ? r0 + GROUPED_PREFETCH_ROWS : W->ne[1];
        /* r0 (a multiple of 16) starts at the same byte in the panel layout: its panel's first bytes */
        const char *base = W->panels ? W->panels : W->data;
        const char *p = base + (size_t)r0 * rb, *end = base + (size_t)r1 * rb;
        for (; p < end; p += 64) tk_prefetch_weights(p);
    }
}

static void grouped_task(void *ctx, int task, int thread) {
    const grouped_job *gj = ctx;
    const tk_mm_grouped *g = gj->g;
    const int64_t r0 = (int64_t)task * gj->rows_per_task;
    for (int grp = next_group(g, -1, r0), nxt; grp < g->n_groups; grp = nxt) {
        nxt = next_group(g, grp, r0);
        if (nxt < g->n_groups) prefetch_rows(g, nxt, r0);
        const int a = g->off[grp], n = g->off[grp + 1] - a;
        const tk_tensor *const *W = g->W + (size_t)grp * g->n_w;
        const int64_t r1 = r0 + gj->rows_per_task < W[0]->ne[1] ? r0 + gj->rows_per_task : W[0]->ne[1];
        float *y[2] = {g->Y[0] + (size_t)a * g->ldy, g->n_w > 1 ? g->Y[1] + (size_t)a * g->ldy : NULL};
        const int64_t ldy[2] = {g->ldy, g->ldy};
        mm_job j = {.mw = gj->mw, .n_w = g->n_w, .W = W, .Y = y, .ldy = ldy, .X = g->X + (size_t)a * g->ldx,
                    .ldx = g->ldx, .n_tok = n, .epi = g->epi};
        for (int i = 0; i < g->n_w; i++) {
            const tk_qkernel *k = gj->mw->kernel[W[i]->type];
            if (k && k->act_type == TK_F32) { /* float rows are read in place, at X's stride */
                j.k[i] = k;
                j.act[i] = j.X;
                j.act_row[i] = (size_t)g->ldx * sizeof(float);
                continue;
            }
            int p = 0;
            while (k && p < gj->n_packed && gj->packed_as[p] != k->act_type) p++;
            if (!k || p == gj->n_packed) continue; /* not packed: portable path */
            j.k[i] = k;
            j.act_row[i] = k->act_row_bytes(W[i]->ne[0]);
            j.act[i] = gj->mw->act[p] + (size_t)(a - g->off[0]) * j.act_row[i];
        }
        for (int i = 0; i < g->n_w; i++) gemm_rows(&j, i, r0, r1, thread);
        if (g->epi == TK_MM_GLU_SILU || g->epi == TK_MM_GLU_GELU) {
            glu_rows(&j, r0, r1);
        } else if (g->epi == TK_MM_SCATTER) {
            for (int s = a; s < a + n; s++) {
                const float w = g->weight[s], *ys = g->Y[0] + (size_t)s * g->ldy;
                float *o = g->out + (size_t)g->dst[s] * g->ldo;
                for (int64_t r = r0; r < r1; r++) o[r] += w * ys[r];
            }
        }
    }
}

void tk_matmul_grouped(tk_threadpool *pool, tk_matmul_ws *mw, const tk_mm_grouped *groups) {
    tk_mm_grouped g = *groups;
    grouped_job gj = {.mw = mw, .g = &g};
    const int s0 = g.off[0], s1 = g.off[g.n_groups], n_rows = s1 - s0;
    if (n_rows == 0) return;
    /* the packed buffers are reused: no prepacked input survives */
    tk_matmul_ws_forget(mw);
    /* the formats to pack; float rows wanted (float kernels, the portable path) */
    int64_t max_rows = 0, in = 0;
    const tk_qkernel *pack_k[2];
    bool want_float = false;
    for (int grp = 0; grp < g.n_groups; grp++) {
        if (g.off[grp + 1] == g.off[grp]) continue;
        for (int i = 0; i < g.n_w; i++) {
            const tk_tensor *W = g.W[(size_t)grp * g.n_w + i];
            if (W->ne[1] > max_rows) max_rows = W->ne[1];
            in = W->ne[0];
            const tk_qkernel *k = mw->kernel[W->type];
            int p = 0;
            while (k && p < gj.n_packed && gj.packed_as[p] != k->act_type) p++;
            if (k && k->act_type != TK_F32 && p < gj.n_packed) continue;
            /* no room (a third format, or rows too long): portable path */
            if (!k || k->act_type == TK_F32 || p == 2 || k->act_row_bytes(W->ne[0]) > mw->act_cap / (size_t)n_rows) {
                want_float = true;
                continue;
            }
            pack_k[gj.n_packed] = k;
            gj.packed_as[gj.n_packed++] = k->act_type;
        }
    }
    if (g.src && want_float) { /* the float rows themselves, in the groups' order */
        for (int s = s0; s < s1; s++)
            memcpy(g.gather + (size_t)s * in, g.X + (size_t)g.src[s] * g.ldx, (size_t)in * sizeof(float));
        g.X = g.gather;
        g.ldx = in;
        g.src = NULL;
    }
    const int n_x = g.src ? g.n_src : n_rows;
    for (int p = 0; p < gj.n_packed; p++) {
        gj.pack_k = pack_k[p];
        gj.pack_out = mw->act[p];
        gj.pack_row = pack_k[p]->act_row_bytes(in);
        gj.pack_in = in;
        tk_threadpool_run(pool, (n_x + GROUPED_PACK_ROWS - 1) / GROUPED_PACK_ROWS, grouped_pack_task, &gj);
    }
    /* Two tasks per thread, not eight: a task reads its row range of every
     * group's (expert's) weights in turn, and each range is a stream that
     * starts cold (the kernels prefetch within it); longer ranges lifted a
     * synthetic OLMoE-1B-7B's prefill and 16-sequence decode by 3-15 %
     * (tokamak bench, both ISA levels; one task per thread was no better on
     * average and leaves nothing to balance). */
    gj.rows_per_task = rows_per_task(pool, max_rows, 2);
    tk_threadpool_run(pool, (int)((max_rows + gj.rows_per_task - 1) / gj.rows_per_task), grouped_task, &gj);
}

typedef struct norm_pack_job {
    tk_matmul_ws *mw;
    const tk_qkernel *k[2];
    int n_k;
    const float *x, *w;
    float eps;
    int64_t dim;
    float *xn;
} norm_pack_job;

static void norm_pack_task(void *ctx, int t, int thread) {
    (void)thread;
    const norm_pack_job *j = ctx;
    const float *x = j->x + (size_t)t * j->dim;
    float *xn = j->xn + (size_t)t * j->dim;
    const float scale = tk_rms_scale(x, j->dim, j->eps);
    /* chunks of 256: a whole number of every activation format's blocks */
    for (int64_t c = 0; c < j->dim; c += 256) {
        for (int64_t i = c; i < c + 256; i++) xn[i] = x[i] * scale * j->w[i];
        for (int p = 0; p < j->n_k; p++) {
            size_t chunk = j->k[p]->act_row_bytes(256);
            j->k[p]->quantize_act(xn + c, j->mw->act[p] + (size_t)t * j->k[p]->act_row_bytes(j->dim) +
                                             (size_t)(c / 256) * chunk, 256);
        }
    }
}

void tk_rmsnorm_pack(tk_threadpool *pool, tk_matmul_ws *mw, int n_w, const tk_tensor *const *W, const float *x,
                     const float *norm_w, float eps, int n_tok, int64_t dim, float *xn) {
    norm_pack_job j = {.mw = mw, .x = x, .w = norm_w, .eps = eps, .dim = dim, .xn = xn};
    mw->prepacked_x = NULL;
    mw->n_prepacked = 0;
    if (dim % 256 == 0 && !mw->reference) {
        for (int i = 0; i < n_w && j.n_k < 2; i++) {
            const tk_qkernel *k = mw->kernel[W[i]->type];
            if (!k || k->act_type == TK_F32) continue;
            int p = 0;
            while (p < j.n_k && j.k[p]->act_type != k->act_type) p++;
            if (p == j.n_k) j.k[j.n_k++] = k;
        }
    }
    if (j.n_k == 0) {
        /* nothing to pack (float kernels or an odd row length): plain norm */
        for (int t = 0; t < n_tok; t++) tk_rmsnorm(xn + (size_t)t * dim, x + (size_t)t * dim, norm_w, (int)dim, eps);
        return;
    }
    tk_threadpool_run(pool, n_tok, norm_pack_task, &j);
    mw->prepacked_x = xn;
    mw->prepacked_n_tok = n_tok;
    mw->n_prepacked = j.n_k;
    for (int p = 0; p < j.n_k; p++) mw->prepacked_as[p] = j.k[p]->act_type;
}
