#include "kv.h"

#include <stdlib.h>
#include <string.h>

int tk_kv_pool_init(tk_kv_pool *p, int n_layers, int n_kv_heads, int head_dim, int block_size, int n_blocks,
                    tk_err *err) {
    memset(p, 0, sizeof *p);
    if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || block_size <= 0 || n_blocks <= 0)
        return tk_err_set(err, "invalid KV pool shape");
    p->n_layers = n_layers;
    p->n_kv_heads = n_kv_heads;
    p->head_dim = head_dim;
    p->block_size = block_size;
    p->n_blocks = n_blocks;
    p->block_floats = (size_t)n_layers * n_kv_heads * block_size * head_dim;
    size_t total = p->block_floats * (size_t)n_blocks;
    p->k = malloc(total * sizeof(float));
    p->v = malloc(total * sizeof(float));
    p->refcount = calloc((size_t)n_blocks, sizeof(int));
    p->free_list = malloc((size_t)n_blocks * sizeof(int));
    if (!p->k || !p->v || !p->refcount || !p->free_list) {
        tk_kv_pool_free(p);
        return tk_err_set(err, "cannot allocate KV pool of %zu MiB", 2 * total * sizeof(float) >> 20);
    }
    /* Hand out low block ids first. */
    for (int i = 0; i < n_blocks; i++) p->free_list[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return 0;
}

void tk_kv_pool_free(tk_kv_pool *p) {
    free(p->k);
    free(p->v);
    free(p->refcount);
    free(p->free_list);
    memset(p, 0, sizeof *p);
}

size_t tk_kv_pool_bytes(const tk_kv_pool *p) { return 2 * p->block_floats * (size_t)p->n_blocks * sizeof(float); }

int tk_kv_seq_reserve(tk_kv_pool *p, tk_kv_seq *s, int n_tokens, tk_err *err) {
    int need = (n_tokens + p->block_size - 1) / p->block_size;
    if (need <= s->n_blocks) return 0;
    if (need - s->n_blocks > p->n_free)
        return tk_err_set(err, "KV cache full: need %d more blocks, %d free", need - s->n_blocks, p->n_free);
    if (need > s->cap) {
        int cap = s->cap ? s->cap : 8;
        while (cap < need) cap *= 2;
        int *nb = realloc(s->blocks, (size_t)cap * sizeof(int));
        if (!nb) return tk_err_set(err, "out of memory");
        s->blocks = nb;
        s->cap = cap;
    }
    while (s->n_blocks < need) {
        int b = p->free_list[--p->n_free];
        p->refcount[b] = 1;
        s->blocks[s->n_blocks++] = b;
    }
    return 0;
}

static void release_block(tk_kv_pool *p, int b) {
    if (--p->refcount[b] == 0) p->free_list[p->n_free++] = b;
}

void tk_kv_seq_shrink(tk_kv_pool *p, tk_kv_seq *s, int n_blocks) {
    while (s->n_blocks > n_blocks) release_block(p, s->blocks[--s->n_blocks]);
}

void tk_kv_seq_truncate(tk_kv_pool *p, tk_kv_seq *s, int len) {
    if (len < 0) len = 0;
    if (len < s->len) s->len = len;
    tk_kv_seq_shrink(p, s, (len + p->block_size - 1) / p->block_size);
}

void tk_kv_seq_release(tk_kv_pool *p, tk_kv_seq *s) {
    tk_kv_seq_truncate(p, s, 0);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}
