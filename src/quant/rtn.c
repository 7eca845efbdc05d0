/* Round-to-nearest quantizers for the GGML block types.
 *
 * Without importance weights each block type follows llama.cpp's reference
 * quantizer (quantize_row_*_ref in ggml-quants.c) so that the bytes match
 * llama-quantize's output: the same scale searches, evaluated with the same
 * float32 operations in the same order (the build is ISO C, so GCC does not
 * fuse a*b+c into an FMA and every product is rounded as in the reference).
 *
 * The algorithms, in short:
 *  - Q4_0/Q5_0/Q8_0: symmetric, one scale per 32; Q4_0/Q5_0 map the
 *    element of largest magnitude to the most negative code (-8 / -16), so
 *    the grid is asymmetric around zero by one step.
 *  - Q4_1/Q5_1: min/max affine grid per 32.
 *  - Q2_K, Q4_K, Q5_K: per sub-block (16 or 32) an affine grid
 *    (scale, min) found by an iterative search: start from min/max, then try
 *    nstep+1 stretched grids; for each, the weighted least-squares scale and
 *    min for the rounded codes (closed form), keep the one with least
 *    weighted error.  The sub-block scales and mins are then themselves
 *    quantized (4 or 6 bits) against a half-precision super-block scale, and
 *    the codes recomputed with the quantized values.
 *  - Q3_K: symmetric per 16 with a coordinate-descent refinement of the
 *    codes (make_q3_quants), 6-bit scales.
 *  - Q6_K: symmetric per 16 with 19 trial scales (make_qx_quants), 8-bit
 *    scales.
 * With importance weights the same searches run with weights multiplied
 * by the importance (or, for the simple types, a weighted scale search),
 * and the codes are recomputed with the stored (half precision) scales. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/quant_blocks.h"
#include "quant.h"
#include "quant_internal.h"

#define GROUP_EPS 1e-15f

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* Round half to even, as the reference's magic-number trick does. */
static inline int nearest(float x) { return (int)lrintf(x); }

/* ---- scale searches (shared by the K types) ---- */

/* Symmetric codes in [-nmax, nmax-1]; weights w.  The reference's
 * make_qx_quants with rmse_type 1 (w = x*x): the starting scale maps the
 * largest magnitude to -nmax, then 18 stretched scales are tried and the
 * least-squares scale of the best code set is returned.  L gets code+nmax. */
static float sym_search(int n, int nmax, const float *x, const float *w, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, nearest(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = imax(-nmax, imin(nmax - 1, nearest(iscale * x[i])));
            sumlx += w[i] * x[i] * (float)l;
            suml2 += w[i] * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's search (make_q3_quants with rmse): codes in [-nmax, nmax-1]
 * rounded from the amax scale, then up to 5 passes of coordinate descent,
 * each code moved to its best value for the current least-squares scale if
 * that raises (sum w x l)^2 / sum w l^2.  Weights w (x*x in the reference). */
static float q3_search(int n, int nmax, const float *x, const float *w, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, nearest(iscale * x[i])));
        L[i] = (int8_t)l;
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w[i] * (float)L[i] * (float)L[i];
                int nl = imax(-nmax, imin(nmax - 1, nearest(x[i] * sl2 / slx)));
                if (nl != L[i]) {
                    slx += w[i] * x[i] * (float)nl;
                    sl2 += w[i] * (float)nl * (float)nl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Affine codes in [0, nmax] (make_qkx2_quants): value = scale * l - min_out.
 * Starts from the min/max grid (min clamped to <= 0), then tries grids with
 * nmax + rmin + rdelta*k steps over the range (k = 0..nstep), each refit by
 * weighted least squares (min forced to 0 if it would be positive), keeping
 * the one with least weighted error (absolute if use_mad, else squared).
 * Returns the scale; *min_out gets -min (>= 0). */
float tk_affine_search(int n, int nmax, const float *x, const float *w, uint8_t *L, float *min_out, float rmin,
                       float rdelta, int nstep, int use_mad) {
    uint8_t Laux[256];
    if (n > 256) return 0.0f;
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *min_out = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_err = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)imax(0, imin(nmax, nearest(iscale * (x[i] - min))));
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_err += w[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = imax(0, imin(nmax, nearest(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                err += w[i] * diff;
            }
            if (err < best_err) {
                memcpy(L, Laux, (size_t)n);
                best_err = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *min_out = -min;
    return scale;
}

/* ---- 32-element types ---- */

static void q4_0_block(const float *x, tk_block_q4_0 *y, const float *imp) {
    float d;
    if (!imp) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y->d = tk_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            /* x * id + 8.5 lies in [0.5, 16.5]: truncation rounds. */
            const int a = imin(15, (int)(x[j] * id + 8.5f));
            const int b = imin(15, (int)(x[j + 16] * id + 8.5f));
            y->qs[j] = (uint8_t)(a | (b << 4));
        }
        return;
    }
    int8_t L[32];
    d = sym_search(32, 8, x, imp, L);
    y->d = tk_f32_to_f16(d);
    const float ds = tk_f16_to_f32(y->d);
    for (int j = 0; j < 32; j++) L[j] = (int8_t)(ds ? imax(0, imin(15, nearest(x[j] / ds) + 8)) : 8);
    for (int j = 0; j < 16; j++) y->qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

static void q5_0_block(const float *x, tk_block_q5_0 *y, const float *imp) {
    int L[32];
    if (!imp) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y->d = tk_f32_to_f16(d);
        for (int j = 0; j < 32; j++) L[j] = imin(31, (int)(x[j] * id + 16.5f));
    } else {
        int8_t l8[32];
        y->d = tk_f32_to_f16(sym_search(32, 16, x, imp, l8));
        const float ds = tk_f16_to_f32(y->d);
        for (int j = 0; j < 32; j++) L[j] = ds ? imax(0, imin(31, nearest(x[j] / ds) + 16)) : 16;
    }
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        y->qs[j] = (uint8_t)((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
        qh |= (uint32_t)(L[j] >> 4) << j;
        qh |= (uint32_t)(L[j + 16] >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) y->qh[k] = (uint8_t)(qh >> (8 * k));
}

/* Q4_1 / Q5_1: min/max grid (reference) or weighted affine search. */
static void affine_block(const float *x, int nmax, float *d_out, float *m_out, int *L, const float *imp) {
    if (!imp) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / (float)nmax;
        const float id = d ? 1.0f / d : 0.0f;
        *d_out = d;
        *m_out = min;
        for (int j = 0; j < 32; j++) {
            const int q = (int)((x[j] - min) * id + 0.5f);
            /* Q4_1 clamps to 15; Q5_1's reference does not clamp (the value
             * cannot exceed 31 for finite input). */
            L[j] = nmax == 15 ? imin(15, q) : q;
        }
        return;
    }
    uint8_t l8[32];
    float mn;
    const float d = tk_affine_search(32, nmax, x, imp, l8, &mn, -1.0f, 0.1f, 20, 0);
    *d_out = d;
    *m_out = -mn;
    const float ds = tk_f16_to_f32(tk_f32_to_f16(d)), ms = tk_f16_to_f32(tk_f32_to_f16(-mn));
    for (int j = 0; j < 32; j++) L[j] = ds ? imax(0, imin(nmax, nearest((x[j] - ms) / ds))) : 0;
}

static void q4_1_block(const float *x, tk_block_q4_1 *y, const float *imp) {
    int L[32];
    float d, m;
    affine_block(x, 15, &d, &m, L, imp);
    y->d = tk_f32_to_f16(d);
    y->m = tk_f32_to_f16(m);
    for (int j = 0; j < 16; j++) y->qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

static void q5_1_block(const float *x, tk_block_q5_1 *y, const float *imp) {
    int L[32];
    float d, m;
    affine_block(x, 31, &d, &m, L, imp);
    y->d = tk_f32_to_f16(d);
    y->m = tk_f32_to_f16(m);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        y->qs[j] = (uint8_t)((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
        qh |= (uint32_t)((L[j] & 0x10) >> 4) << j;
        qh |= (uint32_t)((L[j + 16] & 0x10) >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) y->qh[k] = (uint8_t)(qh >> (8 * k));
}

static void q8_0_block(const float *x, tk_block_q8_0 *y, const float *imp) {
    if (!imp) {
        tk_quantize_row_q8_0(x, y, 32);
        return;
    }
    int8_t L[32];
    y->d = tk_f32_to_f16(sym_search(32, 128, x, imp, L));
    const float ds = tk_f16_to_f32(y->d);
    /* int8 -128 is representable but the dot kernels assume |q| <= 127 */
    for (int j = 0; j < 32; j++) y->qs[j] = (int8_t)(ds ? imax(-127, imin(127, nearest(x[j] / ds))) : 0);
}

/* ---- k-quants (super-blocks of 256) ---- */

static void q2_K_block(const float *x, tk_block_q2_K *y, const float *imp) {
    uint8_t L[256];
    float w[16], mins[16], scales[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]) * (imp ? imp[16 * j + l] : 1.0f);
        scales[j] = tk_affine_search(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, 1);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
        const float iscale = 15.0f / max_scale;
        for (int j = 0; j < 16; j++) y->scales[j] = (uint8_t)nearest(iscale * scales[j]);
        y->d = tk_f32_to_f16(max_scale / 15.0f);
    } else {
        memset(y->scales, 0, 16);
        y->d = tk_f32_to_f16(0.0f);
    }
    if (max_min > 0) {
        const float iscale = 15.0f / max_min;
        for (int j = 0; j < 16; j++) y->scales[j] |= (uint8_t)(nearest(iscale * mins[j]) << 4);
        y->dmin = tk_f32_to_f16(max_min / 15.0f);
    } else {
        y->dmin = tk_f32_to_f16(0.0f);
    }
    for (int j = 0; j < 16; j++) {
        const float d = tk_f16_to_f32(y->d) * (float)(y->scales[j] & 0xF);
        if (!d) continue;
        const float dm = tk_f16_to_f32(y->dmin) * (float)(y->scales[j] >> 4);
        for (int i = 0; i < 16; i++) L[16 * j + i] = (uint8_t)imax(0, imin(3, nearest((x[16 * j + i] + dm) / d)));
    }
    for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; l++)
            y->qs[j / 4 + l] =
                (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

static void q3_K_block(const float *x, tk_block_q3_K *y, const float *imp) {
    int8_t L[256];
    float w[256], scales[16];
    for (int i = 0; i < 256; i++) w[i] = x[i] * x[i] * (imp ? imp[i] : 1.0f);
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = q3_search(16, 4, x + 16 * j, w + 16 * j, L + 16 * j);
        const float a = fabsf(scales[j]);
        if (a > amax) {
            amax = a;
            max_scale = scales[j];
        }
    }
    memset(y->scales, 0, 12);
    if (max_scale) {
        const float iscale = -32.0f / max_scale;
        for (int j = 0; j < 16; j++) {
            const int l = imax(-32, imin(31, nearest(iscale * scales[j]))) + 32;
            if (j < 8)
                y->scales[j] = (uint8_t)(l & 0xF);
            else
                y->scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
            y->scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
        }
        y->d = tk_f32_to_f16(1 / iscale);
    } else {
        y->d = tk_f32_to_f16(0.0f);
    }
    for (int j = 0; j < 16; j++) {
        int sc = j < 8 ? y->scales[j] & 0xF : y->scales[j - 8] >> 4;
        sc = (sc | (((y->scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
        const float d = tk_f16_to_f32(y->d) * (float)sc;
        if (!d) continue;
        for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(imax(-4, imin(3, nearest(x[16 * j + i] / d))) + 4);
    }
    memset(y->hmask, 0, 32);
    /* high bit of element j goes to hmask[j % 32], bit j / 32 */
    for (int j = 0; j < 256; j++)
        if (L[j] > 3) {
            y->hmask[j % 32] |= (uint8_t)(1 << (j / 32));
            L[j] = (int8_t)(L[j] - 4);
        }
    for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; l++)
            y->qs[j / 4 + l] =
                (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* Q4_K and Q5_K share the scale search; nmax 15 or 31. */
void tk_k45_fit(const float *x, int nmax, uint8_t *L, uint8_t packed[12], uint16_t *d_out,
                       uint16_t *dmin_out, const float *imp) {
    float w[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = (av_x + fabsf(x[32 * j + l])) * (imp ? imp[32 * j + l] : 1.0f);
        scales[j] = nmax == 15 ? tk_affine_search(32, 15, x + 32 * j, w, L + 32 * j, &mins[j], -1.0f, 0.1f, 20, 0)
                               : tk_affine_search(32, 31, x + 32 * j, w, L + 32 * j, &mins[j], -0.5f, 0.1f, 15, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    memset(packed, 0, 12);
    for (int j = 0; j < 8; j++) {
        /* the reference stores nearest_int into a uint8_t before MIN(63, .) */
        const int ls = imin(63, (uint8_t)nearest(inv_scale * scales[j]));
        const int lm = imin(63, (uint8_t)nearest(inv_min * mins[j]));
        if (j < 4) {
            packed[j] = (uint8_t)ls;
            packed[j + 4] = (uint8_t)lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = tk_f32_to_f16(max_scale / 63.0f);
    *dmin_out = tk_f32_to_f16(max_min / 63.0f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        tk_k4_scale_min(j, packed, &sc, &m);
        const float d = tk_f16_to_f32(*d_out) * (float)sc;
        if (!d) continue;
        const float dm = tk_f16_to_f32(*dmin_out) * (float)m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)imax(0, imin(nmax, nearest((x[32 * j + i] + dm) / d)));
    }
}

static void q4_K_block(const float *x, tk_block_q4_K *y, const float *imp) {
    uint8_t L[256];
    tk_k45_fit(x, 15, L, y->scales, &y->d, &y->dmin, imp);
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) y->qs[32 * j + l] = (uint8_t)(L[64 * j + l] | (L[64 * j + l + 32] << 4));
}

static void q5_K_block(const float *x, tk_block_q5_K *y, const float *imp) {
    uint8_t L[256];
    tk_k45_fit(x, 31, L, y->scales, &y->d, &y->dmin, imp);
    memset(y->qh, 0, 32);
    for (int j = 0; j < 4; j++) {
        const uint8_t m1 = (uint8_t)(1 << (2 * j)), m2 = (uint8_t)(2 << (2 * j));
        for (int l = 0; l < 32; l++) {
            int l1 = L[64 * j + l], l2 = L[64 * j + l + 32];
            if (l1 > 15) {
                l1 -= 16;
                y->qh[l] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                y->qh[l] |= m2;
            }
            y->qs[32 * j + l] = (uint8_t)(l1 | (l2 << 4));
        }
    }
}

static void q6_K_block(const float *x, tk_block_q6_K *y, const float *imp) {
    int8_t L[256];
    float w[256], scales[16];
    if (imp) {
        float sum_x2 = 0;
        for (int i = 0; i < 256; i++) sum_x2 += x[i] * x[i];
        const float sigma2 = sum_x2 / 256;
        for (int i = 0; i < 256; i++) w[i] = imp[i] * sqrtf(sigma2 + x[i] * x[i]);
    } else {
        for (int i = 0; i < 256; i++) w[i] = x[i] * x[i];
    }
    float max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = sym_search(16, 32, x + 16 * j, w + 16 * j, L + 16 * j);
        const float a = fabsf(scales[j]);
        if (a > max_abs) {
            max_abs = a;
            max_scale = scales[j];
        }
    }
    if (max_abs < GROUP_EPS) {
        memset(y, 0, sizeof *y);
        return;
    }
    const float iscale = -128.0f / max_scale;
    y->d = tk_f32_to_f16(1 / iscale);
    for (int j = 0; j < 16; j++) y->scales[j] = (int8_t)imin(127, nearest(iscale * scales[j]));
    for (int j = 0; j < 16; j++) {
        const float d = tk_f16_to_f32(y->d) * (float)y->scales[j];
        if (!d) continue;
        for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(imax(-32, imin(31, nearest(x[16 * j + i] / d))) + 32);
    }
    for (int h = 0; h < 2; h++) {
        uint8_t *ql = y->ql + 64 * h, *qh = y->qh + 32 * h;
        const int8_t *Lh = L + 128 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
            ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
            qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                              ((Lh[l + 96] >> 4) << 6));
        }
    }
}

/* ---- dispatch ---- */

bool tk_quant_can_quantize(tk_dtype type) {
    switch (type) {
    case TK_F32: case TK_F16: case TK_BF16:
    case TK_Q4_0: case TK_Q4_1: case TK_Q5_0: case TK_Q5_1: case TK_Q8_0:
    case TK_Q2_K: case TK_Q3_K: case TK_Q4_K: case TK_Q5_K: case TK_Q6_K:
    case TK_NF4: case TK_NF4_DQ:
        return true;
    default:
        return false;
    }
}

#define BLOCKS(T, QK, fn)                                                             \
    do {                                                                              \
        T blk;                                                                        \
        for (int64_t i = 0; i < n / (QK); i++) {                                      \
            fn(src + i * (QK), &blk, importance ? importance + i * (QK) : NULL);      \
            memcpy(out + (size_t)i * sizeof blk, &blk, sizeof blk);                   \
        }                                                                             \
    } while (0)

int tk_quantize_row(tk_dtype type, const float *src, void *dst, int64_t n, const float *importance) {
    const tk_dtype_info *info = tk_dtype_get((int)type);
    if (!info || !tk_quant_can_quantize(type) || n <= 0 || n % info->block_elems) return -1;
    unsigned char *out = dst;
    switch (type) {
    case TK_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case TK_F16: tk_quantize_row_f16(src, dst, n); break;
    case TK_BF16: tk_quantize_row_bf16(src, dst, n); break;
    case TK_Q4_0: BLOCKS(tk_block_q4_0, 32, q4_0_block); break;
    case TK_Q4_1: BLOCKS(tk_block_q4_1, 32, q4_1_block); break;
    case TK_Q5_0: BLOCKS(tk_block_q5_0, 32, q5_0_block); break;
    case TK_Q5_1: BLOCKS(tk_block_q5_1, 32, q5_1_block); break;
    case TK_Q8_0: BLOCKS(tk_block_q8_0, 32, q8_0_block); break;
    case TK_Q2_K: BLOCKS(tk_block_q2_K, 256, q2_K_block); break;
    case TK_Q3_K: BLOCKS(tk_block_q3_K, 256, q3_K_block); break;
    case TK_Q4_K: BLOCKS(tk_block_q4_K, 256, q4_K_block); break;
    case TK_Q5_K: BLOCKS(tk_block_q5_K, 256, q5_K_block); break;
    case TK_Q6_K: BLOCKS(tk_block_q6_K, 256, q6_K_block); break;
    case TK_NF4:
    case TK_NF4_DQ: return tk_nf4_quantize_row(type, src, dst, n, importance);
    default: return -1;
    }
    return 0;
}

int tk_quantize_roundtrip(tk_dtype type, const float *src, float *dst, int64_t n, const float *importance) {
    const size_t bytes = tk_dtype_row_bytes(type, n);
    if (!bytes) return -1;
    unsigned char stack[4096];
    unsigned char *buf = bytes <= sizeof stack ? stack : malloc(bytes);
    if (!buf) return -1;
    int rc = tk_quantize_row(type, src, buf, n, importance);
    if (rc == 0) tk_dequant_row(type, buf, dst, n);
    if (buf != stack) free(buf);
    return rc;
}
