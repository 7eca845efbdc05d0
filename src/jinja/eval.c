/* Evaluator: executes statements and evaluates expressions of the syntax
 * tree against a render context.
 *
 * Scoping follows Jinja2: a for loop body gets a fresh scope per iteration
 * (a {% set %} inside does not leak out, nor into the next iteration), if
 * blocks share their enclosing scope, macros see their parameters and the
 * template's top level.  namespace() objects are the way out of a loop. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lexer.h"
#include "runtime.h"

enum { CJ_BREAK = 1, CJ_CONTINUE = 2 };

int cj_fail(cj_ctx *c, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->line > 0) return tk_err_set(c->err, "template error: line %d: %s", c->line, msg);
    return tk_err_set(c->err, "template error: %s", msg);
}

int cj_fail_undefined(cj_ctx *c, cj_val u) {
    if (u.kind == CJ_UNDEF && u.o) return cj_fail(c, "%s", ((cj_str *)u.o)->s);
    return cj_fail(c, "undefined value used");
}

/* ---- scopes ---------------------------------------------------------- */

int cj_scope_set(cj_ctx *c, cj_scope *s, const char *name, cj_val v) {
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->names[i], name) == 0) {
            cj_val old = s->vals[i];
            s->vals[i] = v;
            cj_unref(c, old);
            return 0;
        }
    }
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        const char **nn = realloc(s->names, (size_t)cap * sizeof *nn);
        if (nn) s->names = nn;
        cj_val *nv = nn ? realloc(s->vals, (size_t)cap * sizeof *nv) : NULL;
        if (!nv) {
            cj_unref(c, v);
            return cj_fail(c, "out of memory");
        }
        s->vals = nv;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
    return 0;
}

void cj_scope_release(cj_ctx *c, cj_scope *s) {
    for (int i = 0; i < s->n; i++) cj_unref(c, s->vals[i]);
    free(s->names);
    free(s->vals);
    s->names = NULL;
    s->vals = NULL;
    s->n = s->cap = 0;
}

static const cj_val *scope_find(const cj_ctx *c, const char *name) {
    for (const cj_scope *s = c->scope; s; s = s->parent)
        for (int i = s->n - 1; i >= 0; i--)
            if (strcmp(s->names[i], name) == 0) return &s->vals[i];
    return NULL;
}

/* ---- helpers ----------------------------------------------------------- */

static int eval(cj_ctx *c, const cj_node *n, cj_val *out);
static int exec(cj_ctx *c, const cj_node *n);

static int enter(cj_ctx *c, const cj_node *n) {
    if (c->depth >= c->depth_limit) return cj_fail(c, "template recursion too deep (limit %d)", c->depth_limit);
    c->depth++;
    c->line = n->line;
    return 0;
}

static int step(cj_ctx *c) {
    if (++c->steps > c->step_limit)
        return cj_fail(c, "template exceeded its limit of %llu loop iterations and calls", (unsigned long long)c->step_limit);
    return cj_check_cancel(c);
}

static void free_args(cj_ctx *c, cj_val *v, int n) {
    for (int i = 0; i < n; i++) cj_unref(c, v[i]);
    free(v);
}

/* Evaluates the arguments of a CALL/FILTER/TEST node. */
static int eval_args(cj_ctx *c, const cj_node *n, cj_val **vals, cj_args *a) {
    memset(a, 0, sizeof *a);
    *vals = NULL;
    if (n->nkids == 0) return 0;
    cj_val *v = calloc((size_t)n->nkids, sizeof *v); /* zeroed = Undefined without hint, safe to unref */
    if (!v) return cj_fail(c, "out of memory");
    for (int i = 0; i < n->nkids; i++) {
        if (eval(c, n->kids[i], &v[i])) {
            free_args(c, v, i);
            return -1;
        }
    }
    *vals = v;
    a->npos = n->npos;
    a->nkw = n->nkids - n->npos;
    a->pos = v;
    a->kw = v + n->npos;
    a->kwname = n->kwnames ? n->kwnames + n->npos : NULL;
    return 0;
}

/* Binds an assignment target (name or tuple of names); takes ownership of v. */
static int assign(cj_ctx *c, cj_scope *s, const cj_node *t, cj_val v) {
    if (t->type == CJ_N_NAME) return cj_scope_set(c, s, t->str, v);
    cj_val items;
    int r = cj_iter_list(c, v, &items);
    cj_unref(c, v);
    if (r) return -1;
    cj_list *l = cj_L(items);
    if (l->n != (size_t)t->nkids) {
        r = l->n > (size_t)t->nkids ? cj_fail(c, "too many values to unpack (expected %d)", t->nkids)
                                    : cj_fail(c, "not enough values to unpack (expected %d, got %zu)", t->nkids, l->n);
    }
    for (int i = 0; !r && i < t->nkids; i++) r = assign(c, s, t->kids[i], cj_ref(l->v[i]));
    cj_unref(c, items);
    return r;
}

static int call_macro(cj_ctx *c, cj_val m, const cj_args *a, cj_val *out) {
    const cj_node *def = ((cj_macro *)m.o)->def;
    if (step(c)) return -1;
    if (a->npos > def->nkids)
        return cj_fail(c, "macro '%s' takes not more than %d argument(s)", def->str, def->nkids);
    for (int k = 0; k < a->nkw; k++) {
        int j = 0;
        while (j < def->nkids && strcmp(def->kids[j]->str, a->kwname[k]) != 0) j++;
        if (j == def->nkids) return cj_fail(c, "macro '%s' takes no keyword argument '%s'", def->str, a->kwname[k]);
        if (j < a->npos) return cj_fail(c, "macro '%s' got multiple values for argument '%s'", def->str, a->kwname[k]);
    }
    cj_scope s = {.parent = c->root};
    cj_scope *save = c->scope;
    c->scope = &s;
    int r = 0;
    for (int j = 0; !r && j < def->nkids; j++) {
        const cj_node *p = def->kids[j];
        cj_val v = cj_undef();
        bool have = false;
        if (j < a->npos) {
            v = cj_ref(a->pos[j]);
            have = true;
        }
        for (int k = 0; !have && k < a->nkw; k++) {
            if (strcmp(p->str, a->kwname[k]) == 0) {
                v = cj_ref(a->kw[k]);
                have = true;
            }
        }
        if (!have) r = p->a ? eval(c, p->a, &v) : cj_new_undef(c, &v, "parameter '%s' was not provided", p->str);
        if (!r) r = cj_scope_set(c, &s, p->str, v);
    }
    cj_buf buf, *save_out = c->out;
    cj_tmpbuf(c, &buf);
    if (!r) {
        c->out = &buf;
        r = exec(c, def->b);
        c->out = save_out;
    }
    c->scope = save;
    cj_scope_release(c, &s);
    if (r < 0) {
        cj_buf_free(&buf);
        return -1;
    }
    return cj_buf_to_str(c, &buf, out);
}

int cj_call_value(cj_ctx *c, cj_val f, const cj_args *a, cj_val *out) {
    switch (f.kind) {
    case CJ_FUNC: return cj_builtin_call(c, (int)f.i, a, out);
    case CJ_MACRO: return call_macro(c, f, a, out);
    case CJ_UNDEF: return cj_fail_undefined(c, f);
    default: return cj_fail(c, "'%s' object is not callable", cj_type_name(f));
    }
}

/* ---- expressions --------------------------------------------------------- */

static int eval_call(cj_ctx *c, const cj_node *n, cj_val *out) {
    const cj_node *f = n->a;
    cj_val callee = cj_undef(), self = cj_undef(), *vals = NULL;
    cj_args a;
    int r;
    bool method = false;
    if (f->type == CJ_N_GETATTR) {
        /* obj.name(...): a method of obj, unless obj is a mapping holding a
         * callable under that name (e.g. a macro kept in a namespace) */
        if (eval(c, f->a, &self)) return -1;
        if (self.kind == CJ_UNDEF) {
            r = cj_fail_undefined(c, self);
            cj_unref(c, self);
            return r;
        }
        method = true;
        if ((self.kind == CJ_DICT && !cj_has_method(self, f->str)) || self.kind == CJ_NS) {
            long i = cj_dict_find_str(self, f->str, f->len);
            if (i >= 0) {
                callee = cj_ref(cj_D(self)->v[i]);
                method = false;
            }
        }
    } else if (eval(c, f, &callee)) {
        return -1;
    }
    r = eval_args(c, n, &vals, &a);
    if (!r) {
        c->line = n->line;
        r = method ? cj_method_call(c, self, f->str, &a, out) : cj_call_value(c, callee, &a, out);
        free_args(c, vals, n->nkids);
    }
    cj_unref(c, self);
    cj_unref(c, callee);
    return r;
}

static int eval_inner(cj_ctx *c, const cj_node *n, cj_val *out) {
    cj_val a = cj_undef(), b = cj_undef();
    int r = 0;
    switch (n->type) {
    case CJ_N_CONST:
        switch (n->ck) {
        case CJ_C_NONE: *out = cj_none(); return 0;
        case CJ_C_BOOL: *out = cj_bool(n->ival != 0); return 0;
        case CJ_C_INT: *out = cj_int(n->ival); return 0;
        case CJ_C_FLOAT: *out = cj_float(n->fval); return 0;
        case CJ_C_STR: return cj_new_str(c, n->str, n->len, out);
        }
        return cj_fail(c, "bad constant");
    case CJ_N_NAME: {
        const cj_val *v = scope_find(c, n->str);
        if (v) {
            *out = cj_ref(*v);
            return 0;
        }
        int fn = cj_builtin_lookup(n->str);
        if (fn >= 0) {
            *out = (cj_val){.kind = CJ_FUNC, .i = fn};
            return 0;
        }
        return cj_new_undef(c, out, "'%.100s' is undefined", n->str);
    }
    case CJ_N_LIST:
    case CJ_N_TUPLE:
        if (cj_new_list(c, (size_t)n->nkids, n->type == CJ_N_TUPLE, out)) return -1;
        for (int i = 0; i < n->nkids; i++) {
            if (eval(c, n->kids[i], &a) || cj_list_push(c, *out, a)) {
                cj_unref(c, *out);
                return -1;
            }
        }
        return 0;
    case CJ_N_DICT:
        if (cj_new_dict(c, CJ_DICT, out)) return -1;
        for (int i = 0; i + 1 < n->nkids; i += 2) {
            if (eval(c, n->kids[i], &a)) goto fail_out;
            if (cj_check_hashable(c, a)) {
                cj_unref(c, a);
                goto fail_out;
            }
            if (eval(c, n->kids[i + 1], &b)) {
                cj_unref(c, a);
                goto fail_out;
            }
            if (cj_dict_set(c, *out, a, b)) goto fail_out;
        }
        return 0;
    fail_out:
        cj_unref(c, *out);
        return -1;
    case CJ_N_GETATTR:
        if (eval(c, n->a, &a)) return -1;
        c->line = n->line;
        r = cj_getattr(c, a, n->str, out);
        cj_unref(c, a);
        return r;
    case CJ_N_GETITEM:
        if (eval(c, n->a, &a)) return -1;
        if (n->b->type == CJ_N_SLICE) {
            const cj_node *s = n->b;
            cj_val bounds[3] = {cj_undef(), cj_undef(), cj_undef()};
            const cj_node *bn[3] = {s->a, s->b, s->c};
            for (int k = 0; !r && k < 3; k++)
                if (bn[k]) r = eval(c, bn[k], &bounds[k]);
            c->line = n->line;
            if (!r)
                r = cj_slice(c, a, s->a ? &bounds[0] : NULL, s->b ? &bounds[1] : NULL, s->c ? &bounds[2] : NULL, out);
            for (int k = 0; k < 3; k++) cj_unref(c, bounds[k]);
        } else {
            r = eval(c, n->b, &b);
            c->line = n->line;
            if (!r) r = cj_getitem(c, a, b, out);
            cj_unref(c, b);
        }
        cj_unref(c, a);
        return r;
    case CJ_N_CALL: return eval_call(c, n, out);
    case CJ_N_FILTER:
    case CJ_N_TEST: {
        cj_val *vals;
        cj_args args;
        if (eval(c, n->a, &a)) return -1;
        r = eval_args(c, n, &vals, &args);
        c->line = n->line;
        if (!r) {
            if (n->type == CJ_N_FILTER) {
                r = cj_filter_apply(c, n->str, a, &args, out);
            } else {
                bool t = false;
                r = cj_test_apply(c, n->str, a, &args, &t);
                *out = cj_bool(t);
            }
            free_args(c, vals, n->nkids);
        }
        cj_unref(c, a);
        return r;
    }
    case CJ_N_NEG:
    case CJ_N_POS:
        if (eval(c, n->a, &a)) return -1;
        r = cj_negate(c, a, n->type == CJ_N_NEG, out);
        cj_unref(c, a);
        return r;
    case CJ_N_NOT:
        if (eval(c, n->a, &a)) return -1;
        *out = cj_bool(!cj_truthy(a));
        cj_unref(c, a);
        return 0;
    case CJ_N_BINOP:
        if (eval(c, n->a, &a)) return -1;
        if (eval(c, n->b, &b)) {
            cj_unref(c, a);
            return -1;
        }
        c->line = n->line;
        r = cj_binop(c, n->op, a, b, out);
        cj_unref(c, a);
        cj_unref(c, b);
        return r;
    case CJ_N_CONCAT: {
        cj_buf buf;
        cj_tmpbuf(c, &buf);
        for (int i = 0; !r && i < n->nkids; i++) {
            r = eval(c, n->kids[i], &a);
            if (!r) r = cj_write_str(c, a, &buf);
            cj_unref(c, a);
            a = cj_undef();
        }
        if (r) {
            cj_buf_free(&buf);
            return -1;
        }
        return cj_buf_to_str(c, &buf, out);
    }
    case CJ_N_AND:
    case CJ_N_OR:
        /* Python semantics: the result is one of the operands */
        if (eval(c, n->a, &a)) return -1;
        if (cj_truthy(a) == (n->type == CJ_N_OR)) {
            *out = a;
            return 0;
        }
        cj_unref(c, a);
        return eval(c, n->b, out);
    case CJ_N_COMPARE: {
        if (eval(c, n->a, &a)) return -1;
        bool ok = true;
        for (int i = 0; ok && i < n->nkids; i++) {
            if (eval(c, n->kids[i], &b)) {
                cj_unref(c, a);
                return -1;
            }
            c->line = n->line;
            r = cj_compare(c, n->ops[i], a, b, &ok);
            cj_unref(c, a);
            a = b;
            if (r) break;
        }
        cj_unref(c, a);
        *out = cj_bool(ok);
        return r;
    }
    case CJ_N_COND:
        if (eval(c, n->a, &a)) return -1;
        r = cj_truthy(a);
        cj_unref(c, a);
        if (r) return eval(c, n->b, out);
        if (n->c) return eval(c, n->c, out);
        return cj_new_undef(c, out, "the inline if-expression evaluated to false and no else section was defined");
    default: return cj_fail(c, "invalid expression");
    }
}

static int eval(cj_ctx *c, const cj_node *n, cj_val *out) {
    *out = cj_undef();
    if (enter(c, n)) return -1;
    int r = eval_inner(c, n, out);
    c->depth--;
    if (r) *out = cj_undef();
    return r;
}

/* ---- statements --------------------------------------------------------- */

static int exec_for(cj_ctx *c, const cj_node *n) {
    cj_val seq, items, loopv = cj_undef();
    if (eval(c, n->b, &seq)) return -1;
    int r = cj_iter_list(c, seq, &items);
    cj_unref(c, seq);
    if (r) return -1;
    if (n->c) {
        /* {% for x in xs if cond %}: loop.* count only the kept items */
        cj_val kept, cond;
        if (cj_new_list(c, 0, false, &kept)) {
            cj_unref(c, items);
            return -1;
        }
        cj_list *all = cj_L(items);
        for (size_t i = 0; !r && i < all->n; i++) {
            r = step(c);
            cj_scope s = {.parent = c->scope};
            c->scope = &s;
            if (!r) r = assign(c, &s, n->a, cj_ref(all->v[i]));
            if (!r) r = eval(c, n->c, &cond);
            c->scope = s.parent;
            cj_scope_release(c, &s);
            if (!r) {
                if (cj_truthy(cond)) r = cj_list_push(c, kept, cj_ref(all->v[i]));
                cj_unref(c, cond);
            }
        }
        cj_unref(c, items);
        items = kept;
        if (r) {
            cj_unref(c, items);
            return -1;
        }
    }
    cj_list *l = cj_L(items);
    if (l->n == 0) {
        cj_unref(c, items);
        if (!n->e) return 0;
        cj_scope s = {.parent = c->scope};
        c->scope = &s;
        r = exec(c, n->e); /* break/continue here belong to an enclosing loop */
        c->scope = s.parent;
        cj_scope_release(c, &s);
        return r;
    }
    if (cj_new_loop(c, items, (int64_t)l->n, &loopv)) {
        cj_unref(c, items);
        return -1;
    }
    cj_loop *lp = (cj_loop *)loopv.o;
    for (size_t i = 0; i < l->n; i++) {
        if ((r = step(c))) break;
        lp->index0 = (int64_t)i;
        cj_scope s = {.parent = c->scope};
        c->scope = &s;
        r = assign(c, &s, n->a, cj_ref(l->v[i]));
        if (!r) r = cj_scope_set(c, &s, "loop", cj_ref(loopv));
        if (!r) r = exec(c, n->d);
        c->scope = s.parent;
        cj_scope_release(c, &s);
        if (r < 0) break;
        if (r == CJ_BREAK) {
            r = 0;
            break;
        }
        r = 0;
    }
    cj_unref(c, loopv);
    cj_unref(c, items);
    return r;
}

/* Assigns v (owned) to a SET target: a name, a tuple of names, or ns.attr. */
static int assign_target(cj_ctx *c, const cj_node *t, cj_val v) {
    if (t->type != CJ_N_NSREF) return assign(c, c->scope, t, v);
    const cj_val *ns = scope_find(c, t->a->str);
    if (!ns || ns->kind != CJ_NS) {
        cj_unref(c, v);
        return cj_fail(c, "cannot assign attribute on non-namespace object");
    }
    cj_val key;
    if (cj_new_str(c, t->str, t->len, &key)) {
        cj_unref(c, v);
        return -1;
    }
    return cj_dict_set(c, *ns, key, v);
}

static int exec_inner(cj_ctx *c, const cj_node *n) {
    cj_val v;
    int r;
    switch (n->type) {
    case CJ_N_BODY:
        for (int i = 0; i < n->nkids; i++)
            if ((r = exec(c, n->kids[i]))) return r;
        return 0;
    case CJ_N_TEXT:
        if (cj_buf_put(c->out, n->str, n->len)) return cj_fail_buf(c);
        return 0;
    case CJ_N_PRINT:
        if (eval(c, n->a, &v)) return -1;
        r = cj_write_str(c, v, c->out);
        cj_unref(c, v);
        return r;
    case CJ_N_IF:
        if (eval(c, n->a, &v)) return -1;
        r = cj_truthy(v);
        cj_unref(c, v);
        if (r) return exec(c, n->b);
        return n->c ? exec(c, n->c) : 0;
    case CJ_N_FOR: return exec_for(c, n);
    case CJ_N_SET:
        if (eval(c, n->b, &v)) return -1;
        return assign_target(c, n->a, v);
    case CJ_N_SETBLOCK: {
        cj_buf buf, *save = c->out;
        cj_tmpbuf(c, &buf);
        c->out = &buf;
        r = exec(c, n->b);
        c->out = save;
        if (r < 0) {
            cj_buf_free(&buf);
            return -1;
        }
        if (cj_buf_to_str(c, &buf, &v)) return -1;
        int r2 = assign_target(c, n->a, v);
        return r2 ? r2 : r;
    }
    case CJ_N_MACRO:
        if (cj_new_macro(c, n, &v)) return -1;
        return cj_scope_set(c, c->scope, n->str, v);
    case CJ_N_BREAK: return CJ_BREAK;
    case CJ_N_CONTINUE: return CJ_CONTINUE;
    default: return cj_fail(c, "invalid statement");
    }
}

static int exec(cj_ctx *c, const cj_node *n) {
    if (enter(c, n)) return -1;
    int r = exec_inner(c, n);
    c->depth--;
    return r;
}

int cj_render_root(cj_ctx *c, const cj_node *root) {
    int r = exec(c, root);
    return r < 0 ? -1 : 0;
}
