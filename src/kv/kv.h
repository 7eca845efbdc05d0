/* Paged KV cache: one preallocated pool of fixed-size blocks shared by all
 * sequences.  A sequence owns a block table (logical block i -> pool block)
 * and a length.  Blocks are reference counted so that later layers (prefix
 * sharing, copy-on-write) can share them. */
#ifndef TK_KV_H
#define TK_KV_H

#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

typedef struct tk_kv_pool {
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int block_size;   /* tokens per block */
    int n_blocks;
    size_t block_floats; /* floats of K (or V) per block, all layers */
    float *k;            /* [n_blocks][n_layers][n_kv_heads][block_size][head_dim] */
    float *v;
    int *refcount;
    int *free_list;      /* stack of free block ids */
    int n_free;
} tk_kv_pool;

typedef struct tk_kv_seq {
    int *blocks;      /* block table */
    int n_blocks;
    int cap;
    int len;          /* tokens whose K/V are stored */
} tk_kv_seq;

int tk_kv_pool_init(tk_kv_pool *p, int n_layers, int n_kv_heads, int head_dim, int block_size, int n_blocks,
                    tk_err *err);
void tk_kv_pool_free(tk_kv_pool *p);
size_t tk_kv_pool_bytes(const tk_kv_pool *p);

/* Ensures the sequence has blocks for positions [0, n_tokens).  Fails
 * (without changing anything) if the pool has too few free blocks. */
int tk_kv_seq_reserve(tk_kv_pool *p, tk_kv_seq *s, int n_tokens, tk_err *err);
/* Drops positions >= len, releasing blocks no longer needed. */
void tk_kv_seq_truncate(tk_kv_pool *p, tk_kv_seq *s, int len);
/* Gives back blocks past the first n_blocks (undoes a reservation). */
void tk_kv_seq_shrink(tk_kv_pool *p, tk_kv_seq *s, int n_blocks);
/* Releases all blocks and the table. */
void tk_kv_seq_release(tk_kv_pool *p, tk_kv_seq *s);

/* Address of the K (or V) vector of (layer, kv_head) for position pos. */
static inline float *tk_kv_k(const tk_kv_pool *p, const tk_kv_seq *s, int layer, int head, int pos) {
    int b = s->blocks[pos / p->block_size], slot = pos % p->block_size;
    return p->k + (size_t)b * p->block_floats +
           (((size_t)layer * p->n_kv_heads + head) * p->block_size + slot) * p->head_dim;
}
static inline float *tk_kv_v(const tk_kv_pool *p, const tk_kv_seq *s, int layer, int head, int pos) {
    int b = s->blocks[pos / p->block_size], slot = pos % p->block_size;
    return p->v + (size_t)b * p->block_floats +
           (((size_t)layer * p->n_kv_heads + head) * p->block_size + slot) * p->head_dim;
}

#endif
