/* llama2.c legacy checkpoints: a 7 x int32 header followed by float32
 * arrays in a fixed order.  A negative vocab_size means the classifier is
 * stored separately (not shared with the embedding). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h> /* tk_mapfile, tk_read_file */
#include "source.h"

typedef struct llama2c_impl {
    tk_mapfile map;
    tk_tensor *tensors;
    int n_tensors;
    char *path;
} llama2c_impl;

static void llama2c_free(void *p) {
    llama2c_impl *impl = p;
    for (int i = 0; i < impl->n_tensors; i++) free(impl->tensors[i].name);
    free(impl->tensors);
    tk_mapfile_close(&impl->map);
    free(impl->path);
    free(impl);
}

/* Appends a tensor view of `rows x cols` floats at *off, or fails if the
 * file is too short. */
static int take(tk_source *src, llama2c_impl *impl, size_t *off, const char *name, int64_t cols, int64_t rows,
                tk_err *err) {
    const tk_mapfile *m = &impl->map;
    uint64_t bytes = (uint64_t)cols * (uint64_t)rows * sizeof(float);
    if (*off > m->size || bytes > m->size - *off)
        return tk_err_set(err, "checkpoint truncated: tensor '%s' needs %llu bytes at offset %zu, file has %zu",
                          name, (unsigned long long)bytes, *off, m->size);
    tk_tensor *t = &impl->tensors[impl->n_tensors];
    t->name = strdup(name);
    if (!t->name) return tk_err_set(err, "out of memory");
    src->n_tensors = ++impl->n_tensors;
    t->type = TK_F32;
    t->ndim = rows > 1 ? 2 : 1;
    t->ne[0] = cols;
    t->ne[1] = rows;
    t->ne[2] = t->ne[3] = 1;
    t->data = m->data + *off;
    t->nbytes = (size_t)bytes;
    *off += (size_t)bytes;
    return 0;
}

int tk_llama2c_source_open(const char *path, tk_source *src, tk_err *err) {
    memset(src, 0, sizeof *src);
    llama2c_impl *impl = calloc(1, sizeof *impl);
    if (!impl) return tk_err_set(err, "out of memory");
    src->impl = impl;
    src->impl_free = llama2c_free;
    src->path = impl->path = strdup(path);
    if (!impl->path) {
        tk_err_set(err, "out of memory");
        goto fail;
    }
    if (tk_mapfile_open(&impl->map, path, err)) goto fail;
    const tk_mapfile *m = &impl->map;
    if (m->size < 7 * sizeof(int32_t)) {
        tk_err_set(err, "%s: too small for a llama2.c checkpoint header (%zu bytes)", path, m->size);
        goto fail;
    }
    int32_t h[7];
    memcpy(h, m->data, sizeof h);
    int dim = h[0], hidden = h[1], n_layers = h[2], n_heads = h[3], n_kv = h[4], seq_len = h[6];
    int shared = h[5] > 0;
    int vocab = h[5] < 0 ? -(int64_t)h[5] > INT32_MAX ? 0 : -h[5] : h[5];
    /* Bounds keep every product below 2^62 and reject files that are not
     * llama2.c checkpoints at all. */
    if (dim <= 0 || dim > 65536 || hidden <= 0 || hidden > 1 << 20 || n_layers <= 0 || n_layers > 1024 ||
        n_heads <= 0 || n_heads > dim || n_kv <= 0 || n_kv > n_heads || vocab <= 0 || vocab > 1 << 22 ||
        seq_len <= 0 || seq_len > 1 << 24 || dim % n_heads != 0 || n_heads % n_kv != 0) {
        tk_err_set(err,
                   "%s: not a valid llama2.c checkpoint (header dim=%d hidden=%d layers=%d heads=%d kv_heads=%d "
                   "vocab=%d seq_len=%d)",
                   path, h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
        goto fail;
    }
    int head_dim = dim / n_heads, kv_dim = head_dim * n_kv;

    src->format = TK_FORMAT_LLAMA2C;
    snprintf(src->arch, sizeof src->arch, "llama");
    const char *base = strrchr(path, '/');
    snprintf(src->name, sizeof src->name, "%s", base ? base + 1 : path);
    tk_hparams *hp = &src->hp;
    hp->n_vocab = vocab;
    hp->dim = dim;
    hp->n_layers = n_layers;
    hp->n_heads = n_heads;
    hp->n_kv_heads = n_kv;
    hp->head_dim = head_dim;
    hp->ffn_dim = hidden;
    hp->ctx_len = seq_len;
    hp->norm_eps = 1e-5f;
    hp->rope_theta = 10000.0f;
    hp->rope_style = TK_ROPE_ADJACENT;
    hp->tied_output = shared;
    src->gen.temperature = src->gen.top_p = -1;
    src->gen.top_k = -1;

    src->tensors = impl->tensors = calloc((size_t)n_layers * 9 + 4, sizeof(tk_tensor));
    if (!impl->tensors) {
        tk_err_set(err, "out of memory");
        goto fail;
    }
    size_t off = sizeof h;
    char name[64];
    /* The file stores each kind for all layers together. */
    static const struct { const char *suffix; int kind; } order[] = {
        {"attn_norm", 0}, {"attn_q", 1}, {"attn_k", 2}, {"attn_v", 2}, {"attn_output", 3},
        {"ffn_norm", 0}, {"ffn_gate", 4}, {"ffn_down", 5}, {"ffn_up", 4},
    };
    if (take(src, impl, &off, "token_embd.weight", dim, vocab, err)) goto fail_ctx;
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        for (int l = 0; l < n_layers; l++) {
            int64_t cols = dim, rows = 1;
            switch (order[k].kind) {
            case 0: rows = 1; break;
            case 1: rows = dim; break;
            case 2: rows = kv_dim; break;
            case 3: rows = dim; break;
            case 4: rows = hidden; break;
            case 5: cols = hidden; rows = dim; break;
            }
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, order[k].suffix);
            if (take(src, impl, &off, name, cols, rows, err)) goto fail_ctx;
        }
    }
    if (take(src, impl, &off, "output_norm.weight", dim, 1, err)) goto fail_ctx;
    /* Legacy RoPE tables (unused: we compute RoPE ourselves). */
    uint64_t freq_bytes = (uint64_t)seq_len * (uint64_t)head_dim * sizeof(float);
    if (freq_bytes > m->size - off) {
        tk_err_set(err, "checkpoint truncated in the RoPE tables");
        goto fail_ctx;
    }
    off += (size_t)freq_bytes;
    if (!shared && take(src, impl, &off, "output.weight", dim, vocab, err)) goto fail_ctx;
    if (tk_source_index_tensors(src, err)) goto fail;
    return 0;

fail_ctx:
    tk_err_wrap(err, "%s", path);
fail:
    tk_source_close(src);
    return -1;
}
