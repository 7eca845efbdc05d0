/* tokamak bench: prefill (ppN), decode (tgN) and batched decode speed, like
 * llama-bench, plus the machine's memory read bandwidth measured in the same
 * run and the decode roofline it implies. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <tokamak.h>

#include "common/args.h"
#include "bench_spec.h"
#include "commands.h"

typedef struct stat_acc {
    double v[64];
    int n;
} stat_acc;

static void acc_add(stat_acc *a, double x) {
    if (a->n < 64) a->v[a->n++] = x;
}
static double acc_mean(const stat_acc *a) {
    double s = 0;
    for (int i = 0; i < a->n; i++) s += a->v[i];
    return a->n ? s / a->n : 0;
}
static double acc_sd(const stat_acc *a) {
    if (a->n < 2) return 0;
    double m = acc_mean(a), s = 0;
    for (int i = 0; i < a->n; i++) s += (a->v[i] - m) * (a->v[i] - m);
    return sqrt(s / (a->n - 1));
}
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double acc_median(const stat_acc *a) {
    double t[64];
    memcpy(t, a->v, sizeof(double) * (size_t)a->n);
    qsort(t, (size_t)a->n, sizeof(double), cmp_double);
    return a->n ? (a->n % 2 ? t[a->n / 2] : 0.5 * (t[a->n / 2 - 1] + t[a->n / 2])) : 0;
}

/* ---- memory bandwidth: each thread sums its slice of a large buffer ----
 * Probed right after each decode run: a shared VM's bandwidth moves by
 * minutes, so a probe minutes away from the decode it is compared with said
 * 119 % of the "roofline" (session 31).  The buffer is made at the first
 * probe and kept for the next ones; with --context the probe waits until
 * after the context tests, whose peak RSS it would otherwise inflate.
 * 2 MiB pages where the kernel gives them, as the weights' panel copy has;
 * eight independent integer sums, so that one thread's adds are never the
 * bound (a chain of double adds is about 40 GB/s at 4 GHz). */
typedef struct bw_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_arg;

static void *bw_worker(void *arg) {
    bw_arg *a = arg;
    uint64_t s[8] = {0};
    for (size_t i = 0; i + 8 <= a->n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += a->p[i + k];
    a->sum = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
    return NULL;
}

typedef struct bw_probe {
    uint64_t *buf; /* made at the first probe */
    size_t bytes;
    int threads;
    bool failed;        /* no memory for the buffer: no probes */
    double best, worst; /* GB/s over the probes so far */
    int n;
} bw_probe;

static bool bw_probe_alloc(bw_probe *b) {
    void *p = NULL;
    if (posix_memalign(&p, (size_t)2 << 20, b->bytes)) {
        fprintf(stderr, "tokamak bench: no memory for the bandwidth probe\n");
        b->failed = true;
        return false;
    }
    b->buf = p;
#ifdef MADV_HUGEPAGE
    madvise(b->buf, b->bytes, MADV_HUGEPAGE);
#endif
    size_t n = b->bytes / sizeof(uint64_t);
    for (size_t i = 0; i < n; i++) b->buf[i] = i & 1023;
    return true;
}

/* Two passes over the buffer; the faster one counts. */
static void bw_probe_run(bw_probe *b) {
    if (b->failed || (!b->buf && !bw_probe_alloc(b))) return;
    size_t n = b->bytes / sizeof(uint64_t), per = n / (size_t)b->threads / 8 * 8;
    double fastest = 0;
    for (int rep = 0; rep < 2; rep++) {
        pthread_t th[64];
        bw_arg args[64];
        double t0 = tk_clock_seconds(TK_CLOCK_WALL);
        int started = 0;
        for (int i = 0; i < b->threads; i++) {
            args[i] = (bw_arg){b->buf + per * (size_t)i, per, 0};
            if (pthread_create(&th[i], NULL, bw_worker, &args[i]) == 0) started++;
            else bw_worker(&args[i]);
        }
        uint64_t sink = 0;
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < b->threads; i++) sink += args[i].sum;
        double secs = tk_clock_seconds(TK_CLOCK_WALL) - t0;
        double gbs = (double)(per * (size_t)b->threads * sizeof(uint64_t)) / secs / 1e9;
        if (sink != 12345 && gbs > fastest) fastest = gbs; /* sink keeps the sums alive */
    }
    if (b->n == 0 || fastest > b->best) b->best = fastest;
    if (b->n == 0 || fastest < b->worst) b->worst = fastest;
    b->n++;
}

/* Batch arrays allocated once, so the timed loops do not allocate. */
typedef struct feeder {
    int32_t *pos, *seq;
    uint8_t *flag;
    int cap;
} feeder;

/* Feeds n tokens of one sequence starting at pos, in chunks of at most
 * f->cap; only the last token asks for logits. */
static int feed(tk_engine *e, feeder *f, int seq, const int32_t *tok, int n, int pos, float *logits, tk_err *err) {
    int rc = 0;
    for (int done = 0; done < n && rc == 0; done += f->cap) {
        int m = n - done < f->cap ? n - done : f->cap;
        for (int i = 0; i < m; i++) {
            f->pos[i] = pos + done + i;
            f->seq[i] = seq;
            f->flag[i] = done + i == n - 1;
        }
        rc = tk_engine_decode(e, &(tk_batch){m, (int32_t *)tok + done, f->pos, f->seq, f->flag}, logits, err);
    }
    return rc;
}

static void usage(FILE *f) {
    fprintf(f, "usage: tokamak bench -m MODEL [-p 128] [-n 32] [-r 3] [-t N] [-b BATCH] [--json]\n"
               "  -p N   prompt tokens for the prefill test (0: skip)\n"
               "  -n N   generated tokens for the decode test (0: skip)\n"
               "  -r N   repetitions (median, mean and sd reported; --verify-cost: passes per size, default 41)\n"
               "  -b B   also decode B sequences at once (aggregate tokens/s)\n"
               "  --no-bandwidth   skip the memory bandwidth measurement\n"
               "  --context N,N,.. attention scaling: prefill N tokens for each context, then decode -n\n"
               "                   tokens at every context in turns (prefill t/s, median decode\n"
               "                   ms/token), with the peak RSS after each prefill\n"
               "  --context-threads N  also time the decode at each context with only N threads\n"
               "                   (after the same prefill; shows what split-KV attention gains)\n"
               "  --kv-type T      KV cache storage: f16 (default), f32, q8_0\n"
               "  --block-size N   tokens per KV block (default 64)\n"
               "%s"
               "  --fuse LIST      operator fusions: all (default), none, or norm-quant,glu,rope-kv,rope-q,residual\n"
               "  --verify-cost    time a pass over k + 1 tokens relative to one token, k = 1..8 (at\n"
               "                   context -p), and nothing else\n"
               "speculative decoding (decodes real prompts plainly and speculatively, alternating):\n"
               "%s"
               "  -f FILE        text to cut prompts from (required)\n"
               "  --prompt-chars N   characters per prompt (default 600; 0: the whole file, one prompt)\n"
               "  --n-prompts N  prompts (default 4)   -n N tokens each   -r N repetitions\n"
               "  --temp T       temperature (default 0)   --seed S\n"
               "  --cpu-time     decode speed in process CPU time (with -t 1: robust on a busy machine)\n",
            tk_tp_usage, tk_spec_usage);
}

int tk_cmd_bench(int argc, char **argv) {
    const char *model = NULL;
    tk_spec_args spec = {0};
    int pp = 128, tg = -1, reps = 0, threads = 0, batch = 0, ctx_threads = 0; /* tg, reps < defaults: not given */
    int block_size = 0, tp = 0;
    float tp_timeout = 0;
    bool json = false, bandwidth = true, verify_cost = false;
    tk_bench_spec_opts so = {.prompt_chars = 600, .n_prompts = 4, .seed = 1};
    const char *contexts = NULL, *kv_type = NULL, *fusions = NULL;
    const tk_opt opts[] = {
        TK_OPT_S("-m|--model", &model),
        TK_OPT_I("-p", &pp, 0, 1 << 20),
        TK_OPT_I("-n", &tg, 0, 1 << 20),
        TK_OPT_I("-r", &reps, 1, 256),
        TK_OPT_ON("--verify-cost", &verify_cost),
        TK_OPT_S("-f|--file", &so.prompt_file),
        TK_OPT_I("--prompt-chars", &so.prompt_chars, 0, 1 << 24),
        TK_OPT_I("--n-prompts", &so.n_prompts, 1, 1024),
        TK_OPT_F("--temp", &so.temperature, 0, 100),
        TK_OPT_U("--seed", &so.seed),
        TK_OPT_ON("--cpu-time", &so.cpu_time),
        TK_OPT_I("-t|--threads", &threads, 1, 1024),
        TK_OPT_I("-b", &batch, 0, 1024),
        TK_OPT_ON("--json", &json),
        TK_OPT_OFF("--no-bandwidth", &bandwidth),
        TK_OPT_S("--context", &contexts),
        TK_OPT_I("--context-threads", &ctx_threads, 1, 4096),
        TK_OPT_S("--kv-type", &kv_type),
        TK_OPT_I("--block-size", &block_size, 1, 4096),
        TK_OPT_S("--fuse", &fusions),
        TK_OPT_I("--tp", &tp, 1, TK_TP_MAX),
        TK_OPT_F("--tp-timeout", &tp_timeout, 0.001, 1e6),
    };
    const tk_cli cli = {.cmd = "bench", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts), .spec = &spec};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    if (tk_args_missing(&cli, model, "-m MODEL")) return 2;
    const bool tg_given = tg >= 0, reps_given = reps > 0;
    if (!tg_given) tg = 32;
    if (!reps_given) reps = 3;
    so.spec_mode = spec.spec_mode;
    so.draft_max = spec.draft_max;
    so.draft_min = spec.draft_min;
    if (spec.draft_model || (so.spec_mode && so.spec_mode != TK_SPEC_OFF)) {
        if (!so.prompt_file) {
            fprintf(stderr, "tokamak bench: speculative decoding is measured on real text: give -f FILE\n");
            return 2;
        }
        so.n_gen = tg_given ? tg : 128;
        so.reps = reps_given ? reps : 1;
        if (so.n_gen < 2) {
            fprintf(stderr, "tokamak bench: -n must be at least 2 for speculative decoding\n");
            return 2;
        }
        tk_engine_config sc = {.model_path = model, .n_threads = threads, .no_prefix_cache = true,
                               .require_tokenizer = true, .kv_type = kv_type, .fusions = fusions};
        tk_spec_args_apply(&spec, &sc);
        tk_engine *se;
        tk_err serr;
        if (tk_engine_open(&sc, &se, &serr)) {
            fprintf(stderr, "tokamak bench: %s\n", serr.msg);
            return 1;
        }
        int rc = tk_bench_spec(se, &so);
        tk_engine_close(se);
        return rc;
    }
    int ctx_list[8], n_ctx_list = 0;
    for (const char *c = contexts; c && *c && n_ctx_list < 8;) {
        char *end;
        long v = strtol(c, &end, 10);
        if (end == c || v < 1 || v > (1 << 22)) {
            fprintf(stderr, "tokamak bench: --context expects a list of positive integers\n");
            return 2;
        }
        ctx_list[n_ctx_list++] = (int)v;
        c = *end == ',' ? end + 1 : end;
    }
    int ctx = pp + tg + 8;
    if (ctx < 64) ctx = 64;
    for (int i = 0; i < n_ctx_list; i++)
        if (ctx_list[i] + tg + 8 > ctx) ctx = ctx_list[i] + tg + 8;
    int max_seqs = batch > 1 ? batch : 1;
    if (n_ctx_list > max_seqs) max_seqs = n_ctx_list; /* the contexts are decoded in turns */
    tk_engine_config cfg = {.model_path = model, .n_threads = threads, .ctx_len = ctx, .max_seqs = max_seqs,
                            .max_batch_tokens = pp > max_seqs ? (pp < 512 ? pp : 512) : max_seqs,
                            .no_prefix_cache = true, .kv_type = kv_type, .fusions = fusions,
                            .kv_block_size = block_size, .tp = tp, .tp_timeout = tp_timeout};
    if (n_ctx_list && cfg.max_batch_tokens < 512) cfg.max_batch_tokens = 512; /* context prefill in chunks */
    if (cfg.max_batch_tokens < 1) cfg.max_batch_tokens = 1;
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "tokamak bench: %s\n", err.msg);
        return 1;
    }
    if (tk_engine_tp_rank(e) > 0) return tk_tp_follow_cmd("bench", e);
    tk_model_summary ms;
    tk_engine_summary(e, &ms);
    if (verify_cost) {
        int rc = tk_bench_verify_cost(e, pp > 0 ? pp : 1, reps_given ? reps : 41);
        tk_engine_close(e);
        return rc;
    }
    int nv = tk_engine_n_vocab(e);
    int n_tok = ctx;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n_tok);
    float *logits = malloc(sizeof(float) * (size_t)nv * (size_t)(max_seqs > 1 ? max_seqs : 1));
    uint64_t x = 12345;
    for (int i = 0; i < n_tok; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        tokens[i] = (int32_t)((x >> 33) % (uint64_t)nv);
    }
    stat_acc pp_acc = {0}, tg_acc = {0}, b_acc = {0};
    feeder fd = {malloc(sizeof(int32_t) * (size_t)cfg.max_batch_tokens), malloc(sizeof(int32_t) * (size_t)cfg.max_batch_tokens),
                 malloc((size_t)cfg.max_batch_tokens), cfg.max_batch_tokens};
    int rc = 0;
    const int probe_threads = ms.n_threads > 64 ? 64 : ms.n_threads < 1 ? 1 : ms.n_threads;
    bw_probe probe = {.bytes = (size_t)512 << 20, .threads = probe_threads, .failed = !bandwidth};
    /* warm-up: touch the weights once */
    int seq = tk_engine_seq_new(e, &err);
    rc |= feed(e, &fd, seq, tokens, 4, 0, logits, &err);
    tk_engine_seq_free(e, seq);
    for (int r = 0; r < reps && rc == 0; r++) {
        if (pp > 0) {
            seq = tk_engine_seq_new(e, &err);
            double t0 = tk_clock_seconds(TK_CLOCK_WALL);
            rc |= feed(e, &fd, seq, tokens, pp, 0, logits, &err);
            acc_add(&pp_acc, pp / (tk_clock_seconds(TK_CLOCK_WALL) - t0));
            tk_engine_seq_free(e, seq);
        }
        if (tg > 0 && rc == 0) {
            /* decode from an empty context, one token per pass, as llama-bench's tgN */
            seq = tk_engine_seq_new(e, &err);
            double t0 = tk_clock_seconds(TK_CLOCK_WALL);
            for (int i = 0; i < tg && rc == 0; i++) rc |= feed(e, &fd, seq, tokens + i, 1, i, logits, &err);
            acc_add(&tg_acc, tg / (tk_clock_seconds(TK_CLOCK_WALL) - t0));
            tk_engine_seq_free(e, seq);
            if (!n_ctx_list) bw_probe_run(&probe);
        }
        if (batch > 1 && tg > 0 && rc == 0) {
            int seqs[1024];
            int32_t bt[1024], bp[1024], bs[1024];
            uint8_t bf[1024];
            for (int s = 0; s < batch; s++) {
                seqs[s] = tk_engine_seq_new(e, &err);
                rc |= feed(e, &fd, seqs[s], tokens + s, 8, 0, logits, &err);
            }
            double t0 = tk_clock_seconds(TK_CLOCK_WALL);
            for (int i = 0; i < tg && rc == 0; i++) {
                for (int s = 0; s < batch; s++) {
                    bt[s] = tokens[(s + i * 7) % n_tok];
                    bp[s] = 8 + i;
                    bs[s] = seqs[s];
                    bf[s] = 1;
                }
                rc |= tk_engine_decode(e, &(tk_batch){batch, bt, bp, bs, bf}, logits, &err);
            }
            acc_add(&b_acc, (double)batch * tg / (tk_clock_seconds(TK_CLOCK_WALL) - t0));
            for (int s = 0; s < batch; s++) tk_engine_seq_free(e, seqs[s]);
        }
    }
    /* attention scaling: prefill every context (each its own sequence), then
     * decode them in turns, one token of each per round, so that the
     * machine's drift (a shared VM's bandwidth moves by minutes) hits every
     * context alike and the ratios compare like with like */
    double ctx_pp[8] = {0}, ctx_tg_ms[8] = {0}, ctx_tg_alt_ms[8] = {0};
    const int all_threads = ms.n_threads;
    int alt_threads = ctx_threads ? tk_engine_set_threads(e, ctx_threads) : 0;
    tk_engine_set_threads(e, all_threads);
    size_t ctx_rss[8] = {0};
    int ctx_seq[8];
    for (int c = 0; c < n_ctx_list; c++) ctx_seq[c] = -1;
    for (int c = 0; c < n_ctx_list && rc == 0; c++) {
        ctx_seq[c] = tk_engine_seq_new(e, &err);
        if (ctx_seq[c] < 0) {
            rc = 1;
            break;
        }
        double t0 = tk_clock_seconds(TK_CLOCK_WALL);
        rc |= feed(e, &fd, ctx_seq[c], tokens, ctx_list[c], 0, logits, &err);
        ctx_pp[c] = ctx_list[c] / (tk_clock_seconds(TK_CLOCK_WALL) - t0);
        ctx_rss[c] = tk_peak_rss();
    }
    const int n_dec = tg > 0 ? tg : 16;
    for (int pass = 0; pass < (alt_threads ? 2 : 1) && rc == 0 && n_ctx_list; pass++) {
        /* pass 1: the same positions again with the other thread count (their
         * K/V are rewritten with the same values) */
        tk_engine_set_threads(e, pass ? alt_threads : all_threads);
        stat_acc tok_ms[8];
        memset(tok_ms, 0, sizeof tok_ms);
        for (int i = 0; i < n_dec && rc == 0; i++)
            for (int c = 0; c < n_ctx_list && rc == 0; c++) {
                double t0 = tk_clock_seconds(TK_CLOCK_WALL);
                rc |= feed(e, &fd, ctx_seq[c], tokens + (ctx_list[c] + i) % n_tok, 1, ctx_list[c] + i, logits, &err);
                acc_add(&tok_ms[c], 1e3 * (tk_clock_seconds(TK_CLOCK_WALL) - t0));
            }
        for (int c = 0; c < n_ctx_list; c++) (pass ? ctx_tg_alt_ms : ctx_tg_ms)[c] = acc_median(&tok_ms[c]);
    }
    tk_engine_set_threads(e, all_threads);
    for (int c = 0; c < n_ctx_list; c++)
        if (ctx_seq[c] >= 0) tk_engine_seq_free(e, ctx_seq[c]);
    if (!probe.n) bw_probe_run(&probe);
    free(probe.buf);
    if (rc) {
        fprintf(stderr, "tokamak bench: %s\n", err.msg);
        free(tokens);
        free(logits);
        free(fd.pos);
        free(fd.seq);
        free(fd.flag);
        tk_engine_close(e);
        return 1;
    }
    /* Decode reads every matrix once per token; of an untied embedding only
     * one row (a tied one is read whole as the output head); of the routed
     * experts the n_expert_used a token picks. */
    double bytes_per_token = (double)ms.weight_bytes;
    if (!ms.tied_output) bytes_per_token -= (double)ms.embedding_bytes;
    if (ms.n_expert > 0)
        bytes_per_token -= (double)ms.routed_expert_bytes * (1.0 - (double)ms.n_expert_used / ms.n_expert);
    double bw = probe.n ? probe.best : 0;
    double roofline = bw > 0 ? bw * 1e9 / bytes_per_token : 0;
    double tg_med = acc_median(&tg_acc);
    if (json) {
        printf("{\"model\": \"%s\", \"threads\": %d, \"kernels\": \"%s\", \"cpu\": \"%s\", \"weight_bytes\": %zu, "
               "\"panel_bytes\": %zu, \"params\": %lld", model, ms.n_threads, ms.kernels, ms.cpu, ms.weight_bytes,
               ms.panel_bytes, (long long)ms.n_params);
        if (pp) printf(", \"pp\": {\"n\": %d, \"median\": %.3f, \"mean\": %.3f, \"sd\": %.3f}", pp, acc_median(&pp_acc),
                       acc_mean(&pp_acc), acc_sd(&pp_acc));
        if (tg) printf(", \"tg\": {\"n\": %d, \"median\": %.3f, \"mean\": %.3f, \"sd\": %.3f}", tg, tg_med,
                       acc_mean(&tg_acc), acc_sd(&tg_acc));
        if (batch > 1)
            printf(", \"batched\": {\"sequences\": %d, \"n\": %d, \"median\": %.3f, \"mean\": %.3f, \"sd\": %.3f}", batch,
                   tg, acc_median(&b_acc), acc_mean(&b_acc), acc_sd(&b_acc));
        if (bw > 0)
            printf(", \"bandwidth_gbs\": %.2f, \"bandwidth_lowest_gbs\": %.2f, \"bandwidth_probes\": %d, "
                   "\"bytes_per_token\": %.0f, \"roofline_tps\": %.3f, \"roofline_pct\": %.1f",
                   bw, probe.worst, probe.n, bytes_per_token, roofline, roofline > 0 ? 100 * tg_med / roofline : 0);
        if (n_ctx_list) {
            printf(", \"contexts\": [");
            for (int c = 0; c < n_ctx_list; c++)
            {
                printf("%s{\"context\": %d, \"prefill_tps\": %.3f, \"decode_ms_per_token\": %.3f, \"peak_rss\": %zu",
                       c ? ", " : "", ctx_list[c], ctx_pp[c], ctx_tg_ms[c], ctx_rss[c]);
                if (alt_threads)
                    printf(", \"alt_threads\": %d, \"alt_decode_ms_per_token\": %.3f", alt_threads, ctx_tg_alt_ms[c]);
                printf("}");
            }
            printf("]");
        }
        printf(", \"kv_type\": \"%s\", \"kv_bytes\": %zu}\n", kv_type ? kv_type : "f16", ms.kv_bytes);
    } else {
        printf("model: %s (%s, %.1f M params, %.1f MiB of weights, %.1f MiB in the panel layout); kernels: %s\n", model,
               ms.arch, ms.n_params / 1e6, ms.weight_bytes / 1048576.0, ms.panel_bytes / 1048576.0, ms.kernels);
        printf("cpu: %s\n", ms.cpu);
        printf("%-10s %8s %12s %12s %10s\n", "test", "threads", "median t/s", "mean t/s", "sd");
        int th = ms.n_threads;
        if (pp) printf("%-10s %8d %12.2f %12.2f %10.2f\n", "pp", th, acc_median(&pp_acc), acc_mean(&pp_acc), acc_sd(&pp_acc));
        if (tg) printf("%-10s %8d %12.2f %12.2f %10.2f\n", "tg", th, tg_med, acc_mean(&tg_acc), acc_sd(&tg_acc));
        if (batch > 1)
            printf("%-10s %8d %12.2f %12.2f %10.2f   (%d sequences, aggregate)\n", "batched", th, acc_median(&b_acc),
                   acc_mean(&b_acc), acc_sd(&b_acc), batch);
        if (bw > 0)
            printf("memory read bandwidth %.2f GB/s (best of %d probe%s after the decode runs; lowest %.2f); %.1f MB "
                   "read per decoded token; roofline %.2f t/s; decode reaches %.1f %%\n",
                   bw, probe.n, probe.n == 1 ? "" : "s", probe.worst, bytes_per_token / 1e6, roofline,
                   100 * tg_med / roofline);
        for (int c = 0; c < n_ctx_list; c++) {
            printf("context %6d: prefill %8.2f t/s, decode %8.2f ms/token (%.2f t/s), peak RSS %.0f MiB\n",
                   ctx_list[c], ctx_pp[c], ctx_tg_ms[c], 1e3 / ctx_tg_ms[c], ctx_rss[c] / 1048576.0);
            if (alt_threads)
                printf("                decode with %d thread%s: %8.2f ms/token (%.2f t/s); %d threads are %.2fx faster\n",
                       alt_threads, alt_threads == 1 ? "" : "s", ctx_tg_alt_ms[c], 1e3 / ctx_tg_alt_ms[c], all_threads,
                       ctx_tg_alt_ms[c] / ctx_tg_ms[c]);
        }
        printf("KV cache: %s, %.1f MiB\n", kv_type ? kv_type : "f16", ms.kv_bytes / 1048576.0);
    }
    free(tokens);
    free(logits);
    free(fd.pos);
    free(fd.seq);
    free(fd.flag);
    tk_engine_close(e);
    return 0;
}
