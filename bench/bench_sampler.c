/* Sampler micro-benchmark (not a test): build/bench_sampler [rounds]
 * Median microseconds per tk_sample call over vocabularies of 32000,
 * 128256, 151936 and 262144 tokens (Llama 2, Llama 3, Qwen, Gemma 3), for
 * the API's default
 * (plain sampling at temperature 1), top-p 0.95, top-k 40 and the CLI's
 * defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05).  The
 * logits are normal (sd 2.5) with a few far ahead, like a language model's;
 * each call samples a fresh copy of them (the copy is in the time). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sample/sampler.h"

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 11;
}

static void make_logits(float *logits, int n) {
    uint64_t s = 0x10917;
    for (int i = 0; i < n; i++) {
        const double u1 = ((double)lcg(&s) + 1) / 9007199254740993.0, u2 = (double)lcg(&s) / 9007199254740992.0;
        logits[i] = (float)(2.5 * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
    for (int k = 0; k < 5; k++) logits[lcg(&s) % (uint64_t)n] += 10.0f + 2.0f * (float)k;
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 200;
    if (rounds < 1) {
        fprintf(stderr, "usage: bench_sampler [rounds >= 1]\n");
        return 2;
    }
    const int vocabs[] = {32000, 128256, 151936, 262144};
    struct {
        const char *name;
        float temperature, top_p, min_p;
        int top_k;
    } const settings[] = {
        {"T 1 (API default)", 1, 1, 0, 0},
        {"T 1, top-p 0.95", 1, 0.95f, 0, 0},
        {"T 1, top-k 40", 1, 1, 0, 40},
        {"CLI defaults", 0.8f, 0.95f, 0.05f, 40},
    };
    double *times = malloc((size_t)rounds * sizeof *times);
    if (!times) return 1;
    printf("| vocabulary | sampling | us per token (median of %d) |\n|---|---|---|\n", rounds);
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        const int n = vocabs[v];
        float *logits = malloc((size_t)n * sizeof *logits), *work = malloc((size_t)n * sizeof *work);
        if (!logits || !work) return 1;
        make_logits(logits, n);
        for (size_t c = 0; c < sizeof settings / sizeof *settings; c++) {
            tk_sampling sp;
            tk_sampling_defaults(&sp);
            sp.temperature = settings[c].temperature;
            sp.top_p = settings[c].top_p;
            sp.min_p = settings[c].min_p;
            sp.top_k = settings[c].top_k;
            sp.repeat_penalty = 1;
            tk_sampler s;
            tk_err err;
            if (tk_sampler_init(&s, &sp, n, tk_exp_row_kernel(tk_cpu_isa()), &err)) {
                fprintf(stderr, "bench_sampler: %s\n", err.msg);
                return 1;
            }
            int sink = 0;
            for (int r = 0; r < rounds; r++) {
                const double t0 = now_us();
                memcpy(work, logits, (size_t)n * sizeof *work);
                sink += tk_sample(&s, work, NULL, 0);
                times[r] = now_us() - t0;
            }
            qsort(times, (size_t)rounds, sizeof *times, cmp_double);
            printf("| %d | %s | %.1f |\n", n, settings[c].name, times[rounds / 2]);
            if (sink < 0) printf("(never)\n");
            tk_sampler_free(&s);
        }
        free(logits);
        free(work);
    }
    free(times);
    return 0;
}
