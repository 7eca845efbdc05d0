/* JSON Schema strings: the JSON string character, minLength / maxLength,
 * pattern (over the decoded string), format; literal values in their
 * canonical serialization; keys that are none of a set of names. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_internal.h"

/* [^"\\\x00-\x1f]: a character JSON writes as itself. */
static int push_plain_char(tk_schema_c *c, int rule) {
    uint32_t r[3][2] = {{0, 0x1f}, {'"', '"'}, {'\\', '\\'}};
    return tk_gbuilder_push_class(c->b, rule, r, 3, true, c->err);
}

/* Four hex digits of a \u escape that are not a surrogate, then a
 * surrogate pair: each is one code point, as minLength counts. */
int tk_schema_char(tk_schema_c *c) {
    if (c->r_char >= 0) return c->r_char;
    int hex = c->r_hex >= 0 ? c->r_hex : tk_schema_rule(c);
    if (hex < 0) return -1;
    if (c->r_hex < 0 && (tk_schema_class(c, hex, "09afAF", false) || tk_schema_alt(c, hex))) return -1;
    c->r_hex = hex;
    int r = tk_schema_rule(c);
    if (r < 0 || push_plain_char(c, r) || tk_schema_alt(c, r)) return -1;
    if (tk_schema_lit(c, r, "\\", 1) || tk_schema_class(c, r, "\"\"\\\\//bbffnnrrtt", false) || tk_schema_alt(c, r)) return -1;
    static const char *const first[][2] = {{"09acAC", NULL}, {"ddDD", "07"}, {"efEF", NULL}};
    for (int i = 0; i < 3; i++) {
        if (tk_schema_lit(c, r, "\\u", 2) || tk_schema_class(c, r, first[i][0], false)) return -1;
        if (first[i][1] ? tk_schema_class(c, r, first[i][1], false) : tk_schema_ref_el(c, r, hex)) return -1;
        if (tk_schema_ref_el(c, r, hex) || tk_schema_ref_el(c, r, hex) || tk_schema_alt(c, r)) return -1;
    }
    if (tk_schema_lit(c, r, "\\u", 2) || tk_schema_class(c, r, "ddDD", false) || tk_schema_class(c, r, "89abAB", false) ||
        tk_schema_ref_el(c, r, hex) || tk_schema_ref_el(c, r, hex) || tk_schema_lit(c, r, "\\u", 2) ||
        tk_schema_class(c, r, "ddDD", false) || tk_schema_class(c, r, "cfCF", false) || tk_schema_ref_el(c, r, hex) ||
        tk_schema_ref_el(c, r, hex) || tk_schema_alt(c, r))
        return -1;
    return c->r_char = r;
}

/* "\"" char{min,max} "\"" (max < 0: unbounded) */
static int string_of_length(tk_schema_c *c, int min, int max) {
    int ch = tk_schema_char(c), r = ch < 0 ? -1 : tk_schema_rule(c);
    if (r < 0 || tk_schema_lit(c, r, "\"", 1)) return -1;
    if (max != 0 && (tk_schema_ref_el(c, r, ch) || tk_schema_repeat_last(c, r, min, max))) return -1;
    if (tk_schema_lit(c, r, "\"", 1) || tk_schema_alt(c, r)) return -1;
    return r;
}

int tk_schema_any_string(tk_schema_c *c) {
    if (c->r_string < 0) c->r_string = string_of_length(c, 0, -1);
    return c->r_string;
}

/* --- patterns --------------------------------------------------------- */

static bool needs_escape(uint8_t x) { return x < 0x20 || x == '"' || x == '\\'; }

/* Appends the escapes that decode to byte x: the short one if any, and
 * \u00XX in either case. */
static int push_escapes(tk_schema_c *c, int rule, uint8_t x) {
    static const char shorts[] = "\"\"\\\\\bb\ff\nn\rr\tt";
    for (int i = 0; shorts[i]; i += 2)
        if ((uint8_t)shorts[i] == x && (tk_schema_lit(c, rule, "\\", 1) || tk_schema_lit(c, rule, shorts + i + 1, 1) ||
                                        tk_schema_alt(c, rule)))
            return -1;
    static const char digits[] = "0123456789abcdef", upper[] = "0123456789ABCDEF";
    int hi = x >> 4, lo = x & 15;
    for (int ch = 0; ch < (lo >= 10 ? 2 : 1); ch++) {
        char esc[6] = {'\\', 'u', '0', '0', digits[hi], ch ? upper[lo] : digits[lo]};
        if (tk_schema_lit(c, rule, esc, 6) || tk_schema_alt(c, rule)) return -1;
    }
    return 0;
}

/* A rule for the ASCII bytes [lo, hi] as they appear inside a JSON string:
 * raw where allowed, escaped where JSON requires. */
static int escaped_range(tk_schema_c *c, uint8_t lo, uint8_t hi) {
    for (int i = 0; i < c->n_esc; i++)
        if (c->esc[i].lo == lo && c->esc[i].hi == hi) return c->esc[i].rule;
    int r = tk_schema_rule(c);
    if (r < 0) return -1;
    for (int x = lo; x <= hi;) {
        if (needs_escape((uint8_t)x)) {
            if (push_escapes(c, r, (uint8_t)x)) return -1;
            x++;
            continue;
        }
        int y = x;
        while (y + 1 <= hi && !needs_escape((uint8_t)(y + 1))) y++;
        if (tk_schema_byte(c, r, (uint8_t)x, (uint8_t)y) || tk_schema_alt(c, r)) return -1;
        x = y + 1;
    }
    if (c->n_esc < (int)(sizeof c->esc / sizeof c->esc[0])) c->esc[c->n_esc++] = (tk_schema_escape){lo, hi, r};
    return r;
}

/* The regex compiler's rules [first, last) match decoded characters; the
 * ASCII ranges that hold a byte JSON must escape become escaped_range. */
static int escape_rules(tk_schema_c *c, int first, int last) {
    for (int r = first; r < last; r++) {
        for (int i = 0; i < c->b->rules[r].n; i++) {
            tk_gel e = c->b->rules[r].el[i];
            if (e.kind != TK_GEL_BYTES || e.lo >= 0x80) continue;
            bool hit = e.lo < 0x20 || (e.lo <= '"' && e.hi >= '"') || (e.lo <= '\\' && e.hi >= '\\');
            if (!hit) continue;
            int esc = escaped_range(c, e.lo, e.hi);
            if (esc < 0) return -1;
            c->b->rules[r].el[i] = (tk_gel){.kind = TK_GEL_REF, .rule = esc};
        }
    }
    return 0;
}

/* A regex over the decoded string, the string's quotes around it. */
static int regex_string(tk_schema_c *c, const char *pat, size_t n, bool prefix_any, bool suffix_any) {
    int first = c->b->n_rules;
    int re = tk_grammar_regex_rule(c->b, pat, n, c->err);
    if (re < 0) return tk_err_wrap(c->err, "json schema: 'pattern' at %s", c->path_len ? c->path : "(root)");
    if (escape_rules(c, first, c->b->n_rules)) return -1;
    int ch = tk_schema_char(c), r = ch < 0 ? -1 : tk_schema_rule(c);
    if (r < 0 || tk_schema_lit(c, r, "\"", 1)) return -1;
    if (prefix_any && (tk_schema_ref_el(c, r, ch) || tk_schema_repeat_last(c, r, 0, -1))) return -1;
    if (tk_schema_ref_el(c, r, re)) return -1;
    if (suffix_any && (tk_schema_ref_el(c, r, ch) || tk_schema_repeat_last(c, r, 0, -1))) return -1;
    if (tk_schema_lit(c, r, "\"", 1) || tk_schema_alt(c, r)) return -1;
    return r;
}

/* JSON Schema's pattern is a search: without ^ (or $) any characters may
 * come before (after) the match. */
static int pattern_string(tk_schema_c *c, const json_t *p) {
    if (!json_is_string(p)) return tk_schema_fail(c, "'pattern' must be a string");
    const char *s = json_string_value(p);
    size_t n = json_string_length(p), bs = 0;
    while (bs + 1 < n && s[n - 2 - bs] == '\\') bs++;
    bool anchored_start = n && s[0] == '^', anchored_end = n && s[n - 1] == '$' && bs % 2 == 0;
    return regex_string(c, s, n, !anchored_start, !anchored_end);
}

/* --- formats ---------------------------------------------------------- */

#define YEAR "(?:[1-9]\\d{3}|0[1-9]\\d{2}|00[1-9]\\d|000[1-9])"
#define LEAP4 "(?:0[48]|[2468][048]|[13579][26])"
#define DATE                                                                                              \
    "(?:" YEAR "-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|2[0-8]))" \
    "|(?:\\d\\d" LEAP4 "|" LEAP4 "00)-02-29)"
#define TIME "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,6})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)"

static const struct {
    const char *name, *regex;
} formats[TK_SCHEMA_N_FORMATS] = {
    {"date", DATE},
    {"time", TIME},
    {"date-time", DATE "T" TIME},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"email", "[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\\.[A-Za-z0-9-]{1,63}){0,8}\\.[A-Za-z]{2,24}"},
};

static int format_string(tk_schema_c *c, const json_t *f) {
    if (!json_is_string(f)) return tk_schema_fail(c, "'format' must be a string");
    for (int i = 0; i < TK_SCHEMA_N_FORMATS; i++) {
        if (strcmp(formats[i].name, json_string_value(f))) continue;
        if (c->r_format[i] < 0) c->r_format[i] = regex_string(c, formats[i].regex, strlen(formats[i].regex), false, false);
        return c->r_format[i];
    }
    return tk_schema_fail(c, "unsupported format '%.100s' (date, time, date-time, uuid, email)", json_string_value(f));
}

int tk_schema_string(tk_schema_c *c, const json_t *s) {
    const json_t *pattern = json_object_get(s, "pattern"), *format = json_object_get(s, "format");
    bool lengths = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if ((pattern != NULL) + (format != NULL) + lengths > 1)
        return tk_schema_fail(c, "only one of pattern, format and minLength/maxLength per string schema is supported");
    if (pattern) return pattern_string(c, pattern);
    if (format) return format_string(c, format);
    int min = 0, max = -1;
    if (tk_schema_count(c, s, "minLength", &min) || tk_schema_count(c, s, "maxLength", &max)) return -1;
    if (max >= 0 && min > max) return tk_schema_fail(c, "'minLength' greater than 'maxLength'");
    return lengths ? string_of_length(c, min, max) : tk_schema_any_string(c);
}

/* --- literal values --------------------------------------------------- */

static int push_canonical_escape(tk_schema_c *c, int rule, uint8_t x) {
    static const char shorts[] = "\"\"\\\\\bb\ff\nn\rr\tt";
    for (int i = 0; shorts[i]; i += 2)
        if ((uint8_t)shorts[i] == x) return tk_schema_lit(c, rule, "\\", 1) || tk_schema_lit(c, rule, shorts + i + 1, 1);
    char esc[7];
    snprintf(esc, sizeof esc, "\\u%04x", x);
    return tk_schema_lit(c, rule, esc, 6);
}

int tk_schema_quoted(tk_schema_c *c, int rule, const char *s, size_t n) {
    if (tk_schema_lit(c, rule, "\"", 1)) return -1;
    for (size_t i = 0; i < n; i++) {
        uint8_t x = (uint8_t)s[i];
        if (needs_escape(x) ? push_canonical_escape(c, rule, x) : tk_schema_byte(c, rule, x, x)) return -1;
    }
    return tk_schema_lit(c, rule, "\"", 1);
}

/* The shortest decimal form that reads back as the same double. */
static int push_real(tk_schema_c *c, int rule, double d) {
    if (!isfinite(d)) return tk_schema_fail(c, "a literal number must be finite");
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) break;
    }
    return tk_schema_lit(c, rule, buf, strlen(buf));
}

/* Bytes then whitespace (inside arrays and objects). */
static int lit_ws(tk_schema_c *c, int rule, const char *s) {
    int ws = tk_schema_ws(c);
    return ws < 0 || tk_schema_lit(c, rule, s, strlen(s)) || tk_schema_ref_el(c, rule, ws) ? -1 : 0;
}

static int literal(tk_schema_c *c, int rule, const json_t *v, int depth) {
    if (depth > TK_GRAMMAR_MAX_NESTING) return tk_schema_fail(c, "a literal value nested deeper than %d", TK_GRAMMAR_MAX_NESTING);
    char buf[32];
    int ws = tk_schema_ws(c);
    if (ws < 0) return -1;
    switch (json_typeof(v)) {
    case JSON_NULL: return tk_schema_lit(c, rule, "null", 4);
    case JSON_TRUE: return tk_schema_lit(c, rule, "true", 4);
    case JSON_FALSE: return tk_schema_lit(c, rule, "false", 5);
    case JSON_INTEGER:
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return tk_schema_lit(c, rule, buf, strlen(buf));
    case JSON_REAL: return push_real(c, rule, json_real_value(v));
    case JSON_STRING: return tk_schema_quoted(c, rule, json_string_value(v), json_string_length(v));
    case JSON_ARRAY:
        if (lit_ws(c, rule, "[")) return -1;
        for (size_t i = 0; i < json_array_size(v); i++)
            if ((i && lit_ws(c, rule, ",")) || literal(c, rule, json_array_get(v, i), depth + 1) ||
                tk_schema_ref_el(c, rule, ws))
                return -1;
        return tk_schema_lit(c, rule, "]", 1);
    case JSON_OBJECT: {
        if (lit_ws(c, rule, "{")) return -1;
        const char *k;
        json_t *x;
        bool first = true;
        json_object_foreach((json_t *)v, k, x) {
            if ((!first && lit_ws(c, rule, ",")) || tk_schema_quoted(c, rule, k, strlen(k)) ||
                tk_schema_ref_el(c, rule, ws) || lit_ws(c, rule, ":") || literal(c, rule, x, depth + 1) ||
                tk_schema_ref_el(c, rule, ws))
                return -1;
            first = false;
        }
        return tk_schema_lit(c, rule, "}", 1);
    }
    }
    return tk_schema_fail(c, "unknown JSON value");
}

int tk_schema_literal(tk_schema_c *c, int rule, const json_t *v) { return literal(c, rule, v, 0); }

/* --- keys that are none of a set of names ----------------------------- */

#define MAX_EXCLUDED_NAME 1024 /* bytes; the trie below recurses per character */

/* A key character in its one canonical encoding. */
static int key_char(tk_schema_c *c) {
    if (c->r_key_char >= 0) return c->r_key_char;
    int r = tk_schema_rule(c);
    if (r < 0 || push_plain_char(c, r) || tk_schema_alt(c, r)) return -1;
    for (int x = 1; x < 0x80; x++)
        if (needs_escape((uint8_t)x) && (push_canonical_escape(c, r, (uint8_t)x) || tk_schema_alt(c, r))) return -1;
    return c->r_key_char = r;
}

static int utf8_char_len(uint8_t lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

/* The keys (after the opening quote, with the closing one) whose first d
 * bytes equal the names idx[0..n) share, and that are none of them. */
static int not_in_from(tk_schema_c *c, const char *const *names, const size_t *lens, const int *idx, int n, size_t d) {
    int r = tk_schema_rule(c), kc = key_char(c), rest = kc < 0 ? -1 : tk_schema_rule(c);
    int *sub = malloc(sizeof(int) * (size_t)n), rc = -1;
    uint32_t(*seen)[2] = malloc(sizeof(*seen) * ((size_t)n + 1));
    if (!sub || !seen) {
        tk_err_set(c->err, "out of memory");
        goto done;
    }
    if (rest < 0 || tk_schema_ref_el(c, rest, kc) || tk_schema_repeat_last(c, rest, 0, -1) ||
        tk_schema_lit(c, rest, "\"", 1) || tk_schema_alt(c, rest))
        goto done;
    bool ends_here = false;
    int n_seen = 0;
    for (int i = 0; i < n; i++) {
        const char *s = names[idx[i]];
        if (lens[idx[i]] == d) {
            ends_here = true;
            continue;
        }
        int len = utf8_char_len((uint8_t)s[d]);
        uint32_t cp = 0;
        for (int j = 0; j < len; j++) cp = cp << 8 | (uint8_t)s[d + (size_t)j];
        bool dup = false;
        for (int j = 0; j < n_seen && !dup; j++) dup = seen[j][0] == cp;
        if (dup) continue;
        seen[n_seen][0] = seen[n_seen][1] = cp; /* bytes packed, for equality only */
        int m = 0;
        for (int j = 0; j < n; j++) {
            const char *t = names[idx[j]];
            if (lens[idx[j]] >= d + (size_t)len && memcmp(t + d, s + d, (size_t)len) == 0) sub[m++] = idx[j];
        }
        int child = not_in_from(c, names, lens, sub, m, d + (size_t)len);
        if (child < 0) goto done;
        if ((needs_escape((uint8_t)s[d]) ? push_canonical_escape(c, r, (uint8_t)s[d]) : tk_schema_lit(c, r, s + d, (size_t)len)) ||
            tk_schema_ref_el(c, r, child) || tk_schema_alt(c, r))
            goto done;
        n_seen++;
    }
    if (!ends_here && (tk_schema_lit(c, r, "\"", 1) || tk_schema_alt(c, r))) goto done;
    /* a first character none of the names has here, then any */
    uint32_t(*cls)[2] = malloc(sizeof(*cls) * ((size_t)n + 3));
    if (!cls) {
        tk_err_set(c->err, "out of memory");
        goto done;
    }
    int k = 0;
    cls[k][0] = 0, cls[k++][1] = 0x1f;
    cls[k][0] = cls[k][1] = '"', k++;
    cls[k][0] = cls[k][1] = '\\', k++;
    for (int i = 0; i < n; i++) {
        const uint8_t *s = (const uint8_t *)names[idx[i]];
        if (lens[idx[i]] == d) continue;
        uint32_t cp;
        int len = utf8_char_len(s[d]);
        cp = len == 1 ? s[d] : (uint32_t)(s[d] & (0x7F >> len));
        for (int j = 1; j < len; j++) cp = cp << 6 | (s[d + (size_t)j] & 0x3F);
        cls[k][0] = cls[k][1] = cp;
        k++;
    }
    int cls_rc = tk_gbuilder_push_class(c->b, r, cls, k, true, c->err);
    free(cls);
    if (cls_rc || tk_schema_ref_el(c, r, rest) || tk_schema_alt(c, r)) goto done;
    for (int x = 1; x < 0x80; x++) { /* escaped first characters */
        if (!needs_escape((uint8_t)x)) continue;
        bool taken = false;
        for (int i = 0; i < n && !taken; i++) taken = lens[idx[i]] > d && (uint8_t)names[idx[i]][d] == x;
        if (!taken && (push_canonical_escape(c, r, (uint8_t)x) || tk_schema_ref_el(c, r, rest) || tk_schema_alt(c, r)))
            goto done;
    }
    rc = r;
done:
    free(sub);
    free(seen);
    return rc;
}

int tk_schema_key_not_in(tk_schema_c *c, const char *const *names, const size_t *lens, int n) {
    for (int i = 0; i < n; i++)
        if (lens[i] > MAX_EXCLUDED_NAME || memchr(names[i], 0, lens[i]))
            return tk_schema_fail(c, "property names beside additionalProperties must be at most %d bytes", MAX_EXCLUDED_NAME);
    if (n <= 0) return tk_schema_any_string(c);
    int *idx = malloc(sizeof(int) * (size_t)n);
    if (!idx) return tk_err_set(c->err, "out of memory");
    for (int i = 0; i < n; i++) idx[i] = i;
    int body = not_in_from(c, names, lens, idx, n, 0), r = body < 0 ? -1 : tk_schema_rule(c);
    free(idx);
    if (r < 0 || tk_schema_lit(c, r, "\"", 1) || tk_schema_ref_el(c, r, body) || tk_schema_alt(c, r)) return -1;
    return r;
}
