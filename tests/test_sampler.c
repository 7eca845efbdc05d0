/* The sampler with non-finite logits: NaN counts as -inf, -inf is never
 * drawn, all -inf / NaN gives id 0, +inf tokens share the mass.  Checked for
 * every combination of temperature, top-k, top-p, min-p and penalties, by
 * tk_sample (in range, never a -inf/NaN token; the sanitizer build catches
 * out-of-bounds reads) and by tk_sampler_dist (sums to 1 over allowed ids).
 * The candidates' radix sort against a comparison sort; draw frequencies
 * against the softmax; what a large vocabulary keeps against sorting it
 * all. */
#include <math.h>
#include <stdlib.h>

#include "sample/sampler.h"
#include "tk_test.h"

#define NV 16

typedef struct {
    const char *name;
    float logits[NV];
    int allowed[NV]; /* 1 where the token may be drawn (-1 ends a short list) */
    int greedy;      /* the temperature-0 answer */
} logit_case;

static void fill(logit_case *c, const char *name, int greedy) {
    c->name = name;
    c->greedy = greedy;
    for (int i = 0; i < NV; i++) {
        c->logits[i] = (float)(i % 5) - 2.0f;
        c->allowed[i] = 1;
    }
}

static void run_case(const logit_case *lc, const tk_sampling *sp) {
    tk_sampler s;
    tk_err err;
    if (tk_sampler_init(&s, sp, NV, tk_exp_row_kernel(tk_cpu_isa()), &err)) {
        CHECK(0, "%s: init: %s", lc->name, err.msg);
        return;
    }
    const int32_t history[] = {0, 3, 5, 5, 9, 15};
    float logits[NV], dist[NV];
    for (int draw = 0; draw < 50; draw++) {
        memcpy(logits, lc->logits, sizeof logits);
        int id = tk_sample(&s, logits, history, 6);
        CHECK(id >= 0 && id < NV && lc->allowed[id], "%s (T %g k %d p %g min_p %g rp %g): drew %d", lc->name,
              sp->temperature, sp->top_k, sp->top_p, sp->min_p, sp->repeat_penalty, id);
        if (sp->temperature == 0 && lc->greedy >= 0) CHECK(id == lc->greedy, "%s: greedy gave %d, want %d", lc->name, id, lc->greedy);
    }
    memcpy(logits, lc->logits, sizeof logits);
    int kept = tk_sampler_dist(&s, logits, history, 6, dist);
    double sum = 0;
    bool ok = kept >= 1;
    for (int i = 0; i < NV; i++) {
        ok = ok && dist[i] >= 0 && (dist[i] == 0 || lc->allowed[i]);
        sum += dist[i];
    }
    CHECK(ok && fabs(sum - 1) < 1e-5, "%s (T %g k %d p %g min_p %g): dist kept %d, sums to %g", lc->name,
          sp->temperature, sp->top_k, sp->top_p, sp->min_p, kept, sum);
    tk_sampler_free(&s);
}

/* The order the radix sort must give: probability descending, then id. */
static int cmp_prob_then_id(const void *a, const void *b, void *ctx) {
    const float *probs = ctx;
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (probs[x] != probs[y]) return probs[x] > probs[y] ? -1 : 1;
    return (x > y) - (x < y);
}

/* Vocabularies of 1 to 150k tokens: softmax-like spreads over many
 * exponents, many equal values (few distinct levels), zeros, one value
 * everywhere (every pass skipped), denormals, and subsets of ids. */
static void test_radix_sort(void) {
    const int sizes[] = {1, 2, 7, 256, 4097, 150000};
    uint64_t rng = 0x5eed;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const int n = sizes[si];
        float *probs = malloc((size_t)n * sizeof *probs);
        int32_t *ids = malloc((size_t)n * sizeof *ids), *want = malloc((size_t)n * sizeof *want);
        int32_t *tmp = malloc((size_t)n * sizeof *tmp);
        if (!probs || !ids || !want || !tmp) abort();
        for (int kind = 0; kind < 5; kind++) {
            int m = 0;
            for (int i = 0; i < n; i++) {
                rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
                const double u = (double)(rng >> 11) / 9007199254740992.0;
                switch (kind) {
                case 0: probs[i] = (float)exp(-40 * u); break;
                case 1: probs[i] = (float)((int)(u * 5)) / 4; break;
                case 2: probs[i] = u < 0.5 ? 0 : (float)u; break;
                case 3: probs[i] = 0.25f; break;
                default: probs[i] = u < 0.3 ? 1e-40f * (float)u : (float)u;
                }
                if (kind != 4 || u < 0.7) ids[m++] = i; /* kind 4: a subset of ids */
            }
            memcpy(want, ids, (size_t)m * sizeof *ids);
            qsort_r(want, (size_t)m, sizeof *want, cmp_prob_then_id, probs);
            tk_sort_by_prob_desc(probs, ids, tmp, m);
            CHECK(memcmp(ids, want, (size_t)m * sizeof *ids) == 0, "radix sort of %d ids (kind %d) differs", m, kind);
        }
        free(probs);
        free(ids);
        free(want);
        free(tmp);
    }
}

/* Sampling parameters without penalties. */
static tk_sampling sampling(float temperature, int top_k, float top_p, float min_p) {
    tk_sampling sp;
    tk_sampling_defaults(&sp);
    sp.temperature = temperature;
    sp.top_k = top_k;
    sp.top_p = top_p;
    sp.min_p = min_p;
    sp.repeat_penalty = 1;
    sp.presence_penalty = sp.frequency_penalty = 0;
    return sp;
}

/* Draw frequencies against the softmax, with nothing cut (the candidates
 * stay in id order, unsorted) and with a top-p that keeps every token (the
 * sorted path). */
static void test_frequencies(void) {
    float logits[NV], probs[NV];
    double sum = 0;
    for (int i = 0; i < NV; i++) {
        logits[i] = (float)((i * 7) % NV) / 4.0f;
        sum += probs[i] = expf(logits[i]);
    }
    for (int i = 0; i < NV; i++) probs[i] = (float)(probs[i] / sum);
    const float top_ps[] = {1, 0.99999f};
    enum { DRAWS = 40000 };
    for (int t = 0; t < 2; t++) {
        tk_sampling sp = sampling(1, 0, top_ps[t], 0);
        sp.seed = 77;
        tk_sampler s;
        tk_err err;
        if (tk_sampler_init(&s, &sp, NV, tk_exp_row_kernel(tk_cpu_isa()), &err)) {
            CHECK(0, "init: %s", err.msg);
            return;
        }
        int count[NV] = {0};
        for (int d = 0; d < DRAWS; d++) {
            float l[NV];
            memcpy(l, logits, sizeof l);
            count[tk_sample(&s, l, NULL, 0)]++;
        }
        for (int i = 0; i < NV; i++)
            CHECK(fabs((double)count[i] / DRAWS - probs[i]) < 0.01, "top_p %g: token %d drawn %.4f of the time, p %.4f",
                  top_ps[t], i, (double)count[i] / DRAWS, probs[i]);
        tk_sampler_free(&s);
    }
}

/* What filter keeps, the straightforward way: every candidate sorted, then
 * top-k, then top-p renormalized over what top-k kept (the sampler sorts
 * only a selected part of a large vocabulary).  Returns the kept count;
 * dist as tk_sampler_dist gives it. */
static int reference_dist(const float *logits, int n, const tk_sampling *sp, float *dist) {
    float *probs = malloc((size_t)n * sizeof *probs);
    int32_t *ids = malloc((size_t)n * sizeof *ids), *tmp = malloc((size_t)n * sizeof *tmp);
    if (!probs || !ids || !tmp) abort();
    const int best = tk_argmax(logits, n);
    double sum = 0;
    /* the sampler's own exp kernel: what is checked here is what it keeps */
    tk_exp_row_kernel(tk_cpu_isa())(probs, logits, n, logits[best], 1.0f / sp->temperature);
    for (int i = 0; i < n; i++) sum += probs[i];
    const float floor = sp->min_p > 0 ? sp->min_p * (float)(1.0 / sum) : 0;
    int keep = 0;
    for (int i = 0; i < n; i++) {
        probs[i] = (float)(probs[i] * (1.0 / sum));
        if (probs[i] >= floor) ids[keep++] = i;
    }
    tk_sort_by_prob_desc(probs, ids, tmp, keep);
    if (sp->top_k > 0 && sp->top_k < keep) keep = sp->top_k;
    double kept = 0, cum = 0, total = 0;
    for (int i = 0; i < keep; i++) kept += probs[ids[i]];
    int k = 0;
    while (k < keep) {
        cum += probs[ids[k++]] / kept;
        if (cum >= sp->top_p) break;
    }
    for (int i = 0; i < k; i++) total += probs[ids[i]];
    memset(dist, 0, (size_t)n * sizeof *dist);
    for (int i = 0; i < k; i++) dist[ids[i]] = (float)(probs[ids[i]] / total);
    free(probs);
    free(ids);
    free(tmp);
    return k;
}

/* A vocabulary large enough for the sampler to select before sorting, in
 * several spreads (wide, peaked, a few distinct levels with many ties, flat),
 * against reference_dist for top-k and top-p alone and together, with and
 * without min-p. */
static void test_selection(void) {
    enum { N = 50000 };
    float *logits = malloc(N * sizeof *logits), *l = malloc(N * sizeof *l);
    float *dist = malloc(N * sizeof *dist), *want = malloc(N * sizeof *want);
    if (!logits || !l || !dist || !want) abort();
    uint64_t rng = 0xd15c;
    const int top_ks[] = {0, 1, 40, 3000, N - 1};
    const float top_ps[] = {1, 0.999f, 0.95f, 0.5f, 0.01f};
    const float min_ps[] = {0, 1e-5f};
    const float temps[] = {0.7f, 1, 2.5f};
    for (int kind = 0; kind < 4; kind++) {
        for (int i = 0; i < N; i++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            const double u = (double)(rng >> 11) / 9007199254740992.0;
            logits[i] = kind == 0   ? (float)(8 * u)
                        : kind == 1 ? (float)(i == 777 ? 12 : 4 * u * u)
                        : kind == 2 ? (float)(int)(6 * u)
                                    : 0.5f;
        }
        for (size_t k = 0; k < sizeof top_ks / sizeof *top_ks; k++)
            for (size_t p = 0; p < sizeof top_ps / sizeof *top_ps; p++)
                for (size_t m = 0; m < sizeof min_ps / sizeof *min_ps; m++)
                    for (size_t t = 0; t < sizeof temps / sizeof *temps; t++) {
                        const tk_sampling sp = sampling(temps[t], top_ks[k], top_ps[p], min_ps[m]);
                        tk_sampler s;
                        tk_err err;
                        if (tk_sampler_init(&s, &sp, N, tk_exp_row_kernel(tk_cpu_isa()), &err)) {
                            CHECK(0, "init: %s", err.msg);
                            continue;
                        }
                        memcpy(l, logits, N * sizeof *l);
                        const int kept = tk_sampler_dist(&s, l, NULL, 0, dist);
                        const int want_kept = reference_dist(logits, N, &sp, want);
                        int differ = 0;
                        for (int i = 0; i < N; i++) differ += fabsf(dist[i] - want[i]) > 1e-6f * want[i] + 1e-12f;
                        CHECK(kept == want_kept && !differ,
                              "kind %d T %g top_k %d top_p %g min_p %g: kept %d, want %d; %d probabilities differ",
                              kind, sp.temperature, sp.top_k, sp.top_p, sp.min_p, kept, want_kept, differ);
                        tk_sampler_free(&s);
                    }
    }
    free(logits);
    free(l);
    free(dist);
    free(want);
}

int main(void) {
    test_radix_sort();
    test_frequencies();
    test_selection();
    logit_case cases[6];
    /* finite logits (i % 5) - 2: the maxima are at 4, 9, 14 */
    fill(&cases[0], "one NaN", 9);
    cases[0].logits[4] = NAN;
    cases[0].allowed[4] = 0;
    fill(&cases[1], "NaN and -inf", 9);
    for (int i = 0; i < NV; i += 2) {
        cases[1].logits[i] = i % 4 ? NAN : -INFINITY;
        cases[1].allowed[i] = 0;
    }
    fill(&cases[2], "all NaN", 0);
    fill(&cases[3], "all -inf", 0);
    for (int i = 0; i < NV; i++) {
        cases[2].logits[i] = NAN;
        cases[3].logits[i] = -INFINITY;
        cases[2].allowed[i] = cases[3].allowed[i] = i == 0;
    }
    fill(&cases[4], "+inf", 6);
    for (int i = 0; i < NV; i++) cases[4].allowed[i] = i == 6 || i == 11;
    cases[4].logits[6] = cases[4].logits[11] = INFINITY;
    cases[4].logits[2] = NAN;
    fill(&cases[5], "NaN first", 4);
    cases[5].logits[0] = NAN;
    cases[5].allowed[0] = 0;

    const float temps[] = {0, 0.01f, 0.8f, 3};
    const int top_ks[] = {0, 1, 3, 40};
    const float top_ps[] = {1, 0.9f, 0.1f};
    const float min_ps[] = {0, 0.05f, 1};
    const float rps[] = {1, 1.3f};
    const float pres[] = {0, 1.5f};
    for (int c = 0; c < 6; c++)
        for (int t = 0; t < 4; t++)
            for (int k = 0; k < 4; k++)
                for (int p = 0; p < 3; p++)
                    for (int m = 0; m < 3; m++)
                        for (int r = 0; r < 2; r++)
                            for (int q = 0; q < 2; q++) {
                                tk_sampling sp = sampling(temps[t], top_ks[k], top_ps[p], min_ps[m]);
                                sp.repeat_penalty = rps[r];
                                sp.presence_penalty = sp.frequency_penalty = pres[q];
                                sp.seed = (uint64_t)(c * 1000 + t * 100 + k * 10 + p);
                                /* penalties move the greedy answer of the finite cases */
                                logit_case lc = cases[c];
                                if ((r || q) && c != 2 && c != 3 && c != 4) lc.greedy = -1;
                                run_case(&lc, &sp);
                            }

    /* draw: NaN and negative weights are never picked */
    tk_sampling sp;
    tk_sampling_defaults(&sp);
    tk_sampler s;
    tk_err err;
    CHECK(tk_sampler_init(&s, &sp, NV, tk_exp_row_kernel(tk_cpu_isa()), &err) == 0, "%s", err.msg);
    const float w[5] = {NAN, -1, 0.5f, NAN, 0.5f};
    for (int i = 0; i < 200; i++) {
        int id = tk_sampler_draw(&s, w, 5);
        CHECK(id == 2 || id == 4, "draw gave %d", id);
    }
    const float none[3] = {NAN, 0, -2};
    CHECK(tk_sampler_draw(&s, none, 3) == -1, "draw of no weight");
    tk_sampler_free(&s);
    /* a non-finite temperature is refused */
    sp.temperature = INFINITY;
    CHECK(tk_sampler_init(&s, &sp, NV, tk_exp_row_kernel(tk_cpu_isa()), &err) != 0 && strstr(err.msg, "temperature"),
          "inf temperature accepted");
    TK_TEST_END();
}
