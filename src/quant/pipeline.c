/* tk_quantize_model: source -> GGUF by RTN, GPTQ or AWQ.
 *
 * Round to nearest streams: one tensor at a time is converted to float32
 * (GGUF layout: HF Q/K rows permuted to adjacent-pair RoPE), quantized and
 * kept until the file is written.
 *
 * GPTQ and AWQ keep a float32 copy of the whole model, bound as a real
 * tk_model, and calibrate layer by layer ("sequential"): for layer l the
 * forward pass runs over the calibration windows on a view of the model
 * truncated to layers 0..l, whose layers 0..l-1 already hold their
 * dequantized quantized weights, and the observe hook of the forward pass
 * accumulates X^T X (and mean |x|) of every matrix input of layer l.
 * Layer l is then quantized and its float weights replaced by the
 * dequantized values before layer l+1 is calibrated.
 *
 * The output is written to OUT.tmp.<pid> (created before any work, so an
 * unwritable destination fails at once) and renamed over OUT at the end:
 * OUT is never half-written. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../formats/gguf.h"
#include "../formats/llama_gguf.h"
#include "../model/model.h"
#include "../tokenizer/tokenizer.h"
#include <tokamak.h> /* tk_mapfile, tk_read_file */
#include "quant_internal.h"
#include "quantize.h"

static void progress(const tk_quant_params *p, const char *stage, int done, int total, const char *what) {
    if (!p->progress) return;
    tk_quant_progress pr = {stage, done, total, what};
    p->progress(p->progress_user, &pr);
}

/* One output tensor. */
typedef struct otensor {
    const tk_tensor *src;
    tk_dtype type;
    float *f;          /* float32 weights (GGUF layout) while needed */
    void *data;        /* quantized bytes */
    size_t nbytes;
    int64_t rows;
} otensor;

typedef struct qctx {
    const tk_quant_params *p;
    tk_qscheme scheme; /* parsed from p->type */
    tk_source src;
    tk_tokenizer *tok;
    otensor *t;
    int n;
    tk_threadpool *pool;
    tk_quant_report *rep;
    bool tied;
} qctx;

/* ---- RTN of one tensor ---- */

typedef struct rows_job {
    tk_dtype type;
    const float *f;
    int64_t ne0, rows, per_task;
    unsigned char *out;
    size_t row_bytes;
    int failed;
} rows_job;

static void rows_task(void *ctx, int task, int thread) {
    (void)thread;
    rows_job *j = ctx;
    int64_t r1 = (task + 1) * j->per_task;
    if (r1 > j->rows) r1 = j->rows;
    for (int64_t r = task * j->per_task; r < r1; r++)
        if (tk_quantize_row(j->type, j->f + r * j->ne0, j->out + (size_t)r * j->row_bytes, j->ne0, NULL))
            j->failed = 1;
}

static int quantize_rtn_native(qctx *q, otensor *o, tk_err *err) {
    const int64_t ne0 = o->src->ne[0];
    const size_t rb = tk_dtype_row_bytes(o->type, ne0);
    o->nbytes = rb * (size_t)o->rows;
    o->data = malloc(o->nbytes ? o->nbytes : 1);
    if (!o->data) return tk_err_set(err, "out of memory for tensor '%s'", o->src->name);
    const int nt = tk_threadpool_size(q->pool) * 4;
    rows_job j = {o->type, o->f, ne0, o->rows, (o->rows + nt - 1) / nt, o->data, rb, 0};
    tk_threadpool_run(q->pool, (int)((o->rows + j.per_task - 1) / j.per_task), rows_task, &j);
    if (j.failed) return tk_err_set(err, "tensor '%s': cannot quantize to %s", o->src->name, tk_dtype_get(o->type)->name);
    return 0;
}

/* Packs a tk_qmatrix into o and copies its dequantized values into o->f. */
static int take_qmatrix(otensor *o, tk_qmatrix *qm, tk_err *err) {
    o->nbytes = tk_dtype_row_bytes(o->type, o->src->ne[0]) * (size_t)o->rows;
    o->data = malloc(o->nbytes);
    if (!o->data) return tk_err_set(err, "out of memory for tensor '%s'", o->src->name);
    if (tk_qmatrix_pack(qm, o->data, err)) return tk_err_wrap(err, "%s", o->src->name);
    memcpy(o->f, qm->deq, sizeof(float) * (size_t)(qm->rows * qm->cols));
    return 0;
}

/* Quantizes a float tensor by RTN (native, or grids when a group is set),
 * and replaces o->f with the dequantized values when keep_deq. */
static int quantize_rtn(qctx *q, otensor *o, bool keep_deq, bool use_group, tk_err *err) {
    const int64_t ne0 = o->src->ne[0];
    if (use_group && q->p->group > 0 && tk_qgrid_supported(o->type)) {
        tk_qmatrix qm;
        if (tk_qmatrix_alloc(&qm, o->type, o->rows, ne0, err)) return -1;
        int rc = tk_rtn_matrix(o->f, q->p->group, &qm, q->pool, err);
        if (!rc) rc = take_qmatrix(o, &qm, err);
        tk_qmatrix_free(&qm);
        return rc;
    }
    if (quantize_rtn_native(q, o, err)) return -1;
    if (keep_deq && o->type != TK_F32) {
        const size_t rb = tk_dtype_row_bytes(o->type, ne0);
        for (int64_t r = 0; r < o->rows; r++)
            tk_dequant_row(o->type, (unsigned char *)o->data + (size_t)r * rb, o->f + r * ne0, ne0);
    }
    return 0;
}

/* ---- in-memory float model for calibration ---- */

typedef struct mem_impl {
    tk_tensor *tensors;
    int n;
} mem_impl;

static void mem_free(void *p) {
    mem_impl *m = p;
    for (int i = 0; i < m->n; i++) free(m->tensors[i].name);
    free(m->tensors);
    free(m);
}

/* A source whose tensors are the float buffers of q->t (not owned). */
static int mem_source(qctx *q, tk_source *ms, tk_err *err) {
    memset(ms, 0, sizeof *ms);
    mem_impl *m = calloc(1, sizeof *m);
    tk_tensor *ts = m ? calloc((size_t)q->n, sizeof *ts) : NULL;
    if (!ts) {
        free(m);
        return tk_err_set(err, "out of memory");
    }
    m->tensors = ts;
    for (int i = 0; i < q->n; i++) {
        const tk_tensor *s = q->t[i].src;
        ts[i] = *s;
        ts[i].name = strdup(s->name);
        ts[i].type = TK_F32;
        ts[i].data = q->t[i].f;
        ts[i].nbytes = sizeof(float) * (size_t)tk_tensor_nelems(s);
        m->n = i + 1;
        if (!ts[i].name) {
            mem_free(m);
            return tk_err_set(err, "out of memory");
        }
    }
    ms->format = q->src.format;
    memcpy(ms->arch, q->src.arch, sizeof ms->arch);
    memcpy(ms->name, q->src.name, sizeof ms->name);
    ms->hp = q->src.hp;
    ms->hp.rope_style = TK_ROPE_ADJACENT; /* the buffers are in GGUF layout */
    ms->tensors = ts;
    ms->n_tensors = q->n;
    ms->impl = m;
    ms->impl_free = mem_free;
    if (tk_source_index_tensors(ms, err)) {
        tk_source_close(ms);
        return -1;
    }
    return 0;
}

/* ---- calibration statistics of one layer ---- */

enum { IN_ATTN = 0, IN_O = 1, IN_FFN = 2, IN_DOWN = 3, N_IN = 4 };

typedef struct layer_stats {
    const tk_layer *L;
    int dims[N_IN];
    double *H[N_IN];
    double *abs_sum[N_IN];
    int64_t n_tok;
    tk_threadpool *pool;
} layer_stats;

static void observe(void *ctx, int layer, const tk_tensor *w, const float *x, int n_tok, int dim) {
    (void)layer;
    layer_stats *s = ctx;
    int k = w == s->L->wq ? IN_ATTN : w == s->L->wo ? IN_O : w == s->L->w_gate ? IN_FFN : w == s->L->w_down ? IN_DOWN : -1;
    if (k < 0 || dim != s->dims[k]) return;
    tk_gram_accumulate(s->H[k], x, n_tok, dim, s->pool);
    for (int t = 0; t < n_tok; t++)
        for (int c = 0; c < dim; c++) s->abs_sum[k][c] += fabsf(x[(size_t)t * dim + c]);
    if (k == IN_ATTN) s->n_tok += n_tok;
}

typedef struct calib {
    tk_model model;
    bool model_ok;
    tk_kv_pool kv;
    bool kv_ok;
    tk_forward_ws ws;
    bool ws_ok;
    int32_t *tokens;
    int n_windows, ctx;
    int32_t *pos, *seqid;
    uint8_t *flags;
} calib;

static void calib_free(calib *c) {
    if (c->ws_ok) tk_forward_ws_free(&c->ws);
    if (c->kv_ok) tk_kv_pool_free(&c->kv);
    if (c->model_ok) tk_model_free(&c->model);
    free(c->tokens);
    free(c->pos);
    free(c->seqid);
    free(c->flags);
    memset(c, 0, sizeof *c);
}

static int calib_tokens(qctx *q, calib *c, tk_err *err) {
    const tk_quant_params *p = q->p;
    if (!p->calib_path) return tk_err_set(err, "GPTQ and AWQ need calibration text (--calib FILE)");
    char *text = NULL;
    size_t len = 0;
    if (tk_read_file(p->calib_path, &text, &len, err)) return tk_err_wrap(err, "calibration text");
    int n = 0;
    int cap = (int)(len < 1 << 28 ? len : 1 << 28) + 16;
    c->tokens = malloc(sizeof(int32_t) * (size_t)cap);
    if (!c->tokens) {
        free(text);
        return tk_err_set(err, "out of memory for the calibration tokens");
    }
    int rc = tk_tokenize(q->tok, text, len, true, false, c->tokens, cap, &n, err);
    free(text);
    if (rc) return tk_err_wrap(err, "%s", p->calib_path);
    if (n > cap) n = cap;
    c->ctx = p->ctx > 0 ? p->ctx : 256;
    if (q->src.hp.ctx_len > 0 && c->ctx > q->src.hp.ctx_len) c->ctx = q->src.hp.ctx_len;
    if (c->ctx < 2) return tk_err_set(err, "calibration window of %d tokens is too short", c->ctx);
    c->n_windows = n / c->ctx;
    if (p->max_windows > 0 && c->n_windows > p->max_windows) c->n_windows = p->max_windows;
    if (c->n_windows < 1)
        return tk_err_set(err, "%s: calibration text has %d tokens, fewer than one window of %d", p->calib_path, n,
                          c->ctx);
    /* each window starts with BOS, as in llama.cpp's perplexity */
    const int bos = tk_tokenizer_bos(q->tok);
    if (bos >= 0)
        for (int w = 0; w < c->n_windows; w++) c->tokens[(size_t)w * c->ctx] = bos;
    for (int i = 0; i < c->n_windows * c->ctx; i++)
        if (c->tokens[i] < 0 || c->tokens[i] >= q->src.hp.n_vocab)
            return tk_err_set(err, "calibration token %d is outside the model's vocabulary", c->tokens[i]);
    q->rep->n_calib_tokens = c->n_windows * c->ctx;
    q->rep->n_windows = c->n_windows;
    return 0;
}

static int calib_init(qctx *q, calib *c, tk_err *err) {
    tk_source ms;
    if (mem_source(q, &ms, err)) return -1;
    if (tk_model_from_source(&ms, &c->model, err)) {
        tk_source_close(&ms);
        return tk_err_wrap(err, "calibration model");
    }
    c->model_ok = true;
    const tk_hparams *hp = &c->model.hp;
    const int bs = 16;
    if (tk_kv_pool_init(&c->kv, hp->n_layers, hp->n_kv_heads, hp->head_dim, bs, (c->ctx + bs - 1) / bs, TK_KV_F32,
                        false, err))
        return -1;
    c->kv_ok = true;
    /* float32 weights run through float kernels (no activation quantization) */
    if (tk_forward_ws_init(&c->ws, &c->model, c->ctx, c->ctx, bs, tk_threadpool_size(q->pool), tk_cpu_isa(), false,
                          err)) return -1;
    c->ws_ok = true;
    c->pos = malloc(sizeof(int32_t) * (size_t)c->ctx);
    c->seqid = calloc((size_t)c->ctx, sizeof(int32_t));
    c->flags = calloc((size_t)c->ctx, 1);
    if (!c->pos || !c->seqid || !c->flags) return tk_err_set(err, "out of memory");
    for (int i = 0; i < c->ctx; i++) c->pos[i] = i;
    return 0;
}

static void stats_free(layer_stats *s) {
    for (int k = 0; k < N_IN; k++) {
        free(s->H[k]);
        free(s->abs_sum[k]);
    }
}

/* Runs layers 0..l over every window and collects layer l's statistics. */
static int calib_layer(qctx *q, calib *c, int l, layer_stats *s, tk_err *err) {
    const tk_hparams *hp = &c->model.hp;
    memset(s, 0, sizeof *s);
    s->L = &c->model.layers[l];
    s->pool = q->pool;
    s->dims[IN_ATTN] = s->dims[IN_FFN] = hp->dim;
    s->dims[IN_O] = hp->n_heads * hp->head_dim;
    s->dims[IN_DOWN] = hp->ffn_dim;
    for (int k = 0; k < N_IN; k++) {
        s->H[k] = calloc((size_t)s->dims[k] * (size_t)s->dims[k], sizeof(double));
        s->abs_sum[k] = calloc((size_t)s->dims[k], sizeof(double));
        if (!s->H[k] || !s->abs_sum[k]) {
            stats_free(s);
            return tk_err_set(err, "out of memory for calibration statistics");
        }
    }
    tk_model view = c->model;
    view.hp.n_layers = l + 1;
    c->ws.observe = observe;
    c->ws.observe_ctx = s;
    int rc = 0;
    for (int w = 0; w < c->n_windows && !rc; w++) {
        tk_kv_seq seq = {0};
        tk_kv_seq *seqs[1] = {&seq};
        tk_batch b = {c->ctx, c->tokens + (size_t)w * c->ctx, c->pos, c->seqid, c->flags};
        rc = tk_kv_seq_reserve(&c->kv, &seq, c->ctx, err);
        if (!rc) rc = tk_forward(&view, &c->kv, seqs, 1, &b, NULL, &c->ws, q->pool, err);
        tk_kv_seq_release(&c->kv, &seq);
    }
    c->ws.observe = NULL;
    c->ws.observe_ctx = NULL;
    if (rc) {
        stats_free(s);
        return tk_err_wrap(err, "calibration forward pass");
    }
    /* H = 2 X X^T / N (the scale does not change GPTQ or AWQ, but keeps the
     * reported errors per token) */
    for (int k = 0; k < N_IN; k++) {
        const size_t n2 = (size_t)s->dims[k] * s->dims[k];
        for (size_t i = 0; i < n2; i++) s->H[k][i] *= 2.0 / (double)s->n_tok;
        for (int i = 0; i < s->dims[k]; i++) s->abs_sum[k][i] /= (double)s->n_tok;
    }
    return 0;
}

/* ---- per-layer methods ---- */

static otensor *find_out(qctx *q, const tk_tensor *bound) {
    for (int i = 0; i < q->n; i++)
        if (q->t[i].f == bound->data) return &q->t[i];
    return NULL;
}

/* GPTQ for one matrix (RTN for types that hold no grids). */
static int gptq_one(qctx *q, otensor *o, const double *H, tk_err *err) {
    const int64_t cols = o->src->ne[0];
    if (!tk_qgrid_supported(o->type)) return quantize_rtn(q, o, true, true, err);
    tk_qmatrix qm, rm;
    if (tk_qmatrix_alloc(&qm, o->type, o->rows, cols, err)) return -1;
    if (tk_qmatrix_alloc(&rm, o->type, o->rows, cols, err)) {
        tk_qmatrix_free(&qm);
        return -1;
    }
    tk_gptq_opts opt = {q->p->group > 0 ? q->p->group : 32, q->p->act_order, q->p->damp > 0 ? q->p->damp : 0.01, 0};
    int rc = tk_gptq_matrix(o->f, H, &opt, &qm, q->pool, err);
    if (!rc) rc = tk_rtn_matrix(o->f, opt.group, &rm, q->pool, err);
    if (!rc) {
        q->rep->method_error += tk_output_error(o->f, qm.deq, o->rows, cols, H, q->pool);
        q->rep->rtn_error += tk_output_error(o->f, rm.deq, o->rows, cols, H, q->pool);
        rc = take_qmatrix(o, &qm, err);
    }
    tk_qmatrix_free(&qm);
    tk_qmatrix_free(&rm);
    if (rc) return tk_err_wrap(err, "GPTQ on '%s'", o->src->name);
    return 0;
}

static void scale_cols(otensor *o, const float *s) {
    const int64_t C = o->src->ne[0];
    for (int64_t r = 0; r < o->rows; r++)
        for (int64_t c = 0; c < C; c++) o->f[r * C + c] *= s[c];
}

/* AWQ search for matrices sharing one input, then the column scaling. */
static int awq_group(qctx *q, otensor **mats, int n, const double *H, const double *mean_abs, const int *tie,
                     float *s, tk_err *err) {
    float *W[4];
    int64_t rows[4];
    tk_dtype types[4];
    for (int i = 0; i < n; i++) {
        W[i] = mats[i]->f;
        rows[i] = mats[i]->rows;
        types[i] = mats[i]->type;
    }
    tk_awq_result r;
    if (tk_awq_search(W, rows, types, n, mats[0]->src->ne[0], H, mean_abs, tie, q->p->group,
                      q->p->awq_grid > 0 ? q->p->awq_grid : 20, s, NULL, &r, q->pool, err))
        return tk_err_wrap(err, "AWQ on '%s'", mats[0]->src->name);
    q->rep->rtn_error += r.loss_alpha0; /* round to nearest of the unscaled weights */
    for (int i = 0; i < n; i++) scale_cols(mats[i], s);
    return 0;
}

/* H of the scaled input X / s: H_ab / (s_a s_b). */
static double *scaled_gram(const double *H, const float *s, int n) {
    double *Hs = malloc(sizeof(double) * (size_t)n * n);
    if (!Hs) return NULL;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) Hs[(size_t)a * n + b] = H[(size_t)a * n + b] / ((double)s[a] * s[b]);
    return Hs;
}

/* Quantizes one AWQ-scaled matrix (with clipping search unless `no_clip`)
 * and adds its output error; row_w (may be NULL) weights each row's error
 * (v's rows are rescaled by the v -> o fold). */
static int awq_quantize(qctx *q, otensor *o, const double *Hs, bool no_clip, const float *row_w, tk_err *err) {
    const int64_t cols = o->src->ne[0], n = o->rows * cols;
    float *before = malloc(sizeof(float) * (size_t)n);
    if (!before) return tk_err_set(err, "out of memory");
    memcpy(before, o->f, sizeof(float) * (size_t)n);
    int rc;
    if (!no_clip && tk_qgrid_supported(o->type)) {
        const int group = q->p->group > 0 ? q->p->group : 32;
        const int64_t ng = (cols + group - 1) / group;
        float *ratios = malloc(sizeof(float) * (size_t)(o->rows * ng));
        tk_qmatrix qm;
        rc = ratios ? tk_qmatrix_alloc(&qm, o->type, o->rows, cols, err) : tk_err_set(err, "out of memory");
        if (!rc) {
            rc = tk_awq_clip(o->f, o->rows, cols, o->type, group, Hs, ratios, q->pool, err);
            if (!rc) rc = tk_rtn_matrix_clip(o->f, group, ratios, &qm, q->pool, err);
            if (!rc) rc = take_qmatrix(o, &qm, err);
            tk_qmatrix_free(&qm);
        }
        free(ratios);
    } else {
        rc = quantize_rtn(q, o, true, true, err);
    }
    if (!rc) {
        if (row_w)
            for (int64_t r = 0; r < o->rows; r++)
                for (int64_t c = 0; c < cols; c++) {
                    before[r * cols + c] *= row_w[r];
                    o->f[r * cols + c] *= row_w[r];
                }
        q->rep->method_error += tk_output_error(before, o->f, o->rows, cols, Hs, q->pool);
        if (row_w)
            for (int64_t r = 0; r < o->rows; r++)
                for (int64_t c = 0; c < cols; c++) o->f[r * cols + c] /= row_w[r];
    }
    free(before);
    return rc;
}

static int awq_layer(qctx *q, calib *c, int l, layer_stats *st, tk_err *err) {
    const tk_hparams *hp = &c->model.hp;
    tk_layer *L = &c->model.layers[l];
    otensor *wq = find_out(q, L->wq), *wk = find_out(q, L->wk), *wv = find_out(q, L->wv), *wo = find_out(q, L->wo);
    otensor *wg = find_out(q, L->w_gate), *wu = find_out(q, L->w_up), *wd = find_out(q, L->w_down);
    char name[64];
    snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
    otensor *an = NULL, *fn = NULL;
    for (int i = 0; i < q->n; i++)
        if (!strcmp(q->t[i].src->name, name)) an = &q->t[i];
    snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
    for (int i = 0; i < q->n; i++)
        if (!strcmp(q->t[i].src->name, name)) fn = &q->t[i];
    if (!wq || !wk || !wv || !wo || !wg || !wu || !wd || !an || !fn)
        return tk_err_set(err, "layer %d: tensors not found for AWQ", l);
    const int D = hp->dim, QD = hp->n_heads * hp->head_dim, F = hp->ffn_dim, hd = hp->head_dim;
    const int KD = hp->n_kv_heads * hd;
    const int group = hp->n_heads / hp->n_kv_heads;
    float *s1 = malloc(sizeof(float) * (size_t)D), *s2 = malloc(sizeof(float) * (size_t)QD);
    float *s3 = malloc(sizeof(float) * (size_t)D), *s4 = malloc(sizeof(float) * (size_t)F);
    float *vrow = malloc(sizeof(float) * (size_t)KD);
    int *tie = malloc(sizeof(int) * (size_t)QD);
    double *H1 = NULL, *H2 = NULL, *H3 = NULL, *H4 = NULL;
    int rc = -1;
    if (!s1 || !s2 || !s3 || !s4 || !vrow || !tie) {
        tk_err_set(err, "out of memory");
        goto done;
    }
    /* attn_norm -> q, k, v */
    otensor *qkv[3] = {wq, wk, wv};
    if (awq_group(q, qkv, 3, st->H[IN_ATTN], st->abs_sum[IN_ATTN], NULL, s1, err)) goto done;
    for (int i = 0; i < D; i++) {
        an->f[i] /= s1[i];
        L->attn_norm[i] /= s1[i];
    }
    /* v -> o: o's input channel (head h, dim d) is v's row (h / group, d);
     * the query heads of one KV head share its scale */
    for (int ch = 0; ch < QD; ch++) tie[ch] = (ch / hd) / group * hd + ch % hd;
    if (awq_group(q, &wo, 1, st->H[IN_O], st->abs_sum[IN_O], tie, s2, err)) goto done;
    for (int ch = 0; ch < QD; ch++) {
        if ((ch / hd) % group) continue; /* one channel per class */
        vrow[tie[ch]] = s2[ch];
        float *row = wv->f + (size_t)tie[ch] * D;
        for (int c2 = 0; c2 < D; c2++) row[c2] /= s2[ch];
    }
    /* ffn_norm -> gate, up */
    otensor *gu[2] = {wg, wu};
    if (awq_group(q, gu, 2, st->H[IN_FFN], st->abs_sum[IN_FFN], NULL, s3, err)) goto done;
    for (int i = 0; i < D; i++) {
        fn->f[i] /= s3[i];
        L->ffn_norm[i] /= s3[i];
    }
    /* up -> down */
    if (awq_group(q, &wd, 1, st->H[IN_DOWN], st->abs_sum[IN_DOWN], NULL, s4, err)) goto done;
    for (int r = 0; r < F; r++)
        for (int c2 = 0; c2 < D; c2++) wu->f[(size_t)r * D + c2] /= s4[r];
    /* quantize the scaled matrices (Gram matrices of the scaled inputs);
     * clipping as the reference implementation: not for q and k, whose
     * errors meet in the attention scores */
    H1 = scaled_gram(st->H[IN_ATTN], s1, D);
    H2 = scaled_gram(st->H[IN_O], s2, QD);
    H3 = scaled_gram(st->H[IN_FFN], s3, D);
    H4 = scaled_gram(st->H[IN_DOWN], s4, F);
    if (!H1 || !H2 || !H3 || !H4) {
        tk_err_set(err, "out of memory");
        goto done;
    }
    const bool clip = !q->p->awq_no_clip;
    if (awq_quantize(q, wq, H1, true, NULL, err) || awq_quantize(q, wk, H1, true, NULL, err) ||
        awq_quantize(q, wv, H1, !clip, vrow, err) || awq_quantize(q, wo, H2, !clip, NULL, err) ||
        awq_quantize(q, wg, H3, !clip, NULL, err) || awq_quantize(q, wu, H3, !clip, s4, err) ||
        awq_quantize(q, wd, H4, !clip, NULL, err))
        goto done;
    rc = 0;
done:
    free(s1), free(s2), free(s3), free(s4), free(vrow), free(tie);
    free(H1), free(H2), free(H3), free(H4);
    return rc;
}

static int gptq_layer(qctx *q, calib *c, int l, layer_stats *st, tk_err *err) {
    tk_layer *L = &c->model.layers[l];
    const struct {
        const tk_tensor *w;
        int in;
    } m[7] = {{L->wq, IN_ATTN}, {L->wk, IN_ATTN}, {L->wv, IN_ATTN}, {L->wo, IN_O},
              {L->w_gate, IN_FFN}, {L->w_up, IN_FFN}, {L->w_down, IN_DOWN}};
    for (int i = 0; i < 7; i++) {
        otensor *o = find_out(q, m[i].w);
        if (!o) return tk_err_set(err, "layer %d: tensor not found for GPTQ", l);
        if (gptq_one(q, o, st->H[m[i].in], err)) return -1;
    }
    return 0;
}

static int check_finite(const otensor *o, tk_err *err) {
    const int64_t n = tk_tensor_nelems(o->src);
    for (int64_t k = 0; k < n; k++)
        if (!isfinite(o->f[k]))
            return tk_err_set(err, "tensor '%s' has a non-finite value at %lld", o->src->name, (long long)k);
    return 0;
}

static int calibrated(qctx *q, tk_err *err) {
    calib c;
    memset(&c, 0, sizeof c);
    int rc = -1;
    /* float copies of every tensor */
    for (int i = 0; i < q->n; i++)
        if (tk_source_tensor_f32(&q->src, q->t[i].src, &q->t[i].f, err) || check_finite(&q->t[i], err)) goto done;
    if (calib_tokens(q, &c, err) || calib_init(q, &c, err)) goto done;
    const int NL = c.model.hp.n_layers;
    for (int l = 0; l < NL; l++) {
        char what[32];
        snprintf(what, sizeof what, "layer %d", l);
        progress(q->p, "calibrate", l, NL, what);
        layer_stats st;
        if (calib_layer(q, &c, l, &st, err)) goto done;
        int r = q->p->method == TK_QMETHOD_GPTQ ? gptq_layer(q, &c, l, &st, err) : awq_layer(q, &c, l, &st, err);
        stats_free(&st);
        if (r) goto done;
    }
    progress(q->p, "calibrate", NL, NL, "done");
    rc = 0;
done:
    calib_free(&c);
    return rc;
}

/* ---- driver ---- */

static bool is_layer_matrix(const char *name) {
    static const char *const roles[] = {".attn_q.weight",    ".attn_k.weight",      ".attn_v.weight",
                                        ".attn_qkv.weight",  ".attn_output.weight", ".ffn_gate.weight",
                                        ".ffn_up.weight",    ".ffn_down.weight"};
    if (strncmp(name, "blk.", 4)) return false;
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strstr(name, roles[i])) return true;
    return false;
}

static int check_params(const tk_quant_params *p, const tk_qscheme *scheme, tk_err *err) {
    const tk_dtype base = scheme->base;
    if (p->group != 0 && p->group != 32 && p->group != 64 && p->group != 128)
        return tk_err_set(err, "group size %d: expected 32, 64 or 128", p->group);
    if (p->method == TK_QMETHOD_GPTQ && !tk_qgrid_supported(base))
        return tk_err_set(err, "GPTQ needs a q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q4_k_m or q5_k container, not %s",
                          scheme->name);
    if (p->method == TK_QMETHOD_AWQ && (base == TK_F32 || base == TK_F16 || base == TK_BF16))
        return tk_err_set(err, "AWQ needs a quantized type, not %s", scheme->name);
    if (p->method != TK_QMETHOD_RTN && !p->calib_path)
        return tk_err_set(err, "%s needs calibration text (--calib FILE)", p->method == TK_QMETHOD_GPTQ ? "GPTQ" : "AWQ");
    return 0;
}

static int write_output(qctx *q, const char *tmp, tk_err *err) {
    tk_gguf_writer *w = tk_gguf_writer_new();
    float *factors = NULL;
    int rc = -1;
    if (!w) return tk_err_set(err, "out of memory");
    if (tk_gguf_set_llama_meta(w, &q->src, q->scheme.ftype) || tk_tokenizer_to_gguf(q->tok, w, err)) {
        tk_err_set(err, "cannot set the GGUF metadata");
        goto done;
    }
    static const char *const methods[] = {"rtn", "gptq", "awq"};
    if (tk_gguf_set_str(w, "tokamak.quantize.scheme", q->scheme.name) ||
        tk_gguf_set_str(w, "tokamak.quantize.method", methods[q->p->method]) ||
        tk_gguf_set_u32(w, "tokamak.quantize.group", (uint32_t)q->p->group)) {
        tk_err_set(err, "cannot set the GGUF metadata");
        goto done;
    }
    for (int i = 0; i < q->n; i++) {
        const otensor *o = &q->t[i];
        if (tk_gguf_add_tensor(w, o->src->name, o->type, o->src->ndim, o->src->ne, o->data, o->nbytes)) {
            tk_err_set(err, "cannot add tensor '%s' (%s)", o->src->name, tk_dtype_get(o->type)->name);
            goto done;
        }
    }
    if (q->src.hp.rope_scaling == TK_ROPE_SCALING_LLAMA3 && !tk_source_find(&q->src, "rope_freqs.weight")) {
        factors = tk_llama3_rope_factors(&q->src.hp);
        int64_t ne[1] = {q->src.hp.head_dim / 2};
        if (!factors ||
            tk_gguf_add_tensor(w, "rope_freqs.weight", TK_F32, 1, ne, factors, sizeof(float) * (size_t)ne[0])) {
            tk_err_set(err, "cannot add rope_freqs");
            goto done;
        }
    }
    rc = tk_gguf_write(w, tmp, err);
done:
    free(factors);
    tk_gguf_writer_free(w);
    return rc;
}

int tk_quantize_model(const char *in_path, const char *out_path, const tk_quant_params *p, tk_quant_report *rep,
                      tk_err *err) {
    const double t0 = tk_clock_seconds(TK_CLOCK_WALL);
    tk_quant_report dummy;
    if (!rep) rep = &dummy;
    memset(rep, 0, sizeof *rep);
    qctx q;
    memset(&q, 0, sizeof q);
    if (tk_qscheme_parse(p->type, &q.scheme, err) || check_params(p, &q.scheme, err)) return -1;
    snprintf(rep->type, sizeof rep->type, "%s", q.scheme.name);

    q.p = p;
    q.rep = rep;
    char *tmp = NULL;
    int rc = -1;
    if (tk_source_open(in_path, &q.src, err)) return -1;
    if (tk_tokenizer_from_source(&q.src, p->tokenizer_path, &q.tok, err)) {
        tk_err_wrap(err, "tokenizer (the output GGUF carries it; llama2.c models need --tokenizer)");
        goto done;
    }
    /* phi3: fused attn_qkv (q | k | v rows) and ffn_up (gate | up) are
     * quantized row by row like any matrix; the calibrated methods bind
     * each role to its own tensor, so they stay llama only */
    const bool phi3 = !strcmp(q.src.arch, "phi3");
    if (strcmp(q.src.arch, "llama") && !phi3) {
        tk_err_set(err, "%s: architecture '%s' is not supported (llama and phi3 only)", in_path, q.src.arch);
        goto done;
    }
    if (phi3 && p->method != TK_QMETHOD_RTN) {
        tk_err_set(err, "%s: %s does not support phi3's fused attn_qkv / ffn_up tensors yet (round to nearest only)",
                   in_path, p->method == TK_QMETHOD_GPTQ ? "GPTQ" : "AWQ");
        goto done;
    }
    q.n = q.src.n_tensors;
    q.t = calloc((size_t)q.n + 1, sizeof *q.t);
    if (!q.t) {
        tk_err_set(err, "out of memory");
        goto done;
    }
    q.tied = !tk_source_find(&q.src, "output.weight");
    for (int i = 0; i < q.n; i++) {
        otensor *o = &q.t[i];
        o->src = &q.src.tensors[i];
        const tk_dtype st = o->src->type;
        o->rows = tk_tensor_nelems(o->src) / o->src->ne[0];
        if (st != TK_F32 && st != TK_F16 && st != TK_BF16 && o->rows > 1 && !p->allow_requantize) {
            const tk_dtype_info *info = tk_dtype_get(st);
            tk_err_set(err,
                       "%s: tensor '%s' is already quantized (%s): quantize expects F32/F16/BF16 weights "
                       "(--allow-requantize to proceed anyway)",
                       in_path, o->src->name, info ? info->name : "?");
            goto done;
        }
        o->type = tk_qscheme_tensor_type(&q.scheme, o->src->name, o->src->ne[0], o->rows, q.src.hp.n_layers, q.tied,
                                         p->pure);
    }
    /* claim the output's temporary name now: an unwritable destination
     * fails before any work */
    size_t tl = strlen(out_path) + 32;
    tmp = malloc(tl);
    if (!tmp) {
        tk_err_set(err, "out of memory");
        goto done;
    }
    snprintf(tmp, tl, "%s.tmp.%ld", out_path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
        tk_err_set(err, "%s: cannot create the output: %s", out_path, strerror(errno));
        free(tmp);
        tmp = NULL;
        goto done;
    }
    close(fd);
    q.pool = tk_threadpool_new(p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
    if (!q.pool) {
        tk_err_set(err, "cannot start the thread pool");
        goto done;
    }
    if (p->method != TK_QMETHOD_RTN && calibrated(&q, err)) goto done;
    for (int i = 0; i < q.n; i++) {
        otensor *o = &q.t[i];
        progress(p, "quantize", i, q.n, o->src->name);
        if (o->data) continue; /* done by the calibrated pass */
        if (!o->f && (tk_source_tensor_f32(&q.src, o->src, &o->f, err) || check_finite(o, err))) goto done;
        if (quantize_rtn(&q, o, false, is_layer_matrix(o->src->name), err)) goto done;
        free(o->f);
        o->f = NULL;
    }
    progress(p, "quantize", q.n, q.n, "done");
    int types_count[TK_DTYPE_LIMIT] = {0};
    for (int i = 0; i < q.n; i++) {
        rep->n_params += tk_tensor_nelems(q.t[i].src);
        rep->bytes += q.t[i].nbytes;
        types_count[q.t[i].type]++;
    }
    const int max_types = (int)(sizeof rep->types / sizeof rep->types[0]);
    for (int t = 0; t < TK_DTYPE_LIMIT && rep->n_types < max_types; t++)
        if (types_count[t]) {
            rep->types[rep->n_types].name = tk_dtype_get(t)->name;
            rep->types[rep->n_types++].n_tensors = types_count[t];
        }
    rep->n_tensors = q.n;
    progress(p, "write", 0, 1, out_path);
    if (write_output(&q, tmp, err)) goto done;
    if (rename(tmp, out_path) != 0) {
        tk_err_set(err, "%s: cannot rename the finished output into place: %s", out_path, strerror(errno));
        goto done;
    }
    free(tmp);
    tmp = NULL;
    progress(p, "write", 1, 1, out_path);
    rc = 0;
done:
    if (tmp) {
        remove(tmp);
        free(tmp);
    }
    if (q.t)
        for (int i = 0; i < q.n; i++) {
            free(q.t[i].f);
            free(q.t[i].data);
        }
    free(q.t);
    tk_threadpool_free(q.pool);
    tk_tokenizer_free(q.tok);
    tk_source_close(&q.src);
    rep->seconds = tk_clock_seconds(TK_CLOCK_WALL) - t0;
    return rc;
}
