/* NormalFloat-4 quantization (QLoRA, Dettmers et al. 2023).
 *
 * Each block of 64 weights stores absmax = max |w| and, per weight, the
 * index of the NF4 level nearest to w / absmax.  The levels are the
 * quantiles of N(0, 1) normalised to [-1, 1] (tk_nf4_values).
 *
 * Double quantization (NF4_DQ): the float32 absmax values of up to 256
 * consecutive blocks of a row are quantized to 8 bits with one float32
 * scale and one float32 min per group (absmax = u8 * scale + min).  QLoRA
 * centres the absmax values on their mean and quantizes them to FP8; we
 * use an unsigned 8-bit affine grid over [min, max] of the group, which
 * needs no sign bit (absmax >= 0) and keeps the error below
 * (max - min) / 510.  The NF4 codes are then chosen against the
 * dequantized absmax, so the second-level error is partly absorbed.
 *
 * Rows are independent (a GGUF row is the unit a reader dequantizes), so a
 * second-level group never spans two rows; a row whose length is not a
 * multiple of 64 ends in a 32-element block.  Layouts: dtype.h. */
#include <math.h>
#include <string.h>

#include "../formats/quant_blocks.h"
#include "quant.h"
#include "quant_internal.h"

int tk_nf4_code(float x) {
    /* Binary search over the 15 midpoints between consecutive levels. */
    int lo = 0, hi = 15;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        const float t = 0.5f * (tk_nf4_values[mid] + tk_nf4_values[mid + 1]);
        if (x > t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Packs the codes of one block of L values scaled by absmax. */
static void pack_block(const float *x, int L, float absmax, unsigned char *q) {
    const float inv = absmax > 0 ? 1.0f / absmax : 0.0f;
    for (int j = 0; j < L / 2; j++) {
        const int a = tk_nf4_code(x[j] * inv), b = tk_nf4_code(x[j + L / 2] * inv);
        q[j] = (unsigned char)(a | (b << 4));
    }
}

/* The block's scale: absmax, or with importance weights the shrunken absmax
 * (16 candidates down to 70 %) that minimises the weighted squared error. */
static float block_scale(const float *x, int L, const float *imp) {
    float amax = 0;
    for (int j = 0; j < L; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
    if (!imp || amax == 0) return amax;
    float best = amax, best_err = INFINITY;
    for (int k = 0; k < 16; k++) {
        const float s = amax * (1.0f - 0.02f * (float)k), inv = 1.0f / s;
        float err = 0;
        for (int j = 0; j < L; j++) {
            const float e = x[j] - tk_nf4_values[tk_nf4_code(x[j] * inv)] * s;
            err += imp[j] * e * e;
        }
        if (err < best_err) {
            best_err = err;
            best = s;
        }
    }
    return best;
}

int tk_nf4_quantize_row(tk_dtype type, const float *src, void *dst, int64_t n, const float *imp) {
    if (n <= 0 || n % 32) return -1;
    unsigned char *out = dst;
    const int64_t nb = (n + TK_NF4_BLOCK - 1) / TK_NF4_BLOCK;
    if (type == TK_NF4) {
        for (int64_t b = 0; b < nb; b++) {
            const int64_t i = b * TK_NF4_BLOCK;
            const int L = n - i < TK_NF4_BLOCK ? (int)(n - i) : TK_NF4_BLOCK;
            const float absmax = block_scale(src + i, L, imp ? imp + i : NULL);
            memcpy(out, &absmax, 4);
            pack_block(src + i, L, absmax, out + 4);
            out += 4 + L / 2;
        }
        return 0;
    }
    if (type != TK_NF4_DQ) return -1;
    const int64_t ng = (nb + TK_NF4_DQ_GROUP - 1) / TK_NF4_DQ_GROUP;
    unsigned char *qa = out + 8 * ng, *codes = qa + nb;
    float absmax[TK_NF4_DQ_GROUP];
    for (int64_t g = 0; g < ng; g++) {
        const int64_t b0 = g * TK_NF4_DQ_GROUP;
        const int nbg = nb - b0 < TK_NF4_DQ_GROUP ? (int)(nb - b0) : TK_NF4_DQ_GROUP;
        float lo = INFINITY, hi = 0;
        for (int k = 0; k < nbg; k++) {
            const int64_t i = (b0 + k) * TK_NF4_BLOCK;
            const int L = n - i < TK_NF4_BLOCK ? (int)(n - i) : TK_NF4_BLOCK;
            absmax[k] = block_scale(src + i, L, imp ? imp + i : NULL);
            if (absmax[k] < lo) lo = absmax[k];
            if (absmax[k] > hi) hi = absmax[k];
        }
        const float gs[2] = {(hi - lo) / 255.0f, lo};
        memcpy(out + 8 * g, gs, 8);
        for (int k = 0; k < nbg; k++) {
            long q = gs[0] > 0 ? lrintf((absmax[k] - lo) / gs[0]) : 0;
            q = q < 0 ? 0 : q > 255 ? 255 : q;
            qa[b0 + k] = (unsigned char)q;
            const float a = (float)q * gs[0] + gs[1]; /* as the dequantizer computes it */
            const int64_t i = (b0 + k) * TK_NF4_BLOCK;
            const int L = n - i < TK_NF4_BLOCK ? (int)(n - i) : TK_NF4_BLOCK;
            pack_block(src + i, L, a, codes + i / 2);
        }
    }
    return 0;
}
