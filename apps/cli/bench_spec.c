/* tokamak bench with speculative decoding: the same prompts decoded plainly
 * and speculatively (alternating, so load drifts hit both alike), with the
 * acceptance rate, tokens per model pass and decode speed-up; plus the cost
 * model measured directly: c (a draft pass over one token relative to a
 * target pass over one token) and v(k) (a target pass over k + 1 tokens
 * relative to one token), and the analytic expectation
 * (1 - a^(k+1)) / ((1 - a)(k c + v(k))). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tokamak.h>

#include "bench_spec.h"

#define MAX_K 8

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The lower quartile: on a shared machine other processes only ever add
 * time to a pass, so the lower quartile tracks the pass's own cost better
 * than the median does. */
static double quartile(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[(n - 1) / 4];
}

/* Median time of a pass over n tokens (positions ctx .. ctx+n-1, all asking
 * for logits) of a sequence already holding ctx tokens; the same positions
 * are rewritten each time. */
typedef struct pass_timer {
    tk_engine *e;
    int seq, ctx;
    bool cpu; /* time in this thread's CPU time (--cpu-time: one thread) */
    float *logits;
} pass_timer;

static int timer_init(pass_timer *t, tk_engine *e, int ctx, tk_err *err) {
    t->e = e;
    t->ctx = ctx;
    int nv = tk_engine_n_vocab(e);
    t->logits = malloc(sizeof(float) * (size_t)nv * (MAX_K + 1));
    t->seq = tk_engine_seq_new(e, err);
    if (!t->logits || t->seq < 0) return -1;
    int32_t tok[64], pos[64], seq[64];
    uint8_t flag[64];
    for (int done = 0; done < ctx; done += 64) {
        int m = ctx - done < 64 ? ctx - done : 64;
        for (int i = 0; i < m; i++) {
            tok[i] = (int32_t)(3 + (done + i) * 7 % (nv - 3));
            pos[i] = done + i;
            seq[i] = t->seq;
            flag[i] = done + i == ctx - 1;
        }
        if (tk_engine_decode(e, &(tk_batch){m, tok, pos, seq, flag}, t->logits, err)) return -1;
    }
    return 0;
}

static double timer_pass(pass_timer *t, int n, tk_err *err) {
    int32_t tok[MAX_K + 1], pos[MAX_K + 1], seq[MAX_K + 1];
    uint8_t flag[MAX_K + 1];
    for (int i = 0; i < n; i++) {
        tok[i] = 100 + i;
        pos[i] = t->ctx + i;
        seq[i] = t->seq;
        flag[i] = 1;
    }
    double t0 = t->cpu ? tk_clock_seconds(TK_CLOCK_THREAD_CPU) : tk_clock_seconds(TK_CLOCK_WALL);
    if (tk_engine_decode(t->e, &(tk_batch){n, tok, pos, seq, flag}, t->logits, err)) return -1;
    return (t->cpu ? tk_clock_seconds(TK_CLOCK_THREAD_CPU) : tk_clock_seconds(TK_CLOCK_WALL)) - t0;
}

static void timer_free(pass_timer *t) {
    if (t->seq >= 0) tk_engine_seq_free(t->e, t->seq);
    free(t->logits);
}

/* v[k] = target pass over k + 1 tokens / one token (k = 0..MAX_K), c =
 * draft one-token pass / target one-token pass (0 without a draft).  As in
 * decoding, draft passes come in runs after a target pass: c is timed as the
 * mean of a run of 4. */
static int measure_costs(tk_engine *e, tk_engine *draft, int ctx, int reps, bool cpu, double *v, double *c,
                         double *t1, tk_err *err) {
    pass_timer tt = {.seq = -1, .cpu = cpu}, td = {.seq = -1, .cpu = cpu};
    int rc = -1;
    static double times[MAX_K + 2][256];
    if (reps > 256) reps = 256;
    if (timer_init(&tt, e, ctx, err) || (draft && timer_init(&td, draft, ctx, err))) goto out;
    /* warm-up, then interleave all sizes in every repetition */
    timer_pass(&tt, 1, err);
    if (draft) timer_pass(&td, 1, err);
    for (int r = 0; r < reps; r++) {
        for (int k = 0; k <= MAX_K; k++)
            if ((times[k][r] = timer_pass(&tt, k + 1, err)) < 0) goto out;
        if (draft) {
            double sum = 0;
            for (int j = 0; j < 4; j++) {
                double t = timer_pass(&td, 1, err);
                if (t < 0) goto out;
                sum += t;
            }
            times[MAX_K + 1][r] = sum / 4;
        }
    }
    double base = quartile(times[0], reps);
    for (int k = 0; k <= MAX_K; k++) v[k] = quartile(times[k], reps) / base;
    *c = draft ? quartile(times[MAX_K + 1], reps) / base : 0;
    *t1 = base;
    rc = 0;
out:
    timer_free(&tt);
    if (draft) timer_free(&td);
    return rc;
}

static double v_at(const double *v, double k) {
    if (k <= 0) return 1;
    if (k >= MAX_K) return v[MAX_K] + (v[MAX_K] - v[MAX_K - 1]) * (k - MAX_K);
    int i = (int)k;
    return v[i] + (v[i + 1] - v[i]) * (k - i);
}

int tk_bench_verify_cost(tk_engine *e, int ctx, int reps) {
    double v[MAX_K + 1], c, t1;
    tk_err err;
    if (measure_costs(e, NULL, ctx, reps, false, v, &c, &t1, &err)) {
        fprintf(stderr, "tokamak bench: %s\n", err.msg);
        return 1;
    }
    printf("target pass over k + 1 tokens relative to one token (context %d, lower quartile of %d; one token %.2f "
           "ms):\n",
           ctx, reps, t1 * 1e3);
    printf("  k    ");
    for (int k = 1; k <= MAX_K; k++) printf("%7d", k);
    printf("\n  v(k) ");
    for (int k = 1; k <= MAX_K; k++) printf("%7.3f", v[k]);
    printf("\n");
    return 0;
}

/* One request's decode phase: from its first token (which the prompt's
 * pass produced) to its last, in wall and in process CPU time.  With one
 * thread the CPU time is the work done, whatever else the machine runs. */
typedef struct run_result {
    double wall0, cpu0, wall, cpu;
    int n_generated, drafted, accepted, passes;
    bool done;
} run_result;

static void on_run_event(void *user, const tk_event *ev) {
    run_result *r = user;
    if (ev->token >= 0 && ev->n_generated == 1) {
        r->wall0 = tk_clock_seconds(TK_CLOCK_WALL);
        r->cpu0 = tk_clock_seconds(TK_CLOCK_PROCESS_CPU);
    }
    if (ev->done) {
        r->wall = tk_clock_seconds(TK_CLOCK_WALL) - r->wall0;
        r->cpu = tk_clock_seconds(TK_CLOCK_PROCESS_CPU) - r->cpu0;
        r->n_generated = ev->n_generated;
        r->drafted = ev->spec_drafted;
        r->accepted = ev->spec_accepted;
        r->passes = ev->spec_target_passes;
        r->done = true;
    }
}

static int run_one(tk_engine *e, const int32_t *prompt, int n_prompt, const tk_bench_spec_opts *o, int mode,
                   uint64_t seed, run_result *r, tk_err *err) {
    memset(r, 0, sizeof *r);
    tk_request_params p = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = o->n_gen, .n = 1,
                           .ignore_eos = true, .top_logprobs = -1, .speculative = mode,
                           .draft_max = o->draft_max, .draft_min = o->draft_min};
    tk_sampling_defaults(&p.sampling);
    p.sampling.temperature = o->temperature;
    p.sampling.seed = seed;
    if (tk_engine_submit(e, &p, on_run_event, r, NULL, err)) return -1;
    while (!r->done)
        if (tk_engine_step(e, err) < 0) return -1;
    return 0;
}

/* Prompts: n_prompts pieces of `chars` characters at evenly spaced line
 * starts of the text (chars 0: the whole text, one prompt). */
static int cut_prompts(const char *text, size_t len, int chars, int n_prompts, char ***out) {
    if (chars <= 0 || (size_t)chars >= len) n_prompts = 1;
    char **p = calloc((size_t)n_prompts, sizeof *p);
    if (!p) return -1;
    for (int i = 0; i < n_prompts; i++) {
        size_t o = 0, n = len;
        if (chars > 0 && (size_t)chars < len) {
            o = (len - (size_t)chars) * (size_t)i / (size_t)n_prompts;
            while (o > 0 && o < len && text[o - 1] != '\n') o++;
            n = (size_t)chars;
            if (o + n > len) n = len - o;
            while (n > 0 && ((unsigned char)text[o + n] & 0xC0) == 0x80) n--;
        }
        p[i] = strndup(text + o, n);
        if (!p[i]) return -1;
    }
    *out = p;
    return n_prompts;
}

int tk_bench_spec(tk_engine *e, const tk_bench_spec_opts *o) {
    tk_err err;
    char *text = NULL;
    size_t len = 0;
    if (tk_read_file(o->prompt_file, &text, &len, &err)) {
        fprintf(stderr, "tokamak bench: %s\n", err.msg);
        return 1;
    }
    char **prompts = NULL;
    int n_prompts = cut_prompts(text, len, o->prompt_chars, o->n_prompts, &prompts);
    free(text);
    if (n_prompts <= 0) {
        fprintf(stderr, "tokamak bench: out of memory\n");
        return 1;
    }
    tk_spec_info si;
    tk_engine_spec_info(e, &si);
    int mode = o->spec_mode ? o->spec_mode : si.spec_mode;
    char what[64];
    if (n_prompts == 1 && o->prompt_chars <= 0) snprintf(what, sizeof what, "the whole file");
    else snprintf(what, sizeof what, "%d characters", o->prompt_chars);
    printf("speculative decoding: %s; temperature %g; %d prompt%s of %s, %d tokens each, %d repetition%s\n",
           mode == TK_SPEC_NGRAM ? "prompt lookup" : "draft model", o->temperature, n_prompts,
           n_prompts > 1 ? "s" : "", what, o->n_gen, o->reps, o->reps > 1 ? "s" : "");
    typedef struct prompt_stats {
        int n_prompt;
        double pt, st;            /* decode seconds: plain, speculative (CPU or wall) */
        double pw, sw;            /* wall seconds */
        long pn, sn, dr, ac, pa;  /* decoded tokens, drafted, accepted, target passes */
    } prompt_stats;
    prompt_stats *ps = calloc((size_t)n_prompts, sizeof *ps);
    int rc = ps ? 0 : 1;
    for (int i = 0; i < n_prompts && rc == 0; i++) {
        prompt_stats *q = &ps[i];
        const tk_tokenizer *tok = tk_engine_tokenizer(e);
        int32_t *ids = NULL;
        int n = 0;
        size_t len = strlen(prompts[i]);
        if (tk_tokenize(tok, prompts[i], len, true, false, NULL, 0, &n, &err) ||
            !(ids = malloc(sizeof(int32_t) * (size_t)(n + 1))) ||
            tk_tokenize(tok, prompts[i], len, true, false, ids, n, &n, &err)) {
            fprintf(stderr, "tokamak bench: prompt %d: %s\n", i, err.msg);
            free(ids);
            rc = 1;
            break;
        }
        q->n_prompt = n;
        for (int r = 0; r < o->reps && rc == 0; r++) {
            for (int s = 0; s < 2 && rc == 0; s++) {
                /* alternate the order between repetitions */
                bool spec = (s + r) % 2 == 1;
                run_result rr;
                if (run_one(e, ids, n, o, spec ? mode : TK_SPEC_OFF, o->seed + (uint64_t)r, &rr, &err)) {
                    fprintf(stderr, "tokamak bench: %s\n", err.msg);
                    rc = 1;
                    break;
                }
                /* decode speed: the tokens after the first (which the
                 * prompt's pass produced) over the time after it */
                double t = o->cpu_time ? rr.cpu : rr.wall;
                if (spec) {
                    q->st += t;
                    q->sw += rr.wall;
                    q->sn += rr.n_generated - 1;
                    q->dr += rr.drafted;
                    q->ac += rr.accepted;
                    q->pa += rr.passes;
                } else {
                    q->pt += t;
                    q->pw += rr.wall;
                    q->pn += rr.n_generated - 1;
                }
            }
        }
        free(ids);
    }
    /* costs at the mean context of the runs */
    double v[MAX_K + 1], c = 0, t1 = 0;
    if (rc == 0) {
        int ctx = o->n_gen / 2;
        for (int i = 0; i < n_prompts; i++) ctx += ps[i].n_prompt / n_prompts;
        tk_engine *draft = mode == TK_SPEC_DRAFT ? tk_engine_draft(e) : NULL;
        if (measure_costs(e, draft, ctx, 41, o->cpu_time, v, &c, &t1, &err)) {
            fprintf(stderr, "tokamak bench: %s\n", err.msg);
            rc = 1;
        } else {
            printf("costs at context %d (lower quartile of 41, %s time; target one-token pass %.2f ms): c = %.3f; "
                   "v(k) =", ctx, o->cpu_time ? "CPU" : "wall", t1 * 1e3, c);
            for (int i = 1; i <= MAX_K; i++) printf(" %.3f", v[i]);
            printf(" for k = 1..%d\n", MAX_K);
        }
    }
    if (rc == 0) {
        printf("decode speeds in %s time\n", o->cpu_time ? "process CPU" : "wall-clock");
        printf("%-6s %6s %9s %9s %8s %6s %5s %6s %8s %8s %7s %6s\n", "prompt", "tokens", "plain t/s", "spec t/s",
               "speed-up", "accept", "k", "tok/ps", "analytic", "an.(tpp)", "meas/an", "wall");
        prompt_stats all = {0};
        double plain_over_expected = 0; /* plain time / expected speed-up, summed */
        for (int i = 0; i <= n_prompts; i++) {
            prompt_stats *q = i < n_prompts ? &ps[i] : &all;
            if (i < n_prompts) {
                all.pt += q->pt, all.st += q->st, all.pn += q->pn, all.sn += q->sn;
                all.pw += q->pw, all.sw += q->sw;
                all.dr += q->dr, all.ac += q->ac, all.pa += q->pa;
            }
            double alpha = q->dr ? (double)q->ac / q->dr : 0, k = q->pa ? (double)q->dr / q->pa : 0;
            double tpp = q->pa ? (double)q->sn / q->pa : 0;
            double speedup = (q->sn / q->st) / (q->pn / q->pt);
            double expect_tok = alpha < 1 ? (1 - pow(alpha, k + 1)) / (1 - alpha) : k + 1;
            double cost = k * c + v_at(v, k), analytic = expect_tok / cost;
            if (i < n_prompts) plain_over_expected += q->pt / analytic;
            else analytic = all.pt / plain_over_expected; /* the prompts' expectations, time-weighted */
            char name[16], toks[16];
            snprintf(name, sizeof name, i < n_prompts ? "%d" : "all", i);
            toks[0] = 0;
            if (i < n_prompts) snprintf(toks, sizeof toks, "%d", q->n_prompt);
            printf("%-6s %6s %9.2f %9.2f %7.2fx %5.1f%% %5.2f %6.2f %7.2fx %7.2fx %6.0f%% %5.2fx\n", name,
                   toks, q->pn / q->pt, q->sn / q->st, speedup, 100 * alpha, k, tpp,
                   analytic, tpp / cost, 100 * speedup / analytic, (q->sn / q->sw) / (q->pn / q->pw));
        }
        printf("accept: acceptance rate a; k: mean draft length per target pass; tok/ps: tokens per target pass;\n"
               "analytic: (1 - a^(k+1)) / ((1 - a)(k c + v(k))); an.(tpp): tok/ps / (k c + v(k)); wall: the speed-up in "
               "wall-clock time\n");
        tk_engine_spec_info(e, &si);
        printf("the engine's online cost model: c = %.3f%s, v_slope = %.3f%s\n", si.draft_cost,
               si.draft_cost_measured ? "" : " (prior)", si.verify_slope, si.verify_measured ? "" : " (prior)");
    }
    free(ps);
    for (int i = 0; i < n_prompts; i++) free(prompts[i]);
    free(prompts);
    return rc;
}
