/* Python str methods shared by filters (trim, upper, replace...) and by
 * method calls (.strip(), .split()...).  Strings are UTF-8; case mapping
 * uses utf8proc's simple (one-to-one) mappings, so e.g. 'ß'.upper() stays
 * 'ß' where Python gives 'SS'. */
#ifndef TK_CHAT_STROPS_H
#define TK_CHAT_STROPS_H

#include "runtime.h"

typedef enum cj_case {
    CJ_CASE_UPPER,
    CJ_CASE_LOWER,
    CJ_CASE_CAPITALIZE,   /* str.capitalize() */
    CJ_CASE_TITLE,        /* str.title() */
    CJ_CASE_TITLE_FILTER, /* Jinja's |title: words split at whitespace and -({[< */
} cj_case;

int cj_str_case(cj_ctx *c, const cj_str *s, cj_case mode, cj_val *out);
/* chars NULL: whitespace. */
int cj_str_strip(cj_ctx *c, const cj_str *s, const cj_str *chars, bool left, bool right, cj_val *out);
/* count < 0: all. */
int cj_str_replace(cj_ctx *c, const cj_str *s, const cj_str *old, const cj_str *rep, int64_t count, cj_val *out);
/* sep NULL: runs of whitespace.  maxsplit < 0: unlimited. */
int cj_str_split(cj_ctx *c, const cj_str *s, const cj_str *sep, int64_t maxsplit, bool from_right, cj_val *out);
/* str.splitlines() (without keepends). */
int cj_str_splitlines(cj_ctx *c, const cj_str *s, cj_val *out);
/* str.find/rfind: *out = code point index or -1. */
int cj_str_find(cj_ctx *c, const cj_str *s, const cj_str *sub, bool from_right, int64_t *out);
/* Character-class predicates of str.isX(). */
typedef enum { CJ_IS_DIGIT, CJ_IS_ALPHA, CJ_IS_ALNUM, CJ_IS_SPACE, CJ_IS_UPPER, CJ_IS_LOWER } cj_is;
bool cj_str_is(const cj_str *s, cj_is what);

#endif
