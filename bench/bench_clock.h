/* The benchmarks' clock: this thread's CPU time in seconds (steady on a busy
 * machine, where wall time counts the other jobs too). */
#ifndef TK_BENCH_CLOCK_H
#define TK_BENCH_CLOCK_H

#include <time.h>

static inline double bench_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
