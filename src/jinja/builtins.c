/* Global functions available to templates: Jinja's range/namespace/dict
 * and the ones Hugging Face adds (raise_exception, strftime_now). */
#include <string.h>
#include <time.h>

#include "runtime.h"

/* Jinja's sandbox refuses ranges longer than this (MAX_RANGE). */
#define CJ_MAX_RANGE 100000

static const char *const names[] = {
    [CJ_FN_RANGE] = "range",
    [CJ_FN_NAMESPACE] = "namespace",
    [CJ_FN_RAISE] = "raise_exception",
    [CJ_FN_STRFTIME] = "strftime_now",
    [CJ_FN_DICT] = "dict",
};

int cj_builtin_lookup(const char *name) {
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

static int fn_range(cj_ctx *c, const cj_args *a, cj_val *out) {
    if (a->nkw) return cj_fail(c, "range() takes no keyword arguments");
    if (a->npos < 1 || a->npos > 3) return cj_fail(c, "range expected 1 to 3 arguments, got %d", a->npos);
    int64_t v[3];
    for (int i = 0; i < a->npos; i++) {
        if (a->pos[i].kind == CJ_UNDEF) return cj_fail_undefined(c, a->pos[i]);
        if (!cj_is_intlike(a->pos[i]))
            return cj_fail(c, "'%s' object cannot be interpreted as an integer", cj_type_name(a->pos[i]));
        v[i] = cj_as_int(a->pos[i]);
    }
    int64_t start = a->npos == 1 ? 0 : v[0], stop = a->npos == 1 ? v[0] : v[1], stepv = a->npos == 3 ? v[2] : 1;
    if (stepv == 0) return cj_fail(c, "range() arg 3 must not be zero");
    /* count without overflow: (stop - start) can exceed int64 */
    __int128 span = (__int128)stop - start;
    __int128 n = 0;
    if (stepv > 0 && span > 0) n = (span + stepv - 1) / stepv;
    if (stepv < 0 && span < 0) n = (-span + (-(__int128)stepv) - 1) / (-(__int128)stepv);
    if (n > CJ_MAX_RANGE)
        return cj_fail(c, "range too big: the sandbox blocks ranges larger than %d", CJ_MAX_RANGE);
    if (cj_new_list(c, (size_t)n, false, out)) return -1;
    for (int64_t i = 0; i < (int64_t)n; i++)
        if (cj_list_push(c, *out, cj_int(start + i * stepv))) {
            cj_unref(c, *out);
            return -1;
        }
    return 0;
}

/* namespace(mapping?, **kw) and dict(mapping?, **kw) */
static int fn_mapping(cj_ctx *c, cj_kind kind, const char *fname, const cj_args *a, cj_val *out) {
    if (a->npos > 1) return cj_fail(c, "%s() expected at most 1 positional argument, got %d", fname, a->npos);
    if (cj_new_dict(c, kind, out)) return -1;
    if (a->npos == 1) {
        cj_val src = a->pos[0];
        if (src.kind != CJ_DICT && src.kind != CJ_NS) {
            cj_unref(c, *out);
            return cj_fail(c, "%s() argument must be a mapping, not %s", fname, cj_type_name(src));
        }
        cj_dict *d = cj_D(src);
        for (size_t i = 0; i < d->n; i++)
            if (cj_dict_set(c, *out, cj_ref(d->k[i]), cj_ref(d->v[i]))) {
                cj_unref(c, *out);
                return -1;
            }
    }
    for (int k = 0; k < a->nkw; k++) {
        cj_val key;
        if (cj_new_strz(c, a->kwname[k], &key) || cj_dict_set(c, *out, key, cj_ref(a->kw[k]))) {
            cj_unref(c, *out);
            return -1;
        }
    }
    return 0;
}

static int fn_raise(cj_ctx *c, const cj_args *a) {
    if (a->npos < 1) return cj_fail(c, "raise_exception() needs a message");
    cj_val msg;
    if (cj_to_str(c, a->pos[0], &msg)) return -1;
    /* the template's own message, verbatim: it is meant for the user */
    tk_err_set(c->err, "%s", cj_S(msg)->s);
    cj_unref(c, msg);
    return -1;
}

/* strftime_now(fmt): Hugging Face passes the current time.  Renders here are
 * deterministic instead: the date is fixed at 26 July 2024, 00:00 (the
 * default "Today Date" of Llama 3.1's template). */
static int fn_strftime(cj_ctx *c, const cj_args *a, cj_val *out) {
    const cj_val *slots[1];
    static const char *const pn[] = {"format"};
    if (cj_bind(c, a, "strftime_now", pn, 1, slots)) return -1;
    const cj_str *fmt;
    if (cj_arg_str(c, slots[0], "strftime_now", "format", &fmt)) return -1;
    if (!fmt) return cj_fail(c, "strftime_now() needs a format");
    struct tm tm = {0};
    tm.tm_year = 2024 - 1900;
    tm.tm_mon = 6;
    tm.tm_mday = 26;
    tm.tm_wday = 5; /* Friday */
    tm.tm_yday = 207;
    if (fmt->len == 0) return cj_new_str(c, "", 0, out);
    char buf[512];
    size_t n = strftime(buf, sizeof buf, fmt->s, &tm);
    if (n == 0) return cj_fail(c, "strftime_now(): format produced no output or is too long");
    return cj_new_str(c, buf, n, out);
}

int cj_builtin_call(cj_ctx *c, int fn, const cj_args *a, cj_val *out) {
    switch (fn) {
    case CJ_FN_RANGE: return fn_range(c, a, out);
    case CJ_FN_NAMESPACE: return fn_mapping(c, CJ_NS, "namespace", a, out);
    case CJ_FN_DICT: return fn_mapping(c, CJ_DICT, "dict", a, out);
    case CJ_FN_RAISE: return fn_raise(c, a);
    case CJ_FN_STRFTIME: return fn_strftime(c, a, out);
    default: return cj_fail(c, "unknown function");
    }
}
