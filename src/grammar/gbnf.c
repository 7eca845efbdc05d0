/* GBNF (llama.cpp's grammar format, docs/grammar.md) to the grammar IR. */
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

typedef struct gname {
    const char *s;
    int len, rule;
    bool defined;
} gname;

typedef struct gparser {
    const char *p, *end;
    tk_gbuilder b;
    gname *names;
    int n_names, cap_names;
    int line;
    tk_err *err;
} gparser;

static int fail(gparser *ps, const char *what) {
    return tk_err_set(ps->err, "grammar: line %d: %s", ps->line, what);
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static void skip_space(gparser *ps, bool newline_ok) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || c == '\r') {
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        } else if (c == '\n' && newline_ok) {
            ps->p++;
            ps->line++;
        } else {
            break;
        }
    }
}

static int rule_for_name(gparser *ps, const char *s, int len) {
    for (int i = 0; i < ps->n_names; i++)
        if (ps->names[i].len == len && memcmp(ps->names[i].s, s, (size_t)len) == 0) return i;
    if (ps->n_names == ps->cap_names) {
        int cap = ps->cap_names ? ps->cap_names * 2 : 32;
        gname *n = realloc(ps->names, sizeof(gname) * (size_t)cap);
        if (!n) return tk_err_set(ps->err, "out of memory");
        ps->names = n;
        ps->cap_names = cap;
    }
    int r = tk_gbuilder_new_rule(&ps->b, ps->err);
    if (r < 0) return -1;
    ps->names[ps->n_names] = (gname){.s = s, .len = len, .rule = r};
    return ps->n_names++;
}

/* One UTF-8 code point of the source. */
static int source_codepoint(gparser *ps, uint32_t *cp) {
    const uint8_t *u = (const uint8_t *)ps->p;
    size_t left = (size_t)(ps->end - ps->p);
    int n = u[0] < 0x80 ? 1 : (u[0] & 0xE0) == 0xC0 ? 2 : (u[0] & 0xF0) == 0xE0 ? 3 : (u[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || (size_t)n > left) return fail(ps, "invalid UTF-8 in the grammar");
    uint32_t c = n == 1 ? u[0] : (uint32_t)(u[0] & (0x7F >> n));
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) return fail(ps, "invalid UTF-8 in the grammar");
        c = (c << 6) | (u[i] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return fail(ps, "invalid UTF-8 in the grammar");
    ps->p += n;
    *cp = c;
    return 0;
}

static int hex_escape(gparser *ps, int digits, uint32_t *cp) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++, ps->p++) {
        if (ps->p >= ps->end) return fail(ps, "truncated \\x/\\u escape");
        char c = *ps->p;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail(ps, "bad hex digit in an escape");
        v = v * 16 + (uint32_t)d;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail(ps, "escape is not a Unicode scalar value");
    *cp = v;
    return 0;
}

/* A character of a literal or class: an escape or a source code point. */
static int char_or_escape(gparser *ps, uint32_t *cp) {
    if (ps->p >= ps->end) return fail(ps, "unterminated literal or class");
    if (*ps->p != '\\') return source_codepoint(ps, cp);
    if (++ps->p >= ps->end) return fail(ps, "unterminated escape");
    char c = *ps->p++;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case '\\': case '"': case '[': case ']': case '-': case '^': *cp = (uint32_t)c; return 0;
    case 'x': return hex_escape(ps, 2, cp);
    case 'u': return hex_escape(ps, 4, cp);
    case 'U': return hex_escape(ps, 8, cp);
    default: return fail(ps, "unknown escape");
    }
}

static int push_el(gparser *ps, int rule, tk_gel e) { return tk_gbuilder_push(&ps->b, rule, e, ps->err); }

static int push_utf8(gparser *ps, int rule, uint32_t c) {
    uint8_t buf[4];
    int n = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    static const uint8_t lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; i--, c >>= 6) buf[i] = (uint8_t)(0x80 | (c & 0x3F));
    buf[0] = (uint8_t)(lead[n] | c);
    for (int i = 0; i < n; i++)
        if (push_el(ps, rule, (tk_gel){.kind = TK_GEL_BYTES, .lo = buf[i], .hi = buf[i]})) return -1;
    return 0;
}

/* [..] or `.` (any = negated empty class): one BYTES element when it is a
 * single ASCII range, else a helper rule of UTF-8 alternatives. */
static int parse_class(gparser *ps, int rule, bool any) {
    uint32_t(*r)[2] = NULL;
    int n = 0, cap = 0, rc = -1;
    bool neg = any;
    if (!any && ps->p < ps->end && *ps->p == '^') {
        neg = true;
        ps->p++;
    }
    while (!any) {
        if (ps->p >= ps->end) {
            fail(ps, "unterminated character class");
            goto done;
        }
        if (*ps->p == ']') {
            ps->p++;
            break;
        }
        uint32_t lo, hi;
        if (char_or_escape(ps, &lo)) goto done;
        hi = lo;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            if (char_or_escape(ps, &hi)) goto done;
            if (hi < lo) {
                fail(ps, "character class range out of order");
                goto done;
            }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            void *m = realloc(r, sizeof(*r) * (size_t)(cap + 1));
            if (!m) {
                tk_err_set(ps->err, "out of memory");
                goto done;
            }
            r = m;
        }
        r[n][0] = lo;
        r[n][1] = hi;
        n++;
    }
    rc = tk_gbuilder_push_class(&ps->b, rule, r, n, neg, ps->err);
done:
    free(r);
    return rc;
}

static int parse_alternates(gparser *ps, int rule, int depth);

static void skip_inline(void *ps) { skip_space(ps, false); }

static int parse_postfix(gparser *ps, int rule, int start) {
    int m, n;
    const char *why;
    int q = tk_grammar_read_quantifier(&ps->p, ps->end, skip_inline, ps, &m, &n, &why);
    if (q < 0) return fail(ps, why);
    return q ? tk_gbuilder_repeat(&ps->b, rule, start, m, n, ps->err) : 0;
}

static int parse_sequence(gparser *ps, int rule, int depth) {
    bool nested = depth > 0;
    for (;;) {
        int start = ps->b.rules[rule].n;
        if (ps->p >= ps->end) return 0;
        char c = *ps->p;
        if (c == '"') {
            ps->p++;
            while (ps->p < ps->end && *ps->p != '"') {
                uint32_t cp;
                if (char_or_escape(ps, &cp) || push_utf8(ps, rule, cp)) return -1;
            }
            if (ps->p >= ps->end) return fail(ps, "unterminated string literal");
            ps->p++;
            if (ps->b.rules[rule].n == start) { /* "" : nothing to match; a postfix on it is moot */
                skip_space(ps, nested);
                if (ps->p < ps->end && strchr("*+?{", *ps->p)) return fail(ps, "repetition of an empty literal");
                continue;
            }
        } else if (c == '[') {
            ps->p++;
            if (parse_class(ps, rule, false)) return -1;
        } else if (c == '.') {
            ps->p++;
            if (parse_class(ps, rule, true)) return -1;
        } else if (c == '(') {
            ps->p++;
            if (depth + 1 > TK_GRAMMAR_MAX_NESTING) return fail(ps, "parentheses nested too deep");
            int sub = tk_gbuilder_new_rule(&ps->b, ps->err);
            if (sub < 0) return -1;
            skip_space(ps, true);
            if (parse_alternates(ps, sub, depth + 1)) return -1;
            if (ps->p >= ps->end || *ps->p != ')') return fail(ps, "expected ')'");
            ps->p++;
            if (push_el(ps, rule, (tk_gel){.kind = TK_GEL_REF, .rule = sub})) return -1;
        } else if (is_name_char(c)) {
            const char *s = ps->p;
            while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
            const char *q = ps->p;
            skip_space(ps, false);
            if (ps->end - ps->p >= 3 && memcmp(ps->p, "::=", 3) == 0) { /* the next rule's head */
                ps->p = s;
                return 0;
            }
            ps->p = q;
            int i = rule_for_name(ps, s, (int)(q - s));
            if (i < 0 || push_el(ps, rule, (tk_gel){.kind = TK_GEL_REF, .rule = ps->names[i].rule})) return -1;
        } else {
            return 0;
        }
        skip_space(ps, nested);
        if (parse_postfix(ps, rule, start)) return -1;
        skip_space(ps, nested);
    }
}

static int parse_alternates(gparser *ps, int rule, int depth) {
    for (;;) {
        if (parse_sequence(ps, rule, depth) || push_el(ps, rule, (tk_gel){.kind = TK_GEL_END_ALT})) return -1;
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            skip_space(ps, true);
            continue;
        }
        return 0;
    }
}

static int parse_rules(gparser *ps) {
    for (;;) {
        skip_space(ps, true);
        if (ps->p >= ps->end) return 0;
        const char *s = ps->p;
        while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
        if (ps->p == s) return fail(ps, "expected a rule name");
        int i = rule_for_name(ps, s, (int)(ps->p - s));
        if (i < 0) return -1;
        if (ps->names[i].defined) return fail(ps, "rule defined twice");
        ps->names[i].defined = true;
        skip_space(ps, false);
        if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3) != 0) return fail(ps, "expected '::='");
        ps->p += 3;
        skip_space(ps, true);
        if (parse_alternates(ps, ps->names[i].rule, 0)) return -1;
        skip_space(ps, false);
        if (ps->p < ps->end && *ps->p != '\n' && !is_name_char(*ps->p)) return fail(ps, "unexpected character");
    }
}

int tk_grammar_from_gbnf(tk_grammar *g, const char *text, tk_err *err) {
    *g = (tk_grammar){0};
    size_t len = strlen(text);
    if (len > TK_GRAMMAR_MAX_TEXT) return tk_err_set(err, "grammar: longer than %d bytes", TK_GRAMMAR_MAX_TEXT);
    gparser ps = {.p = text, .end = text + len, .line = 1, .err = err};
    int rc = parse_rules(&ps);
    int root = -1;
    for (int i = 0; rc == 0 && i < ps.n_names; i++) {
        if (!ps.names[i].defined) {
            rc = tk_err_set(err, "grammar: rule '%.*s' is used but not defined", ps.names[i].len > 64 ? 64 : ps.names[i].len,
                            ps.names[i].s);
        } else if (ps.names[i].len == 4 && memcmp(ps.names[i].s, "root", 4) == 0) {
            root = ps.names[i].rule;
        }
    }
    if (rc == 0 && root < 0) rc = tk_err_set(err, "grammar: no rule 'root'");
    free(ps.names);
    if (rc) {
        tk_gbuilder_free(&ps.b);
        return -1;
    }
    return tk_gbuilder_finish(&ps.b, root, g, err);
}
