/* Paged KV cache: one preallocated pool of fixed-size blocks shared by all
 * sequences.  A sequence owns a block table (logical block i -> pool block)
 * and a length.
 *
 * Blocks are reference counted: sequences forked from one prompt share its
 * blocks, and a shared block is copied before it is written (copy on write).
 * Automatic prefix caching: a full block can be registered under the hash of
 * its tokens chained with its parent block's hash; a later sequence with the
 * same prefix finds it and reuses it.  A registered block whose last user
 * leaves stays cached (LRU) until its space is needed.
 *
 * Block states: free (refcount 0, unregistered, on the free stack), cached
 * (refcount 0, registered, on the LRU list), used (refcount > 0). */
#ifndef TK_KV_H
#define TK_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

/* How K/V vectors are stored: float32, float16, or int8 blocks of 32 with
 * a float16 scale (GGML's Q8_0 layout). */
typedef enum tk_kv_type { TK_KV_F32 = 0, TK_KV_F16 = 1, TK_KV_Q8_0 = 2 } tk_kv_type;

typedef struct tk_kv_pool {
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int block_size;      /* tokens per block */
    int n_blocks;
    tk_kv_type type;
    size_t row_bytes;    /* one (token, head) vector */
    size_t block_bytes;  /* K (or V) of one block, all layers */
    unsigned char *k;    /* [n_blocks][n_layers][n_kv_heads][block_size] rows */
    unsigned char *v;
    int *refcount;
    int *free_list;      /* stack of free block ids */
    int n_free;
    /* prefix cache */
    bool prefix_cache;
    uint64_t *hash;      /* per block; meaningful when registered[b] */
    bool *registered;
    int32_t *tokens;     /* [n_blocks][block_size]: tokens of registered blocks */
    int *bucket;         /* hash buckets -> first block, -1 empty */
    int *bucket_next;    /* per block: next block in the same bucket */
    uint32_t bucket_mask;
    int *lru_prev, *lru_next; /* cached blocks, oldest at lru_head */
    int lru_head, lru_tail;
    int n_cached;
    uint64_t evictions;
    /* Told of every copy-on-write block copy (src -> dst), NULL: nobody.
     * Tensor parallelism replays the copies on the other ranks' pools. */
    void (*on_copy)(void *ctx, int src, int dst);
    void *on_copy_ctx;
} tk_kv_pool;

typedef struct tk_kv_seq {
    int *blocks;      /* block table; -1 for a released entry */
    int n_blocks;
    int cap;
    int len;          /* tokens whose K/V are stored */
    /* Sliding-window release (models whose layers all slide): the entries
     * blocks[0, n_dropped) have been given back to the pool, so positions
     * before n_dropped * block_size no longer have K/V.  The table keeps its
     * logical indexing (block i holds positions [i*bs, (i+1)*bs)). */
    int n_dropped;
    /* Prefix cache: blocks [0, n_hashed) have been registered (or matched)
     * and last_hash is the chained hash of block n_hashed - 1. */
    int n_hashed;
    uint64_t last_hash;
} tk_kv_seq;

int tk_kv_pool_init(tk_kv_pool *p, int n_layers, int n_kv_heads, int head_dim, int block_size, int n_blocks,
                    tk_kv_type type, bool prefix_cache, tk_err *err);
/* Bytes of one block (K and V, all layers) for a shape and type; 0 if the
 * type cannot store head_dim (Q8_0 needs a multiple of 32) or the size does
 * not fit in size_t. */
size_t tk_kv_block_bytes(int n_layers, int n_kv_heads, int head_dim, int block_size, tk_kv_type type);
/* "f32", "f16", "q8_0" -> type; -1 if unknown. */
int tk_kv_type_from_name(const char *name);
const char *tk_kv_type_name(tk_kv_type type);
void tk_kv_pool_free(tk_kv_pool *p);
size_t tk_kv_pool_bytes(const tk_kv_pool *p);
/* Blocks a new allocation can get: free + cached (evictable). */
static inline int tk_kv_available(const tk_kv_pool *p) { return p->n_free + p->n_cached; }
static inline int tk_kv_used(const tk_kv_pool *p) { return p->n_blocks - p->n_free - p->n_cached; }

/* Ensures the sequence has blocks for positions [0, n_tokens).  Fails
 * (without changing anything) if the pool has too few blocks. */
int tk_kv_seq_reserve(tk_kv_pool *p, tk_kv_seq *s, int n_tokens, tk_err *err);
/* New blocks (allocations and copies) that writing positions [from, to)
 * would need. */
int tk_kv_seq_blocks_needed(const tk_kv_pool *p, const tk_kv_seq *s, int from, int to);
/* Makes the blocks holding positions [from, to) writable by this sequence
 * alone: shared blocks are copied, registered ones unregistered.  Call after
 * reserve, before writing K/V.  Fails only when the pool is exhausted. */
int tk_kv_seq_prepare_write(tk_kv_pool *p, tk_kv_seq *s, int from, int to, tk_err *err);
/* Releases the blocks that lie wholly before position `pos` (they are
 * marked -1 in the table; shared or cached blocks just lose this
 * sequence's reference).  For sliding-window models: pos = next position -
 * window + 1.  Returns how many blocks were released. */
int tk_kv_seq_drop_before(tk_kv_pool *p, tk_kv_seq *s, int pos);
/* Drops positions >= len, releasing blocks no longer needed (and the
 * prefix-hash state past len: it is rebuilt from the tokens on the next
 * registration). */
void tk_kv_seq_truncate(tk_kv_pool *p, tk_kv_seq *s, int len);
/* Gives back blocks past the first n_blocks (undoes a reservation). */
void tk_kv_seq_shrink(tk_kv_pool *p, tk_kv_seq *s, int n_blocks);
/* Releases all blocks and the table. */
void tk_kv_seq_release(tk_kv_pool *p, tk_kv_seq *s);
/* dst (empty) shares all of src's blocks (released entries stay released)
 * and its prefix-hash state. */
int tk_kv_seq_fork(tk_kv_pool *p, const tk_kv_seq *src, tk_kv_seq *dst, tk_err *err);

/* ---- prefix cache ---- */
uint64_t tk_kv_block_hash(uint64_t parent, const int32_t *tokens, int n);
/* Appends to the (empty) sequence the cached blocks matching the prefix of
 * tokens (full blocks only, at most max_blocks); returns how many matched.
 * They count as registered for tk_kv_seq_register_prefix. */
int tk_kv_seq_match_prefix(tk_kv_pool *p, tk_kv_seq *s, const int32_t *tokens, int max_blocks);
/* Registers every full block among positions [0, n_tokens) not registered
 * yet, each under the hash of its tokens chained with its parent's (tokens:
 * the sequence's tokens from position 0). */
void tk_kv_seq_register_prefix(tk_kv_pool *p, tk_kv_seq *s, const int32_t *tokens, int n_tokens);

/* Address of the stored K (or V) row of (layer, kv_head) at position pos. */
static inline unsigned char *tk_kv_k(const tk_kv_pool *p, const tk_kv_seq *s, int layer, int head, int pos) {
    int b = s->blocks[pos / p->block_size], slot = pos % p->block_size;
    return p->k + (size_t)b * p->block_bytes +
           (((size_t)layer * p->n_kv_heads + head) * p->block_size + slot) * p->row_bytes;
}
static inline unsigned char *tk_kv_v(const tk_kv_pool *p, const tk_kv_seq *s, int layer, int head, int pos) {
    int b = s->blocks[pos / p->block_size], slot = pos % p->block_size;
    return p->v + (size_t)b * p->block_bytes +
           (((size_t)layer * p->n_kv_heads + head) * p->block_size + slot) * p->row_bytes;
}

/* Copies block src's K and V (all layers) into block dst. */
void tk_kv_copy_block(tk_kv_pool *p, int src, int dst);

/* Stores a float vector of head_dim values as one row of the pool's type. */
void tk_kv_store(const tk_kv_pool *p, const float *x, unsigned char *row);
/* Loads n consecutive rows (as laid out in a block) into floats. */
void tk_kv_load(const tk_kv_pool *p, const unsigned char *rows, int n, float *out);

#endif
