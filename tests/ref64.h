/* Naive float64 references of the forward pass's building blocks, for the
 * tests that check a whole tiny model against one written out by hand. */
#ifndef TK_TEST_REF64_H
#define TK_TEST_REF64_H

#include <math.h>
#include <stddef.h>

/* y[n] = RMSNorm(x[n]) * w (y may be x) */
static inline void ref64_rmsnorm(double *y, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * s * w[i];
}

/* y[out] = W[out][in] x[in] */
static inline void ref64_matvec(double *y, const float *W, const double *x, int in, int out) {
    for (int r = 0; r < out; r++) {
        double s = 0;
        for (int c = 0; c < in; c++) s += (double)W[(size_t)r * in + c] * x[c];
        y[r] = s;
    }
}

#endif
