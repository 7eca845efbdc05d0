/* The batched, paged forward pass.  A batch is any mix of tokens from any
 * sequences (prefill chunks and decode steps alike); K/V go through each
 * sequence's block table into the shared pool. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/attention.h"
#include "../kernels/ops.h"
#include "../parallel/tp.h"
#include "model.h"
#include "moe.h"

/* Positions per attention segment (see attention() below); a multiple of
 * TK_ATTN_CHUNK. */
#define ATTN_SPLIT 512
/* Query rows (tokens x query heads of one KV head) per attention tile: 16
 * tokens of a GQA group of 8 (the K transpose, V conversion, query
 * quantization and segment merges are per tile; 4K prefill 216-228 vs
 * 206-215 t/s with 64 rows, docs/kernels.md). */
#define ATTN_TILE_ROWS 128

_Static_assert(ATTN_SPLIT % TK_ATTN_CHUNK == 0, "segments are whole chunks");

/* The attention kernel level: the matmuls' level, except that AMX is opt-in
 * (TK_ATTN_ISA=amx): its F16 kernel prefills faster (4K context: +15 %,
 * 16K: +40 %) but decodes slower (4K: -10 %, 16K: -9 %) than the AVX-512
 * one, docs/benchmarks.md.  TK_ATTN_ISA may also name a lower level.  isa:
 * the matmuls' level. */
static tk_isa attn_level(tk_isa isa) {
    if (getenv("TK_ATTN_ISA")) return tk_cpu_isa_env("TK_ATTN_ISA", isa);
    return isa == TK_ISA_AMX ? TK_ISA_AVX512 : isa;
}

int tk_forward_ws_init(tk_forward_ws *ws, const tk_model *m, int max_tokens, int ctx_len, int kv_block_size,
                       int n_threads, tk_isa isa, bool reference, tk_err *err) {
    memset(ws, 0, sizeof *ws);
    const tk_hparams *hp = &m->hp;
    if (max_tokens <= 0 || ctx_len <= 0 || kv_block_size <= 0)
        return tk_err_set(err, "invalid workspace shape (batch %d, context %d, block %d)", max_tokens, ctx_len,
                          kv_block_size);
    if (n_threads < 1) n_threads = 1;
    ws->max_tokens = max_tokens;
    ws->n_threads = n_threads;
    ws->fuse = TK_FUSE_ALL;
    size_t T = (size_t)max_tokens;
    size_t q_dim = (size_t)hp->n_heads * hp->head_dim, kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    size_t half = (size_t)hp->head_dim / 2;
    ws->x = malloc(T * hp->dim * sizeof(float));
    ws->xn = malloc(T * hp->dim * sizeof(float));
    ws->q = malloc(T * q_dim * sizeof(float));
    ws->k = malloc(T * kv_dim * sizeof(float));
    ws->v = malloc(T * kv_dim * sizeof(float));
    ws->att = malloc(T * q_dim * sizeof(float));
    ws->h1 = malloc(T * hp->ffn_dim * sizeof(float));
    ws->h2 = malloc(T * hp->ffn_dim * sizeof(float));
    ws->logits_in = malloc(T * hp->dim * sizeof(float));
    ws->rope_cos = malloc(T * half * sizeof(float));
    ws->rope_sin = malloc(T * half * sizeof(float));
    if (m->rope_inv_freq_swa) {
        ws->rope_cos_swa = malloc(T * half * sizeof(float));
        ws->rope_sin_swa = malloc(T * half * sizeof(float));
        if (!ws->rope_cos_swa || !ws->rope_sin_swa) {
            tk_forward_ws_free(ws);
            return tk_err_set(err, "out of memory for the forward workspace (%d tokens)", max_tokens);
        }
    }
    /* Matmul inputs: the longest row of any matrix. */
    size_t longest = (size_t)hp->dim;
    if ((size_t)hp->ffn_dim > longest) longest = hp->ffn_dim;
    if (q_dim > longest) longest = q_dim;
    if ((size_t)tk_moe_longest_input(m) > longest) longest = (size_t)tk_moe_longest_input(m);
    if (tk_moe_ws_init(ws, m, max_tokens)) {
        tk_forward_ws_free(ws);
        return tk_err_set(err, "out of memory for the expert workspace (%d tokens)", max_tokens);
    }
    const int moe_rows = tk_moe_max_rows(m, max_tokens), mm_rows = moe_rows > max_tokens ? moe_rows : max_tokens;
    if (tk_matmul_ws_init(&ws->mm, isa, reference, mm_rows, (int64_t)longest, n_threads, err)) {
        tk_forward_ws_free(ws);
        return -1;
    }
    /* Attention: per-thread kernel scratch and two tile states; partial
     * states for tiles split into segments (flash-decoding), enough for
     * every segment of a full-context tile of each KV head. */
    ws->att_group = hp->n_heads / hp->n_kv_heads;
    ws->att_hd = hp->head_dim;
    ws->att_isa = reference ? TK_ISA_SCALAR : tk_attn_isa(attn_level(isa), hp->head_dim);
    ws->att_tile_tokens = ATTN_TILE_ROWS / ws->att_group > 1 ? ATTN_TILE_ROWS / ws->att_group : 1;
    if (ws->att_tile_tokens > max_tokens) ws->att_tile_tokens = max_tokens;
    size_t tile_rows = (size_t)ws->att_tile_tokens * ws->att_group, state = tile_rows * (hp->head_dim + 2);
    ws->att_kernel_floats = tk_attn_tile_scratch_floats(hp->head_dim, kv_block_size, (int)tile_rows);
    ws->att_scratch_stride = (ws->att_kernel_floats + 2 * state + 15) & ~(size_t)15;
    ws->att_scratch = malloc(ws->att_scratch_stride * (size_t)n_threads * sizeof(float));
    int max_splits = (ctx_len + ATTN_SPLIT - 1) / ATTN_SPLIT + 1;
    ws->att_parts_cap = (size_t)max_splits * hp->n_kv_heads * state;
    ws->att_parts = malloc(ws->att_parts_cap * sizeof(float));
    ws->att_tasks_cap = max_tokens * hp->n_kv_heads + max_splits * hp->n_kv_heads;
    ws->att_tasks = malloc((size_t)ws->att_tasks_cap * sizeof(tk_attn_task));
    ws->att_merge = malloc(2 * (size_t)ws->att_tasks_cap * sizeof(int));
    ws->att_lo = malloc(T * sizeof(int));
    ws->att_hi = malloc(T * sizeof(int));
    if (!ws->x || !ws->xn || !ws->q || !ws->k || !ws->v || !ws->att || !ws->h1 || !ws->h2 || !ws->logits_in ||
        !ws->rope_cos || !ws->rope_sin || !ws->att_scratch || !ws->att_parts || !ws->att_tasks || !ws->att_merge ||
        !ws->att_lo || !ws->att_hi) {
        tk_forward_ws_free(ws);
        return tk_err_set(err, "out of memory for the forward workspace (%d tokens)", max_tokens);
    }
    return 0;
}

void tk_forward_ws_free(tk_forward_ws *ws) {
    free(ws->x);
    free(ws->xn);
    free(ws->q);
    free(ws->k);
    free(ws->v);
    free(ws->att);
    free(ws->h1);
    free(ws->h2);
    free(ws->logits_in);
    free(ws->tp_logits);
    free(ws->rope_cos);
    free(ws->rope_sin);
    free(ws->rope_cos_swa);
    free(ws->rope_sin_swa);
    tk_matmul_ws_free(&ws->mm);
    free(ws->att_scratch);
    free(ws->att_parts);
    free(ws->att_tasks);
    free(ws->att_merge);
    free(ws->att_lo);
    free(ws->att_hi);
    tk_moe_ws_free(ws);
    memset(ws, 0, sizeof *ws);
}

/* Attention in tiles.  Consecutive batch tokens of one sequence form a
 * tile (up to ATTN_TILE_ROWS query rows), so each K/V chunk is loaded once
 * for all of them.  Each token's visible range is cut at multiples of
 * ATTN_SPLIT (absolute positions) into segments; a token's result is the
 * in-order fold of its segments' partial states, whether one task folds
 * them all (the usual case) or, when there are too few tiles to keep every
 * thread busy (decoding one long sequence), tasks of consecutive segments
 * keep each segment's state and a merge task folds them (flash-decoding;
 * a task's segments are consecutive so that each kernel call's prefetch of
 * the next segment is used).  Neither the segments nor the fold order
 * depend on the thread count, the tile or the batch, and the kernels
 * compute each row independently of its tile, so results do not either. */

typedef struct attn_job {
    const tk_model *m;
    const tk_kv_pool *kv;
    tk_kv_seq *const *seqs;
    const tk_batch *batch;
    tk_forward_ws *ws;
    int layer;
} attn_job;

static void attn_output(const attn_job *j, const tk_attn_task *at, const float *state) {
    const tk_forward_ws *ws = j->ws;
    const int group = ws->att_group, hd = ws->att_hd, rows = at->n_tok * group;
    const float *sum = state + (size_t)rows * hd + rows;
    for (int t = 0; t < at->n_tok; t++)
        tk_attn_output(group, hd, state + (size_t)t * group * hd, sum + (size_t)t * group,
                       ws->att + ((size_t)(at->t0 + t) * j->m->hp.n_heads + (size_t)at->kv_head * group) * hd);
}

/* Segment sg of the task's tile into the partial state st (acc, then the
 * rows' max and sum), from empty. */
static void attn_segment(const attn_job *j, const tk_attn_task *at, const tk_attn_tile *tile, const tk_kv_seq *seq,
                         int sg, float *st, float *scratch) {
    const int hd = j->ws->att_hd, rows = tile->n_tok * tile->group;
    float *mx = st + (size_t)rows * hd, *sum = mx + rows;
    tk_attn_init(rows, hd, st, mx, sum);
    tk_attn_tile_range((tk_isa)j->ws->att_isa, j->kv, seq, j->layer, at->kv_head, tile, j->m->attn_scale,
                       sg * ATTN_SPLIT, (sg + 1) * ATTN_SPLIT, st, mx, sum, scratch);
}

static void attn_task(void *ctx, int task, int thread) {
    const attn_job *j = ctx;
    tk_forward_ws *ws = j->ws;
    const tk_hparams *hp = &j->m->hp;
    const tk_attn_task *at = &ws->att_tasks[task];
    const int group = ws->att_group, hd = ws->att_hd, rows = at->n_tok * group;
    const size_t state = (size_t)rows * (hd + 2);
    float *scratch = ws->att_scratch + (size_t)thread * ws->att_scratch_stride;
    tk_attn_tile tile = {ws->q + ((size_t)at->t0 * hp->n_heads + (size_t)at->kv_head * group) * hd,
                         (size_t)hp->n_heads * hd, at->n_tok, group, ws->att_lo + at->t0, ws->att_hi + at->t0};
    const tk_kv_seq *seq = j->seqs[j->batch->seq[at->t0]];
    if (at->part >= 0) {
        /* each segment's own state, for the merge task */
        for (int sg = at->seg_a; sg < at->seg_b; sg++)
            attn_segment(j, at, &tile, seq, sg, ws->att_parts + at->part + (size_t)(sg - at->seg_a) * state, scratch);
        return;
    }
    /* the first fold step: merging into an empty state is a copy */
    float *acc = scratch + ws->att_kernel_floats, *mx = acc + (size_t)rows * hd, *sum = mx + rows;
    float *acc2 = acc + state, *mx2 = acc2 + (size_t)rows * hd, *sum2 = mx2 + rows;
    attn_segment(j, at, &tile, seq, at->seg_a, acc, scratch);
    for (int sg = at->seg_a + 1; sg < at->seg_b; sg++) {
        attn_segment(j, at, &tile, seq, sg, acc2, scratch);
        tk_attn_merge(rows, hd, acc, mx, sum, acc2, mx2, sum2);
    }
    attn_output(j, at, acc);
}

/* Folds the segments of one split (tile, KV head) in order; writes the output. */
static void attn_merge_task(void *ctx, int task, int thread) {
    (void)thread;
    const attn_job *j = ctx;
    tk_forward_ws *ws = j->ws;
    const tk_attn_task *at = &ws->att_tasks[ws->att_merge[2 * task]];
    const int n_seg = ws->att_merge[2 * task + 1];
    const int hd = ws->att_hd, rows = at->n_tok * ws->att_group;
    const size_t state = (size_t)rows * (hd + 2);
    float *acc = ws->att_parts + at->part, *mx = acc + (size_t)rows * hd, *sum = mx + rows;
    for (int k = 1; k < n_seg; k++) {
        const float *b = acc + (size_t)k * state;
        tk_attn_merge(rows, hd, acc, mx, sum, b, b + (size_t)rows * hd, b + (size_t)rows * hd + rows);
    }
    attn_output(j, at, acc);
}

static void attention(const tk_model *m, const tk_kv_pool *kv, tk_kv_seq *const *seqs, const tk_batch *batch,
                      int layer, int window, tk_forward_ws *ws, tk_threadpool *pool) {
    const tk_hparams *hp = &m->hp;
    const int T = batch->n_tokens, n_kv = hp->n_kv_heads;
    for (int t = 0; t < T; t++) {
        ws->att_hi[t] = batch->pos[t] + 1;
        ws->att_lo[t] = window > 0 && ws->att_hi[t] > window ? ws->att_hi[t] - window : 0;
    }
    /* tiles: runs of consecutive tokens of one sequence */
    int n_tiles = 0;
    for (int t = 0; t < T;) {
        int e = t + 1;
        while (e < T && e - t < ws->att_tile_tokens && batch->seq[e] == batch->seq[t]) e++;
        n_tiles++;
        t = e;
    }
    /* Split tiles into tasks of consecutive segments only when there are
     * too few tiles for the threads (results are the same either way):
     * about 4 tasks per thread. */
    const int want_tasks = 4 * tk_threadpool_size(pool);
    bool split = n_tiles * n_kv < want_tasks;
    int n_tasks = 0, n_merge = 0;
    size_t parts_used = 0;
    for (int t = 0; t < T;) {
        int e = t + 1;
        while (e < T && e - t < ws->att_tile_tokens && batch->seq[e] == batch->seq[t]) e++;
        int lo = ws->att_lo[t], hi = ws->att_hi[t];
        for (int k = t + 1; k < e; k++) {
            if (ws->att_lo[k] < lo) lo = ws->att_lo[k];
            if (ws->att_hi[k] > hi) hi = ws->att_hi[k];
        }
        int seg_a = lo / ATTN_SPLIT, seg_b = (hi - 1) / ATTN_SPLIT + 1, n_seg = seg_b - seg_a;
        size_t state = (size_t)(e - t) * ws->att_group * (ws->att_hd + 2);
        int groups = (want_tasks + n_tiles * n_kv - 1) / (n_tiles * n_kv);
        if (groups > n_seg) groups = n_seg;
        const int per = groups > 0 ? (n_seg + groups - 1) / groups : n_seg;
        for (int h = 0; h < n_kv; h++) {
            bool sp = split && n_seg > 1 && parts_used + n_seg * state <= ws->att_parts_cap &&
                      n_tasks + n_seg + (T - t) * n_kv <= ws->att_tasks_cap;
            if (sp) {
                ws->att_merge[2 * n_merge] = n_tasks;
                ws->att_merge[2 * n_merge++ + 1] = n_seg;
                for (int sg = seg_a; sg < seg_b; sg += per) {
                    int sg_end = sg + per < seg_b ? sg + per : seg_b;
                    ws->att_tasks[n_tasks++] = (tk_attn_task){t, e - t, h, sg, sg_end, (long)parts_used};
                    parts_used += (size_t)(sg_end - sg) * state;
                }
            } else {
                ws->att_tasks[n_tasks++] = (tk_attn_task){t, e - t, h, seg_a, seg_b, -1};
            }
        }
        t = e;
    }
    attn_job j = {m, kv, seqs, batch, ws, layer};
    tk_threadpool_run(pool, n_tasks, attn_task, &j);
    if (n_merge) tk_threadpool_run(pool, n_merge, attn_merge_task, &j);
}

static int validate_batch(const tk_model *m, const tk_kv_pool *kv, tk_kv_seq *const *seqs, int n_seqs,
                          const tk_batch *b, const tk_forward_ws *ws, tk_err *err) {
    if (b->n_tokens <= 0) return tk_err_set(err, "empty batch");
    if (b->n_tokens > ws->max_tokens)
        return tk_err_set(err, "batch of %d tokens exceeds the capacity %d", b->n_tokens, ws->max_tokens);
    if (tk_attn_tile_scratch_floats(kv->head_dim, kv->block_size, ws->att_tile_tokens * ws->att_group) >
        ws->att_kernel_floats)
        return tk_err_set(err, "KV block size %d is larger than the workspace was sized for", kv->block_size);
    for (int i = 0; i < b->n_tokens; i++) {
        if (b->token[i] < 0 || b->token[i] >= m->hp.n_vocab)
            return tk_err_set(err, "token id %d out of range [0, %d)", b->token[i], m->hp.n_vocab);
        if (b->seq[i] < 0 || b->seq[i] >= n_seqs || !seqs[b->seq[i]])
            return tk_err_set(err, "batch entry %d names unknown sequence %d", i, b->seq[i]);
        const tk_kv_seq *s = seqs[b->seq[i]];
        if (b->pos[i] < 0 || b->pos[i] >= s->n_blocks * kv->block_size)
            return tk_err_set(err, "position %d of sequence %d has no KV block reserved", b->pos[i], b->seq[i]);
        /* Released blocks: every layer must slide, and this token's window
         * must start at or after them. */
        if (s->n_dropped > 0 && (m->kv_window <= 0 || b->pos[i] + 1 - m->kv_window < s->n_dropped * kv->block_size))
            return tk_err_set(err, "position %d of sequence %d reads KV blocks released by the sliding window",
                              b->pos[i], b->seq[i]);
        /* Every earlier position must be cached already or be in this batch. */
        if (b->pos[i] > s->len) {
            int covered = s->len;
            for (int k = 0; k < b->n_tokens; k++)
                if (b->seq[k] == b->seq[i] && b->pos[k] >= s->len && b->pos[k] < b->pos[i]) covered++;
            if (covered < b->pos[i])
                return tk_err_set(err, "position %d of sequence %d skips uncached positions", b->pos[i],
                                  b->seq[i]);
        }
    }
    return 0;
}

/* RoPE of one head: its leading rope_dim dimensions rotate, the rest pass
 * through (partial rotary); y may be x. */
static void rope_head(const tk_model *m, const float *x, float *y, bool adjacent, const float *cos_t,
                      const float *sin_t) {
    tk_rope_head(x, y, m->rope_dim, adjacent, cos_t, sin_t);
    if (y != x) memcpy(y + m->rope_dim, x + m->rope_dim, (size_t)(m->hp.head_dim - m->rope_dim) * sizeof *y);
}

/* RoPE written straight into the cache row (one pass, no in-place copy). */
static void rope_store(const tk_model *m, const tk_kv_pool *kv, const float *x, bool adjacent, const float *cos_t,
                       const float *sin_t, unsigned char *row) {
    float buf[TK_MAX_HEAD_DIM];
    float *y = kv->type == TK_KV_F32 ? (float *)(void *)row : buf;
    rope_head(m, x, y, adjacent, cos_t, sin_t);
    if (y == buf) tk_kv_store(kv, buf, row);
}

/* Token t's residual add x += y, after the post-norm of y when there is
 * one; tokens are independent, so they are tasks of the pool. */
typedef struct residual_job {
    float *x, *y;
    const float *post_norm;
    int D;
    float eps;
} residual_job;

static void residual_task(void *ctx, int t, int thread) {
    (void)thread;
    const residual_job *j = ctx;
    float *x = j->x + (size_t)t * j->D, *y = j->y + (size_t)t * j->D;
    if (j->post_norm) tk_rmsnorm(y, y, j->post_norm, j->D, j->eps);
    for (int i = 0; i < j->D; i++) x[i] += y[i];
}

/* x += W·in (after an optional post-norm of W·in, as Gemma has), with the
 * residual add fused into the matmul's store when there is no post-norm
 * (a norm needs the whole output row first).  A rank's share of a
 * tensor-parallel model has a partial W·in: the ranks' partials are summed
 * (tk_tp_allreduce) before the norm and the add. */
static int residual_matmul(const tk_model *m, tk_threadpool *pool, tk_forward_ws *ws, const tk_tensor *W,
                           const float *in, int64_t ld_in, int T, int D, const float *post_norm, float eps,
                           tk_err *err) {
    float *y[1] = {ws->xn};
    int64_t ld[1] = {D};
    if ((ws->fuse & TK_FUSE_RESIDUAL) && !post_norm && !m->tp) {
        tk_matmul_fused(pool, &ws->mm, 1, &W, in, ld_in, T, y, ld, TK_MM_RESIDUAL, ws->x);
        return 0;
    }
    tk_matmul(pool, &ws->mm, W, in, ld_in, T, ws->xn, D);
    if (m->tp && tk_tp_allreduce(m->tp, ws->xn, (size_t)T * D, err)) return -1;
    residual_job j = {ws->x, ws->xn, post_norm, D, eps};
    tk_threadpool_run(pool, T, residual_task, &j);
    return 0;
}

/* y[t][i] += b[i] for T rows of n. */
static void add_bias(float *y, const float *b, int T, int n) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++) y[(size_t)t * n + i] += b[i];
}

void tk_forward_glu(const tk_model *m, int layer, const tk_tensor *gate, const tk_tensor *up, const float *in, int n,
                    float *h1, float *h2, tk_forward_ws *ws, tk_threadpool *pool) {
    const int D = m->hp.dim;
    const int64_t F = gate->ne[1];
    const tk_tensor *gu[2] = {gate, up};
    if (ws->observe) {
        ws->observe(ws->observe_ctx, layer, gate, in, n, D);
        ws->observe(ws->observe_ctx, layer, up, in, n, D);
    }
    float *y[2] = {h1, h2};
    int64_t ld[2] = {F, F};
    bool gelu = m->arch->ffn_act == TK_ACT_GELU_TANH;
    if (ws->fuse & TK_FUSE_GLU) {
        tk_matmul_fused(pool, &ws->mm, 2, gu, in, D, n, y, ld, gelu ? TK_MM_GLU_GELU : TK_MM_GLU_SILU, NULL);
    } else {
        tk_matmul_n(pool, &ws->mm, 2, gu, in, D, n, y, ld);
        ws->mm.glu(h1, h2, (int64_t)n * F, gelu);
    }
    tk_matmul_ws_forget(&ws->mm);
}

int tk_forward(const tk_model *m, tk_kv_pool *kv, tk_kv_seq *const *seqs, int n_seqs, const tk_batch *batch,
               float *logits, tk_forward_ws *ws, tk_threadpool *pool, tk_err *err) {
    if (validate_batch(m, kv, seqs, n_seqs, batch, ws, err)) return -1;
    if (tk_threadpool_size(pool) > ws->n_threads)
        return tk_err_set(err, "thread pool larger than the workspace was sized for");
    const tk_hparams *hp = &m->hp;
    const tk_arch *a = m->arch;
    const int T = batch->n_tokens, D = hp->dim, hd = hp->head_dim, half = hd / 2;
    const int q_dim = hp->n_heads * hd, kv_dim = hp->n_kv_heads * hd, F = hp->ffn_dim;
    if (m->rope_inv_freq_swa && !ws->rope_cos_swa)
        return tk_err_set(err, "forward workspace was not sized for this model");

    for (int t = 0; t < T; t++) {
        float *x = ws->x + (size_t)t * D;
        tk_tensor_row(m->w.tok_embd, batch->token[t], x);
        if (m->embd_scale != 1.0f)
            for (int i = 0; i < D; i++) x[i] *= m->embd_scale;
        for (int i = 0; i < m->rope_dim / 2; i++) { /* rows of `half`: rotated frequencies first */
            float angle = (float)batch->pos[t] * m->rope_inv_freq[i];
            ws->rope_cos[(size_t)t * half + i] = cosf(angle) * m->rope_mscale;
            ws->rope_sin[(size_t)t * half + i] = sinf(angle) * m->rope_mscale;
            if (m->rope_inv_freq_swa) {
                angle = (float)batch->pos[t] * m->rope_inv_freq_swa[i];
                ws->rope_cos_swa[(size_t)t * half + i] = cosf(angle);
                ws->rope_sin_swa[(size_t)t * half + i] = sinf(angle);
            }
        }
    }

    for (int l = 0; l < hp->n_layers; l++) {
        const tk_layer *L = &m->layers[l];
        bool own_rope = L->swa && m->rope_inv_freq_swa;
        const float *rcos = own_rope ? ws->rope_cos_swa : ws->rope_cos;
        const float *rsin = own_rope ? ws->rope_sin_swa : ws->rope_sin;
        const tk_tensor *qkv[3] = {L->wq, L->wk, L->wv};
        if (ws->fuse & TK_FUSE_NORM_QUANT)
            tk_rmsnorm_pack(pool, &ws->mm, 3, qkv, ws->x, L->attn_norm, hp->norm_eps, T, D, ws->xn);
        else
            for (int t = 0; t < T; t++)
                tk_rmsnorm(ws->xn + (size_t)t * D, ws->x + (size_t)t * D, L->attn_norm, D, hp->norm_eps);
        if (ws->observe) {
            ws->observe(ws->observe_ctx, l, L->wq, ws->xn, T, D);
            ws->observe(ws->observe_ctx, l, L->wk, ws->xn, T, D);
            ws->observe(ws->observe_ctx, l, L->wv, ws->xn, T, D);
        }
        const bool adjacent = hp->rope_style == TK_ROPE_ADJACENT;
        /* a bias is added before RoPE, and a norm over the whole projection needs
         * the whole row: either way Q is rotated unfused; so is a partial rotary */
        const bool rope_q_fused = (ws->fuse & TK_FUSE_ROPE_Q) && !L->bq && !a->qk_norm_full && m->rope_dim == hd;
        {
            float *y[3] = {ws->q, ws->k, ws->v};
            int64_t ld[3] = {q_dim, kv_dim, kv_dim};
            if (rope_q_fused) {
                /* Q's QK-norm and RoPE in the projection's store, per head */
                tk_mm_rope rq = {hd, adjacent, rcos, rsin, a->qk_norm ? L->attn_q_norm : NULL, hp->norm_eps};
                tk_matmul_rope(pool, &ws->mm, 3, qkv, ws->xn, D, T, y, ld, &rq);
            } else {
                tk_matmul_n(pool, &ws->mm, 3, qkv, ws->xn, D, T, y, ld);
            }
            tk_matmul_ws_forget(&ws->mm);
        }
        if (L->bq) add_bias(ws->q, L->bq, T, q_dim);
        if (L->bk) add_bias(ws->k, L->bk, T, kv_dim);
        if (L->bv) add_bias(ws->v, L->bv, T, kv_dim);
        for (int t = 0; t < T; t++) {
            const float *c = rcos + (size_t)t * half, *s = rsin + (size_t)t * half;
            if (a->qk_norm_full) {
                float *q = ws->q + (size_t)t * q_dim, *k = ws->k + (size_t)t * kv_dim;
                tk_rmsnorm(q, q, L->attn_q_norm, q_dim, hp->norm_eps);
                tk_rmsnorm(k, k, L->attn_k_norm, kv_dim, hp->norm_eps);
            }
            for (int h = 0; h < hp->n_heads && !rope_q_fused; h++) {
                float *q = ws->q + (size_t)t * q_dim + (size_t)h * hd;
                if (a->qk_norm) tk_rmsnorm(q, q, L->attn_q_norm, hd, hp->norm_eps);
                rope_head(m, q, q, adjacent, c, s);
            }
            tk_kv_seq *seq = seqs[batch->seq[t]];
            for (int h = 0; h < hp->n_kv_heads; h++) {
                float *k = ws->k + (size_t)t * kv_dim + (size_t)h * hd;
                if (a->qk_norm) tk_rmsnorm(k, k, L->attn_k_norm, hd, hp->norm_eps);
                if (ws->fuse & TK_FUSE_ROPE_KV) {
                    rope_store(m, kv, k, adjacent, c, s, tk_kv_k(kv, seq, l, h, batch->pos[t]));
                } else {
                    rope_head(m, k, k, adjacent, c, s);
                    tk_kv_store(kv, k, tk_kv_k(kv, seq, l, h, batch->pos[t]));
                }
                tk_kv_store(kv, ws->v + (size_t)t * kv_dim + (size_t)h * hd, tk_kv_v(kv, seq, l, h, batch->pos[t]));
            }
        }
        /* Sliding layers see the last swa_window positions.  Older KV
         * blocks can only be released when every layer slides (kv_window):
         * Gemma's global layers keep reading them (a block holds every
         * layer).  The scheduler does the releasing (tk_kv_seq_drop_before). */
        attention(m, kv, seqs, batch, l, L->swa ? m->swa_window : 0, ws, pool);
        if (ws->observe) ws->observe(ws->observe_ctx, l, L->wo, ws->att, T, q_dim);
        if (residual_matmul(m, pool, ws, L->wo, ws->att, q_dim, T, D, a->post_norms ? L->attn_post_norm : NULL,
                            hp->norm_eps, err))
            return -1;

        if (a->moe) {
            for (int t = 0; t < T; t++)
                tk_rmsnorm(ws->xn + (size_t)t * D, ws->x + (size_t)t * D, L->ffn_norm, D, hp->norm_eps);
            tk_moe_ffn(m, l, T, ws, pool);
            /* a rank's share of the experts' columns: the ranks' partial sums added */
            if (m->tp && tk_tp_allreduce(m->tp, ws->moe_acc, (size_t)T * D, err)) return -1;
            for (size_t i = 0; i < (size_t)T * D; i++) ws->x[i] += ws->moe_acc[i];
            continue;
        }
        const tk_tensor *gu[2] = {L->w_gate, L->w_up};
        if (ws->fuse & TK_FUSE_NORM_QUANT)
            tk_rmsnorm_pack(pool, &ws->mm, 2, gu, ws->x, L->ffn_norm, hp->norm_eps, T, D, ws->xn);
        else
            for (int t = 0; t < T; t++)
                tk_rmsnorm(ws->xn + (size_t)t * D, ws->x + (size_t)t * D, L->ffn_norm, D, hp->norm_eps);
        tk_forward_glu(m, l, L->w_gate, L->w_up, ws->xn, T, ws->h1, ws->h2, ws, pool);
        if (ws->observe) ws->observe(ws->observe_ctx, l, L->w_down, ws->h1, T, F);
        if (residual_matmul(m, pool, ws, L->w_down, ws->h1, F, T, D, a->post_norms ? L->ffn_post_norm : NULL,
                            hp->norm_eps, err))
            return -1;
    }

    for (int t = 0; t < T; t++) {
        tk_kv_seq *s = seqs[batch->seq[t]];
        if (batch->pos[t] + 1 > s->len) s->len = batch->pos[t] + 1;
    }
    /* Outputs are rank 0's; a head split by vocabulary (tp_head) needs every rank. */
    const bool rank0 = tk_tp_rank(m->tp) == 0;
    if (!rank0 && (!m->tp_head || ws->hidden_out)) return 0;
    int n_out = 0;
    float *normed = ws->hidden_out ? logits : ws->logits_in; /* embeddings: the normed states are the output */
    for (int t = 0; t < T; t++)
        if (batch->logits[t])
            tk_rmsnorm(normed + (size_t)n_out++ * D, ws->x + (size_t)t * D, m->w.output_norm, D, hp->norm_eps);
    if (ws->hidden_out || !n_out) return 0;
    if (m->tp_head) {
        /* each rank its rows of the vocabulary (rank 0's straight into
         * logits), gathered into rank 0's rows */
        const int64_t part = m->tp_head->ne[1];
        float *mine = rank0 ? logits : ws->tp_logits;
        tk_matmul(pool, &ws->mm, m->tp_head, ws->logits_in, D, n_out, mine, rank0 ? hp->n_vocab : part);
        if (tk_tp_gather_cols(m->tp, mine, n_out, part, logits, err)) return -1;
        if (!rank0) return 0;
    } else {
        tk_matmul(pool, &ws->mm, m->w.output, ws->logits_in, D, n_out, logits, hp->n_vocab);
    }
    if (hp->final_softcap > 0) {
        float c = hp->final_softcap;
        for (size_t i = 0; i < (size_t)n_out * hp->n_vocab; i++) logits[i] = c * tanhf(logits[i] / c);
    }
    return 0;
}
