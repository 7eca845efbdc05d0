/* The clocks every timing and timed wait in tokamak reads (one place, one
 * conversion). */
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

struct timespec tk_clock_deadline(int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}
