/* Speculative decoding: draft sources, verification, draft-length control.
 *
 * A sequence in speculative mode proposes K draft tokens per step, either
 * from a smaller draft model sharing the target's vocabulary or by prompt
 * lookup (the continuation of an earlier occurrence of its last n-gram).
 * The target model then scores the last committed token plus the K drafts
 * in one pass (K + 1 positions of one sequence in one batch are causal by
 * construction) and the drafts are accepted or rejected:
 *
 *   greedy:   accept while the draft equals the target's argmax, then add
 *             the target's own token at the first mismatch (or after the
 *             last draft), so the output is exactly plain greedy decoding;
 *   sampling: accept draft x with probability min(1, p(x) / q(x)); at the
 *             first rejection draw from normalize(max(0, p - q)); if all K
 *             are accepted draw a bonus token from p (Leviathan et al. 2023,
 *             Chen et al. 2023).  p and q are the distributions after the
 *             same penalties, temperature, top-k, min-p and top-p; prompt
 *             lookup's q is a point mass on its proposal.
 *
 * The output of speculative sampling has the distribution of plain
 * sampling.  Rejected positions are rolled back from both KV caches. */
#ifndef TK_SPEC_H
#define TK_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include <tokamak.h> /* TK_SPEC_MAX_DRAFT: the hard bound on the draft length */

#include "../sample/sampler.h"
#include "../tokenizer/tokenizer.h"

/* n-gram lengths prompt lookup tries, longest first */
#define TK_SPEC_NGRAM_MAX 4
#define TK_SPEC_NGRAM_MIN 1

/* A draft model must share the target's vocabulary (ids pass between the
 * two as they are): the same size, special tokens and token texts.  nt/nd:
 * the models' vocabulary sizes; a and b their tokenizers (NULL: none). */
int tk_spec_check_vocab(int nt, const tk_tokenizer *a, int nd, const tk_tokenizer *b, tk_err *err);

/* Prompt lookup: the latest earlier occurrence in tokens[0..n) of the last
 * g tokens, for g = ngram_max down to ngram_min; writes up to k tokens that
 * followed it to out.  Returns how many (0: no match). */
int tk_spec_ngram_propose(const int32_t *tokens, int n, int ngram_max, int ngram_min, int k, int32_t *out);

/* One verification decision with distributions.  p: the target's filtered
 * distribution at this position (dense, sums to 1); q: the draft's (dense),
 * or NULL when the draft is a point mass on x (prompt lookup).  Returns true
 * if x is accepted; otherwise *out gets a token drawn from
 * normalize(max(0, p - q)), using resid (n floats) as scratch. */
bool tk_spec_accept(tk_sampler *s, const float *p, const float *q, int32_t x, float *resid, int n, int32_t *out);

/* Expected tokens per target pass with per-token acceptance rate alpha and k
 * drafts (Leviathan et al.): (1 - alpha^(k+1)) / (1 - alpha). */
double tk_spec_expected_tokens(double alpha, int k);

/* Expected speed-up over plain decoding: expected tokens / cost of one step,
 * the step costing k draft passes of relative cost c plus one target pass
 * over k + 1 tokens of relative cost v(k) = 1 + v_slope * k. */
double tk_spec_expected_speedup(double alpha, int k, double c, double v_slope);

/* The draft length in [k_min, k_max] that maximizes the expected speed-up
 * for the running acceptance rate alpha: with v(k) = 1 + v_slope k, or with
 * a table v[0..k_max] (v[0] = 1). */
int tk_spec_choose_k(double alpha, double c, double v_slope, int k_min, int k_max);
int tk_spec_choose_k_table(double alpha, double c, const double *v, int k_min, int k_max);

/* ---- cost model, measured online ----
 * Pass times by token count (1..TK_SPEC_COST_N) for the target, and for the
 * draft model by the number of sequences drafting in the pass (its drafting
 * passes feed one or two tokens per sequence; catch-up passes over many
 * tokens are prefill and not observed), as exponential moving averages; a
 * line t(n) = a + b (n - 1) fitted to each gives c = draft a / target a and
 * v_slope = target b / target a. */
#define TK_SPEC_COST_N 40

typedef struct tk_spec_cost {
    double t[2][TK_SPEC_COST_N + 1]; /* [0]: target, [1]: draft; seconds */
    int n[2][TK_SPEC_COST_N + 1];    /* observations */
    double c_prior, v_prior;
} tk_spec_cost;

void tk_spec_cost_init(tk_spec_cost *m, double c_prior, double v_prior);
/* which: 0 target, 1 draft. */
void tk_spec_cost_observe(tk_spec_cost *m, int which, int n_tokens, double seconds);
/* Current c and v_slope; returns a bit mask of what comes from
 * measurements: 1 c, 2 v_slope. */
int tk_spec_cost_estimate(const tk_spec_cost *m, double *c, double *v_slope);
/* c and v[0..k_max] for choosing draft lengths: the measured times of
 * passes over k + 1 tokens where observed often enough (pass cost is not
 * linear in the tokens: kernels switch tile shapes), the fitted line
 * elsewhere.  k_max <= TK_SPEC_COST_N - 1. */
void tk_spec_cost_table(const tk_spec_cost *m, double *c, double *v, int k_max);

/* ---- per-sequence draft-length control ----
 * Acceptance is tracked per draft position: alpha_j = P(draft j accepted |
 * drafts before it accepted).  Acceptances come in runs (a draft that agreed
 * so far tends to go on agreeing), so alpha_j grows with j and the
 * independent-draft formula underestimates what longer drafts bring.
 * Counts decay geometrically (per observation) so the rates follow the
 * text; a position with few observations leans on the one before it. */
#define TK_SPEC_RATE_POS 8 /* positions tracked; deeper drafts share the last */

typedef struct tk_spec_rate {
    double acc[TK_SPEC_RATE_POS], rej[TK_SPEC_RATE_POS]; /* decayed counts */
    int idle;        /* steps since the last draft (k = 0 chosen) */
    int probe_every; /* while drafting does not pay: steps between single-draft probes */
} tk_spec_rate;

void tk_spec_rate_init(tk_spec_rate *r);
/* alpha_0: the rate at which a first draft is accepted. */
double tk_spec_rate_alpha(const tk_spec_rate *r);
/* Expected tokens per target pass with k drafts: 1 + sum over j < k of
 * alpha_0 ... alpha_j. */
double tk_spec_rate_expected(const tk_spec_rate *r, int k);
/* The k in [k_min, k_max] maximizing expected tokens / (k c + v[k]). */
int tk_spec_rate_choose_k(const tk_spec_rate *r, double c, const double *v, int k_min, int k_max);
/* After a verification of k drafts of which m were accepted. */
void tk_spec_rate_update(tk_spec_rate *r, int k, int m);
/* The draft length for this step given the one the cost model chose:
 * while that is 0, one draft now and then keeps the rate current, less
 * often (16 steps, doubling to 64) the longer drafting keeps not paying. */
int tk_spec_rate_probe(tk_spec_rate *r, int k);

#endif
