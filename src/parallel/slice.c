/* Cutting a bound model down to one rank's heads and FFN columns. */
#include "slice.h"

#include <stdlib.h>
#include <string.h>

#include "../formats/dtype.h"

/* Rows [r0, r0 + nr) of t, as a view of its data. */
static void row_share(const tk_tensor *t, int64_t r0, int64_t nr, tk_tensor *out) {
    size_t row = tk_dtype_row_bytes(t->type, t->ne[0]);
    *out = *t;
    out->panels = NULL;
    out->data = (const unsigned char *)t->data + (size_t)r0 * row;
    out->ne[1] = nr;
    out->nbytes = (size_t)nr * row;
}

/* Bytes of columns c0 .. c0 + nc of every row of t, or 0 with a message
 * when the share would cut a block of t's type. */
static size_t col_share_bytes(const tk_tensor *t, int64_t c0, int64_t nc, tk_err *err) {
    const tk_dtype_info *info = tk_dtype_get(t->type);
    if (!info || info->block_bytes <= 0) {
        tk_err_set(err, "tensor %s: its type %s cannot be split by columns for tensor parallelism", t->name,
                   info ? info->name : "?");
        return 0;
    }
    if (c0 % info->block_elems || nc % info->block_elems) {
        tk_err_set(err,
                   "tensor %s: each rank's %lld of its %lld columns would cut a %s block of %d values "
                   "(tensor parallelism needs a share that is a multiple of %d)",
                   t->name, (long long)nc, (long long)t->ne[0], info->name, info->block_elems, info->block_elems);
        return 0;
    }
    return (size_t)(nc / info->block_elems) * (size_t)info->block_bytes * (size_t)t->ne[1];
}

/* Columns [c0, c0 + nc) of every row of t, copied to dst. */
static void col_share(const tk_tensor *t, int64_t c0, int64_t nc, unsigned char *dst, tk_tensor *out) {
    const tk_dtype_info *info = tk_dtype_get(t->type);
    size_t src_row = tk_dtype_row_bytes(t->type, t->ne[0]);
    size_t off = (size_t)(c0 / info->block_elems) * (size_t)info->block_bytes;
    size_t len = (size_t)(nc / info->block_elems) * (size_t)info->block_bytes;
    for (int64_t r = 0; r < t->ne[1]; r++)
        memcpy(dst + (size_t)r * len, (const unsigned char *)t->data + (size_t)r * src_row + off, len);
    *out = *t;
    out->panels = NULL;
    out->data = dst;
    out->ne[0] = nc;
    out->nbytes = len * (size_t)t->ne[1];
}

/* Adds to *bytes what col_share of t copies; -1 with a message when the
 * share would cut a block. */
static int add_col_bytes(const tk_tensor *t, int64_t c0, int64_t nc, size_t *bytes, tk_err *err) {
    size_t b = col_share_bytes(t, c0, nc, err);
    if (!b) return -1;
    *bytes += b;
    return 0;
}

/* One GLU FFN's share, columns [f0, f0 + f) of its hidden layer: rows of
 * gate and up (views), columns of down (copied to *dst, which advances). */
static void glu_share(const tk_tensor *gate, const tk_tensor *up, const tk_tensor *down, int64_t f0, int64_t f,
                      unsigned char **dst, tk_tensor out[3]) {
    row_share(gate, f0, f, &out[0]);
    row_share(up, f0, f, &out[1]);
    col_share(down, f0, f, *dst, &out[2]);
    *dst += out[2].nbytes;
}

/* Per layer: Q, K, V, O, then the FFN's gate, up and down (the dense FFN,
 * or a MoE layer's shared expert; the routed experts' views are cut in
 * place, in the layer's own expert views). */
enum { VIEWS_PER_LAYER = 7 };

int tk_tp_slice_model(tk_model *m, int rank, int n, tk_err *err) {
    tk_hparams *hp = &m->hp;
    const bool moe = m->arch->moe;
    if (m->arch->qk_norm_full)
        return tk_err_set(err, "tensor parallelism cannot split a q/k norm over the whole projection (%s)",
                          m->src.arch);
    /* Fewer KV heads than ranks: each KV head is held by n / n_kv_heads
     * ranks, each with its own query heads of the head's group. */
    const int kv_copies = hp->n_kv_heads < n && n % hp->n_kv_heads == 0 ? n / hp->n_kv_heads : 1;
    if (hp->n_kv_heads * kv_copies % n)
        return tk_err_set(err,
                          "tensor parallelism over %d ranks: the model's %d KV heads do not divide by %d "
                          "(nor %d by them)",
                          n, hp->n_kv_heads, n, n);
    if (hp->n_heads % n)
        return tk_err_set(err, "tensor parallelism over %d ranks: the model's %d heads do not divide by %d", n,
                          hp->n_heads, n);
    if (moe && (hp->expert_ffn_dim % n || hp->shexp_ffn_dim % n))
        return tk_err_set(err,
                          "tensor parallelism over %d ranks: the expert FFN width %d or the shared expert's %d "
                          "does not divide by %d",
                          n, hp->expert_ffn_dim, hp->shexp_ffn_dim, n);
    if (hp->ffn_dim % n)
        return tk_err_set(err, "tensor parallelism over %d ranks: the FFN width %d does not divide by %d", n,
                          hp->ffn_dim, n);
    const int64_t hd = hp->head_dim;
    const int64_t q = hp->n_heads / n * hd, kv = hp->n_kv_heads * kv_copies / n * hd, f = hp->ffn_dim / n;
    const int64_t kv0 = rank / kv_copies * kv; /* this rank's first K/V row */
    const int64_t fe = hp->expert_ffn_dim / n, fs = hp->shexp_ffn_dim / n;
    size_t bytes = 0;
    for (int l = 0; l < hp->n_layers; l++) {
        const tk_layer *L = &m->layers[l];
        if (add_col_bytes(L->wo, rank * q, q, &bytes, err)) return -1;
        if (!moe) {
            if (add_col_bytes(L->w_down, rank * f, f, &bytes, err)) return -1;
            continue;
        }
        for (int e = 0; e < hp->n_expert; e++)
            if (add_col_bytes(&L->experts[3 * e + 2], rank * fe, fe, &bytes, err)) return -1;
        if (L->down_shexp && add_col_bytes(L->down_shexp, rank * fs, fs, &bytes, err)) return -1;
    }
    m->tp_views = calloc((size_t)hp->n_layers * VIEWS_PER_LAYER + 1, sizeof(tk_tensor));
    m->tp_data = malloc(bytes);
    if (!m->tp_views || !m->tp_data)
        return tk_err_set(err, "out of memory for this rank's share of the weights (%zu bytes)", bytes);
    unsigned char *dst = m->tp_data;
    for (int l = 0; l < hp->n_layers; l++) {
        tk_layer *L = &m->layers[l];
        tk_tensor *v = m->tp_views + (size_t)l * VIEWS_PER_LAYER;
        row_share(L->wq, rank * q, q, &v[0]);
        row_share(L->wk, kv0, kv, &v[1]);
        row_share(L->wv, kv0, kv, &v[2]);
        col_share(L->wo, rank * q, q, dst, &v[3]);
        dst += v[3].nbytes;
        L->wq = &v[0], L->wk = &v[1], L->wv = &v[2], L->wo = &v[3];
        if (L->bq) L->bq += rank * q;
        if (L->bk) L->bk += kv0;
        if (L->bv) L->bv += kv0;
        if (!moe) {
            glu_share(L->w_gate, L->w_up, L->w_down, rank * f, f, &dst, &v[4]);
            L->w_gate = &v[4], L->w_up = &v[5], L->w_down = &v[6];
            continue;
        }
        /* the router and the shared expert's gate stay whole: every rank
         * routes each token to the same experts and computes its share of
         * each of them */
        for (int e = 0; e < hp->n_expert; e++) {
            tk_tensor *ex = &L->experts[3 * e], share[3];
            glu_share(&ex[0], &ex[1], &ex[2], rank * fe, fe, &dst, share);
            memcpy(ex, share, sizeof share);
        }
        if (L->gate_shexp) {
            glu_share(L->gate_shexp, L->up_shexp, L->down_shexp, rank * fs, fs, &dst, &v[4]);
            L->gate_shexp = &v[4], L->up_shexp = &v[5], L->down_shexp = &v[6];
        }
    }
    /* The head by vocabulary when it divides (each logit is then computed
     * whole, by one rank, as on one rank); else rank 0 computes it all. */
    if (hp->n_vocab % n == 0) {
        tk_tensor *h = m->tp_views + (size_t)hp->n_layers * VIEWS_PER_LAYER;
        row_share(m->w.output, (int64_t)rank * (hp->n_vocab / n), hp->n_vocab / n, h);
        m->tp_head = h;
    }
    hp->n_heads /= n;
    hp->n_kv_heads = hp->n_kv_heads * kv_copies / n;
    m->tp_kv_copies = kv_copies;
    hp->ffn_dim = (int)f;
    hp->expert_ffn_dim = (int)fe;
    hp->shexp_ffn_dim = (int)fs;
    return 0;
}
