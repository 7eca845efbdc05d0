/* Byte-level pushdown recognizer over the grammar IR: the state is the set
 * of parse stacks whose tops are byte ranges (every REF and finished
 * alternative expanded away), as llama.cpp's grammar sampler keeps it. */
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

/* Expansion steps per byte (all stacks together): stops grammars that loop
 * without consuming (left recursion, A ::= B  B ::= A) with an error
 * instead of hanging.  2^16 steps cost ~60 ms of one byte at worst; the
 * largest expansion met replaying the JSON-schema fuzz corpus took 4,378
 * steps, while fuzzer-made regexes such as a nullable group of 100 empty
 * alternatives repeated 959 times took 2^20 steps (~1 s) per byte. */
#define EXPAND_MAX_STEPS (1 << 16)

typedef struct ibuf {
    int32_t *v;
    int n, cap;
} ibuf;

static int ibuf_reserve(ibuf *b, int extra, tk_err *err) {
    if (b->n + extra <= b->cap) return 0;
    int cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra) cap *= 2;
    int32_t *n = realloc(b->v, sizeof(int32_t) * (size_t)cap);
    if (!n) return tk_err_set(err, "out of memory");
    b->v = n;
    b->cap = cap;
    return 0;
}

static uint32_t stack_hash(const int32_t *st, int len) {
    uint32_t h = 2166136261u ^ (uint32_t)len; /* FNV-1a over the elements */
    for (int i = 0; i < len; i++) h = (h ^ (uint32_t)st[i]) * 16777619u;
    return h;
}

/* True if index x (current stamp `stamp`, stacks in data) has st[0..len);
 * else *slot is the free slot for it. */
static bool index_find(const tk_stack_index *x, uint32_t stamp, const int32_t *data, const int32_t *st, int len,
                       uint32_t *slot) {
    uint32_t i = stack_hash(st, len) & (uint32_t)(x->cap - 1);
    for (; x->stamp[i] == stamp; i = (i + 1) & (uint32_t)(x->cap - 1)) {
        const int32_t *o = data + x->off[i];
        if (o[0] == len && memcmp(o + 1, st, sizeof(int32_t) * (size_t)len) == 0) return true;
    }
    *slot = i;
    return false;
}

/* Makes room in x for one more stack: doubles it (from 64 slots) when it
 * would be over half full and re-enters data[0..n_data)'s stacks. */
static int index_reserve(tk_stack_index *x, uint32_t stamp, const int32_t *data, int n_data, tk_err *err) {
    if (2 * (x->n + 1) <= x->cap) return 0;
    const int cap = x->cap ? 2 * x->cap : 64;
    uint32_t *st = calloc((size_t)cap, sizeof *st);
    int32_t *off = malloc(sizeof *off * (size_t)cap);
    if (!st || !off) {
        free(st);
        free(off);
        return tk_err_set(err, "out of memory");
    }
    free(x->stamp);
    free(x->off);
    x->stamp = st;
    x->off = off;
    x->cap = cap;
    for (int o = 0; o < n_data; o += 1 + data[o]) {
        uint32_t slot = 0;
        index_find(x, stamp, data, data + o + 1, data[o], &slot); /* the stacks are distinct: always a free slot */
        x->stamp[slot] = stamp;
        x->off[slot] = o;
    }
    return 0;
}

static void index_free(tk_stack_index *x) {
    free(x->stamp);
    free(x->off);
}

/* Appends st[0..len) to the buffer (*data, *n, *cap) as [len, ...]. */
static inline int append_stack(int32_t **data, int *n, int *cap, const int32_t *st, int len, tk_err *err) {
    ibuf b = {*data, *n, *cap};
    if (ibuf_reserve(&b, len + 1, err)) return -1;
    b.v[b.n] = len;
    memcpy(b.v + b.n + 1, st, sizeof(int32_t) * (size_t)len);
    *data = b.v;
    *n = b.n + len + 1;
    *cap = b.cap;
    return 0;
}

/* Adds stack st[0..len) unless s has it (found through the seen index, which
 * covers the stacks added since the last reset: every expansion starts with
 * one; a linear scan made a step over 4096 ambiguous stacks cost 8 M
 * compares). */
static int add_stack(tk_gstate *s, const int32_t *st, int len, tk_err *err) {
    if (index_reserve(&s->seen, s->stamp, s->data, s->n_data, err)) return -1;
    uint32_t slot;
    if (index_find(&s->seen, s->stamp, s->data, st, len, &slot)) return 0;
    if (s->n_stacks >= TK_GSTATE_MAX_STACKS)
        return tk_err_set(err, "grammar: more than %d parse stacks (ambiguous grammar)", TK_GSTATE_MAX_STACKS);
    const int o = s->n_data;
    if (append_stack(&s->data, &s->n_data, &s->cap_data, st, len, err)) return -1;
    s->seen.stamp[slot] = s->stamp;
    s->seen.off[slot] = o;
    s->seen.n++;
    s->n_stacks++;
    return 0;
}

/* Pending stacks per step, at most: remembered ones (VISITED_*), and
 * elements waiting in the expansion's own buffer (EXPAND_MAX_DATA). */
#define VISITED_MAX_STACKS (1 << 18)
#define VISITED_MAX_DATA (1 << 22)
#define EXPAND_MAX_DATA (1 << 22)

/* 1 if pending stack st[0..len) is new in this step (and now remembered),
 * 0 if it was met before: its expansion would add nothing new.  Without
 * this, a loop over a group that can match nothing, ("" | "a")*, went
 * round the loop until the step bound ended the byte with an error; a
 * starred group of 26 empty alternatives took 0.1 s and 87 MB per byte. */
static __attribute__((noinline)) int visit(tk_gstate *s, const int32_t *st, int len, tk_err *err) {
    tk_stack_index *x = &s->visited;
    if (x->n >= VISITED_MAX_STACKS || s->n_visited_data + len + 1 > VISITED_MAX_DATA)
        return tk_err_set(err, "grammar: expansion of one byte over %d stacks or %d stack elements", VISITED_MAX_STACKS,
                          VISITED_MAX_DATA);
    if (index_reserve(x, s->stamp, s->visited_data, s->n_visited_data, err)) return -1;
    uint32_t slot;
    if (index_find(x, s->stamp, s->visited_data, st, len, &slot)) return 0;
    const int o = s->n_visited_data;
    if (append_stack(&s->visited_data, &s->n_visited_data, &s->cap_visited_data, st, len, err)) return -1;
    x->stamp[slot] = s->stamp;
    x->off[slot] = o;
    x->n++;
    return 1;
}

/* Expansion steps in a step before visit() starts: most steps take a few
 * dozen, and remembering their stacks (a copy and a hash each) made the
 * plain-walk mask 1.4-1.8x slower (bench_grammar); with this and visit()
 * out of line, as fast as before.  Starting late is still exact: a stack
 * is skipped only after one equal to it was expanded. */
#define VISIT_AFTER_STEPS 128

/* visit() for the stacks that expansion goes on from (topped by a rule
 * reference or an alternative's end), once the step has run long: a cycle
 * that matches nothing passes through them.  The others end there (an
 * empty stack, or a byte range added through the seen index). */
static inline int pending_fresh(tk_gstate *s, const int32_t *st, int len, tk_err *err) {
    if (s->expand_steps < VISIT_AFTER_STEPS || len == 0 || s->g->el[st[len - 1]].kind == TK_GEL_BYTES) return 1;
    return visit(s, st, len, err);
}

/* Expands the stack `st0` (top last; with bump, its top moved one element
 * on, past a matched byte) into s's stacks whose tops are BYTES. */
static int expand(tk_gstate *s, const int32_t *st0, int len0, bool bump, tk_err *err) {
    const tk_gel *el = s->g->el;
    /* pending stacks, [len, ...] back to back; starts[] indexes them as a LIFO */
    ibuf work = {s->work, 0, s->cap_work};
    int rc = -1;
    if (!s->tmp && !(s->tmp = malloc(sizeof(int32_t) * (TK_GSTATE_MAX_DEPTH + 1)))) return tk_err_set(err, "out of memory");
    if (!s->starts) {
        s->cap_starts = 64;
        if (!(s->starts = malloc(sizeof(int) * (size_t)s->cap_starts))) return tk_err_set(err, "out of memory");
    }
    int32_t *tmp = s->tmp;
    if (ibuf_reserve(&work, len0 + 1, err)) goto out;
    work.v[0] = len0;
    memcpy(work.v + 1, st0, sizeof(int32_t) * (size_t)len0);
    if (bump) work.v[len0]++;
    work.n = len0 + 1;
    int n_starts = 0;
    int fresh = pending_fresh(s, work.v + 1, len0, err);
    if (fresh < 0) goto out;
    if (fresh) s->starts[n_starts++] = 0;
    while (n_starts > 0) {
        if (++s->expand_steps > EXPAND_MAX_STEPS) {
            tk_err_set(err, "grammar: expansion does not terminate (left recursion?)");
            goto out;
        }
        int off = s->starts[--n_starts];
        int len = work.v[off];
        memcpy(tmp, work.v + off + 1, sizeof(int32_t) * (size_t)len);
        work.n = off;
        if (len == 0) {
            s->accepting = true;
            continue;
        }
        const tk_gel *top = &el[tmp[len - 1]];
        if (top->kind == TK_GEL_BYTES) {
            if (add_stack(s, tmp, len, err)) goto out;
            continue;
        }
        if (top->kind == TK_GEL_END_ALT) {
            len--;
        } else { /* REF: the continuation, unless it is the alternative's end (tail call) */
            int32_t cont = tmp[len - 1] + 1;
            len--;
            if (el[cont].kind != TK_GEL_END_ALT) tmp[len++] = cont;
        }
        int32_t alt = top->kind == TK_GEL_REF ? s->g->rule_start[top->rule] : -1;
        do {
            if (len + 1 > TK_GSTATE_MAX_DEPTH) {
                tk_err_set(err, "grammar: parse stack deeper than %d", TK_GSTATE_MAX_DEPTH);
                goto out;
            }
            if (n_starts == s->cap_starts) {
                int *n = realloc(s->starts, sizeof(int) * (size_t)s->cap_starts * 2);
                if (!n) {
                    tk_err_set(err, "out of memory");
                    goto out;
                }
                s->starts = n;
                s->cap_starts *= 2;
            }
            int rec = len + (alt >= 0);
            if (work.n + rec + 1 > EXPAND_MAX_DATA) {
                tk_err_set(err, "grammar: expansion of one byte over %d pending stack elements", EXPAND_MAX_DATA);
                goto out;
            }
            if (ibuf_reserve(&work, rec + 1, err)) goto out;
            work.v[work.n] = rec;
            memcpy(work.v + work.n + 1, tmp, sizeof(int32_t) * (size_t)len);
            if (alt >= 0) work.v[work.n + 1 + len] = alt;
            if ((fresh = pending_fresh(s, work.v + work.n + 1, rec, err)) < 0) goto out;
            if (fresh) {
                s->starts[n_starts++] = work.n;
                work.n += rec + 1;
            }
            if (alt < 0) break;
            while (el[alt].kind != TK_GEL_END_ALT) alt++; /* the next alternative */
            alt++;
        } while (el[alt].kind != TK_GEL_END_RULE);
    }
    rc = 0;
out:
    s->work = work.v;
    s->cap_work = work.cap;
    return rc;
}

static void reset(tk_gstate *s, const tk_grammar *g) {
    s->g = g;
    s->n_data = 0;
    s->n_stacks = 0;
    s->accepting = false;
    s->expand_steps = 0;
    /* a new stamp empties the indexes; stamp 0 is never current */
    s->seen.n = 0;
    s->visited.n = 0;
    s->n_visited_data = 0;
    if (++s->stamp == 0) {
        if (s->seen.stamp) memset(s->seen.stamp, 0, sizeof *s->seen.stamp * (size_t)s->seen.cap);
        if (s->visited.stamp) memset(s->visited.stamp, 0, sizeof *s->visited.stamp * (size_t)s->visited.cap);
        s->stamp = 1;
    }
}

int tk_gstate_init(tk_gstate *s, const tk_grammar *g, tk_err *err) {
    *s = (tk_gstate){0};
    reset(s, g);
    /* one one-element stack per alternative of the root */
    for (int32_t alt = g->rule_start[g->root]; g->el[alt].kind != TK_GEL_END_RULE;) {
        if (expand(s, &alt, 1, false, err)) {
            tk_gstate_free(s);
            return -1;
        }
        while (g->el[alt].kind != TK_GEL_END_ALT) alt++;
        alt++;
    }
    return 0;
}

void tk_gstate_free(tk_gstate *s) {
    free(s->data);
    free(s->work);
    free(s->tmp);
    free(s->starts);
    index_free(&s->seen);
    index_free(&s->visited);
    free(s->visited_data);
    *s = (tk_gstate){0};
}

int tk_gstate_copy(tk_gstate *dst, const tk_gstate *src, tk_err *err) {
    reset(dst, src->g);
    ibuf b = {dst->data, 0, dst->cap_data};
    if (ibuf_reserve(&b, src->n_data, err)) return -1;
    dst->data = b.v;
    dst->cap_data = b.cap;
    if (src->n_data) memcpy(dst->data, src->data, sizeof(int32_t) * (size_t)src->n_data);
    dst->n_data = src->n_data;
    dst->n_stacks = src->n_stacks;
    dst->accepting = src->accepting;
    return 0;
}

int tk_gstate_step(const tk_gstate *src, uint8_t byte, tk_gstate *dst, tk_err *err) {
    reset(dst, src->g);
    const tk_gel *el = src->g->el;
    for (int off = 0; off < src->n_data; off += 1 + src->data[off]) {
        int len = src->data[off];
        const int32_t *st = src->data + off + 1;
        const tk_gel *top = &el[st[len - 1]];
        if (byte >= top->lo && byte <= top->hi && expand(dst, st, len, true, err)) return -1;
    }
    return dst->n_stacks > 0 || dst->accepting;
}

int tk_gstate_advance(tk_gstate *s, uint8_t byte, tk_gstate *scratch, tk_err *err) {
    int rc = tk_gstate_step(s, byte, scratch, err);
    if (rc == 1) {
        tk_gstate t = *s;
        *s = *scratch;
        *scratch = t;
    }
    return rc;
}

int tk_gstate_advance_bytes(tk_gstate *s, const uint8_t *b, int n, tk_gstate *scratch, tk_err *err) {
    if (n == 0) return 1;
    tk_gstate save = {0};
    if (tk_gstate_copy(&save, s, err)) return -1;
    int rc = 1;
    for (int i = 0; i < n && rc == 1; i++) rc = tk_gstate_advance(s, b[i], scratch, err);
    if (rc != 1) {
        tk_gstate t = *s;
        *s = save;
        save = t;
    }
    tk_gstate_free(&save);
    return rc;
}

bool tk_gstate_done(const tk_gstate *s) { return s->n_stacks == 0; }

int tk_gstate_from_stack(tk_gstate *s, const tk_grammar *g, const int32_t *st, int len, tk_err *err) {
    reset(s, g);
    return expand(s, st, len, false, err);
}
