#include "ops.h"

#include <math.h>

#include "../formats/dtype.h"

float tk_dot_f32(const float *a, const float *b, int64_t n) {
    /* Eight independent partial sums let the compiler use SIMD lanes
     * without reassociation flags; the order is fixed, so results do not
     * depend on the thread count. */
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    float s = 0;
    for (; i < n; i++) s += a[i] * b[i];
    return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

float tk_rms_scale(const float *x, int64_t n, float eps) {
    /* eight partial sums (lane i % 8), added pairwise at the end: the
     * compiler keeps them in vector registers, where one running sum would
     * be a chain of dependent adds (a quarter of Gemma 3's serial time) */
    double part[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) part[l] += (double)x[i + l] * x[i + l];
    for (; i < n; i++) part[i % 8] += (double)x[i] * x[i];
    double ss = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
    return 1.0f / sqrtf((float)(ss / (double)n) + eps);
}

void tk_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    const float scale = tk_rms_scale(x, n, eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

void tk_tensor_row(const tk_tensor *W, int64_t r, float *out) {
    size_t row_bytes = tk_dtype_row_bytes(W->type, W->ne[0]);
    tk_dequant_row(W->type, (const unsigned char *)W->data + (size_t)r * row_bytes, out, W->ne[0]);
}
