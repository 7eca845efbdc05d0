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
        g->rule_start[r] = g->n_el;
        memcpy(g->el + g->n_el, q->el, sizeof(tk_gel) * (size_t)q->n);
        g->n_el += q->n;
        g->el[g->n_el++] = (tk_gel){.kind = TK_GEL_END_RULE};
    }
    g->n_rules = b->n_rules;
    g->root = root;
    rc = 0;
done:
    tk_gbuilder_free(b);
    if (rc) tk_grammar_free(g);
    return rc;
}
