/* tojson as Hugging Face defines it: json.dumps(x, ensure_ascii=False,
 * indent=None, separators=None, sort_keys=False) -- unlike Jinja's own
 * tojson it neither escapes HTML characters nor sorts keys. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "utf8.h"

static int json_str(cj_buf *b, const char *s, size_t n, bool ascii) {
    if (cj_buf_putc(b, '"')) return -1;
    size_t i = 0;
    while (i < n) {
        size_t at = i;
        uint32_t cp = cj_u8_next(s, n, &i);
        int r;
        switch (cp) {
        case '"': r = cj_buf_puts(b, "\\\""); break;
        case '\\': r = cj_buf_puts(b, "\\\\"); break;
        case '\n': r = cj_buf_puts(b, "\\n"); break;
        case '\r': r = cj_buf_puts(b, "\\r"); break;
        case '\t': r = cj_buf_puts(b, "\\t"); break;
        case '\b': r = cj_buf_puts(b, "\\b"); break;
        case '\f': r = cj_buf_puts(b, "\\f"); break;
        default:
            if (cp < 0x20 || (ascii && cp >= 0x7f && cp < 0x10000)) {
                r = cj_buf_printf(b, "\\u%04x", cp);
            } else if (ascii && cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                r = cj_buf_printf(b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                r = cj_buf_put(b, s + at, i - at);
            }
        }
        if (r) return -1;
    }
    return cj_buf_putc(b, '"');
}

static int newline_indent(const cj_json_opts *o, cj_buf *b, int level) {
    if (!o->indent_set) return 0;
    if (cj_buf_putc(b, '\n')) return -1;
    for (int k = 0; k < level; k++)
        if (cj_buf_put(b, o->indent, o->indent_len)) return -1;
    return 0;
}

/* A dict key as json.dumps converts it. */
static int key_text(cj_ctx *c, cj_val k, cj_buf *b, bool ascii) {
    char tmp[64];
    switch (k.kind) {
    case CJ_STR: return json_str(b, cj_S(k)->s, cj_S(k)->len, ascii) ? cj_fail_buf(c) : 0;
    case CJ_INT: snprintf(tmp, sizeof tmp, "\"%" PRId64 "\"", k.i); break;
    case CJ_BOOL: snprintf(tmp, sizeof tmp, "\"%s\"", k.b ? "true" : "false"); break;
    case CJ_NONE: snprintf(tmp, sizeof tmp, "\"null\""); break;
    case CJ_FLOAT: {
        char f[40];
        if (isnan(k.f)) strcpy(f, "NaN");
        else if (isinf(k.f)) strcpy(f, k.f < 0 ? "-Infinity" : "Infinity");
        else cj_fmt_float(k.f, f);
        snprintf(tmp, sizeof tmp, "\"%s\"", f);
        break;
    }
    default: return cj_fail(c, "keys must be str, int, float, bool or None, not %s", cj_type_name(k));
    }
    return cj_buf_puts(b, tmp) ? cj_fail_buf(c) : 0;
}

/* Insertion sort of entry indices by key (dicts in templates are small). */
static int sorted_order(cj_ctx *c, const cj_dict *d, size_t *idx) {
    for (size_t i = 0; i < d->n; i++) idx[i] = i;
    for (size_t i = 1; i < d->n; i++) {
        size_t x = idx[i], j = i;
        while (j > 0) {
            int r;
            if (cj_order(c, d->k[idx[j - 1]], d->k[x], false, &r)) return -1;
            if (r <= 0) break;
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = x;
    }
    return 0;
}

int cj_tojson(cj_ctx *c, cj_val v, const cj_json_opts *o, cj_buf *b, int depth) {
    if (depth > CJ_MAX_NEST) return cj_fail(c, "value nested too deeply for tojson");
    char tmp[64];
    switch (v.kind) {
    case CJ_NONE: return cj_buf_puts(b, "null") ? cj_fail_buf(c) : 0;
    case CJ_BOOL: return cj_buf_puts(b, v.b ? "true" : "false") ? cj_fail_buf(c) : 0;
    case CJ_INT:
        snprintf(tmp, sizeof tmp, "%" PRId64, v.i);
        return cj_buf_puts(b, tmp) ? cj_fail_buf(c) : 0;
    case CJ_FLOAT:
        if (isnan(v.f)) strcpy(tmp, "NaN");
        else if (isinf(v.f)) strcpy(tmp, v.f < 0 ? "-Infinity" : "Infinity");
        else cj_fmt_float(v.f, tmp);
        return cj_buf_puts(b, tmp) ? cj_fail_buf(c) : 0;
    case CJ_STR: return json_str(b, cj_S(v)->s, cj_S(v)->len, o->ensure_ascii) ? cj_fail_buf(c) : 0;
    case CJ_LIST: {
        cj_list *l = cj_L(v);
        if (l->n == 0) return cj_buf_puts(b, "[]") ? cj_fail_buf(c) : 0;
        if (cj_buf_putc(b, '[') || newline_indent(o, b, depth + 1)) return cj_fail_buf(c);
        for (size_t i = 0; i < l->n; i++) {
            if (i && (cj_buf_put(b, o->item_sep, o->item_sep_len) || newline_indent(o, b, depth + 1))) return cj_fail_buf(c);
            if (cj_tojson(c, l->v[i], o, b, depth + 1)) return -1;
        }
        if (newline_indent(o, b, depth) || cj_buf_putc(b, ']')) return cj_fail_buf(c);
        return 0;
    }
    case CJ_DICT: {
        cj_dict *d = cj_D(v);
        if (d->n == 0) return cj_buf_puts(b, "{}") ? cj_fail_buf(c) : 0;
        size_t *idx = malloc(d->n * sizeof *idx);
        if (!idx) return cj_fail(c, "out of memory");
        int r = 0;
        if (o->sort_keys) r = sorted_order(c, d, idx);
        else
            for (size_t i = 0; i < d->n; i++) idx[i] = i;
        if (!r && (cj_buf_putc(b, '{') || newline_indent(o, b, depth + 1))) r = cj_fail_buf(c);
        for (size_t i = 0; !r && i < d->n; i++) {
            if (i && (cj_buf_put(b, o->item_sep, o->item_sep_len) || newline_indent(o, b, depth + 1))) {
                r = cj_fail_buf(c);
                break;
            }
            r = key_text(c, d->k[idx[i]], b, o->ensure_ascii);
            if (!r && cj_buf_put(b, o->key_sep, o->key_sep_len)) r = cj_fail_buf(c);
            if (!r) r = cj_tojson(c, d->v[idx[i]], o, b, depth + 1);
        }
        if (!r && (newline_indent(o, b, depth) || cj_buf_putc(b, '}'))) r = cj_fail_buf(c);
        free(idx);
        return r;
    }
    default: return cj_fail(c, "Object of type %s is not JSON serializable", cj_type_name(v));
    }
}
