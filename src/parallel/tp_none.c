/* The transport of a build without MPI: a job of more than one rank cannot
 * be joined.  The other functions are never reached (no tk_tp exists). */
#include <stdlib.h>

#include "tp.h"

int tk_tp_open(int n, double timeout_s, tk_tp **out, tk_err *err) {
    (void)timeout_s;
    *out = NULL;
    return tk_err_set(err, "tensor parallelism over %d ranks needs a build with MPI (cmake -DTK_MPI=ON)", n);
}

void tk_tp_close(tk_tp *tp) { (void)tp; }

void tk_tp_abort(tk_tp *tp, const char *why) {
    (void)tp;
    (void)why;
    abort(); /* unreachable: no tk_tp exists without MPI */
}

int tk_tp_rank(const tk_tp *tp) {
    (void)tp;
    return 0;
}

int tk_tp_size(const tk_tp *tp) {
    (void)tp;
    return 1;
}

int tk_tp_failed(const tk_tp *tp) {
    (void)tp;
    return 0;
}

int tk_tp_agree(tk_tp *tp, int ok, tk_err *err) {
    (void)tp;
    return ok ? 0 : tk_err_set(err, "no tensor-parallel job");
}

int tk_tp_bcast(tk_tp *tp, int32_t *buf, int n, bool bounded, tk_err *err) {
    (void)tp;
    (void)bounded;
    (void)buf;
    (void)n;
    return tk_err_set(err, "no tensor-parallel job");
}

int tk_tp_reserve(tk_tp *tp, size_t n, tk_err *err) {
    (void)tp;
    (void)n;
    return tk_err_set(err, "no tensor-parallel job");
}

int tk_tp_allreduce(tk_tp *tp, float *x, size_t n, tk_err *err) {
    (void)tp;
    (void)x;
    (void)n;
    return tk_err_set(err, "no tensor-parallel job");
}

int tk_tp_gather_cols(tk_tp *tp, const float *part, int rows, int64_t cols, float *out, tk_err *err) {
    (void)tp;
    (void)part;
    (void)rows;
    (void)cols;
    (void)out;
    return tk_err_set(err, "no tensor-parallel job");
}
