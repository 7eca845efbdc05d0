/* Parser: tokens -> syntax tree, following Jinja2's grammar and operator
 * precedence.  Nesting depth is bounded (untrusted templates). */
#ifndef TK_CHAT_PARSER_H
#define TK_CHAT_PARSER_H

#include "../util/err.h"
#include "arena.h"
#include "ast.h"
#include "lexer.h"

#define CJ_MAX_PARSE_DEPTH 200

int cj_parse(const cj_toks *toks, cj_arena *a, cj_node **root, tk_err *err);

#endif
