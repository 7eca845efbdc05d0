/* Token masks: which tokens' bytes a grammar state allows, by walking the
 * vocabulary in byte order (an implicit trie) with one state per depth. */
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

typedef struct entry {
    const uint8_t *p;
    int len;
    int32_t id, tag;
    uint16_t skip;
} entry;

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    int n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, (size_t)n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    if (x->skip != y->skip) return x->skip < y->skip ? -1 : 1;
    return x->tag < y->tag ? -1 : x->tag > y->tag;
}

int tk_gwalk_sort(const tk_gvocab *v, const int32_t *ids, const uint16_t *skip, const int32_t *tag, int n,
                  const tk_gwalk_out *out, tk_err *err) {
    if (n < 0) return tk_err_set(err, "grammar: negative item count");
    entry *e = malloc(sizeof(entry) * (size_t)(n ? n : 1));
    if (!e) return tk_err_set(err, "out of memory");
    for (int i = 0; i < n; i++) {
        uint16_t sk = skip ? skip[i] : 0;
        e[i] = (entry){.p = v->blob + v->off[ids[i]] + sk, .len = v->len[ids[i]] - sk, .id = ids[i], .tag = tag ? tag[i] : 0,
                       .skip = sk};
    }
    qsort(e, (size_t)n, sizeof(entry), cmp_entry);
    for (int i = 0; i < n; i++) {
        out->ids[i] = e[i].id;
        if (out->skip) out->skip[i] = e[i].skip;
        if (out->tag) out->tag[i] = e[i].tag;
        int l = 0;
        if (i > 0)
            while (l < e[i].len && l < e[i - 1].len && e[i].p[l] == e[i - 1].p[l]) l++;
        out->lcp[i] = (uint16_t)l;
    }
    free(e);
    /* next[], right to left, with a stack of the items still waiting for theirs */
    int32_t *stack = malloc(sizeof(int32_t) * (size_t)(n ? n : 1)), top = 0;
    if (!stack) return tk_err_set(err, "out of memory");
    for (int i = n - 1; i >= 0; i--) {
        while (top > 0 && out->lcp[stack[top - 1]] >= out->lcp[i]) top--;
        out->next[i] = top > 0 ? stack[top - 1] : n;
        stack[top++] = i;
    }
    free(stack);
    return 0;
}

void tk_gvocab_free(tk_gvocab *v) {
    free(v->order);
    free(v->lcp);
    free(v->next);
    free(v->off);
    free(v->len);
    free(v->blob);
    free(v->eog);
    *v = (tk_gvocab){0};
}

int tk_gvocab_init(tk_gvocab *v, const tk_tokenizer *t, tk_err *err) {
    *v = (tk_gvocab){0};
    int n = tk_tokenizer_n_vocab(t);
    if (n <= 0) return tk_err_set(err, "grammar: empty vocabulary");
    v->n_vocab = n;
    size_t cap = 1 << 16, used = 0;
    uint8_t buf[TK_GVOCAB_MAX_TOKEN_BYTES];
    int32_t *ids = NULL;
    v->off = calloc((size_t)n, sizeof(uint32_t));
    v->len = calloc((size_t)n, sizeof(uint16_t));
    v->order = malloc(sizeof(int32_t) * (size_t)n);
    v->lcp = malloc(sizeof(uint16_t) * (size_t)n);
    v->next = malloc(sizeof(int32_t) * (size_t)n);
    v->eog = malloc(sizeof(int32_t) * (size_t)n);
    v->blob = malloc(cap);
    ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!v->off || !v->len || !v->order || !v->lcp || !v->next || !v->eog || !v->blob || !ids) goto oom;
    for (int id = 0; id < n; id++) {
        if (tk_tokenizer_is_eog(t, id)) {
            v->eog[v->n_eog++] = id;
            continue;
        }
        int ty = tk_tokenizer_token_type(t, id);
        if (ty == TK_TOKEN_CONTROL || ty == TK_TOKEN_UNKNOWN || ty == TK_TOKEN_UNUSED) continue; /* never allowed */
        int k = tk_token_to_bytes(t, -1, id, false, (char *)buf, (int)sizeof buf);
        if (k <= 0) continue; /* empty, or longer than any grammar needs one token to be: left out */
        if (used + (size_t)k > cap) {
            while (used + (size_t)k > cap) cap *= 2;
            uint8_t *nb = realloc(v->blob, cap);
            if (!nb) goto oom;
            v->blob = nb;
        }
        memcpy(v->blob + used, buf, (size_t)k);
        v->off[id] = (uint32_t)used;
        v->len[id] = (uint16_t)k;
        used += (size_t)k;
        if (k > v->max_len) v->max_len = k;
        ids[v->n_order++] = id;
    }
    if (tk_gwalk_sort(v, ids, NULL, NULL, v->n_order, &(tk_gwalk_out){.ids = v->order, .lcp = v->lcp, .next = v->next}, err)) {
        free(ids);
        tk_gvocab_free(v);
        return -1;
    }
    free(ids);
    return 0;
oom:
    free(ids);
    tk_gvocab_free(v);
    return tk_err_set(err, "out of memory");
}

void tk_gmasker_free(tk_gmasker *m) {
    for (int i = 0; i < m->n_depth; i++) tk_gstate_free(&m->depth[i]);
    free(m->depth);
    tk_gstate_free(&m->rest);
    free(m->want);
    free(m->pend);
    *m = (tk_gmasker){0};
}

/* The first item after i that does not share its first k + 1 bytes (item i
 * was refused at byte k): items j with lcp[j] > k do, and next[] jumps over
 * runs of them. */
static int subtree_end(const tk_gwalk_list *l, int i, int k) {
    int j = i + 1;
    while (j < l->n && l->lcp[j] > k) j = l->next[j];
    return j;
}

int tk_gwalk(tk_gmasker *m, const tk_gvocab *v, const tk_gwalk_list *l, const tk_gstate *s, tk_gwalk_fn fn, void *ctx,
             tk_err *err) {
    if (m->n_depth < v->max_len + 1) {
        tk_gstate *d = realloc(m->depth, sizeof(tk_gstate) * (size_t)(v->max_len + 1));
        if (!d) return tk_err_set(err, "out of memory");
        for (int i = m->n_depth; i <= v->max_len; i++) d[i] = (tk_gstate){0};
        m->depth = d;
        m->n_depth = v->max_len + 1;
    }
    int valid = 0; /* depth[1..valid] hold the states along the last walked item's bytes */
    for (int i = 0; i < l->n;) {
        if (l->lcp[i] < valid) valid = l->lcp[i]; /* what item i shares with it */
        if (l->want && !l->want[l->tag[i]]) {
            i++;
            continue;
        }
        int id = l->ids[i], sk = l->skip ? l->skip[i] : 0, len = v->len[id] - sk;
        const uint8_t *b = v->blob + v->off[id] + sk;
        int k = valid;
        for (; k < len; k++) {
            const tk_gstate *from = k == 0 ? s : &m->depth[k];
            int rc = tk_gstate_step(from, b[k], &m->depth[k + 1], err);
            if (rc < 0) return -1;
            /* a byte costs its expansion: up to the matcher's per-byte bound */
            m->steps += 1 + (uint64_t)m->depth[k + 1].expand_steps;
            if (m->max_steps && m->steps > m->max_steps)
                return tk_err_set(err, "grammar: one token mask took over %llu matcher steps (the grammar's repeats or "
                                  "alternatives are too costly to match)", (unsigned long long)m->max_steps);
            if (rc == 0) break;
        }
        valid = k;
        /* refused at byte k: so is every following item with the same k + 1 bytes */
        int end = k == len ? i + 1 : subtree_end(l, i, k);
        if (fn(ctx, i, end, k, m->depth) < 0) return -1;
        i = end;
    }
    return 0;
}

int tk_gwalk_mark(void *ctx, int first, int end, int matched, const tk_gstate *depth) {
    (void)depth;
    tk_gwalk_marker *c = ctx;
    int id = c->l->ids[first], len = c->v->len[id] - (c->l->skip ? c->l->skip[first] : 0);
    if (end == first + 1 && matched == len) c->mask[id >> 5] |= 1u << (id & 31);
    return 0;
}

/* Counts the set bits and adds the end-of-generation tokens when s accepts. */
static int finish_mask(const tk_gvocab *v, const tk_gstate *s, uint32_t *mask) {
    if (s->accepting)
        for (int i = 0; i < v->n_eog; i++) mask[v->eog[i] >> 5] |= 1u << (v->eog[i] & 31);
    int allowed = 0;
    for (int w = 0; w < (v->n_vocab + 31) / 32; w++) allowed += __builtin_popcount(mask[w]);
    return allowed;
}

int tk_gmask_compute_plain(tk_gmasker *m, const tk_gvocab *v, const tk_gstate *s, uint32_t *mask, tk_err *err) {
    memset(mask, 0, sizeof(uint32_t) * (size_t)((v->n_vocab + 31) / 32));
    tk_gwalk_list l = {.ids = v->order, .lcp = v->lcp, .next = v->next, .n = v->n_order};
    tk_gwalk_marker c = {v, &l, mask};
    if (tk_gwalk(m, v, &l, s, tk_gwalk_mark, &c, err)) return -1;
    return finish_mask(v, s, mask);
}

int tk_gmask_compute(tk_gmasker *m, const tk_gvocab *v, const tk_gstate *s, uint32_t *mask, tk_err *err) {
    m->max_steps = m->steps + (uint64_t)TK_GMASK_STEPS_PER_TOKEN * tk_gvocab_bound_tokens(v);
    int rc = m->table ? tk_gtable_mask(m, m->table, v, s, mask, err) : 1;
    if (rc < 0) return -1;
    return rc == 0 ? finish_mask(v, s, mask) : tk_gmask_compute_plain(m, v, s, mask, err);
}
