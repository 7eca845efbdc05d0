/* Grammar IR for constrained decoding: a context-free grammar over bytes.
 *
 * Every compiler (GBNF now; regex and JSON Schema to follow) produces this
 * form.  Rules are alternatives of element sequences, stored flat: a rule's
 * alternatives follow one another, each ended by TK_GEL_END_ALT, the last
 * followed by TK_GEL_END_RULE.  Elements match one byte in a range or refer
 * to a rule.  Code-point classes are lowered to UTF-8 byte sequences at
 * compile time, so the matcher (matcher.c) only ever sees bytes. */
#ifndef TK_GRAMMAR_H
#define TK_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

/* Bounds against hostile grammars. */
#define TK_GRAMMAR_MAX_TEXT (1 << 20)      /* bytes of grammar source */
#define TK_GRAMMAR_MAX_ELEMENTS (1 << 20)  /* flat elements after lowering */
#define TK_GRAMMAR_MAX_RULES (1 << 16)
#define TK_GRAMMAR_MAX_REPEAT 1000         /* m and n of {m,n} */
#define TK_GRAMMAR_MAX_NESTING 128         /* parentheses */
#define TK_GRAMMAR_MAX_PATTERN 16384       /* bytes of a regex (also JSON Schema "pattern") */

typedef enum tk_gel_kind {
    TK_GEL_END_RULE = 0,
    TK_GEL_END_ALT,
    TK_GEL_BYTES, /* one byte in [lo, hi] */
    TK_GEL_REF    /* rule `rule` */
} tk_gel_kind;

typedef struct tk_gel {
    uint8_t kind, lo, hi;
    int32_t rule;
} tk_gel;

typedef struct tk_grammar {
    tk_gel *el;
    int n_el;
    int32_t *rule_start; /* index in el of each rule's first alternative */
    int n_rules;
    int root;
} tk_grammar;

void tk_grammar_free(tk_grammar *g);

/* Compiles a GBNF grammar (docs/grammar.md) whose start rule is "root". */
int tk_grammar_from_gbnf(tk_grammar *g, const char *text, tk_err *err);

/* Compiles a regular expression (docs/grammar.md) the whole output must match. */
int tk_grammar_from_regex(tk_grammar *g, const char *pattern, tk_err *err);
/* Any JSON object (response_format json_object); whitespace between tokens
 * bounded to 20 bytes so that a model cannot emit it forever. */
int tk_grammar_json_object(tk_grammar *g, tk_err *err);
/* Compiles a JSON Schema document (schema[0..len), JSON text) into a grammar
 * of the JSON texts that validate against it (docs/grammar.md lists the keywords). */
int tk_grammar_from_json_schema(tk_grammar *g, const char *schema, size_t len, tk_err *err);

/* --- building (used by the compilers) --------------------------------- */

/* Rules under construction, each its own element buffer (a compiler may
 * open helper rules while in the middle of another). */
typedef struct tk_gseq {
    tk_gel *el;
    int n, cap;
} tk_gseq;

typedef struct tk_gbuilder {
    tk_gseq *rules;
    int n_rules, cap_rules;
    int total; /* elements over all rules, against TK_GRAMMAR_MAX_ELEMENTS */
} tk_gbuilder;

void tk_gbuilder_free(tk_gbuilder *b);
/* A new empty rule; returns its id or -1. */
int tk_gbuilder_new_rule(tk_gbuilder *b, tk_err *err);
int tk_gbuilder_push(tk_gbuilder *b, int rule, tk_gel e, tk_err *err);
/* Appends to `rule` one alternative per UTF-8 byte sequence covering the
 * code points in the ranges lo[i]..hi[i] (surrogates excluded). */
int tk_gbuilder_push_codepoints(tk_gbuilder *b, int rule, const uint32_t *lo, const uint32_t *hi, int n, tk_err *err);
/* Appends a class of code points (ranges r[i][0]..r[i][1], any order;
 * sorted in place), complemented when negate: one BYTES element when it is
 * one ASCII range, else a REF to a helper rule of UTF-8 alternatives. */
int tk_gbuilder_push_class(tk_gbuilder *b, int rule, uint32_t (*r)[2], int n, bool negate, tk_err *err);
/* Replaces the elements of `rule` from `start` on (X) by X{m,n}; n < 0:
 * unbounded.  m, n <= TK_GRAMMAR_MAX_REPEAT (the caller checks). */
int tk_gbuilder_repeat(tk_gbuilder *b, int rule, int start, int m, int n, tk_err *err);
/* Reads a quantifier at *p (* + ? {m} {m,} {m,n}), for the GBNF and regex
 * parsers.  Returns 0 when there is none (*p unchanged); 1 with *m, *n (n < 0:
 * unbounded) and *p past it; -1 with *why for the caller's error message.
 * skip(ctx), when not NULL, skips what the syntax allows around the numbers
 * inside the braces (it advances the same *p). */
int tk_grammar_read_quantifier(const char **p, const char *end, void (*skip)(void *), void *ctx, int *m, int *n,
                               const char **why);
/* Adds a rule for a regex (pattern[0..len)); returns its id or -1. */
int tk_grammar_regex_rule(tk_gbuilder *b, const char *pattern, size_t len, tk_err *err);
/* Flattens into g (every rule must have an alternative) and frees b. */
int tk_gbuilder_finish(tk_gbuilder *b, int root, tk_grammar *g, tk_err *err);
/* Makes g the grammar of begin, then a sentence of g, then end (literal
 * byte strings; NULL or "" for none): a new root rule appended to g. */
int tk_grammar_wrap(tk_grammar *g, const char *begin, const char *end, tk_err *err);

/* --- matching ---------------------------------------------------------- */

/* The set of parse stacks reachable after the bytes fed so far: a
 * pushdown recognizer's state.  Plain data: copy with tk_gstate_copy (n > 1
 * forks, snapshots for speculative rollback). */
typedef struct tk_gstate {
    const tk_grammar *g;
    int32_t *data;   /* stacks, each [len, el-index bottom..top] back to back */
    int n_data, cap_data;
    int n_stacks;
    bool accepting;  /* an empty stack: the input so far is a full sentence */
    /* expansion buffers, kept between steps (not part of the state's value) */
    int32_t *work, *tmp;
    int *starts;
    int cap_work, cap_starts;
    int expand_steps; /* since the last reset, against the matcher's bound */
} tk_gstate;

#define TK_GSTATE_MAX_STACKS 4096
#define TK_GSTATE_MAX_DEPTH 1024

int tk_gstate_init(tk_gstate *s, const tk_grammar *g, tk_err *err);
void tk_gstate_free(tk_gstate *s);
int tk_gstate_copy(tk_gstate *dst, const tk_gstate *src, tk_err *err);
/* dst = src advanced by one byte.  Returns 1 if allowed, 0 if not (dst
 * then meaningless), -1 on a bound exceeded. */
int tk_gstate_step(const tk_gstate *src, uint8_t byte, tk_gstate *dst, tk_err *err);
/* Advances by one byte.  Returns 1 if the byte is allowed (state updated),
 * 0 if not (state unchanged), -1 on a bound exceeded (err set). */
int tk_gstate_advance(tk_gstate *s, uint8_t byte, tk_gstate *scratch, tk_err *err);
/* Advances by a byte string; on rejection the state is left unchanged. */
int tk_gstate_advance_bytes(tk_gstate *s, const uint8_t *b, int n, tk_gstate *scratch, tk_err *err);
/* True when no byte can follow (only end-of-generation is left). */
bool tk_gstate_done(const tk_gstate *s);

/* --- token masks ------------------------------------------------------- */

/* A vocabulary's token byte strings (tk_token_to_bytes, no BOS context),
 * sorted so that tokens sharing a prefix are adjacent: walking them in
 * order with one state per prefix depth is a walk of the vocabulary trie,
 * and a rejected prefix skips every token under it. */
typedef struct tk_gvocab {
    int n_vocab;
    int32_t *order;    /* token ids with bytes, sorted by bytes (control, unused, empty left out) */
    int n_order;
    uint16_t *lcp;     /* common prefix length of order[i] with order[i-1] */
    uint32_t *off;     /* bytes of token id at blob + off[id], len[id] */
    uint16_t *len;
    uint8_t *blob;
    int32_t *eog;      /* end-of-generation ids: allowed exactly when the grammar accepts */
    int n_eog;
    int max_len;
} tk_gvocab;

#define TK_GVOCAB_MAX_TOKEN_BYTES 1024

struct tk_tokenizer;
int tk_gvocab_init(tk_gvocab *v, const struct tk_tokenizer *t, tk_err *err);
void tk_gvocab_free(tk_gvocab *v);

/* States per prefix depth, reused across mask computations. */
typedef struct tk_gmasker {
    tk_gstate *depth;
    int n_depth;
} tk_gmasker;

void tk_gmasker_free(tk_gmasker *m);
/* Clears mask (n_vocab bits, 32 a word) and sets the bit of every token
 * whose bytes the state allows, and of the end-of-generation tokens when it
 * accepts.  Returns the number of allowed tokens or -1. */
int tk_gmask_compute(tk_gmasker *m, const tk_gvocab *v, const tk_gstate *s, uint32_t *mask, tk_err *err);

#endif
