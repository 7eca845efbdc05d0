/* Small helpers shared by the CLI commands for option values. */
#ifndef TK_ARGS_H
#define TK_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Each returns 0 on success; on failure prints "tokamak CMD: OPT: ..." and
 * returns -1. `i` is advanced past the value. */
int tk_arg_str(const char *cmd, int argc, char **argv, int *i, const char **out);
int tk_arg_int(const char *cmd, int argc, char **argv, int *i, int64_t lo, int64_t hi, int *out);
int tk_arg_u64(const char *cmd, int argc, char **argv, int *i, uint64_t *out);
int tk_arg_float(const char *cmd, int argc, char **argv, int *i, double lo, double hi, float *out);

/* The speculative decoding options shared by run, bench and serve:
 * --draft-model PATH, --draft-tokenizer PATH, --spec ngram|draft|off,
 * --draft-max N, --draft-min N. */
typedef struct tk_spec_args {
    const char *draft_model, *draft_tokenizer;
    int spec_mode;            /* tk_spec_mode; 0: the engine's default */
    int draft_max, draft_min; /* 0: the engine's defaults */
} tk_spec_args;

/* If argv[*i] is one of the options above, parses it (and its value) into
 * *out and returns 1; returns 0 if it is not one of them, -1 (after
 * printing) if its value is invalid. */
int tk_arg_spec(const char *cmd, int argc, char **argv, int *i, tk_spec_args *out);
/* Copies the options into an engine configuration (which validates them). */
struct tk_engine_config;
void tk_spec_args_apply(const tk_spec_args *a, struct tk_engine_config *cfg);
/* The options' help text (lines starting with two spaces). */
extern const char tk_spec_usage[];

struct tk_engine;
/* Prints acceptance rate, mean accepted length, tokens per model pass and
 * the speed-up the engine's measured cost model expects. */
void tk_print_spec_stats(FILE *f, struct tk_engine *e, long drafted, long accepted, long passes, long tokens);

/* Peak resident set size of this process in bytes. */
size_t tk_peak_rss(void);

#endif
