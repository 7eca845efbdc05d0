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
#include <string.h>

#include "../util/err.h"

/* Bounds against hostile grammars. */
#define TK_GRAMMAR_MAX_TEXT (1 << 20)      /* bytes of grammar source */
#define TK_GRAMMAR_MAX_ELEMENTS (1 << 20)  /* flat elements after lowering */
#define TK_GRAMMAR_MAX_RULES (1 << 16)
#define TK_GRAMMAR_MAX_REPEAT 1000         /* m and n of {m,n} */
#define TK_GRAMMAR_MAX_NESTING 128         /* parentheses */
#define TK_GRAMMAR_MAX_PATTERN 16384       /* bytes of a regex (also JSON Schema "pattern") */
/* The fuzz build divides the matcher's step budgets: an input that reaches
 * one then costs milliseconds instead of a tenth of a second under the
 * sanitizers, and the fuzzer spends its executions on new paths.  A mask's
 * budget by less than a table build's, so that the table-vs-plain check of
 * the grammar_mask target still reaches costly masks (docs/fuzzing.md).  The
 * code that enforces them is the same; tests/test_grammar.c runs with the
 * production values. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define TK_GTABLE_STEPS_SCALE 256
#define TK_GMASK_STEPS_SCALE 16
#else
#define TK_GTABLE_STEPS_SCALE 1
#define TK_GMASK_STEPS_SCALE 1
#endif

/* Every error the grammar's input causes (a bound, a syntax error, no token
 * allowed) starts with this prefix; out of memory does not.  Callers use it
 * to tell the request's fault from the engine's. */
#define TK_GRAMMAR_ERR_PREFIX "grammar:"
static inline bool tk_grammar_err_is_input(const char *msg) {
    return strncmp(msg, TK_GRAMMAR_ERR_PREFIX, sizeof TK_GRAMMAR_ERR_PREFIX - 1) == 0;
}

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

/* Stacks [len, el-index bottom..top] stored back to back in some buffer,
 * indexed by hash: slot i of cap (a power of two, at most half full) holds
 * the offset of one in that buffer when stamp[i] is the owner's current
 * stamp (a new stamp empties the index without clearing it). */
typedef struct tk_stack_index {
    uint32_t *stamp;
    int32_t *off;
    int cap, n;
} tk_stack_index;

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
    uint32_t stamp;   /* of the two indexes below; bumped by every reset */
    tk_stack_index seen; /* the stacks in data, added since the last reset */
    /* the pending stacks met since the last reset, kept in visited_data */
    tk_stack_index visited;
    int32_t *visited_data;
    int n_visited_data, cap_visited_data;
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
/* s (initialized or zeroed) = the stacks one raw stack st[0..len) (bottom
 * first, top not yet matched) expands to; len 0 is the complete sentence. */
int tk_gstate_from_stack(tk_gstate *s, const tk_grammar *g, const int32_t *st, int len, tk_err *err);

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
    int32_t *next;     /* the first j > i with lcp[j] < lcp[i], or n_order (skipping subtrees) */
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

typedef struct tk_gtable tk_gtable;

/* States per prefix depth, reused across mask computations; not shared
 * between threads (one per sequence or per worker). */
typedef struct tk_gmasker {
    tk_gstate *depth;
    int n_depth;
    const tk_gtable *table; /* the grammar's precomputed masks; NULL: the plain trie walk */
    tk_gstate rest;         /* the stack beneath a table context, for its dependent tokens */
    uint8_t *want;          /* per table entry: its stack is in the group being checked */
    int32_t *pend;          /* stacks with dependent tokens, then the entries of a group */
    int cap_want, cap_pend;
    /* matcher steps so far, a byte's expansion steps included (the table
     * build's budget); past max_steps (0: no bound) a walk is an error;
     * tk_gmask_compute sets it for each mask */
    uint64_t steps, max_steps;
} tk_gmasker;

void tk_gmasker_free(tk_gmasker *m);
/* Clears mask (n_vocab bits, 32 a word) and sets the bit of every token
 * whose bytes the state allows, and of the end-of-generation tokens when it
 * accepts.  Returns the number of allowed tokens or -1.  With m->table (built
 * for this grammar and vocabulary) the result is the same, computed from the
 * table (gtable.c). */
int tk_gmask_compute(tk_gmasker *m, const tk_gvocab *v, const tk_gstate *s, uint32_t *mask, tk_err *err);
/* Matcher steps of one mask, per vocabulary token with bytes: past it the
 * mask is an error.  The costliest realistic masks measured take about 45
 * per token (json_object, a free string of maxLength 1000; llama2 and llama3
 * vocabularies); a hostile regex of 110 bytes took 70,000 per token, 114 s
 * for one mask.  At 50-80 ns a step the bound is 0.4-0.7 s of a 32k
 * vocabulary, 2-2.5 s of a 128k one. */
#define TK_GMASK_STEPS_PER_TOKEN (256 / TK_GMASK_STEPS_SCALE)
/* The token count the mask bounds scale with: at least 4096, so a small
 * vocabulary does not cut grammars that are cheap per byte. */
static inline uint64_t tk_gvocab_bound_tokens(const tk_gvocab *v) {
    return (uint64_t)(v->n_order > 4096 ? v->n_order : 4096);
}
/* The plain trie walk (no table). */
int tk_gmask_compute_plain(tk_gmasker *m, const tk_gvocab *v, const tk_gstate *s, uint32_t *mask, tk_err *err);

/* --- trie walks (mask.c; used by gtable.c) ------------------------------ */

/* Byte strings sorted so that a walk in order is a walk of their trie: item
 * i is the bytes of token ids[i] from offset skip[i] on (0 when skip is
 * NULL); lcp[i] is its common prefix length with item i - 1; next[i] the
 * first item after i with a smaller lcp (n if none), so that a refused
 * subtree is skipped in a few jumps.  With want, only items whose tag[i]
 * has want[tag[i]] set are walked. */
typedef struct tk_gwalk_list {
    const int32_t *ids;
    const uint16_t *skip;
    const uint16_t *lcp;
    const int32_t *next;
    const int32_t *tag;
    const uint8_t *want;
    int n;
} tk_gwalk_list;

/* Called for items [first, end), which all matched `matched` bytes from the
 * walk's state before the next byte was refused (end - first > 1) or which
 * is one item (end == first + 1) matched that far, completely when matched
 * is its length.  depth[k], 1 <= k <= matched, is the state after k bytes.
 * Returns 0, or -1 to stop the walk. */
typedef int (*tk_gwalk_fn)(void *ctx, int first, int end, int matched, const tk_gstate *depth);

/* Walks the items of l from state s with m's per-depth states. */
int tk_gwalk(tk_gmasker *m, const tk_gvocab *v, const tk_gwalk_list *l, const tk_gstate *s, tk_gwalk_fn fn, void *ctx,
             tk_err *err);
/* A tk_gwalk_fn setting the mask bit of every item matched completely. */
typedef struct tk_gwalk_marker {
    const tk_gvocab *v;
    const tk_gwalk_list *l;
    uint32_t *mask;
} tk_gwalk_marker;
int tk_gwalk_mark(void *marker, int first, int end, int matched, const tk_gstate *depth);
/* Sorts n items (token ids[i] from offset skip[i], with tag[i]; skip and
 * tag may be NULL) into out_ids, out_skip, out_tag (NULL when the input is),
 * their lcp and next. */
typedef struct tk_gwalk_out {
    int32_t *ids;
    uint16_t *skip;
    int32_t *tag;
    uint16_t *lcp;
    int32_t *next;
} tk_gwalk_out;
int tk_gwalk_sort(const tk_gvocab *v, const int32_t *ids, const uint16_t *skip, const int32_t *tag, int n,
                  const tk_gwalk_out *out, tk_err *err);

/* --- precomputed masks (gtable.c) -------------------------------------- */

/* Per grammar position (a BYTES element a stack top can be), the tokens
 * accepted whatever the stack beneath its context is, and the few that run
 * past the context, to check at run time.  Read-only once built: share it
 * across requests and threads (each with its own tk_gmasker).  It refers to
 * the grammar, which must outlive it, and fits one vocabulary. */
#define TK_GTABLE_MAX_BYTES ((size_t)256 << 20) /* memory of one table */
#define TK_GTABLE_MAX_STEPS (((uint64_t)1 << 25) / TK_GTABLE_STEPS_SCALE) /* matcher steps of one build (under a second) */

/* Returns 0 with *out built; 1 with *out NULL when the grammar is too big
 * for the budgets above (use the plain path); -1 on error (out of memory,
 * or a matcher bound hit while walking a context, as left recursion does:
 * the plain path would report it at the first mask reaching it). */
int tk_gtable_build(tk_gtable **out, const tk_grammar *g, const tk_gvocab *v, tk_err *err);
/* The same with other budgets (tests). */
int tk_gtable_build_limits(tk_gtable **out, const tk_grammar *g, const tk_gvocab *v, uint64_t max_steps, size_t max_bytes,
                           tk_err *err);
void tk_gtable_free(tk_gtable *t);
/* Bytes the table holds (for reports). */
size_t tk_gtable_bytes(const tk_gtable *t);
/* Sets the bits of the tokens the table allows from s (mask cleared first;
 * end-of-generation tokens not included): 0; 1 when s has a stack the table
 * was not built for (mask meaningless: use the plain path); -1 on error. */
int tk_gtable_mask(tk_gmasker *m, const tk_gtable *t, const tk_gvocab *v, const tk_gstate *s, uint32_t *mask,
                   tk_err *err);

#endif
