#include "parser.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h" /* filter/test name registry: unknown names fail at parse time, as in Jinja */

#define CJ_MAX_ARGS 256

typedef struct P {
    const cj_tok *t;
    size_t n, i;
    cj_arena *a;
    tk_err *err;
    int depth;
    int loop_depth;             /* break/continue are only valid inside a for body */
    const char *open_name;      /* innermost unclosed block tag, for error messages */
    int open_line;
} P;

/* growable list of child nodes (malloc'd; copied into the arena when done) */
typedef struct vec {
    cj_node **v;
    const char **names;
    int n, cap;
} vec;

static const cj_tok *cur(const P *p) { return &p->t[p->i]; }
static const cj_tok *look(const P *p) { return p->i + 1 < p->n ? &p->t[p->i + 1] : &p->t[p->n - 1]; }
static void advance(P *p) {
    if (p->t[p->i].type != CJ_T_EOF) p->i++;
}
static bool is_op(const cj_tok *t, int op) { return t->type == CJ_T_OP && t->op == op; }
static bool is_name(const cj_tok *t, const char *name) {
    return t->type == CJ_T_NAME && t->n == strlen(name) && memcmp(t->s, name, t->n) == 0;
}

static void describe(const cj_tok *t, char *buf, size_t cap) {
    switch (t->type) {
    case CJ_T_EOF: snprintf(buf, cap, "end of template"); break;
    case CJ_T_DATA: snprintf(buf, cap, "template text"); break;
    case CJ_T_VAR_BEGIN: snprintf(buf, cap, "'{{'"); break;
    case CJ_T_VAR_END: snprintf(buf, cap, "'}}'"); break;
    case CJ_T_BLOCK_BEGIN: snprintf(buf, cap, "'{%%'"); break;
    case CJ_T_BLOCK_END: snprintf(buf, cap, "'%%}'"); break;
    case CJ_T_NAME: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); break;
    case CJ_T_STRING: snprintf(buf, cap, "string literal"); break;
    case CJ_T_INT:
    case CJ_T_FLOAT: snprintf(buf, cap, "number"); break;
    case CJ_T_OP: snprintf(buf, cap, "'%s'", cj_op_str(t->op)); break;
    }
}

static void *fail_at(P *p, const cj_tok *t, const char *fmt, ...) TK_PRINTF(3, 4);
static void *fail_at(P *p, const cj_tok *t, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tk_err_set(p->err, "template syntax error: line %d, column %d: %s", t->line, t->col, msg);
    return NULL;
}

static void *fail_expected(P *p, const char *what) {
    char d[64];
    describe(cur(p), d, sizeof d);
    return fail_at(p, cur(p), "expected %s, got %s", what, d);
}

static void *oom(P *p) {
    tk_err_set(p->err, "out of memory while parsing template");
    return NULL;
}

static bool enter(P *p) {
    if (p->depth >= CJ_MAX_PARSE_DEPTH) {
        fail_at(p, cur(p), "template nested too deeply (limit %d)", CJ_MAX_PARSE_DEPTH);
        return false;
    }
    p->depth++;
    return true;
}
static void leave(P *p) { p->depth--; }

static cj_node *node(P *p, cj_nt type, const cj_tok *at) {
    cj_node *n = cj_arena_alloc(p->a, sizeof *n);
    if (!n) return oom(p);
    n->type = type;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static bool vec_push(P *p, vec *v, cj_node *x, const char *name) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 8;
        cj_node **nv = realloc(v->v, (size_t)cap * sizeof *nv);
        if (!nv) return oom(p), false;
        v->v = nv;
        const char **nn = realloc(v->names, (size_t)cap * sizeof *nn);
        if (!nn) return oom(p), false;
        v->names = nn;
        v->cap = cap;
    }
    v->v[v->n] = x;
    v->names[v->n] = name;
    v->n++;
    return true;
}

static void vec_free(vec *v) {
    free(v->v);
    free(v->names);
}

/* Moves the children into the arena and attaches them to n. */
static cj_node *vec_finish(P *p, vec *v, cj_node *n, bool with_names) {
    if (!n) {
        vec_free(v);
        return NULL;
    }
    if (v->n) {
        n->kids = cj_arena_alloc(p->a, (size_t)v->n * sizeof *n->kids);
        if (!n->kids) {
            vec_free(v);
            return oom(p);
        }
        memcpy(n->kids, v->v, (size_t)v->n * sizeof *n->kids);
        if (with_names) {
            n->kwnames = cj_arena_alloc(p->a, (size_t)v->n * sizeof *n->kwnames);
            if (!n->kwnames) {
                vec_free(v);
                return oom(p);
            }
            memcpy(n->kwnames, v->names, (size_t)v->n * sizeof *n->kwnames);
        }
    }
    n->nkids = v->n;
    vec_free(v);
    return n;
}

static char *tok_str(P *p, const cj_tok *t) {
    char *s = cj_arena_strndup(p->a, t->s, t->n);
    if (!s) oom(p);
    return s;
}

static bool expect_op(P *p, int op) {
    if (is_op(cur(p), op)) {
        advance(p);
        return true;
    }
    char what[16];
    snprintf(what, sizeof what, "'%s'", cj_op_str(op));
    fail_expected(p, what);
    return false;
}

static const cj_tok *expect_name(P *p) {
    const cj_tok *t = cur(p);
    if (t->type != CJ_T_NAME) return fail_expected(p, "a name");
    advance(p);
    return t;
}

static bool expect_type(P *p, cj_tt type, const char *what) {
    if (cur(p)->type == type) {
        advance(p);
        return true;
    }
    fail_expected(p, what);
    return false;
}

static cj_node *parse_expression(P *p, bool with_condexpr);
static cj_node *parse_unary(P *p, bool with_filter);
static cj_node *parse_primary(P *p);
static cj_node *parse_postfix(P *p, cj_node *n);
static cj_node *parse_tuple(P *p, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_parens);
static cj_node *subparse(P *p, const char *const *end, int n_end);
static cj_node *parse_statement(P *p);

/* ---- expressions ---------------------------------------------------- */

static cj_node *parse_or(P *p);

static cj_node *parse_condexpr(P *p) {
    if (!enter(p)) return NULL;
    cj_node *e1 = parse_or(p);
    while (e1 && is_name(cur(p), "if")) {
        cj_node *c = node(p, CJ_N_COND, cur(p));
        advance(p);
        if (!c || !(c->a = parse_or(p))) {
            e1 = NULL;
            break;
        }
        c->b = e1;
        if (is_name(cur(p), "else")) {
            advance(p);
            if (!(c->c = parse_condexpr(p))) {
                e1 = NULL;
                break;
            }
        }
        e1 = c;
    }
    leave(p);
    return e1;
}

static cj_node *parse_expression(P *p, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

static cj_node *parse_not(P *p);
static cj_node *parse_compare(P *p);

static cj_node *parse_and(P *p) {
    cj_node *l = parse_not(p);
    while (l && is_name(cur(p), "and")) {
        cj_node *n = node(p, CJ_N_AND, cur(p));
        advance(p);
        if (!n || !(n->b = parse_not(p))) return NULL;
        n->a = l;
        l = n;
    }
    return l;
}

static cj_node *parse_or(P *p) {
    cj_node *l = parse_and(p);
    while (l && is_name(cur(p), "or")) {
        cj_node *n = node(p, CJ_N_OR, cur(p));
        advance(p);
        if (!n || !(n->b = parse_and(p))) return NULL;
        n->a = l;
        l = n;
    }
    return l;
}

static cj_node *parse_not(P *p) {
    if (!is_name(cur(p), "not")) return parse_compare(p);
    cj_node *n = node(p, CJ_N_NOT, cur(p));
    advance(p);
    if (!n || !enter(p)) return NULL;
    n->a = parse_not(p);
    leave(p);
    return n->a ? n : NULL;
}

static cj_node *parse_math1(P *p);

static cj_node *parse_compare(P *p) {
    const cj_tok *start = cur(p);
    cj_node *first = parse_math1(p);
    if (!first) return NULL;
    vec v = {0};
    int ops[CJ_MAX_ARGS];
    for (;;) {
        const cj_tok *t = cur(p);
        int op = -1;
        if (t->type == CJ_T_OP && (t->op == CJ_OP_EQ || t->op == CJ_OP_NE || t->op == CJ_OP_LT || t->op == CJ_OP_LTEQ ||
                                   t->op == CJ_OP_GT || t->op == CJ_OP_GTEQ)) {
            op = t->op;
            advance(p);
        } else if (is_name(t, "in")) {
            op = CJ_OP_IN;
            advance(p);
        } else if (is_name(t, "not") && is_name(look(p), "in")) {
            op = CJ_OP_NOTIN;
            advance(p);
            advance(p);
        } else {
            break;
        }
        if (v.n >= CJ_MAX_ARGS) {
            vec_free(&v);
            return fail_at(p, t, "comparison chain too long");
        }
        cj_node *r = parse_math1(p);
        if (!r || !vec_push(p, &v, r, NULL)) {
            vec_free(&v);
            return NULL;
        }
        ops[v.n - 1] = op;
    }
    if (v.n == 0) {
        vec_free(&v);
        return first;
    }
    cj_node *n = node(p, CJ_N_COMPARE, start);
    int cnt = v.n;
    if (!vec_finish(p, &v, n, false)) return NULL;
    n->a = first;
    n->ops = cj_arena_alloc(p->a, (size_t)cnt * sizeof *n->ops);
    if (!n->ops) return oom(p);
    memcpy(n->ops, ops, (size_t)cnt * sizeof *n->ops);
    return n;
}

static cj_node *parse_concat(P *p);
static cj_node *parse_math2(P *p);
static cj_node *parse_pow(P *p);

static cj_node *binop_loop(P *p, cj_node *(*sub)(P *), const int *ops, int nops) {
    cj_node *l = sub(p);
    while (l) {
        const cj_tok *t = cur(p);
        bool hit = false;
        for (int k = 0; k < nops; k++) hit = hit || is_op(t, ops[k]);
        if (!hit) break;
        cj_node *n = node(p, CJ_N_BINOP, t);
        advance(p);
        if (!n || !(n->b = sub(p))) return NULL;
        n->op = t->op;
        n->a = l;
        l = n;
    }
    return l;
}

static cj_node *parse_math1(P *p) {
    static const int ops[] = {CJ_OP_ADD, CJ_OP_SUB};
    return binop_loop(p, parse_concat, ops, 2);
}

static cj_node *parse_concat(P *p) {
    const cj_tok *start = cur(p);
    cj_node *first = parse_math2(p);
    if (!first || !is_op(cur(p), CJ_OP_TILDE)) return first;
    vec v = {0};
    if (!vec_push(p, &v, first, NULL)) return vec_free(&v), NULL;
    while (is_op(cur(p), CJ_OP_TILDE)) {
        advance(p);
        cj_node *r = parse_math2(p);
        if (!r || !vec_push(p, &v, r, NULL)) return vec_free(&v), NULL;
    }
    return vec_finish(p, &v, node(p, CJ_N_CONCAT, start), false);
}

static cj_node *parse_math2(P *p) {
    static const int ops[] = {CJ_OP_MUL, CJ_OP_DIV, CJ_OP_FLOORDIV, CJ_OP_MOD};
    return binop_loop(p, parse_pow, ops, 4);
}

static cj_node *parse_unary_f(P *p) { return parse_unary(p, true); }

static cj_node *parse_pow(P *p) {
    static const int ops[] = {CJ_OP_POW};
    return binop_loop(p, parse_unary_f, ops, 1); /* left-associative, as in Jinja */
}

/* Call arguments "(a, b, key=c)" into v; returns the positional count or -1. */
static int parse_call_args(P *p, vec *v) {
    int npos = 0;
    if (!expect_op(p, CJ_OP_LPAREN)) return -1;
    while (!is_op(cur(p), CJ_OP_RPAREN)) {
        if (v->n) {
            if (!expect_op(p, CJ_OP_COMMA)) return -1;
            if (is_op(cur(p), CJ_OP_RPAREN)) break;
        }
        if (v->n >= CJ_MAX_ARGS) return fail_at(p, cur(p), "too many arguments"), -1;
        const cj_tok *t = cur(p);
        if (is_op(t, CJ_OP_MUL) || is_op(t, CJ_OP_POW))
            return fail_at(p, t, "*args and **kwargs in calls are not supported"), -1;
        const char *kw = NULL;
        if (t->type == CJ_T_NAME && is_op(look(p), CJ_OP_ASSIGN)) {
            if (!(kw = tok_str(p, t))) return -1;
            advance(p);
            advance(p);
        } else if (v->n > npos) {
            return fail_at(p, t, "positional argument follows keyword argument"), -1;
        }
        cj_node *e = parse_expression(p, true);
        if (!e || !vec_push(p, v, e, kw)) return -1;
        if (!kw) npos++;
    }
    advance(p); /* ) */
    return npos;
}

static cj_node *finish_call_like(P *p, cj_node *n, vec *v, int npos) {
    if (npos < 0 || !n) {
        vec_free(v);
        return NULL;
    }
    n->npos = npos;
    return vec_finish(p, v, n, true);
}

static cj_node *parse_call(P *p, cj_node *callee) {
    cj_node *n = node(p, CJ_N_CALL, cur(p));
    vec v = {0};
    int npos = parse_call_args(p, &v);
    if (n) n->a = callee;
    return finish_call_like(p, n, &v, npos);
}

/* name or dotted.name after '|' or 'is' */
static char *dotted_name(P *p) {
    const cj_tok *t = expect_name(p);
    if (!t) return NULL;
    size_t len = t->n;
    char buf[128];
    if (t->n >= sizeof buf) return fail_at(p, t, "name too long");
    memcpy(buf, t->s, t->n);
    while (is_op(cur(p), CJ_OP_DOT)) {
        advance(p);
        const cj_tok *u = expect_name(p);
        if (!u) return NULL;
        if (len + 1 + u->n >= sizeof buf) return fail_at(p, u, "name too long");
        buf[len++] = '.';
        memcpy(buf + len, u->s, u->n);
        len += u->n;
    }
    char *s = cj_arena_strndup(p->a, buf, len);
    if (!s) oom(p);
    return s;
}

static cj_node *parse_filter(P *p, cj_node *operand) {
    while (operand && is_op(cur(p), CJ_OP_PIPE)) {
        advance(p);
        const cj_tok *at = cur(p);
        char *name = dotted_name(p);
        if (!name) return NULL;
        if (!cj_filter_known(name)) return fail_at(p, at, "no filter named '%s'", name);
        cj_node *n = node(p, CJ_N_FILTER, at);
        if (!n) return NULL;
        n->a = operand;
        n->str = name;
        n->len = strlen(name);
        if (is_op(cur(p), CJ_OP_LPAREN)) {
            vec v = {0};
            int npos = parse_call_args(p, &v);
            if (!finish_call_like(p, n, &v, npos)) return NULL;
        }
        operand = n;
    }
    return operand;
}

static cj_node *parse_test(P *p, cj_node *operand) {
    const cj_tok *is_tok = cur(p);
    advance(p); /* is */
    bool negated = false;
    if (is_name(cur(p), "not")) {
        negated = true;
        advance(p);
    }
    const cj_tok *at = cur(p);
    char *name = dotted_name(p);
    if (!name) return NULL;
    if (!cj_test_known(name)) return fail_at(p, at, "no test named '%s'", name);
    cj_node *n = node(p, CJ_N_TEST, at);
    if (!n) return NULL;
    n->a = operand;
    n->str = name;
    n->len = strlen(name);
    const cj_tok *t = cur(p);
    if (is_op(t, CJ_OP_LPAREN)) {
        vec v = {0};
        int npos = parse_call_args(p, &v);
        if (!finish_call_like(p, n, &v, npos)) return NULL;
    } else if ((t->type == CJ_T_NAME || t->type == CJ_T_STRING || t->type == CJ_T_INT || t->type == CJ_T_FLOAT ||
                is_op(t, CJ_OP_LPAREN) || is_op(t, CJ_OP_LBRACKET) || is_op(t, CJ_OP_LBRACE)) &&
               !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
        /* "x is divisibleby 3": one argument without parentheses */
        if (is_name(t, "is")) return fail_at(p, t, "you cannot chain multiple tests with 'is'");
        cj_node *arg = parse_primary(p);
        if (arg) arg = parse_postfix(p, arg);
        if (!arg) return NULL;
        vec v = {0};
        if (!vec_push(p, &v, arg, NULL)) return vec_free(&v), NULL;
        if (!finish_call_like(p, n, &v, 1)) return NULL;
    }
    if (negated) {
        cj_node *no = node(p, CJ_N_NOT, is_tok);
        if (!no) return NULL;
        no->a = n;
        return no;
    }
    return n;
}

static cj_node *parse_subscribed(P *p) {
    const cj_tok *start = cur(p);
    cj_node *args[3] = {NULL, NULL, NULL};
    if (is_op(cur(p), CJ_OP_COLON)) {
        advance(p);
    } else {
        cj_node *e = parse_expression(p, true);
        if (!e) return NULL;
        if (!is_op(cur(p), CJ_OP_COLON)) return e;
        advance(p);
        args[0] = e;
    }
    if (!is_op(cur(p), CJ_OP_COLON) && !is_op(cur(p), CJ_OP_RBRACKET) && !is_op(cur(p), CJ_OP_COMMA)) {
        if (!(args[1] = parse_expression(p, true))) return NULL;
    }
    if (is_op(cur(p), CJ_OP_COLON)) {
        advance(p);
        if (!is_op(cur(p), CJ_OP_RBRACKET) && !is_op(cur(p), CJ_OP_COMMA)) {
            if (!(args[2] = parse_expression(p, true))) return NULL;
        }
    }
    cj_node *n = node(p, CJ_N_SLICE, start);
    if (!n) return NULL;
    n->a = args[0];
    n->b = args[1];
    n->c = args[2];
    return n;
}

static cj_node *parse_subscript(P *p, cj_node *obj) {
    const cj_tok *t = cur(p);
    advance(p);
    if (is_op(t, CJ_OP_DOT)) {
        const cj_tok *at = cur(p);
        advance(p);
        if (at->type == CJ_T_NAME) {
            cj_node *n = node(p, CJ_N_GETATTR, t);
            if (!n || !(n->str = tok_str(p, at))) return NULL;
            n->len = at->n;
            n->a = obj;
            return n;
        }
        if (at->type != CJ_T_INT) return fail_at(p, at, "expected name or number after '.'");
        cj_node *k = node(p, CJ_N_CONST, at);
        cj_node *n = node(p, CJ_N_GETITEM, t);
        if (!k || !n) return NULL;
        k->ck = CJ_C_INT;
        k->ival = at->ival;
        n->a = obj;
        n->b = k;
        return n;
    }
    /* '[' */
    vec v = {0};
    while (!is_op(cur(p), CJ_OP_RBRACKET)) {
        if (v.n && !expect_op(p, CJ_OP_COMMA)) return vec_free(&v), NULL;
        if (v.n >= CJ_MAX_ARGS) return vec_free(&v), fail_at(p, cur(p), "too many subscripts");
        cj_node *e = parse_subscribed(p);
        if (!e || !vec_push(p, &v, e, NULL)) return vec_free(&v), NULL;
    }
    advance(p);
    if (v.n == 0) {
        vec_free(&v);
        return fail_at(p, t, "expected an index");
    }
    cj_node *idx;
    if (v.n == 1) {
        idx = v.v[0];
        vec_free(&v);
    } else {
        idx = vec_finish(p, &v, node(p, CJ_N_TUPLE, t), false);
        if (!idx) return NULL;
    }
    cj_node *n = node(p, CJ_N_GETITEM, t);
    if (!n) return NULL;
    n->a = obj;
    n->b = idx;
    return n;
}

static cj_node *parse_postfix(P *p, cj_node *n) {
    while (n) {
        const cj_tok *t = cur(p);
        if (is_op(t, CJ_OP_DOT) || is_op(t, CJ_OP_LBRACKET)) n = parse_subscript(p, n);
        else if (is_op(t, CJ_OP_LPAREN)) n = parse_call(p, n);
        else break;
    }
    return n;
}

static cj_node *parse_filter_expr(P *p, cj_node *n) {
    while (n) {
        const cj_tok *t = cur(p);
        if (is_op(t, CJ_OP_PIPE)) n = parse_filter(p, n);
        else if (is_name(t, "is")) n = parse_test(p, n);
        else if (is_op(t, CJ_OP_LPAREN)) n = parse_call(p, n);
        else break;
    }
    return n;
}

static cj_node *parse_unary(P *p, bool with_filter) {
    if (!enter(p)) return NULL;
    const cj_tok *t = cur(p);
    cj_node *n;
    if (is_op(t, CJ_OP_SUB) || is_op(t, CJ_OP_ADD)) {
        n = node(p, is_op(t, CJ_OP_SUB) ? CJ_N_NEG : CJ_N_POS, t);
        advance(p);
        if (n && !(n->a = parse_unary(p, false))) n = NULL;
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    leave(p);
    return n;
}

static cj_node *parse_list_or_dict(P *p, bool dict) {
    const cj_tok *start = cur(p);
    advance(p);
    int close = dict ? CJ_OP_RBRACE : CJ_OP_RBRACKET;
    vec v = {0};
    while (!is_op(cur(p), close)) {
        if (v.n && !expect_op(p, CJ_OP_COMMA)) return vec_free(&v), NULL;
        if (is_op(cur(p), close)) break;
        cj_node *k = parse_expression(p, true);
        if (!k || !vec_push(p, &v, k, NULL)) return vec_free(&v), NULL;
        if (dict) {
            if (!expect_op(p, CJ_OP_COLON)) return vec_free(&v), NULL;
            cj_node *val = parse_expression(p, true);
            if (!val || !vec_push(p, &v, val, NULL)) return vec_free(&v), NULL;
        }
    }
    advance(p);
    return vec_finish(p, &v, node(p, dict ? CJ_N_DICT : CJ_N_LIST, start), false);
}

static cj_node *parse_primary(P *p) {
    if (!enter(p)) return NULL;
    const cj_tok *t = cur(p);
    cj_node *n = NULL;
    switch (t->type) {
    case CJ_T_NAME:
        n = node(p, CJ_N_CONST, t);
        if (!n) break;
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            n->ck = CJ_C_BOOL;
            n->ival = t->s[0] == 't' || t->s[0] == 'T';
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n->ck = CJ_C_NONE;
        } else {
            n->type = CJ_N_NAME;
            if (!(n->str = tok_str(p, t))) n = NULL;
            else n->len = t->n;
        }
        advance(p);
        break;
    case CJ_T_STRING: {
        /* adjacent literals concatenate: 'a' "b" == 'ab' */
        size_t total = 0, k = p->i;
        while (p->t[k].type == CJ_T_STRING) total += p->t[k++].n;
        n = node(p, CJ_N_CONST, t);
        char *s = n ? cj_arena_alloc(p->a, total + 1) : NULL;
        if (!s) {
            n = oom(p);
            break;
        }
        size_t off = 0;
        while (cur(p)->type == CJ_T_STRING) {
            memcpy(s + off, cur(p)->s, cur(p)->n);
            off += cur(p)->n;
            advance(p);
        }
        n->ck = CJ_C_STR;
        n->str = s;
        n->len = total;
        break;
    }
    case CJ_T_INT:
    case CJ_T_FLOAT:
        n = node(p, CJ_N_CONST, t);
        if (!n) break;
        n->ck = t->type == CJ_T_INT ? CJ_C_INT : CJ_C_FLOAT;
        n->ival = t->ival;
        n->fval = t->fval;
        advance(p);
        break;
    case CJ_T_OP:
        if (t->op == CJ_OP_LPAREN) {
            advance(p);
            n = parse_tuple(p, false, true, NULL, true);
            if (n && !expect_op(p, CJ_OP_RPAREN)) n = NULL;
            break;
        }
        if (t->op == CJ_OP_LBRACKET || t->op == CJ_OP_LBRACE) {
            n = parse_list_or_dict(p, t->op == CJ_OP_LBRACE);
            break;
        }
        /* fallthrough */
    default: {
        char d[64];
        describe(t, d, sizeof d);
        n = fail_at(p, t, "unexpected %s", d);
    }
    }
    leave(p);
    return n;
}

static bool is_tuple_end(P *p, const char *extra_end) {
    const cj_tok *t = cur(p);
    if (t->type == CJ_T_VAR_END || t->type == CJ_T_BLOCK_END || t->type == CJ_T_EOF || is_op(t, CJ_OP_RPAREN)) return true;
    return extra_end && is_name(t, extra_end);
}

static cj_node *parse_tuple(P *p, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_parens) {
    const cj_tok *start = cur(p);
    vec v = {0};
    bool is_tuple = false;
    for (;;) {
        if (v.n && !expect_op(p, CJ_OP_COMMA)) return vec_free(&v), NULL;
        if (is_tuple_end(p, extra_end)) break;
        if (v.n >= CJ_MAX_ARGS) return vec_free(&v), fail_at(p, cur(p), "tuple too long");
        cj_node *e = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        if (!e || !vec_push(p, &v, e, NULL)) return vec_free(&v), NULL;
        if (is_op(cur(p), CJ_OP_COMMA)) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (v.n) {
            cj_node *e = v.v[0];
            vec_free(&v);
            return e;
        }
        if (!explicit_parens) {
            vec_free(&v);
            return fail_expected(p, "an expression");
        }
    }
    return vec_finish(p, &v, node(p, CJ_N_TUPLE, start), false);
}

/* ---- statements ------------------------------------------------------ */

static bool can_assign(const cj_node *n) {
    if (n->type == CJ_N_NAME) return true;
    if (n->type != CJ_N_TUPLE) return false;
    for (int i = 0; i < n->nkids; i++)
        if (!can_assign(n->kids[i])) return false;
    return true;
}

static cj_node *parse_assign_target(P *p, const char *extra_end, bool with_namespace) {
    const cj_tok *t = cur(p);
    if (with_namespace && t->type == CJ_T_NAME && is_op(look(p), CJ_OP_DOT)) {
        cj_node *ns = node(p, CJ_N_NAME, t);
        if (!ns || !(ns->str = tok_str(p, t))) return NULL;
        ns->len = t->n;
        advance(p);
        advance(p);
        const cj_tok *attr = expect_name(p);
        if (!attr) return NULL;
        cj_node *n = node(p, CJ_N_NSREF, t);
        if (!n || !(n->str = tok_str(p, attr))) return NULL;
        n->len = attr->n;
        n->a = ns;
        return n;
    }
    cj_node *n = parse_tuple(p, true, false, extra_end, false);
    if (n && !can_assign(n)) return fail_at(p, t, "cannot assign to this expression");
    return n;
}

static bool is_end(const cj_tok *t, const char *const *end, int n_end) {
    for (int k = 0; k < n_end; k++)
        if (is_name(t, end[k])) return true;
    return false;
}

/* After a block tag's header: expects '%}', then the body up to one of the
 * end tags (left current unless drop). */
static cj_node *parse_statements(P *p, const char *const *end, int n_end, bool drop, const cj_tok *opener) {
    if (is_op(cur(p), CJ_OP_COLON)) advance(p);
    if (!expect_type(p, CJ_T_BLOCK_END, "'%}'")) return NULL;
    const char *save_name = p->open_name;
    int save_line = p->open_line;
    char opname[32];
    snprintf(opname, sizeof opname, "%.*s", (int)(opener->n > 31 ? 31 : opener->n), opener->s);
    p->open_name = cj_arena_strndup(p->a, opname, strlen(opname));
    p->open_line = opener->line;
    cj_node *body = subparse(p, end, n_end);
    p->open_name = save_name;
    p->open_line = save_line;
    if (!body) return NULL;
    if (cur(p)->type == CJ_T_EOF) {
        char want[128] = "";
        for (int k = 0; k < n_end; k++) {
            size_t l = strlen(want);
            snprintf(want + l, sizeof want - l, "%s'%s'", k ? " or " : "", end[k]);
        }
        return fail_at(p, cur(p), "unexpected end of template: expected %s to close '%s' from line %d", want, opname,
                       opener->line);
    }
    if (drop) advance(p);
    return body;
}

static cj_node *parse_if(P *p) {
    static const char *const ends1[] = {"elif", "else", "endif"};
    static const char *const ends2[] = {"endif"};
    const cj_tok *opener = cur(p);
    cj_node *root = node(p, CJ_N_IF, cur(p)), *n = root;
    advance(p);
    while (n) {
        if (!(n->a = parse_tuple(p, false, false, NULL, false))) return NULL;
        if (!(n->b = parse_statements(p, ends1, 3, false, opener))) return NULL;
        const cj_tok *t = cur(p);
        advance(p);
        if (is_name(t, "elif")) {
            cj_node *e = node(p, CJ_N_IF, t);
            n->c = e;
            n = e;
            continue;
        }
        if (is_name(t, "else") && !(n->c = parse_statements(p, ends2, 1, true, opener))) return NULL;
        break;
    }
    return n ? root : NULL;
}

static cj_node *parse_for(P *p) {
    static const char *const ends1[] = {"endfor", "else"};
    static const char *const ends2[] = {"endfor"};
    const cj_tok *opener = cur(p);
    cj_node *n = node(p, CJ_N_FOR, cur(p));
    advance(p);
    if (!n || !(n->a = parse_assign_target(p, "in", false))) return NULL;
    if (!is_name(cur(p), "in")) return fail_expected(p, "'in'");
    advance(p);
    if (!(n->b = parse_tuple(p, false, false, "recursive", false))) return NULL;
    if (is_name(cur(p), "if")) {
        advance(p);
        if (!(n->c = parse_expression(p, true))) return NULL;
    }
    if (is_name(cur(p), "recursive")) return fail_at(p, cur(p), "recursive loops are not supported");
    p->loop_depth++;
    n->d = parse_statements(p, ends1, 2, false, opener);
    p->loop_depth--;
    if (!n->d) return NULL;
    bool is_else = is_name(cur(p), "else");
    advance(p);
    if (is_else && !(n->e = parse_statements(p, ends2, 1, true, opener))) return NULL;
    return n;
}

static cj_node *parse_set(P *p) {
    static const char *const ends[] = {"endset"};
    const cj_tok *opener = cur(p);
    cj_node *n = node(p, CJ_N_SET, cur(p));
    advance(p);
    if (!n || !(n->a = parse_assign_target(p, NULL, true))) return NULL;
    if (is_op(cur(p), CJ_OP_ASSIGN)) {
        advance(p);
        n->b = parse_tuple(p, false, true, NULL, false);
        return n->b ? n : NULL;
    }
    if (is_op(cur(p), CJ_OP_PIPE)) return fail_at(p, cur(p), "filters on a block set are not supported");
    if (n->a->type == CJ_N_TUPLE) return fail_at(p, opener, "a block set needs a single name");
    n->type = CJ_N_SETBLOCK;
    n->b = parse_statements(p, ends, 1, true, opener);
    return n->b ? n : NULL;
}

static cj_node *parse_macro(P *p) {
    static const char *const ends[] = {"endmacro"};
    const cj_tok *opener = cur(p);
    cj_node *n = node(p, CJ_N_MACRO, cur(p));
    advance(p);
    const cj_tok *name = expect_name(p);
    if (!n || !name || !(n->str = tok_str(p, name))) return NULL;
    n->len = name->n;
    if (!expect_op(p, CJ_OP_LPAREN)) return NULL;
    vec v = {0};
    bool defaults = false;
    while (!is_op(cur(p), CJ_OP_RPAREN)) {
        if (v.n && !expect_op(p, CJ_OP_COMMA)) return vec_free(&v), NULL;
        if (v.n >= CJ_MAX_ARGS) return vec_free(&v), fail_at(p, cur(p), "too many macro parameters");
        const cj_tok *at = expect_name(p);
        cj_node *param = at ? node(p, CJ_N_NAME, at) : NULL;
        if (!param || !(param->str = tok_str(p, at))) return vec_free(&v), NULL;
        param->len = at->n;
        if (is_op(cur(p), CJ_OP_ASSIGN)) {
            advance(p);
            if (!(param->a = parse_expression(p, true))) return vec_free(&v), NULL;
            defaults = true;
        } else if (defaults) {
            return vec_free(&v), fail_at(p, at, "non-default argument follows default argument");
        }
        if (!vec_push(p, &v, param, NULL)) return vec_free(&v), NULL;
    }
    advance(p);
    if (!vec_finish(p, &v, n, false)) return NULL;
    int save = p->loop_depth;
    p->loop_depth = 0;
    n->b = parse_statements(p, ends, 1, true, opener);
    p->loop_depth = save;
    return n->b ? n : NULL;
}

static cj_node *parse_statement(P *p) {
    static const char *const gen_end[] = {"endgeneration"};
    const cj_tok *t = cur(p);
    if (t->type != CJ_T_NAME) return fail_expected(p, "a tag name");
    if (!enter(p)) return NULL;
    cj_node *n = NULL;
    if (is_name(t, "if")) {
        n = parse_if(p);
    } else if (is_name(t, "for")) {
        n = parse_for(p);
    } else if (is_name(t, "set")) {
        n = parse_set(p);
    } else if (is_name(t, "macro")) {
        n = parse_macro(p);
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        if (p->loop_depth == 0) {
            n = fail_at(p, t, "'%.*s' outside of a loop", (int)t->n, t->s);
        } else {
            n = node(p, is_name(t, "break") ? CJ_N_BREAK : CJ_N_CONTINUE, t);
            advance(p);
        }
    } else if (is_name(t, "generation")) {
        /* Hugging Face's {% generation %} marks assistant text; it renders
         * its body unchanged. */
        advance(p);
        n = parse_statements(p, gen_end, 1, true, t);
    } else {
        char name[48];
        snprintf(name, sizeof name, "%.*s", (int)(t->n > 40 ? 40 : t->n), t->s);
        static const char *const unsupported[] = {"block", "extends", "include", "import", "from", "with",
                                                  "filter", "call", "autoescape", "print", "do", "raw"};
        bool known = false;
        for (size_t k = 0; k < sizeof unsupported / sizeof unsupported[0]; k++) known = known || strcmp(name, unsupported[k]) == 0;
        if (known) n = fail_at(p, t, "the '%s' tag is not supported", name);
        else if (p->open_name) n = fail_at(p, t, "unexpected tag '%s' inside '%s' from line %d", name, p->open_name, p->open_line);
        else n = fail_at(p, t, "unknown tag '%s'", name);
    }
    leave(p);
    return n;
}

static cj_node *subparse(P *p, const char *const *end, int n_end) {
    vec v = {0};
    cj_node *body = node(p, CJ_N_BODY, cur(p));
    if (!body) return NULL;
    for (;;) {
        const cj_tok *t = cur(p);
        cj_node *s = NULL;
        if (t->type == CJ_T_EOF) break;
        if (t->type == CJ_T_DATA) {
            s = node(p, CJ_N_TEXT, t);
            if (s) {
                s->str = t->s;
                s->len = t->n;
            }
            advance(p);
        } else if (t->type == CJ_T_VAR_BEGIN) {
            advance(p);
            s = node(p, CJ_N_PRINT, t);
            if (s && !(s->a = parse_tuple(p, false, true, NULL, false))) s = NULL;
            if (s && !expect_type(p, CJ_T_VAR_END, "'}}'")) s = NULL;
        } else if (t->type == CJ_T_BLOCK_BEGIN) {
            advance(p);
            if (n_end && is_end(cur(p), end, n_end)) break;
            s = parse_statement(p);
            if (s && !expect_type(p, CJ_T_BLOCK_END, "'%}'")) s = NULL;
        } else {
            char d[64];
            describe(t, d, sizeof d);
            s = fail_at(p, t, "unexpected %s", d);
        }
        if (!s || !vec_push(p, &v, s, NULL)) {
            vec_free(&v);
            return NULL;
        }
    }
    return vec_finish(p, &v, body, false);
}

int cj_parse(const cj_toks *toks, cj_arena *a, cj_node **root, tk_err *err) {
    P p = {.t = toks->v, .n = toks->n, .i = 0, .a = a, .err = err};
    cj_node *body = subparse(&p, NULL, 0);
    if (!body) return -1;
    *root = body;
    return 0;
}
