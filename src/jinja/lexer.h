/* Template lexer: splits source into text and tag tokens the way Jinja2's
 * lexer does under Hugging Face's settings (trim_blocks, lstrip_blocks,
 * a single trailing newline dropped, \r\n and \r read as \n). */
#ifndef TK_CHAT_LEXER_H
#define TK_CHAT_LEXER_H

#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"
#include "arena.h"

typedef enum cj_tt {
    CJ_T_EOF,
    CJ_T_DATA,
    CJ_T_VAR_BEGIN,
    CJ_T_VAR_END,
    CJ_T_BLOCK_BEGIN,
    CJ_T_BLOCK_END,
    CJ_T_NAME,
    CJ_T_STRING,
    CJ_T_INT,
    CJ_T_FLOAT,
    CJ_T_OP,
} cj_tt;

typedef enum cj_op {
    CJ_OP_ADD, CJ_OP_SUB, CJ_OP_DIV, CJ_OP_FLOORDIV, CJ_OP_MUL, CJ_OP_MOD, CJ_OP_POW,
    CJ_OP_TILDE, CJ_OP_LBRACKET, CJ_OP_RBRACKET, CJ_OP_LPAREN, CJ_OP_RPAREN,
    CJ_OP_LBRACE, CJ_OP_RBRACE, CJ_OP_EQ, CJ_OP_NE, CJ_OP_GT, CJ_OP_GTEQ, CJ_OP_LT,
    CJ_OP_LTEQ, CJ_OP_ASSIGN, CJ_OP_DOT, CJ_OP_COLON, CJ_OP_PIPE, CJ_OP_COMMA,
    CJ_OP_SEMICOLON,
    /* not lexed: used by the parser for comparison chains */
    CJ_OP_IN, CJ_OP_NOTIN,
} cj_op;

typedef struct cj_tok {
    cj_tt type;
    int op;        /* CJ_OP_* for CJ_T_OP */
    int line, col; /* 1-based; columns count code points */
    const char *s; /* DATA/NAME: points into the normalized source; STRING: unescaped, in the arena */
    size_t n;
    int64_t ival;
    double fval;
} cj_tok;

typedef struct cj_toks {
    cj_tok *v;
    size_t n, cap;
} cj_toks;

/* Tokenizes src (len bytes).  Strings are allocated from a; the token array
 * is malloc'd (free with cj_toks_free) and always ends with CJ_T_EOF. */
int cj_lex(const char *src, size_t len, cj_arena *a, cj_toks *out, tk_err *err);
void cj_toks_free(cj_toks *t);
const char *cj_op_str(int op);

#endif
