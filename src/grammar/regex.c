/* A practical regex subset to the grammar IR (docs/grammar.md): literals,
 * ., [classes], \d \w \s \D \W \S, groups ( ) (?: ), |, * + ? {m} {m,}
 * {m,n} (lazy forms: the same language).  The whole output must match, so
 * ^ at the start and $ at the end are accepted and mean nothing more;
 * anywhere else, and backreferences / lookaround, are refused. */
#include "grammar.h"

#include <string.h>

typedef struct rparser {
    const char *begin, *p, *end;
    tk_gbuilder *b;
    tk_err *err;
} rparser;

static int fail(rparser *ps, const char *what) {
    return tk_err_set(ps->err, "regex: %s at offset %d", what, (int)(ps->p - ps->begin));
}

static int alternates(rparser *ps, int rule, int depth);

/* One code point of the pattern (UTF-8). */
static int codepoint(rparser *ps, uint32_t *cp) {
    const uint8_t *u = (const uint8_t *)ps->p;
    int n = u[0] < 0x80 ? 1 : (u[0] & 0xE0) == 0xC0 ? 2 : (u[0] & 0xF0) == 0xE0 ? 3 : (u[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || n > ps->end - ps->p) return fail(ps, "invalid UTF-8");
    uint32_t c = n == 1 ? u[0] : (uint32_t)(u[0] & (0x7F >> n));
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) return fail(ps, "invalid UTF-8");
        c = (c << 6) | (u[i] & 0x3F);
    }
    ps->p += n;
    *cp = c;
    return 0;
}

/* The ranges of a shorthand class letter (d w s, upper case negated). */
static int shorthand(char c, uint32_t (*r)[2], bool *neg) {
    *neg = c >= 'A' && c <= 'Z';
    switch (c | 0x20) {
    case 'd': r[0][0] = '0', r[0][1] = '9'; return 1;
    case 'w':
        r[0][0] = '0', r[0][1] = '9', r[1][0] = 'A', r[1][1] = 'Z', r[2][0] = 'a', r[2][1] = 'z', r[3][0] = '_', r[3][1] = '_';
        return 4;
    case 's': r[0][0] = '\t', r[0][1] = '\r', r[1][0] = ' ', r[1][1] = ' '; return 2;
    default: return 0;
    }
}

/* An escaped literal character after '\\' (not a shorthand class). */
static int escaped(rparser *ps, uint32_t *cp) {
    if (ps->p >= ps->end) return fail(ps, "trailing backslash");
    char c = *ps->p++;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    default:
        if (strchr("\\/.^$|?*+()[]{}-", c)) {
            *cp = (uint32_t)c;
            return 0;
        }
        return fail(ps, "unsupported escape (backreferences, \\b, \\p are not supported)");
    }
}

#define MAX_CLASS_RANGES 1024

static int parse_class(rparser *ps, int rule) {
    uint32_t r[MAX_CLASS_RANGES + 4][2];
    int n = 0;
    bool neg = false;
    if (ps->p < ps->end && *ps->p == '^') {
        neg = true;
        ps->p++;
    }
    bool first = true;
    for (;;) {
        if (ps->p >= ps->end) return fail(ps, "unterminated character class");
        if (*ps->p == ']' && !first) {
            ps->p++;
            break;
        }
        first = false;
        if (n >= MAX_CLASS_RANGES) return fail(ps, "character class too long");
        uint32_t lo;
        if (*ps->p == '\\' && ps->p + 1 < ps->end && strchr("dwsDWS", ps->p[1])) {
            bool sneg;
            uint32_t s[4][2];
            int k = shorthand(ps->p[1], s, &sneg);
            if (sneg) return fail(ps, "negated shorthand inside a class");
            memcpy(r + n, s, sizeof(s[0]) * (size_t)k);
            n += k;
            ps->p += 2;
            continue;
        }
        if (*ps->p == '\\') {
            ps->p++;
            if (escaped(ps, &lo)) return -1;
        } else if (codepoint(ps, &lo)) {
            return -1;
        }
        uint32_t hi = lo;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            if (*ps->p == '\\') {
                ps->p++;
                if (escaped(ps, &hi)) return -1;
            } else if (codepoint(ps, &hi)) {
                return -1;
            }
            if (hi < lo) return fail(ps, "character class range out of order");
        }
        r[n][0] = lo;
        r[n][1] = hi;
        n++;
    }
    return tk_gbuilder_push_class(ps->b, rule, r, n, neg, ps->err);
}

static int quantifier(rparser *ps, int rule, int start) {
    int m, n;
    const char *why;
    int q = tk_grammar_read_quantifier(&ps->p, ps->end, NULL, NULL, &m, &n, &why);
    if (q <= 0) return q < 0 ? fail(ps, why) : 0;
    if (ps->p < ps->end && *ps->p == '?') ps->p++; /* lazy: same language */
    if (ps->p < ps->end && strchr("*+?{", *ps->p)) return fail(ps, "quantifier after a quantifier");
    return tk_gbuilder_repeat(ps->b, rule, start, m, n, ps->err);
}

static int push_literal(rparser *ps, int rule, uint32_t c) {
    uint32_t r[1][2] = {{c, c}};
    return tk_gbuilder_push_class(ps->b, rule, r, 1, false, ps->err);
}

static int sequence(rparser *ps, int rule, int depth) {
    for (;;) {
        if (ps->p >= ps->end) return 0;
        int start = ps->b->rules[rule].n;
        char c = *ps->p;
        if (c == '|' || c == ')') return 0;
        if (c == '*' || c == '+' || c == '?' || c == '{') return fail(ps, "quantifier without an operand");
        if (c == '^' || c == '$') {
            bool at_start = c == '^' && depth == 0 && start == 0, at_end = c == '$' && depth == 0 && ps->p + 1 == ps->end;
            if (!at_start && !at_end) return fail(ps, "anchor inside the pattern");
            ps->p++;
            continue;
        }
        ps->p++;
        int rc;
        if (c == '(') {
            if (depth + 1 > TK_GRAMMAR_MAX_NESTING) return fail(ps, "groups nested too deep");
            if (ps->p < ps->end && *ps->p == '?') {
                if (ps->p + 1 < ps->end && ps->p[1] == ':') ps->p += 2;
                else return fail(ps, "lookaround and named groups are not supported");
            }
            int sub = tk_gbuilder_new_rule(ps->b, ps->err);
            if (sub < 0 || alternates(ps, sub, depth + 1)) return -1;
            if (ps->p >= ps->end || *ps->p != ')') return fail(ps, "expected ')'");
            ps->p++;
            rc = tk_gbuilder_push(ps->b, rule, (tk_gel){.kind = TK_GEL_REF, .rule = sub}, ps->err);
        } else if (c == '[') {
            rc = parse_class(ps, rule);
        } else if (c == '.') { /* any code point but newline */
            uint32_t r[1][2] = {{'\n', '\n'}};
            rc = tk_gbuilder_push_class(ps->b, rule, r, 1, true, ps->err);
        } else if (c == '\\' && ps->p < ps->end && strchr("dwsDWS", *ps->p)) {
            uint32_t r[4][2];
            bool neg;
            int k = shorthand(*ps->p++, r, &neg);
            rc = tk_gbuilder_push_class(ps->b, rule, r, k, neg, ps->err);
        } else if (c == '\\') {
            uint32_t cp;
            rc = escaped(ps, &cp) || push_literal(ps, rule, cp) ? -1 : 0;
        } else {
            ps->p--;
            uint32_t cp;
            rc = codepoint(ps, &cp) || push_literal(ps, rule, cp) ? -1 : 0;
        }
        if (rc || quantifier(ps, rule, start)) return -1;
    }
}

static int alternates(rparser *ps, int rule, int depth) {
    for (;;) {
        if (sequence(ps, rule, depth) || tk_gbuilder_push(ps->b, rule, (tk_gel){.kind = TK_GEL_END_ALT}, ps->err))
            return -1;
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            continue;
        }
        return 0;
    }
}

int tk_grammar_regex_rule(tk_gbuilder *b, const char *pattern, size_t len, tk_err *err) {
    if (len > TK_GRAMMAR_MAX_PATTERN) return tk_err_set(err, "regex: longer than %d bytes", TK_GRAMMAR_MAX_PATTERN);
    rparser ps = {.begin = pattern, .p = pattern, .end = pattern + len, .b = b, .err = err};
    int rule = tk_gbuilder_new_rule(b, err);
    if (rule < 0 || alternates(&ps, rule, 0)) return -1;
    if (ps.p < ps.end) return fail(&ps, "unbalanced ')'");
    return rule;
}

int tk_grammar_from_regex(tk_grammar *g, const char *pattern, tk_err *err) {
    tk_gbuilder b = {0};
    *g = (tk_grammar){0};
    int root = tk_grammar_regex_rule(&b, pattern, strlen(pattern), err);
    if (root < 0) {
        tk_gbuilder_free(&b);
        return -1;
    }
    return tk_gbuilder_finish(&b, root, g, err);
}
