/* Tensor parallelism: the transport between the ranks of one job (MPI,
 * src/parallel/tp_mpi.c, built with -DTK_MPI=ON; without it tp_none.c,
 * whose open refuses).  Nothing here includes an MPI header: the model
 * and the engine see only this interface, and a NULL tk_tp means one rank. */
#ifndef TK_TP_H
#define TK_TP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

typedef struct tk_tp tk_tp;

/* Joins the job (MPI is initialized on the first open, finalized at the
 * process's exit) and checks it has exactly n ranks.  timeout_s bounds
 * every wait inside a forward pass (the exchanges of a step; not the
 * agreement at open, nor a follower's wait for the next plan, which is
 * unbounded while the server is idle): a rank that does not answer within
 * it fails the call with a message naming that rank.  Errors of the
 * transport are returned, never fatal. */
int tk_tp_open(int n, double timeout_s, tk_tp **out, tk_err *err);
/* Leaves the job; after a failed call of the transport (a rank died or
 * cannot be reached, and the others may wait on it) aborts the whole job
 * instead, so that no rank hangs. */
void tk_tp_close(tk_tp *tp);
/* After a failed call inside a step: writes why to stderr and ends the
 * whole job (MPI_Abort), since the other ranks may wait on this one in an
 * exchange that cannot be cancelled.  Does not return. */
_Noreturn void tk_tp_abort(tk_tp *tp, const char *why);
/* Rank and size (0 and 1 for NULL); whether a call of the transport failed. */
int tk_tp_rank(const tk_tp *tp);
int tk_tp_size(const tk_tp *tp);
int tk_tp_failed(const tk_tp *tp);

/* Collective: 0 when every rank passes ok = 1, else -1 with a message
 * (this rank's own failure keeps its message). */
int tk_tp_agree(tk_tp *tp, int ok, tk_err *err);
/* Collective: n ints from rank 0 to every rank; bounded: by the timeout
 * (else the wait of an idle follower, which sleeps between polls). */
int tk_tp_bcast(tk_tp *tp, int32_t *buf, int n, bool bounded, tk_err *err);
/* Sizes the all-reduce scratch for up to n floats (at open, not per step). */
int tk_tp_reserve(tk_tp *tp, size_t n, tk_err *err);
/* Collective: x[i] = the sum over ranks of their x[i], added in rank order
 * (0 + 1 + ...) on every rank, so every rank gets the same bits whatever
 * the transport's own reduction order. */
int tk_tp_allreduce(tk_tp *tp, float *x, size_t n, tk_err *err);

/* Collective: rows x cols floats from each rank (contiguous) become columns
 * [r * cols, (r + 1) * cols) of rank 0's rows x (ranks * cols) matrix out;
 * rank 0's own share is already in place there (part == out). */
int tk_tp_gather_cols(tk_tp *tp, const float *part, int rows, int64_t cols, float *out, tk_err *err);

#endif
