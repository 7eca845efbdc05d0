/* Speculative decoding.
 *  - prompt lookup proposals and the accept / residual rule (exact
 *    marginals on small hand-made distributions);
 *  - greedy identity: code-target drafted by code-draft and by prompt
 *    lookup gives exactly the tokens of plain greedy decoding, on prompts
 *    from code-eval.txt, alone and as concurrent requests in shared batches
 *    (also under a KV pool small enough to force preemption);
 *  - sampling: the distribution of the first tokens with speculation
 *    (a deliberately different draft model, and prompt lookup) matches the
 *    exact distribution of plain sampling (chi-square, stated threshold),
 *    with temperature, top-k, top-p and a repeat penalty applied;
 *  - KV rollback: after every step each sequence holds exactly the blocks
 *    its length needs (target and draft), and all blocks return at the end;
 *  - a draft model with another vocabulary is refused. */
#include <math.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <tokamak.h>

#include "../src/engine/engine_internal.h"
#include "../src/spec/spec.h"
#include "engine_test.h"
#include "tk_test.h"


/* ---- units ---- */

static void test_ngram(void) {
    int32_t out[8];
    /* a b c d x a b c -> the 3-gram "a b c" occurred at 0: propose d x a b c */
    int32_t t1[] = {1, 2, 3, 4, 9, 1, 2, 3};
    int n = tk_spec_ngram_propose(t1, 8, 4, 1, 8, out);
    CHECK(n == 5 && out[0] == 4 && out[1] == 9 && out[2] == 1 && out[4] == 3, "3-gram lookup: %d", n);
    n = tk_spec_ngram_propose(t1, 8, 4, 1, 2, out);
    CHECK(n == 2 && out[0] == 4 && out[1] == 9, "k caps the proposal: %d", n);
    /* the latest earlier occurrence wins: ... 5 7 ... 5 8 ... 5 -> 8 */
    int32_t t2[] = {5, 7, 0, 5, 8, 0, 6, 5};
    n = tk_spec_ngram_propose(t2, 8, 4, 1, 1, out);
    CHECK(n == 1 && out[0] == 8, "latest 1-gram occurrence: %d %d", n, out[0]);
    /* a longer match beats a later shorter one: "0 5" occurs at 2 (-> 8) */
    int32_t t3[] = {0, 5, 8, 1, 5, 9, 0, 5};
    n = tk_spec_ngram_propose(t3, 8, 4, 1, 1, out);
    CHECK(n == 1 && out[0] == 8, "longest n-gram first: %d %d", n, out[0]);
    int32_t t4[] = {1, 2, 3, 4};
    CHECK(tk_spec_ngram_propose(t4, 4, 4, 1, 4, out) == 0, "no match, no proposal");
    CHECK(tk_spec_ngram_propose(t4, 1, 4, 1, 4, out) == 0, "one token");
    /* self-overlapping repeat: 7 7 7 -> 7 7 */
    int32_t t5[] = {3, 7, 7, 7};
    n = tk_spec_ngram_propose(t5, 4, 4, 1, 4, out);
    CHECK(n == 1 && out[0] == 7, "overlapping: %d", n);
}

/* The accept / residual rule reproduces p exactly: P(out = y) =
 * q(y) min(1, p(y)/q(y)) + P(reject) r(y) where r is the normalized residual. */
static void test_accept_rule(void) {
    tk_sampling sp;
    tk_sampling_defaults(&sp);
    sp.seed = 7;
    tk_sampler s;
    tk_err err;
    if (tk_sampler_init(&s, &sp, 6, tk_exp_row_kernel(tk_cpu_isa()), &err)) return;
    const float p[6] = {0.05f, 0.4f, 0.3f, 0.0f, 0.15f, 0.1f};
    const float q[6] = {0.3f, 0.2f, 0.3f, 0.1f, 0.0f, 0.1f};
    float resid[6];
    for (int mode = 0; mode < 2; mode++) {
        int count[6] = {0}, N = 200000;
        for (int i = 0; i < N; i++) {
            int32_t x;
            if (mode == 0) {
                /* draft model: x ~ q */
                double u = tk_sampler_uniform(&s), c = 0;
                x = 5;
                for (int j = 0; j < 6; j++)
                    if (u < (c += q[j])) {
                        x = j;
                        break;
                    }
            } else {
                x = 0; /* prompt lookup: always proposes token 0 */
            }
            int32_t out = x;
            tk_spec_accept(&s, p, mode == 0 ? q : NULL, x, resid, 6, &out);
            count[out]++;
        }
        double worst = 0;
        for (int j = 0; j < 6; j++) {
            double f = (double)count[j] / N, sd = sqrt(p[j] * (1 - p[j]) / N) + 1e-9;
            double z = fabs(f - p[j]) / sd;
            if (z > worst) worst = z;
        }
        CHECK(worst < 5 && count[3] == 0, "mode %d: output frequencies follow p (worst z %.2f)", mode, worst);
    }
    /* p == q: always accepted */
    int rejected = 0;
    for (int i = 0; i < 1000; i++) {
        int32_t out;
        rejected += !tk_spec_accept(&s, q, q, i % 3, resid, 6, &out);
    }
    CHECK(rejected == 0, "p == q never rejects (%d)", rejected);
    /* tk_sampler_dist: the filtered distribution sums to 1, greedy is a point mass */
    float logits[6] = {1, 3, 2, 0.5f, -1, 2.5f}, dist[6], l2[6];
    memcpy(l2, logits, sizeof l2);
    int kept = tk_sampler_dist(&s, l2, NULL, 0, dist); /* defaults: top-k 40, top-p 0.95, min-p 0.05 */
    double sum = 0;
    for (int j = 0; j < 6; j++) sum += dist[j];
    CHECK(kept >= 1 && fabs(sum - 1) < 1e-5 && dist[1] > dist[5] && dist[5] > dist[2], "dist sums to %g", sum);
    tk_sampler_free(&s);
    sp.temperature = 0;
    tk_sampler_init(&s, &sp, 6, tk_exp_row_kernel(tk_cpu_isa()), &err);
    memcpy(l2, logits, sizeof l2);
    kept = tk_sampler_dist(&s, l2, NULL, 0, dist);
    CHECK(kept == 1 && dist[1] == 1 && dist[0] == 0, "greedy: point mass on the argmax");
    tk_sampler_free(&s);
    /* the draft-length choice follows the acceptance rate */
    CHECK(tk_spec_choose_k(0.9, 0.1, 0.05, 0, 8) > tk_spec_choose_k(0.5, 0.1, 0.05, 0, 8), "higher rate, longer drafts");
    CHECK(tk_spec_choose_k(0.05, 0.3, 0.1, 0, 8) == 0, "drafting that cannot pay pauses");
    CHECK(tk_spec_choose_k(0.05, 0.3, 0.1, 2, 8) == 2, "but not below draft_min");
    CHECK(fabs(tk_spec_expected_tokens(0.5, 3) - 1.875) < 1e-12, "expected tokens");
    /* per-position rates: first drafts accepted half the time, but once one
     * is, the next ones are too: alpha_1.. near 1, longer drafts pay */
    tk_spec_rate bursty;
    tk_spec_rate_init(&bursty);
    for (int i = 0; i < 40; i++) tk_spec_rate_update(&bursty, 4, i % 2 ? 4 : 0);
    double a0 = tk_spec_rate_alpha(&bursty), e4 = tk_spec_rate_expected(&bursty, 4);
    CHECK(fabs(a0 - 0.5) < 0.1 && e4 > tk_spec_expected_tokens(a0, 4) + 0.5, "bursty: alpha_0 %.2f, E(4) %.2f", a0,
          e4);
    double vt[9];
    for (int k = 0; k <= 8; k++) vt[k] = 1 + 0.1 * k;
    CHECK(tk_spec_rate_choose_k(&bursty, 0.1, vt, 0, 8) >= 4, "bursty acceptance: long drafts (%d)",
          tk_spec_rate_choose_k(&bursty, 0.1, vt, 0, 8));
    /* paused drafting probes after 16 steps, then 32, 64, and every 64 */
    tk_spec_rate rate;
    tk_spec_rate_init(&rate);
    int probes[3] = {0}, n_probe = 0;
    for (int step = 1; step <= 16 + 32 + 64 && n_probe < 3; step++)
        if (tk_spec_rate_probe(&rate, 0) == 1) {
            probes[n_probe++] = step;
            tk_spec_rate_update(&rate, 1, 0);
        }
    CHECK(probes[0] == 16 && probes[1] == 48 && probes[2] == 112, "probe steps %d %d %d", probes[0], probes[1],
          probes[2]);
    CHECK(tk_spec_rate_probe(&rate, 3) == 3 && rate.probe_every == 16, "drafting again resets the probes");
}

/* The online cost model: pass times by size, robust to a descheduled pass. */
static void test_cost_model(void) {
    tk_spec_cost m;
    tk_spec_cost_init(&m, 0.3, 0.2);
    double c, v;
    CHECK(tk_spec_cost_estimate(&m, &c, &v) == 0 && c == 0.3 && v == 0.2, "priors before any pass");
    for (int i = 0; i < 20; i++) {
        tk_spec_cost_observe(&m, 0, 1, 1e-3);   /* target: 1 ms + 0.25 ms per extra token */
        tk_spec_cost_observe(&m, 0, 3, 1.5e-3);
        tk_spec_cost_observe(&m, 1, 1, 0.2e-3); /* draft: one sequence, 0.2 ms */
    }
    int meas = tk_spec_cost_estimate(&m, &c, &v);
    CHECK(meas == 3 && fabs(c - 0.2) < 1e-9 && fabs(v - 0.25) < 1e-9, "measured c %.4f, v_slope %.4f", c, v);
    /* a pass that took 10x (the thread was descheduled) moves the average
     * by at most an eighth of a quarter */
    tk_spec_cost_observe(&m, 0, 1, 10e-3);
    CHECK(m.t[0][1] <= 1e-3 * (1 + 0.125 * 0.25) + 1e-12, "outlier capped: %.4f ms", m.t[0][1] * 1e3);
    /* a lasting change still gets through */
    for (int i = 0; i < 60; i++) tk_spec_cost_observe(&m, 0, 1, 2e-3);
    CHECK(m.t[0][1] > 1.9e-3, "lasting slow-down followed: %.4f ms", m.t[0][1] * 1e3);
    double vt[9];
    tk_spec_cost_table(&m, &c, vt, 8);
    CHECK(fabs(c - m.t[1][1] / m.t[0][1]) < 1e-9 && fabs(vt[2] - m.t[0][3] / m.t[0][1]) < 1e-9,
          "table: c and v(2) from the observed passes");
}

/* ---- engines and requests ---- */

#define MAX_GEN 160

typedef struct result {
    int32_t tokens[MAX_GEN];
    int n;
    const char *finish;
    int done;
    int drafted, accepted, passes;
} result;

static void on_event(void *user, const tk_event *ev) {
    result *r = user;
    if (ev->token >= 0 && r->n < MAX_GEN) r->tokens[r->n++] = ev->token;
    if (ev->done) {
        r->finish = ev->finish_reason;
        r->done++;
        r->drafted = ev->spec_drafted;
        r->accepted = ev->spec_accepted;
        r->passes = ev->spec_target_passes;
    }
}

/* Checks after a step that every live sequence holds exactly the blocks
 * its length needs (nothing left over from rejected drafts), and that the
 * pool's used blocks are exactly those the live sequences reference
 * (shared ones once), with matching reference counts. */
static int check_blocks(tk_engine *e, const char *what) {
    int bad = 0;
    for (int pass = 0; pass < 2; pass++) {
        tk_engine *x = pass ? e->draft : e;
        if (!x) continue;
        int *refs = calloc((size_t)x->kv.n_blocks, sizeof(int)), distinct = 0;
        for (int i = 0; i < x->max_seqs; i++) {
            if (!x->seq_ptrs[i]) continue;
            const tk_kv_seq *s = &x->seqs[i];
            int need = (s->len + x->kv.block_size - 1) / x->kv.block_size;
            if (s->n_blocks != need) bad++;
            for (int b = 0; b < s->n_blocks; b++) distinct += refs[s->blocks[b]]++ == 0;
        }
        if (distinct != tk_kv_used(&x->kv)) bad++;
        for (int b = 0; b < x->kv.n_blocks; b++)
            if (refs[b] != x->kv.refcount[b]) bad++;
        free(refs);
    }
    if (bad) fprintf(stderr, "%s: block accounting off (%d)\n", what, bad);
    return bad;
}

static int check_step(tk_engine *e, void *ctx) {
    (void)ctx;
    return check_blocks(e, "step");
}

static int run_all(tk_engine *e, tk_request_params *ps, int n, result *rs, bool check) {
    return tk_test_run_requests(e, ps, n, on_event, rs, sizeof *rs, check ? check_step : NULL, NULL, 200000);
}

static tk_engine *open_engine(const char *model, const char *draft, int max_seqs, size_t kv_memory, int block) {
    tk_engine_config cfg = {.model_path = model, .draft_model_path = draft, .n_threads = 2, .max_seqs = max_seqs,
                            .kv_memory = kv_memory, .kv_block_size = block, .max_batch_tokens = 256};
    return tk_test_open(&cfg, model);
}

static bool all_blocks_back(tk_engine *e) {
    tk_engine_metrics m;
    tk_engine_metrics_get(e, &m);
    return m.kv_blocks_used == 0 && (!e->draft || tk_kv_used(&e->draft->kv) == 0);
}

/* ---- greedy identity on the code models ---- */

#define N_PROMPTS 3

static int code_prompts(tk_engine *e, int32_t prompts[N_PROMPTS][400], int *lens) {
    char *text;
    size_t len;
    tk_err err;
    if (tk_read_file(tk_shared("models/code-eval.txt"), &text, &len, &err)) return -1;
    size_t offsets[N_PROMPTS] = {0, len / 3, 2 * len / 3};
    for (int i = 0; i < N_PROMPTS; i++) {
        size_t o = offsets[i];
        while (o > 0 && o < len && text[o - 1] != '\n') o++; /* start of a line */
        size_t n = SLOW_BUILD ? 160 : 600;
        if (o + n > len) n = len - o;
        while (n > 0 && ((unsigned char)text[o + n] & 0xC0) == 0x80) n--; /* whole UTF-8 characters */
        if (tk_tokenize(tk_engine_tokenizer(e), text + o, n, true, false, prompts[i], 400, &lens[i], &err) ||
            lens[i] > 400) {
            free(text);
            return -1;
        }
    }
    free(text);
    return 0;
}

static tk_request_params greedy_params(const int32_t *prompt, int n, int max_tokens, int mode) {
    tk_request_params p = {.prompt = prompt, .n_prompt = n, .max_tokens = max_tokens, .n = 1, .top_logprobs = -1,
                           .speculative = mode, .ignore_eos = true};
    tk_sampling_defaults(&p.sampling);
    p.sampling.temperature = 0;
    return p;
}

static bool same(const result *a, const result *b) {
    return a->n == b->n && !memcmp(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->n);
}

static void test_greedy_identity(void) {
    int gen = SLOW_BUILD ? 24 : 64;
    tk_engine *plain = open_engine(tk_shared("models/code-target"), NULL, 1, 0, 16);
    tk_engine *spec = open_engine(tk_shared("models/code-target"), tk_shared("models/code-draft"), 9, 0, 16);
    CHECK(plain && spec, "open code-target (+ code-draft)");
    if (!plain || !spec) goto out;
    int32_t prompts[N_PROMPTS][400];
    int lens[N_PROMPTS];
    CHECK(code_prompts(plain, prompts, lens) == 0, "prompts from code-eval.txt");
    static result ref[N_PROMPTS], alone[N_PROMPTS][2], together[N_PROMPTS * 3], tight[N_PROMPTS * 3];
    memset(ref, 0, sizeof ref);
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    memset(tight, 0, sizeof tight);
    static const int modes[3] = {TK_SPEC_DRAFT, TK_SPEC_NGRAM, TK_SPEC_OFF};
    static const char *names[3] = {"draft model", "prompt lookup", "off"};
    long drafted[2] = {0}, accepted[2] = {0}, passes[2] = {0};
    for (int i = 0; i < N_PROMPTS; i++) {
        tk_request_params p = greedy_params(prompts[i], lens[i], gen, TK_SPEC_OFF);
        CHECK(run_all(plain, &p, 1, &ref[i], false) == 0 && ref[i].n == gen, "plain %d", i);
        for (int m = 0; m < 2; m++) {
            p.speculative = modes[m];
            p.draft_min = 1; /* always draft here; the batched runs below adapt freely */
            CHECK(run_all(spec, &p, 1, &alone[i][m], true) == 0, "spec %d", i);
            CHECK(same(&alone[i][m], &ref[i]), "prompt %d (%d tokens), %s: greedy output differs from plain", i,
                  lens[i], names[m]);
            drafted[m] += alone[i][m].drafted;
            accepted[m] += alone[i][m].accepted;
            passes[m] += alone[i][m].passes;
        }
    }
    for (int m = 0; m < 2; m++) {
        printf("greedy, %s: %ld drafted, %ld accepted (%.1f %%), %.2f tokens per pass\n", names[m], drafted[m],
               accepted[m], drafted[m] ? 100.0 * accepted[m] / drafted[m] : 0,
               passes[m] ? (double)(N_PROMPTS * (gen - 1)) / passes[m] : 0);
        CHECK(drafted[m] > 0 && accepted[m] > 0, "%s: drafts proposed and accepted", names[m]);
    }
    CHECK(all_blocks_back(spec), "alone: all blocks back");

    /* All prompts x {draft, lookup, off} at once, in shared batches. */
    tk_request_params ps[N_PROMPTS * 3];
    for (int i = 0; i < N_PROMPTS * 3; i++) ps[i] = greedy_params(prompts[i / 3], lens[i / 3], gen, modes[i % 3]);
    CHECK(run_all(spec, ps, N_PROMPTS * 3, together, true) == 0, "together");
    for (int i = 0; i < N_PROMPTS * 3; i++)
        CHECK(same(&together[i], &ref[i / 3]), "concurrent request %d (prompt %d, %s) differs from plain", i, i / 3,
              names[i % 3]);
    tk_engine_metrics mt;
    tk_engine_metrics_get(spec, &mt);
    CHECK(all_blocks_back(spec), "together: all blocks back");
    CHECK(mt.spec_drafted > 0 && mt.spec_accepted > 0 && mt.spec_target_passes > 0 && mt.spec_tokens > 0,
          "metrics: drafted %llu accepted %llu passes %llu", (unsigned long long)mt.spec_drafted,
          (unsigned long long)mt.spec_accepted, (unsigned long long)mt.spec_target_passes);
    tk_engine_close(spec);

    /* The same under a KV pool that cannot hold them all: preemption
     * (recomputation) in the middle of speculation changes nothing. */
    size_t block_bytes = 2 * sizeof(float) * 6 * 2 * 48 * 16;
    int longest = lens[0];
    for (int i = 1; i < N_PROMPTS; i++)
        if (lens[i] > longest) longest = lens[i];
    int need = (longest + gen + 15) / 16 + 2;
    spec = open_engine(tk_shared("models/code-target"), tk_shared("models/code-draft"), 9, block_bytes * need * 2, 16);
    CHECK(spec != NULL, "open tight");
    if (!spec) goto out;
    CHECK(run_all(spec, ps, N_PROMPTS * 3, tight, true) == 0, "tight pool");
    tk_engine_metrics_get(spec, &mt);
    printf("tight pool: %d blocks, %llu preemptions\n", mt.kv_blocks_total, (unsigned long long)mt.preemptions);
    CHECK(mt.preemptions > 0, "preemptions happened");
    for (int i = 0; i < N_PROMPTS * 3; i++)
        CHECK(same(&tight[i], &ref[i / 3]), "tight pool: request %d (%s) differs from plain", i, names[i % 3]);
    CHECK(all_blocks_back(spec), "tight: all blocks back");
out:
    tk_engine_close(plain);
    tk_engine_close(spec);
}

/* ---- sampling: the distribution is unchanged ---- */

#define NV_SMALL 512
#define N_GEN 3 /* tokens whose joint distribution is compared */

typedef struct joint {
    int32_t seq[4096][N_GEN];
    double prob[4096];
    int n;
} joint;

/* The exact distribution of the first N_GEN tokens under plain sampling:
 * enumerate every prefix the filters allow, with the sampler's own
 * filtered distribution at each step (penalties see the prompt and the
 * tokens before). */
static int exact_joint(tk_engine *e, const tk_sampling *sp, const int32_t *prompt, int n_prompt, joint *out) {
    tk_sampler smp;
    tk_err err;
    if (tk_sampler_init(&smp, sp, NV_SMALL, tk_exp_row_kernel(tk_cpu_isa()), &err)) return -1;
    int32_t seq[64];
    memcpy(seq, prompt, sizeof(int32_t) * (size_t)n_prompt);
    float *logits = malloc(sizeof(float) * NV_SMALL * 64), dist[NV_SMALL];
    out->n = 0;
    /* depth-first over prefixes */
    int32_t stack_tok[N_GEN][NV_SMALL];
    float stack_p[N_GEN][NV_SMALL];
    int stack_n[N_GEN], stack_i[N_GEN];
    double prefix_p[N_GEN + 1] = {1};
    int depth = 0, rc = 0;
    for (;;) {
        /* expand: distribution after prompt + depth tokens */
        int n = n_prompt + depth;
        if (tk_engine_logits(e, seq, n, logits, &err)) {
            rc = -1;
            break;
        }
        tk_sampler_dist(&smp, logits + (size_t)(n - 1) * NV_SMALL, seq, n, dist);
        stack_n[depth] = 0;
        stack_i[depth] = 0;
        for (int t = 0; t < NV_SMALL; t++)
            if (dist[t] > 0) {
                stack_tok[depth][stack_n[depth]] = t;
                stack_p[depth][stack_n[depth]++] = dist[t];
            }
        /* walk */
        for (;;) {
            if (stack_i[depth] < stack_n[depth]) {
                int i = stack_i[depth]++;
                seq[n_prompt + depth] = stack_tok[depth][i];
                prefix_p[depth + 1] = prefix_p[depth] * stack_p[depth][i];
                if (depth + 1 == N_GEN) {
                    if (out->n < 4096) {
                        memcpy(out->seq[out->n], seq + n_prompt, sizeof(int32_t) * N_GEN);
                        out->prob[out->n++] = prefix_p[N_GEN];
                    }
                    continue;
                }
                depth++;
                break; /* expand the child */
            }
            if (depth == 0) goto done;
            depth--;
        }
    }
done:
    free(logits);
    tk_sampler_free(&smp);
    return rc;
}

/* Upper 0.1 % point of chi-square with df degrees of freedom
 * (Wilson-Hilferty, z = 3.090). */
static double chi2_crit_001(int df) {
    double a = 2.0 / (9.0 * df);
    double x = 1 - a + 3.090 * sqrt(a);
    return df * x * x * x;
}

/* Chi-square goodness of fit of samples (N_GEN tokens each) against the
 * exact joint; cells expecting fewer than 5 are pooled.  Returns the
 * statistic, *df and *tv (total variation distance, empirical vs exact). */
static double chi2_fit(const joint *j, const int32_t (*samples)[N_GEN], int n, int *df, double *tv) {
    static int count[4096];
    memset(count, 0, sizeof count);
    int outside = 0;
    for (int s = 0; s < n; s++) {
        int c = -1;
        for (int k = 0; k < j->n && c < 0; k++)
            if (!memcmp(j->seq[k], samples[s], sizeof(int32_t) * N_GEN)) c = k;
        if (c < 0) outside++;
        else count[c]++;
    }
    double chi2 = 0, pooled_e = 0, pooled_o = outside, t = outside;
    int cells = 0;
    for (int k = 0; k < j->n; k++) {
        double e = j->prob[k] * n;
        t += fabs(count[k] - e);
        if (e < 5) {
            pooled_e += e;
            pooled_o += count[k];
            continue;
        }
        chi2 += (count[k] - e) * (count[k] - e) / e;
        cells++;
    }
    if (pooled_e > 0) {
        chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
        cells++;
    } else if (outside) {
        chi2 = INFINITY; /* a sequence plain sampling can never produce */
    }
    *df = cells - 1;
    *tv = 0.5 * t / n;
    return chi2;
}

typedef struct multi {
    int32_t tokens[32][N_GEN + 1];
    int n[32];
} multi;

static void on_multi(void *user, const tk_event *ev) {
    multi *m = user;
    if (ev->token >= 0 && ev->index < 32 && m->n[ev->index] < N_GEN + 1)
        m->tokens[ev->index][m->n[ev->index]++] = ev->token;
}

/* N samples of the prompt in mode `mode`: requests of n = 32 samples (which
 * share the prompt's blocks, copied on write), seeds all different; checks
 * the first N_GEN tokens against the exact joint. */
static void sampling_mode(tk_engine *e, const char *name, int mode, const int32_t *prompt, int np,
                          const tk_sampling *sp, const joint *exact, int N, bool expect_accepts) {
    static int32_t samples[4000][N_GEN];
    static multi m;
    tk_engine_metrics before, after;
    tk_engine_metrics_get(e, &before);
    tk_err err;
    for (int done = 0; done < N; done += 32) {
        int nb = N - done < 32 ? N - done : 32;
        memset(&m, 0, sizeof m);
        /* one more token than compared, so that the second step's two
         * drafts can reach the third token */
        tk_request_params p = {.prompt = prompt, .n_prompt = np, .max_tokens = N_GEN + 1, .n = nb,
                               .top_logprobs = -1, .speculative = mode, .ignore_eos = true, .draft_min = 2,
                               .draft_max = 2, .sampling = *sp};
        p.sampling.seed = 1000003ULL * (uint64_t)done + (uint64_t)mode * 77;
        int rc = tk_engine_submit(e, &p, on_multi, &m, NULL, &err), live = 1;
        while (rc == 0 && live > 0) {
            live = tk_engine_step(e, &err);
            if (live < 0 || check_blocks(e, name)) rc = -1;
        }
        if (rc) {
            CHECK(0, "run %s: %s", name, err.msg);
            return;
        }
        for (int i = 0; i < nb; i++) memcpy(samples[done + i], m.tokens[i], sizeof(int32_t) * N_GEN);
    }
    tk_engine_metrics_get(e, &after);
    int df;
    double tv, chi2 = chi2_fit(exact, (const int32_t(*)[N_GEN])samples, N, &df, &tv);
    double crit = chi2_crit_001(df);
    uint64_t dr = after.spec_drafted - before.spec_drafted, ac = after.spec_accepted - before.spec_accepted;
    printf("%-22s N=%d: chi2 %6.1f, df %d, 0.1%% critical %.1f, TV %.4f; drafted %llu, accepted %llu\n", name, N,
           chi2, df, crit, tv, (unsigned long long)dr, (unsigned long long)ac);
    CHECK(chi2 < crit, "%s: first %d tokens do not follow plain sampling (chi2 %.1f >= %.1f, df %d)", name, N_GEN,
          chi2, crit, df);
    if (mode != TK_SPEC_OFF)
        CHECK((ac > 0 || !expect_accepts) && ac < dr, "%s: acceptances and rejections (%llu of %llu)", name,
              (unsigned long long)ac, (unsigned long long)dr);
    CHECK(all_blocks_back(e), "%s: all blocks back", name);
}

static tk_engine *open_small(const char *draft, const char *draft_tok) {
    tk_engine_config cfg = {.model_path = tk_shared("models/stories260K.bin"),
                            .tokenizer_path = tk_shared("models/aidreams260K.tok512.bin"), .draft_model_path = draft,
                            .draft_tokenizer_path = draft_tok, .n_threads = 1, .max_seqs = 32, .kv_block_size = 8,
                            .max_batch_tokens = 256};
    return tk_test_open(&cfg, draft ? draft : "stories260K");
}

/* Target stories260K (vocabulary of 512; the aidreams tokenizer.bin only
 * names the ids).  Drafts: aidreams260K, a different model of the same
 * vocabulary size (mostly rejected); stories260K quantized to Q8_0 (a
 * perturbed copy: mostly accepted); prompt lookup (a point mass). */
static void test_sampling_distribution(void) {
    int N = SLOW_BUILD ? 600 : 2000;
    const char *tok = tk_shared("models/aidreams260K.tok512.bin");
    tk_engine *e = open_small(tk_shared("models/aidreams260K.bin"), tok);
    CHECK(e != NULL, "open stories260K + aidreams260K draft");
    if (!e) return;
    /* The prompt repeats part of the model's own greedy text, so the model
     * tends to continue the repetition and prompt lookup finds matches. */
    int32_t prompt[32] = {1};
    int np = 1;
    float *logits = malloc(sizeof(float) * NV_SMALL * 32);
    tk_err err;
    for (; np < 13; np++) {
        if (tk_engine_logits(e, prompt, np, logits, &err)) break;
        prompt[np] = tk_argmax(logits + (size_t)(np - 1) * NV_SMALL, NV_SMALL);
    }
    free(logits);
    for (int i = 1; i <= 6; i++) prompt[np++] = prompt[i];
    tk_sampling sp;
    tk_sampling_defaults(&sp);
    sp.temperature = 1.0f;
    sp.top_k = 6;
    sp.top_p = 0.92f;
    sp.min_p = 0;
    sp.repeat_penalty = 1.1f;
    sp.penalty_last_n = 64;
    static joint exact;
    CHECK(exact_joint(e, &sp, prompt, np, &exact) == 0, "exact joint");
    double mass = 0;
    for (int k = 0; k < exact.n; k++) mass += exact.prob[k];
    printf("exact joint of %d tokens after a %d-token prompt: %d sequences, mass %.6f\n", N_GEN, np, exact.n, mass);
    CHECK(fabs(mass - 1) < 1e-4 && exact.n < 4096, "joint mass %g", mass);

    sampling_mode(e, "plain", TK_SPEC_OFF, prompt, np, &sp, &exact, N, false);
    sampling_mode(e, "draft aidreams260K", TK_SPEC_DRAFT, prompt, np, &sp, &exact, N, false);
    sampling_mode(e, "prompt lookup", TK_SPEC_NGRAM, prompt, np, &sp, &exact, N, true);
    tk_engine_close(e);

    char dir[] = "/tmp/tk_spec_XXXXXX", q8[64], cmd[1024];
    if (!mkdtemp(dir)) return;
    snprintf(q8, sizeof q8, "%s/stories-q8.gguf", dir);
    snprintf(cmd, sizeof cmd, "%s convert %s %s --type q8_0 --tokenizer %s >/dev/null 2>&1", TK_TOKAMAK_BIN,
             tk_shared("models/stories260K.bin"), q8, tok);
    CHECK(system(cmd) == 0, "%s", cmd);
    e = open_small(q8, NULL);
    CHECK(e != NULL, "open stories260K + its Q8_0 copy as draft");
    if (e) sampling_mode(e, "draft stories260K-Q8_0", TK_SPEC_DRAFT, prompt, np, &sp, &exact, N, true);
    tk_engine_close(e);
    unlink(q8);
    rmdir(dir);
}

/* Sampling on the code models: runs, accepts some drafts, same seed gives
 * the same output, and the blocks come back. */
static void test_code_sampling(void) {
    tk_engine *e = open_engine(tk_shared("models/code-target"), tk_shared("models/code-draft"), 4, 0, 16);
    if (!e) return;
    int32_t prompts[N_PROMPTS][400];
    int lens[N_PROMPTS];
    if (code_prompts(e, prompts, lens)) return;
    tk_request_params p = greedy_params(prompts[0], lens[0], 40, TK_SPEC_DRAFT);
    p.sampling.temperature = 0.8f;
    p.sampling.seed = 5;
    p.draft_min = 2; /* drafts at every step, whatever the cost model says */
    p.top_logprobs = 2;
    result a = {0}, b = {0};
    CHECK(run_all(e, &p, 1, &a, true) == 0 && run_all(e, &p, 1, &b, true) == 0, "runs");
    CHECK(a.n == 40 && same(&a, &b), "same seed, same tokens (%d)", a.n);
    CHECK(a.accepted > 0 && a.accepted <= a.drafted, "temperature 0.8: %d of %d drafts accepted", a.accepted,
          a.drafted);
    printf("temperature 0.8, draft model: %d of %d drafts accepted, %d passes for 39 tokens\n", a.accepted,
           a.drafted, a.passes);
    CHECK(all_blocks_back(e), "blocks back");
    tk_engine_close(e);
}

static void test_refusals(void) {
    tk_engine_config cfg = {.model_path = tk_shared("models/code-target"),
                            .draft_model_path = tk_shared("models/stories260K.bin"), .n_threads = 1};
    tk_engine *e;
    tk_err err;
    CHECK(tk_engine_open(&cfg, &e, &err) != 0 && strstr(err.msg, "vocabulary"), "other vocabulary refused: %s",
          err.msg);
    cfg.draft_model_path = NULL;
    cfg.spec_mode = TK_SPEC_DRAFT;
    CHECK(tk_engine_open(&cfg, &e, &err) != 0, "draft mode without a draft model refused: %s", err.msg);
    cfg.spec_mode = TK_SPEC_NGRAM;
    cfg.model_path = tk_shared("models/stories260K.bin");
    CHECK(tk_engine_open(&cfg, &e, &err) == 0, "ngram engine");
    int32_t pr[] = {1, 5, 6};
    tk_request_params p = {.prompt = pr, .n_prompt = 3, .max_tokens = 4, .speculative = TK_SPEC_DRAFT};
    CHECK(tk_engine_submit(e, &p, NULL, NULL, NULL, &err) != 0 && strstr(err.msg, "draft model"),
          "request for a draft model the engine lacks: %s", err.msg);
    p.speculative = TK_SPEC_DEFAULT;
    p.draft_max = 99;
    CHECK(tk_engine_submit(e, &p, NULL, NULL, NULL, &err) != 0, "draft_max too large: %s", err.msg);
    tk_engine_close(e);
}

/* With arguments, runs only the named parts (units, sampling, greedy, code). */
static bool want(int argc, char **argv, const char *name) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name)) return true;
    return false;
}

int main(int argc, char **argv) {
    double t0 = tk_clock_seconds(TK_CLOCK_WALL);
    if (want(argc, argv, "units")) {
        test_ngram();
        test_accept_rule();
        test_cost_model();
        test_refusals();
        printf("[units: %.1f s]\n", tk_clock_seconds(TK_CLOCK_WALL) - t0);
    }
    t0 = tk_clock_seconds(TK_CLOCK_WALL);
    if (want(argc, argv, "sampling")) {
        test_sampling_distribution();
        printf("[sampling distribution: %.1f s]\n", tk_clock_seconds(TK_CLOCK_WALL) - t0);
    }
    t0 = tk_clock_seconds(TK_CLOCK_WALL);
    struct stat st;
    if (stat(tk_shared("models/code-target"), &st) != 0) {
        printf("code models absent: greedy identity skipped\n");
    } else {
        if (want(argc, argv, "greedy")) {
            test_greedy_identity();
            printf("[greedy identity: %.1f s]\n", tk_clock_seconds(TK_CLOCK_WALL) - t0);
        }
        t0 = tk_clock_seconds(TK_CLOCK_WALL);
        if (want(argc, argv, "code")) {
            test_code_sampling();
            printf("[code sampling: %.1f s]\n", tk_clock_seconds(TK_CLOCK_WALL) - t0);
        }
    }
    TK_TEST_END();
}
