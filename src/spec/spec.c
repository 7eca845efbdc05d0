#include "spec.h"

#include <math.h>
#include <string.h>

int tk_spec_ngram_propose(const int32_t *tokens, int n, int ngram_max, int ngram_min, int k, int32_t *out) {
    if (k <= 0) return 0;
    if (ngram_min < 1) ngram_min = 1;
    for (int g = ngram_max; g >= ngram_min; g--) {
        if (g >= n) continue;
        const int32_t *tail = tokens + n - g;
        /* Latest start i < n - g whose g tokens equal the tail; then
         * tokens[i + g] exists because i + g < n. */
        for (int i = n - g - 1; i >= 0; i--) {
            if (tokens[i] != tail[0] || memcmp(tokens + i, tail, sizeof(int32_t) * (size_t)g)) continue;
            int m = n - (i + g);
            if (m > k) m = k;
            memcpy(out, tokens + i + g, sizeof(int32_t) * (size_t)m);
            return m;
        }
    }
    return 0;
}

bool tk_spec_accept(tk_sampler *s, const float *p, const float *q, int32_t x, float *resid, int n, int32_t *out) {
    float qx = q ? q[x] : 1.0f;
    /* accept with probability min(1, p(x) / q(x)): u * q(x) < p(x), u in [0, 1) */
    double u = tk_sampler_uniform(s);
    if (u * qx < p[x]) return true;
    if (q) {
        for (int i = 0; i < n; i++) resid[i] = p[i] > q[i] ? p[i] - q[i] : 0;
    } else {
        memcpy(resid, p, sizeof(float) * (size_t)n);
        resid[x] = 0;
    }
    int t = tk_sampler_draw(s, resid, n);
    /* p <= q everywhere only when p == q up to rounding, where rejection
     * has probability ~0: fall back to p itself. */
    if (t < 0) t = tk_sampler_draw(s, p, n);
    *out = t < 0 ? x : t;
    return false;
}

double tk_spec_expected_tokens(double alpha, int k) {
    if (alpha >= 1) return k + 1;
    if (alpha <= 0) return 1;
    return (1 - pow(alpha, k + 1)) / (1 - alpha);
}

double tk_spec_expected_speedup(double alpha, int k, double c, double v_slope) {
    return tk_spec_expected_tokens(alpha, k) / (k * c + 1 + v_slope * k);
}

int tk_spec_choose_k_table(double alpha, double c, const double *v, int k_min, int k_max) {
    if (k_max > TK_SPEC_MAX_DRAFT) k_max = TK_SPEC_MAX_DRAFT;
    if (k_min > k_max) k_min = k_max;
    if (k_min < 0) k_min = 0;
    int best = k_min;
    double best_s = tk_spec_expected_tokens(alpha, k_min) / (k_min * c + v[k_min]);
    for (int k = k_min + 1; k <= k_max; k++) {
        double sp = tk_spec_expected_tokens(alpha, k) / (k * c + v[k]);
        if (sp > best_s * 1.0001) {
            best = k;
            best_s = sp;
        }
    }
    return best;
}

int tk_spec_choose_k(double alpha, double c, double v_slope, int k_min, int k_max) {
    double v[TK_SPEC_MAX_DRAFT + 1];
    if (k_max > TK_SPEC_MAX_DRAFT) k_max = TK_SPEC_MAX_DRAFT;
    for (int k = 0; k <= k_max; k++) v[k] = 1 + v_slope * k;
    return tk_spec_choose_k_table(alpha, c, v, k_min, k_max);
}

/* ---- cost model ---- */

void tk_spec_cost_init(tk_spec_cost *m, double c_prior, double v_prior) {
    memset(m, 0, sizeof *m);
    m->c_prior = c_prior;
    m->v_prior = v_prior;
}

void tk_spec_cost_observe(tk_spec_cost *m, int which, int n_tokens, double seconds) {
    if (which < 0 || which > 1 || n_tokens < 1 || n_tokens > TK_SPEC_COST_N || !(seconds > 0)) return;
    int *cnt = &m->n[which][n_tokens];
    double *t = &m->t[which][n_tokens];
    /* plain mean for the first observations, then a moving average.  On a
     * shared machine a pass is sometimes descheduled part-way, which only
     * ever adds time: once the average has settled, an observation counts
     * at most 1.25x the average (a real change still gets through, at up
     * to ~3 % per pass), so stray preemptions do not inflate the costs. */
    double w = *cnt < 8 ? 1.0 / (*cnt + 1) : 0.125;
    if (*cnt >= 8 && seconds > 1.25 * *t) seconds = 1.25 * *t;
    *t += w * (seconds - *t);
    (*cnt)++;
}

/* Least-squares line t = a + b (n - 1) over the token counts observed at
 * least twice.  Returns false without two distinct counts. */
static bool fit(const tk_spec_cost *m, int which, double *a, double *b) {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    int distinct = 0;
    for (int n = 1; n <= TK_SPEC_COST_N; n++) {
        int k = m->n[which][n];
        if (k < 2) continue;
        double w = k < 16 ? k : 16, x = n - 1, y = m->t[which][n];
        sw += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
        distinct++;
    }
    if (distinct == 0) return false;
    if (distinct == 1) {
        /* one count: a level but no slope */
        *a = sy / sw;
        *b = -1;
        return true;
    }
    double den = sw * sxx - sx * sx;
    if (den <= 0) return false;
    *b = (sw * sxy - sx * sy) / den;
    *a = (sy - *b * sx) / sw;
    if (*b < 0) *b = 0;
    if (*a <= 0) *a = sy / sw;
    return true;
}

int tk_spec_cost_estimate(const tk_spec_cost *m, double *c, double *v_slope) {
    *c = m->c_prior;
    *v_slope = m->v_prior;
    double at, bt, ad, bd;
    bool have_t = fit(m, 0, &at, &bt), have_d = fit(m, 1, &ad, &bd);
    int measured = 0;
    if (have_t && bt >= 0) {
        *v_slope = bt / at;
        measured |= 2;
    }
    if (have_t && have_d) {
        /* the draft's one-token time: its fitted level */
        *c = ad / at;
        measured |= 1;
    }
    if (*v_slope > 4) *v_slope = 4;
    if (*c > 4) *c = 4;
    return measured;
}

/* ---- acceptance rate ---- */

#define RATE_DECAY 0.9
#define RATE_PRIOR 2.0 /* weight of the previous position's rate (0.5 before position 0) */

void tk_spec_rate_init(tk_spec_rate *r) {
    memset(r, 0, sizeof *r);
    r->probe_every = 16;
}

/* alpha_0 .. alpha_{n-1} */
static void rates(const tk_spec_rate *r, double *a, int n) {
    double prev = 0.5;
    for (int j = 0; j < n; j++) {
        int b = j < TK_SPEC_RATE_POS ? j : TK_SPEC_RATE_POS - 1;
        a[j] = (r->acc[b] + RATE_PRIOR * prev) / (r->acc[b] + r->rej[b] + RATE_PRIOR);
        prev = a[j];
    }
}

double tk_spec_rate_alpha(const tk_spec_rate *r) {
    double a;
    rates(r, &a, 1);
    return a;
}

double tk_spec_rate_expected(const tk_spec_rate *r, int k) {
    double a[TK_SPEC_MAX_DRAFT];
    if (k > TK_SPEC_MAX_DRAFT) k = TK_SPEC_MAX_DRAFT;
    rates(r, a, k);
    double e = 1, p = 1;
    for (int j = 0; j < k; j++) e += p *= a[j];
    return e;
}

int tk_spec_rate_choose_k(const tk_spec_rate *r, double c, const double *v, int k_min, int k_max) {
    if (k_max > TK_SPEC_MAX_DRAFT) k_max = TK_SPEC_MAX_DRAFT;
    if (k_min > k_max) k_min = k_max;
    if (k_min < 0) k_min = 0;
    double a[TK_SPEC_MAX_DRAFT];
    rates(r, a, k_max);
    double e = 1, p = 1;
    for (int j = 0; j < k_min; j++) e += p *= a[j];
    int best = k_min;
    double best_s = e / (k_min * c + v[k_min]);
    for (int k = k_min + 1; k <= k_max; k++) {
        e += p *= a[k - 1];
        double sp = e / (k * c + v[k]);
        if (sp > best_s * 1.0001) {
            best = k;
            best_s = sp;
        }
    }
    return best;
}

void tk_spec_rate_update(tk_spec_rate *r, int k, int m) {
    if (k <= 0) return;
    for (int j = 0; j <= m && j < k; j++) {
        int b = j < TK_SPEC_RATE_POS ? j : TK_SPEC_RATE_POS - 1;
        r->acc[b] = r->acc[b] * RATE_DECAY + (j < m);
        r->rej[b] = r->rej[b] * RATE_DECAY + (j == m);
    }
    r->idle = 0;
}

int tk_spec_rate_probe(tk_spec_rate *r, int k) {
    if (k > 0) {
        r->probe_every = 16;
        return k;
    }
    if (++r->idle < r->probe_every) return 0;
    if (r->probe_every < 64) r->probe_every *= 2;
    return 1;
}

void tk_spec_cost_table(const tk_spec_cost *m, double *c, double *v, int k_max) {
    double slope;
    tk_spec_cost_estimate(m, c, &slope);
    if (k_max > TK_SPEC_COST_N - 1) k_max = TK_SPEC_COST_N - 1;
    for (int k = 0; k <= k_max; k++) v[k] = 1 + slope * k;
    /* the fitted one-token time, or the observed one */
    double a, b;
    if (!fit(m, 0, &a, &b)) return;
    const int enough = 3;
    double t1 = m->n[0][1] >= enough ? m->t[0][1] : a;
    if (!(t1 > 0)) return;
    for (int k = 1; k <= k_max; k++)
        if (m->n[0][k + 1] >= enough) v[k] = m->t[0][k + 1] / t1;
    if (m->n[1][1] >= enough) *c = m->t[1][1] / t1;
    if (*c > 4) *c = 4;
}
