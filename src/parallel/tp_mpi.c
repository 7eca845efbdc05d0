/* The transport over MPI: a duplicate of MPI_COMM_WORLD whose errors are
 * returned (MPI_ERRORS_RETURN), so a failed call becomes a tk_err naming
 * it.  Every exchange is non-blocking point-to-point (MPI_Isend/Irecv with
 * each peer) completed by polling (wait_all): a wait inside a step is
 * bounded by the job's timeout and, when it runs out, names the rank that
 * did not answer (Open MPI's blocking collectives can neither be bounded
 * nor cancelled, and a stuck rank would hang every other one); an idle
 * follower waiting for the next plan sleeps between polls instead of
 * spinning.  The all-reduce is an all-gather followed by a sum in rank
 * order. */
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tp.h"

enum { TAG = 7 }; /* every exchange: the ranks make them in the same order */

struct tk_tp {
    MPI_Comm comm;
    int rank, size;
    double timeout;     /* seconds a wait inside a step may take */
    int stall_rank;     /* test hook TK_TP_TEST_STALL: this rank sleeps in its first all-reduce; -1 none */
    double stall_s;
    float *gather;      /* [size][cap]: every rank's contribution */
    size_t cap;
    int *flags;         /* [size]: tk_tp_agree */
    MPI_Request *reqs;  /* [2 * size]: receives first, then sends */
    int *peers;         /* [2 * size]: the rank of each request */
    int failed;         /* a call failed: close aborts the job */
};

/* MPI is initialized once per process and finalized at its exit, so that
 * one process can open several tensor-parallel engines in turn. */
static void finalize_at_exit(void) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

static int mpi_fail(tk_tp *tp, int rc, const char *what, tk_err *err) {
    tp->failed = 1;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = 0;
    return tk_err_set(err, "tensor parallelism: %s failed (%s): a rank may have died", what,
                      len ? msg : "unknown MPI error");
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Poll phases: spinning while the peers are about to answer (an all-reduce
 * between ranks in step takes a few microseconds, plus the time to move
 * its bytes: spinning through a large transfer keeps both ranks
 * progressing it; yielding then, on a loaded machine, hands the core to
 * other jobs for whole time slices), then yielding the core for a while,
 * then sleeping, longer and longer up to a millisecond (an idle server). */
#define SPIN_S 1e-3
#define SPIN_S_PER_BYTE 1e-9 /* 1 GB/s, well below this machine's shared-memory copies */
#define YIELD_S 10e-3
#define SLEEP_MAX_NS 1000000L

/* Completes the n requests in tp->reqs (receives first), which move bytes
 * in all.  bounded: waiting longer than tp->timeout fails the job, naming
 * the rank of the first request still pending: one whose message did not
 * come. */
static int wait_all(tk_tp *tp, int n, size_t bytes, bool bounded, const char *what, tk_err *err) {
    const double start = now_s(), spin = SPIN_S + SPIN_S_PER_BYTE * (double)bytes;
    long sleep_ns = 20000;
    for (;;) {
        int done = 0;
        int rc = MPI_Testall(n, tp->reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(tp, rc, what, err);
        if (done) return 0;
        const double waited = now_s() - start;
        if (bounded && waited > tp->timeout) {
            int late = -1;
            for (int i = 0; i < n && late < 0; i++) {
                int flag = 1;
                MPI_Test(&tp->reqs[i], &flag, MPI_STATUS_IGNORE);
                if (!flag) late = tp->peers[i];
            }
            if (late < 0) return 0; /* the last one came in meanwhile */
            tp->failed = 1;
            return tk_err_set(err,
                              "tensor parallelism: rank %d did not complete the %s within %g s (--tp-timeout): "
                              "it is stuck, stopped or unreachable",
                              late, what, tp->timeout);
        }
        if (waited < spin) continue;
        if (waited < spin + YIELD_S) {
            sched_yield();
            continue;
        }
        nanosleep(&(struct timespec){0, sleep_ns}, NULL);
        if (sleep_ns < SLEEP_MAX_NS) sleep_ns *= 2;
    }
}

/* All-gather: each rank's count values of type (elem bytes each) at mine
 * into slot r of all (all + r * count * elem), its own slot included. */
static int exchange(tk_tp *tp, const void *mine, void *all, int count, MPI_Datatype type, size_t elem, bool bounded,
                    const char *what, tk_err *err) {
    unsigned char *slots = all;
    const size_t slot = (size_t)count * elem;
    memcpy(slots + (size_t)tp->rank * slot, mine, slot);
    int n = 0;
    for (int r = 0; r < tp->size; r++) {
        if (r == tp->rank) continue;
        tp->peers[n] = r;
        int rc = MPI_Irecv(slots + (size_t)r * slot, count, type, r, TAG, tp->comm, &tp->reqs[n++]);
        if (rc != MPI_SUCCESS) return mpi_fail(tp, rc, what, err);
    }
    for (int r = 0; r < tp->size; r++) {
        if (r == tp->rank) continue;
        tp->peers[n] = r;
        int rc = MPI_Isend(mine, count, type, r, TAG, tp->comm, &tp->reqs[n++]);
        if (rc != MPI_SUCCESS) return mpi_fail(tp, rc, what, err);
    }
    return wait_all(tp, n, slot * (size_t)(tp->size - 1) * 2, bounded, what, err);
}

/* Test hook (TK_TP_TEST_STALL=RANK[:SECONDS], default 600 s): that rank
 * sleeps in its first all-reduce, as a rank that is alive but stuck. */
static void read_stall_hook(tk_tp *tp) {
    tp->stall_rank = -1;
    const char *s = getenv("TK_TP_TEST_STALL");
    if (!s || !*s) return;
    tp->stall_s = 600;
    if (sscanf(s, "%d:%lf", &tp->stall_rank, &tp->stall_s) < 1) tp->stall_rank = -1;
    if (!(tp->stall_s >= 0 && tp->stall_s <= 3600)) tp->stall_s = 600;
}

int tk_tp_open(int n, double timeout_s, tk_tp **out, tk_err *err) {
    *out = NULL;
    if (!(timeout_s > 0))
        return tk_err_set(err, "tensor parallelism: the timeout must be positive (got %g s)", timeout_s);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        /* the engine is stepped by one thread at a time, not always the one that opened it */
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) return tk_err_set(err, "tensor parallelism: MPI_Init_thread failed (%d)", rc);
        if (atexit(finalize_at_exit)) {
            MPI_Finalize();
            return tk_err_set(err, "tensor parallelism: cannot register MPI_Finalize at exit");
        }
        if (provided < MPI_THREAD_SERIALIZED)
            return tk_err_set(err, "tensor parallelism: this MPI library does not support serialized threads");
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    tk_tp *tp = calloc(1, sizeof *tp);
    if (!tp) return tk_err_set(err, "out of memory");
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &tp->comm);
    if (rc != MPI_SUCCESS) {
        free(tp);
        return tk_err_set(err, "tensor parallelism: MPI_Comm_dup failed (%d)", rc);
    }
    MPI_Comm_set_errhandler(tp->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(tp->comm, &tp->rank);
    MPI_Comm_size(tp->comm, &tp->size);
    tp->timeout = timeout_s;
    read_stall_hook(tp);
    if (tp->size != n) {
        tk_err_set(err, "--tp %d needs a job of %d ranks (mpirun -np %d); this one has %d", n, n, n, tp->size);
        tk_tp_close(tp);
        return -1;
    }
    tp->flags = malloc(sizeof(int) * (size_t)tp->size);
    tp->reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)tp->size);
    tp->peers = malloc(sizeof(int) * 2 * (size_t)tp->size);
    if (!tp->flags || !tp->reqs || !tp->peers) {
        tk_tp_close(tp);
        return tk_err_set(err, "out of memory");
    }
    *out = tp;
    return 0;
}

void tk_tp_close(tk_tp *tp) {
    if (!tp) return;
    if (tp->failed) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Comm_free(&tp->comm);
    free(tp->gather);
    free(tp->flags);
    free(tp->reqs);
    free(tp->peers);
    free(tp);
}

/* The one message the library writes itself: the process ends here, with
 * every other rank of the job, and nobody is left to return it to. */
_Noreturn void tk_tp_abort(tk_tp *tp, const char *why) {
    fprintf(stderr, "tokamak (rank %d of %d): %s; ending the job\n", tp->rank, tp->size, why);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1); /* MPI_Abort does not return; should it, the job must still end */
}

int tk_tp_rank(const tk_tp *tp) { return tp ? tp->rank : 0; }
int tk_tp_size(const tk_tp *tp) { return tp ? tp->size : 1; }
int tk_tp_failed(const tk_tp *tp) { return tp && tp->failed; }

/* At open a rank may take long to load its share: no bound. */
int tk_tp_agree(tk_tp *tp, int ok, tk_err *err) {
    if (exchange(tp, &ok, tp->flags, 1, MPI_INT, sizeof(int), false, "agreement", err)) return -1;
    if (!ok) return -1; /* err holds this rank's own reason */
    for (int r = 0; r < tp->size; r++)
        if (!tp->flags[r]) return tk_err_set(err, "tensor parallelism: rank %d failed (see its message)", r);
    return 0;
}

int tk_tp_bcast(tk_tp *tp, int32_t *buf, int n, bool bounded, tk_err *err) {
    int k = 0;
    if (tp->rank != 0) {
        tp->peers[0] = 0;
        int rc = MPI_Irecv(buf, n, MPI_INT32_T, 0, TAG, tp->comm, &tp->reqs[k++]);
        if (rc != MPI_SUCCESS) return mpi_fail(tp, rc, "broadcast", err);
        return wait_all(tp, k, sizeof(int32_t) * (size_t)n, bounded, "broadcast from rank 0", err);
    }
    for (int r = 1; r < tp->size; r++) {
        tp->peers[k] = r;
        int rc = MPI_Isend(buf, n, MPI_INT32_T, r, TAG, tp->comm, &tp->reqs[k++]);
        if (rc != MPI_SUCCESS) return mpi_fail(tp, rc, "broadcast", err);
    }
    return wait_all(tp, k, sizeof(int32_t) * (size_t)n * (size_t)k, bounded, "broadcast", err);
}

int tk_tp_reserve(tk_tp *tp, size_t n, tk_err *err) {
    if (n <= tp->cap) return 0;
    if (n > INT_MAX) return tk_err_set(err, "tensor parallelism: an all-reduce of %zu floats is too large", n);
    float *g = realloc(tp->gather, sizeof(float) * n * (size_t)tp->size);
    if (!g) return tk_err_set(err, "out of memory for the all-reduce buffer (%zu floats)", n);
    tp->gather = g;
    tp->cap = n;
    return 0;
}

int tk_tp_allreduce(tk_tp *tp, float *x, size_t n, tk_err *err) {
    if (n > tp->cap)
        return tk_err_set(err, "tensor parallelism: all-reduce of %zu floats above the %zu reserved", n, tp->cap);
    if (tp->stall_rank == tp->rank) {
        tp->stall_rank = -1;
        sleep((unsigned)tp->stall_s);
    }
    if (exchange(tp, x, tp->gather, (int)n, MPI_FLOAT, sizeof(float), true, "all-reduce", err)) return -1;
    for (size_t i = 0; i < n; i++) {
        float s = tp->gather[i];
        for (int r = 1; r < tp->size; r++) s += tp->gather[(size_t)r * n + i];
        x[i] = s;
    }
    return 0;
}

int tk_tp_gather_cols(tk_tp *tp, const float *part, int rows, int64_t cols, float *out, tk_err *err) {
    if ((int64_t)rows * cols > INT_MAX || cols * tp->size > INT_MAX)
        return tk_err_set(err, "tensor parallelism: a gather of %d x %lld floats is too large", rows, (long long)cols);
    const int n = rows * (int)cols;
    if (tp->rank != 0) {
        tp->peers[0] = 0;
        int rc = MPI_Isend(part, n, MPI_FLOAT, 0, TAG, tp->comm, &tp->reqs[0]);
        if (rc != MPI_SUCCESS) return mpi_fail(tp, rc, "logits gather", err);
        return wait_all(tp, 1, sizeof(float) * (size_t)n, true, "logits gather", err);
    }
    /* rank r's share: rows runs of cols floats, a row (ranks * cols) apart,
     * received in place at column r * cols; rank 0's own is there already */
    MPI_Datatype share;
    int rc = MPI_Type_vector(rows, (int)cols, (int)cols * tp->size, MPI_FLOAT, &share);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&share);
    if (rc != MPI_SUCCESS) return mpi_fail(tp, rc, "MPI_Type_vector", err);
    int k = 0;
    for (int r = 1; r < tp->size && rc == MPI_SUCCESS; r++) {
        tp->peers[k] = r;
        rc = MPI_Irecv(out + (size_t)r * (size_t)cols, 1, share, r, TAG, tp->comm, &tp->reqs[k++]);
    }
    MPI_Type_free(&share); /* pending receives keep their own reference */
    if (rc != MPI_SUCCESS) return mpi_fail(tp, rc, "logits gather", err);
    return wait_all(tp, k, sizeof(float) * (size_t)n * (size_t)k, true, "logits gather", err);
}
