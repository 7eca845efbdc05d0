/* Feeding a string through a grammar's matcher, for the grammar tests. */
#ifndef TK_TEST_GRAMMAR_FEED_H
#define TK_TEST_GRAMMAR_FEED_H

#include <stdbool.h>
#include <string.h>

#include "grammar/grammar.h"

/* Advances a fresh state by the bytes of s: 1 if the grammar allows them
 * (*accepting: whether they are a whole sentence), 0 if not, -1 on error. */
static inline int grammar_feed(const tk_grammar *g, const char *s, bool *accepting) {
    tk_err err = {{0}};
    tk_gstate st, scratch = {0};
    if (tk_gstate_init(&st, g, &err)) return -1;
    int rc = tk_gstate_advance_bytes(&st, (const uint8_t *)s, (int)strlen(s), &scratch, &err);
    *accepting = rc == 1 && st.accepting;
    tk_gstate_free(&st);
    tk_gstate_free(&scratch);
    return rc;
}

/* 1: the grammar accepts s completely; 0: it rejects; -1: error. */
static inline int grammar_matches(const tk_grammar *g, const char *s) {
    bool accepting;
    int rc = grammar_feed(g, s, &accepting);
    return rc < 0 ? -1 : accepting;
}

#endif
