/* The batched, paged forward pass.  A batch is any mix of tokens from any
 * sequences (prefill chunks and decode steps alike); K/V go through each
 * sequence's block table into the shared pool. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/ops.h"
#include "model.h"

int tk_forward_ws_init(tk_forward_ws *ws, const tk_model *m, int max_tokens, int n_threads, tk_err *err) {
    memset(ws, 0, sizeof *ws);
    const tk_hparams *hp = &m->hp;
    if (max_tokens <= 0) return tk_err_set(err, "invalid batch capacity %d", max_tokens);
    if (n_threads < 1) n_threads = 1;
    ws->max_tokens = max_tokens;
    ws->n_threads = n_threads;
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
    /* Dequantized-row scratch: the longest row of any matrix. */
    size_t longest = (size_t)hp->dim;
    if ((size_t)hp->ffn_dim > longest) longest = hp->ffn_dim;
    if (q_dim > longest) longest = q_dim;
    ws->scratch_stride = longest;
    ws->scratch = malloc(longest * (size_t)n_threads * sizeof(float));
    int group = hp->n_heads / hp->n_kv_heads;
    /* Per thread: group accumulators (hd each), running max/sum, scores. */
    size_t att_floats = (size_t)group * (hp->head_dim + 2) + 1024;
    ws->att_scratch = malloc(att_floats * (size_t)n_threads * sizeof(float));
    if (!ws->x || !ws->xn || !ws->q || !ws->k || !ws->v || !ws->att || !ws->h1 || !ws->h2 || !ws->logits_in ||
        !ws->rope_cos || !ws->rope_sin || !ws->scratch || !ws->att_scratch) {
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
    free(ws->rope_cos);
    free(ws->rope_sin);
    free(ws->rope_cos_swa);
    free(ws->rope_sin_swa);
    free(ws->scratch);
    free(ws->att_scratch);
    memset(ws, 0, sizeof *ws);
}

/* Rotates pairs of one head vector.  ADJACENT pairs (x[2i], x[2i+1]);
 * HALVES pairs (x[i], x[i + d/2]). */
static void rope_apply(float *x, int head_dim, tk_rope_style style, const float *cos_t, const float *sin_t) {
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        int a = style == TK_ROPE_ADJACENT ? 2 * i : i;
        int b = style == TK_ROPE_ADJACENT ? 2 * i + 1 : i + half;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * cos_t[i] - x1 * sin_t[i];
        x[b] = x0 * sin_t[i] + x1 * cos_t[i];
    }
}

typedef struct attn_job {
    const tk_model *m;
    const tk_kv_pool *kv;
    tk_kv_seq *const *seqs;
    const tk_batch *batch;
    int layer;
    int window; /* > 0: sliding-window layer */
    const float *q;
    float *out;
    float *scratch;
    size_t scratch_stride;
} attn_job;

/* One task = one token x one KV head: all query heads sharing that KV head
 * are processed together, so each K/V vector is loaded once per group.
 * Online softmax over blocks: never more than one block of scores. */
static void attn_task(void *ctx, int task, int thread) {
    const attn_job *j = ctx;
    const tk_hparams *hp = &j->m->hp;
    const tk_kv_pool *kv = j->kv;
    int hd = hp->head_dim, group = hp->n_heads / hp->n_kv_heads;
    int t = task / hp->n_kv_heads, kvh = task % hp->n_kv_heads;
    const tk_kv_seq *s = j->seqs[j->batch->seq[t]];
    int n_ctx = j->batch->pos[t] + 1;
    /* A sliding-window layer sees positions lo..pos only: blocks wholly
     * before lo are skipped, and the first block visited is masked below lo. */
    int lo = j->window > 0 && n_ctx > j->window ? n_ctx - j->window : 0;
    float scale = j->m->attn_scale;

    float *acc = j->scratch + (size_t)thread * j->scratch_stride; /* group * hd */
    float *run_max = acc + (size_t)group * hd;
    float *run_sum = run_max + group;
    float *scores = run_sum + group; /* block_size */
    memset(acc, 0, (size_t)group * hd * sizeof(float));
    for (int g = 0; g < group; g++) {
        run_max[g] = -FLT_MAX;
        run_sum[g] = 0;
    }
    int bs = kv->block_size;
    for (int start = lo / bs * bs; start < n_ctx; start += bs) {
        int n = n_ctx - start < bs ? n_ctx - start : bs;
        int i0 = lo > start ? lo - start : 0; /* masked: positions before the window */
        const float *kb = tk_kv_k(kv, s, j->layer, kvh, start);
        const float *vb = tk_kv_v(kv, s, j->layer, kvh, start);
        for (int g = 0; g < group; g++) {
            int h = kvh * group + g;
            const float *qh = j->q + ((size_t)t * hp->n_heads + h) * hd;
            float bmax = -FLT_MAX;
            for (int i = i0; i < n; i++) {
                scores[i] = tk_dot_f32(qh, kb + (size_t)i * hd, hd) * scale;
                if (scores[i] > bmax) bmax = scores[i];
            }
            float *a = acc + (size_t)g * hd;
            if (bmax > run_max[g]) {
                float r = expf(run_max[g] - bmax);
                run_sum[g] *= r;
                for (int d = 0; d < hd; d++) a[d] *= r;
                run_max[g] = bmax;
            }
            for (int i = i0; i < n; i++) {
                float p = expf(scores[i] - run_max[g]);
                run_sum[g] += p;
                const float *vv = vb + (size_t)i * hd;
                for (int d = 0; d < hd; d++) a[d] += p * vv[d];
            }
        }
    }
    for (int g = 0; g < group; g++) {
        int h = kvh * group + g;
        float *o = j->out + ((size_t)t * hp->n_heads + h) * hd;
        float inv = 1.0f / run_sum[g];
        for (int d = 0; d < hd; d++) o[d] = acc[(size_t)g * hd + d] * inv;
    }
}

static int validate_batch(const tk_model *m, const tk_kv_pool *kv, tk_kv_seq *const *seqs, int n_seqs,
                          const tk_batch *b, const tk_forward_ws *ws, tk_err *err) {
    if (b->n_tokens <= 0) return tk_err_set(err, "empty batch");
    if (b->n_tokens > ws->max_tokens)
        return tk_err_set(err, "batch of %d tokens exceeds the capacity %d", b->n_tokens, ws->max_tokens);
    if (kv->block_size > 1024) return tk_err_set(err, "KV block size %d too large", kv->block_size);
    for (int i = 0; i < b->n_tokens; i++) {
        if (b->token[i] < 0 || b->token[i] >= m->hp.n_vocab)
            return tk_err_set(err, "token id %d out of range [0, %d)", b->token[i], m->hp.n_vocab);
        if (b->seq[i] < 0 || b->seq[i] >= n_seqs || !seqs[b->seq[i]])
            return tk_err_set(err, "batch entry %d names unknown sequence %d", i, b->seq[i]);
        const tk_kv_seq *s = seqs[b->seq[i]];
        if (b->pos[i] < 0 || b->pos[i] >= s->n_blocks * kv->block_size)
            return tk_err_set(err, "position %d of sequence %d has no KV block reserved", b->pos[i], b->seq[i]);
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

int tk_forward(const tk_model *m, tk_kv_pool *kv, tk_kv_seq *const *seqs, int n_seqs, const tk_batch *batch,
               float *logits, tk_forward_ws *ws, tk_pool *pool, tk_err *err) {
    if (validate_batch(m, kv, seqs, n_seqs, batch, ws, err)) return -1;
    if (tk_pool_size(pool) > ws->n_threads)
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
        for (int i = 0; i < half; i++) {
            float angle = (float)batch->pos[t] * m->rope_inv_freq[i];
            ws->rope_cos[(size_t)t * half + i] = cosf(angle);
            ws->rope_sin[(size_t)t * half + i] = sinf(angle);
            if (m->rope_inv_freq_swa) {
                angle = (float)batch->pos[t] * m->rope_inv_freq_swa[i];
                ws->rope_cos_swa[(size_t)t * half + i] = cosf(angle);
                ws->rope_sin_swa[(size_t)t * half + i] = sinf(angle);
            }
        }
    }

    for (int l = 0; l < hp->n_layers; l++) {
        const tk_layer *L = &m->layers[l];
        const float *rcos = L->swa ? ws->rope_cos_swa : ws->rope_cos;
        const float *rsin = L->swa ? ws->rope_sin_swa : ws->rope_sin;
        for (int t = 0; t < T; t++)
            tk_rmsnorm(ws->xn + (size_t)t * D, ws->x + (size_t)t * D, L->attn_norm, D, hp->norm_eps);
        if (ws->observe) {
            ws->observe(ws->observe_ctx, l, L->wq, ws->xn, T, D);
            ws->observe(ws->observe_ctx, l, L->wk, ws->xn, T, D);
            ws->observe(ws->observe_ctx, l, L->wv, ws->xn, T, D);
        }
        tk_matmul(pool, L->wq, ws->xn, D, T, ws->q, q_dim, ws->scratch);
        tk_matmul(pool, L->wk, ws->xn, D, T, ws->k, kv_dim, ws->scratch);
        tk_matmul(pool, L->wv, ws->xn, D, T, ws->v, kv_dim, ws->scratch);
        for (int t = 0; t < T; t++) {
            const float *c = rcos + (size_t)t * half, *s = rsin + (size_t)t * half;
            for (int h = 0; h < hp->n_heads; h++) {
                float *q = ws->q + (size_t)t * q_dim + (size_t)h * hd;
                if (a->qk_norm) tk_rmsnorm(q, q, L->attn_q_norm, hd, hp->norm_eps);
                rope_apply(q, hd, hp->rope_style, c, s);
            }
            tk_kv_seq *seq = seqs[batch->seq[t]];
            for (int h = 0; h < hp->n_kv_heads; h++) {
                float *k = ws->k + (size_t)t * kv_dim + (size_t)h * hd;
                if (a->qk_norm) tk_rmsnorm(k, k, L->attn_k_norm, hd, hp->norm_eps);
                rope_apply(k, hd, hp->rope_style, c, s);
                memcpy(tk_kv_k(kv, seq, l, h, batch->pos[t]), k, (size_t)hd * sizeof(float));
                memcpy(tk_kv_v(kv, seq, l, h, batch->pos[t]), ws->v + (size_t)t * kv_dim + (size_t)h * hd,
                       (size_t)hd * sizeof(float));
            }
        }
        attn_job aj = {m, kv, seqs, batch, l, L->swa ? m->swa_window : 0, ws->q, ws->att, ws->att_scratch,
                       (size_t)(hp->n_heads / hp->n_kv_heads) * (hd + 2) + 1024};
        tk_pool_run(pool, T * hp->n_kv_heads, attn_task, &aj);
        if (ws->observe) ws->observe(ws->observe_ctx, l, L->wo, ws->att, T, q_dim);
        tk_matmul(pool, L->wo, ws->att, q_dim, T, ws->xn, D, ws->scratch);
        if (a->post_norms)
            for (int t = 0; t < T; t++)
                tk_rmsnorm(ws->xn + (size_t)t * D, ws->xn + (size_t)t * D, L->attn_post_norm, D, hp->norm_eps);
        for (size_t i = 0; i < (size_t)T * D; i++) ws->x[i] += ws->xn[i];

        for (int t = 0; t < T; t++)
            tk_rmsnorm(ws->xn + (size_t)t * D, ws->x + (size_t)t * D, L->ffn_norm, D, hp->norm_eps);
        if (ws->observe) {
            ws->observe(ws->observe_ctx, l, L->w_gate, ws->xn, T, D);
            ws->observe(ws->observe_ctx, l, L->w_up, ws->xn, T, D);
        }
        tk_matmul(pool, L->w_gate, ws->xn, D, T, ws->h1, F, ws->scratch);
        tk_matmul(pool, L->w_up, ws->xn, D, T, ws->h2, F, ws->scratch);
        if (a->ffn_act == TK_ACT_GELU_TANH)
            for (size_t i = 0; i < (size_t)T * F; i++) ws->h1[i] = tk_gelu_tanh(ws->h1[i]) * ws->h2[i];
        else
            for (size_t i = 0; i < (size_t)T * F; i++) ws->h1[i] = tk_silu(ws->h1[i]) * ws->h2[i];
        if (ws->observe) ws->observe(ws->observe_ctx, l, L->w_down, ws->h1, T, F);
        tk_matmul(pool, L->w_down, ws->h1, F, T, ws->xn, D, ws->scratch);
        if (a->post_norms)
            for (int t = 0; t < T; t++)
                tk_rmsnorm(ws->xn + (size_t)t * D, ws->xn + (size_t)t * D, L->ffn_post_norm, D, hp->norm_eps);
        for (size_t i = 0; i < (size_t)T * D; i++) ws->x[i] += ws->xn[i];
    }

    for (int t = 0; t < T; t++) {
        tk_kv_seq *s = seqs[batch->seq[t]];
        if (batch->pos[t] + 1 > s->len) s->len = batch->pos[t] + 1;
    }
    int n_out = 0;
    for (int t = 0; t < T; t++)
        if (batch->logits[t])
            tk_rmsnorm(ws->logits_in + (size_t)n_out++ * D, ws->x + (size_t)t * D, m->w.output_norm, D,
                       hp->norm_eps);
    if (n_out) tk_matmul(pool, m->w.output, ws->logits_in, D, n_out, logits, hp->n_vocab, ws->scratch);
    if (n_out && hp->final_softcap > 0) {
        float c = hp->final_softcap;
        for (size_t i = 0; i < (size_t)n_out * hp->n_vocab; i++) logits[i] = c * tanhf(logits[i] / c);
    }
    return 0;
}
