/* The transport over MPI: a duplicate of MPI_COMM_WORLD whose errors are
 * returned (MPI_ERRORS_RETURN), so a failed call becomes a tk_err naming
 * it; the all-reduce is an all-gather followed by a sum in rank order. */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>

#include "tp.h"

struct tk_tp {
    MPI_Comm comm;
    int rank, size;
    float *gather; /* [size][cap]: every rank's contribution */
    size_t cap;
    int *flags;    /* [size]: tk_tp_agree */
    int failed;    /* a call failed: close aborts the job */
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

int tk_tp_open(int n, tk_tp **out, tk_err *err) {
    *out = NULL;
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
    if (tp->size != n) {
        tk_err_set(err, "--tp %d needs a job of %d ranks (mpirun -np %d); this one has %d", n, n, n, tp->size);
        tk_tp_close(tp);
        return -1;
    }
    tp->flags = malloc(sizeof(int) * (size_t)tp->size);
    if (!tp->flags) {
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
    free(tp);
}

int tk_tp_rank(const tk_tp *tp) { return tp ? tp->rank : 0; }
int tk_tp_size(const tk_tp *tp) { return tp ? tp->size : 1; }
int tk_tp_failed(const tk_tp *tp) { return tp && tp->failed; }

int tk_tp_agree(tk_tp *tp, int ok, tk_err *err) {
    int rc = MPI_Allgather(&ok, 1, MPI_INT, tp->flags, 1, MPI_INT, tp->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(tp, rc, "MPI_Allgather", err);
    if (!ok) return -1; /* err holds this rank's own reason */
    for (int r = 0; r < tp->size; r++)
        if (!tp->flags[r]) return tk_err_set(err, "tensor parallelism: rank %d failed (see its message)", r);
    return 0;
}

int tk_tp_bcast(tk_tp *tp, int32_t *buf, int n, tk_err *err) {
    int rc = MPI_Bcast(buf, n, MPI_INT32_T, 0, tp->comm);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(tp, rc, "MPI_Bcast", err);
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
    int rc = MPI_Allgather(x, (int)n, MPI_FLOAT, tp->gather, (int)n, MPI_FLOAT, tp->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(tp, rc, "MPI_Allgather", err);
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
        int rc = MPI_Gather(part, n, MPI_FLOAT, NULL, n, MPI_FLOAT, 0, tp->comm);
        return rc == MPI_SUCCESS ? 0 : mpi_fail(tp, rc, "MPI_Gather", err);
    }
    /* one rank's share: rows runs of cols floats, a row apart; consecutive
     * ranks' shares start cols floats apart */
    MPI_Datatype share, placed;
    int rc = MPI_Type_vector(rows, (int)cols, (int)cols * tp->size, MPI_FLOAT, &share);
    if (rc == MPI_SUCCESS) {
        rc = MPI_Type_create_resized(share, 0, (MPI_Aint)(cols * (int64_t)sizeof(float)), &placed);
        MPI_Type_free(&share);
    }
    if (rc != MPI_SUCCESS) return mpi_fail(tp, rc, "MPI_Type_vector", err);
    rc = MPI_Type_commit(&placed);
    if (rc == MPI_SUCCESS) rc = MPI_Gather(MPI_IN_PLACE, n, MPI_FLOAT, out, 1, placed, 0, tp->comm);
    MPI_Type_free(&placed);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(tp, rc, "MPI_Gather", err);
}
