/* Template syntax tree.  Nodes live in the template's arena; one generic
 * node shape keeps the parser and evaluator small (fields per type below). */
#ifndef TK_CHAT_AST_H
#define TK_CHAT_AST_H

#include <stddef.h>
#include <stdint.h>

typedef enum cj_nt {
    /* statements */
    CJ_N_BODY,     /* kids: statements */
    CJ_N_TEXT,     /* str/len: literal text */
    CJ_N_PRINT,    /* a: expression */
    CJ_N_IF,       /* a: test, b: body, c: else (BODY, IF for elif, or NULL) */
    CJ_N_FOR,      /* a: target, b: iterable, c: filter or NULL, d: body, e: else or NULL */
    CJ_N_SET,      /* a: target (NAME, TUPLE or NSREF), b: value */
    CJ_N_SETBLOCK, /* a: target, b: body whose output is assigned */
    CJ_N_MACRO,    /* str: name, kids: params (NAME, a = default or NULL), b: body */
    CJ_N_BREAK,
    CJ_N_CONTINUE,
    /* expressions */
    CJ_N_CONST,   /* ck + ival/fval/str */
    CJ_N_NAME,    /* str */
    CJ_N_LIST,    /* kids */
    CJ_N_TUPLE,   /* kids */
    CJ_N_DICT,    /* kids: key0, value0, key1, value1, ... */
    CJ_N_GETATTR, /* a: object, str: attribute */
    CJ_N_GETITEM, /* a: object, b: index or SLICE */
    CJ_N_SLICE,   /* a: start, b: stop, c: step (each may be NULL) */
    CJ_N_CALL,    /* a: callee, kids: args, kwnames[i]: keyword or NULL */
    CJ_N_FILTER,  /* a: operand, str: filter name, kids/kwnames: args */
    CJ_N_TEST,    /* a: operand, str: test name, kids/kwnames: args */
    CJ_N_NEG,     /* a */
    CJ_N_POS,     /* a */
    CJ_N_NOT,     /* a */
    CJ_N_BINOP,   /* op (CJ_OP_ADD...), a, b */
    CJ_N_CONCAT,  /* kids: joined with ~ */
    CJ_N_AND,     /* a, b */
    CJ_N_OR,      /* a, b */
    CJ_N_COMPARE, /* a: first operand, kids: further operands, ops[i]: operator */
    CJ_N_COND,    /* a: test, b: value if true, c: value if false or NULL */
    CJ_N_NSREF,   /* a: NAME of the namespace, str: attribute (assignment target) */
} cj_nt;

typedef enum cj_ck { CJ_C_NONE, CJ_C_BOOL, CJ_C_INT, CJ_C_FLOAT, CJ_C_STR } cj_ck;

typedef struct cj_node {
    cj_nt type;
    int op;
    int line, col;
    const char *str; /* NUL-terminated, in the arena */
    size_t len;
    cj_ck ck;
    int64_t ival;
    double fval;
    struct cj_node *a, *b, *c, *d, *e;
    struct cj_node **kids;
    int nkids;
    int npos;              /* CALL/FILTER/TEST: kids[0..npos) are positional */
    const char **kwnames;  /* CALL/FILTER/TEST: per kid, keyword name or NULL */
    int *ops;              /* COMPARE */
} cj_node;

#endif
