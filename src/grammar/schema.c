/* JSON Schema to the grammar IR (docs/grammar.md, "JSON Schema"): the
 * keyword walk, objects, arrays, $ref, allOf merging and anyOf / oneOf.
 * Strings and literal values are in schema_string.c, numbers in
 * schema_number.c.  Every keyword is either compiled or refused with an
 * error naming it and the JSON pointer of its schema; annotations are
 * accepted and ignored. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_internal.h"

/* --- errors and JSON pointers ---------------------------------------- */

int tk_schema_fail(tk_schema_c *c, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tk_err_set(c->err, "json schema: %s at %s", msg, c->path_len ? c->path : "(root)");
}

/* Appends "/seg" (escaped as RFC 6901 says) and returns the old length,
 * for path_pop.  A path too long for the buffer is cut (messages only). */
static int path_push(tk_schema_c *c, const char *seg) {
    int old = c->path_len;
    int cap = (int)sizeof c->path - 3;
    if (c->path_len < cap) c->path[c->path_len++] = '/';
    for (const char *p = seg; *p && c->path_len < cap; p++) {
        if (*p == '~' || *p == '/') {
            c->path[c->path_len++] = '~';
            c->path[c->path_len++] = *p == '~' ? '0' : '1';
        } else {
            c->path[c->path_len++] = *p;
        }
    }
    c->path[c->path_len] = 0;
    return old;
}

static int path_push_index(tk_schema_c *c, size_t i) {
    char b[24];
    snprintf(b, sizeof b, "%zu", i);
    return path_push(c, b);
}

static void path_pop(tk_schema_c *c, int old) {
    c->path_len = old;
    c->path[old] = 0;
}

/* --- rule building ---------------------------------------------------- */

int tk_schema_rule(tk_schema_c *c) { return tk_gbuilder_new_rule(c->b, c->err); }

int tk_schema_byte(tk_schema_c *c, int rule, uint8_t lo, uint8_t hi) {
    return tk_gbuilder_push(c->b, rule, (tk_gel){.kind = TK_GEL_BYTES, .lo = lo, .hi = hi}, c->err);
}

int tk_schema_lit(tk_schema_c *c, int rule, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (tk_schema_byte(c, rule, (uint8_t)s[i], (uint8_t)s[i])) return -1;
    return 0;
}

int tk_schema_ref_el(tk_schema_c *c, int rule, int ref) {
    return tk_gbuilder_push(c->b, rule, (tk_gel){.kind = TK_GEL_REF, .rule = ref}, c->err);
}

int tk_schema_alt(tk_schema_c *c, int rule) { return tk_gbuilder_push(c->b, rule, (tk_gel){.kind = TK_GEL_END_ALT}, c->err); }

int tk_schema_class(tk_schema_c *c, int rule, const char *pairs, bool negate) {
    uint32_t r[16][2];
    int n = 0;
    for (const char *p = pairs; p[0] && p[1] && n < 16; p += 2, n++) {
        r[n][0] = (uint8_t)p[0];
        r[n][1] = (uint8_t)p[1];
    }
    return tk_gbuilder_push_class(c->b, rule, r, n, negate, c->err);
}

int tk_schema_repeat_last(tk_schema_c *c, int rule, int m, int n) {
    return tk_gbuilder_repeat(c->b, rule, c->b->rules[rule].n - 1, m, n, c->err);
}

/* A rule of the alternatives collected so far: alts[0..n) are rule ids. */
static int union_rule(tk_schema_c *c, const int *alts, int n) {
    if (n == 0) return TK_SCHEMA_NONE;
    if (n == 1) return alts[0];
    int u = tk_schema_rule(c);
    if (u < 0) return -1;
    for (int i = 0; i < n; i++)
        if (tk_schema_ref_el(c, u, alts[i]) || tk_schema_alt(c, u)) return -1;
    return u;
}

/* --- shared rules ----------------------------------------------------- */

int tk_schema_ws(tk_schema_c *c) {
    if (c->r_ws >= 0) return c->r_ws;
    int r = tk_schema_rule(c);
    if (r < 0 || tk_schema_class(c, r, "\t\n\r\r  ", false) || tk_schema_repeat_last(c, r, 0, 20) || tk_schema_alt(c, r))
        return -1;
    return c->r_ws = r;
}

int tk_schema_digits(tk_schema_c *c) {
    if (c->r_digits >= 0) return c->r_digits;
    int r = tk_schema_rule(c);
    if (r < 0 || tk_schema_byte(c, r, '0', '9') || tk_schema_repeat_last(c, r, 0, -1) || tk_schema_alt(c, r)) return -1;
    return c->r_digits = r;
}

/* "{" ws ( member ( "," ws member )* )? "}", member ::= string ws ":" ws value ws */
static int any_object(tk_schema_c *c, int value, int string, int ws) {
    int member = tk_schema_rule(c), more = member < 0 ? -1 : tk_schema_rule(c), obj = more < 0 ? -1 : tk_schema_rule(c);
    if (obj < 0) return -1;
    if (tk_schema_ref_el(c, member, string) || tk_schema_ref_el(c, member, ws) || tk_schema_lit(c, member, ":", 1) ||
        tk_schema_ref_el(c, member, ws) || tk_schema_ref_el(c, member, value) || tk_schema_ref_el(c, member, ws) ||
        tk_schema_alt(c, member))
        return -1;
    /* more ::= ( "," ws member )* */
    int one = tk_schema_rule(c);
    if (one < 0 || tk_schema_lit(c, one, ",", 1) || tk_schema_ref_el(c, one, ws) || tk_schema_ref_el(c, one, member) ||
        tk_schema_alt(c, one) || tk_schema_ref_el(c, more, one) || tk_schema_repeat_last(c, more, 0, -1) || tk_schema_alt(c, more))
        return -1;
    if (tk_schema_lit(c, obj, "{", 1) || tk_schema_ref_el(c, obj, ws) || tk_schema_lit(c, obj, "}", 1) || tk_schema_alt(c, obj) ||
        tk_schema_lit(c, obj, "{", 1) || tk_schema_ref_el(c, obj, ws) || tk_schema_ref_el(c, obj, member) ||
        tk_schema_ref_el(c, obj, more) || tk_schema_lit(c, obj, "}", 1) || tk_schema_alt(c, obj))
        return -1;
    return obj;
}

/* "[" ws ( value ws ( "," ws value ws )* )? "]" */
static int any_array(tk_schema_c *c, int value, int ws) {
    int one = tk_schema_rule(c), more = one < 0 ? -1 : tk_schema_rule(c), arr = more < 0 ? -1 : tk_schema_rule(c);
    if (arr < 0) return -1;
    if (tk_schema_lit(c, one, ",", 1) || tk_schema_ref_el(c, one, ws) || tk_schema_ref_el(c, one, value) ||
        tk_schema_ref_el(c, one, ws) || tk_schema_alt(c, one) || tk_schema_ref_el(c, more, one) ||
        tk_schema_repeat_last(c, more, 0, -1) || tk_schema_alt(c, more))
        return -1;
    if (tk_schema_lit(c, arr, "[", 1) || tk_schema_ref_el(c, arr, ws) || tk_schema_lit(c, arr, "]", 1) || tk_schema_alt(c, arr) ||
        tk_schema_lit(c, arr, "[", 1) || tk_schema_ref_el(c, arr, ws) || tk_schema_ref_el(c, arr, value) ||
        tk_schema_ref_el(c, arr, ws) || tk_schema_ref_el(c, arr, more) || tk_schema_lit(c, arr, "]", 1) || tk_schema_alt(c, arr))
        return -1;
    return arr;
}

int tk_schema_any(tk_schema_c *c) {
    if (c->r_value >= 0) return c->r_value;
    int value = tk_schema_rule(c);
    if (value < 0) return -1;
    c->r_value = value; /* before the parts, which refer to it */
    int ws = tk_schema_ws(c), string = tk_schema_any_string(c), number = tk_schema_number(c, NULL);
    if (ws < 0 || string < 0 || number < 0) return -1;
    int obj = any_object(c, value, string, ws), arr = obj < 0 ? -1 : any_array(c, value, ws);
    if (arr < 0) return -1;
    int parts[] = {obj, arr, string, number};
    for (int i = 0; i < 4; i++)
        if (tk_schema_ref_el(c, value, parts[i]) || tk_schema_alt(c, value)) return -1;
    static const char *const lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++)
        if (tk_schema_lit(c, value, lits[i], strlen(lits[i])) || tk_schema_alt(c, value)) return -1;
    return value;
}

/* --- keywords ------------------------------------------------------- */

typedef enum kw_class { KW_ANNOTATION, KW_DEFS, KW_GENERAL, KW_OBJECT, KW_ARRAY, KW_STRING, KW_NUMBER } kw_class;

static const struct {
    const char *name;
    kw_class cls;
} keywords[] = {
    {"title", KW_ANNOTATION}, {"description", KW_ANNOTATION}, {"examples", KW_ANNOTATION},
    {"default", KW_ANNOTATION}, {"$schema", KW_ANNOTATION}, {"$id", KW_ANNOTATION},
    {"$comment", KW_ANNOTATION}, {"deprecated", KW_ANNOTATION}, {"readOnly", KW_ANNOTATION},
    {"writeOnly", KW_ANNOTATION}, {"$defs", KW_DEFS}, {"definitions", KW_DEFS},
    {"type", KW_GENERAL}, {"enum", KW_GENERAL}, {"const", KW_GENERAL},
    {"anyOf", KW_GENERAL}, {"oneOf", KW_GENERAL}, {"allOf", KW_GENERAL},
    {"$ref", KW_GENERAL}, {"nullable", KW_GENERAL}, {"properties", KW_OBJECT},
    {"required", KW_OBJECT}, {"additionalProperties", KW_OBJECT}, {"items", KW_ARRAY},
    {"prefixItems", KW_ARRAY}, {"minItems", KW_ARRAY}, {"maxItems", KW_ARRAY},
    {"minLength", KW_STRING}, {"maxLength", KW_STRING}, {"pattern", KW_STRING},
    {"format", KW_STRING}, {"minimum", KW_NUMBER}, {"maximum", KW_NUMBER},
    {"exclusiveMinimum", KW_NUMBER}, {"exclusiveMaximum", KW_NUMBER},
};

/* The class of a keyword, or -1 when it is not supported. */
static int keyword_class(const char *k) {
    for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
        if (strcmp(keywords[i].name, k) == 0) return (int)keywords[i].cls;
    return -1;
}

static bool is_ignorable(const char *k) {
    int cls = keyword_class(k);
    return cls == KW_ANNOTATION || cls == KW_DEFS;
}

static int check_keywords(tk_schema_c *c, const json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (keyword_class(k) < 0) return tk_schema_fail(c, "unsupported keyword '%s'", k);
    }
    return 0;
}

/* s without the keywords in drop (NULL-terminated) nor the annotations. */
static json_t *without(const json_t *s, const char *const *drop) {
    json_t *o = json_object();
    if (!o) return NULL;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        bool skip = is_ignorable(k);
        for (int i = 0; drop[i] && !skip; i++) skip = strcmp(drop[i], k) == 0;
        if (!skip && json_object_set(o, k, v)) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* --- types ------------------------------------------------------------ */

enum {
    T_NULL = 1,
    T_BOOL = 2,
    T_OBJECT = 4,
    T_ARRAY = 8,
    T_STRING = 16,
    T_INTEGER = 32,
    T_NUMBER = 64 | T_INTEGER,
    T_ALL = 127
};

static const struct {
    const char *name;
    int mask;
} type_names[] = {{"null", T_NULL},     {"boolean", T_BOOL},  {"object", T_OBJECT}, {"array", T_ARRAY},
                  {"string", T_STRING}, {"integer", T_INTEGER}, {"number", T_NUMBER}};

static int type_mask_of(tk_schema_c *c, const json_t *t, int *mask) {
    *mask = 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_is_array(t) ? json_array_get(t, i) : t;
        int m = 0;
        for (size_t j = 0; j < sizeof type_names / sizeof type_names[0] && json_is_string(e); j++)
            if (strcmp(type_names[j].name, json_string_value(e)) == 0) m = type_names[j].mask;
        if (!m) return tk_schema_fail(c, "'type' must be a type name or an array of them");
        *mask |= m;
    }
    return 0;
}

/* The types a schema allows: "type" (all when absent), plus null when
 * "nullable" (OpenAPI) is true. */
static int schema_types(tk_schema_c *c, const json_t *s, int *mask) {
    const json_t *t = json_object_get(s, "type"), *nullable = json_object_get(s, "nullable");
    if (nullable && !json_is_boolean(nullable)) return tk_schema_fail(c, "'nullable' must be a boolean");
    if (!t) *mask = T_ALL;
    else if (type_mask_of(c, t, mask)) return -1;
    if (json_is_true(nullable)) *mask |= T_NULL;
    return 0;
}

static int value_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE:
    case JSON_FALSE: return T_BOOL;
    case JSON_OBJECT: return T_OBJECT;
    case JSON_ARRAY: return T_ARRAY;
    case JSON_STRING: return T_STRING;
    case JSON_INTEGER: return T_INTEGER;
    default: /* an integral real is an integer to JSON Schema */
        return json_real_value(v) == floor(json_real_value(v)) ? T_INTEGER : T_NUMBER & ~T_INTEGER;
    }
}

static int compile(tk_schema_c *c, const json_t *s);

/* --- objects ---------------------------------------------------------- */

typedef struct member {
    const char *name;
    size_t len;
    int value;
    bool required;
} member;

static bool in_required(const json_t *req, const char *name) {
    for (size_t i = 0; i < json_array_size(req); i++)
        if (strcmp(json_string_value(json_array_get(req, i)), name) == 0) return true;
    return false;
}

/* The members of an object in schema order: required ones always, optional
 * ones or not; then, when allowed, additional members (key_rule, value
 * extra).  A_i: members i.. with none written yet; B_i: after one was
 * written (each member then follows a comma). */
static int object_members(tk_schema_c *c, const member *m, int n, int extra_key, int extra, int *out) {
    int ws = tk_schema_ws(c);
    if (ws < 0) return -1;
    bool *need_a = calloc((size_t)n + 1, sizeof(bool)), *need_b = calloc((size_t)n + 1, sizeof(bool));
    int *a = malloc(sizeof(int) * ((size_t)n + 1)), *b = malloc(sizeof(int) * ((size_t)n + 1));
    int rc = -1;
    if (!need_a || !need_b || !a || !b) {
        tk_err_set(c->err, "out of memory");
        goto done;
    }
    need_a[0] = true;
    need_b[n] = extra >= 0;
    for (int i = 0; i < n; i++) {
        need_a[i + 1] = need_a[i] && !m[i].required;
        need_b[i + 1] = need_b[i + 1] || need_a[i] || need_b[i];
    }
    for (int i = n; i >= 0; i--) {
        a[i] = b[i] = -1;
        if (need_b[i] && (b[i] = tk_schema_rule(c)) < 0) goto done;
        if (need_a[i] && (a[i] = tk_schema_rule(c)) < 0) goto done;
        for (int pass = 0; pass < 2; pass++) { /* pass 0: B_i, pass 1: A_i */
            int r = pass ? a[i] : b[i];
            if (r < 0) continue;
            bool comma = pass == 0;
            if (i == n) { /* the end: ε, or additional members */
                if (tk_schema_alt(c, r)) goto done;
                if (extra < 0) continue;
                if ((comma && (tk_schema_lit(c, r, ",", 1) || tk_schema_ref_el(c, r, ws))) ||
                    tk_schema_ref_el(c, r, extra_key) || tk_schema_ref_el(c, r, ws) || tk_schema_lit(c, r, ":", 1) ||
                    tk_schema_ref_el(c, r, ws) || tk_schema_ref_el(c, r, extra) || tk_schema_ref_el(c, r, ws) ||
                    tk_schema_ref_el(c, r, b[n]) || tk_schema_alt(c, r))
                    goto done;
                continue;
            }
            if ((comma && (tk_schema_lit(c, r, ",", 1) || tk_schema_ref_el(c, r, ws))) ||
                tk_schema_quoted(c, r, m[i].name, m[i].len) || tk_schema_ref_el(c, r, ws) || tk_schema_lit(c, r, ":", 1) ||
                tk_schema_ref_el(c, r, ws) || tk_schema_ref_el(c, r, m[i].value) || tk_schema_ref_el(c, r, ws) ||
                tk_schema_ref_el(c, r, b[i + 1]) || tk_schema_alt(c, r))
                goto done;
            if (!m[i].required && (tk_schema_ref_el(c, r, comma ? b[i + 1] : a[i + 1]) || tk_schema_alt(c, r))) goto done;
        }
    }
    *out = a[0];
    rc = 0;
done:
    free(need_a);
    free(need_b);
    free(a);
    free(b);
    return rc;
}

/* "properties" (in schema order), "required", "additionalProperties".  An
 * absent additionalProperties beside properties or required adds nothing
 * to the grammar (OpenAI's strict mode: only the listed properties are
 * written); on an object schema without either it means any members. */
static int object_rule(tk_schema_c *c, const json_t *s) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
                 *extra_schema = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return tk_schema_fail(c, "'properties' must be an object");
    if (req && !json_is_array(req)) return tk_schema_fail(c, "'required' must be an array of strings");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (!json_is_string(json_array_get(req, i))) return tk_schema_fail(c, "'required' must be an array of strings");
    size_t cap = json_object_size(props) + json_array_size(req);
    member *m = malloc(sizeof(member) * (cap ? cap : 1));
    const char **names = malloc(sizeof(char *) * (cap ? cap : 1));
    size_t *lens = malloc(sizeof(size_t) * (cap ? cap : 1));
    int n = 0, rc = -1, n_names = 0;
    c->nest++;
    if (!m || !names || !lens) {
        tk_err_set(c->err, "out of memory");
        goto done;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)props, k, v) {
        int old = path_push(c, "properties");
        path_push(c, k);
        int r = compile(c, v);
        path_pop(c, old);
        if (r == -1) goto done;
        bool required = in_required(req, k);
        names[n_names] = k;
        lens[n_names++] = strlen(k);
        if (r == TK_SCHEMA_NONE && required) {
            rc = TK_SCHEMA_NONE;
            goto done;
        }
        if (r != TK_SCHEMA_NONE) m[n++] = (member){k, strlen(k), r, required};
    }
    /* required names without a property schema: the additionalProperties schema */
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *name = json_string_value(json_array_get(req, i));
        if (json_object_get(props, name)) continue;
        bool dup = false;
        for (int j = 0; j < n_names && !dup; j++) dup = strcmp(names[j], name) == 0;
        if (dup) continue;
        int old = path_push(c, "additionalProperties");
        int r = compile(c, extra_schema ? extra_schema : json_true());
        path_pop(c, old);
        if (r == -1) goto done;
        if (r == TK_SCHEMA_NONE) {
            rc = TK_SCHEMA_NONE;
            goto done;
        }
        names[n_names] = name;
        lens[n_names++] = strlen(name);
        m[n++] = (member){name, strlen(name), r, true};
    }
    int extra = -1, extra_key = -1;
    if (!extra_schema && !props && !req) extra_schema = json_true();
    if (extra_schema && !json_is_false(extra_schema)) {
        int old = path_push(c, "additionalProperties");
        extra = compile(c, extra_schema);
        path_pop(c, old);
        if (extra == -1) goto done;
        if (extra == TK_SCHEMA_NONE) extra = -1;
        else if ((extra_key = n_names ? tk_schema_key_not_in(c, names, lens, n_names) : tk_schema_any_string(c)) < 0) goto done;
    }
    int body, obj, ws = tk_schema_ws(c);
    if (ws < 0 || object_members(c, m, n, extra_key, extra, &body) || (obj = tk_schema_rule(c)) < 0 ||
        tk_schema_lit(c, obj, "{", 1) || tk_schema_ref_el(c, obj, ws) || tk_schema_ref_el(c, obj, body) ||
        tk_schema_lit(c, obj, "}", 1) || tk_schema_alt(c, obj))
        goto done;
    rc = obj;
done:
    c->nest--;
    free(m);
    free(names);
    free(lens);
    return rc;
}

/* --- arrays ----------------------------------------------------------- */

/* "prefixItems", "items", "minItems", "maxItems": element j is prefix j
 * (j < k) or items; tails T_j (after j elements) are distinct rules up to
 * J = max(1, k, minItems), from where on one repeated "," ws items ws. */
static int array_rule(tk_schema_c *c, const json_t *s) {
    const json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    if (prefix && !json_is_array(prefix)) return tk_schema_fail(c, "'prefixItems' must be an array of schemas");
    if (json_is_array(items)) return tk_schema_fail(c, "'items' as an array (draft 4 tuples) is not supported; use 'prefixItems'");
    int min = 0, max = -1;
    if (tk_schema_count(c, s, "minItems", &min) || tk_schema_count(c, s, "maxItems", &max)) return -1;
    if (max >= 0 && min > max) return tk_schema_fail(c, "'minItems' greater than 'maxItems'");
    if (json_array_size(prefix) > TK_GRAMMAR_MAX_REPEAT)
        return tk_schema_fail(c, "'prefixItems' longer than %d", TK_GRAMMAR_MAX_REPEAT);
    int k = (int)json_array_size(prefix), rc = -1;
    int *el = malloc(sizeof(int) * ((size_t)k + 1));
    if (!el) return tk_err_set(c->err, "out of memory");
    c->nest++;
    for (int j = 0; j < k; j++) {
        int old = path_push(c, "prefixItems");
        path_push_index(c, (size_t)j);
        el[j] = compile(c, json_array_get(prefix, (size_t)j));
        path_pop(c, old);
        if (el[j] == -1) goto done;
        if (el[j] == TK_SCHEMA_NONE) { /* no array reaches element j */
            k = j;
            max = max < 0 || max > j ? j : max;
            break;
        }
    }
    int old = path_push(c, "items");
    int it = compile(c, items ? items : json_true());
    path_pop(c, old);
    if (it == -1) goto done;
    if (it == TK_SCHEMA_NONE) max = max < 0 || max > k ? k : max;
    el[k] = it;
    if (max >= 0 && min > max) {
        rc = TK_SCHEMA_NONE;
        goto done;
    }
    int ws = tk_schema_ws(c), arr = ws < 0 ? -1 : tk_schema_rule(c);
    if (arr < 0) goto done;
    if (min == 0 && (tk_schema_lit(c, arr, "[", 1) || tk_schema_ref_el(c, arr, ws) || tk_schema_lit(c, arr, "]", 1) ||
                     tk_schema_alt(c, arr)))
        goto done;
    if (max != 0) {
        int J = k > min ? k : min;
        if (J < 1) J = 1;
        if (max >= 0 && J > max) J = max;
        /* T_J ::= ( "," ws items ws ){0, max - J}; no repeated rule when
         * max == J (items may then be TK_SCHEMA_NONE: no rule to refer to) */
        int tail = tk_schema_rule(c);
        if (tail < 0) goto done;
        if (max < 0 || max > J) {
            int one = tk_schema_rule(c);
            if (one < 0 || tk_schema_lit(c, one, ",", 1) || tk_schema_ref_el(c, one, ws) || tk_schema_ref_el(c, one, it) ||
                tk_schema_ref_el(c, one, ws) || tk_schema_alt(c, one) || tk_schema_ref_el(c, tail, one) ||
                tk_schema_repeat_last(c, tail, 0, max < 0 ? -1 : max - J))
                goto done;
        }
        if (tk_schema_alt(c, tail)) goto done;
        for (int j = J - 1; j >= 1; j--) { /* T_j ::= "," ws e_j ws T_{j+1} | ε (j >= min) */
            int t = tk_schema_rule(c);
            if (t < 0 || tk_schema_lit(c, t, ",", 1) || tk_schema_ref_el(c, t, ws) ||
                tk_schema_ref_el(c, t, el[j < k ? j : k]) || tk_schema_ref_el(c, t, ws) || tk_schema_ref_el(c, t, tail) ||
                tk_schema_alt(c, t) || (j >= min && tk_schema_alt(c, t)))
                goto done;
            tail = t;
        }
        if (tk_schema_lit(c, arr, "[", 1) || tk_schema_ref_el(c, arr, ws) || tk_schema_ref_el(c, arr, el[0 < k ? 0 : k]) ||
            tk_schema_ref_el(c, arr, ws) || tk_schema_ref_el(c, arr, tail) || tk_schema_lit(c, arr, "]", 1) ||
            tk_schema_alt(c, arr))
            goto done;
    }
    rc = arr;
done:
    c->nest--;
    free(el);
    return rc;
}

int tk_schema_count(tk_schema_c *c, const json_t *s, const char *key, int *v) {
    const json_t *x = json_object_get(s, key);
    if (!x) return 0;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return tk_schema_fail(c, "'%s' must be a non-negative integer", key);
    if (json_integer_value(x) > TK_GRAMMAR_MAX_REPEAT)
        return tk_schema_fail(c, "'%s' over the limit (%d)", key, TK_GRAMMAR_MAX_REPEAT);
    *v = (int)json_integer_value(x);
    return 0;
}

/* --- $ref ------------------------------------------------------------- */

/* The schema a local reference ("#", "#/a/b~1c/0") names, or NULL. */
static const json_t *resolve(tk_schema_c *c, const char *ref) {
    if (ref[0] != '#') {
        tk_schema_fail(c, "$ref '%.200s': only local references ('#/...') are supported", ref);
        return NULL;
    }
    const json_t *cur = c->doc;
    const char *p = ref + 1;
    if (*p && *p != '/') {
        tk_schema_fail(c, "$ref '%.200s': anchors are not supported", ref);
        return NULL;
    }
    char seg[1024];
    while (*p == '/' && cur) {
        p++;
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = *++p == '0' ? '~' : '/';
            else if (ch == '%' && p[1] && p[2]) { /* URI fragments percent-encode */
                char hex[3] = {p[1], p[2], 0}, *end;
                long x = strtol(hex, &end, 16);
                if (*end || x <= 0) {
                    tk_schema_fail(c, "$ref '%.200s': bad percent-encoding", ref);
                    return NULL;
                }
                ch = (char)x;
                p += 2;
            }
            if (n + 1 >= sizeof seg) {
                tk_schema_fail(c, "$ref '%.200s': segment too long", ref);
                return NULL;
            }
            seg[n++] = ch;
        }
        seg[n] = 0;
        if (json_is_object(cur)) {
            cur = json_object_getn(cur, seg, n);
        } else if (json_is_array(cur)) {
            char *end;
            unsigned long i = strtoul(seg, &end, 10);
            cur = n && *end == 0 && seg[0] != '-' ? json_array_get(cur, i) : NULL;
        } else {
            cur = NULL;
        }
    }
    if (!cur) tk_schema_fail(c, "$ref '%.200s' names nothing in the document", ref);
    return cur;
}

/* A reference with nothing beside it: one rule per target, made before its
 * body so that recursion refers to it.  Recursion that enters no object or
 * array on the way would never consume input: refused. */
static int ref_rule(tk_schema_c *c, const char *ref) {
    const json_t *target = resolve(c, ref);
    if (!target) return -1;
    for (int i = 0; i < c->n_refs; i++) {
        if (c->refs[i].target != target) continue;
        if (c->refs[i].in_progress && c->refs[i].nest == c->nest)
            return tk_schema_fail(c, "$ref '%.200s' recurses without an object or array in between", ref);
        return c->refs[i].rule;
    }
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? c->cap_refs * 2 : 16;
        tk_schema_ref *n = realloc(c->refs, sizeof(tk_schema_ref) * (size_t)cap);
        if (!n) return tk_err_set(c->err, "out of memory");
        c->refs = n;
        c->cap_refs = cap;
    }
    int rule = tk_schema_rule(c);
    if (rule < 0) return -1;
    int slot = c->n_refs++;
    c->refs[slot] = (tk_schema_ref){target, rule, c->nest, true};
    char saved[sizeof c->path];
    int saved_len = c->path_len;
    memcpy(saved, c->path, (size_t)saved_len + 1);
    c->path_len = 0;
    c->path[0] = 0;
    if (ref[1]) {
        snprintf(c->path, sizeof c->path, "%s", ref + 1);
        c->path_len = (int)strlen(c->path);
    }
    int body = compile(c, target);
    memcpy(c->path, saved, (size_t)saved_len + 1);
    c->path_len = saved_len;
    c->refs[slot].in_progress = false;
    if (body == -1) return -1;
    if (body == TK_SCHEMA_NONE) return tk_schema_fail(c, "$ref '%.200s' names a schema no value satisfies", ref);
    if (tk_schema_ref_el(c, rule, body) || tk_schema_alt(c, rule)) return -1;
    return rule;
}

/* --- allOf: merging schemas ------------------------------------------- */

static json_t *merge(tk_schema_c *c, const json_t *a, const json_t *b, int depth);

/* s with its "$ref" replaced by the referenced schema merged in (for
 * allOf and for $ref beside other keywords).  New reference or NULL. */
static json_t *deref(tk_schema_c *c, const json_t *s, int depth) {
    const json_t *ref = json_is_object(s) ? json_object_get(s, "$ref") : NULL;
    if (!ref) return json_incref((json_t *)s);
    if (depth > TK_SCHEMA_MAX_DEPTH) {
        tk_schema_fail(c, "$ref chain longer than %d (a cycle?)", TK_SCHEMA_MAX_DEPTH);
        return NULL;
    }
    if (!json_is_string(ref)) {
        tk_schema_fail(c, "'$ref' must be a string");
        return NULL;
    }
    const json_t *target = resolve(c, json_string_value(ref));
    static const char *const drop[] = {"$ref", NULL};
    json_t *t = target ? deref(c, target, depth + 1) : NULL, *rest = t ? without(s, drop) : NULL;
    json_t *m = rest ? merge(c, t, rest, depth + 1) : NULL;
    json_decref(t);
    json_decref(rest);
    return m;
}

static int type_names_of(int mask, json_t *out) {
    for (size_t j = 0; j < sizeof type_names / sizeof type_names[0]; j++) {
        int m = type_names[j].mask;
        /* "number" covers "integer"; name integer only without number */
        if ((mask & m) == m && !(m == T_INTEGER && (mask & T_NUMBER) == T_NUMBER))
            if (json_array_append_new(out, json_string(type_names[j].name))) return -1;
    }
    return 0;
}

static bool merges_stricter(const char *k, bool *larger) {
    static const char *const lo[] = {"minLength", "minItems", "minimum", "exclusiveMinimum"},
                             *const hi[] = {"maxLength", "maxItems", "maximum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(k, lo[i]) == 0) return *larger = true;
        if (strcmp(k, hi[i]) == 0) return !(*larger = false);
    }
    return false;
}

/* The names of b's properties that a (with additionalProperties not true)
 * would refuse: merging them would accept what a refuses. */
static int check_closed(tk_schema_c *c, const json_t *a, const json_t *b) {
    const json_t *ap = json_object_get(a, "additionalProperties");
    if (!ap || json_is_true(ap)) return 0;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(b, "properties"), k, v) {
        if (!json_object_get(json_object_get(a, "properties"), k))
            return tk_schema_fail(c, "allOf: property '%s' is refused by another branch's additionalProperties", k);
    }
    return 0;
}

static json_t *merge_value(tk_schema_c *c, const char *k, const json_t *x, const json_t *y, int depth) {
    bool larger;
    if (is_ignorable(k) || json_equal((json_t *)x, (json_t *)y)) return json_incref((json_t *)x);
    if (strcmp(k, "required") == 0 && json_is_array(x) && json_is_array(y)) {
        json_t *u = json_copy((json_t *)x);
        for (size_t i = 0; u && i < json_array_size(y); i++) {
            bool dup = false;
            for (size_t j = 0; j < json_array_size(x) && !dup; j++) dup = json_equal(json_array_get(x, j), json_array_get(y, i));
            if (!dup && json_array_append(u, json_array_get(y, i))) return json_decref(u), NULL;
        }
        return u;
    }
    if (strcmp(k, "type") == 0) {
        int mx, my;
        if (type_mask_of(c, x, &mx) || type_mask_of(c, y, &my)) return NULL;
        json_t *t = json_array();
        if (t && type_names_of(mx & my, t)) return json_decref(t), NULL;
        return t;
    }
    if (strcmp(k, "nullable") == 0 && json_is_boolean(x) && json_is_boolean(y)) return json_false();
    if (merges_stricter(k, &larger) && json_is_number(x) && json_is_number(y)) {
        bool x_first = (json_number_value(x) > json_number_value(y)) == larger;
        return json_incref((json_t *)(x_first ? x : y));
    }
    if (strcmp(k, "properties") == 0 && json_is_object(x) && json_is_object(y)) {
        json_t *u = json_copy((json_t *)x);
        const char *pk;
        json_t *pv;
        json_object_foreach((json_t *)y, pk, pv) {
            const json_t *old = json_object_get(x, pk);
            json_t *nv = old ? merge(c, old, pv, depth + 1) : json_incref(pv);
            if (!u || !nv || json_object_set_new(u, pk, nv)) return json_decref(u), NULL;
        }
        return u;
    }
    if (strcmp(k, "items") == 0 || strcmp(k, "additionalProperties") == 0) return merge(c, x, y, depth + 1);
    tk_schema_fail(c, "allOf: cannot merge differing '%s'", k);
    return NULL;
}

/* The conjunction of two schemas when it is one schema keyword by keyword
 * (disjoint or equal keywords, required united, type intersected, bounds
 * the stricter, properties merged); else an error. */
static json_t *merge(tk_schema_c *c, const json_t *a, const json_t *b, int depth) {
    if (depth > TK_SCHEMA_MAX_DEPTH) {
        tk_schema_fail(c, "allOf nested deeper than %d", TK_SCHEMA_MAX_DEPTH);
        return NULL;
    }
    if (++c->work > TK_SCHEMA_MAX_WORK) {
        tk_schema_fail(c, "more than %d subschemas to compile", TK_SCHEMA_MAX_WORK);
        return NULL;
    }
    if (json_is_false(a) || json_is_true(b)) return json_incref((json_t *)a);
    if (json_is_false(b) || json_is_true(a)) return json_incref((json_t *)b);
    if (!json_is_object(a) || !json_is_object(b)) {
        tk_schema_fail(c, "a schema must be an object or a boolean");
        return NULL;
    }
    json_t *da = deref(c, a, depth + 1), *db = da ? deref(c, b, depth + 1) : NULL, *out = NULL;
    if (!db || check_keywords(c, da) || check_keywords(c, db) || check_closed(c, da, db) || check_closed(c, db, da)) goto done;
    if ((json_object_get(da, "anyOf") || json_object_get(da, "oneOf")) &&
        (json_object_get(db, "anyOf") || json_object_get(db, "oneOf"))) {
        tk_schema_fail(c, "allOf: cannot merge two anyOf/oneOf");
        goto done;
    }
    out = json_copy(da);
    const char *k;
    json_t *v;
    json_object_foreach(db, k, v) {
        const json_t *x = json_object_get(da, k);
        json_t *nv = x ? merge_value(c, k, x, v, depth) : json_incref(v);
        if (!out || !nv || json_object_set_new(out, k, nv)) {
            json_decref(out);
            out = NULL;
            break;
        }
    }
done:
    json_decref(da);
    json_decref(db);
    return out;
}

/* --- enum, const, types, combinators ---------------------------------- */

/* Each value (of the allowed types) in its canonical serialization. */
static int enum_rule(tk_schema_c *c, const json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!is_ignorable(k) && strcmp(k, "type") && strcmp(k, "nullable") && strcmp(k, "enum") && strcmp(k, "const"))
            return tk_schema_fail(c, "'%s' beside enum/const is not supported", k);
    }
    const json_t *en = json_object_get(s, "enum"), *cst = json_object_get(s, "const");
    if (en && cst) return tk_schema_fail(c, "enum and const together are not supported");
    if (en && !json_is_array(en)) return tk_schema_fail(c, "'enum' must be an array");
    size_t n = en ? json_array_size(en) : 1;
    if (n > TK_SCHEMA_MAX_ENUM) return tk_schema_fail(c, "'enum' has more than %d values", TK_SCHEMA_MAX_ENUM);
    int mask;
    if (schema_types(c, s, &mask)) return -1;
    int r = tk_schema_rule(c), n_alts = 0;
    if (r < 0) return -1;
    bool has_null = false;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = en ? json_array_get(en, i) : cst;
        if (!(value_type(x) & mask)) continue;
        has_null |= json_is_null(x);
        if (tk_schema_literal(c, r, x) || tk_schema_alt(c, r)) return -1;
        n_alts++;
    }
    if (json_is_true(json_object_get(s, "nullable")) && !has_null) {
        if (tk_schema_lit(c, r, "null", 4) || tk_schema_alt(c, r)) return -1;
        n_alts++;
    }
    return n_alts ? r : TK_SCHEMA_NONE;
}

static int types_rule(tk_schema_c *c, const json_t *s) {
    int mask, alts[7], n = 0;
    if (schema_types(c, s, &mask)) return -1;
    int r;
    if (mask & T_NULL) {
        if ((r = tk_schema_rule(c)) < 0 || tk_schema_lit(c, r, "null", 4) || tk_schema_alt(c, r)) return -1;
        alts[n++] = r;
    }
    if (mask & T_BOOL) {
        if ((r = tk_schema_rule(c)) < 0 || tk_schema_lit(c, r, "true", 4) || tk_schema_alt(c, r) ||
            tk_schema_lit(c, r, "false", 5) || tk_schema_alt(c, r))
            return -1;
        alts[n++] = r;
    }
    int (*const part[])(tk_schema_c *, const json_t *) = {object_rule, array_rule, tk_schema_string};
    const int bit[] = {T_OBJECT, T_ARRAY, T_STRING};
    for (int i = 0; i < 3; i++) {
        if (!(mask & bit[i])) continue;
        if ((r = part[i](c, s)) == -1) return -1;
        if (r != TK_SCHEMA_NONE) alts[n++] = r;
    }
    if (mask & T_INTEGER) {
        r = (mask & T_NUMBER) == T_NUMBER ? tk_schema_number(c, s) : tk_schema_integer(c, s);
        if (r == -1) return -1;
        if (r != TK_SCHEMA_NONE) alts[n++] = r;
    }
    return union_rule(c, alts, n);
}

/* anyOf / oneOf (as anyOf: a value matching two branches is accepted too):
 * the union of the branches, each merged with the keywords beside. */
static int any_of_rule(tk_schema_c *c, const json_t *s, const char *key) {
    const json_t *br = json_object_get(s, key);
    if (!json_is_array(br) || json_array_size(br) == 0) return tk_schema_fail(c, "'%s' must be a non-empty array", key);
    if (json_array_size(br) > TK_SCHEMA_MAX_ENUM) return tk_schema_fail(c, "'%s' has more than %d schemas", key, TK_SCHEMA_MAX_ENUM);
    static const char *const drop[] = {"anyOf", "oneOf", NULL};
    json_t *rest = without(s, drop);
    int *alts = malloc(sizeof(int) * json_array_size(br)), n = 0, rc = -1;
    if (!rest || !alts) {
        tk_err_set(c->err, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < json_array_size(br); i++) {
        int old = path_push(c, key);
        path_push_index(c, i);
        int r;
        if (json_object_size(rest) == 0) {
            r = compile(c, json_array_get(br, i));
        } else {
            json_t *m = merge(c, rest, json_array_get(br, i), 0);
            r = m ? compile(c, m) : -1;
            json_decref(m);
        }
        path_pop(c, old);
        if (r == -1) goto done;
        if (r != TK_SCHEMA_NONE) alts[n++] = r;
    }
    rc = union_rule(c, alts, n);
done:
    json_decref(rest);
    free(alts);
    return rc;
}

static int all_of_rule(tk_schema_c *c, const json_t *s) {
    const json_t *br = json_object_get(s, "allOf");
    if (!json_is_array(br) || json_array_size(br) == 0) return tk_schema_fail(c, "'allOf' must be a non-empty array");
    static const char *const drop[] = {"allOf", NULL};
    json_t *acc = without(s, drop);
    for (size_t i = 0; acc && i < json_array_size(br); i++) {
        int old = path_push(c, "allOf");
        path_push_index(c, i);
        json_t *m = merge(c, acc, json_array_get(br, i), 0);
        path_pop(c, old);
        json_decref(acc);
        acc = m;
    }
    int r = acc ? compile(c, acc) : -1;
    json_decref(acc);
    return r;
}

static int schema_object(tk_schema_c *c, const json_t *s) {
    if (check_keywords(c, s)) return -1;
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return tk_schema_fail(c, "'$ref' must be a string");
        static const char *const drop[] = {"$ref", NULL};
        json_t *rest = without(s, drop);
        if (!rest) return tk_err_set(c->err, "out of memory");
        size_t n_rest = json_object_size(rest);
        json_decref(rest);
        if (n_rest == 0) return ref_rule(c, json_string_value(ref));
        json_t *m = deref(c, s, 0);
        int r = m ? compile(c, m) : -1;
        json_decref(m);
        return r;
    }
    if (json_object_get(s, "allOf")) return all_of_rule(c, s);
    bool any = json_object_get(s, "anyOf") != NULL, one = json_object_get(s, "oneOf") != NULL;
    if (any && one) return tk_schema_fail(c, "anyOf and oneOf together are not supported");
    if (any || one) return any_of_rule(c, s, any ? "anyOf" : "oneOf");
    if (json_object_get(s, "enum") || json_object_get(s, "const")) return enum_rule(c, s);
    return types_rule(c, s);
}

static int compile(tk_schema_c *c, const json_t *s) {
    if (json_is_true(s)) return tk_schema_any(c);
    if (json_is_false(s)) return TK_SCHEMA_NONE;
    if (!json_is_object(s)) return tk_schema_fail(c, "a schema must be an object or a boolean");
    if (c->depth >= TK_SCHEMA_MAX_DEPTH) return tk_schema_fail(c, "schemas nested deeper than %d", TK_SCHEMA_MAX_DEPTH);
    if (++c->work > TK_SCHEMA_MAX_WORK) return tk_schema_fail(c, "more than %d subschemas to compile", TK_SCHEMA_MAX_WORK);
    c->depth++;
    int r = schema_object(c, s);
    c->depth--;
    return r;
}

int tk_grammar_from_json_schema(tk_grammar *g, const char *schema, size_t len, tk_err *err) {
    *g = (tk_grammar){0};
    if (len > TK_GRAMMAR_MAX_TEXT) return tk_err_set(err, "json schema: longer than %d bytes", TK_GRAMMAR_MAX_TEXT);
    json_error_t je;
    json_t *doc = json_loadb(schema, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!doc) return tk_err_set(err, "json schema: invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
    tk_gbuilder b = {0};
    tk_schema_c c = {.b = &b, .err = err, .doc = doc};
    c.r_ws = c.r_char = c.r_hex = c.r_digits = c.r_value = c.r_string = c.r_number = c.r_key_char = -1;
    for (int i = 0; i < TK_SCHEMA_N_FORMATS; i++) c.r_format[i] = -1;
    int root = compile(&c, doc);
    if (root == TK_SCHEMA_NONE) root = tk_schema_fail(&c, "the schema accepts no JSON value");
    free(c.refs);
    json_decref(doc);
    if (root < 0) {
        tk_gbuilder_free(&b);
        return -1;
    }
    return tk_gbuilder_finish(&b, root, g, err);
}
