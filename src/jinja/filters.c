/* Jinja's builtin filters used by chat templates ("x | trim", "xs | join(', ')",
 * "tools | tojson(indent=4)"...), with Jinja 3.1 semantics. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lexer.h"
#include "runtime.h"
#include "strops.h"
#include "utf8.h"

typedef int (*filter_fn)(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out);

static int bind0(cj_ctx *c, const cj_args *a, const char *name) { return cj_bind(c, a, name, NULL, 0, NULL); }

/* str() of v, also for Undefined (''); the string filters scan it: charged. */
static int as_str(cj_ctx *c, cj_val v, cj_val *out) {
    if (cj_to_str(c, v, out)) return -1;
    if (!cj_charge_work(c, cj_S(*out)->len)) return 0;
    cj_unref(c, *out);
    return -1;
}

static int f_trim(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"chars"};
    const cj_val *sl[1];
    const cj_str *chars;
    cj_val s;
    if (cj_bind(c, a, "trim", pn, 1, sl) || cj_arg_str(c, sl[0], "trim", "chars", &chars) || as_str(c, v, &s)) return -1;
    int r = cj_str_strip(c, cj_S(s), chars, true, true, out);
    cj_unref(c, s);
    return r;
}

static int case_filter(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out, const char *name, cj_case mode) {
    cj_val s;
    if (bind0(c, a, name) || as_str(c, v, &s)) return -1;
    int r = cj_str_case(c, cj_S(s), mode, out);
    cj_unref(c, s);
    return r;
}
static int f_upper(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) { return case_filter(c, v, a, out, "upper", CJ_CASE_UPPER); }
static int f_lower(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) { return case_filter(c, v, a, out, "lower", CJ_CASE_LOWER); }
static int f_capitalize(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    return case_filter(c, v, a, out, "capitalize", CJ_CASE_CAPITALIZE);
}
static int f_title(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    return case_filter(c, v, a, out, "title", CJ_CASE_TITLE_FILTER);
}

static int f_length(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    int64_t n;
    if (bind0(c, a, "length") || cj_len(c, v, &n)) return -1;
    *out = cj_int(n);
    return 0;
}

static int f_string(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    if (bind0(c, a, "string")) return -1;
    return as_str(c, v, out);
}

static int f_escape(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    cj_val s;
    if (bind0(c, a, "escape") || as_str(c, v, &s)) return -1;
    cj_buf b;
    cj_tmpbuf(c, &b);
    int r = 0;
    for (size_t i = 0; !r && i < cj_S(s)->len; i++) {
        char ch = cj_S(s)->s[i];
        switch (ch) {
        case '&': r = cj_buf_puts(&b, "&amp;"); break;
        case '<': r = cj_buf_puts(&b, "&lt;"); break;
        case '>': r = cj_buf_puts(&b, "&gt;"); break;
        case '"': r = cj_buf_puts(&b, "&#34;"); break;
        case '\'': r = cj_buf_puts(&b, "&#39;"); break;
        default: r = cj_buf_putc(&b, ch);
        }
    }
    cj_unref(c, s);
    if (r) {
        cj_buf_free(&b);
        return cj_fail_buf(c);
    }
    return cj_buf_to_str(c, &b, out);
}

static int f_default(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"default_value", "boolean"};
    const cj_val *sl[2];
    if (cj_bind(c, a, "default", pn, 2, sl)) return -1;
    bool boolean = sl[1] && cj_truthy(*sl[1]);
    if (v.kind == CJ_UNDEF || (boolean && !cj_truthy(v))) {
        if (sl[0]) *out = cj_ref(*sl[0]);
        else return cj_new_str(c, "", 0, out);
        return 0;
    }
    *out = cj_ref(v);
    return 0;
}

static int first_last(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out, bool last) {
    cj_val items;
    if (bind0(c, a, last ? "last" : "first") || cj_iter_list(c, v, &items)) return -1;
    cj_list *l = cj_L(items);
    int r = 0;
    if (l->n) *out = cj_ref(l->v[last ? l->n - 1 : 0]);
    else r = cj_new_undef(c, out, "No %s item, sequence was empty.", last ? "last" : "first");
    cj_unref(c, items);
    return r;
}
static int f_first(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) { return first_last(c, v, a, out, false); }
static int f_last(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) { return first_last(c, v, a, out, true); }

/* Jinja's make_attrgetter: "a.b.0" looks up a, then b, then item 0. */
static int attr_path(cj_ctx *c, cj_val item, cj_val attr, const cj_val *dflt, cj_val *out) {
    *out = cj_undef(); /* defined on failure too: callers release it either way */
    int r;
    if (attr.kind != CJ_STR) {
        r = cj_getitem(c, item, attr, out);
    } else {
        const char *s = cj_S(attr)->s, *end = s + cj_S(attr)->len;
        cj_val cur = cj_ref(item);
        r = 0;
        while (!r) {
            const char *dot = memchr(s, '.', (size_t)(end - s));
            const char *pe = dot ? dot : end;
            bool digits = pe > s;
            int64_t num = 0;
            for (const char *p = s; p < pe; p++) {
                if (*p < '0' || *p > '9' || num > INT64_MAX / 10 - 10) digits = false;
                else num = num * 10 + (*p - '0');
            }
            cj_val key, next;
            if (digits) key = cj_int(num);
            else if (cj_new_str(c, s, (size_t)(pe - s), &key)) {
                r = -1;
                break;
            }
            r = cj_getitem(c, cur, key, &next);
            cj_unref(c, key);
            cj_unref(c, cur);
            cur = r ? cj_undef() : next;
            if (!dot) break;
            s = dot + 1;
        }
        if (r) {
            cj_unref(c, cur);
            return -1;
        }
        *out = cur;
    }
    if (!r && dflt && out->kind == CJ_UNDEF) {
        cj_unref(c, *out);
        *out = cj_ref(*dflt);
    }
    return r;
}

static int f_join(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"d", "attribute"};
    const cj_val *sl[2];
    cj_val items, sep;
    if (cj_bind(c, a, "join", pn, 2, sl)) return -1;
    if (sl[0]) {
        if (as_str(c, *sl[0], &sep)) return -1;
    } else if (cj_new_str(c, "", 0, &sep)) {
        return -1;
    }
    if (cj_iter_list(c, v, &items)) {
        cj_unref(c, sep);
        return -1;
    }
    cj_buf b;
    cj_tmpbuf(c, &b);
    cj_list *l = cj_L(items);
    int r = 0;
    for (size_t i = 0; !r && i < l->n; i++) {
        if (i && cj_buf_put(&b, cj_S(sep)->s, cj_S(sep)->len)) {
            r = cj_fail_buf(c);
            break;
        }
        if (sl[1] && !(sl[1]->kind == CJ_NONE)) {
            cj_val x;
            r = attr_path(c, l->v[i], *sl[1], NULL, &x);
            if (!r) r = cj_write_str(c, x, &b);
            cj_unref(c, x);
        } else {
            r = cj_write_str(c, l->v[i], &b);
        }
    }
    cj_unref(c, items);
    cj_unref(c, sep);
    if (r) {
        cj_buf_free(&b);
        return -1;
    }
    return cj_buf_to_str(c, &b, out);
}

/* A fresh (non-tuple) list with the items of v. */
static int to_list(cj_ctx *c, cj_val v, cj_val *out) {
    cj_val items;
    if (cj_iter_list(c, v, &items)) return -1;
    if (!cj_L(items)->tuple) {
        *out = items;
        return 0;
    }
    cj_list *l = cj_L(items);
    int r = cj_new_list(c, l->n, false, out);
    for (size_t i = 0; !r && i < l->n; i++) r = cj_list_push(c, *out, cj_ref(l->v[i]));
    if (r && out->kind == CJ_LIST) cj_unref(c, *out);
    cj_unref(c, items);
    return r;
}

static int f_list(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    if (bind0(c, a, "list")) return -1;
    return to_list(c, v, out);
}

static int f_items(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    if (bind0(c, a, "items")) return -1;
    if (v.kind == CJ_UNDEF) return cj_new_list(c, 0, false, out);
    if (v.kind != CJ_DICT) return cj_fail(c, "Can only get item pairs from a mapping.");
    static const cj_args none = {0};
    return cj_method_call(c, v, "items", &none, out);
}

/* Python's int(str, base) for the |int filter: optional sign, underscores
 * between digits, surrounding whitespace. */
static bool parse_int(const char *s, size_t n, int base, int64_t *out) {
    size_t i = 0;
    while (i < n && cj_space_len(s, n, i)) i += cj_space_len(s, n, i);
    while (n > i && cj_isspace((unsigned char)s[n - 1])) n--;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (base == 16 && i + 1 < n && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X')) i += 2;
    if (base == 8 && i + 1 < n && s[i] == '0' && (s[i + 1] == 'o' || s[i + 1] == 'O')) i += 2;
    if (base == 2 && i + 1 < n && s[i] == '0' && (s[i + 1] == 'b' || s[i + 1] == 'B')) i += 2;
    if (i >= n) return false;
    __int128 v = 0;
    bool prev_digit = false;
    for (; i < n; i++) {
        char ch = s[i];
        if (ch == '_' && prev_digit && i + 1 < n && s[i + 1] != '_') {
            prev_digit = false;
            continue;
        }
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'z' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'Z' ? ch - 'A' + 10 : 99;
        if (d >= base) return false;
        v = v * base + d;
        if (v > (__int128)INT64_MAX + 1) return false;
        prev_digit = true;
    }
    if (!prev_digit) return false;
    if (neg) v = -v;
    if (v > INT64_MAX) return false;
    *out = (int64_t)v;
    return true;
}

/* Python's float(str): decimal/scientific, inf, nan; whitespace around. */
static bool parse_float(const char *s, double *out) {
    while (*s && cj_isspace((unsigned char)*s)) s++;
    char buf[128];
    size_t k = 0;
    for (const char *p = s; *p && !cj_isspace((unsigned char)*p); p++) {
        if (*p == '_') continue;
        if (k + 1 >= sizeof buf) return false;
        buf[k++] = *p;
    }
    buf[k] = 0;
    if (k == 0) return false;
    const char *t = buf + (buf[0] == '+' || buf[0] == '-');
    bool ok = strspn(t, "0123456789.eE+-") == strlen(t) || !strcasecmp(t, "inf") || !strcasecmp(t, "infinity") ||
              !strcasecmp(t, "nan");
    if (!ok) return false;
    char *end;
    double d = strtod(buf, &end);
    if (*end) return false;
    *out = d;
    return true;
}

static int f_int(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"default", "base"};
    const cj_val *sl[2];
    int64_t base;
    if (cj_bind(c, a, "int", pn, 2, sl) || cj_arg_int(c, sl[1], "int", "base", 10, &base)) return -1;
    if (base < 2 || base > 36) return cj_fail(c, "int() base must be >= 2 and <= 36");
    int64_t iv;
    double d;
    switch (v.kind) {
    case CJ_UNDEF: return cj_fail_undefined(c, v);
    case CJ_BOOL:
    case CJ_INT: *out = cj_int(cj_as_int(v)); return 0;
    case CJ_FLOAT:
        if (!isfinite(v.f) || fabs(v.f) >= 9.2e18) return cj_fail(c, "cannot convert float %g to integer", v.f);
        *out = cj_int((int64_t)v.f);
        return 0;
    case CJ_STR:
        if (cj_charge_work(c, cj_S(v)->len)) return -1;
        if (parse_int(cj_S(v)->s, cj_S(v)->len, (int)base, &iv)) {
            *out = cj_int(iv);
            return 0;
        }
        /* Jinja then tries int(float(value)), so "42.23"|int is 42 */
        if (parse_float(cj_S(v)->s, &d) && isfinite(d) && fabs(d) < 9.2e18) {
            *out = cj_int((int64_t)d);
            return 0;
        }
        break;
    default: break;
    }
    *out = sl[0] ? cj_ref(*sl[0]) : cj_int(0);
    return 0;
}

static int f_float(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"default"};
    const cj_val *sl[1];
    double d;
    if (cj_bind(c, a, "float", pn, 1, sl)) return -1;
    if (v.kind == CJ_UNDEF) return cj_fail_undefined(c, v);
    if (cj_is_num(v)) {
        *out = cj_float(cj_as_float(v));
        return 0;
    }
    if (v.kind == CJ_STR && cj_charge_work(c, cj_S(v)->len)) return -1;
    if (v.kind == CJ_STR && parse_float(cj_S(v)->s, &d)) {
        *out = cj_float(d);
        return 0;
    }
    *out = sl[0] ? cj_ref(*sl[0]) : cj_float(0.0);
    return 0;
}

static int f_abs(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    if (bind0(c, a, "abs")) return -1;
    if (v.kind == CJ_UNDEF) return cj_fail_undefined(c, v);
    if (!cj_is_num(v)) return cj_fail(c, "bad operand type for abs(): '%s'", cj_type_name(v));
    if (v.kind == CJ_FLOAT) {
        *out = cj_float(fabs(v.f));
        return 0;
    }
    int64_t x = cj_as_int(v);
    if (x == INT64_MIN) return cj_fail(c, "integer overflow");
    *out = cj_int(x < 0 ? -x : x);
    return 0;
}

static int f_round(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"precision", "method"};
    const cj_val *sl[2];
    int64_t prec;
    const cj_str *method;
    if (cj_bind(c, a, "round", pn, 2, sl) || cj_arg_int(c, sl[0], "round", "precision", 0, &prec) ||
        cj_arg_str(c, sl[1], "round", "method", &method))
        return -1;
    const char *m = method ? method->s : "common";
    if (strcmp(m, "common") && strcmp(m, "ceil") && strcmp(m, "floor"))
        return cj_fail(c, "method must be common, ceil or floor");
    if (v.kind == CJ_UNDEF) return cj_fail_undefined(c, v);
    if (!cj_is_num(v)) return cj_fail(c, "type %s doesn't define __round__ method", cj_type_name(v));
    if (prec > 300) prec = 300;
    if (prec < -300) prec = -300;
    double x = cj_as_float(v), scale = pow(10.0, (double)prec), y = x * scale;
    if (m[0] == 'c' && m[1] == 'e') y = ceil(y);
    else if (m[0] == 'f') y = floor(y);
    else y = nearbyint(y); /* Python rounds halves to even */
    /* ceil/floor always give floats; Python's round() keeps ints as ints */
    if (m[0] == 'c' && m[1] == 'o' && cj_is_intlike(v) && prec >= 0) *out = cj_int(cj_as_int(v));
    else *out = cj_float(isfinite(y / scale) ? y / scale : x);
    return 0;
}

static int f_replace(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"old", "new", "count"};
    const cj_val *sl[3];
    int64_t count;
    if (cj_bind(c, a, "replace", pn, 3, sl) || cj_arg_int(c, sl[2], "replace", "count", -1, &count)) return -1;
    if (!sl[0] || !sl[1]) return cj_fail(c, "replace() needs 'old' and 'new'");
    cj_val s, o, n;
    if (as_str(c, v, &s)) return -1;
    if (as_str(c, *sl[0], &o)) {
        cj_unref(c, s);
        return -1;
    }
    int r = as_str(c, *sl[1], &n);
    if (!r) {
        r = cj_str_replace(c, cj_S(s), cj_S(o), cj_S(n), count, out);
        cj_unref(c, n);
    }
    cj_unref(c, s);
    cj_unref(c, o);
    return r;
}

static int f_reverse(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    if (bind0(c, a, "reverse")) return -1;
    if (v.kind == CJ_STR) {
        static const cj_val step = {.kind = CJ_INT, .i = -1};
        return cj_slice(c, v, NULL, NULL, &step, out);
    }
    cj_val items;
    if (cj_iter_list(c, v, &items)) return -1;
    cj_list *l = cj_L(items);
    int r = cj_new_list(c, l->n, false, out);
    for (size_t i = l->n; !r && i-- > 0;) r = cj_list_push(c, *out, cj_ref(l->v[i]));
    if (r && out->kind == CJ_LIST) cj_unref(c, *out);
    cj_unref(c, items);
    return r;
}

static int f_indent(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"width", "first", "blank"};
    const cj_val *sl[3];
    if (cj_bind(c, a, "indent", pn, 3, sl)) return -1;
    cj_buf ind;
    cj_tmpbuf(c, &ind);
    int r = 0;
    if (sl[0] && sl[0]->kind == CJ_STR) {
        r = cj_buf_put(&ind, cj_S(*sl[0])->s, cj_S(*sl[0])->len);
    } else {
        int64_t w;
        if (cj_arg_int(c, sl[0], "indent", "width", 4, &w)) {
            cj_buf_free(&ind);
            return -1;
        }
        if (w > 0) r = cj_buf_fill(&ind, ' ', (uint64_t)w > SIZE_MAX ? SIZE_MAX : (size_t)w);
    }
    bool first = sl[1] && cj_truthy(*sl[1]), blank = sl[2] && cj_truthy(*sl[2]);
    cj_val s, lines;
    if (r) {
        cj_buf_free(&ind);
        return cj_fail_buf(c);
    }
    if (as_str(c, v, &s)) {
        cj_buf_free(&ind);
        return -1;
    }
    /* Jinja appends "\n" before splitlines(), so a trailing newline survives */
    cj_buf tmp;
    cj_tmpbuf(c, &tmp);
    if (cj_buf_put(&tmp, cj_S(s)->s, cj_S(s)->len) || cj_buf_putc(&tmp, '\n')) r = cj_fail_buf(c);
    cj_unref(c, s);
    cj_val s2;
    if (r || cj_buf_to_str(c, &tmp, &s2)) {
        cj_buf_free(&tmp);
        cj_buf_free(&ind);
        return -1;
    }
    r = cj_str_splitlines(c, cj_S(s2), &lines);
    cj_unref(c, s2);
    if (r) {
        cj_buf_free(&ind);
        return -1;
    }
    cj_buf b;
    cj_tmpbuf(c, &b);
    cj_list *l = cj_L(lines);
    if (first) r = cj_buf_put(&b, ind.p, ind.n);
    for (size_t i = 0; !r && i < l->n; i++) {
        cj_str *line = cj_S(l->v[i]);
        if (i) r = cj_buf_putc(&b, '\n');
        if (!r && i > 0 && (blank || line->len > 0)) r = cj_buf_put(&b, ind.p, ind.n);
        if (!r) r = cj_buf_put(&b, line->s, line->len);
    }
    cj_unref(c, lines);
    cj_buf_free(&ind);
    if (r) {
        cj_buf_free(&b);
        return cj_fail_buf(c);
    }
    return cj_buf_to_str(c, &b, out);
}

static int f_tojson(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    const cj_val *sl[4];
    if (cj_bind(c, a, "tojson", pn, 4, sl)) return -1;
    cj_json_opts o = {0};
    o.ensure_ascii = sl[0] && cj_truthy(*sl[0]);
    o.sort_keys = sl[3] && cj_truthy(*sl[3]);
    cj_buf ind;
    cj_tmpbuf(c, &ind);
    int r = 0;
    if (sl[1] && sl[1]->kind != CJ_NONE) {
        o.indent_set = true;
        if (sl[1]->kind == CJ_STR) {
            r = cj_buf_put(&ind, cj_S(*sl[1])->s, cj_S(*sl[1])->len);
        } else if (cj_is_intlike(*sl[1])) {
            int64_t spaces = cj_as_int(*sl[1]);
            if (spaces > 0) r = cj_buf_fill(&ind, ' ', (uint64_t)spaces > SIZE_MAX ? SIZE_MAX : (size_t)spaces);
        } else {
            cj_buf_free(&ind);
            return cj_fail(c, "tojson(): indent must be an integer or a string");
        }
        if (r) {
            cj_buf_free(&ind);
            return cj_fail_buf(c);
        }
        o.indent = ind.p ? ind.p : "";
        o.indent_len = ind.n;
    }
    o.item_sep = o.indent_set ? "," : ", ";
    o.key_sep = ": ";
    if (sl[2] && sl[2]->kind != CJ_NONE) {
        cj_val sep = *sl[2];
        if (sep.kind != CJ_LIST || cj_L(sep)->n != 2 || cj_L(sep)->v[0].kind != CJ_STR || cj_L(sep)->v[1].kind != CJ_STR) {
            cj_buf_free(&ind);
            return cj_fail(c, "tojson(): separators must be a pair of strings");
        }
        o.item_sep = cj_S(cj_L(sep)->v[0])->s;
        o.key_sep = cj_S(cj_L(sep)->v[1])->s;
        o.item_sep_len = cj_S(cj_L(sep)->v[0])->len;
        o.key_sep_len = cj_S(cj_L(sep)->v[1])->len;
    } else {
        o.item_sep_len = strlen(o.item_sep);
        o.key_sep_len = strlen(o.key_sep);
    }
    cj_buf b;
    cj_tmpbuf(c, &b);
    r = cj_tojson(c, v, &o, &b, 0);
    cj_buf_free(&ind);
    if (r) {
        cj_buf_free(&b);
        return -1;
    }
    return cj_buf_to_str(c, &b, out);
}

static int f_attr(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"name"};
    const cj_val *sl[1];
    const cj_str *name;
    if (cj_bind(c, a, "attr", pn, 1, sl) || cj_arg_str(c, sl[0], "attr", "name", &name)) return -1;
    if (!name) return cj_fail(c, "attr() needs a name");
    return cj_getattr(c, v, name->s, out);
}

/* Arguments after the first k positional ones (for map/select). */
static cj_args rest_args(const cj_args *a, int k) {
    cj_args r = *a;
    r.npos = a->npos > k ? a->npos - k : 0;
    r.pos = a->npos > k ? a->pos + k : NULL; /* no positional arguments: pos may be NULL */
    return r;
}

static int f_map(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    cj_val items;
    const cj_val *attr = NULL, *dflt = NULL;
    const char *fname = NULL;
    cj_args sub = {0};
    if (a->npos == 0) {
        for (int k = 0; k < a->nkw; k++) {
            if (!strcmp(a->kwname[k], "attribute")) attr = &a->kw[k];
            else if (!strcmp(a->kwname[k], "default")) dflt = &a->kw[k];
            else return cj_fail(c, "map(): unexpected keyword argument '%s'", a->kwname[k]);
        }
        if (!attr) return cj_fail(c, "map() needs a filter name or attribute=");
    } else {
        if (a->pos[0].kind != CJ_STR) return cj_fail(c, "map(): the filter name must be a string");
        fname = cj_S(a->pos[0])->s;
        if (!cj_filter_known(fname)) return cj_fail(c, "no filter named '%s'", fname);
        sub = rest_args(a, 1);
    }
    /* Jinja's map is "if value: for item in value", so falsy non-iterables give nothing */
    if (!cj_truthy(v) ? cj_new_list(c, 0, false, &items) : cj_iter_list(c, v, &items)) return -1;
    cj_list *l = cj_L(items);
    int r = cj_new_list(c, l->n, false, out);
    for (size_t i = 0; !r && i < l->n; i++) {
        cj_val x;
        r = fname ? cj_filter_apply(c, fname, l->v[i], &sub, &x) : attr_path(c, l->v[i], *attr, dflt, &x);
        if (!r) r = cj_list_push(c, *out, x);
    }
    if (r && out->kind == CJ_LIST) cj_unref(c, *out);
    cj_unref(c, items);
    return r;
}

/* select/reject/selectattr/rejectattr */
static int select_common(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out, bool attr, bool keep) {
    const char *fname = attr ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
    int k = 0;
    if (attr && a->npos < 1) return cj_fail(c, "%s() needs an attribute name", fname);
    const cj_val *attr_name = attr ? &a->pos[k++] : NULL;
    const char *test = NULL;
    if (a->npos > k) {
        if (a->pos[k].kind != CJ_STR) return cj_fail(c, "%s(): the test name must be a string", fname);
        test = cj_S(a->pos[k])->s;
        if (!cj_test_known(test)) return cj_fail(c, "no test named '%s'", test);
        k++;
    }
    cj_args sub = rest_args(a, k);
    cj_val items;
    if (!cj_truthy(v) ? cj_new_list(c, 0, false, &items) : cj_iter_list(c, v, &items)) return -1;
    cj_list *l = cj_L(items);
    int r = cj_new_list(c, 0, false, out);
    for (size_t i = 0; !r && i < l->n; i++) {
        cj_val x = cj_undef();
        bool t = false;
        if (attr) r = attr_path(c, l->v[i], *attr_name, NULL, &x);
        else x = cj_ref(l->v[i]);
        if (!r) {
            if (test) r = cj_test_apply(c, test, x, &sub, &t);
            else t = cj_truthy(x);
        }
        cj_unref(c, x);
        if (!r && t == keep) r = cj_list_push(c, *out, cj_ref(l->v[i]));
    }
    if (r && out->kind == CJ_LIST) cj_unref(c, *out);
    cj_unref(c, items);
    return r;
}
static int f_select(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) { return select_common(c, v, a, out, false, true); }
static int f_reject(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) { return select_common(c, v, a, out, false, false); }
static int f_selectattr(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) { return select_common(c, v, a, out, true, true); }
static int f_rejectattr(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) { return select_common(c, v, a, out, true, false); }

/* Keys for sort/unique/min/max: the item or its attribute. */
static int sort_keys(cj_ctx *c, cj_list *l, const cj_val *attr, cj_val **keys) {
    *keys = calloc(l->n ? l->n : 1, sizeof **keys);
    if (!*keys) return cj_fail(c, "out of memory");
    for (size_t i = 0; i < l->n; i++) {
        if (attr && attr->kind != CJ_NONE) {
            if (attr_path(c, l->v[i], *attr, NULL, &(*keys)[i])) return -1;
        } else {
            (*keys)[i] = cj_ref(l->v[i]);
        }
    }
    return 0;
}

static void free_keys(cj_ctx *c, cj_val *keys, size_t n) {
    if (!keys) return;
    for (size_t i = 0; i < n; i++) cj_unref(c, keys[i]);
    free(keys);
}

/* Stable merge sort of idx[0..n) by keys. */
static int merge_sort(cj_ctx *c, size_t *idx, size_t *tmp, size_t n, const cj_val *keys, bool ci, bool rev) {
    if (n < 2) return 0;
    size_t h = n / 2;
    if (merge_sort(c, idx, tmp, h, keys, ci, rev) || merge_sort(c, idx + h, tmp, n - h, keys, ci, rev)) return -1;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r;
        if (cj_order(c, keys[idx[j]], keys[idx[i]], ci, &r)) return -1;
        if (rev ? r > 0 : r < 0) tmp[k++] = idx[j++];
        else tmp[k++] = idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    return 0;
}

static int f_sort(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"reverse", "case_sensitive", "attribute"};
    const cj_val *sl[3];
    if (cj_bind(c, a, "sort", pn, 3, sl)) return -1;
    bool rev = sl[0] && cj_truthy(*sl[0]), ci = !(sl[1] && cj_truthy(*sl[1]));
    cj_val items, *keys = NULL;
    if (cj_iter_list(c, v, &items)) return -1;
    cj_list *l = cj_L(items);
    size_t *idx = malloc((l->n + 1) * sizeof *idx), *tmp = malloc((l->n + 1) * sizeof *tmp);
    int r = idx && tmp ? 0 : cj_fail(c, "out of memory");
    for (size_t i = 0; !r && i < l->n; i++) idx[i] = i;
    if (!r) r = sort_keys(c, l, sl[2], &keys);
    if (!r) r = merge_sort(c, idx, tmp, l->n, keys, ci, rev);
    if (!r) r = cj_new_list(c, l->n, false, out);
    for (size_t i = 0; !r && i < l->n; i++) r = cj_list_push(c, *out, cj_ref(l->v[idx[i]]));
    if (r && out->kind == CJ_LIST) cj_unref(c, *out);
    free_keys(c, keys, l->n);
    free(idx);
    free(tmp);
    cj_unref(c, items);
    return r;
}

static int f_unique(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"case_sensitive", "attribute"};
    const cj_val *sl[2];
    if (cj_bind(c, a, "unique", pn, 2, sl)) return -1;
    bool ci = !(sl[0] && cj_truthy(*sl[0]));
    cj_val items, *keys = NULL;
    if (cj_iter_list(c, v, &items)) return -1;
    cj_list *l = cj_L(items);
    int r = sort_keys(c, l, sl[1], &keys);
    if (!r) r = cj_new_list(c, 0, false, out);
    for (size_t i = 0; !r && i < l->n; i++) {
        bool seen = false;
        r = cj_check_hashable(c, keys[i]);
        for (size_t j = 0; !r && !seen && j < i; j++) {
            if (ci && keys[i].kind == CJ_STR && keys[j].kind == CJ_STR) {
                int o = 1;
                r = cj_order(c, keys[i], keys[j], true, &o);
                seen = o == 0;
            } else {
                r = cj_eq(c, keys[i], keys[j], &seen);
            }
        }
        if (r) break;
        if (!seen) r = cj_list_push(c, *out, cj_ref(l->v[i]));
    }
    if (r && out->kind == CJ_LIST) cj_unref(c, *out);
    free_keys(c, keys, l->n);
    cj_unref(c, items);
    return r;
}

static int min_max(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out, bool max) {
    static const char *const pn[] = {"case_sensitive", "attribute"};
    const cj_val *sl[2];
    if (cj_bind(c, a, max ? "max" : "min", pn, 2, sl)) return -1;
    bool ci = !(sl[0] && cj_truthy(*sl[0]));
    cj_val items, *keys = NULL;
    if (cj_iter_list(c, v, &items)) return -1;
    cj_list *l = cj_L(items);
    int r = sort_keys(c, l, sl[1], &keys);
    size_t best = 0;
    for (size_t i = 1; !r && i < l->n; i++) {
        int o;
        r = cj_order(c, keys[i], keys[best], ci, &o);
        if (!r && (max ? o > 0 : o < 0)) best = i;
    }
    if (!r) {
        if (l->n) *out = cj_ref(l->v[best]);
        else r = cj_new_undef(c, out, "No aggregated item, sequence was empty.");
    }
    free_keys(c, keys, l->n);
    cj_unref(c, items);
    return r;
}
static int f_min(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) { return min_max(c, v, a, out, false); }
static int f_max(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) { return min_max(c, v, a, out, true); }

static int f_sum(cj_ctx *c, cj_val v, const cj_args *a, cj_val *out) {
    static const char *const pn[] = {"attribute", "start"};
    const cj_val *sl[2];
    if (cj_bind(c, a, "sum", pn, 2, sl)) return -1;
    cj_val items, *keys = NULL;
    if (cj_iter_list(c, v, &items)) return -1;
    cj_list *l = cj_L(items);
    int r = sort_keys(c, l, sl[0], &keys);
    cj_val acc = sl[1] ? cj_ref(*sl[1]) : cj_int(0);
    for (size_t i = 0; !r && i < l->n; i++) {
        cj_val next;
        r = cj_binop(c, CJ_OP_ADD, acc, keys[i], &next);
        cj_unref(c, acc);
        acc = r ? cj_undef() : next;
    }
    free_keys(c, keys, l->n);
    cj_unref(c, items);
    if (r) {
        cj_unref(c, acc);
        return -1;
    }
    *out = acc;
    return 0;
}

static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {
    {"abs", f_abs},           {"attr", f_attr},       {"capitalize", f_capitalize}, {"count", f_length},
    {"d", f_default},         {"default", f_default}, {"e", f_escape},              {"escape", f_escape},
    {"first", f_first},       {"float", f_float},     {"indent", f_indent},         {"int", f_int},
    {"items", f_items},       {"join", f_join},       {"last", f_last},             {"length", f_length},
    {"list", f_list},         {"lower", f_lower},     {"map", f_map},               {"max", f_max},
    {"min", f_min},           {"reject", f_reject},   {"rejectattr", f_rejectattr}, {"replace", f_replace},
    {"reverse", f_reverse},   {"round", f_round},     {"safe", f_string},           {"select", f_select},
    {"selectattr", f_selectattr}, {"sort", f_sort},   {"string", f_string},         {"sum", f_sum},
    {"title", f_title},       {"tojson", f_tojson},   {"trim", f_trim},             {"unique", f_unique},
    {"upper", f_upper},
};

static filter_fn find_filter(const char *name) {
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (strcmp(filters[i].name, name) == 0) return filters[i].fn;
    return NULL;
}

bool cj_filter_known(const char *name) { return find_filter(name) != NULL; }

int cj_filter_apply(cj_ctx *c, const char *name, cj_val v, const cj_args *a, cj_val *out) {
    filter_fn fn = find_filter(name);
    if (!fn) return cj_fail(c, "no filter named '%s'", name);
    *out = cj_undef();
    return fn(c, v, a, out);
}
