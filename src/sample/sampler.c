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

int tk_sampler_init(tk_sampler *s, const tk_sampling *params, int n_vocab, tk_exp_row_fn exp_row, tk_err *err) {
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
    s->exp_row = exp_row;
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

/* Buckets of probabilities in [0, 1] by their top 12 bits (sign, exponent,
 * 3 mantissa bits: a bucket spans a factor of at most 1.125); 1 is in
 * bucket 1016, so every probability is below PROB_BUCKETS. */
#define PROB_BUCKETS 1024
static inline int prob_bucket(float p) {
    uint32_t bits;
    memcpy(&bits, &p, sizeof bits);
    bits >>= 20;
    return bits < PROB_BUCKETS - 1 ? (int)bits : PROB_BUCKETS - 1;
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

/* The sum of x[0..n) in float64, four running sums (one would be a chain of
 * dependent additions as long as the vocabulary). */
static double sum_row(const float *x, int n) {
    double a[4] = {0};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) a[k] += x[i + k];
    for (; i < n; i++) a[0] += x[i];
    return (a[0] + a[1]) + (a[2] + a[3]);
}

static double sum_probs(const tk_sampler *s, int keep) {
    double t = 0;
    for (int i = 0; i < keep; i++) t += s->probs[s->ids[i]];
    return t;
}

/* Orders ids[0..n) by prob_bucket, highest first, in id order within a
 * bucket: one pass of a counting sort.  A draw sums the candidates in this
 * order, so the boundaries between the many improbable tokens lie where the
 * cumulative probability is near 1, where a rounding-level change of the
 * logits (a tensor-parallel split's all-reduce) moves them least; in id
 * order they lie everywhere, and such a change altered seeded draws. */
static void order_by_bucket(tk_sampler *s, int n) {
    uint32_t at[PROB_BUCKETS] = {0};
    for (int i = 0; i < n; i++) at[prob_bucket(s->probs[s->ids[i]])]++;
    uint32_t next = 0;
    for (int b = PROB_BUCKETS - 1; b >= 0; b--) {
        const uint32_t count = at[b];
        at[b] = next;
        next += count;
    }
    for (int i = 0; i < n; i++) s->sort_tmp[at[prob_bucket(s->probs[s->ids[i]])]++] = s->ids[i];
    memcpy(s->ids, s->sort_tmp, (size_t)n * sizeof *s->ids);
}

/* Below this many candidates sorting them all is cheaper than selecting. */
#define SELECT_MIN_CANDIDATES 2048

/* Moves to the front of ids[0..n), in id order, the candidates that can be
 * among the `count` most probable (count > 0) or, with count 0, among the
 * most probable ones whose probabilities sum to `mass`, and returns how many
 * it moved (n: all).  Each candidate moved is more probable than each one
 * left behind, so sorting the moved ones gives the same order as the front
 * of a sort of all of them.  A histogram of prob_bucket finds the lowest
 * bucket to take. */
static int select_prefix(tk_sampler *s, int n, int count, double mass) {
    uint32_t hist[PROB_BUCKETS] = {0};
    double bucket_mass[PROB_BUCKETS] = {0};
    for (int i = 0; i < n; i++) {
        const int b = prob_bucket(s->probs[s->ids[i]]);
        hist[b]++;
        bucket_mass[b] += s->probs[s->ids[i]];
    }
    int lowest = PROB_BUCKETS - 1;
    int64_t taken = 0;
    double taken_mass = 0;
    for (; lowest > 0; lowest--) {
        taken += hist[lowest];
        taken_mass += bucket_mass[lowest];
        if (count > 0 ? taken >= count : taken_mass >= mass) break;
    }
    if (lowest == 0) return n;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (prob_bucket(s->probs[s->ids[i]]) >= lowest) s->ids[k++] = s->ids[i];
    return k;
}

/* The filter chain shared by tk_sample and tk_sampler_dist: penalties,
 * temperature softmax, then min-p, top-k and top-p.  Leaves the surviving
 * candidates in s->ids[0..keep), most probable first (by probability
 * bucket only when neither top-k nor top-p cuts), with their softmax
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
    if (maxl == INFINITY)
        for (int i = 0; i < n; i++) s->probs[i] = (float)(logits[i] == INFINITY);
    else
        s->exp_row(s->probs, logits, n, maxl, 1.0f / p->temperature);
    /* (A multiplication by the inverse: a division per token took a fifth
     * of a large vocabulary's time.) */
    const double inv_sum = 1.0 / sum_row(s->probs, n);
    /* Candidates: the tokens min-p keeps (all with min-p off).  The most
     * probable token's probability is (float)inv_sum exactly (its exp, or
     * its +inf indicator, is 1), so cand_floor is min-p's cut, min_p times
     * the top probability, bit for bit: nothing later cuts for min-p. */
    const float cand_floor = p->min_p > 0 ? p->min_p * (float)inv_sum : 0;
    int n_cand = 0;
    for (int i = 0; i < n; i++) {
        s->probs[i] = (float)(s->probs[i] * inv_sum);
        if (s->probs[i] >= cand_floor) s->ids[n_cand++] = i;
    }
    int keep = n_cand;
    const bool cut_k = p->top_k > 0 && p->top_k < n_cand;
    if (!cut_k && p->top_p >= 1) {
        /* nothing else to cut: no full sort (it was most of the sampler's
         * time), only an order by probability bucket for the draw */
        order_by_bucket(s, keep);
        *total = sum_probs(s, keep);
        return keep;
    }
    /* Top-k, or top-p over every candidate, keeps a prefix of the sorted
     * candidates: only a superset of it is sorted. */
    const double cand_mass = cut_k ? 0 : sum_probs(s, n_cand);
    int n_sorted = n_cand;
    if (n_cand > SELECT_MIN_CANDIDATES)
        n_sorted = select_prefix(s, n_cand, cut_k ? p->top_k : 0, p->top_p * cand_mass * (1 + 1e-6));
    tk_sort_by_prob_desc(s->probs, s->ids, s->sort_tmp, n_sorted);
    keep = cut_k ? p->top_k : n_sorted; /* top-p stops inside the sorted part */
    if (p->top_p < 1) {
        /* Renormalize over what is kept so far, then cut at top_p mass. */
        const double kept = cut_k ? sum_probs(s, keep) : cand_mass;
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
