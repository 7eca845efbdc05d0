/* Precomputed token masks per grammar position (XGrammar's split into
 * context-independent and context-dependent tokens), for a grammar and a
 * vocabulary.
 *
 * A stack's top is a BYTES element e; beneath it lie the continuations of
 * the rules that led there.  Often those are fixed by the grammar: when a
 * rule is used from one place only, the element under its frame is always
 * that place's continuation.  e's context is e plus the chain of such
 * forced continuations beneath it (found statically, "beneath" below).
 * Walking the vocabulary from the context alone sorts every token into:
 * accepted (its bytes end inside the context, or exactly at its end),
 * rejected (refused inside the context), or dependent (the context is used
 * up with bytes left: those bytes are checked at run time against the real
 * stack beneath, as a small trie of suffixes).  The state's mask is the
 * union over its stacks, as the matcher's steps are unions over stacks.  A
 * context that reaches the bottom of every stack (the root's end) decides
 * every token: nothing is dependent.
 *
 * The first elements of a rule's alternatives, over the same context below
 * (the alternatives of one character class, say), form a group with one
 * suffix trie, each suffix tagged with its entry: expanding the rule makes
 * them stacks together, and a state's stacks of one group over the same
 * stack beneath are checked in one walk of it, each shared suffix once. */
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

#define MAX_CTX 64 /* elements of a context */

/* beneath[rule]: what lies under a frame of the rule */
enum { B_NONE = -3, B_MANY = -2, B_BOTTOM = -1 }; /* else one element index */

typedef struct gentry {
    size_t ctx;        /* context in t->ctx, bottom first, e last */
    int n_ctx;
    bool closed;       /* the context is the whole stack */
    bool bits;         /* accepted as a bitset at t->bits + acc, else ids at t->ids + acc */
    size_t acc;
    int n_acc;
    int group;         /* whose suffix trie holds its dependent tokens; -1: none */
} gentry;

typedef struct ggroup {
    size_t dep; /* dependent suffixes at t->dep_* + dep, sorted, tagged with their entry */
    int n_dep;
} ggroup;

typedef struct pool {
    void *p;
    size_t n, cap, size; /* items, capacity, item size */
} pool;

struct tk_gtable {
    const tk_grammar *g;
    int n_vocab;
    int32_t *entry_of; /* per element: its entry, -1 for non-BYTES */
    gentry *e;
    int n_e;
    ggroup *gr;
    int n_gr;
    pool ctx, ids, bits, dep_ids, dep_skip, dep_tag, dep_lcp, dep_next;
    size_t bytes;
};

/* n more items; NULL with *over set past the memory budget, or on error. */
static void *pool_add(pool *q, size_t n, size_t *bytes, size_t max_bytes, bool *over, tk_err *err) {
    if (q->n + n > q->cap) {
        size_t cap = q->cap ? q->cap : 1024;
        while (cap < q->n + n) cap *= 2;
        if (*bytes + (cap - q->cap) * q->size > max_bytes) {
            *over = true;
            return NULL;
        }
        void *p = realloc(q->p, cap * q->size);
        if (!p) {
            tk_err_set(err, "out of memory");
            return NULL;
        }
        *bytes += (cap - q->cap) * q->size;
        q->p = p;
        q->cap = cap;
    }
    void *at = (char *)q->p + q->n * q->size;
    q->n += n;
    return at;
}

void tk_gtable_free(tk_gtable *t) {
    if (!t) return;
    free(t->entry_of);
    free(t->e);
    free(t->gr);
    pool *ps[] = {&t->ctx, &t->ids, &t->bits, &t->dep_ids, &t->dep_skip, &t->dep_tag, &t->dep_lcp, &t->dep_next};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]->p);
    free(t);
}

size_t tk_gtable_bytes(const tk_gtable *t) { return t ? t->bytes : 0; }

static int join(int a, int b) { return b == B_NONE ? a : a == B_NONE || a == b ? b : B_MANY; }

/* rule_of[el] and beneath[rule] by propagation to a fixpoint: a REF's
 * continuation is what lies under the referenced rule's frame, or, for a
 * REF ending its alternative (a tail call, nothing pushed), whatever lies
 * under the referencing rule's frame.  Returns 1 when it would take more
 * than the step budget. */
static int analyse(const tk_grammar *g, int32_t *rule_of, int32_t *beneath, uint64_t max_steps) {
    for (int r = 0; r < g->n_rules; r++) {
        beneath[r] = B_NONE;
        for (int i = g->rule_start[r]; i < g->n_el; i++) {
            rule_of[i] = r;
            if (g->el[i].kind == TK_GEL_END_RULE) break;
        }
    }
    beneath[g->root] = B_BOTTOM;
    uint64_t work = 0;
    for (bool changed = true; changed;) {
        changed = false;
        if ((work += (uint64_t)g->n_el) > max_steps) return 1;
        for (int s = 0; s < g->n_el; s++) {
            if (g->el[s].kind != TK_GEL_REF) continue;
            int r = g->el[s].rule;
            int below = g->el[s + 1].kind != TK_GEL_END_ALT ? s + 1 : beneath[rule_of[s]];
            int j = join(beneath[r], below);
            if (j != beneath[r]) {
                beneath[r] = j;
                changed = true;
            }
        }
    }
    return 0;
}

/* e's context into ctx (bottom first); returns its length, *closed when it
 * reaches the bottom of the stack. */
static int context_of(int e, const int32_t *rule_of, const int32_t *beneath, int32_t *ctx, bool *closed) {
    int32_t rev[MAX_CTX];
    int n = 0;
    rev[n++] = e;
    int b;
    while ((b = beneath[rule_of[rev[n - 1]]]) >= 0 && n < MAX_CTX) rev[n++] = b;
    *closed = b == B_BOTTOM;
    for (int i = 0; i < n; i++) ctx[i] = rev[n - 1 - i];
    return n;
}

typedef struct build_ctx {
    const tk_gvocab *v;
    const tk_gwalk_list *l;
    tk_gmasker *m;
    bool open;
    int32_t *acc; /* n_vocab */
    int n_acc;
    int entry;    /* the one being walked */
    int32_t *dep_ids, *dep_ent; /* every entry's dependent tokens, in entry order */
    uint16_t *dep_skip;
    size_t n_dep, cap_dep;
    size_t bytes;  /* the table's so far, against the budget */
    size_t max_bytes;
    uint64_t max_steps;
    bool over;     /* a budget ran out */
    tk_err *err;
} build_ctx;

static int build_token(void *ctx, int first, int end, int matched, const tk_gstate *depth) {
    build_ctx *c = ctx;
    if (c->m->steps > c->max_steps) {
        c->over = true;
        return -1;
    }
    int id = c->l->ids[first];
    if (end == first + 1 && matched == c->v->len[id]) {
        c->acc[c->n_acc++] = id;
        return 0;
    }
    if (!c->open) return 0;
    int ks[TK_GVOCAB_MAX_TOKEN_BYTES], n_ks = 0; /* where the context was used up with bytes left */
    for (int k = 1; k <= matched; k++)
        if (depth[k].accepting) ks[n_ks++] = k;
    if (!n_ks) return 0;
    size_t need = c->n_dep + (size_t)(end - first) * (size_t)n_ks;
    if (need > c->cap_dep) {
        size_t cap = c->cap_dep ? c->cap_dep : 4096;
        while (cap < need) cap *= 2;
        /* these, then their sorted copies in the table and the sort's own */
        if (c->bytes + cap * 40 > c->max_bytes || cap > INT32_MAX) {
            c->over = true;
            return -1;
        }
        int32_t *ni = realloc(c->dep_ids, cap * sizeof(int32_t));
        if (ni) c->dep_ids = ni;
        int32_t *ne = ni ? realloc(c->dep_ent, cap * sizeof(int32_t)) : NULL;
        if (ne) c->dep_ent = ne;
        uint16_t *ns = ne ? realloc(c->dep_skip, cap * sizeof(uint16_t)) : NULL;
        if (!ns) return tk_err_set(c->err, "out of memory");
        c->dep_skip = ns;
        c->cap_dep = cap;
    }
    for (int i = first; i < end; i++)
        for (int j = 0; j < n_ks; j++) {
            c->dep_ids[c->n_dep] = c->l->ids[i];
            c->dep_ent[c->n_dep] = c->entry;
            c->dep_skip[c->n_dep++] = (uint16_t)ks[j];
        }
    return 0;
}

/* Stores the walk's result as entry x. */
static int store(tk_gtable *t, gentry *x, build_ctx *c, const tk_gvocab *v, tk_err *err) {
    int words = (v->n_vocab + 31) / 32;
    x->n_acc = c->n_acc;
    x->bits = (size_t)c->n_acc > (size_t)words; /* a bitset is the smaller */
    if (x->bits) {
        uint32_t *b = pool_add(&t->bits, (size_t)words, &t->bytes, c->max_bytes, &c->over, err);
        if (!b) return -1;
        memset(b, 0, sizeof(uint32_t) * (size_t)words);
        for (int i = 0; i < c->n_acc; i++) b[c->acc[i] >> 5] |= 1u << (c->acc[i] & 31);
        x->acc = t->bits.n - (size_t)words;
    } else if (c->n_acc) {
        int32_t *p = pool_add(&t->ids, (size_t)c->n_acc, &t->bytes, c->max_bytes, &c->over, err);
        if (!p) return -1;
        memcpy(p, c->acc, sizeof(int32_t) * (size_t)c->n_acc);
        x->acc = t->ids.n - (size_t)c->n_acc;
    }
    return 0;
}

typedef struct gkey {
    int32_t rule;         /* of the top, if it starts an alternative; else -1 - entry (alone) */
    const int32_t *below; /* the context under the top */
    int n, entry;
} gkey;

static int cmp_group(const gkey *x, const gkey *y) {
    if (x->rule != y->rule) return x->rule < y->rule ? -1 : 1;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return memcmp(x->below, y->below, sizeof(int32_t) * (size_t)x->n);
}

/* By group, then entry. */
static int cmp_gkey(const void *a, const void *b) {
    const gkey *x = a, *y = b;
    int c = cmp_group(x, y);
    return c ? c : (x->entry < y->entry ? -1 : x->entry > y->entry);
}

/* Groups the entries with dependent tokens by their contexts under the top
 * and stores each group's suffixes sorted, tagged with their entries. */
static int group_deps(tk_gtable *t, build_ctx *c, const tk_gvocab *v, const int32_t *rule_of, tk_err *err) {
    int n_with = 0;
    for (size_t i = 0; i < c->n_dep; i++)
        if (i == 0 || c->dep_ent[i] != c->dep_ent[i - 1]) n_with++;
    if (!n_with) return 0;
    gkey *k = malloc(sizeof(gkey) * (size_t)n_with);
    size_t *count = calloc((size_t)n_with, sizeof(size_t)), *at = malloc(sizeof(size_t) * (size_t)n_with);
    int32_t *ids = malloc(sizeof(int32_t) * c->n_dep), *tag = malloc(sizeof(int32_t) * c->n_dep);
    uint16_t *skip = malloc(sizeof(uint16_t) * c->n_dep);
    int rc = -1;
    if (!k || !count || !at || !ids || !tag || !skip || !(t->gr = malloc(sizeof(ggroup) * (size_t)n_with))) {
        tk_err_set(err, "out of memory");
        goto done;
    }
    const int32_t *ctx = t->ctx.p;
    int n = 0;
    for (size_t i = 0; i < c->n_dep; i++)
        if (i == 0 || c->dep_ent[i] != c->dep_ent[i - 1]) {
            const gentry *x = &t->e[c->dep_ent[i]];
            int e = ctx[x->ctx + (size_t)x->n_ctx - 1];
            bool starts = e == t->g->rule_start[rule_of[e]] || t->g->el[e - 1].kind == TK_GEL_END_ALT;
            k[n++] = (gkey){starts ? rule_of[e] : -1 - c->dep_ent[i], ctx + x->ctx, x->n_ctx - 1, c->dep_ent[i]};
        }
    qsort(k, (size_t)n, sizeof(gkey), cmp_gkey);
    for (int i = 0; i < n; i++) {
        if (i == 0 || cmp_group(&k[i], &k[i - 1]) != 0)
            t->n_gr++;
        t->e[k[i].entry].group = t->n_gr - 1;
    }
    for (size_t i = 0; i < c->n_dep; i++) count[t->e[c->dep_ent[i]].group]++;
    size_t sum = 0;
    for (int g = 0; g < t->n_gr; g++) {
        t->gr[g] = (ggroup){.dep = sum, .n_dep = (int)count[g]};
        at[g] = sum;
        sum += count[g];
    }
    for (size_t i = 0; i < c->n_dep; i++) { /* by group, stable */
        size_t j = at[t->e[c->dep_ent[i]].group]++;
        ids[j] = c->dep_ids[i];
        skip[j] = c->dep_skip[i];
        tag[j] = c->dep_ent[i];
    }
    tk_gwalk_out o = {pool_add(&t->dep_ids, c->n_dep, &t->bytes, c->max_bytes, &c->over, err),
                      pool_add(&t->dep_skip, c->n_dep, &t->bytes, c->max_bytes, &c->over, err),
                      pool_add(&t->dep_tag, c->n_dep, &t->bytes, c->max_bytes, &c->over, err),
                      pool_add(&t->dep_lcp, c->n_dep, &t->bytes, c->max_bytes, &c->over, err),
                      pool_add(&t->dep_next, c->n_dep, &t->bytes, c->max_bytes, &c->over, err)};
    if (!o.ids || !o.skip || !o.tag || !o.lcp || !o.next) goto done;
    for (int g = 0; g < t->n_gr; g++) {
        size_t d = t->gr[g].dep;
        tk_gwalk_out og = {o.ids + d, o.skip + d, o.tag + d, o.lcp + d, o.next + d};
        if (tk_gwalk_sort(v, ids + d, skip + d, tag + d, t->gr[g].n_dep, &og, err)) goto done;
    }
    rc = 0;
done:
    free(k);
    free(count);
    free(at);
    free(ids);
    free(tag);
    free(skip);
    return rc;
}

int tk_gtable_build(tk_gtable **out, const tk_grammar *g, const tk_gvocab *v, tk_err *err) {
    return tk_gtable_build_limits(out, g, v, TK_GTABLE_MAX_STEPS, TK_GTABLE_MAX_BYTES, err);
}

int tk_gtable_build_limits(tk_gtable **out, const tk_grammar *g, const tk_gvocab *v, uint64_t max_steps, size_t max_bytes,
                           tk_err *err) {
    *out = NULL;
    tk_gtable *t = calloc(1, sizeof *t);
    int32_t *rule_of = malloc(sizeof(int32_t) * (size_t)(g->n_el ? g->n_el : 1));
    int32_t *beneath = malloc(sizeof(int32_t) * (size_t)(g->n_rules ? g->n_rules : 1));
    build_ctx c = {.v = v, .err = err, .max_steps = max_steps, .max_bytes = max_bytes};
    tk_gmasker m = {0};
    tk_gstate s0 = {0};
    int rc = -1;
    if (!t || !rule_of || !beneath || !(c.acc = malloc(sizeof(int32_t) * (size_t)v->n_vocab)) ||
        !(t->entry_of = malloc(sizeof(int32_t) * (size_t)(g->n_el ? g->n_el : 1)))) {
        tk_err_set(err, "out of memory");
        goto done;
    }
    t->g = g;
    t->n_vocab = v->n_vocab;
    t->ctx.size = t->ids.size = t->dep_ids.size = t->dep_tag.size = t->dep_next.size = sizeof(int32_t);
    t->bits.size = sizeof(uint32_t);
    t->dep_skip.size = t->dep_lcp.size = sizeof(uint16_t);
    t->bytes = sizeof *t + sizeof(int32_t) * (size_t)g->n_el;
    if (analyse(g, rule_of, beneath, max_steps)) {
        rc = 1;
        goto done;
    }
    for (int i = 0; i < g->n_el; i++) t->entry_of[i] = g->el[i].kind == TK_GEL_BYTES ? t->n_e++ : -1;
    t->bytes += sizeof(gentry) * (size_t)t->n_e;
    if (t->bytes > max_bytes) {
        rc = 1;
        goto done;
    }
    if (!(t->e = calloc((size_t)(t->n_e ? t->n_e : 1), sizeof(gentry)))) {
        tk_err_set(err, "out of memory");
        goto done;
    }
    tk_gwalk_list l = {.ids = v->order, .lcp = v->lcp, .next = v->next, .n = v->n_order};
    c.l = &l;
    c.m = &m;
    for (int i = 0; i < g->n_el; i++) {
        if (t->entry_of[i] < 0) continue;
        gentry *x = &t->e[t->entry_of[i]];
        x->group = -1;
        int32_t ctx[MAX_CTX];
        x->n_ctx = context_of(i, rule_of, beneath, ctx, &x->closed);
        int32_t *p = pool_add(&t->ctx, (size_t)x->n_ctx, &t->bytes, c.max_bytes, &c.over, err);
        if (!p) {
            rc = c.over ? 1 : -1;
            goto done;
        }
        memcpy(p, ctx, sizeof(int32_t) * (size_t)x->n_ctx);
        x->ctx = t->ctx.n - (size_t)x->n_ctx;
        if (tk_gstate_from_stack(&s0, g, ctx, x->n_ctx, err)) goto done;
        c.open = !x->closed;
        c.entry = t->entry_of[i];
        c.n_acc = 0;
        c.bytes = t->bytes;
        if (tk_gwalk(&m, v, &l, &s0, build_token, &c, err)) {
            rc = c.over ? 1 : -1;
            goto done;
        }
        if (store(t, x, &c, v, err)) {
            rc = c.over ? 1 : -1;
            goto done;
        }
    }
    if (group_deps(t, &c, v, rule_of, err)) {
        rc = c.over ? 1 : -1;
        goto done;
    }
    *out = t;
    t = NULL;
    rc = 0;
done:
    tk_gtable_free(t);
    free(rule_of);
    free(beneath);
    free(c.acc);
    free(c.dep_ids);
    free(c.dep_ent);
    free(c.dep_skip);
    tk_gstate_free(&s0);
    tk_gmasker_free(&m);
    return rc;
}

/* Room for n entries in m->want (cleared) and n stacks in m->pend. */
static int reserve_scratch(tk_gmasker *m, int n_e, int n_stacks, tk_err *err) {
    if (m->cap_want < n_e) {
        uint8_t *w = realloc(m->want, (size_t)n_e);
        if (!w) return tk_err_set(err, "out of memory");
        memset(w, 0, (size_t)n_e);
        m->want = w;
        m->cap_want = n_e;
    }
    if (m->cap_pend < 2 * n_stacks) {
        int32_t *p = realloc(m->pend, sizeof(int32_t) * 2 * (size_t)n_stacks);
        if (!p) return tk_err_set(err, "out of memory");
        m->pend = p;
        m->cap_pend = 2 * n_stacks;
    }
    return 0;
}

int tk_gtable_mask(tk_gmasker *m, const tk_gtable *t, const tk_gvocab *v, const tk_gstate *s, uint32_t *mask,
                   tk_err *err) {
    if (s->g != t->g || v->n_vocab != t->n_vocab) return 1;
    if (reserve_scratch(m, t->n_e, s->n_stacks, err)) return -1;
    int words = (v->n_vocab + 31) / 32;
    memset(mask, 0, sizeof(uint32_t) * (size_t)words);
    if (s->n_stacks == 0) return 0; /* a complete sentence: no byte may follow (and m->pend may be NULL) */
    const int32_t *ctx = t->ctx.p, *ids = t->ids.p;
    const uint32_t *bits = t->bits.p;
    int32_t *pend = m->pend, *members = m->pend + s->n_stacks;
    int n_pend = 0;
    /* the context-independent tokens; the stacks with dependent ones for later */
    for (int off = 0; off < s->n_data; off += 1 + s->data[off]) {
        int len = s->data[off];
        const int32_t *st = s->data + off + 1;
        int ei = t->entry_of[st[len - 1]];
        if (ei < 0) return 1;
        const gentry *x = &t->e[ei];
        int base = len - x->n_ctx;
        if (base < 0 || (x->closed && base != 0) ||
            memcmp(st + base, ctx + x->ctx, sizeof(int32_t) * (size_t)x->n_ctx) != 0)
            return 1;
        if (x->bits) {
            const uint32_t *b = bits + x->acc;
            for (int w = 0; w < words; w++) mask[w] |= b[w];
        } else {
            for (int i = 0; i < x->n_acc; i++) mask[ids[x->acc + i] >> 5] |= 1u << (ids[x->acc + i] & 31);
        }
        if (x->group >= 0) pend[n_pend++] = off;
    }
    /* per group and stack beneath, one walk of the group's suffixes */
    for (int a = 0; a < n_pend; a++) {
        if (pend[a] < 0) continue;
        const int32_t *sa = s->data + pend[a] + 1;
        int la = sa[-1], ea = t->entry_of[sa[la - 1]], g = t->e[ea].group, base = la - t->e[ea].n_ctx;
        int n_members = 0;
        members[n_members++] = ea;
        for (int b = a + 1; b < n_pend; b++) {
            if (pend[b] < 0) continue;
            const int32_t *sb = s->data + pend[b] + 1;
            int lb = sb[-1], eb = t->entry_of[sb[lb - 1]];
            if (t->e[eb].group != g || lb - t->e[eb].n_ctx != base ||
                memcmp(sa, sb, sizeof(int32_t) * (size_t)base) != 0)
                continue;
            members[n_members++] = eb;
            pend[b] = -1;
        }
        if (tk_gstate_from_stack(&m->rest, t->g, sa, base, err)) return -1;
        if (m->rest.n_stacks == 0) continue; /* the sentence is complete there: no byte may follow */
        for (int i = 0; i < n_members; i++) m->want[members[i]] = 1;
        const ggroup *gr = &t->gr[g];
        tk_gwalk_list l = {.ids = (const int32_t *)t->dep_ids.p + gr->dep,
                           .skip = (const uint16_t *)t->dep_skip.p + gr->dep,
                           .lcp = (const uint16_t *)t->dep_lcp.p + gr->dep,
                           .next = (const int32_t *)t->dep_next.p + gr->dep,
                           .tag = (const int32_t *)t->dep_tag.p + gr->dep,
                           .want = m->want,
                           .n = gr->n_dep};
        tk_gwalk_marker mk = {v, &l, mask};
        int rc = tk_gwalk(m, v, &l, &m->rest, tk_gwalk_mark, &mk, err);
        for (int i = 0; i < n_members; i++) m->want[members[i]] = 0;
        if (rc) return -1;
    }
    return 0;
}
