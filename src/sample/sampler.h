/* Token sampling: penalties, then temperature, top-k, top-p, min-p, then a
 * draw from a seeded generator.  Temperature 0 is greedy (argmax).
 *
 * Non-finite logits (after penalties): NaN counts as -inf.  Tokens at -inf
 * are never drawn; if every logit is -inf or NaN the result is id 0 (as
 * greedy would pick: the lowest id among equal maxima).  If some logits are
 * +inf, those tokens share the probability equally (the softmax limit) and
 * the filters apply to that distribution. */
#ifndef TK_SAMPLER_H
#define TK_SAMPLER_H

#include <stdint.h>

#include <tokamak.h> /* tk_sampling */

#include "../kernels/exp_row.h"
#include "../util/err.h"


typedef struct tk_sampler {
    tk_sampling params;
    uint64_t rng[4];
    int n_vocab;
    /* work arrays, n_vocab each */
    int32_t *ids;
    int32_t *sort_tmp;
    float *probs;
    int32_t *counts;
    tk_exp_row_fn exp_row; /* the softmax's exp */
} tk_sampler;

/* exp_row: the softmax's exp kernel, tk_exp_row_kernel(level) resolved once
 * by the caller (the engine at open: finding it reads cpuid, which a VM
 * traps, so it is not done per request). */
int tk_sampler_init(tk_sampler *s, const tk_sampling *params, int n_vocab, tk_exp_row_fn exp_row, tk_err *err);
void tk_sampler_free(tk_sampler *s);

/* Picks the next token.  logits are modified in place (penalties,
 * temperature).  history: tokens seen so far (prompt + generated). */
int tk_sample(tk_sampler *s, float *logits, const int32_t *history, int n_history);

/* The distribution tk_sample draws from, after the same penalties and
 * filters, as a dense vector: dist[i] for every token id (0 where filtered
 * out), summing to 1.  Greedy (temperature 0) is a point mass on the argmax.
 * logits are modified in place as by tk_sample.  Returns how many ids have
 * nonzero probability. */
int tk_sampler_dist(tk_sampler *s, float *logits, const int32_t *history, int n_history, float *dist);

/* Draws an id from a dense, non-negative vector of n weights (need not be
 * normalized; NaN and negative weights count as zero).  Returns -1 if every
 * weight is zero. */
int tk_sampler_draw(tk_sampler *s, const float *dist, int n);

/* Uniform double in [0, 1) from the sampler's generator. */
double tk_sampler_uniform(tk_sampler *s);

/* Orders ids[0..n) by probs[id] descending, equal probabilities in their
 * input order; probs must be non-negative (not NaN).  tmp: n ints of
 * scratch.  A radix sort, linear in n: a comparison sort of a whole
 * vocabulary, which plain sampling at temperature 1 (the API's default)
 * needs, took milliseconds per token. */
void tk_sort_by_prob_desc(const float *probs, int32_t *ids, int32_t *tmp, int n);

/* Index of the first maximum; NaN loses to any number (0 if all are NaN). */
int tk_argmax(const float *x, int n);

#endif
