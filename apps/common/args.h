/* The CLI commands' option parsing (one table per command) and small
 * helpers they share. */
#ifndef TK_ARGS_H
#define TK_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>


/* ---- table-driven option parsing ---- */

typedef enum tk_opt_kind {
    TK_OPT_STR,   /* const char ** */
    TK_OPT_INT,   /* int *, within [lo, hi] */
    TK_OPT_U64,   /* uint64_t * */
    TK_OPT_FLOAT, /* float *, within [lo, hi] */
    TK_OPT_SET,   /* bool *: set to true, takes no value */
    TK_OPT_CLEAR, /* bool *: set to false, takes no value */
} tk_opt_kind;

typedef struct tk_opt {
    const char *names; /* spellings separated by '|': "-m|--model" */
    tk_opt_kind kind;
    void *dst;
    double lo, hi; /* TK_OPT_INT / TK_OPT_FLOAT bounds */
} tk_opt;

#define TK_NOPTS(arr) ((int)(sizeof(arr) / sizeof((arr)[0])))
#define TK_OPT_S(NAMES, DST) {NAMES, TK_OPT_STR, (DST), 0, 0}
#define TK_OPT_I(NAMES, DST, LO, HI) {NAMES, TK_OPT_INT, (DST), (LO), (HI)}
#define TK_OPT_U(NAMES, DST) {NAMES, TK_OPT_U64, (DST), 0, 0}
#define TK_OPT_F(NAMES, DST, LO, HI) {NAMES, TK_OPT_FLOAT, (DST), (LO), (HI)}
/* The sampling options the generating commands share, into a tk_sampling. */
#define TK_OPTS_SAMPLING(SP)                                           \
    TK_OPT_F("--temp", &(SP)->temperature, 0, 100),                    \
    TK_OPT_I("--top-k", &(SP)->top_k, 0, 1 << 30),                     \
    TK_OPT_F("--top-p", &(SP)->top_p, 1e-6, 1),                        \
    TK_OPT_F("--min-p", &(SP)->min_p, 0, 1),                           \
    TK_OPT_F("--repeat-penalty", &(SP)->repeat_penalty, 1e-3, 100),    \
    TK_OPT_I("--repeat-last-n", &(SP)->penalty_last_n, -1, 1 << 30)
#define TK_OPT_ON(NAMES, DST) {NAMES, TK_OPT_SET, (DST), 0, 0}
#define TK_OPT_OFF(NAMES, DST) {NAMES, TK_OPT_CLEAR, (DST), 0, 0}

struct tk_spec_args;

/* One command's command line: its options, optionally the speculative
 * decoding ones, and up to max_pos positional arguments (pos[0..]). */
typedef struct tk_cli {
    const char *cmd; /* "run": messages read "tokamak run: ..." */
    void (*usage)(FILE *f);
    const tk_opt *opts;
    int n_opts;
    struct tk_spec_args *spec;
    const char **pos;
    int max_pos;
} tk_cli;

enum { TK_ARGS_OK = 0, TK_ARGS_HELP = 1, TK_ARGS_ERROR = 2 };

/* Parses argv[1..argc).  -h/--help prints the usage to stdout and returns
 * TK_ARGS_HELP; a bad value, an unknown option or a surplus positional
 * argument prints the problem (and the usage) to stderr and returns
 * TK_ARGS_ERROR. */
int tk_args_parse(const tk_cli *cli, int argc, char **argv);

/* Prints "tokamak CMD: missing WHAT" and the usage to stderr if value is
 * NULL; returns whether it was. */
bool tk_args_missing(const tk_cli *cli, const void *value, const char *what);

/* Moves every "NAME VALUE" / "NAME=VALUE" of a repeatable option (not in
 * the option table) from argv[1..argc) to vals; argv[0] and the rest go to
 * rest (NULL-terminated; both arrays hold argc + 1).  Returns the argc
 * left, -1 (after saying so on stderr) when the last NAME has no value. */
int tk_args_take_repeated(const char *cmd, const char *name, int argc, char **argv, char **rest, const char **vals,
                          int *n_vals);

/* The speculative decoding options shared by run, bench and serve:
 * --draft-model PATH, --draft-tokenizer PATH, --spec ngram|draft|off,
 * --draft-max N, --draft-min N. */
typedef struct tk_spec_args {
    const char *draft_model, *draft_tokenizer;
    int spec_mode;            /* tk_spec_mode; 0: the engine's default */
    int draft_max, draft_min; /* 0: the engine's defaults */
} tk_spec_args;

/* Copies the options into an engine configuration (which validates them). */
struct tk_engine_config;
void tk_spec_args_apply(const tk_spec_args *a, struct tk_engine_config *cfg);
/* The options' help text (lines starting with two spaces). */
extern const char tk_spec_usage[];

struct tk_engine;
/* Prints acceptance rate, mean accepted length, tokens per model pass and
 * the speed-up the engine's measured cost model expects. */
void tk_print_spec_stats(FILE *f, struct tk_engine *e, long drafted, long accepted, long passes, long tokens);

/* A rank other than 0 of a tensor-parallel job (--tp): follows rank 0's
 * forward passes until it closes its engine, closes e and returns the
 * command's exit status (errors printed as "tokamak CMD (rank R): ..."). */
int tk_tp_follow_cmd(const char *cmd, struct tk_engine *e);
/* The --tp option's help line. */
extern const char tk_tp_usage[];

/* Peak resident set size of this process in bytes. */
size_t tk_peak_rss(void);

#endif
