/* tokamak bench: speculative decoding runs and the verification-cost table. */
#ifndef TK_BENCH_SPEC_H
#define TK_BENCH_SPEC_H

#include <stdint.h>

#include <tokamak.h>

typedef struct tk_bench_spec_opts {
    const char *prompt_file; /* text the prompts are cut from */
    int prompt_chars;        /* characters per prompt; 0: the whole file as one prompt */
    int n_prompts;
    int n_gen;               /* tokens generated per prompt */
    int reps;
    float temperature;
    uint64_t seed;
    int spec_mode;           /* 0: the engine's */
    int draft_max, draft_min;
    bool cpu_time;           /* decode speed in process CPU time (meaningful with one thread) */
} tk_bench_spec_opts;

/* Plain vs speculative decoding of the prompts; prints the table, the
 * measured costs and the analytic expectation.  Returns an exit code. */
int tk_bench_spec(tk_engine *e, const tk_bench_spec_opts *o);

/* Prints v(k) for k = 1..8: a pass over k + 1 tokens relative to one token,
 * at context ctx.  Returns an exit code. */
int tk_bench_verify_cost(tk_engine *e, int ctx, int reps);

#endif
