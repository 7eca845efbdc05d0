#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

int tk_arg_str(const char *cmd, int argc, char **argv, int *i, const char **out) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "tokamak %s: option %s needs a value\n", cmd, argv[*i]);
        return -1;
    }
    *out = argv[++*i];
    return 0;
}

int tk_arg_int(const char *cmd, int argc, char **argv, int *i, int64_t lo, int64_t hi, int *out) {
    const char *opt = argv[*i], *s;
    if (tk_arg_str(cmd, argc, argv, i, &s)) return -1;
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

int tk_arg_u64(const char *cmd, int argc, char **argv, int *i, uint64_t *out) {
    const char *opt = argv[*i], *s;
    if (tk_arg_str(cmd, argc, argv, i, &s)) return -1;
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

int tk_arg_float(const char *cmd, int argc, char **argv, int *i, double lo, double hi, float *out) {
    const char *opt = argv[*i], *s;
    if (tk_arg_str(cmd, argc, argv, i, &s)) return -1;
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

size_t tk_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024;
}
