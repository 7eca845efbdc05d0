/* Building the grammar IR; lowering code-point ranges to UTF-8 bytes. */
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

void tk_grammar_free(tk_grammar *g) {
    free(g->el);
    free(g->rule_start);
    *g = (tk_grammar){0};
}

void tk_gbuilder_free(tk_gbuilder *b) {
    for (int i = 0; i < b->n_rules; i++) free(b->rules[i].el);
    free(b->rules);
    *b = (tk_gbuilder){0};
}

int tk_gbuilder_new_rule(tk_gbuilder *b, tk_err *err) {
    if (b->n_rules >= TK_GRAMMAR_MAX_RULES) return tk_err_set(err, "grammar: more than %d rules", TK_GRAMMAR_MAX_RULES);
    if (b->n_rules == b->cap_rules) {
        int cap = b->cap_rules ? b->cap_rules * 2 : 64;
        tk_gseq *n = realloc(b->rules, sizeof(tk_gseq) * (size_t)cap);
        if (!n) return tk_err_set(err, "out of memory");
        b->rules = n;
        b->cap_rules = cap;
    }
    b->rules[b->n_rules] = (tk_gseq){0};
    return b->n_rules++;
}

int tk_gbuilder_push(tk_gbuilder *b, int rule, tk_gel e, tk_err *err) {
    if (b->total >= TK_GRAMMAR_MAX_ELEMENTS)
        return tk_err_set(err, "grammar: more than %d elements after expansion", TK_GRAMMAR_MAX_ELEMENTS);
    tk_gseq *q = &b->rules[rule];
    if (q->n == q->cap) {
        int cap = q->cap ? q->cap * 2 : 16;
        tk_gel *n = realloc(q->el, sizeof(tk_gel) * (size_t)cap);
        if (!n) return tk_err_set(err, "out of memory");
        q->el = n;
        q->cap = cap;
    }
    q->el[q->n++] = e;
    b->total++;
    return 0;
}

static int utf8_len(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

static void utf8_encode(uint32_t c, int n, uint8_t *out) {
    static const uint8_t lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; i--) {
        out[i] = (uint8_t)(0x80 | (c & 0x3F));
        c >>= 6;
    }
    out[0] = (uint8_t)(lead[n] | c);
}

/* Splits [lo, hi] until it has one encoded length and every byte position
 * ranges independently, then emits one byte-range sequence per piece. */
static int push_range(tk_gbuilder *b, int rule, uint32_t lo, uint32_t hi, tk_err *err) {
    static const uint32_t bound[3] = {0x7F, 0x7FF, 0xFFFF};
    uint32_t mid = 0;
    for (int i = 0; i < 3 && !mid; i++)
        if (lo <= bound[i] && hi > bound[i]) mid = bound[i];
    int n = utf8_len(lo);
    for (int i = 1; i < n && !mid; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if ((lo & m) != 0) mid = lo | m;
        else if ((hi & m) != m) mid = (hi & ~m) - 1;
    }
    if (mid) return push_range(b, rule, lo, mid, err) || push_range(b, rule, mid + 1, hi, err) ? -1 : 0;
    uint8_t a[4], z[4];
    utf8_encode(lo, n, a);
    utf8_encode(hi, n, z);
    for (int i = 0; i < n; i++)
        if (tk_gbuilder_push(b, rule, (tk_gel){.kind = TK_GEL_BYTES, .lo = a[i], .hi = z[i]}, err)) return -1;
    return tk_gbuilder_push(b, rule, (tk_gel){.kind = TK_GEL_END_ALT}, err);
}

int tk_gbuilder_push_codepoints(tk_gbuilder *b, int rule, const uint32_t *lo, const uint32_t *hi, int n, tk_err *err) {
    for (int i = 0; i < n; i++) {
        uint32_t a = lo[i], z = hi[i] > 0x10FFFF ? 0x10FFFF : hi[i];
        if (a > z) continue;
        if (a < 0xD800 && z >= 0xD800) { /* surrogates are not encodable */
            if (push_range(b, rule, a, 0xD7FF, err)) return -1;
            a = 0xE000;
        } else if (a >= 0xD800 && a <= 0xDFFF) {
            a = 0xE000;
        }
        if (a <= z && push_range(b, rule, a, z, err)) return -1;
    }
    return 0;
}

int tk_gbuilder_finish(tk_gbuilder *b, int root, tk_grammar *g, tk_err *err) {
    *g = (tk_grammar){0};
    int rc = -1;
    g->el = malloc(sizeof(tk_gel) * (size_t)(b->total + b->n_rules));
    g->rule_start = malloc(sizeof(int32_t) * (size_t)(b->n_rules ? b->n_rules : 1));
    if (!g->el || !g->rule_start) {
        tk_err_set(err, "out of memory");
        goto done;
    }
    for (int r = 0; r < b->n_rules; r++) {
        tk_gseq *q = &b->rules[r];
        if (q->n == 0) {
            tk_err_set(err, "grammar: rule %d has no alternative", r);
            goto done;
        }
        for (int i = 0; i < q->n; i++)
            if (q->el[i].kind == TK_GEL_REF && (q->el[i].rule < 0 || q->el[i].rule >= b->n_rules)) {
                /* a compiler's fault, caught here so no matcher or table ever follows it */
                tk_err_set(err, "grammar: rule %d refers to rule %d, which does not exist", r, (int)q->el[i].rule);
                goto done;
            }
        g->rule_start[r] = g->n_el;
        memcpy(g->el + g->n_el, q->el, sizeof(tk_gel) * (size_t)q->n);
        g->n_el += q->n;
        g->el[g->n_el++] = (tk_gel){.kind = TK_GEL_END_RULE};
    }
    if (root < 0 || root >= b->n_rules) {
        tk_err_set(err, "grammar: start rule %d does not exist", root);
        goto done;
    }
    g->n_rules = b->n_rules;
    g->root = root;
    rc = 0;
done:
    tk_gbuilder_free(b);
    if (rc) tk_grammar_free(g);
    return rc;
}

int tk_grammar_wrap(tk_grammar *g, const char *begin, const char *end, tk_err *err) {
    size_t nb = begin ? strlen(begin) : 0, ne = end ? strlen(end) : 0;
    if (nb + ne > TK_GRAMMAR_MAX_TEXT)
        return tk_err_set(err, "grammar: begin/end literals longer than %d bytes", TK_GRAMMAR_MAX_TEXT);
    if (g->n_rules >= TK_GRAMMAR_MAX_RULES) return tk_err_set(err, "grammar: more than %d rules", TK_GRAMMAR_MAX_RULES);
    size_t n = (size_t)g->n_el + nb + ne + 3; /* literals, the old root, END_ALT, END_RULE */
    tk_gel *el = realloc(g->el, sizeof(tk_gel) * n);
    if (!el) return tk_err_set(err, "out of memory");
    g->el = el;
    int32_t *rs = realloc(g->rule_start, sizeof(int32_t) * (size_t)(g->n_rules + 1));
    if (!rs) return tk_err_set(err, "out of memory");
    g->rule_start = rs;
    int k = g->n_el;
    rs[g->n_rules] = k;
    for (size_t i = 0; i < nb; i++)
        el[k++] = (tk_gel){.kind = TK_GEL_BYTES, .lo = (uint8_t)begin[i], .hi = (uint8_t)begin[i]};
    el[k++] = (tk_gel){.kind = TK_GEL_REF, .rule = g->root};
    for (size_t i = 0; i < ne; i++)
        el[k++] = (tk_gel){.kind = TK_GEL_BYTES, .lo = (uint8_t)end[i], .hi = (uint8_t)end[i]};
    el[k++] = (tk_gel){.kind = TK_GEL_END_ALT};
    el[k++] = (tk_gel){.kind = TK_GEL_END_RULE};
    g->n_el = k;
    g->root = g->n_rules++;
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    uint32_t x = ((const uint32_t *)a)[0], y = ((const uint32_t *)b)[0];
    return x < y ? -1 : x > y;
}

int tk_gbuilder_push_class(tk_gbuilder *b, int rule, uint32_t (*r)[2], int n, bool negate, tk_err *err) {
    int rc = -1;
    bool neg = negate;
    if (n) qsort(r, (size_t)n, sizeof(*r), cmp_range);
    int m = 0; /* merge overlapping / adjacent */
    for (int i = 0; i < n; i++) {
        if (m && r[i][0] <= r[m - 1][1] + 1) {
            if (r[i][1] > r[m - 1][1]) r[m - 1][1] = r[i][1];
        } else {
            r[m][0] = r[i][0];
            r[m][1] = r[i][1];
            m++;
        }
    }
    int cnt = m;
    uint32_t *lo = malloc(sizeof(uint32_t) * (size_t)(cnt + 1)), *hi = malloc(sizeof(uint32_t) * (size_t)(cnt + 1));
    if (!lo || !hi) {
        free(lo);
        free(hi);
        tk_err_set(err, "out of memory");
        return -1;
    }
    int k = 0;
    if (neg) {
        uint32_t next = 0;
        for (int i = 0; i < cnt; i++) {
            if (r[i][0] > next) {
                lo[k] = next;
                hi[k++] = r[i][0] - 1;
            }
            next = r[i][1] + 1;
        }
        if (next <= 0x10FFFF) {
            lo[k] = next;
            hi[k++] = 0x10FFFF;
        }
    } else {
        for (int i = 0; i < cnt; i++) {
            lo[k] = r[i][0];
            hi[k++] = r[i][1];
        }
    }
    if (k == 0) {
        tk_err_set(err, "grammar: character class matches nothing");
    } else if (k == 1 && hi[0] < 0x80) {
        rc = tk_gbuilder_push(b, rule, (tk_gel){.kind = TK_GEL_BYTES, .lo = (uint8_t)lo[0], .hi = (uint8_t)hi[0]}, err);
    } else {
        int sub = tk_gbuilder_new_rule(b, err);
        rc = sub < 0 || tk_gbuilder_push_codepoints(b, sub, lo, hi, k, err) ||
                     tk_gbuilder_push(b, rule, (tk_gel){.kind = TK_GEL_REF, .rule = sub}, err)
                 ? -1
                 : 0;
    }
    free(lo);
    free(hi);
    return rc;
}

/* Moves the elements of `rule` from `start` on into a helper rule, leaving
 * one REF to it; returns that element. */
static int single_element(tk_gbuilder *b, int rule, int start, tk_gel *out, tk_err *err) {
    tk_gseq *q = &b->rules[rule];
    if (q->n - start == 1) {
        *out = q->el[start];
        q->n--;
        b->total--;
        return 0;
    }
    int sub = tk_gbuilder_new_rule(b, err);
    if (sub < 0) return -1;
    q = &b->rules[rule]; /* the builder may have moved */
    for (int i = start; i < q->n; i++)
        if (tk_gbuilder_push(b, sub, q->el[i], err)) return -1;
    if (tk_gbuilder_push(b, sub, (tk_gel){.kind = TK_GEL_END_ALT}, err)) return -1;
    q = &b->rules[rule];
    b->total -= q->n - start;
    q->n = start;
    *out = (tk_gel){.kind = TK_GEL_REF, .rule = sub};
    return 0;
}


/* X{m,n} (n < 0: unbounded) as m copies of X then a chain of optional X
 * or a right-recursive star rule, which the matcher runs in constant depth. */
static const char *read_count(const char **p, const char *end, int *v) {
    if (*p >= end || **p < '0' || **p > '9') return "expected a number in {m,n}";
    long x = 0;
    while (*p < end && **p >= '0' && **p <= '9') {
        x = x * 10 + (*(*p)++ - '0');
        if (x > TK_GRAMMAR_MAX_REPEAT) return "repetition count over the limit (1000)";
    }
    *v = (int)x;
    return NULL;
}

int tk_grammar_read_quantifier(const char **p, const char *end, void (*skip)(void *), void *ctx, int *m, int *n,
                               const char **why) {
    if (*p >= end) return 0;
    char c = **p;
    if (c == '*' || c == '+' || c == '?') {
        (*p)++;
        *m = c == '+';
        *n = c == '?' ? 1 : -1;
        return 1;
    }
    if (c != '{') return 0;
    (*p)++;
    if (skip) skip(ctx);
    if ((*why = read_count(p, end, m))) return -1;
    if (skip) skip(ctx);
    *n = *m;
    if (*p < end && **p == ',') {
        (*p)++;
        if (skip) skip(ctx);
        *n = -1;
        if (*p < end && **p != '}' && (*why = read_count(p, end, n))) return -1;
        if (skip) skip(ctx);
    }
    if (*p >= end || **p != '}') {
        *why = "expected '}'";
        return -1;
    }
    (*p)++;
    if (*n >= 0 && *n < *m) {
        *why = "{m,n} with n < m";
        return -1;
    }
    return 1;
}

int tk_gbuilder_repeat(tk_gbuilder *b, int rule, int start, int m, int n, tk_err *err) {
    tk_gel x;
    if (single_element(b, rule, start, &x, err)) return -1;
    for (int i = 0; i < m; i++)
        if (tk_gbuilder_push(b, rule, x, err)) return -1;
    if (n >= 0 && n == m) return 0;
    int tail = tk_gbuilder_new_rule(b, err);
    if (tail < 0) return -1;
    if (n < 0) { /* tail ::= x tail | "" */
        if (tk_gbuilder_push(b, tail, x, err) || tk_gbuilder_push(b, tail, (tk_gel){.kind = TK_GEL_REF, .rule = tail}, err) ||
            tk_gbuilder_push(b, tail, (tk_gel){.kind = TK_GEL_END_ALT}, err) || tk_gbuilder_push(b, tail, (tk_gel){.kind = TK_GEL_END_ALT}, err))
            return -1;
    } else { /* opt_1 ::= x | "";  opt_k ::= x opt_{k-1} | "" */
        int prev = -1;
        for (int k = 1; k <= n - m; k++) {
            int r = k == n - m ? tail : tk_gbuilder_new_rule(b, err);
            if (r < 0 || tk_gbuilder_push(b, r, x, err)) return -1;
            if (prev >= 0 && tk_gbuilder_push(b, r, (tk_gel){.kind = TK_GEL_REF, .rule = prev}, err)) return -1;
            if (tk_gbuilder_push(b, r, (tk_gel){.kind = TK_GEL_END_ALT}, err) || tk_gbuilder_push(b, r, (tk_gel){.kind = TK_GEL_END_ALT}, err))
                return -1;
            prev = r;
        }
    }
    return tk_gbuilder_push(b, rule, (tk_gel){.kind = TK_GEL_REF, .rule = tail}, err);
}

