#include "args.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <tokamak.h>

static int arg_spec(const char *cmd, int argc, char **argv, int *i, tk_spec_args *out);

static int arg_str(const char *cmd, int argc, char **argv, int *i, const char **out) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "tokamak %s: option %s needs a value\n", cmd, argv[*i]);
        return -1;
    }
    *out = argv[++*i];
    return 0;
}

static int arg_int(const char *cmd, int argc, char **argv, int *i, int64_t lo, int64_t hi, int *out) {
    const char *opt = argv[*i], *s;
    if (arg_str(cmd, argc, argv, i, &s)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "tokamak %s: %s expects an integer in [%lld, %lld], got '%s'\n", cmd, opt, (long long)lo,
                (long long)hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int arg_u64(const char *cmd, int argc, char **argv, int *i, uint64_t *out) {
    const char *opt = argv[*i], *s;
    if (arg_str(cmd, argc, argv, i, &s)) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-') {
        fprintf(stderr, "tokamak %s: %s expects a non-negative integer, got '%s'\n", cmd, opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int arg_float(const char *cmd, int argc, char **argv, int *i, double lo, double hi, float *out) {
    const char *opt = argv[*i], *s;
    if (arg_str(cmd, argc, argv, i, &s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "tokamak %s: %s expects a number in [%g, %g], got '%s'\n", cmd, opt, lo, hi, s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

static bool name_matches(const char *names, const char *arg) {
    const size_t n = strlen(arg);
    for (const char *p = names; *p;) {
        const char *end = strchr(p, '|');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !memcmp(p, arg, n)) return true;
        if (!end) break;
        p = end + 1;
    }
    return false;
}

static int parse_opt(const tk_cli *cli, const tk_opt *o, int argc, char **argv, int *i) {
    switch (o->kind) {
    case TK_OPT_STR: return arg_str(cli->cmd, argc, argv, i, (const char **)o->dst);
    case TK_OPT_INT: return arg_int(cli->cmd, argc, argv, i, (int64_t)o->lo, (int64_t)o->hi, (int *)o->dst);
    case TK_OPT_U64: return arg_u64(cli->cmd, argc, argv, i, (uint64_t *)o->dst);
    case TK_OPT_FLOAT: return arg_float(cli->cmd, argc, argv, i, o->lo, o->hi, (float *)o->dst);
    case TK_OPT_SET: *(bool *)o->dst = true; return 0;
    case TK_OPT_CLEAR: *(bool *)o->dst = false; return 0;
    }
    return -1;
}

int tk_args_parse(const tk_cli *cli, int argc, char **argv) {
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli->usage(stdout);
            return TK_ARGS_HELP;
        }
        if (cli->spec) {
            int rc = arg_spec(cli->cmd, argc, argv, &i, cli->spec);
            if (rc < 0) return TK_ARGS_ERROR;
            if (rc > 0) continue;
        }
        int k = 0;
        while (k < cli->n_opts && !name_matches(cli->opts[k].names, a)) k++;
        if (k < cli->n_opts) {
            if (parse_opt(cli, &cli->opts[k], argc, argv, &i)) return TK_ARGS_ERROR;
        } else if (a[0] != '-' && n_pos < cli->max_pos) {
            cli->pos[n_pos++] = a;
        } else {
            fprintf(stderr, "tokamak %s: %s '%s'\n", cli->cmd, a[0] == '-' ? "unknown option" : "unexpected argument", a);
            cli->usage(stderr);
            return TK_ARGS_ERROR;
        }
    }
    return TK_ARGS_OK;
}

bool tk_args_missing(const tk_cli *cli, const void *value, const char *what) {
    if (value) return false;
    fprintf(stderr, "tokamak %s: missing %s\n", cli->cmd, what);
    cli->usage(stderr);
    return true;
}

size_t tk_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024;
}

/* --spec MODE: "ngram", "draft" or "off" (tk_spec_mode). */
static int arg_spec_mode(const char *cmd, int argc, char **argv, int *i, int *out) {
    const char *opt = argv[*i], *s;
    if (arg_str(cmd, argc, argv, i, &s)) return -1;
    if (!strcmp(s, "ngram")) *out = TK_SPEC_NGRAM;
    else if (!strcmp(s, "draft")) *out = TK_SPEC_DRAFT;
    else if (!strcmp(s, "off")) *out = TK_SPEC_OFF;
    else {
        fprintf(stderr, "tokamak %s: %s expects ngram, draft or off, got '%s'\n", cmd, opt, s);
        return -1;
    }
    return 0;
}

const char tk_spec_usage[] =
    "  --draft-model PATH    a smaller model with the same vocabulary drafts tokens\n"
    "  --draft-tokenizer PATH  tokenizer for the draft model (llama2.c drafts)\n"
    "  --spec MODE           ngram (prompt lookup), draft (default with --draft-model) or off\n"
    "  --draft-max N         most draft tokens per step (default 8)\n"
    "  --draft-min N         fewest draft tokens per step (default 0: drafting pauses when it\n"
    "                        does not pay)\n";

/* If argv[*i] is a speculative decoding option, parses it (and its value)
 * into *out and returns 1; returns 0 if it is not one, -1 (after printing)
 * if its value is invalid. */
static int arg_spec(const char *cmd, int argc, char **argv, int *i, tk_spec_args *out) {
    const char *a = argv[*i];
    int rc;
    if (!strcmp(a, "--draft-model")) rc = arg_str(cmd, argc, argv, i, &out->draft_model);
    else if (!strcmp(a, "--draft-tokenizer")) rc = arg_str(cmd, argc, argv, i, &out->draft_tokenizer);
    else if (!strcmp(a, "--spec")) rc = arg_spec_mode(cmd, argc, argv, i, &out->spec_mode);
    else if (!strcmp(a, "--draft-max")) rc = arg_int(cmd, argc, argv, i, 1, 32, &out->draft_max);
    else if (!strcmp(a, "--draft-min")) rc = arg_int(cmd, argc, argv, i, 0, 32, &out->draft_min);
    else return 0;
    return rc ? -1 : 1;
}

void tk_spec_args_apply(const tk_spec_args *a, tk_engine_config *cfg) {
    cfg->draft_model_path = a->draft_model;
    cfg->draft_tokenizer_path = a->draft_tokenizer;
    cfg->spec_mode = a->spec_mode;
    cfg->draft_max = a->draft_max;
    cfg->draft_min = a->draft_min;
}

void tk_print_spec_stats(FILE *f, struct tk_engine *e, long drafted, long accepted, long passes, long tokens) {
    tk_spec_info si;
    tk_engine_spec_info(e, &si);
    double alpha = drafted > 0 ? (double)accepted / drafted : 0;
    double k = passes > 0 ? (double)drafted / passes : 0;
    fprintf(f, "speculative (%s): %ld drafted, %ld accepted (acceptance %.1f %%), mean accepted length %.2f, "
               "%.2f tokens per model pass (%ld passes)\n",
            si.spec_mode == TK_SPEC_NGRAM ? "prompt lookup" : "draft model", drafted, accepted, 100 * alpha,
            passes > 0 ? (double)accepted / passes : 0, passes > 0 ? (double)tokens / passes : 0, passes);
    double c = si.spec_mode == TK_SPEC_NGRAM ? 0 : si.draft_cost;
    /* expected speed-up at the mean draft length (a per-step average) */
    double tok = alpha < 1 ? (1 - pow(alpha, k + 1)) / (1 - alpha) : k + 1;
    fprintf(f, "cost model: draft pass c = %.3f (%s), verification v(k) = 1 + %.3f k (%s); at k = %.2f: "
               "expected %.2f tokens per pass, speed-up %.2fx\n",
            c, si.spec_mode == TK_SPEC_NGRAM ? "lookup" : si.draft_cost_measured ? "measured" : "prior",
            si.verify_slope, si.verify_measured ? "measured" : "prior", k, tok,
            tok / (k * c + 1 + si.verify_slope * k));
}

int tk_args_take_repeated(const char *cmd, const char *name, int argc, char **argv, char **rest, const char **vals,
                          int *n_vals) {
    size_t nl = strlen(name);
    int n = 0;
    *n_vals = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], name)) {
            if (i + 1 == argc) {
                fprintf(stderr, "tokamak %s: %s needs a value\n", cmd, name);
                return -1;
            }
            vals[(*n_vals)++] = argv[++i];
        } else if (i > 0 && !strncmp(argv[i], name, nl) && argv[i][nl] == '=') {
            vals[(*n_vals)++] = argv[i] + nl + 1;
        } else {
            rest[n++] = argv[i];
        }
    }
    rest[n] = NULL;
    return n;
}

const char tk_tp_usage[] = "  --tp N                tensor parallelism over N MPI ranks: mpirun -np N tokamak ...\n"
                           "                        --tp N (a build with -DTK_MPI=ON; docs/parallel.md)\n"
                           "  --tp-timeout S        end the job when a rank does not answer within S seconds\n"
                           "                        inside a forward pass (default 60; idle waits never time out)\n";

int tk_tp_follow_cmd(const char *cmd, tk_engine *e) {
    /* Rank 0 alone decides when the job ends (mpirun passes a SIGTERM or
     * ^C to every rank): it finishes, then stops the others. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    tk_err err;
    int rank = tk_engine_tp_rank(e), rc = tk_engine_tp_follow(e, &err);
    if (rc) fprintf(stderr, "tokamak %s (rank %d): %s\n", cmd, rank, err.msg);
    tk_engine_close(e);
    return rc ? 1 : 0;
}
