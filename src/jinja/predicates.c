/* Jinja's tests: "x is defined", "x is string", "n is divisibleby 3"... */
#include <string.h>

#include "lexer.h"
#include "runtime.h"
#include "strops.h"

static const char *const tests[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number",
    "string", "mapping", "iterable", "sequence", "callable", "sameas", "eq", "equalto", "ne",
    "lt", "lessthan", "le", "gt", "greaterthan", "ge", "in", "odd", "even", "divisibleby",
    "lower", "upper",
};

bool cj_test_known(const char *name) {
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (strcmp(tests[i], name) == 0) return true;
    return false;
}

static int one_arg(cj_ctx *c, const cj_args *a, const char *name, cj_val *out) {
    if (a->npos + a->nkw != 1) return cj_fail(c, "test '%s' takes exactly one argument", name);
    *out = a->npos ? a->pos[0] : a->kw[0];
    return 0;
}

int cj_test_apply(cj_ctx *c, const char *name, cj_val v, const cj_args *a, bool *out) {
    cj_val arg;
    cj_kind k = v.kind;
    if (!strcmp(name, "defined")) *out = k != CJ_UNDEF;
    else if (!strcmp(name, "undefined")) *out = k == CJ_UNDEF;
    else if (!strcmp(name, "none")) *out = k == CJ_NONE;
    else if (!strcmp(name, "boolean")) *out = k == CJ_BOOL;
    else if (!strcmp(name, "false")) *out = k == CJ_BOOL && !v.b;
    else if (!strcmp(name, "true")) *out = k == CJ_BOOL && v.b;
    else if (!strcmp(name, "integer")) *out = k == CJ_INT;
    else if (!strcmp(name, "float")) *out = k == CJ_FLOAT;
    else if (!strcmp(name, "number")) *out = cj_is_num(v); /* Python: bool is a Number */
    else if (!strcmp(name, "string")) *out = k == CJ_STR;
    else if (!strcmp(name, "mapping")) *out = k == CJ_DICT;
    else if (!strcmp(name, "iterable")) *out = k == CJ_STR || k == CJ_LIST || k == CJ_DICT || k == CJ_UNDEF;
    else if (!strcmp(name, "sequence")) *out = k == CJ_STR || k == CJ_LIST || k == CJ_DICT || k == CJ_UNDEF || k == CJ_LOOP;
    else if (!strcmp(name, "callable")) *out = k == CJ_FUNC || k == CJ_MACRO;
    else if (!strcmp(name, "sameas")) {
        if (one_arg(c, a, name, &arg)) return -1;
        /* identity: scalars compare by value (None/True/False/small ints are
         * singletons in CPython), objects by address */
        if (k != arg.kind) *out = false;
        else if (k == CJ_NONE || k == CJ_UNDEF) *out = k == CJ_NONE || v.o == arg.o;
        else if (k == CJ_BOOL) *out = v.b == arg.b;
        else if (k == CJ_INT) *out = v.i == arg.i;
        else if (k == CJ_FLOAT) *out = false;
        else if (k == CJ_FUNC) *out = v.i == arg.i;
        else *out = v.o == arg.o;
    } else if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "ne") || !strcmp(name, "lt") ||
               !strcmp(name, "lessthan") || !strcmp(name, "le") || !strcmp(name, "gt") ||
               !strcmp(name, "greaterthan") || !strcmp(name, "ge") || !strcmp(name, "in")) {
        if (one_arg(c, a, name, &arg)) return -1;
        int op = name[0] == 'e' ? CJ_OP_EQ
               : !strcmp(name, "ne") ? CJ_OP_NE
               : !strcmp(name, "in") ? CJ_OP_IN
               : !strcmp(name, "lt") || !strcmp(name, "lessthan") ? CJ_OP_LT
               : !strcmp(name, "le") ? CJ_OP_LTEQ
               : !strcmp(name, "ge") ? CJ_OP_GTEQ
                                      : CJ_OP_GT;
        return cj_compare(c, op, v, arg, out);
    } else if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        cj_val m = cj_int(2), r;
        if (name[0] == 'd' && one_arg(c, a, name, &m)) return -1;
        if (cj_binop(c, CJ_OP_MOD, v, m, &r)) return -1;
        return cj_eq(c, r, cj_int(name[0] == 'o' ? 1 : 0), out); /* Jinja: value % 2 == 1, value % n == 0 */
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        cj_val s;
        if (cj_to_str(c, v, &s)) return -1;
        if (cj_charge_work(c, cj_S(s)->len)) { /* the test scans the string */
            cj_unref(c, s);
            return -1;
        }
        *out = cj_str_is(cj_S(s), name[0] == 'l' ? CJ_IS_LOWER : CJ_IS_UPPER);
        cj_unref(c, s);
    } else {
        return cj_fail(c, "no test named '%s'", name);
    }
    return 0;
}
