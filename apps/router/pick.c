/* Replica choice: rendezvous (highest-random-weight) hashing of the prompt's
 * first KV blocks over the healthy replicas, so a prefix keeps its replica
 * while replicas come and go (only the keys of a lost replica move), and a
 * load rule that leaves the top-ranked replica when it is much busier than
 * the least busy one. */
#include <string.h>

#include "router.h"

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t tk_router_hash(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ULL; /* FNV-1a */
    return h;
}

uint64_t tk_router_prefix_key(const int *ids, int n, int block_size, int affinity_blocks) {
    if (block_size < 1) block_size = 1;
    int take = n;
    if (n >= block_size) {
        int blocks = n / block_size;
        if (blocks > affinity_blocks) blocks = affinity_blocks;
        take = blocks * block_size;
    }
    uint64_t h = TK_ROUTER_HASH_SEED;
    for (int i = 0; i < take; i++) {
        unsigned char b[4] = {(unsigned char)ids[i], (unsigned char)(ids[i] >> 8), (unsigned char)(ids[i] >> 16),
                              (unsigned char)(ids[i] >> 24)}; /* little-endian, whatever the host */
        h = tk_router_hash(h, b, 4);
    }
    return h;
}

/* The scraped load, or this router's own requests on the replica when more
 * (a burst since the last scrape). */
static int load_of(const tk_backend *b) {
    int scraped = atomic_load(&b->load), mine = atomic_load(&b->inflight);
    return scraped > mine ? scraped : mine;
}

int tk_router_order(tk_router *r, uint64_t key, int *order, bool *diverted) {
    int n = 0;
    *diverted = false;
    for (int i = 0; i < r->n_backends; i++)
        if (atomic_load(&r->backends[i].healthy)) order[n++] = i;
    if (n == 0) /* none known healthy: try them all rather than refuse */
        for (int i = 0; i < r->n_backends; i++) order[n++] = i;
    if (r->policy == TK_POLICY_ROUND_ROBIN) {
        unsigned start = atomic_fetch_add(&r->rr_next, 1) % (unsigned)n;
        int tmp[TK_ROUTER_MAX_BACKENDS];
        for (int i = 0; i < n; i++) tmp[i] = order[(start + (unsigned)i) % (unsigned)n];
        memcpy(order, tmp, (size_t)n * sizeof *order);
        return n;
    }
    uint64_t score[TK_ROUTER_MAX_BACKENDS];
    for (int i = 0; i < n; i++) score[i] = mix64(key ^ r->backends[order[i]].id_hash);
    for (int i = 1; i < n; i++) { /* insertion sort, highest score first (n <= 64) */
        int o = order[i];
        uint64_t s = score[i];
        int j = i - 1;
        for (; j >= 0 && score[j] < s; j--) {
            score[j + 1] = score[j];
            order[j + 1] = order[j];
        }
        score[j + 1] = s;
        order[j + 1] = o;
    }
    /* Load rule: the first in rank order whose load is within threshold of
     * the least loaded replica's and whose KV cache is not nearly full
     * (when some replica's is not) moves to the front; the others keep
     * their rank order as the retry order. */
    int min_load = -1;
    bool any_kv_room = false;
    for (int i = 0; i < n; i++) {
        const tk_backend *b = &r->backends[order[i]];
        int l = load_of(b);
        if (min_load < 0 || l < min_load) min_load = l;
        if (atomic_load(&b->kv_permille) < 950) any_kv_room = true;
    }
    for (int i = 0; i < n; i++) {
        const tk_backend *b = &r->backends[order[i]];
        if (load_of(b) > min_load + r->load_threshold) continue;
        if (any_kv_room && atomic_load(&b->kv_permille) >= 950) continue;
        if (i > 0) {
            int chosen = order[i];
            memmove(order + 1, order, (size_t)i * sizeof *order);
            order[0] = chosen;
            *diverted = true;
        }
        break;
    }
    return n;
}
