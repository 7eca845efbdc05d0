/* The clocks every timing in tokamak reads (one place, one conversion). */
#include <time.h>

#include <tokamak.h>

double tk_clock_seconds(tk_clock_kind kind) {
    clockid_t id = kind == TK_CLOCK_THREAD_CPU    ? CLOCK_THREAD_CPUTIME_ID
                   : kind == TK_CLOCK_PROCESS_CPU ? CLOCK_PROCESS_CPUTIME_ID
                                                  : CLOCK_MONOTONIC;
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
