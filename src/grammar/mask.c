/* Token masks: which tokens' bytes a grammar state allows, by walking the
 * vocabulary in byte order (an implicit trie) with one state per depth. */
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

typedef struct entry {
    const uint8_t *p;
    int len;
    int32_t id;
} entry;

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    int n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, (size_t)n);
    if (c) return c;
    return x->len != y->len ? (x->len < y->len ? -1 : 1) : (x->id < y->id ? -1 : x->id > y->id);
}

void tk_gvocab_free(tk_gvocab *v) {
    free(v->order);
    free(v->lcp);
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
    entry *e = NULL;
    v->off = calloc((size_t)n, sizeof(uint32_t));
    v->len = calloc((size_t)n, sizeof(uint16_t));
    v->order = malloc(sizeof(int32_t) * (size_t)n);
    v->lcp = malloc(sizeof(uint16_t) * (size_t)n);
    v->eog = malloc(sizeof(int32_t) * (size_t)n);
    v->blob = malloc(cap);
    e = malloc(sizeof(entry) * (size_t)n);
    if (!v->off || !v->len || !v->order || !v->lcp || !v->eog || !v->blob || !e) goto oom;
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
        e[v->n_order++] = (entry){.len = k, .id = id};
    }
    for (int i = 0; i < v->n_order; i++) e[i].p = v->blob + v->off[e[i].id];
    qsort(e, (size_t)v->n_order, sizeof(entry), cmp_entry);
    for (int i = 0; i < v->n_order; i++) {
        v->order[i] = e[i].id;
        int l = 0;
        if (i > 0)
            while (l < e[i].len && l < e[i - 1].len && e[i].p[l] == e[i - 1].p[l]) l++;
        v->lcp[i] = (uint16_t)l;
    }
    free(e);
    return 0;
oom:
    free(e);
    tk_gvocab_free(v);
    return tk_err_set(err, "out of memory");
}

void tk_gmasker_free(tk_gmasker *m) {
    for (int i = 0; i < m->n_depth; i++) tk_gstate_free(&m->depth[i]);
    free(m->depth);
    *m = (tk_gmasker){0};
}

int tk_gmask_compute(tk_gmasker *m, const tk_gvocab *v, const tk_gstate *s, uint32_t *mask, tk_err *err) {
    memset(mask, 0, sizeof(uint32_t) * (size_t)((v->n_vocab + 31) / 32));
    if (m->n_depth < v->max_len + 1) {
        tk_gstate *d = realloc(m->depth, sizeof(tk_gstate) * (size_t)(v->max_len + 1));
        if (!d) return tk_err_set(err, "out of memory");
        for (int i = m->n_depth; i <= v->max_len; i++) d[i] = (tk_gstate){0};
        m->depth = d;
        m->n_depth = v->max_len + 1;
    }
    int allowed = 0, valid = 0, fail_at = -1;
    for (int i = 0; i < v->n_order; i++) {
        int id = v->order[i], len = v->len[id], lcp = v->lcp[i];
        if (fail_at >= 0 && lcp > fail_at) continue; /* shares the rejected prefix */
        fail_at = -1;
        const uint8_t *b = v->blob + v->off[id];
        int k = lcp < valid ? lcp : valid;
        for (; k < len; k++) {
            const tk_gstate *from = k == 0 ? s : &m->depth[k];
            int rc = tk_gstate_step(from, b[k], &m->depth[k + 1], err);
            if (rc < 0) return -1;
            if (rc == 0) break;
        }
        if (k == len) {
            mask[id >> 5] |= 1u << (id & 31);
            allowed++;
            valid = len;
        } else {
            fail_at = k;
            valid = k;
        }
    }
    if (s->accepting)
        for (int i = 0; i < v->n_eog; i++) {
            mask[v->eog[i] >> 5] |= 1u << (v->eog[i] & 31);
            allowed++;
        }
    return allowed;
}
