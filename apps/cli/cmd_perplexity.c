/* tokamak perplexity: perplexity of a model on a text, as llama.cpp's
 * llama-perplexity measures it, plus KL divergence against saved logits of
 * a base model.
 *
 * The text is tokenized once (BOS first) and cut into non-overlapping
 * windows of --ctx tokens; each window's first token is replaced by BOS
 * and the window runs as a fresh sequence.  Position i's logits predict
 * token i+1.  Scored: every prediction (positions 0..ctx-2), or with
 * --score-second-half positions ctx/2..ctx-2 (llama-perplexity's scoring:
 * every scored token has at least ctx/2 tokens of context).
 * Perplexity = exp(mean NLL) with the standard error of the mean NLL
 * carried through exp (delta method).
 *
 * --save-logits FILE keeps, for every prediction of every window, the top-K
 * log-probabilities (K = --top-k, default 64) with their token ids; the
 * rest of the distribution is kept implicitly as the remaining mass.
 * Layout (little-endian): "TKLOGIT1", u32 version (1), n_vocab, ctx,
 * n_windows, K, 0; the window tokens (n_windows * ctx int32); then for each
 * window and position 0..ctx-2: K x (int32 id, float32 log-prob), best
 * first.
 * --kl-base FILE compares this model with the saved base on the same
 * tokens: KL(base || this) is computed over the base's top-K tokens plus one
 * bucket for everything else, i.e. the exact KL between the two
 * distributions coarsened to K+1 outcomes.  That is a lower bound of the
 * full KL (merging outcomes never increases KL); with K = 64 the bucket
 * holds little mass and the bound is tight (docs/quantization.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tokamak.h>

#include "common/args.h"
#include "common/progress.h"
#include "commands.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tokamak perplexity -m MODEL -f TEXT [options]\n"
               "  --ctx N                tokens per window (default 256)\n"
               "  --batch N              tokens per forward pass (default: the window)\n"
               "  --chunks N             evaluate only the first N windows\n"
               "  --score-second-half    score positions ctx/2.. of each window (llama-perplexity's way)\n"
               "  --save-logits FILE     save the top-K log-probabilities of every position\n"
               "  --kl-base FILE         KL divergence / top-1 agreement against saved base logits (top-K)\n"
               "  --kl-base-model MODEL  the same, exact: runs the base model alongside (twice the work)\n"
               "  --top-k K              log-probabilities kept by --save-logits (default 64)\n"
               "  --tokenizer PATH       tokenizer for llama2.c models\n"
               "  -t, --threads N        worker threads\n");
}

typedef struct entry {
    int32_t id;
    float lp;
} entry;

/* log-sum-exp of a logits row, in double */
static double lse(const float *l, int n) {
    float mx = l[0];
    for (int i = 1; i < n; i++)
        if (l[i] > mx) mx = l[i];
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)l[i] - mx);
    return mx + log(s);
}

/* top-K of a row as log-probs: a min-heap-free partial selection (K small) */
static void topk(const float *l, int n, double z, int K, entry *out) {
    int cnt = 0;
    for (int i = 0; i < n; i++) {
        const float v = l[i];
        if (cnt == K && v <= out[K - 1].lp) continue;
        int k = cnt < K ? cnt++ : K - 1;
        while (k > 0 && out[k - 1].lp < v) {
            out[k] = out[k - 1];
            k--;
        }
        out[k].id = i;
        out[k].lp = v;
    }
    for (int k = 0; k < K; k++) out[k].lp = (float)((double)out[k].lp - z);
}

typedef struct base_file {
    tk_mapfile map;
    int n_vocab, ctx, n_windows, K;
    const int32_t *tokens; /* unaligned-safe: read with memcpy */
    const unsigned char *rows;
} base_file;

static int open_base(const char *path, base_file *b, tk_err *err) {
    if (tk_mapfile_open(&b->map, path, err)) return -1;
    uint32_t h[6];
    if (b->map.size < 32 || memcmp(b->map.data, "TKLOGIT1", 8)) {
        tk_mapfile_close(&b->map);
        return tk_err_set(err, "%s: not a tokamak logits file (magic TKLOGIT1)", path);
    }
    memcpy(h, b->map.data + 8, sizeof h);
    b->n_vocab = (int)h[1];
    b->ctx = (int)h[2];
    b->n_windows = (int)h[3];
    b->K = (int)h[4];
    const uint64_t ntok = (uint64_t)h[3] * h[2];
    const uint64_t need = 32 + ntok * 4 + (uint64_t)h[3] * (h[2] > 0 ? h[2] - 1 : 0) * h[4] * 8;
    if (h[0] != 1 || h[2] < 2 || h[4] < 1 || h[4] > h[1] || need != b->map.size) {
        tk_mapfile_close(&b->map);
        return tk_err_set(err, "%s: corrupt logits file (version %u, ctx %u, top-k %u, %zu bytes, expected %llu)",
                          path, h[0], h[2], h[4], b->map.size, (unsigned long long)need);
    }
    b->tokens = (const int32_t *)(b->map.data + 32);
    b->rows = b->map.data + 32 + ntok * 4;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { HIT_THIS = 1, HIT_BASE = 2, HIT_SAME = 4 };

/* Aggregates the predictions at positions >= first of every window. */
static void report(const char *label, int first, int ctx, int n_windows, const double *nll, const double *kls,
                   const uint8_t *hits, bool base, int baseK) {
    const int per = ctx - 1;
    size_t n = 0, this_ok = 0, base_ok = 0, same = 0;
    double sum = 0, kl_sum = 0, kl_max = 0;
    for (int w = 0; w < n_windows; w++)
        for (int i = first; i < per; i++) {
            const size_t k = (size_t)w * per + i;
            n++;
            sum += nll[k];
            kl_sum += kls[k];
            if (kls[k] > kl_max) kl_max = kls[k];
            this_ok += (hits[k] & HIT_THIS) != 0;
            base_ok += (hits[k] & HIT_BASE) != 0;
            same += (hits[k] & HIT_SAME) != 0;
        }
    if (!n) return;
    const double mean = sum / (double)n, kl_mean = kl_sum / (double)n;
    double var = 0, kl_var = 0;
    double *sorted = base ? malloc(sizeof(double) * n) : NULL;
    size_t m = 0;
    for (int w = 0; w < n_windows; w++)
        for (int i = first; i < per; i++) {
            const size_t k = (size_t)w * per + i;
            var += (nll[k] - mean) * (nll[k] - mean);
            kl_var += (kls[k] - kl_mean) * (kls[k] - kl_mean);
            if (sorted) sorted[m++] = kls[k];
        }
    const double dn = (double)(n > 1 ? n - 1 : 1);
    const double se = sqrt(var / dn / (double)n), ppl = exp(mean);
    printf("[%s] scored %zu tokens (positions %d..%d of each window)\n", label, n, first, per - 1);
    printf("[%s] perplexity: %.4f +/- %.4f (mean NLL %.6f +/- %.6f)\n", label, ppl, ppl * se, mean, se);
    printf("[%s] top-1 accuracy on the text: %.3f %%\n", label, 100.0 * (double)this_ok / (double)n);
    if (base) {
        double p50 = 0, p99 = 0;
        if (sorted) {
            qsort(sorted, n, sizeof(double), cmp_double);
            p50 = sorted[n / 2];
            p99 = sorted[(size_t)(0.99 * (double)(n - 1))];
        }
        char how[48];
        if (baseK > 0)
            snprintf(how, sizeof how, "top-%d + rest: a lower bound", baseK);
        else
            snprintf(how, sizeof how, "exact, full vocabulary");
        printf("[%s] KL(base || this): mean %.6f +/- %.6f, median %.6f, p99 %.6f, max %.6f (%s)\n", label, kl_mean,
               sqrt(kl_var / dn / (double)n), p50, p99, kl_max, how);
        printf("[%s] same top-1 as base (top-1 agreement): %.3f %%; base top-1 accuracy on the text: %.3f %%\n", label,
               100.0 * (double)same / (double)n, 100.0 * (double)base_ok / (double)n);
    }
    free(sorted);
}

int tk_cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *text_path = NULL, *save_path = NULL, *base_path = NULL, *tok_path = NULL;
    const char *base_model = NULL;
    int ctx = 256, batch = 0, chunks = 0, K = 64, n_threads = 0;
    bool second_half = false;
    const tk_opt opts[] = {
        TK_OPT_S("-m|--model", &model),
        TK_OPT_S("-f|--file", &text_path),
        TK_OPT_I("-c|--ctx", &ctx, 2, 1 << 20),
        TK_OPT_I("-b|--batch", &batch, 1, 1 << 20),
        TK_OPT_I("--chunks", &chunks, 1, 1 << 30),
        TK_OPT_I("--top-k", &K, 1, 1 << 20),
        TK_OPT_ON("--score-second-half", &second_half),
        TK_OPT_S("--save-logits", &save_path),
        TK_OPT_S("--kl-base", &base_path),
        TK_OPT_S("--kl-base-model", &base_model),
        TK_OPT_S("--tokenizer", &tok_path),
        TK_OPT_I("-t|--threads", &n_threads, 1, 1024),
    };
    const tk_cli cli = {.cmd = "perplexity", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts)};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    if (tk_args_missing(&cli, model, "-m MODEL") || tk_args_missing(&cli, text_path, "-f TEXT")) return 2;
    if ((save_path != NULL) + (base_path != NULL) + (base_model != NULL) > 1) {
        fprintf(stderr, "tokamak perplexity: --save-logits, --kl-base and --kl-base-model exclude each other\n");
        return 2;
    }
    tk_err err;
    char *text = NULL;
    size_t len = 0;
    if (tk_read_file(text_path, &text, &len, &err)) {
        fprintf(stderr, "tokamak perplexity: %s\n", err.msg);
        return 1;
    }
    tk_engine_config cfg = {.model_path = model, .tokenizer_path = tok_path, .n_threads = n_threads, .ctx_len = ctx,
                            .max_batch_tokens = batch > 0 ? batch : ctx, .require_tokenizer = true,
                            .no_prefix_cache = true};
    tk_engine *e = NULL;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "tokamak perplexity: %s\n", err.msg);
        free(text);
        return 1;
    }
    int rc = 1;
    tk_engine *eb = NULL;
    float *blogits = NULL;
    FILE *save = NULL;
    char save_tmp[4096] = "";
    base_file base = {0};
    bool base_open = false;
    int32_t *tokens = NULL;
    float *logits = NULL;
    double *nll = NULL, *kls = NULL;
    uint8_t *hits = NULL;
    entry *ent = NULL;
    const tk_tokenizer *tok = tk_engine_tokenizer(e);
    const int nv = tk_engine_n_vocab(e);
    if (K > nv) K = nv;
    int n = 0, cap = (int)(len < (1u << 28) ? len : (1u << 28)) + 16;
    tokens = malloc(sizeof(int32_t) * (size_t)cap);
    if (!tokens || tk_tokenize(tok, text, len, true, false, tokens, cap, &n, &err)) {
        fprintf(stderr, "tokamak perplexity: %s: %s\n", text_path, tokens ? err.msg : "out of memory");
        goto done;
    }
    if (n > cap) n = cap;
    int n_windows = n / ctx;
    if (chunks > 0 && n_windows > chunks) n_windows = chunks;
    if (n_windows < 1) {
        fprintf(stderr, "tokamak perplexity: %s has %d tokens, fewer than one window of %d\n", text_path, n, ctx);
        goto done;
    }
    const int bos = tk_tokenizer_bos(tok);
    if (bos >= 0)
        for (int w = 0; w < n_windows; w++) tokens[(size_t)w * ctx] = bos;
    const int per_window = ctx - 1; /* predictions per window; scoring picks a subset */
    const size_t n_pred = (size_t)n_windows * per_window;
    logits = malloc(sizeof(float) * (size_t)ctx * nv);
    nll = malloc(sizeof(double) * n_pred);
    kls = malloc(sizeof(double) * n_pred);
    hits = malloc(n_pred);
    ent = malloc(sizeof(entry) * (size_t)(K > 0 ? K : 1));
    if (!logits || !nll || !ent || !kls || !hits) {
        fprintf(stderr, "tokamak perplexity: out of memory\n");
        goto done;
    }
    if (base_model) {
        tk_engine_config bc = cfg;
        bc.model_path = base_model;
        bc.tokenizer_path = NULL;
        bc.require_tokenizer = false;
        if (tk_engine_open(&bc, &eb, &err)) {
            fprintf(stderr, "tokamak perplexity: base model: %s\n", err.msg);
            goto done;
        }
        if (tk_engine_n_vocab(eb) != nv) {
            fprintf(stderr, "tokamak perplexity: base model has %d tokens in its vocabulary, this one %d\n",
                    tk_engine_n_vocab(eb), nv);
            goto done;
        }
        blogits = malloc(sizeof(float) * (size_t)ctx * nv);
        if (!blogits) {
            fprintf(stderr, "tokamak perplexity: out of memory\n");
            goto done;
        }
    }
    if (base_path) {
        if (open_base(base_path, &base, &err)) {
            fprintf(stderr, "tokamak perplexity: %s\n", err.msg);
            goto done;
        }
        base_open = true;
        bool same = base.n_vocab == nv && base.ctx == ctx && base.n_windows >= n_windows;
        for (size_t i = 0; same && i < (size_t)n_windows * ctx; i++) {
            int32_t t;
            memcpy(&t, base.tokens + i, 4);
            same = t == tokens[i];
        }
        if (!same) {
            fprintf(stderr,
                    "tokamak perplexity: %s was computed on other tokens (vocab %d, ctx %d, %d windows): use the "
                    "same text, tokenizer and --ctx\n",
                    base_path, base.n_vocab, base.ctx, base.n_windows);
            goto done;
        }
    }
    if (save_path) {
        /* written under a temporary name, renamed when complete */
        snprintf(save_tmp, sizeof save_tmp, "%s.tmp.%ld", save_path, (long)getpid());
        save = fopen(save_tmp, "wb");
        if (!save) {
            fprintf(stderr, "tokamak perplexity: %s: cannot create\n", save_tmp);
            goto done;
        }
        uint32_t h[6] = {1, (uint32_t)nv, (uint32_t)ctx, (uint32_t)n_windows, (uint32_t)K, 0};
        fwrite("TKLOGIT1", 1, 8, save);
        fwrite(h, sizeof h, 1, save);
        fwrite(tokens, sizeof(int32_t), (size_t)n_windows * ctx, save);
    }
    printf("model: %s\ntext: %s, %d tokens, %d windows of %d\n", model, text_path, n, n_windows, ctx);
    const int baseK = base_open ? base.K : 0;
    entry *bent = base_open ? malloc(sizeof(entry) * (size_t)baseK) : NULL;
    if (base_open && !bent) goto done;
    double sum = 0;
    size_t k = 0;
    tk_progress bar;
    tk_progress_begin(&bar, "perplexity", "windows", 0, false);
    for (int w = 0; w < n_windows; w++) {
        const int32_t *wt = tokens + (size_t)w * ctx;
        if (tk_engine_logits(e, wt, ctx, logits, &err) || (eb && tk_engine_logits(eb, wt, ctx, blogits, &err))) {
            tk_progress_abandon(&bar);
            fprintf(stderr, "tokamak perplexity: window %d: %s\n", w, err.msg);
            free(bent);
            goto done;
        }
        for (int i = 0; i < ctx - 1; i++, k++) {
            const float *row = logits + (size_t)i * nv;
            const double z = lse(row, nv);
            if (save) {
                topk(row, nv, z, K, ent);
                if (fwrite(ent, sizeof(entry), (size_t)K, save) != (size_t)K) {
                    tk_progress_abandon(&bar);
                    fprintf(stderr, "tokamak perplexity: %s: write failed\n", save_path);
                    free(bent);
                    goto done;
                }
            }
            nll[k] = z - (double)row[wt[i + 1]];
            if (i >= (second_half ? ctx / 2 : 0)) sum += nll[k];
            int am = 0;
            for (int v = 1; v < nv; v++)
                if (row[v] > row[am]) am = v;
            hits[k] = (uint8_t)(am == wt[i + 1] ? HIT_THIS : 0);
            kls[k] = 0;
            if (base_open) {
                memcpy(bent, base.rows + ((size_t)w * (ctx - 1) + i) * (size_t)baseK * 8, (size_t)baseK * 8);
                double kl = 0, pm = 0, qm = 0;
                for (int j = 0; j < baseK; j++) {
                    const double pl = (double)bent[j].lp, lq = (double)row[bent[j].id] - z;
                    kl += exp(pl) * (pl - lq);
                    pm += exp(pl);
                    qm += exp(lq);
                }
                const double pr = fmax(1.0 - pm, 0.0), qr = fmax(1.0 - qm, 1e-30);
                if (pr > 0) kl += pr * log(pr / qr);
                kls[k] = kl > 0 ? kl : 0; /* rounding can give -1e-17 */
                hits[k] |= (uint8_t)((bent[0].id == am ? HIT_SAME : 0) | (bent[0].id == wt[i + 1] ? HIT_BASE : 0));
            } else if (eb) {
                /* exact: sum over the whole vocabulary */
                const float *br = blogits + (size_t)i * nv;
                const double zb = lse(br, nv);
                double kl = 0;
                int bam = 0;
                for (int v = 0; v < nv; v++) {
                    const double lb = (double)br[v] - zb;
                    kl += exp(lb) * (lb - ((double)row[v] - z));
                    if (br[v] > br[bam]) bam = v;
                }
                kls[k] = kl > 0 ? kl : 0;
                hits[k] |= (uint8_t)((bam == am ? HIT_SAME : 0) | (bam == wt[i + 1] ? HIT_BASE : 0));
            }
        }
        const size_t scored = (size_t)(w + 1) * (size_t)(second_half ? ctx - 1 - ctx / 2 : ctx - 1);
        char note[48];
        snprintf(note, sizeof note, "perplexity %.4f", exp(sum / (double)scored));
        tk_progress_update(&bar, w + 1, n_windows, note);
    }
    tk_progress_end(&bar, n_windows);
    free(bent);
    report(second_half ? "second half" : "all positions", second_half ? ctx / 2 : 0, ctx, n_windows, nll, kls, hits,
           base_open || eb, baseK);
    report(second_half ? "all positions" : "second half", second_half ? 0 : ctx / 2, ctx, n_windows, nll, kls, hits,
           base_open || eb, baseK);
    if (save) {
        const int bad = fclose(save) != 0 || rename(save_tmp, save_path) != 0;
        save = NULL;
        if (bad) {
            fprintf(stderr, "tokamak perplexity: %s: write failed\n", save_path);
            remove(save_tmp);
            goto done;
        }
        printf("saved top-%d log-probabilities of %d windows to %s\n", K, n_windows, save_path);
    }
    rc = 0;
done:
    if (save) {
        fclose(save);
        remove(save_tmp);
    }
    if (base_open) tk_mapfile_close(&base.map);
    tk_engine_close(eb);
    free(blogits);
    free(tokens);
    free(logits);
    free(nll);
    free(kls);
    free(hits);
    free(ent);
    free(text);
    tk_engine_close(e);
    return rc;
}
