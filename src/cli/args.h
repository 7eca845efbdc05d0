/* Small helpers shared by the CLI commands for option values. */
#ifndef TK_ARGS_H
#define TK_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Each returns 0 on success; on failure prints "tokamak CMD: OPT: ..." and
 * returns -1. `i` is advanced past the value. */
int tk_arg_str(const char *cmd, int argc, char **argv, int *i, const char **out);
int tk_arg_int(const char *cmd, int argc, char **argv, int *i, int64_t lo, int64_t hi, int *out);
int tk_arg_u64(const char *cmd, int argc, char **argv, int *i, uint64_t *out);
int tk_arg_float(const char *cmd, int argc, char **argv, int *i, double lo, double hi, float *out);

/* Peak resident set size of this process in bytes. */
size_t tk_peak_rss(void);

#endif
