/* Grids and packing for externally chosen codes (GPTQ): the algorithm
 * picks a grid per group and an integer code per weight; tk_qpack_row
 * writes them into a standard container. */
#include <math.h>
#include <string.h>

#include "../formats/quant_blocks.h"
#include "quant.h"
#include "quant_internal.h"

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

bool tk_qgrid_supported(tk_dtype t) {
    return t == TK_Q4_0 || t == TK_Q4_1 || t == TK_Q5_0 || t == TK_Q5_1 || t == TK_Q8_0 || t == TK_Q4_K ||
           t == TK_Q5_K;
}

static int grid_qmax(tk_dtype t) {
    switch (t) {
    case TK_Q4_0: case TK_Q4_1: case TK_Q4_K: return 15;
    case TK_Q5_0: case TK_Q5_1: case TK_Q5_K: return 31;
    case TK_Q8_0: return 255;
    default: return 0;
    }
}

/* The K types' effective sub-block scale and min, computed as the
 * dequantizer computes them. */
static void k_sub(const tk_qgrid *g, float *d1, float *m1) {
    *d1 = tk_f16_to_f32(g->d) * (float)g->sc;
    *m1 = tk_f16_to_f32(g->m) * (float)g->mn;
}

float tk_qgrid_value(const tk_qgrid *g, int q) {
    const float d = tk_f16_to_f32(g->d);
    switch (g->type) {
    case TK_Q4_0: return (float)(q - 8) * d;
    case TK_Q5_0: return (float)(q - 16) * d;
    case TK_Q8_0: return (float)(q - 128) * d;
    case TK_Q4_1:
    case TK_Q5_1: return (float)q * d + tk_f16_to_f32(g->m);
    case TK_Q4_K:
    case TK_Q5_K: {
        float d1, m1;
        k_sub(g, &d1, &m1);
        return d1 * (float)q - m1;
    }
    default: return NAN;
    }
}

int tk_qgrid_code(const tk_qgrid *g, float x) {
    const float d = tk_f16_to_f32(g->d);
    switch (g->type) {
    case TK_Q4_0: return d ? clampi((int)lrintf(x / d) + 8, 0, 15) : 8;
    case TK_Q5_0: return d ? clampi((int)lrintf(x / d) + 16, 0, 31) : 16;
    case TK_Q8_0: return d ? clampi((int)lrintf(x / d) + 128, 1, 255) : 128;
    case TK_Q4_1:
    case TK_Q5_1: return d ? clampi((int)lrintf((x - tk_f16_to_f32(g->m)) / d), 0, g->qmax) : 0;
    case TK_Q4_K:
    case TK_Q5_K: {
        float d1, m1;
        k_sub(g, &d1, &m1);
        return d1 ? clampi((int)lrintf((x + m1) / d1), 0, g->qmax) : 0;
    }
    default: return 0;
    }
}

void tk_qgrid_fit(tk_dtype type, const float *x, int n, tk_qgrid *g) { tk_qgrid_fit_clip(type, x, n, 1.0f, g); }

void tk_qgrid_fit_clip(tk_dtype type, const float *x, int n, float ratio, tk_qgrid *g) {
    memset(g, 0, sizeof *g);
    g->type = type;
    g->qmax = grid_qmax(type);
    float amax = 0, max = 0, lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    /* clipping: the grid covers ratio times the range (codes saturate) */
    amax *= ratio;
    max *= ratio;
    lo *= ratio;
    hi *= ratio;
    switch (type) {
    case TK_Q4_0: g->d = tk_f32_to_f16(max / -8); break;
    case TK_Q5_0: g->d = tk_f32_to_f16(max / -16); break;
    case TK_Q8_0: g->d = tk_f32_to_f16(amax / 127); break;
    case TK_Q4_1:
    case TK_Q5_1:
        g->d = tk_f32_to_f16((hi - lo) / (float)g->qmax);
        g->m = tk_f32_to_f16(lo);
        break;
    case TK_Q4_K:
    case TK_Q5_K: {
        /* one group alone: the sub-block scale and min take the full 6-bit
         * range of their own super-block scales */
        const float mn = lo < 0 ? -lo : 0;
        const float sc = (hi + mn) / (float)g->qmax;
        g->d = tk_f32_to_f16(sc / 63);
        g->m = tk_f32_to_f16(mn / 63);
        g->sc = sc > 0 ? 63 : 0;
        g->mn = mn > 0 ? 63 : 0;
        break;
    }
    default: break;
    }
}

void tk_qgrid_fit_k(tk_dtype type, const float *x, tk_qgrid sub[8]) {
    uint8_t L[256], packed[12];
    uint16_t d, dmin;
    const int nmax = type == TK_Q5_K ? 31 : 15;
    tk_k45_fit(x, nmax, L, packed, &d, &dmin, NULL);
    for (int j = 0; j < 8; j++) {
        memset(&sub[j], 0, sizeof sub[j]);
        sub[j].type = type;
        sub[j].qmax = nmax;
        sub[j].d = d;
        sub[j].m = dmin;
        tk_k4_scale_min(j, packed, &sub[j].sc, &sub[j].mn);
    }
}

/* Weighted squared error of x on grid g (weights as the reference's). */
static float grid_err(const tk_qgrid *g, const float *x, const float *w, int n) {
    float e = 0;
    for (int i = 0; i < n; i++) {
        const float d = x[i] - tk_qgrid_value(g, tk_qgrid_code(g, x[i]));
        e += w[i] * d * d;
    }
    return e;
}

void tk_qgrid_refit_k(tk_qgrid *g, const float *x, int n) {
    if (n > 256) n = 256;
    float w[256], sum_x2 = 0;
    uint8_t L[256];
    for (int i = 0; i < n; i++) sum_x2 += x[i] * x[i];
    const float av_x = sqrtf(sum_x2 / (float)n);
    for (int i = 0; i < n; i++) w[i] = av_x + fabsf(x[i]);
    float mn;
    const float sc = tk_affine_search(n, g->qmax, x, w, L, &mn, g->qmax == 15 ? -1.0f : -0.5f, 0.1f,
                                      g->qmax == 15 ? 20 : 15, 0);
    const float D = tk_f16_to_f32(g->d), Dm = tk_f16_to_f32(g->m);
    const int s0 = D > 0 ? clampi((int)lrintf(sc / D), 0, 63) : 0;
    const int m0 = Dm > 0 ? clampi((int)lrintf(mn / Dm), 0, 63) : 0;
    /* the rounded 6-bit pair and its neighbours: keep the best */
    tk_qgrid best = *g, t = *g;
    float best_err = INFINITY;
    for (int ds = -1; ds <= 1; ds++)
        for (int dm = -1; dm <= 1; dm++) {
            const int s = s0 + ds, m = m0 + dm;
            if (s < 0 || s > 63 || m < 0 || m > 63) continue;
            t.sc = (uint8_t)s;
            t.mn = (uint8_t)m;
            const float e = grid_err(&t, x, w, n);
            if (e < best_err) {
                best_err = e;
                best = t;
            }
        }
    *g = best;
}

int tk_qpack_row(tk_dtype type, const uint8_t *codes, const tk_qgrid *grids, int64_t n, void *dst, tk_err *err) {
    if (!tk_qgrid_supported(type)) return tk_err_set(err, "type %d cannot hold external codes", (int)type);
    const tk_dtype_info *info = tk_dtype_get((int)type);
    if (n <= 0 || n % info->block_elems)
        return tk_err_set(err, "row of %lld is not a whole number of %s blocks", (long long)n, info->name);
    const int qmax = grid_qmax(type);
    for (int64_t i = 0; i < n; i++)
        if (codes[i] > qmax || (type == TK_Q8_0 && codes[i] == 0))
            return tk_err_set(err, "code %d at %lld outside the %s range", codes[i], (long long)i, info->name);
    for (int64_t b = 0; b < n / 32; b++)
        if (grids[b].type != type) return tk_err_set(err, "grid %lld is not a %s grid", (long long)b, info->name);
    unsigned char *out = dst;
    switch (type) {
    case TK_Q4_0:
    case TK_Q4_1:
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *c = codes + 32 * b;
            uint8_t qs[16];
            for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(c[j] | (c[j + 16] << 4));
            if (type == TK_Q4_0) {
                tk_block_q4_0 y = {.d = grids[b].d};
                memcpy(y.qs, qs, 16);
                memcpy(out + b * sizeof y, &y, sizeof y);
            } else {
                tk_block_q4_1 y = {.d = grids[b].d, .m = grids[b].m};
                memcpy(y.qs, qs, 16);
                memcpy(out + b * sizeof y, &y, sizeof y);
            }
        }
        break;
    case TK_Q5_0:
    case TK_Q5_1:
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *c = codes + 32 * b;
            uint8_t qs[16], qh[4];
            uint32_t h = 0;
            for (int j = 0; j < 16; j++) {
                qs[j] = (uint8_t)((c[j] & 0xF) | ((c[j + 16] & 0xF) << 4));
                h |= (uint32_t)(c[j] >> 4) << j;
                h |= (uint32_t)(c[j + 16] >> 4) << (j + 16);
            }
            for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
            if (type == TK_Q5_0) {
                tk_block_q5_0 y = {.d = grids[b].d};
                memcpy(y.qs, qs, 16);
                memcpy(y.qh, qh, 4);
                memcpy(out + b * sizeof y, &y, sizeof y);
            } else {
                tk_block_q5_1 y = {.d = grids[b].d, .m = grids[b].m};
                memcpy(y.qs, qs, 16);
                memcpy(y.qh, qh, 4);
                memcpy(out + b * sizeof y, &y, sizeof y);
            }
        }
        break;
    case TK_Q8_0:
        for (int64_t b = 0; b < n / 32; b++) {
            tk_block_q8_0 y = {.d = grids[b].d};
            for (int j = 0; j < 32; j++) y.qs[j] = (int8_t)(codes[32 * b + j] - 128);
            memcpy(out + b * sizeof y, &y, sizeof y);
        }
        break;
    case TK_Q4_K:
    case TK_Q5_K:
        for (int64_t s = 0; s < n / 256; s++) {
            const tk_qgrid *g = grids + 8 * s;
            const uint8_t *c = codes + 256 * s;
            uint8_t packed[12] = {0};
            for (int j = 0; j < 8; j++) {
                if (g[j].d != g[0].d || g[j].m != g[0].m)
                    return tk_err_set(err, "super-block %lld: sub-block grids do not share d/dmin", (long long)s);
                if (g[j].sc > 63 || g[j].mn > 63)
                    return tk_err_set(err, "super-block %lld: 6-bit scale out of range", (long long)s);
                if (j < 4) {
                    packed[j] = g[j].sc;
                    packed[j + 4] = g[j].mn;
                } else {
                    packed[j + 4] = (uint8_t)((g[j].sc & 0xF) | ((g[j].mn & 0xF) << 4));
                    packed[j - 4] |= (uint8_t)((g[j].sc >> 4) << 6);
                    packed[j] |= (uint8_t)((g[j].mn >> 4) << 6);
                }
            }
            if (type == TK_Q4_K) {
                tk_block_q4_K y = {.d = g[0].d, .dmin = g[0].m};
                memcpy(y.scales, packed, 12);
                for (int j = 0; j < 4; j++)
                    for (int l = 0; l < 32; l++)
                        y.qs[32 * j + l] = (uint8_t)(c[64 * j + l] | (c[64 * j + l + 32] << 4));
                memcpy(out + s * sizeof y, &y, sizeof y);
            } else {
                tk_block_q5_K y = {.d = g[0].d, .dmin = g[0].m};
                memcpy(y.scales, packed, 12);
                for (int j = 0; j < 4; j++)
                    for (int l = 0; l < 32; l++) {
                        const int l1 = c[64 * j + l], l2 = c[64 * j + l + 32];
                        y.qs[32 * j + l] = (uint8_t)((l1 & 0xF) | ((l2 & 0xF) << 4));
                        y.qh[l] |= (uint8_t)(((l1 >> 4) << (2 * j)) | ((l2 >> 4) << (2 * j + 1)));
                    }
                memcpy(out + s * sizeof y, &y, sizeof y);
            }
        }
        break;
    default: break;
    }
    return 0;
}
