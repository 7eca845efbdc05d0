/* tokamak logits: every position's logits for a token sequence, as text
 * (one row per position) or raw little-endian float32 rows with -o. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

#include "common/args.h"
#include "commands.h"

/* Parses "1,303,281" into a malloc'd array. */
static int parse_tokens(const char *s, int32_t **out, int *n) {
    int cap = 16, count = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return -1;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "tokamak logits: --tokens: bad token id at '%s'\n", p);
            free(ids);
            return -1;
        }
        if (count == cap) {
            int32_t *nb = realloc(ids, (size_t)cap * 2 * sizeof *ids);
            if (!nb) {
                free(ids);
                return -1;
            }
            ids = nb;
            cap *= 2;
        }
        ids[count++] = (int32_t)v;
        p = end;
        while (*p == ' ') p++;
        if (*p == 0) break;
        if (*p != ',') {
            fprintf(stderr, "tokamak logits: --tokens: expected ',' at '%s'\n", p);
            free(ids);
            return -1;
        }
        p++;
    }
    *out = ids;
    *n = count;
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: tokamak logits -m MODEL --tokens ID,ID,... [-o FILE] [-t N] [-c N] [--kv-type f32|f16|q8_0] [--tp N]\n"
               "  text output: one row of logits per position; -o writes raw little-endian float32 rows\n"
               "  -c, --ctx-size: context length (default: the model's, at most 4096; LongRoPE models use\n"
               "                  their long factors when it exceeds the original context)\n"
               "  --kv-type: KV cache element type (default f16)\n%s",
            tk_tp_usage);
}

int tk_cmd_logits(int argc, char **argv) {
    tk_engine_config cfg = {.max_seqs = 1};
    const char *tokens_arg = NULL, *out_path = NULL;
    const tk_opt opts[] = {
        TK_OPT_S("-m|--model", &cfg.model_path),
        TK_OPT_S("--tokens", &tokens_arg),
        TK_OPT_S("-o", &out_path),
        TK_OPT_I("-t|--threads", &cfg.n_threads, 1, 1024),
        TK_OPT_S("--kv-type", &cfg.kv_type),
        TK_OPT_I("-c|--ctx-size", &cfg.ctx_len, 1, 1 << 24),
        TK_OPT_I("--tp", &cfg.tp, 1, TK_TP_MAX),
        TK_OPT_F("--tp-timeout", &cfg.tp_timeout, 0.001, 1e6),
    };
    const tk_cli cli = {.cmd = "logits", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts)};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    if (tk_args_missing(&cli, cfg.model_path, "-m MODEL") || tk_args_missing(&cli, tokens_arg, "--tokens")) return 2;
    int32_t *tokens;
    int n;
    if (parse_tokens(tokens_arg, &tokens, &n)) return 2;
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "tokamak logits: %s\n", err.msg);
        free(tokens);
        return 1;
    }
    if (tk_engine_tp_rank(e) > 0) {
        free(tokens);
        return tk_tp_follow_cmd("logits", e);
    }
    size_t nv = (size_t)tk_engine_n_vocab(e);
    float *logits = malloc((size_t)n * nv * sizeof(float));
    int rc = 1;
    if (!logits) {
        fprintf(stderr, "tokamak logits: out of memory\n");
    } else if (tk_engine_logits(e, tokens, n, logits, &err)) {
        fprintf(stderr, "tokamak logits: %s\n", err.msg);
    } else if (out_path) {
        FILE *f = fopen(out_path, "wb");
        if (!f || fwrite(logits, sizeof(float), (size_t)n * nv, f) != (size_t)n * nv || fclose(f) != 0)
            fprintf(stderr, "tokamak logits: cannot write %s\n", out_path);
        else
            rc = 0;
    } else {
        for (int t = 0; t < n; t++) {
            for (size_t i = 0; i < nv; i++) printf(i ? " %.9g" : "%.9g", logits[(size_t)t * nv + i]);
            putchar('\n');
        }
        rc = 0;
    }
    free(logits);
    free(tokens);
    tk_engine_close(e);
    return rc;
}
