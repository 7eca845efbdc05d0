#include "kv.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "../formats/dtype.h"

static size_t row_bytes_for(int head_dim, tk_kv_type type) {
    switch (type) {
    case TK_KV_F32: return (size_t)head_dim * 4;
    case TK_KV_F16: return (size_t)head_dim * 2;
    case TK_KV_Q8_0: return head_dim % 32 ? 0 : (size_t)head_dim / 32 * 34;
    }
    return 0;
}

/* a * b * c * d, or 0 when the product does not fit in size_t (or a factor
 * is negative). */
static size_t checked_product(size_t a, long long b, long long c, long long d) {
    size_t r;
    if (b < 0 || c < 0 || d < 0 || __builtin_mul_overflow(a, (size_t)b, &r) || __builtin_mul_overflow(r, (size_t)c, &r) ||
        __builtin_mul_overflow(r, (size_t)d, &r))
        return 0;
    return r;
}

size_t tk_kv_block_bytes(int n_layers, int n_kv_heads, int head_dim, int block_size, tk_kv_type type) {
    size_t one = checked_product(row_bytes_for(head_dim, type), n_layers, n_kv_heads, block_size);
    return one <= SIZE_MAX / 2 ? 2 * one : 0;
}

int tk_kv_type_from_name(const char *name) {
    if (!strcmp(name, "f32")) return TK_KV_F32;
    if (!strcmp(name, "f16")) return TK_KV_F16;
    if (!strcmp(name, "q8_0")) return TK_KV_Q8_0;
    return -1;
}

const char *tk_kv_type_name(tk_kv_type type) {
    static const char *names[] = {"f32", "f16", "q8_0"};
    return names[type];
}

void tk_kv_store(const tk_kv_pool *p, const float *x, unsigned char *row) {
    switch (p->type) {
    case TK_KV_F32: memcpy(row, x, sizeof(float) * (size_t)p->head_dim); break;
    case TK_KV_F16: tk_quantize_row_f16(x, row, p->head_dim); break;
    case TK_KV_Q8_0: tk_quantize_row_q8_0(x, row, p->head_dim); break;
    }
}

void tk_kv_load(const tk_kv_pool *p, const unsigned char *rows, int n, float *out) {
    switch (p->type) {
    case TK_KV_F32: memcpy(out, rows, sizeof(float) * (size_t)p->head_dim * n); break;
    case TK_KV_F16: tk_dequant_row(TK_F16, rows, out, (int64_t)p->head_dim * n); break;
    case TK_KV_Q8_0: tk_dequant_row(TK_Q8_0, rows, out, (int64_t)p->head_dim * n); break;
    }
}

/* The K and V pools on transparent huge pages where the OS offers them
 * (Linux "madvise" mode): a long-context decode reads, per block, one run of
 * block_size rows of one (layer, head) and then jumps a whole block ahead,
 * so with 4 KB pages nearly every run costs a TLB miss (and, in a VM, a
 * nested page walk). */
static void *pool_alloc(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const size_t huge = (size_t)2 << 20;
    if (bytes >= huge) {
        void *p = NULL;
        const size_t rounded = (bytes + huge - 1) / huge * huge;
        if (posix_memalign(&p, huge, rounded)) return NULL;
        (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint: 4 KB pages if refused */
        return p;
    }
#endif
    return malloc(bytes);
}

int tk_kv_pool_init(tk_kv_pool *p, int n_layers, int n_kv_heads, int head_dim, int block_size, int n_blocks,
                    tk_kv_type type, bool prefix_cache, tk_err *err) {
    memset(p, 0, sizeof *p);
    if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || block_size <= 0 || n_blocks <= 0)
        return tk_err_set(err, "invalid KV pool shape");
    p->n_layers = n_layers;
    p->n_kv_heads = n_kv_heads;
    p->head_dim = head_dim;
    p->block_size = block_size;
    p->n_blocks = n_blocks;
    p->prefix_cache = prefix_cache;
    p->type = type;
    p->row_bytes = row_bytes_for(head_dim, type);
    if (!p->row_bytes) return tk_err_set(err, "KV type %s needs a head dimension multiple of 32 (have %d)",
                                         tk_kv_type_name(type), head_dim);
    p->block_bytes = checked_product(p->row_bytes, n_layers, n_kv_heads, block_size);
    const size_t total = checked_product(p->block_bytes, n_blocks, 1, 1);
    if (!total || total > SIZE_MAX / 2 || !checked_product(sizeof(int32_t), n_blocks, block_size, 1)) {
        memset(p, 0, sizeof *p);
        return tk_err_set(err, "a KV pool of %d blocks x %d tokens, %d layers x %d heads x %d dims is too large",
                          n_blocks, block_size, n_layers, n_kv_heads, head_dim);
    }
    uint32_t buckets = 1;
    while (buckets < (uint32_t)n_blocks) buckets <<= 1;
    p->bucket_mask = buckets - 1;
    p->k = pool_alloc(total);
    p->v = pool_alloc(total);
    p->refcount = calloc((size_t)n_blocks, sizeof(int));
    p->free_list = malloc((size_t)n_blocks * sizeof(int));
    p->hash = calloc((size_t)n_blocks, sizeof(uint64_t));
    p->registered = calloc((size_t)n_blocks, sizeof(bool));
    p->tokens = malloc((size_t)n_blocks * block_size * sizeof(int32_t));
    p->bucket = malloc((size_t)buckets * sizeof(int));
    p->bucket_next = malloc((size_t)n_blocks * sizeof(int));
    p->lru_prev = malloc((size_t)n_blocks * sizeof(int));
    p->lru_next = malloc((size_t)n_blocks * sizeof(int));
    if (!p->k || !p->v || !p->refcount || !p->free_list || !p->hash || !p->registered || !p->tokens ||
        !p->bucket || !p->bucket_next || !p->lru_prev || !p->lru_next) {
        tk_kv_pool_free(p);
        return tk_err_set(err, "cannot allocate a KV pool of %zu MiB", 2 * total >> 20);
    }
    for (uint32_t i = 0; i < buckets; i++) p->bucket[i] = -1;
    /* Hand out low block ids first. */
    for (int i = 0; i < n_blocks; i++) p->free_list[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    return 0;
}

void tk_kv_pool_free(tk_kv_pool *p) {
    free(p->k);
    free(p->v);
    free(p->refcount);
    free(p->free_list);
    free(p->hash);
    free(p->registered);
    free(p->tokens);
    free(p->bucket);
    free(p->bucket_next);
    free(p->lru_prev);
    free(p->lru_next);
    memset(p, 0, sizeof *p);
}

size_t tk_kv_pool_bytes(const tk_kv_pool *p) { return 2 * p->block_bytes * (size_t)p->n_blocks; }

/* ---- LRU of cached blocks ---- */

static void lru_remove(tk_kv_pool *p, int b) {
    int prev = p->lru_prev[b], next = p->lru_next[b];
    if (prev >= 0) p->lru_next[prev] = next;
    else p->lru_head = next;
    if (next >= 0) p->lru_prev[next] = prev;
    else p->lru_tail = prev;
    p->n_cached--;
}

static void lru_push(tk_kv_pool *p, int b) {
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_cached++;
}

/* ---- hash buckets ---- */

static void unregister(tk_kv_pool *p, int b) {
    if (!p->registered[b]) return;
    int *link = &p->bucket[p->hash[b] & p->bucket_mask];
    while (*link != b) link = &p->bucket_next[*link];
    *link = p->bucket_next[b];
    p->registered[b] = false;
}

static int find_block(const tk_kv_pool *p, uint64_t hash, const int32_t *tokens) {
    for (int b = p->bucket[hash & p->bucket_mask]; b >= 0; b = p->bucket_next[b])
        if (p->hash[b] == hash &&
            !memcmp(p->tokens + (size_t)b * p->block_size, tokens, sizeof(int32_t) * p->block_size))
            return b;
    return -1;
}

uint64_t tk_kv_block_hash(uint64_t parent, const int32_t *tokens, int n) {
    /* FNV-style mixing with a final avalanche; collisions are harmless
     * because lookups also compare the tokens. */
    uint64_t h = parent ^ 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)tokens[i];
        h *= 0x100000001b3ULL;
        h ^= h >> 29;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h ? h : 1;
}

/* ---- allocation ---- */

static int alloc_block(tk_kv_pool *p) {
    int b;
    if (p->n_free > 0) {
        b = p->free_list[--p->n_free];
    } else if (p->lru_head >= 0) {
        b = p->lru_head; /* evict the least recently used cached block */
        lru_remove(p, b);
        unregister(p, b);
        p->evictions++;
    } else {
        return -1;
    }
    p->refcount[b] = 1;
    return b;
}

static void release_block(tk_kv_pool *p, int b) {
    if (--p->refcount[b] > 0) return;
    if (p->registered[b])
        lru_push(p, b);
    else
        p->free_list[p->n_free++] = b;
}

static int grow_table(tk_kv_seq *s, int need, tk_err *err) {
    if (need <= s->cap) return 0;
    int cap = s->cap ? s->cap : 8;
    while (cap < need) cap *= 2;
    int *nb = realloc(s->blocks, (size_t)cap * sizeof(int));
    if (!nb) return tk_err_set(err, "out of memory");
    s->blocks = nb;
    s->cap = cap;
    return 0;
}

int tk_kv_seq_reserve(tk_kv_pool *p, tk_kv_seq *s, int n_tokens, tk_err *err) {
    int need = (n_tokens + p->block_size - 1) / p->block_size;
    if (need <= s->n_blocks) return 0;
    if (need - s->n_blocks > tk_kv_available(p))
        return tk_err_set(err, "KV cache full: need %d more blocks, %d available", need - s->n_blocks,
                          tk_kv_available(p));
    if (grow_table(s, need, err)) return -1;
    while (s->n_blocks < need) s->blocks[s->n_blocks++] = alloc_block(p);
    return 0;
}

int tk_kv_seq_blocks_needed(const tk_kv_pool *p, const tk_kv_seq *s, int from, int to) {
    if (to <= from) return 0;
    int first = from / p->block_size, last = (to - 1) / p->block_size, need = 0;
    for (int i = first; i <= last; i++)
        if (i >= s->n_blocks || s->blocks[i] < 0 || p->refcount[s->blocks[i]] > 1) need++;
    return need;
}

void tk_kv_copy_block(tk_kv_pool *p, int src, int dst) {
    memcpy(p->k + (size_t)dst * p->block_bytes, p->k + (size_t)src * p->block_bytes, p->block_bytes);
    memcpy(p->v + (size_t)dst * p->block_bytes, p->v + (size_t)src * p->block_bytes, p->block_bytes);
}

int tk_kv_seq_prepare_write(tk_kv_pool *p, tk_kv_seq *s, int from, int to, tk_err *err) {
    if (to <= from) return 0;
    int first = from / p->block_size, last = (to - 1) / p->block_size;
    if (first < s->n_dropped)
        return tk_err_set(err, "position %d lies in a KV block released by the sliding window", from);
    for (int i = first; i <= last && i < s->n_blocks; i++) {
        int b = s->blocks[i];
        if (p->refcount[b] > 1) {
            int nb = alloc_block(p);
            if (nb < 0) return tk_err_set(err, "KV cache full: no block for copy-on-write");
            tk_kv_copy_block(p, b, nb);
            if (p->on_copy) p->on_copy(p->on_copy_ctx, b, nb);
            p->refcount[b]--;
            s->blocks[i] = nb;
        } else {
            /* Its contents are about to change: it no longer matches its hash. */
            unregister(p, b);
        }
    }
    return 0;
}

void tk_kv_seq_shrink(tk_kv_pool *p, tk_kv_seq *s, int n_blocks) {
    while (s->n_blocks > n_blocks) {
        int b = s->blocks[--s->n_blocks];
        if (b >= 0) release_block(p, b);
    }
    if (s->n_dropped > s->n_blocks) s->n_dropped = s->n_blocks;
}

int tk_kv_seq_drop_before(tk_kv_pool *p, tk_kv_seq *s, int pos) {
    int upto = pos > 0 ? pos / p->block_size : 0; /* blocks [0, upto) end at or before pos */
    if (upto > s->n_blocks) upto = s->n_blocks;
    int n = 0;
    for (; s->n_dropped < upto; s->n_dropped++) {
        int b = s->blocks[s->n_dropped];
        if (b < 0) continue;
        release_block(p, b);
        s->blocks[s->n_dropped] = -1;
        n++;
    }
    return n;
}

void tk_kv_seq_truncate(tk_kv_pool *p, tk_kv_seq *s, int len) {
    if (len < 0) len = 0;
    if (len < s->len) s->len = len;
    if (s->n_hashed > len / p->block_size) {
        /* the chain restarts at block 0: hashes depend on tokens alone */
        s->n_hashed = 0;
        s->last_hash = 0;
    }
    tk_kv_seq_shrink(p, s, (len + p->block_size - 1) / p->block_size);
}

void tk_kv_seq_release(tk_kv_pool *p, tk_kv_seq *s) {
    tk_kv_seq_truncate(p, s, 0);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}

int tk_kv_seq_fork(tk_kv_pool *p, const tk_kv_seq *src, tk_kv_seq *dst, tk_err *err) {
    if (grow_table(dst, src->n_blocks, err)) return -1;
    for (int i = 0; i < src->n_blocks; i++) {
        dst->blocks[i] = src->blocks[i];
        if (src->blocks[i] >= 0) p->refcount[src->blocks[i]]++;
    }
    dst->n_blocks = src->n_blocks;
    dst->n_dropped = src->n_dropped;
    dst->len = src->len;
    dst->n_hashed = src->n_hashed;
    dst->last_hash = src->last_hash;
    return 0;
}

int tk_kv_seq_match_prefix(tk_kv_pool *p, tk_kv_seq *s, const int32_t *tokens, int max_blocks) {
    if (!p->prefix_cache || s->n_blocks != 0) return 0;
    uint64_t h = 0;
    int n = 0;
    tk_err err;
    while (n < max_blocks) {
        const int32_t *bt = tokens + (size_t)n * p->block_size;
        uint64_t nh = tk_kv_block_hash(h, bt, p->block_size);
        int b = find_block(p, nh, bt);
        if (b < 0 || grow_table(s, n + 1, &err)) break;
        if (p->refcount[b] == 0) lru_remove(p, b);
        p->refcount[b]++;
        s->blocks[s->n_blocks++] = b;
        h = nh;
        n++;
    }
    s->len = n * p->block_size;
    s->n_hashed = n;
    s->last_hash = h;
    return n;
}

/* Registers full block i of the sequence, holding block_tokens, under
 * hash(parent, block_tokens); returns that hash (for the next block). */
static uint64_t register_block(tk_kv_pool *p, const tk_kv_seq *s, int i, uint64_t parent,
                               const int32_t *block_tokens) {
    uint64_t h = tk_kv_block_hash(parent, block_tokens, p->block_size);
    if (!p->prefix_cache || i >= s->n_blocks || s->blocks[i] < 0) return h;
    int b = s->blocks[i];
    if (p->registered[b] || find_block(p, h, block_tokens) >= 0) return h;
    p->hash[b] = h;
    memcpy(p->tokens + (size_t)b * p->block_size, block_tokens, sizeof(int32_t) * p->block_size);
    p->bucket_next[b] = p->bucket[h & p->bucket_mask];
    p->bucket[h & p->bucket_mask] = b;
    p->registered[b] = true;
    return h;
}

void tk_kv_seq_register_prefix(tk_kv_pool *p, tk_kv_seq *s, const int32_t *tokens, int n_tokens) {
    int full = n_tokens / p->block_size;
    while (s->n_hashed < full) {
        s->last_hash = register_block(p, s, s->n_hashed, s->last_hash, tokens + (size_t)s->n_hashed * p->block_size);
        s->n_hashed++;
    }
}
