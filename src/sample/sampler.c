#include "sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../util/rng.h"

void tk_sampling_defaults(tk_sampling *s) {
    memset(s, 0, sizeof *s);
    s->temperature = 0.8f;
    s->top_k = 40;
    s->top_p = 0.95f;
    s->min_p = 0.05f;
    s->repeat_penalty = 1.0f;
    s->penalty_last_n = 64;
    s->seed = 0x746f6b616d616bULL;
}

double tk_sampler_uniform(tk_sampler *s) { return tk_rng_uniform(s->rng); }

int tk_sampler_init(tk_sampler *s, const tk_sampling *params, int n_vocab, tk_err *err) {
    memset(s, 0, sizeof *s);
    if (n_vocab <= 0) return tk_err_set(err, "invalid vocabulary size %d", n_vocab);
    const tk_sampling *p = params;
    if (!(p->temperature >= 0) || !isfinite(p->temperature) || !(p->top_p > 0) || !(p->min_p >= 0 && p->min_p <= 1) ||
        !(p->repeat_penalty > 0) || !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return tk_err_set(err,
                          "invalid sampling parameters (temperature %g must be finite and >= 0, top_p %g in (0, 1], "
                          "min_p %g in [0, 1], repeat penalty %g > 0)",
                          p->temperature, p->top_p, p->min_p, p->repeat_penalty);
    s->params = *params;
    s->n_vocab = n_vocab;
    tk_rng_seed(s->rng, params->seed);
    s->ids = malloc((size_t)n_vocab * sizeof(int32_t));
    s->sort_tmp = malloc((size_t)n_vocab * sizeof(int32_t));
    s->probs = malloc((size_t)n_vocab * sizeof(float));
    s->counts = calloc((size_t)n_vocab, sizeof(int32_t));
    if (!s->ids || !s->sort_tmp || !s->probs || !s->counts) {
        tk_sampler_free(s);
        return tk_err_set(err, "out of memory");
    }
    return 0;
}

void tk_sampler_free(tk_sampler *s) {
    free(s->ids);
    free(s->sort_tmp);
    free(s->probs);
    free(s->counts);
    memset(s, 0, sizeof *s);
}

int tk_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) best = i;
    return best;
}

static void apply_penalties(tk_sampler *s, float *logits, const int32_t *history, int n_history) {
    const tk_sampling *p = &s->params;
    if (p->repeat_penalty == 1.0f && p->presence_penalty == 0 && p->frequency_penalty == 0) return;
    int start = 0;
    if (p->penalty_last_n >= 0 && n_history > p->penalty_last_n) start = n_history - p->penalty_last_n;
    for (int i = start; i < n_history; i++)
        if (history[i] >= 0 && history[i] < s->n_vocab) s->counts[history[i]]++;
    for (int i = start; i < n_history; i++) {
        int id = history[i];
        if (id < 0 || id >= s->n_vocab || s->counts[id] == 0) continue;
        float *l = &logits[id];
        if (p->repeat_penalty != 1.0f) *l = *l > 0 ? *l / p->repeat_penalty : *l * p->repeat_penalty;
        *l -= (float)s->counts[id] * p->frequency_penalty + p->presence_penalty;
        s->counts[id] = 0; /* each distinct token once; also resets for next call */
    }
}

/* Non-negative floats order as their bit patterns do, so the complement of
 * the bits orders by probability, descending. */
static inline uint32_t desc_key(float p) {
    uint32_t bits;
    memcpy(&bits, &p, sizeof bits);
    return ~bits;
}

void tk_sort_by_prob_desc(const float *probs, int32_t *ids, int32_t *tmp, int n) {
    /* Least significant byte of desc_key first; each pass is stable, so
     * equal probabilities keep their input order.  A pass whose byte is the
     * same for every candidate is skipped (the exponent bytes of a peaked
     * distribution, often). */
    uint32_t count[4][256] = {{0}};
    for (int i = 0; i < n; i++) {
        const uint32_t key = desc_key(probs[ids[i]]);
        for (int d = 0; d < 4; d++) count[d][(key >> (8 * d)) & 0xff]++;
    }
    int32_t *from = ids, *to = tmp;
    for (int d = 0; d < 4; d++) {
        uint32_t *c = count[d], at = 0;
        bool one_bucket = false;
        for (int b = 0; b < 256; b++) {
            const uint32_t k = c[b];
            one_bucket = one_bucket || k == (uint32_t)n;
            c[b] = at;
            at += k;
        }
        if (one_bucket) continue;
        for (int i = 0; i < n; i++) to[c[(desc_key(probs[from[i]]) >> (8 * d)) & 0xff]++] = from[i];
        int32_t *t = from;
        from = to;
        to = t;
    }
    if (from != ids) memcpy(ids, from, (size_t)n * sizeof *ids);
}

static double sum_probs(const tk_sampler *s, int keep) {
    double t = 0;
    for (int i = 0; i < keep; i++) t += s->probs[s->ids[i]];
    return t;
}

/* The filter chain shared by tk_sample and tk_sampler_dist: penalties,
 * temperature softmax, then top-k, min-p and top-p.  Leaves the surviving
 * candidates in s->ids[0..keep), most probable first (in id order when no
 * filter cuts: then all of them), with their softmax
 * probabilities (not renormalized) in s->probs; *total gets their sum.
 * Greedy (temperature 0): one candidate, the argmax, with probability 1. */
static int filter(tk_sampler *s, float *logits, const int32_t *history, int n_history, double *total) {
    const tk_sampling *p = &s->params;
    int n = s->n_vocab;
    apply_penalties(s, logits, history, n_history);
    for (int i = 0; i < n; i++)
        if (isnan(logits[i])) logits[i] = -INFINITY;
    int best = tk_argmax(logits, n);
    float maxl = logits[best];
    if (p->temperature == 0 || maxl == -INFINITY) {
        /* greedy; also when no logit is above -inf: the lowest id then */
        s->ids[0] = best;
        s->probs[best] = 1;
        *total = 1;
        return 1;
    }

    /* Softmax at temperature T over all candidates; with +inf logits, its
     * limit: the +inf ones share the mass equally. */
    double sum = 0;
    for (int i = 0; i < n; i++) {
        s->probs[i] = maxl == INFINITY ? (float)(logits[i] == INFINITY) : expf((logits[i] - maxl) / p->temperature);
        sum += s->probs[i];
    }
    /* Only candidates that can survive min-p need sorting; with min-p off
     * that is the whole vocabulary. */
    float cand_floor = p->min_p > 0 ? p->min_p * (float)(1.0 / sum) : 0;
    int n_cand = 0;
    for (int i = 0; i < n; i++) {
        s->probs[i] = (float)(s->probs[i] / sum);
        if (s->probs[i] >= cand_floor) s->ids[n_cand++] = i;
    }
    int keep = n_cand;
    if ((p->top_k <= 0 || p->top_k >= keep) && p->min_p <= 0 && p->top_p >= 1) {
        /* nothing to cut: every token is a candidate, in id order (a draw
         * sums them in any order; a full-vocabulary sort per token was most
         * of the sampler's time) */
        *total = sum_probs(s, keep);
        return keep;
    }
    tk_sort_by_prob_desc(s->probs, s->ids, s->sort_tmp, n_cand);

    if (p->top_k > 0 && p->top_k < keep) keep = p->top_k;
    if (p->min_p > 0) {
        float min_prob = s->probs[s->ids[0]] * p->min_p;
        int k = 1;
        while (k < keep && s->probs[s->ids[k]] >= min_prob) k++;
        keep = k;
    }
    if (p->top_p < 1) {
        /* Renormalize over what is kept so far, then cut at top_p mass. */
        double kept = 0;
        for (int i = 0; i < keep; i++) kept += s->probs[s->ids[i]];
        double cum = 0;
        int k = 0;
        while (k < keep) {
            cum += s->probs[s->ids[k]] / kept;
            k++;
            if (cum >= p->top_p) break;
        }
        keep = k;
    }
    *total = sum_probs(s, keep);
    return keep;
}

int tk_sample(tk_sampler *s, float *logits, const int32_t *history, int n_history) {
    double total;
    int keep = filter(s, logits, history, n_history, &total);
    if (s->params.temperature == 0) return s->ids[0];
    double r = tk_sampler_uniform(s) * total, cum = 0;
    int last_drawable = s->ids[0];
    for (int i = 0; i < keep; i++) {
        cum += s->probs[s->ids[i]];
        if (r < cum) return s->ids[i];
        if (s->probs[s->ids[i]] > 0) last_drawable = s->ids[i];
    }
    return last_drawable; /* r rounded up to the total */
}

int tk_sampler_dist(tk_sampler *s, float *logits, const int32_t *history, int n_history, float *dist) {
    double total;
    int keep = filter(s, logits, history, n_history, &total);
    memset(dist, 0, sizeof(float) * (size_t)s->n_vocab);
    for (int i = 0; i < keep; i++) dist[s->ids[i]] = (float)(s->probs[s->ids[i]] / total);
    return keep;
}

int tk_sampler_draw(tk_sampler *s, const float *dist, int n) {
    double total = 0;
    int last = -1;
    for (int i = 0; i < n; i++)
        if (dist[i] > 0) {
            total += dist[i];
            last = i;
        }
    if (last < 0) return -1;
    double r = tk_sampler_uniform(s) * total, cum = 0;
    for (int i = 0; i < last; i++) {
        if (!(dist[i] > 0)) continue; /* zero, negative and NaN weights are never drawn */
        cum += dist[i];
        if (r < cum) return i;
    }
    return last;
}
