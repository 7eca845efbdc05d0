/* Methods callable on values: the non-mutating Python str/dict/list methods
 * templates use, and loop.cycle().  Mutating methods (list.append,
 * dict.update...) are refused, as Hugging Face's ImmutableSandboxedEnvironment
 * refuses them. */
#include <string.h>

#include "runtime.h"
#include "strops.h"

static const char *const dict_methods[] = {"items", "keys", "values", "get"};
static const char *const dict_mutators[] = {"clear", "copy", "fromkeys", "pop", "popitem", "setdefault", "update"};
static const char *const list_mutators[] = {"append", "clear", "copy", "extend", "insert", "pop", "remove", "reverse", "sort"};

static bool in_list(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0) return true;
    return false;
}

bool cj_has_method(cj_val self, const char *name) {
    if (self.kind != CJ_DICT) return false;
    return in_list(name, dict_methods, 4) || in_list(name, dict_mutators, 7);
}

static int no_args(cj_ctx *c, const cj_args *a, const char *name) {
    if (a->npos || a->nkw) return cj_fail(c, "%s() takes no arguments", name);
    return 0;
}

/* str.startswith/endswith: prefix may be a tuple of strings */
static int affix(cj_ctx *c, const cj_str *s, const cj_args *a, bool start, cj_val *out) {
    const char *fname = start ? "startswith" : "endswith";
    if (a->npos != 1 || a->nkw) return cj_fail(c, "%s() takes exactly one argument", fname);
    cj_val p = a->pos[0];
    size_t n = p.kind == CJ_LIST ? cj_L(p)->n : 1;
    for (size_t i = 0; i < n; i++) {
        cj_val x = p.kind == CJ_LIST ? cj_L(p)->v[i] : p;
        if (x.kind != CJ_STR)
            return cj_fail(c, "%s first arg must be str or a tuple of str, not %s", fname, cj_type_name(x));
        const cj_str *q = cj_S(x);
        if (cj_charge_work(c, sizeof(cj_val) + q->len)) return -1; /* a tuple of prefixes may be long */
        if (q->len <= s->len && memcmp(start ? s->s : s->s + s->len - q->len, q->s, q->len) == 0) {
            *out = cj_bool(true);
            return 0;
        }
    }
    *out = cj_bool(false);
    return 0;
}

static int str_method(cj_ctx *c, cj_val self, const char *name, const cj_args *a, cj_val *out) {
    const cj_str *s = cj_S(self);
    const cj_val *sl[3];
    if (cj_charge_work(c, s->len)) return -1; /* every str method scans the string at most a few times */
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        static const char *const pn[] = {"chars"};
        const cj_str *chars;
        if (cj_bind(c, a, name, pn, 1, sl) || cj_arg_str(c, sl[0], name, "chars", &chars)) return -1;
        return cj_str_strip(c, s, chars, name[0] != 'r', name[0] != 'l', out);
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) return affix(c, s, a, name[0] == 's', out);
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") || !strcmp(name, "capitalize")) {
        if (no_args(c, a, name)) return -1;
        cj_case m = name[0] == 'u' ? CJ_CASE_UPPER : name[0] == 'l' ? CJ_CASE_LOWER : name[0] == 't' ? CJ_CASE_TITLE : CJ_CASE_CAPITALIZE;
        return cj_str_case(c, s, m, out);
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        static const char *const pn[] = {"sep", "maxsplit"};
        const cj_str *sep;
        int64_t maxsplit;
        if (cj_bind(c, a, name, pn, 2, sl) || cj_arg_str(c, sl[0], name, "sep", &sep) ||
            cj_arg_int(c, sl[1], name, "maxsplit", -1, &maxsplit))
            return -1;
        return cj_str_split(c, s, sep, maxsplit, name[0] == 'r', out);
    }
    if (!strcmp(name, "splitlines")) {
        if (no_args(c, a, name)) return -1;
        return cj_str_splitlines(c, s, out);
    }
    if (!strcmp(name, "replace")) {
        static const char *const pn[] = {"old", "new", "count"};
        const cj_str *old, *rep;
        int64_t count;
        if (cj_bind(c, a, name, pn, 3, sl) || cj_arg_str(c, sl[0], name, "old", &old) ||
            cj_arg_str(c, sl[1], name, "new", &rep) || cj_arg_int(c, sl[2], name, "count", -1, &count))
            return -1;
        if (!old || !rep) return cj_fail(c, "replace() needs 'old' and 'new' strings");
        return cj_str_replace(c, s, old, rep, count, out);
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") || !strcmp(name, "rindex") ||
        !strcmp(name, "count")) {
        static const char *const pn[] = {"sub"};
        const cj_str *sub;
        if (cj_bind(c, a, name, pn, 1, sl) || cj_arg_str(c, sl[0], name, "sub", &sub)) return -1;
        if (!sub) return cj_fail(c, "%s() needs a string argument", name);
        if (!strcmp(name, "count")) {
            int64_t k = 0;
            if (sub->len == 0) {
                if (cj_len(c, self, &k)) return -1;
                k++; /* Python: the empty string occurs len + 1 times */
            } else {
                for (const char *p = s->s; (p = memmem(p, s->len - (size_t)(p - s->s), sub->s, sub->len)); p += sub->len) k++;
            }
            *out = cj_int(k);
            return 0;
        }
        int64_t at;
        if (cj_str_find(c, s, sub, name[0] == 'r', &at)) return -1;
        if (at < 0 && (!strcmp(name, "index") || !strcmp(name, "rindex"))) return cj_fail(c, "substring not found");
        *out = cj_int(at);
        return 0;
    }
    if (!strcmp(name, "join")) {
        static const char *const pn[] = {"iterable"};
        if (cj_bind(c, a, name, pn, 1, sl)) return -1;
        if (!sl[0]) return cj_fail(c, "join() takes exactly one argument");
        cj_val items;
        if (cj_iter_list(c, *sl[0], &items)) return -1;
        cj_buf b;
        cj_tmpbuf(c, &b);
        cj_list *l = cj_L(items);
        int r = 0;
        for (size_t i = 0; !r && i < l->n; i++) {
            if (l->v[i].kind != CJ_STR) {
                r = cj_fail(c, "sequence item %zu: expected str instance, %s found", i, cj_type_name(l->v[i]));
                break;
            }
            if ((i && cj_buf_put(&b, s->s, s->len)) || cj_buf_put(&b, cj_S(l->v[i])->s, cj_S(l->v[i])->len)) r = cj_fail_buf(c);
        }
        cj_unref(c, items);
        if (r) {
            cj_buf_free(&b);
            return -1;
        }
        return cj_buf_to_str(c, &b, out);
    }
    if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
        static const char *const pn[] = {"affix"};
        const cj_str *x;
        if (cj_bind(c, a, name, pn, 1, sl) || cj_arg_str(c, sl[0], name, "affix", &x)) return -1;
        if (!x) return cj_fail(c, "%s() needs a string argument", name);
        bool pre = name[6] == 'p';
        if (x->len <= s->len && memcmp(pre ? s->s : s->s + s->len - x->len, x->s, x->len) == 0)
            return cj_new_str(c, pre ? s->s + x->len : s->s, s->len - x->len, out);
        *out = cj_ref(self);
        return 0;
    }
    static const struct {
        const char *name;
        cj_is what;
    } preds[] = {{"isdigit", CJ_IS_DIGIT}, {"isalpha", CJ_IS_ALPHA}, {"isalnum", CJ_IS_ALNUM},
                 {"isspace", CJ_IS_SPACE}, {"isupper", CJ_IS_UPPER}, {"islower", CJ_IS_LOWER}};
    for (size_t i = 0; i < sizeof preds / sizeof preds[0]; i++) {
        if (!strcmp(name, preds[i].name)) {
            if (no_args(c, a, name)) return -1;
            *out = cj_bool(cj_str_is(s, preds[i].what));
            return 0;
        }
    }
    return cj_fail(c, "'str object' has no attribute '%.100s'", name);
}

static int dict_method(cj_ctx *c, cj_val self, const char *name, const cj_args *a, cj_val *out) {
    cj_dict *d = cj_D(self);
    if (!strcmp(name, "get")) {
        static const char *const pn[] = {"key", "default"};
        const cj_val *sl[2];
        if (cj_bind(c, a, name, pn, 2, sl)) return -1;
        if (!sl[0]) return cj_fail(c, "get() needs a key");
        long i;
        if (cj_dict_find(c, self, *sl[0], &i)) return -1;
        *out = i >= 0 ? cj_ref(d->v[i]) : sl[1] ? cj_ref(*sl[1]) : cj_none();
        return 0;
    }
    if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
        if (no_args(c, a, name)) return -1;
        if (cj_new_list(c, d->n, false, out)) return -1;
        for (size_t i = 0; i < d->n; i++) {
            cj_val item;
            if (name[0] == 'k') {
                item = cj_ref(d->k[i]);
            } else if (name[0] == 'v') {
                item = cj_ref(d->v[i]);
            } else {
                if (cj_new_list(c, 2, true, &item)) goto fail;
                if (cj_list_push(c, item, cj_ref(d->k[i])) || cj_list_push(c, item, cj_ref(d->v[i]))) {
                    cj_unref(c, item);
                    goto fail;
                }
            }
            if (cj_list_push(c, *out, item)) goto fail;
        }
        return 0;
    fail:
        cj_unref(c, *out);
        return -1;
    }
    if (in_list(name, dict_mutators, 7)) return cj_fail(c, "access to attribute '%s' of 'dict' object is unsafe", name);
    return cj_fail(c, "'dict object' has no attribute '%.100s'", name);
}

static int list_method(cj_ctx *c, cj_val self, const char *name, const cj_args *a, cj_val *out) {
    cj_list *l = cj_L(self);
    if (!strcmp(name, "count") || !strcmp(name, "index")) {
        if (a->npos != 1 || a->nkw) return cj_fail(c, "%s() takes exactly one argument", name);
        int64_t k = 0;
        for (size_t i = 0; i < l->n; i++) {
            bool eq;
            if (cj_eq(c, l->v[i], a->pos[0], &eq)) return -1;
            if (!eq) continue;
            if (name[0] == 'i') {
                *out = cj_int((int64_t)i);
                return 0;
            }
            k++;
        }
        if (name[0] == 'i') return cj_fail(c, "value is not in list");
        *out = cj_int(k);
        return 0;
    }
    if (in_list(name, list_mutators, 9)) return cj_fail(c, "access to attribute '%s' of '%s' object is unsafe", name, cj_type_name(self));
    return cj_fail(c, "'%s object' has no attribute '%.100s'", cj_type_name(self), name);
}

int cj_method_call(cj_ctx *c, cj_val self, const char *name, const cj_args *a, cj_val *out) {
    switch (self.kind) {
    case CJ_STR: return str_method(c, self, name, a, out);
    case CJ_DICT: return dict_method(c, self, name, a, out);
    case CJ_LIST: return list_method(c, self, name, a, out);
    case CJ_LOOP:
        if (!strcmp(name, "cycle")) {
            if (a->npos == 0) return cj_fail(c, "no items for cycling given");
            *out = cj_ref(a->pos[((cj_loop *)self.o)->index0 % a->npos]);
            return 0;
        }
        return cj_fail(c, "'LoopContext' object has no attribute '%.100s'", name);
    case CJ_NONE: return cj_fail(c, "'None' has no attribute '%.100s'", name);
    default: return cj_fail(c, "'%s object' has no attribute '%.100s'", cj_type_name(self), name);
    }
}
