/* Runtime of the chat-template interpreter: values with Python semantics,
 * the render context (limits, scopes, output) and the entry points that the
 * evaluator, filters, tests, methods and builtins share.
 *
 * Memory: heap values are reference counted.  Every object is also linked
 * into the context's live list, so whatever survives the render (a cycle
 * made through a namespace, or a reference lost on an error path) is freed
 * when the render ends. */
#ifndef TK_CHAT_RUNTIME_H
#define TK_CHAT_RUNTIME_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"
#include "ast.h"
#include "buf.h"

typedef enum cj_kind {
    CJ_UNDEF, /* Jinja's default Undefined; o = hint string or NULL */
    CJ_NONE,
    CJ_BOOL,
    CJ_INT,
    CJ_FLOAT,
    CJ_STR,
    CJ_LIST, /* also tuples (cj_list.tuple) */
    CJ_DICT,
    CJ_NS,    /* namespace(): a dict whose entries are attributes */
    CJ_LOOP,  /* the loop variable of a for */
    CJ_FUNC,  /* a builtin global function; i = CJ_FN_* */
    CJ_MACRO,
} cj_kind;

typedef struct cj_obj {
    struct cj_obj *prev, *next; /* live list; next also chains the free queue */
    size_t bytes;               /* charged against the memory limit */
    uint32_t rc;
    uint8_t kind;
} cj_obj;

typedef struct cj_val {
    cj_kind kind;
    union {
        bool b;
        int64_t i;
        double f;
        cj_obj *o;
    };
} cj_val;

typedef struct cj_str {
    cj_obj h;
    size_t len;
    char s[]; /* NUL-terminated */
} cj_str;

typedef struct cj_list {
    cj_obj h;
    size_t n, cap;
    cj_val *v;
    bool tuple;
} cj_list;

typedef struct cj_dict {
    cj_obj h;
    size_t n, cap;
    cj_val *k, *v; /* insertion order, like Python dicts */
} cj_dict;

typedef struct cj_loop {
    cj_obj h;
    int64_t index0, length;
    cj_val items; /* the (filtered) list iterated, for previtem/nextitem */
} cj_loop;

typedef struct cj_macro {
    cj_obj h;
    const cj_node *def;
} cj_macro;

enum { CJ_FN_RANGE, CJ_FN_NAMESPACE, CJ_FN_RAISE, CJ_FN_STRFTIME, CJ_FN_DICT };

typedef struct cj_scope {
    struct cj_scope *parent;
    int n, cap;
    const char **names; /* borrowed from the AST */
    cj_val *vals;
} cj_scope;

typedef struct cj_ctx {
    tk_err *err;
    cj_obj live;   /* sentinel of the live-object list */
    cj_obj *dead;  /* objects whose count reached zero, waiting to be freed */
    bool draining; /* frees run iteratively, so deep structures cannot overflow the stack */
    size_t mem, mem_limit;
    uint64_t work, work_limit; /* bytes allocated or scanned over the whole render */
    uint64_t steps, step_limit; /* loop iterations and macro calls */
    const atomic_bool *cancel;  /* NULL, or set by another thread to stop the render (checked with the budget) */
    int depth, depth_limit;     /* evaluator recursion */
    cj_buf *out;
    size_t out_limit;
    cj_scope *scope, *root;
    int line; /* line of the node being evaluated, for error messages */
    cj_val ascii[128]; /* one-character strings, made once per render: iterating a string hands out references */
} cj_ctx;

/* Arguments of a call, filter, test or method (borrowed values). */
typedef struct cj_args {
    int npos, nkw;
    const cj_val *pos;
    const char *const *kwname;
    const cj_val *kw;
} cj_args;

/* ---- errors ---- */
int cj_fail(cj_ctx *c, const char *fmt, ...) TK_PRINTF(2, 3);
/* The error Jinja raises when an Undefined is used as a value. */
int cj_fail_undefined(cj_ctx *c, cj_val u);

/* ---- values (value.c) ---- */
static inline cj_val cj_none(void) { return (cj_val){.kind = CJ_NONE}; }
static inline cj_val cj_undef(void) { return (cj_val){.kind = CJ_UNDEF}; }
static inline cj_val cj_bool(bool b) { return (cj_val){.kind = CJ_BOOL, .b = b}; }
static inline cj_val cj_int(int64_t i) { return (cj_val){.kind = CJ_INT, .i = i}; }
static inline cj_val cj_float(double f) { return (cj_val){.kind = CJ_FLOAT, .f = f}; }
static inline cj_str *cj_S(cj_val v) { return (cj_str *)v.o; }
static inline cj_list *cj_L(cj_val v) { return (cj_list *)v.o; }
static inline cj_dict *cj_D(cj_val v) { return (cj_dict *)v.o; }
static inline bool cj_is_num(cj_val v) { return v.kind == CJ_BOOL || v.kind == CJ_INT || v.kind == CJ_FLOAT; }
static inline bool cj_is_intlike(cj_val v) { return v.kind == CJ_BOOL || v.kind == CJ_INT; }
static inline int64_t cj_as_int(cj_val v) { return v.kind == CJ_BOOL ? (int64_t)v.b : v.i; }
static inline double cj_as_float(cj_val v) { return v.kind == CJ_FLOAT ? v.f : (double)cj_as_int(v); }

void cj_ctx_init(cj_ctx *c, tk_err *err);
void cj_ctx_sweep(cj_ctx *c); /* frees every object still alive */
cj_val cj_ref(cj_val v);
void cj_unref(cj_ctx *c, cj_val v);
/* Charges n bytes of transient work (a scan, a temporary buffer) to the
 * budget; cj_fail_work reports the budget spent. */
int cj_charge_work(cj_ctx *c, size_t n);
/* Fails the render once c->cancel is set. */
int cj_check_cancel(cj_ctx *c);
int cj_fail_work(cj_ctx *c);

/* s may be NULL: a zeroed string of n bytes that the caller fills before sharing it. */
int cj_new_str(cj_ctx *c, const char *s, size_t n, cj_val *out);
int cj_new_strz(cj_ctx *c, const char *s, cj_val *out);
/* Undefined carrying a hint message (printf-style). */
int cj_new_undef(cj_ctx *c, cj_val *out, const char *fmt, ...) TK_PRINTF(3, 4);
int cj_new_list(cj_ctx *c, size_t cap, bool tuple, cj_val *out);
/* Takes ownership of item, also on failure. */
int cj_list_push(cj_ctx *c, cj_val list, cj_val item);
int cj_new_dict(cj_ctx *c, cj_kind kind, cj_val *out);
/* Takes ownership of key and value, also on failure; replaces an equal key. */
int cj_dict_set(cj_ctx *c, cj_val d, cj_val key, cj_val value);
/* *out = index of the entry whose key equals key (Python ==), or -1. */
int cj_dict_find(cj_ctx *c, cj_val d, cj_val key, long *out);
long cj_dict_find_str(cj_val d, const char *key, size_t len);
int cj_new_loop(cj_ctx *c, cj_val items, int64_t length, cj_val *out);
int cj_new_macro(cj_ctx *c, const cj_node *def, cj_val *out);

/* ---- conversions (repr.c) ---- */
const char *cj_type_name(cj_val v);
/* Python str(v) appended to b. */
int cj_write_str(cj_ctx *c, cj_val v, cj_buf *b);
/* Python repr(v) appended to b. */
int cj_write_repr(cj_ctx *c, cj_val v, cj_buf *b, int depth);
/* str(v) as a string value (a new reference to v itself when it is one). */
int cj_to_str(cj_ctx *c, cj_val v, cj_val *out);
/* Python repr(float). */
void cj_fmt_float(double d, char out[40]);
/* Finishes a temporary buffer into a string value and frees the buffer. */
int cj_buf_to_str(cj_ctx *c, cj_buf *b, cj_val *out);
/* A fresh temporary buffer with the context's size cap. */
void cj_tmpbuf(cj_ctx *c, cj_buf *b);
/* Reports a failed buffer write (cap reached or out of memory). */
int cj_fail_buf(cj_ctx *c);

/* ---- operators (ops.c) ---- */
bool cj_truthy(cj_val v);
/* Python ==; each element visited is charged to the work budget, and
 * containers nested past CJ_MAX_NEST fail rather than recurse further. */
int cj_eq(cj_ctx *c, cj_val a, cj_val b, bool *out);
/* Python hashability (dict keys, set members): fails with "unhashable type"
 * for lists, dicts, namespaces (also inside tuples), or past CJ_MAX_NEST. */
int cj_check_hashable(cj_ctx *c, cj_val v);
/* op is CJ_OP_EQ/NE/LT/LTEQ/GT/GTEQ/IN/NOTIN. */
int cj_compare(cj_ctx *c, int op, cj_val a, cj_val b, bool *out);
int cj_contains(cj_ctx *c, cj_val hay, cj_val needle, bool *out);
/* op is CJ_OP_ADD/SUB/MUL/DIV/FLOORDIV/MOD/POW. */
int cj_binop(cj_ctx *c, int op, cj_val a, cj_val b, cj_val *out);
int cj_negate(cj_ctx *c, cj_val a, bool neg, cj_val *out);
/* Python len(); Undefined has length 0. */
int cj_len(cj_ctx *c, cj_val v, int64_t *out);
/* The items that iterating v yields, as a list (a new reference). */
int cj_iter_list(cj_ctx *c, cj_val v, cj_val *out);
/* Python-style ordering for sort/min/max: <0, 0, >0. */
int cj_order(cj_ctx *c, cj_val a, cj_val b, bool case_insensitive, int *out);
/* Jinja's attribute / item lookup (missing -> Undefined with a hint). */
int cj_getattr(cj_ctx *c, cj_val obj, const char *name, cj_val *out);
int cj_getitem(cj_ctx *c, cj_val obj, cj_val key, cj_val *out);
/* obj[start:stop:step]; has_* say which bounds were given. */
int cj_slice(cj_ctx *c, cj_val obj, const cj_val *start, const cj_val *stop, const cj_val *step, cj_val *out);

/* ---- arguments (args.c) ---- */
/* Binds a to the parameter names (positional order); slots[i] is NULL when
 * absent.  Fails on extra or unknown arguments. */
int cj_bind(cj_ctx *c, const cj_args *a, const char *fname, const char *const *names, int n, const cj_val **slots);
/* Argument helpers: typed reads with a default when absent or None. */
int cj_arg_int(cj_ctx *c, const cj_val *v, const char *fname, const char *pname, int64_t dflt, int64_t *out);
int cj_arg_str(cj_ctx *c, const cj_val *v, const char *fname, const char *pname, const cj_str **out);

/* ---- filters, tests, methods, builtins ---- */
bool cj_filter_known(const char *name);
bool cj_test_known(const char *name);
int cj_filter_apply(cj_ctx *c, const char *name, cj_val v, const cj_args *a, cj_val *out);
int cj_test_apply(cj_ctx *c, const char *name, cj_val v, const cj_args *a, bool *out);
int cj_method_call(cj_ctx *c, cj_val self, const char *name, const cj_args *a, cj_val *out);
/* True when self has a method of that name (dict methods win over keys). */
bool cj_has_method(cj_val self, const char *name);
int cj_builtin_lookup(const char *name);
int cj_builtin_call(cj_ctx *c, int fn, const cj_args *a, cj_val *out);
/* JSON text of v as Hugging Face's tojson filter (json.dumps) writes it. */
typedef struct cj_json_opts {
    bool ensure_ascii, sort_keys;
    bool indent_set;
    const char *indent; /* indent string when indent_set */
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
} cj_json_opts;
int cj_tojson(cj_ctx *c, cj_val v, const cj_json_opts *o, cj_buf *b, int depth);

/* ---- evaluator (eval.c) ---- */
/* Sets name in scope s; takes ownership of v (name must outlive the scope). */
int cj_scope_set(cj_ctx *c, cj_scope *s, const char *name, cj_val v);
void cj_scope_release(cj_ctx *c, cj_scope *s);
int cj_render_root(cj_ctx *c, const cj_node *root);
/* Calls a callable value (builtin or macro). */
int cj_call_value(cj_ctx *c, cj_val f, const cj_args *a, cj_val *out);

/* Limits (untrusted templates). */
#define CJ_MAX_NEST 64 /* depth of repr/json/equality/ordering/hashing recursion into containers */

#endif
