/* Python str() and repr() of values: what {{ x }}, ~ and |string print. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "runtime.h"
#include "utf8.h"

const char *cj_type_name(cj_val v) {
    switch (v.kind) {
    case CJ_UNDEF: return "Undefined";
    case CJ_NONE: return "NoneType";
    case CJ_BOOL: return "bool";
    case CJ_INT: return "int";
    case CJ_FLOAT: return "float";
    case CJ_STR: return "str";
    case CJ_LIST: return cj_L(v)->tuple ? "tuple" : "list";
    case CJ_DICT: return "dict";
    case CJ_NS: return "Namespace";
    case CJ_LOOP: return "LoopContext";
    case CJ_FUNC: return "function";
    case CJ_MACRO: return "Macro";
    }
    return "object";
}

void cj_tmpbuf(cj_ctx *c, cj_buf *b) {
    cj_buf_init(b, c->out_limit);
    b->acct = &c->mem;
    b->acct_limit = c->mem_limit;
    b->work = &c->work;
    b->work_limit = c->work_limit;
}

int cj_fail_buf(cj_ctx *c) {
    if (c->work > c->work_limit) return cj_fail_work(c);
    return cj_fail(c, "template output exceeded its size limit (%zu bytes) or its memory limit (%zu bytes)",
                   c->out_limit, c->mem_limit);
}

int cj_buf_to_str(cj_ctx *c, cj_buf *b, cj_val *out) {
    int r = cj_new_str(c, b->p ? b->p : "", b->n, out);
    cj_buf_free(b);
    return r;
}

/* Shortest repr that round-trips, formatted as Python's float.__repr__:
 * positional notation for 1e-4 <= |d| < 1e16, else scientific. */
void cj_fmt_float(double d, char out[40]) {
    if (isnan(d)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(d)) {
        strcpy(out, d < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX */
    const char *p = tmp;
    char *o = out;
    if (*p == '-') *o++ = *p++;
    char digits[24];
    int nd = 0;
    while (*p && *p != 'e') {
        if (*p != '.' && nd < 23) digits[nd++] = *p;
        p++;
    }
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int decpt = exp10 + 1; /* value = 0.digits * 10^decpt */
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            *o++ = '0';
            *o++ = '.';
            for (int k = 0; k < -decpt; k++) *o++ = '0';
            for (int k = 0; k < nd; k++) *o++ = digits[k];
        } else if (decpt >= nd) {
            for (int k = 0; k < nd; k++) *o++ = digits[k];
            for (int k = nd; k < decpt; k++) *o++ = '0';
            *o++ = '.';
            *o++ = '0';
        } else {
            for (int k = 0; k < decpt; k++) *o++ = digits[k];
            *o++ = '.';
            for (int k = decpt; k < nd; k++) *o++ = digits[k];
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int k = 1; k < nd; k++) *o++ = digits[k];
        }
        int e = exp10 < 0 ? -exp10 : exp10;
        *o++ = 'e';
        *o++ = exp10 < 0 ? '-' : '+';
        if (e >= 100) *o++ = (char)('0' + e / 100);
        *o++ = (char)('0' + e / 10 % 10);
        *o++ = (char)('0' + e % 10);
        *o = 0;
    }
}

static bool py_printable(uint32_t cp) {
    if (cp == ' ') return true;
    if (cp < 0x20 || cp == 0x7f) return false;
    if (cp < 0x7f) return true;
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
    }
}

static int repr_str(const char *s, size_t n, cj_buf *b) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (cj_buf_putc(b, q)) return -1;
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        uint32_t cp = cj_u8_next(s, n, &i);
        int r;
        if (cp == (uint32_t)q || cp == '\\') {
            char e[2] = {'\\', (char)cp};
            r = cj_buf_put(b, e, 2);
        } else if (cp == '\n') {
            r = cj_buf_puts(b, "\\n");
        } else if (cp == '\r') {
            r = cj_buf_puts(b, "\\r");
        } else if (cp == '\t') {
            r = cj_buf_puts(b, "\\t");
        } else if (py_printable(cp)) {
            r = cj_buf_put(b, s + start, i - start);
        } else if (cp < 0x100) {
            r = cj_buf_printf(b, "\\x%02x", cp);
        } else if (cp < 0x10000) {
            r = cj_buf_printf(b, "\\u%04x", cp);
        } else {
            r = cj_buf_printf(b, "\\U%08x", cp);
        }
        if (r) return -1;
    }
    return cj_buf_putc(b, q);
}

static int write_dict_body(cj_ctx *c, cj_val v, cj_buf *b, int depth) {
    cj_dict *d = cj_D(v);
    if (cj_buf_putc(b, '{')) return cj_fail_buf(c);
    for (size_t i = 0; i < d->n; i++) {
        if (i && cj_buf_puts(b, ", ")) return cj_fail_buf(c);
        if (cj_write_repr(c, d->k[i], b, depth + 1)) return -1;
        if (cj_buf_puts(b, ": ")) return cj_fail_buf(c);
        if (cj_write_repr(c, d->v[i], b, depth + 1)) return -1;
    }
    if (cj_buf_putc(b, '}')) return cj_fail_buf(c);
    return 0;
}

static int write_common(cj_ctx *c, cj_val v, cj_buf *b, int depth, bool repr) {
    if (depth > CJ_MAX_NEST) return cj_fail(c, "value nested too deeply to print");
    char tmp[64];
    int r = 0;
    switch (v.kind) {
    case CJ_UNDEF: r = repr ? cj_buf_puts(b, "Undefined") : 0; break;
    case CJ_NONE: r = cj_buf_puts(b, "None"); break;
    case CJ_BOOL: r = cj_buf_puts(b, v.b ? "True" : "False"); break;
    case CJ_INT:
        snprintf(tmp, sizeof tmp, "%" PRId64, v.i);
        r = cj_buf_puts(b, tmp);
        break;
    case CJ_FLOAT:
        cj_fmt_float(v.f, tmp);
        r = cj_buf_puts(b, tmp);
        break;
    case CJ_STR: r = repr ? repr_str(cj_S(v)->s, cj_S(v)->len, b) : cj_buf_put(b, cj_S(v)->s, cj_S(v)->len); break;
    case CJ_LIST: {
        cj_list *l = cj_L(v);
        if (cj_buf_putc(b, l->tuple ? '(' : '[')) return cj_fail_buf(c);
        for (size_t i = 0; i < l->n; i++) {
            if (i && cj_buf_puts(b, ", ")) return cj_fail_buf(c);
            if (cj_write_repr(c, l->v[i], b, depth + 1)) return -1;
        }
        if (l->tuple && l->n == 1 && cj_buf_putc(b, ',')) return cj_fail_buf(c);
        r = cj_buf_putc(b, l->tuple ? ')' : ']');
        break;
    }
    case CJ_DICT: return write_dict_body(c, v, b, depth);
    case CJ_NS:
        if (cj_buf_puts(b, "<Namespace ")) return cj_fail_buf(c);
        if (write_dict_body(c, v, b, depth)) return -1;
        r = cj_buf_putc(b, '>');
        break;
    case CJ_LOOP: {
        cj_loop *l = (cj_loop *)v.o;
        r = cj_buf_printf(b, "<LoopContext %" PRId64 "/%" PRId64 ">", l->index0 + 1, l->length);
        break;
    }
    case CJ_FUNC: r = cj_buf_puts(b, "<built-in function>"); break;
    case CJ_MACRO: r = cj_buf_printf(b, "<Macro '%s'>", ((cj_macro *)v.o)->def->str); break;
    }
    return r ? cj_fail_buf(c) : 0;
}

int cj_write_str(cj_ctx *c, cj_val v, cj_buf *b) { return write_common(c, v, b, 0, false); }

int cj_write_repr(cj_ctx *c, cj_val v, cj_buf *b, int depth) { return write_common(c, v, b, depth, true); }

int cj_to_str(cj_ctx *c, cj_val v, cj_val *out) {
    if (v.kind == CJ_STR) {
        *out = cj_ref(v);
        return 0;
    }
    if (v.kind == CJ_UNDEF) return cj_new_str(c, "", 0, out);
    cj_buf b;
    cj_tmpbuf(c, &b);
    if (cj_write_str(c, v, &b)) {
        cj_buf_free(&b);
        return -1;
    }
    return cj_buf_to_str(c, &b, out);
}
