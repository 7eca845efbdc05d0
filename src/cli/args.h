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

/* --spec MODE: "ngram", "draft" or "off" (tk_spec_mode). */
int tk_arg_spec_mode(const char *cmd, int argc, char **argv, int *i, int *out);

struct tk_engine;
/* Prints acceptance rate, mean accepted length, tokens per model pass and
 * the speed-up the engine's measured cost model expects. */
void tk_print_spec_stats(FILE *f, struct tk_engine *e, long drafted, long accepted, long passes, long tokens);

/* Peak resident set size of this process in bytes. */
size_t tk_peak_rss(void);

#endif
