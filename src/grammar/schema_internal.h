/* The JSON Schema compiler's shared state and rule-building helpers
 * (schema.c: keywords, objects, arrays, combinators; schema_string.c:
 * strings, patterns, formats, literal values; schema_number.c: integer and
 * number ranges). */
#ifndef TK_GRAMMAR_SCHEMA_INTERNAL_H
#define TK_GRAMMAR_SCHEMA_INTERNAL_H

#include <jansson.h>

#include "grammar.h"

#define TK_SCHEMA_MAX_DEPTH 64    /* nested subschemas (and $ref hops in one chain) */
#define TK_SCHEMA_MAX_ENUM 4096   /* values of one enum */
#define TK_SCHEMA_MAX_WORK 65536  /* subschemas compiled + merges: anyOf over self-merging $ref is exponential */
#define TK_SCHEMA_NONE (-2)       /* a schema no JSON value satisfies (e.g. false) */
#define TK_SCHEMA_N_FORMATS 5     /* "format" values: schema_string.c */

typedef struct tk_schema_ref {
    const json_t *target;
    int rule;
    int nest;         /* containers entered when compiling it began */
    bool in_progress; /* still being compiled: a hit is recursion */
} tk_schema_ref;

typedef struct tk_schema_escape {
    uint8_t lo, hi;
    int rule;
} tk_schema_escape;

typedef struct tk_schema_c {
    tk_gbuilder *b;
    tk_err *err;
    const json_t *doc; /* the whole document, for local $ref */
    char path[1024];   /* JSON pointer of the subschema being compiled */
    int path_len;
    int depth;
    int work; /* against TK_SCHEMA_MAX_WORK */
    int nest; /* objects / arrays entered: recursion through them consumes input */
    tk_schema_ref *refs;
    int n_refs, cap_refs;
    tk_schema_escape esc[64]; /* escaped forms of ASCII byte ranges (patterns) */
    int n_esc;
    /* shared rules, -1 until first used */
    int r_ws, r_char, r_hex, r_digits, r_value, r_string, r_number, r_key_char;
    int r_format[TK_SCHEMA_N_FORMATS];
} tk_schema_c;

/* "json schema: <message> at <pointer>"; returns -1. */
int tk_schema_fail(tk_schema_c *c, const char *fmt, ...) TK_PRINTF(2, 3);

int tk_schema_rule(tk_schema_c *c);
int tk_schema_byte(tk_schema_c *c, int rule, uint8_t lo, uint8_t hi);
int tk_schema_lit(tk_schema_c *c, int rule, const char *s, size_t n);
int tk_schema_ref_el(tk_schema_c *c, int rule, int ref);
int tk_schema_alt(tk_schema_c *c, int rule);
/* A class given as range pairs, "09afAF" = [0-9a-fA-F]. */
int tk_schema_class(tk_schema_c *c, int rule, const char *pairs, bool negate);
/* Repeats the last element of `rule` {m,n} (n < 0: unbounded). */
int tk_schema_repeat_last(tk_schema_c *c, int rule, int m, int n);

/* Shared rules. */
int tk_schema_ws(tk_schema_c *c);     /* [ \t\n\r]{0,20} */
int tk_schema_char(tk_schema_c *c);   /* one character of a JSON string, escapes included */
int tk_schema_digits(tk_schema_c *c); /* [0-9]* */
int tk_schema_any(tk_schema_c *c);    /* any JSON value */
int tk_schema_any_string(tk_schema_c *c);

/* Type-specific parts (the schema object's keywords already checked). */
int tk_schema_string(tk_schema_c *c, const json_t *s);
int tk_schema_integer(tk_schema_c *c, const json_t *s);
int tk_schema_number(tk_schema_c *c, const json_t *s);
/* Appends v in its canonical serialization (keys in order, strings
 * escaped only where JSON requires, numbers in their shortest form), with
 * whitespace allowed between the tokens of arrays and objects. */
int tk_schema_literal(tk_schema_c *c, int rule, const json_t *v);
/* The canonical JSON string literal of s[0..n) (UTF-8). */
int tk_schema_quoted(tk_schema_c *c, int rule, const char *s, size_t n);
/* A string of the canonical encoding (each decoded string has one form)
 * that is none of the given names; for keys of additional properties. */
int tk_schema_key_not_in(tk_schema_c *c, const char *const *names, const size_t *lens, int n);

/* Reads an optional non-negative integer keyword (bounded by
 * TK_GRAMMAR_MAX_REPEAT); *v unchanged when absent. */
int tk_schema_count(tk_schema_c *c, const json_t *s, const char *key, int *v);

#endif
