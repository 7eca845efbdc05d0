/* Constrained decoding in the engine: compiled grammars shared across
 * requests (an LRU cache keyed by kind, text, begin and end), the
 * vocabulary's token bytes (built once, on the first constrained request),
 * each sample's grammar state, and the one place a sample's allowed-token
 * mask is computed.  Not part of the public API. */
#ifndef TK_ENGINE_CONSTRAINT_H
#define TK_ENGINE_CONSTRAINT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <tokamak.h>

#include "../grammar/grammar.h"
#include "../sample/sampler.h"

#define TK_CONSTRAINT_CACHE_SIZE 64          /* compiled grammars kept */
#define TK_CONSTRAINT_MAX_TEXT TK_GRAMMAR_MAX_TEXT /* schema / regex / grammar bytes */
#define TK_CONSTRAINT_MAX_LITERAL 4096       /* begin / end bytes */

/* A compiled constraint: its key, grammar and mask table.  Shared by every
 * request with the same key; freed when the cache has dropped it and no
 * request holds it. */
typedef struct tk_cgrammar {
    tk_constraint_kind kind;
    char *text, *begin, *end; /* the key ("" for none) */
    tk_grammar g;
    tk_gtable *table;         /* the grammar's masks precomputed for the vocabulary; NULL: over budget, plain walk */
    int refs;                 /* the cache's and each request's (under the cache's mutex) */
    uint64_t last_use;
    /* a matcher bound's message once one was hit (written by the stepping
     * thread under the cache's mutex): the constraint is refused from then on */
    char failed[sizeof(((tk_err *)0)->msg)];
} tk_cgrammar;

typedef struct tk_constraint_cache {
    pthread_mutex_t mu;
    tk_cgrammar *entries[TK_CONSTRAINT_CACHE_SIZE];
    int n;
    uint64_t tick;
    /* the vocabulary's token bytes: built under mu on first use, read-only after */
    tk_gvocab vocab;
    bool have_vocab;
    /* stepping thread only: the mask walk's states and one mask */
    tk_gmasker masker;
    uint32_t *mask;
    int n_vocab; /* the model's (mask bits) */
} tk_constraint_cache;

int tk_constraint_cache_init(tk_constraint_cache *c, int n_vocab, tk_err *err);
void tk_constraint_cache_free(tk_constraint_cache *c);

/* The compiled grammar for a constraint (kind not NONE), from the cache or
 * compiled now; the caller holds a reference.  Any thread.  Also builds the
 * vocabulary from tok on first use. */
tk_cgrammar *tk_constraint_acquire(tk_constraint_cache *c, const tk_tokenizer *tok, const tk_constraint *k,
                                   tk_err *err);
void tk_constraint_release(tk_constraint_cache *c, tk_cgrammar *g);

/* A sample's grammar state: the bytes of its committed tokens so far, and
 * scratch states for stepping and for looking ahead through drafts. */
typedef struct tk_csample {
    tk_cgrammar *cg;       /* NULL: unconstrained */
    tk_gstate state;
    tk_gstate look;        /* state after the drafts verified so far (speculative decoding) */
    tk_gstate s1, s2;      /* scratch */
    uint64_t mask_steps;   /* matcher steps of this sample's masks so far */
    int n_masks;
} tk_csample;

int tk_csample_init(tk_csample *s, tk_cgrammar *cg, tk_err *err);
void tk_csample_free(tk_csample *s);

/* Whether token tok may follow state st (end-of-generation: when st
 * accepts and allow_eog); when it may and into is not NULL, *into becomes
 * the state after it (into may be st).  Returns 1, 0, or -1 (matcher bound). */
int tk_csample_step(tk_constraint_cache *c, tk_csample *s, const tk_gstate *st, int32_t tok, bool allow_eog,
                    tk_gstate *into, tk_err *err);

/* The allowed-token mask of state st (c->mask, the model's n_vocab bits;
 * end-of-generation tokens only if allow_eog).  The one place masks are
 * computed.  Returns the number of allowed tokens or -1.  A matcher bound
 * hit here or in tk_csample_step marks the grammar failed: every sample
 * using it fails at its next token, and tk_constraint_acquire refuses it.
 * Besides each mask's bound (TK_GMASK_STEPS_PER_TOKEN), a sample's masks
 * together may take TK_CONSTRAINT_MEAN_STEPS_PER_TOKEN per vocabulary
 * token and mask, after a start of TK_CONSTRAINT_MASK_SLACK masks' worth:
 * a grammar whose every mask sits just under the per-mask bound would
 * otherwise cost that much of the stepping thread for every token. */
#define TK_CONSTRAINT_MEAN_STEPS_PER_TOKEN 64
#define TK_CONSTRAINT_MASK_SLACK 8
int tk_constraint_mask(tk_constraint_cache *c, tk_csample *s, const tk_gstate *st, bool allow_eog, tk_err *err);

/* Sets the logits of the tokens c->mask disallows to -inf. */
void tk_constraint_apply_mask(const tk_constraint_cache *c, float *logits);

/* Picks the next token from raw logits under the state st, as masked
 * sampling would: row is scratch (n_vocab); greedy tries the unmasked
 * argmax first and masks only if the grammar rejects it.  Returns the
 * token, -1 if the grammar allows none, -2 on an error. */
int32_t tk_constraint_sample(tk_constraint_cache *c, tk_csample *s, const tk_gstate *st, bool allow_eog,
                             tk_sampler *sampler, const float *logits, float *row, const int32_t *history,
                             int n_history, tk_err *err);

#endif
