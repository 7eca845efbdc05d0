/* Micro-benchmark of the tensor-parallel all-reduce (tk_tp_allreduce: an
 * all-gather and a sum in rank order) between the ranks of one job, for
 * the sizes a forward pass reduces: hidden size x tokens floats.  Built
 * with -DTK_MPI=ON; run it as
 *
 *   mpirun -np 2 build-mpi/bench_allreduce [reps]
 *
 * Prints, per size, the median and the 10th percentile of a call's wall
 * time over reps calls (default 2000) on rank 0, and the bytes each rank
 * sends.  On one machine the transport is shared memory (docs/parallel.md
 * uses these figures to calibrate its model of multi-node scaling). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <tokamak.h> /* TK_TP_TIMEOUT_DEFAULT */

#include "parallel/tp.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 2000;
    if (reps < 10 || reps > 1000000) {
        fprintf(stderr, "bench_allreduce: reps must be 10 to 1000000\n");
        return 2;
    }
    tk_tp *tp;
    tk_err err;
    const char *size_env = getenv("TK_BENCH_RANKS");
    int n = size_env ? atoi(size_env) : 2;
    if (tk_tp_open(n, TK_TP_TIMEOUT_DEFAULT, &tp, &err)) {
        fprintf(stderr, "bench_allreduce: %s\n", err.msg);
        return 1;
    }
    static const int dims[] = {288, 2048, 4096, 8192};
    static const int toks[] = {1, 4, 16, 128};
    size_t largest = (size_t)8192 * 128;
    float *x = malloc(sizeof(float) * largest);
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!x || !t || tk_tp_reserve(tp, largest, &err)) {
        fprintf(stderr, "bench_allreduce: out of memory\n");
        return 1;
    }
    if (tk_tp_rank(tp) == 0) printf("ranks %d, %d calls per size\n%8s %6s %10s %12s %12s\n", n, reps, "hidden",
                                    "tokens", "bytes/rank", "median us", "p10 us");
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
            size_t len = (size_t)dims[d] * toks[k];
            for (size_t i = 0; i < len; i++) x[i] = 1e-3f * (float)(i % 1000);
            int r = reps;
            if (len >= (size_t)4096 * 128 && r > 200) r = 200; /* large sizes: fewer calls */
            for (int i = 0; i < r; i++) {
                double t0 = now();
                if (tk_tp_allreduce(tp, x, len, &err)) {
                    fprintf(stderr, "bench_allreduce: %s\n", err.msg);
                    return 1;
                }
                t[i] = now() - t0;
                for (size_t j = 0; j < len; j += 64) x[j] *= 0.5f; /* keep the values bounded */
            }
            qsort(t, (size_t)r, sizeof *t, cmp);
            if (tk_tp_rank(tp) == 0)
                printf("%8d %6d %10zu %12.1f %12.1f\n", dims[d], toks[k], len * sizeof(float), 1e6 * t[r / 2],
                       1e6 * t[r / 10]);
        }
    free(x);
    free(t);
    tk_tp_close(tp);
    return 0;
}
