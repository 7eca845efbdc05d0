/* Naive float64 references of the forward pass's building blocks, for the
 * tests that check a whole tiny model against one written out by hand. */
#ifndef TK_TEST_REF64_H
#define TK_TEST_REF64_H

#include <math.h>
#include <stdbool.h>
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

/* RoPE on one head of hd values at position pos: rotates the pairs
 * (i, i + hd/2) when halves (the Qwen / Gemma layout), else (2i, 2i + 1)
 * (Llama GGUFs). */
static inline void ref64_rope(double *x, int hd, int pos, double theta, bool halves) {
    for (int i = 0; i < hd / 2; i++) {
        double a = pos * pow(theta, -2.0 * i / hd), c = cos(a), s = sin(a);
        int i0 = halves ? i : 2 * i, i1 = halves ? i + hd / 2 : 2 * i + 1;
        double x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

/* out[hd] = causal softmax attention of query q (position t) over the key
 * and value heads k, v of positions 0..t, stride doubles apart; window > 0
 * masks the positions p with t - p >= window.  sc: t + 1 doubles of scratch. */
static inline void ref64_attend(double *out, const double *q, const double *k, const double *v, size_t stride, int t,
                                int hd, int window, double *sc) {
    double mx = -1e300, sum = 0;
    for (int p = 0; p <= t; p++) {
        double s = 0;
        for (int d = 0; d < hd; d++) s += q[d] * k[(size_t)p * stride + d];
        sc[p] = window > 0 && t - p >= window ? -INFINITY : s / sqrt((double)hd);
        if (sc[p] > mx) mx = sc[p];
    }
    for (int d = 0; d < hd; d++) out[d] = 0;
    for (int p = 0; p <= t; p++) {
        double e = exp(sc[p] - mx);
        sum += e;
        for (int d = 0; d < hd; d++) out[d] += e * v[(size_t)p * stride + d];
    }
    for (int d = 0; d < hd; d++) out[d] /= sum;
}

#endif
