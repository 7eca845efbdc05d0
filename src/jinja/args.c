/* Binding call arguments to parameter names (Python call semantics). */
#include <string.h>

#include "runtime.h"

int cj_bind(cj_ctx *c, const cj_args *a, const char *fname, const char *const *names, int n, const cj_val **slots) {
    for (int i = 0; i < n; i++) slots[i] = NULL;
    if (a->npos > n) return cj_fail(c, "%s() takes at most %d argument(s) (%d given)", fname, n, a->npos);
    for (int i = 0; i < a->npos; i++) slots[i] = &a->pos[i];
    for (int k = 0; k < a->nkw; k++) {
        int j = 0;
        while (j < n && strcmp(names[j], a->kwname[k]) != 0) j++;
        if (j == n) return cj_fail(c, "%s() got an unexpected keyword argument '%s'", fname, a->kwname[k]);
        if (slots[j]) return cj_fail(c, "%s() got multiple values for argument '%s'", fname, names[j]);
        slots[j] = &a->kw[k];
    }
    return 0;
}

int cj_arg_int(cj_ctx *c, const cj_val *v, const char *fname, const char *pname, int64_t dflt, int64_t *out) {
    if (!v || v->kind == CJ_NONE) {
        *out = dflt;
        return 0;
    }
    if (v->kind == CJ_UNDEF) return cj_fail_undefined(c, *v);
    if (!cj_is_intlike(*v)) return cj_fail(c, "%s(): '%s' must be an integer, not %s", fname, pname, cj_type_name(*v));
    *out = cj_as_int(*v);
    return 0;
}

int cj_arg_str(cj_ctx *c, const cj_val *v, const char *fname, const char *pname, const cj_str **out) {
    *out = NULL;
    if (!v || v->kind == CJ_NONE) return 0;
    if (v->kind == CJ_UNDEF) return cj_fail_undefined(c, *v);
    if (v->kind != CJ_STR) return cj_fail(c, "%s(): '%s' must be a string, not %s", fname, pname, cj_type_name(*v));
    *out = cj_S(*v);
    return 0;
}
