/* Operators, comparisons, lookups and iteration with Python's semantics, as
 * Jinja2 evaluates them (in its sandbox). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "lexer.h"
#include "runtime.h"
#include "utf8.h"

bool cj_truthy(cj_val v) {
    switch (v.kind) {
    case CJ_UNDEF:
    case CJ_NONE: return false;
    case CJ_BOOL: return v.b;
    case CJ_INT: return v.i != 0;
    case CJ_FLOAT: return v.f != 0.0;
    case CJ_STR: return cj_S(v)->len > 0;
    case CJ_LIST: return cj_L(v)->n > 0;
    case CJ_DICT: return cj_D(v)->n > 0;
    default: return true;
    }
}

/* Every element visited by ==, ordering or hashing is charged to the work
 * budget, so comparing big or densely shared structures ends with an error
 * rather than running without bound. */
static int charge_visit(cj_ctx *c, size_t scanned) { return cj_charge_work(c, sizeof(cj_val) + scanned); }

static int eq_d(cj_ctx *c, cj_val a, cj_val b, int depth, bool *out) {
    *out = false;
    if (charge_visit(c, 0)) return -1;
    if (cj_is_num(a) && cj_is_num(b)) {
        if (a.kind == CJ_FLOAT || b.kind == CJ_FLOAT) *out = cj_as_float(a) == cj_as_float(b);
        else *out = cj_as_int(a) == cj_as_int(b);
        return 0;
    }
    if (a.kind != b.kind) return 0;
    if (a.kind >= CJ_STR && a.kind != CJ_FUNC && a.o == b.o) { /* Python's identity shortcut */
        *out = true;
        return 0;
    }
    switch (a.kind) {
    case CJ_UNDEF:
    case CJ_NONE: *out = true; return 0;
    case CJ_STR:
        if (cj_S(a)->len != cj_S(b)->len) return 0;
        if (charge_visit(c, cj_S(a)->len)) return -1;
        *out = memcmp(cj_S(a)->s, cj_S(b)->s, cj_S(a)->len) == 0;
        return 0;
    case CJ_LIST: {
        cj_list *x = cj_L(a), *y = cj_L(b);
        if (x->tuple != y->tuple || x->n != y->n) return 0;
        if (x->n && depth >= CJ_MAX_NEST) return cj_fail(c, "values nested too deeply to compare");
        *out = true;
        for (size_t i = 0; i < x->n && *out; i++)
            if (eq_d(c, x->v[i], y->v[i], depth + 1, out)) return -1;
        return 0;
    }
    case CJ_DICT: {
        cj_dict *x = cj_D(a), *y = cj_D(b);
        if (x->n != y->n) return 0;
        if (x->n && depth >= CJ_MAX_NEST) return cj_fail(c, "values nested too deeply to compare");
        *out = true;
        for (size_t i = 0; i < x->n && *out; i++) {
            long j;
            if (cj_dict_find(c, b, x->k[i], &j)) return -1;
            if (j < 0) *out = false;
            else if (eq_d(c, x->v[i], y->v[j], depth + 1, out)) return -1;
        }
        return 0;
    }
    case CJ_FUNC: *out = a.i == b.i; return 0;
    default: *out = a.o == b.o; return 0;
    }
}

int cj_eq(cj_ctx *c, cj_val a, cj_val b, bool *out) { return eq_d(c, a, b, 0, out); }

static int hashable_d(cj_ctx *c, cj_val v, int depth) {
    if (charge_visit(c, 0)) return -1;
    if (v.kind == CJ_LIST && cj_L(v)->tuple) {
        cj_list *l = cj_L(v);
        if (l->n && depth >= CJ_MAX_NEST) return cj_fail(c, "value nested too deeply to hash");
        for (size_t i = 0; i < l->n; i++)
            if (hashable_d(c, l->v[i], depth + 1)) return -1;
        return 0;
    }
    if (v.kind == CJ_LIST || v.kind == CJ_DICT || v.kind == CJ_NS || v.kind == CJ_LOOP)
        return cj_fail(c, "unhashable type: '%s'", cj_type_name(v));
    return 0;
}

int cj_check_hashable(cj_ctx *c, cj_val v) { return hashable_d(c, v, 0); }

static int cmp_bytes(const char *a, size_t an, const char *b, size_t bn) {
    size_t m = an < bn ? an : bn;
    int r = m ? memcmp(a, b, m) : 0;
    if (r) return r < 0 ? -1 : 1;
    return an < bn ? -1 : an > bn ? 1 : 0;
}

/* Compares lower-cased strings code point by code point (Jinja's
 * case-insensitive sort). */
static int cmp_lower(const char *a, size_t an, const char *b, size_t bn) {
    size_t i = 0, j = 0;
    while (i < an && j < bn) {
        uint32_t x = cj_u8_next(a, an, &i), y = cj_u8_next(b, bn, &j);
        if (x < 0xD800 || x > 0xDFFF) x = (uint32_t)utf8proc_tolower((utf8proc_int32_t)x);
        if (y < 0xD800 || y > 0xDFFF) y = (uint32_t)utf8proc_tolower((utf8proc_int32_t)y);
        if (x != y) return x < y ? -1 : 1;
    }
    return i < an ? 1 : j < bn ? -1 : 0;
}

static int order_d(cj_ctx *c, cj_val a, cj_val b, bool ci, int *out, int depth, const char *opname) {
    if (a.kind == CJ_UNDEF) return cj_fail_undefined(c, a);
    if (b.kind == CJ_UNDEF) return cj_fail_undefined(c, b);
    if (charge_visit(c, 0)) return -1;
    if (cj_is_num(a) && cj_is_num(b)) {
        if (a.kind == CJ_FLOAT || b.kind == CJ_FLOAT) {
            double x = cj_as_float(a), y = cj_as_float(b);
            *out = x < y ? -1 : x > y ? 1 : 0; /* NaN compares "equal": good enough for sorting */
        } else {
            int64_t x = cj_as_int(a), y = cj_as_int(b);
            *out = x < y ? -1 : x > y ? 1 : 0;
        }
        return 0;
    }
    if (a.kind == CJ_STR && b.kind == CJ_STR) {
        if (charge_visit(c, cj_S(a)->len < cj_S(b)->len ? cj_S(a)->len : cj_S(b)->len)) return -1;
        *out = ci ? cmp_lower(cj_S(a)->s, cj_S(a)->len, cj_S(b)->s, cj_S(b)->len)
                  : cmp_bytes(cj_S(a)->s, cj_S(a)->len, cj_S(b)->s, cj_S(b)->len);
        return 0;
    }
    if (a.kind == CJ_LIST && b.kind == CJ_LIST && cj_L(a)->tuple == cj_L(b)->tuple) {
        if (depth > CJ_MAX_NEST) return cj_fail(c, "values nested too deeply to compare");
        cj_list *x = cj_L(a), *y = cj_L(b);
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            bool same;
            if (eq_d(c, x->v[i], y->v[i], depth + 1, &same)) return -1;
            if (same) continue;
            return order_d(c, x->v[i], y->v[i], ci, out, depth + 1, opname);
        }
        *out = x->n < y->n ? -1 : x->n > y->n ? 1 : 0;
        return 0;
    }
    return cj_fail(c, "'%s' not supported between instances of '%s' and '%s'", opname, cj_type_name(a), cj_type_name(b));
}

int cj_order(cj_ctx *c, cj_val a, cj_val b, bool case_insensitive, int *out) {
    return order_d(c, a, b, case_insensitive, out, 0, "<");
}

int cj_contains(cj_ctx *c, cj_val hay, cj_val needle, bool *out) {
    switch (hay.kind) {
    case CJ_STR:
        if (cj_charge_work(c, cj_S(hay)->len)) return -1; /* scans count toward the work budget */
        if (needle.kind == CJ_UNDEF) return cj_fail_undefined(c, needle);
        if (needle.kind != CJ_STR)
            return cj_fail(c, "'in <string>' requires string as left operand, not %s", cj_type_name(needle));
        *out = cj_S(needle)->len == 0 ||
               memmem(cj_S(hay)->s, cj_S(hay)->len, cj_S(needle)->s, cj_S(needle)->len) != NULL;
        return 0;
    case CJ_LIST: {
        cj_list *l = cj_L(hay);
        *out = false;
        for (size_t i = 0; i < l->n && !*out; i++)
            if (cj_eq(c, l->v[i], needle, out)) return -1;
        return 0;
    }
    case CJ_DICT: {
        long i;
        if (cj_check_hashable(c, needle) || cj_dict_find(c, hay, needle, &i)) return -1;
        *out = i >= 0;
        return 0;
    }
    case CJ_UNDEF: *out = false; return 0; /* iterating Undefined yields nothing */
    default: return cj_fail(c, "argument of type '%s' is not iterable", cj_type_name(hay));
    }
}

int cj_compare(cj_ctx *c, int op, cj_val a, cj_val b, bool *out) {
    int r;
    switch (op) {
    case CJ_OP_EQ: return cj_eq(c, a, b, out);
    case CJ_OP_NE:
        if (cj_eq(c, a, b, out)) return -1;
        *out = !*out;
        return 0;
    case CJ_OP_IN: return cj_contains(c, b, a, out);
    case CJ_OP_NOTIN:
        if (cj_contains(c, b, a, out)) return -1;
        *out = !*out;
        return 0;
    default: break;
    }
    if (order_d(c, a, b, false, &r, 0, cj_op_str(op))) return -1;
    switch (op) {
    case CJ_OP_LT: *out = r < 0; break;
    case CJ_OP_LTEQ: *out = r <= 0; break;
    case CJ_OP_GT: *out = r > 0; break;
    default: *out = r >= 0; break;
    }
    return 0;
}

static int repeat(cj_ctx *c, cj_val seq, int64_t times, cj_val *out) {
    if (times < 0) times = 0;
    if (seq.kind == CJ_STR) {
        size_t n = cj_S(seq)->len;
        if (!n || !times) return cj_new_str(c, "", 0, out); /* no loop over a huge count of nothing */
        if ((uint64_t)times > c->out_limit / n) return cj_fail_buf(c);
        if (cj_new_str(c, NULL, n * (size_t)times, out)) return -1;
        for (int64_t k = 0; k < times; k++) memcpy(cj_S(*out)->s + (size_t)k * n, cj_S(seq)->s, n);
        return 0;
    }
    cj_list *l = cj_L(seq);
    if (!l->n || !times) return cj_new_list(c, 0, l->tuple, out);
    if ((uint64_t)times > c->mem_limit / (l->n * sizeof(cj_val)))
        return cj_fail(c, "template exceeded its memory limit (%zu bytes)", c->mem_limit);
    if (cj_new_list(c, l->n * (size_t)times, l->tuple, out)) return -1;
    for (int64_t k = 0; k < times; k++)
        for (size_t i = 0; i < l->n; i++)
            if (cj_list_push(c, *out, cj_ref(l->v[i]))) {
                cj_unref(c, *out);
                return -1;
            }
    return 0;
}

static int type_error(cj_ctx *c, const char *op, cj_val a, cj_val b) {
    return cj_fail(c, "unsupported operand type(s) for %s: '%s' and '%s'", op, cj_type_name(a), cj_type_name(b));
}

int cj_binop(cj_ctx *c, int op, cj_val a, cj_val b, cj_val *out) {
    if (a.kind == CJ_UNDEF) return cj_fail_undefined(c, a);
    if (b.kind == CJ_UNDEF) return cj_fail_undefined(c, b);
    const char *opname = cj_op_str(op);
    bool nums = cj_is_num(a) && cj_is_num(b);
    bool fl = nums && (a.kind == CJ_FLOAT || b.kind == CJ_FLOAT);
    int64_t x = nums ? cj_as_int(a) : 0, y = nums ? cj_as_int(b) : 0, r;
    double fx = nums ? cj_as_float(a) : 0, fy = nums ? cj_as_float(b) : 0;
    switch (op) {
    case CJ_OP_ADD:
        if (nums) {
            if (fl) {
                *out = cj_float(fx + fy);
                return 0;
            }
            if (__builtin_add_overflow(x, y, &r)) return cj_fail(c, "integer overflow");
            *out = cj_int(r);
            return 0;
        }
        if (a.kind == CJ_STR && b.kind == CJ_STR) {
            size_t an = cj_S(a)->len, bn = cj_S(b)->len;
            cj_buf tb;
            cj_tmpbuf(c, &tb);
            if (cj_buf_put(&tb, cj_S(a)->s, an) || cj_buf_put(&tb, cj_S(b)->s, bn)) {
                cj_buf_free(&tb);
                return cj_fail_buf(c);
            }
            return cj_buf_to_str(c, &tb, out);
        }
        if (a.kind == CJ_LIST && b.kind == CJ_LIST && cj_L(a)->tuple == cj_L(b)->tuple) {
            cj_list *la = cj_L(a), *lb = cj_L(b);
            if (cj_new_list(c, la->n + lb->n, la->tuple, out)) return -1;
            for (size_t i = 0; i < la->n + lb->n; i++)
                if (cj_list_push(c, *out, cj_ref(i < la->n ? la->v[i] : lb->v[i - la->n]))) {
                    cj_unref(c, *out);
                    return -1;
                }
            return 0;
        }
        if (a.kind == CJ_STR) return cj_fail(c, "can only concatenate str (not \"%s\") to str", cj_type_name(b));
        return type_error(c, opname, a, b);
    case CJ_OP_SUB:
        if (!nums) return type_error(c, opname, a, b);
        if (fl) {
            *out = cj_float(fx - fy);
            return 0;
        }
        if (__builtin_sub_overflow(x, y, &r)) return cj_fail(c, "integer overflow");
        *out = cj_int(r);
        return 0;
    case CJ_OP_MUL:
        if (nums) {
            if (fl) {
                *out = cj_float(fx * fy);
                return 0;
            }
            if (__builtin_mul_overflow(x, y, &r)) return cj_fail(c, "integer overflow");
            *out = cj_int(r);
            return 0;
        }
        if ((a.kind == CJ_STR || a.kind == CJ_LIST) && cj_is_intlike(b)) return repeat(c, a, cj_as_int(b), out);
        if ((b.kind == CJ_STR || b.kind == CJ_LIST) && cj_is_intlike(a)) return repeat(c, b, cj_as_int(a), out);
        return type_error(c, opname, a, b);
    case CJ_OP_DIV:
        if (!nums) return type_error(c, opname, a, b);
        if (fy == 0.0) return cj_fail(c, "division by zero");
        *out = cj_float(fx / fy);
        return 0;
    case CJ_OP_FLOORDIV:
    case CJ_OP_MOD:
        if (a.kind == CJ_STR && op == CJ_OP_MOD) return cj_fail(c, "printf-style string formatting with '%%' is not supported");
        if (!nums) return type_error(c, opname, a, b);
        if (fl) {
            if (fy == 0.0) return cj_fail(c, op == CJ_OP_MOD ? "float modulo by zero" : "float floor division by zero");
            double m = fmod(fx, fy);
            if (m != 0.0 && ((fy < 0) != (m < 0))) m += fy;
            /* (a - a mod b) / b is (nearly) exact, as in CPython's float_divmod */
            *out = cj_float(op == CJ_OP_MOD ? m : floor((fx - m) / fy));
            return 0;
        }
        if (y == 0) return cj_fail(c, "integer division or modulo by zero");
        if (y == -1) {
            if (op == CJ_OP_MOD) {
                *out = cj_int(0);
                return 0;
            }
            if (x == INT64_MIN) return cj_fail(c, "integer overflow");
            *out = cj_int(-x);
            return 0;
        }
        {
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                m += y;
                q -= 1;
            }
            *out = cj_int(op == CJ_OP_MOD ? m : q);
        }
        return 0;
    case CJ_OP_POW:
        if (!nums) return type_error(c, "** or pow()", a, b);
        if (!fl && y >= 0) {
            int64_t acc = 1, base = x;
            int64_t e = y;
            while (e > 0) {
                if (e & 1) {
                    if (__builtin_mul_overflow(acc, base, &acc)) return cj_fail(c, "integer overflow");
                }
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base)) return cj_fail(c, "integer overflow");
            }
            *out = cj_int(acc);
            return 0;
        }
        if (fx == 0.0 && fy < 0) return cj_fail(c, "0.0 cannot be raised to a negative power");
        *out = cj_float(pow(fx, fy));
        return 0;
    default: return cj_fail(c, "unknown operator");
    }
}

int cj_negate(cj_ctx *c, cj_val a, bool neg, cj_val *out) {
    if (a.kind == CJ_UNDEF) return cj_fail_undefined(c, a);
    if (!cj_is_num(a)) return cj_fail(c, "bad operand type for unary %c: '%s'", neg ? '-' : '+', cj_type_name(a));
    if (a.kind == CJ_FLOAT) {
        *out = cj_float(neg ? -a.f : a.f);
        return 0;
    }
    int64_t x = cj_as_int(a);
    if (neg && x == INT64_MIN) return cj_fail(c, "integer overflow");
    *out = cj_int(neg ? -x : x);
    return 0;
}

int cj_len(cj_ctx *c, cj_val v, int64_t *out) {
    switch (v.kind) {
    case CJ_UNDEF: *out = 0; return 0;
    case CJ_STR:
        if (cj_charge_work(c, cj_S(v)->len)) return -1;
        *out = (int64_t)cj_u8_count(cj_S(v)->s, cj_S(v)->len);
        return 0;
    case CJ_LIST: *out = (int64_t)cj_L(v)->n; return 0;
    case CJ_DICT: *out = (int64_t)cj_D(v)->n; return 0;
    case CJ_LOOP: *out = ((cj_loop *)v.o)->length; return 0;
    default: return cj_fail(c, "object of type '%s' has no len()", cj_type_name(v));
    }
}

/* The string of one character (n bytes at p); an ASCII one is shared. */
static int one_char(cj_ctx *c, const char *p, size_t n, cj_val *out) {
    unsigned char b = (unsigned char)p[0];
    if (n != 1 || b >= 128) return cj_new_str(c, p, n, out);
    if (c->ascii[b].kind != CJ_STR && cj_new_str(c, p, 1, &c->ascii[b])) return -1;
    *out = cj_ref(c->ascii[b]);
    return 0;
}

int cj_iter_list(cj_ctx *c, cj_val v, cj_val *out) {
    switch (v.kind) {
    case CJ_LIST: /* lists are immutable here (sandbox); the caller walks the items: charged */
        if (cj_charge_work(c, cj_L(v)->n * sizeof(cj_val))) return -1;
        *out = cj_ref(v);
        return 0;
    case CJ_UNDEF: return cj_new_list(c, 0, false, out);
    case CJ_DICT: {
        cj_dict *d = cj_D(v);
        if (cj_new_list(c, d->n, false, out)) return -1;
        for (size_t i = 0; i < d->n; i++)
            if (cj_list_push(c, *out, cj_ref(d->k[i]))) {
                cj_unref(c, *out);
                return -1;
            }
        return 0;
    }
    case CJ_STR: {
        cj_str *s = cj_S(v);
        if (cj_new_list(c, s->len, false, out)) return -1;
        size_t i = 0;
        while (i < s->len) {
            size_t start = i;
            cj_u8_next(s->s, s->len, &i);
            cj_val ch;
            if (one_char(c, s->s + start, i - start, &ch) || cj_list_push(c, *out, ch)) {
                cj_unref(c, *out);
                return -1;
            }
        }
        return 0;
    }
    default: return cj_fail(c, "'%s' object is not iterable", cj_type_name(v));
    }
}

/* Jinja's object_type_repr(): how error hints name an object's type. */
static void type_repr(cj_val v, char *buf, size_t cap) {
    if (v.kind == CJ_NONE) snprintf(buf, cap, "None");
    else if (v.kind == CJ_NS) snprintf(buf, cap, "jinja2.utils.Namespace object");
    else if (v.kind == CJ_LOOP) snprintf(buf, cap, "jinja2.runtime.LoopContext object");
    else snprintf(buf, cap, "%s object", cj_type_name(v));
}

static int missing_attr(cj_ctx *c, cj_val obj, const char *name, cj_val *out) {
    char t[64];
    type_repr(obj, t, sizeof t);
    return cj_new_undef(c, out, "'%s' has no attribute '%.100s'", t, name);
}

static int loop_attr(cj_ctx *c, cj_val obj, const char *name, cj_val *out) {
    cj_loop *l = (cj_loop *)obj.o;
    int64_t i = l->index0, n = l->length;
    if (!strcmp(name, "index")) *out = cj_int(i + 1);
    else if (!strcmp(name, "index0")) *out = cj_int(i);
    else if (!strcmp(name, "revindex")) *out = cj_int(n - i);
    else if (!strcmp(name, "revindex0")) *out = cj_int(n - i - 1);
    else if (!strcmp(name, "first")) *out = cj_bool(i == 0);
    else if (!strcmp(name, "last")) *out = cj_bool(i == n - 1);
    else if (!strcmp(name, "length")) *out = cj_int(n);
    else if (!strcmp(name, "depth")) *out = cj_int(1);
    else if (!strcmp(name, "depth0")) *out = cj_int(0);
    else if (!strcmp(name, "previtem") || !strcmp(name, "nextitem")) {
        int64_t j = name[0] == 'p' ? i - 1 : i + 1;
        cj_list *items = cj_L(l->items);
        if (j >= 0 && (size_t)j < items->n) *out = cj_ref(items->v[j]);
        else return cj_new_undef(c, out, "there is no %s item", name[0] == 'p' ? "previous" : "next");
    } else {
        return missing_attr(c, obj, name, out);
    }
    return 0;
}

int cj_getattr(cj_ctx *c, cj_val obj, const char *name, cj_val *out) {
    switch (obj.kind) {
    case CJ_UNDEF: return cj_fail_undefined(c, obj);
    case CJ_DICT:
    case CJ_NS: {
        if (cj_charge_work(c, cj_D(obj)->n * sizeof(cj_val))) return -1; /* the lookup scans the keys */
        long i = cj_dict_find_str(obj, name, strlen(name));
        if (i >= 0) {
            *out = cj_ref(cj_D(obj)->v[i]);
            return 0;
        }
        return missing_attr(c, obj, name, out);
    }
    case CJ_LOOP: return loop_attr(c, obj, name, out);
    default: return missing_attr(c, obj, name, out);
    }
}

/* Python index normalization for a single element; false if out of range. */
static bool norm_index(int64_t i, int64_t n, int64_t *out) {
    if (i < 0) i += n;
    if (i < 0 || i >= n) return false;
    *out = i;
    return true;
}

/* Byte offset of code point k (k <= number of code points). */
static size_t cp_offset(const char *s, size_t n, int64_t k) {
    size_t i = 0;
    for (int64_t j = 0; j < k && i < n; j++) cj_u8_next(s, n, &i);
    return i;
}

int cj_getitem(cj_ctx *c, cj_val obj, cj_val key, cj_val *out) {
    char t[64];
    int64_t idx;
    switch (obj.kind) {
    case CJ_UNDEF: return cj_fail_undefined(c, obj);
    case CJ_LIST:
        if (cj_is_intlike(key)) {
            if (norm_index(cj_as_int(key), (int64_t)cj_L(obj)->n, &idx)) {
                *out = cj_ref(cj_L(obj)->v[idx]);
                return 0;
            }
            type_repr(obj, t, sizeof t);
            return cj_new_undef(c, out, "%s has no element %" PRId64, t, cj_as_int(key));
        }
        break;
    case CJ_STR:
        if (cj_is_intlike(key)) {
            cj_str *s = cj_S(obj);
            if (cj_charge_work(c, s->len)) return -1;
            int64_t n = (int64_t)cj_u8_count(s->s, s->len);
            if (norm_index(cj_as_int(key), n, &idx)) {
                size_t a = cp_offset(s->s, s->len, idx), b = a;
                cj_u8_next(s->s, s->len, &b);
                return cj_new_str(c, s->s + a, b - a, out);
            }
            type_repr(obj, t, sizeof t);
            return cj_new_undef(c, out, "%s has no element %" PRId64, t, cj_as_int(key));
        }
        break;
    case CJ_DICT: {
        long i;
        if (cj_dict_find(c, obj, key, &i)) return -1;
        if (i >= 0) {
            *out = cj_ref(cj_D(obj)->v[i]);
            return 0;
        }
        break;
    }
    case CJ_NS:
    case CJ_LOOP:
        if (key.kind == CJ_STR) return cj_getattr(c, obj, cj_S(key)->s, out);
        break;
    default: break;
    }
    if (key.kind == CJ_STR) return missing_attr(c, obj, cj_S(key)->s, out);
    type_repr(obj, t, sizeof t);
    cj_buf kb;
    cj_tmpbuf(c, &kb);
    int r = cj_write_repr(c, key, &kb, 0);
    if (!r) r = cj_new_undef(c, out, "%s has no element %.100s", t, kb.p ? kb.p : "");
    cj_buf_free(&kb);
    return r;
}

static int slice_bound(cj_ctx *c, const cj_val *v, bool *has, int64_t *out) {
    *has = false;
    if (!v || v->kind == CJ_NONE) return 0;
    if (!cj_is_intlike(*v)) return cj_fail(c, "slice indices must be integers or None");
    *has = true;
    *out = cj_as_int(*v);
    return 0;
}

int cj_slice(cj_ctx *c, cj_val obj, const cj_val *startv, const cj_val *stopv, const cj_val *stepv, cj_val *out) {
    if (obj.kind == CJ_UNDEF) return cj_fail_undefined(c, obj);
    bool hs, he, hp;
    int64_t start = 0, stop = 0, step = 1;
    if (slice_bound(c, startv, &hs, &start) || slice_bound(c, stopv, &he, &stop) || slice_bound(c, stepv, &hp, &step)) return -1;
    if (!hp) step = 1;
    if (step == 0) return cj_fail(c, "slice step cannot be zero");
    /* Jinja compiles x[a:b] to a plain Python subscript (no safe getitem),
     * so slicing anything but a sequence raises */
    if (obj.kind == CJ_DICT) return cj_fail(c, "unhashable type: 'slice'");
    if (obj.kind != CJ_LIST && obj.kind != CJ_STR) return cj_fail(c, "'%s' object is not subscriptable", cj_type_name(obj));

    /* code point offsets of a string, so indices count characters */
    size_t *offs = NULL;
    int64_t len;
    if (obj.kind == CJ_STR) {
        cj_str *s = cj_S(obj);
        len = (int64_t)cj_u8_count(s->s, s->len);
        if (cj_charge_work(c, (size_t)(len + 1) * sizeof *offs)) return -1;
        offs = malloc((size_t)(len + 1) * sizeof *offs);
        if (!offs) return cj_fail(c, "out of memory");
        size_t i = 0;
        for (int64_t k = 0; k < len; k++) {
            offs[k] = i;
            cj_u8_next(s->s, s->len, &i);
        }
        offs[len] = s->len;
    } else {
        len = (int64_t)cj_L(obj)->n;
    }
    /* Python's PySlice_AdjustIndices */
    if (step > 0) {
        if (!hs) start = 0;
        else if (start < 0 && (start += len) < 0) start = 0;
        else if (start > len) start = len;
        if (!he) stop = len;
        else if (stop < 0 && (stop += len) < 0) stop = 0;
        else if (stop > len) stop = len;
    } else {
        if (!hs) start = len - 1;
        else if (start < 0 && (start += len) < 0) start = -1;
        else if (start >= len) start = len - 1;
        if (!he) stop = -1;
        else if (stop < 0 && (stop += len) < 0) stop = -1;
        else if (stop >= len) stop = len - 1;
    }
    int r = 0;
    if (obj.kind == CJ_STR) {
        cj_str *s = cj_S(obj);
        if (step == 1) {
            r = cj_new_str(c, start < stop ? s->s + offs[start] : "", start < stop ? offs[stop] - offs[start] : 0, out);
        } else {
            cj_buf b;
            cj_tmpbuf(c, &b);
            for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
                if (cj_buf_put(&b, s->s + offs[i], offs[i + 1] - offs[i])) {
                    r = cj_fail_buf(c);
                    break;
                }
                if (step > 0 ? step >= stop - i : i + step <= stop) break;
                i += step;
            }
            if (r) cj_buf_free(&b);
            else r = cj_buf_to_str(c, &b, out);
        }
        free(offs);
        return r;
    }
    cj_list *l = cj_L(obj);
    if (cj_new_list(c, 0, l->tuple, out)) return -1;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (cj_list_push(c, *out, cj_ref(l->v[i]))) {
            cj_unref(c, *out);
            return -1;
        }
        if (step > 0 ? step >= stop - i : i + step <= stop) break;
        i += step;
    }
    return 0;
}
