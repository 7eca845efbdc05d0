/* Quantized gemm kernels: every weight type x every ISA this CPU has.
 *
 * Tolerances (u = 2^-24, the float32 unit roundoff):
 *
 *  - SIMD and scalar kernels compute identical integer block dots; they only
 *    differ in how the float accumulation is split over lanes.  Both are
 *    compared with y64, the float64 sum of dequantized weight times
 *    dequantized activation (i.e. the exact result of the quantized
 *    problem).  A chain of k float roundings over terms whose magnitudes add
 *    up to S errs by at most k*u*S; here k <= (blocks per row) + 16 (scale
 *    products, int->float conversion, the lane reduction and the
 *    dequantizer's own roundings), and we allow twice that:
 *        |y - y64| <= tol = 2 * (n / block + 16) * u * S,
 *    S = sum_c |w_c * xq_c| (for types with a min/offset term, the scale
 *    and min parts are counted separately: S = sum (|w - mu| + |mu|) |xq|).
 *    Hence |y_simd - y_scalar| <= 2 * tol, checked too; for the shapes here
 *    tol/S stays below 1e-5.
 *  - Against the float activations x:  |y - sum w_c x_c| <= tol + E, with
 *    E = sum |w_c| |x_c - xq_c| the activation quantization error, itself
 *    checked against the a priori bound |x - xq| <= (0.5 + 1e-4) d + 127 |d - d16|
 *    per element (d = amax/127 of the block, d16 its stored half-precision
 *    copy; Q8_K keeps d = 1/(127/amax) in float).  Q8_1's stored s = d*sum(q) is half
 *    precision too; its rounding, times |m|, is added to E.
 *  - NF4 / NF4_DQ: the kernels use the int16 code book L = round(level *
 *    2^14) (kernels/nf4_dot.h), so y64 is computed with the weights
 *    L[code] * 2^-14 * absmax decoded here from the documented layout; the
 *    format's own dequantization (tk_nf4_values * absmax) differs from that
 *    by at most 2^-15 * absmax per weight, so against the float weights and
 *    activations the bound gains C = 2^-15 * sum |absmax_c * xq_c| (and the
 *    code book itself is checked: every |L/2^14 - level| <= 2^-15).
 *  - NEON (arm64) kernels keep the scalar reference's float order: their
 *    results must equal the scalar kernel's bit for bit (memcmp), on top of
 *    the bounds above.
 *  - Exact (bitwise) checks: the packing convention (test_act_convention:
 *    round(x * 127/amax), llama.cpp's); SIMD packing == scalar packing;
 *    results do not depend on how rows are split into [r0, r1) ranges, nor
 *    on how many tokens are in the batch; nothing outside the requested
 *    rows is written; test_invariance repeats the batch / split checks for
 *    every batch size 1..40 and beyond on the tiled (AMX) kernels' types
 *    and the AVX2 panel kernels' (the 32-element block types, Q4_K Q5_K Q6_K). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "formats/quant_blocks.h"
#include "kernels/cpu.h"
#include "kernels/nf4_dot.h"
#include "kernels/panels.h"
#include "kernels/qgemm.h"
#include "tk_test.h"

#if defined(__unix__)
#include <sys/mman.h>
#include <unistd.h>
#endif

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rndf(void) { return (float)(rnd() >> 40) * 0x1p-24f * 2.0f - 1.0f; } /* [-1, 1) */
static int rndi(int n) { return (int)(rnd() % (uint64_t)n); }

static void put_f16(uint8_t *p, float v) {
    const uint16_t h = tk_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* Offsets of the half-precision scale fields in a block: d, and dmin/m
 * (-1 if none). */
static void scale_fields(tk_dtype t, int *d_off, int *m_off) {
    *m_off = -1;
    switch (t) {
    case TK_Q4_1: case TK_Q5_1: *d_off = 0; *m_off = 2; break;
    case TK_Q4_K: case TK_Q5_K: *d_off = 0; *m_off = 2; break;
    case TK_Q2_K: *d_off = 80; *m_off = 82; break;
    case TK_Q3_K: *d_off = 108; break;
    case TK_Q6_K: *d_off = 208; break;
    default: *d_off = 0; break;
    }
}

/* mode 0: random bytes with sane scales; mode 1: every quant byte 0xFF
 * (extreme values, to catch overflow); mode 2: Q8_0 weights of -128. */
static void make_weights(tk_dtype t, uint8_t *w, int64_t rows, int64_t n, int mode) {
    const tk_dtype_info *info = tk_dtype_get(t);
    const size_t rb = tk_dtype_row_bytes(t, n);
    if (t == TK_F32 || t == TK_F16 || t == TK_BF16) {
        for (int64_t i = 0; i < rows * n; i++) {
            const float v = mode ? 1.0f : rndf() * (rndi(8) ? 1.0f : 8.0f);
            if (t == TK_F32) memcpy(w + 4 * i, &v, 4);
            else if (t == TK_F16) put_f16(w + 2 * i, v);
            else {
                const uint16_t h = tk_f32_to_bf16(v);
                memcpy(w + 2 * i, &h, 2);
            }
        }
        return;
    }
    for (size_t i = 0; i < rb * (size_t)rows; i++) w[i] = mode == 1 ? 0xFF : mode == 2 ? 0x80 : (uint8_t)rnd();
    if (t == TK_NF4 || t == TK_NF4_DQ) {
        /* float scale fields: NF4 absmax per block; NF4_DQ (scale, min) per
         * group (the u8 absmax codes and the 4-bit codes stay random / 0xFF) */
        const int64_t nb = (n + 63) / 64, ng = (nb + 255) / 256;
        for (int64_t r = 0; r < rows; r++) {
            uint8_t *row = w + (size_t)r * rb;
            for (int64_t k = 0; k < (t == TK_NF4 ? nb : 2 * ng); k++) {
                float v = mode ? 0.05f : rndf() * 0.05f * (rndi(4) ? 1.0f : 10.0f);
                if (t == TK_NF4_DQ && k % 2) v *= 1e-3f * (float)mode + (1 - mode) * 0.5f; /* min */
                else if (t == TK_NF4_DQ) v *= 1.0f / 255.0f;                                /* scale */
                memcpy(t == TK_NF4 ? row + 36 * k : row + 4 * k, &v, 4);
            }
        }
        return;
    }
    const int64_t nblk = (int64_t)(rb * (size_t)rows) / info->block_bytes;
    int d_off, m_off;
    scale_fields(t, &d_off, &m_off);
    const int kq = info->block_elems == 256;
    for (int64_t b = 0; b < nblk; b++) {
        uint8_t *blk = w + b * info->block_bytes;
        const float mag = kq ? 1e-3f : 1e-2f;
        put_f16(blk + d_off, mode ? mag : rndf() * mag * (rndi(4) ? 1.0f : 10.0f));
        if (m_off >= 0) put_f16(blk + m_off, mode ? mag : rndf() * mag);
    }
}

/* The min / offset part of each dequantized weight (zero the quants,
 * dequantize), for types with a separate min term; NULL otherwise. */
static float *min_parts(tk_dtype t, const uint8_t *w, int64_t rows, int64_t n) {
    int lo, hi; /* byte range of the quant fields inside a block */
    switch (t) {
    case TK_Q4_1: lo = 4; hi = 20; break;
    case TK_Q5_1: lo = 4; hi = 24; break;
    case TK_Q4_K: lo = 16; hi = 144; break;
    case TK_Q5_K: lo = 16; hi = 176; break;
    case TK_Q2_K: lo = 16; hi = 80; break;
    default: return NULL;
    }
    const tk_dtype_info *info = tk_dtype_get(t);
    const size_t rb = tk_dtype_row_bytes(t, n);
    uint8_t *z = malloc(rb * (size_t)rows);
    memcpy(z, w, rb * (size_t)rows);
    for (size_t b = 0; b < rb * (size_t)rows / (size_t)info->block_bytes; b++)
        memset(z + b * (size_t)info->block_bytes + lo, 0, (size_t)(hi - lo));
    float *mu = malloc(sizeof(float) * (size_t)(rows * n));
    for (int64_t r = 0; r < rows; r++) tk_dequant_row(t, z + (size_t)r * rb, mu + r * n, n);
    free(z);
    return mu;
}

/* NF4 / NF4_DQ row r decoded with the kernels' int16 code book (exact in
 * double), straight from the layout in docs/formats.md; amx[c] = |absmax|
 * of element c's block. */
static void nf4_decode_cb(tk_dtype t, const uint8_t *row, int64_t n, double *wcb, double *amx) {
    static const int16_t L[16] = TK_NF4_LEVELS_I16;
    const int64_t nb = (n + 63) / 64, ng = (nb + 255) / 256;
    for (int64_t b = 0; b < nb; b++) {
        float a;
        const uint8_t *codes;
        if (t == TK_NF4) {
            memcpy(&a, row + 36 * b, 4);
            codes = row + 36 * b + 4;
        } else {
            float g[2];
            memcpy(g, row + 8 * (b / 256), 8);
            a = (float)row[8 * ng + b] * g[0] + g[1];
            codes = row + 8 * ng + nb + 32 * b;
        }
        const int len = n - 64 * b < 64 ? 32 : 64;
        for (int j = 0; j < len / 2; j++) {
            wcb[64 * b + j] = L[codes[j] & 15] * 0x1p-14 * a;
            wcb[64 * b + j + len / 2] = L[codes[j] >> 4] * 0x1p-14 * a;
            amx[64 * b + j] = amx[64 * b + j + len / 2] = fabs(a);
        }
    }
}

static void make_acts(float *x, int n_tok, int64_t n, int mode) {
    for (int t = 0; t < n_tok; t++)
        for (int64_t c = 0; c < n; c += 32) {
            const int kind = mode ? 1 : rndi(10);
            const float scale = kind == 0 ? 0.0f : kind == 1 ? 1.0f : kind == 2 ? 1e-4f : 3.0f;
            for (int64_t k = c; k < c + 32 && k < n; k++)
                x[t * n + k] = mode ? 1.0f : rndf() * scale;
        }
}

static const char *isa_tag(tk_isa isa) { return tk_isa_name(isa); }

/* Checks the packed activation against the a priori quantization bound and
 * returns xq (dequantized activations) and, for Q8_1, the per-block error
 * of the stored sum s (|s - d*sum(q)|, one per block). */
static void act_dequant(tk_dtype at, const uint8_t *packed, const float *x, int64_t n, float *xq, double *s_err) {
    if (at == TK_F32) {
        memcpy(xq, packed, sizeof(float) * (size_t)n);
        return;
    }
    tk_dequant_row(at, packed, xq, n);
    const int bs = at == TK_Q8_K ? 256 : 32;
    const size_t bb = at == TK_Q8_K ? sizeof(tk_block_q8_K) : at == TK_Q8_1 ? sizeof(tk_block_q8_1) : sizeof(tk_block_q8_0);
    for (int64_t b = 0; b < n / bs; b++) {
        float amax = 0;
        for (int k = 0; k < bs; k++) amax = fmaxf(amax, fabsf(x[b * bs + k]));
        const double d = amax / 127.0f;
        double dstored;
        if (at == TK_Q8_K) {
            float f;
            memcpy(&f, packed + b * bb, 4);
            dstored = f;
        } else {
            uint16_t h;
            memcpy(&h, packed + b * bb, 2);
            dstored = tk_f16_to_f32(h);
        }
        const double bound = (0.5 + 1e-4) * d + 127.0 * fabs(d - dstored) + 1e-30;
        double worst = 0;
        for (int k = 0; k < bs; k++) worst = fmax(worst, fabs((double)x[b * bs + k] - xq[b * bs + k]));
        CHECK(worst <= bound, "act quant error %g > bound %g", worst, bound);
        if (at == TK_Q8_1) {
            tk_block_q8_1 blk;
            memcpy(&blk, packed + b * bb, sizeof blk);
            int sum = 0;
            for (int k = 0; k < 32; k++) sum += blk.qs[k];
            s_err[b] = fabs((double)tk_f16_to_f32(blk.s) - (double)tk_f16_to_f32(blk.d) * sum);
        }
    }
}

static double max_rel_simd, max_rel_ref;

/* One weight type, one shape, all ISAs. */
static void run_case(tk_dtype wt, int64_t rows, int64_t n, int n_tok, int mode) {
    const tk_dtype_info *info = tk_dtype_get(wt);
    const size_t wrb = tk_dtype_row_bytes(wt, n);
    uint8_t *w = malloc(wrb * (size_t)rows);
    make_weights(wt, w, rows, n, mode);
    float *wd = malloc(sizeof(float) * (size_t)(rows * n));
    for (int64_t r = 0; r < rows; r++) tk_dequant_row(wt, w + (size_t)r * wrb, wd + r * n, n);
    float *mu = min_parts(wt, w, rows, n);
    const int nf4 = wt == TK_NF4 || wt == TK_NF4_DQ;
    double *wcb = NULL, *amx = NULL;
    if (nf4) {
        wcb = malloc(sizeof(double) * (size_t)(rows * n));
        amx = malloc(sizeof(double) * (size_t)(rows * n));
        for (int64_t r = 0; r < rows; r++) nf4_decode_cb(wt, w + (size_t)r * wrb, n, wcb + r * n, amx + r * n);
    }
    float *x = malloc(sizeof(float) * (size_t)(n_tok * n));
    make_acts(x, n_tok, n, mode);

    const tk_qkernel *ref = tk_qkernel_get(wt, TK_ISA_SCALAR);
    CHECK(ref != NULL, "no scalar kernel for %s", info->name);
    if (!ref) goto out;
    const size_t arb = ref->act_row_bytes(n);
    uint8_t *act_ref = malloc(arb * (size_t)n_tok + 1);
    for (int t = 0; t < n_tok; t++) ref->quantize_act(x + t * n, act_ref + (size_t)t * arb, n);

    /* dequantized activations, the per-(row, token) exact value y64, the
     * magnitude S, and the activation-quantization error E */
    float *xq = malloc(sizeof(float) * (size_t)(n_tok * n));
    double *s_err = calloc((size_t)(n / 32 + 1), sizeof(double));
    const int64_t ldy = rows + 3;
    double *y64 = malloc(sizeof(double) * (size_t)(n_tok * ldy));
    double *yx = malloc(sizeof(double) * (size_t)(n_tok * ldy));
    double *S = malloc(sizeof(double) * (size_t)(n_tok * ldy));
    double *E = malloc(sizeof(double) * (size_t)(n_tok * ldy));
    const int bs = info->block_elems == 1 ? 8 : info->block_elems;
    const double tol_rel = 2.0 * ((double)n / bs + 16) * 0x1p-24;
    for (int t = 0; t < n_tok; t++) {
        act_dequant(ref->act_type, act_ref + (size_t)t * arb, x + t * n, n, xq + t * n, s_err);
        for (int64_t r = 0; r < rows; r++) {
            double a = 0, ax = 0, s = 0, e = 0, adeq = 0, cbe = 0;
            for (int64_t c = 0; c < n; c++) {
                const double wv = nf4 ? wcb[r * n + c] : wd[r * n + c], m = mu ? mu[r * n + c] : 0.0;
                a += wv * xq[t * n + c];
                ax += (double)wd[r * n + c] * x[t * n + c];
                s += (fabs(wv - m) + fabs(m)) * fabs(xq[t * n + c]);
                e += fabs(wv) * fabs((double)x[t * n + c] - xq[t * n + c]);
                if (nf4) {
                    adeq += (double)wd[r * n + c] * xq[t * n + c];
                    cbe += 0x1p-15 * amx[r * n + c] * fabs(xq[t * n + c]);
                    e += 0x1p-15 * amx[r * n + c] * fabs(x[t * n + c]); /* code book vs float weights */
                }
            }
            /* the code book's effect on the exact result stays within its bound
             * (plus the float rounding of the dequantized weights) */
            if (nf4)
                CHECK(fabs(adeq - a) <= cbe + 0x1p-23 * s + 1e-35, "%s r=%lld t=%d: code book error %g > %g",
                      info->name, (long long)r, t, fabs(adeq - a), cbe);
            if (ref->act_type == TK_Q8_1) {
                /* the kernel's min term is m * s with the stored s, which
                 * differs from m * sum(xq) by m * s_err: move it from y64
                 * (exact for the packed data) into E */
                const uint8_t *pa = act_ref + (size_t)t * arb;
                for (int64_t b = 0; b < n / 32; b++) {
                    const double mb = mu[r * n + b * 32];
                    double bsum = 0;
                    for (int k = 0; k < 32; k++) bsum += xq[t * n + b * 32 + k];
                    uint16_t h;
                    memcpy(&h, pa + b * sizeof(tk_block_q8_1) + 2, 2);
                    a += mb * ((double)tk_f16_to_f32(h) - bsum);
                    e += fabs(mb) * s_err[b];
                }
            }
            y64[t * ldy + r] = a;
            yx[t * ldy + r] = ax;
            S[t * ldy + r] = s;
            E[t * ldy + r] = e;
        }
    }

    float *y = malloc(sizeof(float) * (size_t)(n_tok * ldy));
    float *y2 = malloc(sizeof(float) * (size_t)(n_tok * ldy));
    float *yref = malloc(sizeof(float) * (size_t)(n_tok * ldy));
    const float sentinel = 12345.0f;
    for (int64_t i = 0; i < n_tok * ldy; i++) yref[i] = sentinel;
    ref->gemm(w, wrb, n, 0, rows, act_ref, arb, n_tok, yref, ldy);

    for (int isa = 0; isa < TK_ISA_COUNT; isa++) {
        if (!tk_isa_supported((tk_isa)isa)) continue;
        const tk_qkernel *k = tk_qkernel_get(wt, (tk_isa)isa);
        CHECK(k != NULL, "no kernel %s/%s", info->name, isa_tag((tk_isa)isa));
        if (!k) continue;
        CHECK(k->wtype == wt && k->act_type == ref->act_type && k->act_row_bytes(n) == arb, "%s descriptor", k->name);
        CHECK(k->isa <= (tk_isa)isa && tk_isa_supported(k->isa), "%s isa", k->name);
        uint8_t *act = malloc(arb * (size_t)n_tok + 1);
        for (int t = 0; t < n_tok; t++) k->quantize_act(x + t * n, act + (size_t)t * arb, n);
        CHECK(memcmp(act, act_ref, arb * (size_t)n_tok) == 0, "%s: packed activations differ from scalar", k->name);

        for (int64_t i = 0; i < n_tok * ldy; i++) y[i] = y2[i] = sentinel;
        k->gemm(w, wrb, n, 0, rows, act, arb, n_tok, y, ldy);
        int bad = 0;
        for (int t = 0; t < n_tok && bad < 3; t++) {
            for (int64_t r = 0; r < rows && bad < 3; r++) {
                const int64_t i = t * ldy + r;
                const double tol = tol_rel * S[i] + 1e-35;
                const double e64 = fabs(y[i] - y64[i]);
                const double eref = fabs((double)y[i] - yref[i]);
                const double ex = fabs(y[i] - yx[i]);
                if (S[i] > 0) {
                    if (k->isa != TK_ISA_SCALAR && eref / S[i] > max_rel_simd) max_rel_simd = eref / S[i];
                    if (e64 / S[i] > max_rel_ref) max_rel_ref = e64 / S[i];
                }
                if (!(e64 <= tol) || !(eref <= 2 * tol) || !(ex <= tol + E[i] * (1 + 1e-6))) {
                    bad++;
                    CHECK(0, "%s rows=%lld n=%lld ntok=%d mode=%d r=%lld t=%d: y=%.9g y64=%.9g ref=%.9g yx=%.9g "
                          "tol=%.3g E=%.3g S=%.3g", k->name, (long long)rows, (long long)n, n_tok, mode, (long long)r,
                          t, y[i], y64[i], yref[i], yx[i], tol, E[i], S[i]);
                }
            }
            for (int64_t r = rows; r < ldy; r++)
                if (y[t * ldy + r] != sentinel) {
                    bad++;
                    CHECK(0, "%s wrote outside rows", k->name);
                }
        }
        if (!bad) tk_test_pass++;
        /* NEON keeps the reference's float order: the same bits as scalar */
        if (k->isa == TK_ISA_NEON)
            CHECK(memcmp(y, yref, sizeof(float) * (size_t)(n_tok * ldy)) == 0,
                  "%s rows=%lld n=%lld ntok=%d mode=%d: not bit-identical to the scalar reference", k->name,
                  (long long)rows, (long long)n, n_tok, mode);

        /* split rows into ragged ranges, tokens one at a time: bitwise equal */
        int64_t cut1 = rows > 1 ? 1 + rndi((int)rows - 1) : rows, cut2 = cut1 + (rows - cut1) / 2;
        const int64_t cuts[4] = {0, cut1, cut2, rows};
        for (int p = 0; p < 3; p++)
            for (int t = 0; t < n_tok; t++)
                k->gemm(w, wrb, n, cuts[p], cuts[p + 1], act + (size_t)t * arb, arb, 1, y2 + t * ldy, ldy);
        CHECK(memcmp(y, y2, sizeof(float) * (size_t)(n_tok * ldy)) == 0,
              "%s rows=%lld n=%lld ntok=%d: result depends on the row split / batch", k->name, (long long)rows,
              (long long)n, n_tok);
        /* misaligned weights and activations: same bits */
        {
            uint8_t *wm = malloc(wrb * (size_t)rows + 1), *am = malloc(arb * (size_t)n_tok + 3);
            memcpy(wm + 1, w, wrb * (size_t)rows);
            memcpy(am + 3, act, arb * (size_t)n_tok);
            for (int64_t i = 0; i < n_tok * ldy; i++) y2[i] = sentinel;
            k->gemm(wm + 1, wrb, n, 0, rows, am + 3, arb, n_tok, y2, ldy);
            CHECK(memcmp(y, y2, sizeof(float) * (size_t)(n_tok * ldy)) == 0, "%s: misaligned inputs change the result",
                  k->name);
            free(wm);
            free(am);
        }
        /* a sub-range, all tokens: only those rows written */
        if (rows >= 3) {
            for (int64_t i = 0; i < n_tok * ldy; i++) y2[i] = sentinel;
            k->gemm(w, wrb, n, 1, rows - 1, act, arb, n_tok, y2, ldy);
            int ok = 1;
            for (int t = 0; t < n_tok; t++)
                for (int64_t r = 0; r < ldy; r++) {
                    const int64_t i = t * ldy + r;
                    ok &= (r >= 1 && r < rows - 1) ? y2[i] == y[i] : y2[i] == sentinel;
                }
            CHECK(ok, "%s: sub-range [1, rows-1) wrong or wrote outside", k->name);
        }
        free(act);
    }
    free(y);
    free(y2);
    free(yref);
    free(xq);
    free(s_err);
    free(y64);
    free(yx);
    free(S);
    free(E);
    free(act_ref);
out:
    free(w);
    free(wd);
    free(wcb);
    free(amx);
    free(mu);
    free(x);
}

/* size bytes that end right before an inaccessible page (and, when
 * unmapped, *map / *map_len to free), so reading past them faults; plain
 * malloc where there is no mmap. */
static uint8_t *guarded(size_t size, void **map, size_t *map_len) {
#if defined(__unix__)
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    const size_t body = (size + pg - 1) / pg * pg;
    uint8_t *m = mmap(NULL, body + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    mprotect(m + body, pg, PROT_NONE);
    *map = m;
    *map_len = body + pg;
    return m + body - size;
#else
    *map = malloc(size);
    *map_len = 0;
    return *map;
#endif
}

static void unguard(void *map, size_t map_len) {
#if defined(__unix__)
    munmap(map, map_len);
#else
    (void)map_len;
    free(map);
#endif
}

/* Batch invariance in depth, for the types with tiled kernels (AMX: 16-row
 * panels, 16-token tiles, K chunks, a VNNI path for small batches; AVX2:
 * 8-row panels, passes of 32 tokens, token chunks): on
 * every ISA, each token of a batch of n_tok (with the rows split into
 * ranges that are not multiples of 16) gives the same bits as that token
 * alone over all rows. */
static void test_invariance(tk_dtype wt, int64_t rows, int64_t n, const int *ntoks, int n_ntoks, int mode) {
    int max_tok = 0;
    for (int i = 0; i < n_ntoks; i++) max_tok = ntoks[i] > max_tok ? ntoks[i] : max_tok;
    const size_t wrb = tk_dtype_row_bytes(wt, n);
    /* weights and activations end at an inaccessible page: reading a row
     * past r1 or a token past n_tok faults */
    void *wmap;
    size_t wmap_len;
    uint8_t *w = guarded(wrb * (size_t)rows, &wmap, &wmap_len);
    CHECK(w != NULL, "guarded weights");
    if (!w) return;
    make_weights(wt, w, rows, n, mode);
    float *x = malloc(sizeof(float) * (size_t)(max_tok * n));
    make_acts(x, max_tok, n, mode);
    const int64_t ldy = rows + 5;
    float *y1 = malloc(sizeof(float) * (size_t)(max_tok * ldy));
    float *yb = malloc(sizeof(float) * (size_t)(max_tok * ldy));
    for (int isa = TK_ISA_AVX2; isa < TK_ISA_COUNT; isa++) {
        if (!tk_isa_supported((tk_isa)isa)) continue;
        const tk_qkernel *k = tk_qkernel_get(wt, (tk_isa)isa);
        if (!k || k->isa != (tk_isa)isa) continue; /* tested at its own level */
        const size_t arb = k->act_row_bytes(n);
        void *amap;
        size_t amap_len;
        uint8_t *act_all = guarded(arb * (size_t)max_tok, &amap, &amap_len);
        CHECK(act_all != NULL, "guarded activations");
        if (!act_all) continue;
        for (int t = 0; t < max_tok; t++) k->quantize_act(x + t * n, act_all + (size_t)t * arb, n);
        for (int t = 0; t < max_tok; t++)
            k->gemm(w, wrb, n, 0, rows, act_all + (size_t)t * arb, arb, 1, y1 + t * ldy, ldy);
        int bad = 0;
        for (int i = 0; i < n_ntoks && !bad; i++) {
            const int nt = ntoks[i];
            /* three ranges, cut at random (usually not multiples of 16) */
            const int64_t c1 = rows > 2 ? 1 + rndi((int)rows - 2) : 0;
            const int64_t c2 = c1 + (rows - c1 > 1 ? rndi((int)(rows - c1)) : 0);
            const int64_t cuts[4] = {0, c1, c2, rows};
            /* the batch is the last nt packed rows: token nt is past the end */
            const uint8_t *act = act_all + (size_t)(max_tok - nt) * arb;
            const float *y1b = y1 + (max_tok - nt) * ldy;
            for (int64_t j = 0; j < nt * ldy; j++) yb[j] = -7.0f;
            for (int p = 0; p < 3; p++) k->gemm(w, wrb, n, cuts[p], cuts[p + 1], act, arb, nt, yb, ldy);
            for (int t = 0; t < nt && !bad; t++) {
                bad += memcmp(yb + t * ldy, y1b + t * ldy, sizeof(float) * (size_t)rows) != 0;
                for (int64_t r = rows; r < ldy; r++) bad += yb[t * ldy + r] != -7.0f;
                if (bad)
                    CHECK(0, "%s rows=%lld n=%lld mode=%d: token %d of a batch of %d (cuts %lld %lld) differs from "
                          "the token alone, or wrote outside", k->name, (long long)rows, (long long)n, mode, t, nt,
                          (long long)c1, (long long)c2);
            }
        }
        if (!bad) tk_test_pass++;
        unguard(amap, amap_len);
    }
    unguard(wmap, wmap_len);
    free(x);
    free(y1);
    free(yb);
}

/* The panel layout (kernels/panels.h): each kernel that reads it gives the
 * same bits from the packed copy as from the rows, for every batch size in
 * ntoks and row ranges cut at random multiples of 8, writes nothing outside
 * its rows, and reads nothing past the packed buffer (it ends at an
 * inaccessible page). */
static void test_panels(tk_dtype wt, int64_t rows, int64_t n, const int *ntoks, int n_ntoks, int mode) {
    CHECK(tk_panels_layout(wt), "%s has a panel layout", tk_dtype_get(wt)->name);
    int max_tok = 0;
    for (int i = 0; i < n_ntoks; i++) max_tok = ntoks[i] > max_tok ? ntoks[i] : max_tok;
    const size_t wrb = tk_dtype_row_bytes(wt, n), pbytes = tk_panels_bytes(rows, wrb);
    CHECK(pbytes == (size_t)((rows + 7) / 8 * 8) * wrb, "panel bytes: whole panels");
    uint8_t *w = malloc(wrb * (size_t)rows);
    void *pmap;
    size_t pmap_len;
    uint8_t *pw = guarded(pbytes, &pmap, &pmap_len);
    CHECK(w && pw, "weights");
    if (!w || !pw) return;
    make_weights(wt, w, rows, n, mode);
    tk_panels_pack(wt, w, wrb, rows, pw);
    float *x = malloc(sizeof(float) * (size_t)(max_tok * n));
    make_acts(x, max_tok, n, mode);
    const int64_t ldy = rows + 5;
    float *yr = malloc(sizeof(float) * (size_t)(max_tok * ldy));
    float *yp = malloc(sizeof(float) * (size_t)(max_tok * ldy));
    int tested = 0;
    for (int isa = TK_ISA_AVX2; isa < TK_ISA_COUNT; isa++) {
        if (!tk_isa_supported((tk_isa)isa)) continue;
        const tk_qkernel *k = tk_qkernel_get(wt, (tk_isa)isa);
        if (!k || k->isa != (tk_isa)isa || !k->gemm_panels) continue;
        tested++;
        const size_t arb = k->act_row_bytes(n);
        uint8_t *act = malloc(arb * (size_t)max_tok);
        for (int t = 0; t < max_tok; t++) k->quantize_act(x + t * n, act + (size_t)t * arb, n);
        int bad = 0;
        for (int i = 0; i < n_ntoks && !bad; i++) {
            const int nt = ntoks[i];
            const int64_t panels = (rows + 7) / 8;
            const int64_t c1 = 8 * rndi((int)panels + 1), c2 = c1 + 8 * rndi((int)(panels - c1 / 8) + 1);
            const int64_t cuts[4] = {0, c1 < rows ? c1 : rows, c2 < rows ? c2 : rows, rows};
            for (int64_t j = 0; j < nt * ldy; j++) yp[j] = -7.0f;
            k->gemm(w, wrb, n, 0, rows, act, arb, nt, yr, ldy);
            for (int p = 0; p < 3; p++) k->gemm_panels(pw, wrb, n, cuts[p], cuts[p + 1], act, arb, nt, yp, ldy);
            for (int t = 0; t < nt && !bad; t++) {
                bad += memcmp(yp + t * ldy, yr + t * ldy, sizeof(float) * (size_t)rows) != 0;
                for (int64_t r = rows; r < ldy; r++) bad += yp[t * ldy + r] != -7.0f;
                if (bad)
                    CHECK(0, "%s rows=%lld n=%lld mode=%d: token %d of %d (cuts %lld %lld) from the panel layout "
                          "differs from the rows, or wrote outside", k->name, (long long)rows, (long long)n, mode, t,
                          nt, (long long)c1, (long long)c2);
            }
        }
        if (!bad) tk_test_pass++;
        free(act);
    }
#if defined(__x86_64__)
    if (tk_isa_supported(TK_ISA_AVX2)) CHECK(tested > 0, "%s: an AVX2 kernel reads the panel layout", tk_dtype_get(wt)->name);
#endif
    unguard(pmap, pmap_len);
    free(w);
    free(x);
    free(yr);
    free(yp);
}

/* On a CPU with AVX-VNNI the AVX2 level takes the vpdpbusd forms of the
 * 32-element types' panel kernels (kernels/qgemm_avxvnni.c): they must give
 * the plain AVX2 kernels' bits, from the rows and from the panel layout, for
 * every batch size in ntoks; TK_AVXVNNI=0 must select the plain ones. */
static void test_avxvnni(tk_dtype wt, int64_t rows, int64_t n, const int *ntoks, int n_ntoks, int mode) {
    if (!tk_isa_supported(TK_ISA_AVX2)) return;
    /* the caller's TK_AVXVNNI comes back afterwards: the other cases run as asked */
    const char *env = getenv("TK_AVXVNNI");
    char *saved = env ? strdup(env) : NULL;
    setenv("TK_AVXVNNI", "0", 1);
    const tk_qkernel *plain = tk_qkernel_get(wt, TK_ISA_AVX2);
    unsetenv("TK_AVXVNNI");
    const tk_qkernel *vnni = tk_qkernel_get(wt, TK_ISA_AVX2);
    if (saved) setenv("TK_AVXVNNI", saved, 1);
    free(saved);
    CHECK(!strstr(plain->name, "vnni"), "%s: TK_AVXVNNI=0 selects the plain AVX2 kernel", plain->name);
    if (!tk_cpu_features_get().avxvnni) {
        CHECK(vnni == plain, "%s: no AVX-VNNI, the plain AVX2 kernel", vnni->name);
        return;
    }
    CHECK(vnni != plain && strstr(vnni->name, "vnni"), "%s: the AVX-VNNI form on this CPU", vnni->name);
    if (vnni == plain) return;
    int max_tok = 0;
    for (int i = 0; i < n_ntoks; i++) max_tok = ntoks[i] > max_tok ? ntoks[i] : max_tok;
    const size_t wrb = tk_dtype_row_bytes(wt, n), arb = plain->act_row_bytes(n);
    uint8_t *w = malloc(wrb * (size_t)rows), *pw = malloc(tk_panels_bytes(rows, wrb));
    uint8_t *act = malloc(arb * (size_t)max_tok);
    float *x = malloc(sizeof(float) * (size_t)(max_tok * n));
    float *yp = malloc(sizeof(float) * (size_t)(max_tok * rows)), *yv = malloc(sizeof(float) * (size_t)(max_tok * rows));
    CHECK(w && pw && act && x && yp && yv, "buffers");
    if (w && pw && act && x && yp && yv) {
        make_weights(wt, w, rows, n, mode);
        tk_panels_pack(wt, w, wrb, rows, pw);
        make_acts(x, max_tok, n, mode);
        for (int t = 0; t < max_tok; t++) plain->quantize_act(x + t * n, act + (size_t)t * arb, n);
        int bad = 0;
        for (int i = 0; i < n_ntoks && !bad; i++)
            for (int layout = 0; layout < 2 && !bad; layout++) {
                const int nt = ntoks[i];
                if (layout) {
                    plain->gemm_panels(pw, wrb, n, 0, rows, act, arb, nt, yp, rows);
                    vnni->gemm_panels(pw, wrb, n, 0, rows, act, arb, nt, yv, rows);
                } else {
                    plain->gemm(w, wrb, n, 0, rows, act, arb, nt, yp, rows);
                    vnni->gemm(w, wrb, n, 0, rows, act, arb, nt, yv, rows);
                }
                bad = memcmp(yp, yv, sizeof(float) * (size_t)(nt * rows)) != 0;
                CHECK(!bad, "%s rows=%lld n=%lld mode=%d, %d tokens, %s layout: not the bits of %s", vnni->name,
                      (long long)rows, (long long)n, mode, nt, layout ? "panel" : "row", plain->name);
            }
    }
    free(w);
    free(pw);
    free(act);
    free(x);
    free(yp);
    free(yv);
}

/* Rows packed a chunk at a time (chunks of a multiple of 8 rows, each at
 * its first row's byte) give the same bytes as the whole matrix packed at
 * once: how tk_model_make_panels packs. */
static void test_panels_chunked(tk_dtype wt, int64_t rows, int64_t n, int64_t chunk) {
    const size_t wrb = tk_dtype_row_bytes(wt, n), pbytes = tk_panels_bytes(rows, wrb);
    uint8_t *w = malloc(wrb * (size_t)rows), *whole = malloc(pbytes), *parts = malloc(pbytes);
    CHECK(w && whole && parts, "buffers");
    if (w && whole && parts) {
        make_weights(wt, w, rows, n, 0);
        tk_panels_pack(wt, w, wrb, rows, whole);
        for (int64_t r0 = 0; r0 < rows; r0 += chunk)
            tk_panels_pack(wt, w + (size_t)r0 * wrb, wrb, rows - r0 < chunk ? rows - r0 : chunk,
                           parts + (size_t)r0 * wrb);
        CHECK(memcmp(whole, parts, pbytes) == 0, "%s: %lld rows packed in chunks of %lld differ from at once",
              tk_dtype_get(wt)->name, (long long)rows, (long long)chunk);
    }
    free(w);
    free(whole);
    free(parts);
}

static void test_isa_selection(void) {
    const tk_isa best = tk_cpu_best_isa();
    CHECK(tk_isa_supported(best), "best isa %s unsupported", tk_isa_name(best));
    CHECK(tk_isa_supported(TK_ISA_SCALAR), "scalar always supported");
#if defined(__x86_64__)
    const tk_cpu_features f = tk_cpu_features_get();
    __builtin_cpu_init();
    CHECK(f.avx2 == !!__builtin_cpu_supports("avx2"), "avx2 flag");
    CHECK(f.fma == !!__builtin_cpu_supports("fma"), "fma flag");
    CHECK(f.avx512f == !!__builtin_cpu_supports("avx512f"), "avx512f flag");
    CHECK(f.avx512bw == !!__builtin_cpu_supports("avx512bw"), "avx512bw flag");
    CHECK(f.avx512vl == !!__builtin_cpu_supports("avx512vl"), "avx512vl flag");
    CHECK(f.avx512vnni == !!__builtin_cpu_supports("avx512vnni"), "avx512vnni flag");
    CHECK(!tk_isa_supported(TK_ISA_NEON), "no neon on x86");
    if (tk_isa_supported(TK_ISA_AVX512)) CHECK(tk_isa_supported(TK_ISA_AVX2), "levels nest");
    if (tk_isa_supported(TK_ISA_AMX)) CHECK(tk_isa_supported(TK_ISA_AVX512), "levels nest");
#elif defined(__aarch64__)
    /* arm64: NEON is the level; the dotprod kernels exactly when the CPU
     * reports them (TK_TEST_DOTPROD=0/1: what the test run expects, e.g.
     * under qemu -cpu cortex-a53 / max) */
    const tk_cpu_features f = tk_cpu_features_get();
    CHECK(f.neon && best == TK_ISA_NEON, "arm64 picks neon");
    const tk_qkernel *kq = tk_qkernel_get(TK_Q4_0, TK_ISA_NEON);
    CHECK(kq && kq->isa == TK_ISA_NEON && (strstr(kq->name, "+dotprod") != NULL) == f.dotprod, "%s, dotprod %d",
          kq ? kq->name : "none", f.dotprod);
    const char *want_dp = getenv("TK_TEST_DOTPROD");
    if (want_dp && *want_dp) CHECK(f.dotprod == (atoi(want_dp) != 0), "dotprod %d, expected %s", f.dotprod, want_dp);
    printf("cpu: dotprod %s (%s)\n", f.dotprod ? "yes" : "no", kq ? kq->name : "none");
#endif
    printf("cpu: best isa %s\n", tk_isa_name(best));
    const char *saved = getenv("TK_ISA");
    char *saved_copy = saved ? strdup(saved) : NULL;
    unsetenv("TK_ISA");
    CHECK(tk_cpu_isa() == best, "no TK_ISA -> best");
    setenv("TK_ISA", "scalar", 1);
    CHECK(tk_cpu_isa() == TK_ISA_SCALAR, "TK_ISA=scalar");
    setenv("TK_ISA", "bogus", 1);
    CHECK(tk_cpu_isa() == best, "unknown TK_ISA ignored");
    /* tk_cpu_isa_env (TK_ATTN_ISA): only lowers the level it is given */
    unsetenv("TK_TEST_ISA");
    CHECK(tk_cpu_isa_env("TK_TEST_ISA", TK_ISA_SCALAR) == TK_ISA_SCALAR, "unset -> the given level");
    setenv("TK_TEST_ISA", "scalar", 1);
    CHECK(tk_cpu_isa_env("TK_TEST_ISA", best) == TK_ISA_SCALAR, "TK_TEST_ISA=scalar");
    setenv("TK_TEST_ISA", tk_isa_name(best), 1);
    CHECK(tk_cpu_isa_env("TK_TEST_ISA", TK_ISA_SCALAR) == TK_ISA_SCALAR, "never above the given level");
    setenv("TK_TEST_ISA", "bogus", 1);
    CHECK(tk_cpu_isa_env("TK_TEST_ISA", best) == best, "unknown name ignored");
    unsetenv("TK_TEST_ISA");
    for (int i = 0; i < TK_ISA_COUNT; i++) {
        setenv("TK_ISA", tk_isa_name((tk_isa)i), 1);
        const tk_isa got = tk_cpu_isa();
        CHECK(tk_isa_supported(got), "TK_ISA=%s gave unsupported %s", tk_isa_name((tk_isa)i), tk_isa_name(got));
        CHECK(got == (tk_isa_supported((tk_isa)i) ? (tk_isa)i : best), "TK_ISA=%s -> %s", tk_isa_name((tk_isa)i),
              tk_isa_name(got));
        for (int t = 0; t < TK_DTYPE_LIMIT; t++) {
            if (!tk_dtype_get(t)) continue;
            const tk_qkernel *k = tk_qkernel_get((tk_dtype)t, (tk_isa)i);
            if (!tk_isa_supported((tk_isa)i)) CHECK(k == NULL, "kernel for unsupported isa %s", tk_isa_name((tk_isa)i));
            else if (k) CHECK(k->isa <= (tk_isa)i && tk_isa_supported(k->isa), "%s for %s", k->name, tk_isa_name((tk_isa)i));
        }
    }
    if (saved_copy) setenv("TK_ISA", saved_copy, 1);
    else unsetenv("TK_ISA");
    free(saved_copy);
    /* the CPU in words: NUL-terminated at any size, a prefix of the whole when cut */
    char whole[128], cut[8] = "xxxxxxx", none[1] = {'x'};
    tk_cpu_describe(whole, sizeof whole);
    tk_cpu_describe(cut, sizeof cut);
    tk_cpu_describe(none, 0);
    CHECK(whole[0] && strlen(whole) < sizeof whole, "cpu '%s'", whole);
    CHECK(strlen(cut) == (strlen(whole) < 7 ? strlen(whole) : 7) && !strncmp(cut, whole, strlen(cut)), "cut '%s'", cut);
    CHECK(none[0] == 'x', "n = 0 writes nothing");
    for (const char *c = whole; *c; c++) CHECK(*c >= ' ' && *c <= '~' && *c != '"' && *c != '\\', "byte %d", *c);
#if defined(__x86_64__)
    CHECK(strstr(whole, "(family ") != NULL, "x86 family and model in '%s'", whole);
#endif
    printf("cpu: %s\n", whole);
    CHECK(tk_qkernel_get(TK_Q8_K, TK_ISA_SCALAR) == NULL, "Q8_K is not a weight type");
    /* which kernel each (type, supported ISA) gets */
    for (int t = 0; t < TK_DTYPE_LIMIT; t++) {
        if (!tk_qkernel_get((tk_dtype)t, TK_ISA_SCALAR)) continue;
        printf("%-7s", tk_dtype_get(t)->name);
        for (int i = 0; i < TK_ISA_COUNT; i++)
            if (tk_isa_supported((tk_isa)i)) printf(" %s->%s", tk_isa_name((tk_isa)i), tk_isa_name(tk_qkernel_get((tk_dtype)t, (tk_isa)i)->isa));
        printf("\n");
    }
}

/* The packing convention, exactly, on every ISA: per block amax = max |x|,
 * quant = round-half-even(x * (127/amax)), d = amax/127 as f16 (Q8_0, Q8_1)
 * or d = 1/(127/amax) as float (Q8_K); Q8_K bsums are the sums of 16
 * quants, Q8_1's s = f16(d * sum q).  This is llama.cpp's x86 convention
 * (Q8_K: up to its sign flip), so both engines give the same dequantized
 * activations.  The inputs are multiples of 1/4, so x * 127/amax often
 * lands exactly on .5; the multiplier 1/(amax/127), one rounding off,
 * rounds some of those ties the other way (counted below, must be > 0). */
static void test_act_convention(void) {
    const tk_dtype wts[] = {TK_Q8_0, TK_Q4_1, TK_Q4_K}; /* -> Q8_0, Q8_1, Q8_K activations */
    const int64_t n = 512;
    float x[512];
    long ties = 0, other_mult_differs = 0;
    for (int rep = 0; rep < 200; rep++) {
        for (int64_t i = 0; i < n; i++) x[i] = (float)(rndi(81) - 40) * 0.25f;
        /* amax per block of 32: sometimes pinned to awkward values */
        for (int64_t b = 0; b < n; b += 32)
            if (rndi(2)) x[b + rndi(32)] = (float)(rndi(2) ? 1 : -1) * (float)(20 + rndi(300)) * 0.25f;
        for (int wi = 0; wi < 3; wi++)
            for (int isa = 0; isa < TK_ISA_COUNT; isa++) {
                if (!tk_isa_supported((tk_isa)isa)) continue;
                const tk_qkernel *k = tk_qkernel_get(wts[wi], (tk_isa)isa);
                if (!k || k->isa != (tk_isa)isa) continue;
                uint8_t packed[2048];
                CHECK(k->act_row_bytes(n) <= sizeof packed, "act row size");
                k->quantize_act(x, packed, n);
                const int bs = k->act_type == TK_Q8_K ? 256 : 32;
                const size_t bb = k->act_type == TK_Q8_K ? sizeof(tk_block_q8_K)
                                  : k->act_type == TK_Q8_1 ? sizeof(tk_block_q8_1) : sizeof(tk_block_q8_0);
                const size_t qoff = k->act_type == TK_Q8_K ? 4 : k->act_type == TK_Q8_1 ? 4 : 2;
                for (int64_t b = 0; b < n / bs; b++) {
                    const float *xb = x + b * bs;
                    const uint8_t *pb = packed + b * bb;
                    float amax = 0.0f;
                    for (int j = 0; j < bs; j++) amax = fmaxf(amax, fabsf(xb[j]));
                    const float id = 127.0f / amax, id_other = 1.0f / (amax / 127.0f);
                    int sum = 0, bad = 0;
                    for (int j = 0; j < bs; j++) {
                        const float v = xb[j] * id;
                        const int want = (int)nearbyintf(v);
                        const int q = (int8_t)pb[qoff + j];
                        bad += q != want;
                        sum += q;
                        if (isa == 0 && wi == 0) {
                            ties += v - floorf(v) == 0.5f;
                            other_mult_differs += (int)nearbyintf(xb[j] * id_other) != want;
                        }
                    }
                    CHECK(bad == 0, "%s: %d quants of block %lld are not round(x * 127/amax)", k->name, bad,
                          (long long)b);
                    if (k->act_type == TK_Q8_K) {
                        float d;
                        memcpy(&d, pb, 4);
                        CHECK(d == 1.0f / id, "%s: Q8_K d %.9g != 1/(127/amax) %.9g", k->name, d, 1.0f / id);
                        int16_t bsum[16];
                        memcpy(bsum, pb + 4 + 256, sizeof bsum);
                        int bs_bad = 0;
                        for (int g = 0; g < 16; g++) {
                            int s16 = 0;
                            for (int j = 0; j < 16; j++) s16 += (int8_t)pb[4 + 16 * g + j];
                            bs_bad += s16 != bsum[g];
                        }
                        CHECK(bs_bad == 0, "%s: Q8_K bsums", k->name);
                    } else {
                        uint16_t dh;
                        memcpy(&dh, pb, 2);
                        CHECK(dh == tk_f32_to_f16(amax / 127.0f), "%s: d is not f16(amax/127)", k->name);
                        if (k->act_type == TK_Q8_1) {
                            uint16_t sh;
                            memcpy(&sh, pb + 2, 2);
                            CHECK(sh == tk_f32_to_f16(amax / 127.0f * (float)sum), "%s: s", k->name);
                        }
                    }
                }
            }
    }
    printf("activation convention: %ld exact ties, %ld quants the multiplier 1/(amax/127) would round differently\n",
           ties, other_mult_differs);
    CHECK(ties > 100 && other_mult_differs > 0, "the inputs exercise ties (%ld, %ld)", ties, other_mult_differs);
}

/* The int16 NF4 code book of the kernels: round(level * 2^14), error <= 2^-15. */
static void test_nf4_codebook(void) {
    static const int16_t L[16] = TK_NF4_LEVELS_I16;
    double worst = 0;
    for (int c = 0; c < 16; c++) {
        CHECK(L[c] == (int16_t)lrint(tk_nf4_values[c] * 16384.0), "level %d: %d", c, L[c]);
        worst = fmax(worst, fabs(L[c] * 0x1p-14 - tk_nf4_values[c]));
    }
    CHECK(worst <= 0x1p-15, "code book error %g > 2^-15", worst);
    printf("NF4 int16 code book: max |L/2^14 - level| = %.3g (bound 2^-15 = %.3g)\n", worst, 0x1p-15);
}

int main(void) {
    const char *seed = getenv("TK_TEST_SEED");
    if (seed) rng_state = strtoull(seed, NULL, 0);
    test_isa_selection();
    test_act_convention();
    test_nf4_codebook();

    const tk_dtype types[] = {TK_F32, TK_F16, TK_BF16, TK_Q4_0, TK_Q4_1, TK_Q5_0, TK_Q5_1, TK_Q8_0,
                              TK_IQ4_NL, TK_Q2_K, TK_Q3_K, TK_Q4_K, TK_Q5_K, TK_Q6_K, TK_IQ4_XS,
                              TK_NF4,  TK_NF4_DQ};
    const int ntoks[] = {1, 2, 3, 7, 16, 33};
    const int64_t rows_list[] = {1, 2, 3, 5, 7, 13, 33};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const tk_dtype wt = types[ti];
        const int be = tk_dtype_get(wt)->block_elems;
        const int64_t ns_q[] = {32, 64, 96, 256, 544};
        const int64_t ns_k[] = {256, 512, 1280};
        const int64_t ns_f[] = {1, 5, 8, 13, 64, 100, 257};
        const int64_t *ns = be == 256 ? ns_k : be == 32 ? ns_q : ns_f;
        const int nn = be == 256 ? 3 : be == 32 ? 5 : 7;
        for (int ni = 0; ni < nn; ni++)
            for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++) {
                const int nt = ntoks[(ni + ri) % 6];
                run_case(wt, rows_list[ri], ns[ni], nt, 0);
            }
        for (size_t k = 0; k < 6; k++) run_case(wt, 9, be == 256 ? 512 : 64, ntoks[k], 0);
        run_case(wt, 5, be == 256 ? 512 : 96, 3, 1);
        if (wt == TK_Q8_0) run_case(wt, 5, 96, 3, 2);
        if (wt == TK_NF4 || wt == TK_NF4_DQ) {
            /* more than 256 blocks (two NF4_DQ groups) with a 32-element tail;
             * prefill-sized batches (several token tiles, ragged last tile) */
            run_case(wt, 3, 257 * 64 + 32, 2, 0);
            run_case(wt, 11, 2048, 37, 0);
            run_case(wt, 6, 288, 9, 1);
        }
    }
    /* the tiled kernels (AMX for Q4_0 / Q8_0): every batch size 1..40 (token
     * tiles of 16 and tails, VNNI and tile paths), long rows (several K
     * chunks of both schedules), token chunks (> 64 tokens), extreme
     * values (all-0xFF blocks, Q8_0 weights of -128, activations at +-127) */
#if defined(__x86_64__)
    if (tk_isa_supported(TK_ISA_AMX)) {
        CHECK(tk_qkernel_get(TK_Q4_0, TK_ISA_AMX)->isa == TK_ISA_AMX, "Q4_0 has an AMX kernel");
        CHECK(tk_qkernel_get(TK_Q8_0, TK_ISA_AMX)->isa == TK_ISA_AMX, "Q8_0 has an AMX kernel");
    } else {
        printf("AMX kernel cases skipped: this CPU / OS has no usable AMX-INT8 (the other ISAs still run them)\n");
    }
#endif
    {
        int all[40];
        for (int i = 0; i < 40; i++) all[i] = i + 1;
        const int some[] = {1, 2, 4, 5, 8, 9, 15, 16, 17, 31, 32, 33, 40, 64, 65, 70, 100};
        const int few[] = {1, 3, 8, 9, 16, 20};
        const int chunked[] = {31, 32, 33, 63, 64, 65, 97, 223, 224, 225, 250};
        const tk_dtype tiled[] = {TK_Q4_0, TK_Q4_1, TK_Q5_0, TK_Q5_1, TK_Q8_0, TK_IQ4_NL};
        for (int i = 0; i < 6; i++) {
            const tk_dtype wt = tiled[i];
            test_invariance(wt, 37, 544, all, 40, 0);
            test_invariance(wt, 50, 5632, some, (int)(sizeof some / sizeof some[0]), 0);
            test_invariance(wt, 19, 8288, few, (int)(sizeof few / sizeof few[0]), 0); /* > 256 blocks */
            /* AVX2: 17 blocks, token chunks of 224 (7 passes of 32): passes and chunks with their tails */
            test_invariance(wt, 13, 544, chunked, (int)(sizeof chunked / sizeof chunked[0]), 0);
            /* AVX2: rows of more blocks than its panel kernels' token buffer take the tiled kernel */
            test_invariance(wt, 9, 32 * 4100, few, 3, 0);
            run_case(wt, 3, 32 * 4100, 2, 0);
            test_invariance(wt, 21, 96, all, 40, 1);
            if (wt == TK_Q8_0) test_invariance(wt, 21, 96, all, 40, 2);
            test_panels(wt, 37, 544, all, 40, 0);
            test_panels(wt, 50, 5632, some, (int)(sizeof some / sizeof some[0]), 0);
            test_panels(wt, 21, 96, all, 40, 1);
            if (wt == TK_Q8_0) test_panels(wt, 21, 96, all, 40, 2);
            test_panels_chunked(wt, 2053, 64, 1024);
            test_avxvnni(wt, 37, 544, all, 40, 0);
            test_avxvnni(wt, 50, 5632, some, (int)(sizeof some / sizeof some[0]), 0);
            test_avxvnni(wt, 21, 96, all, 40, 1);
            if (wt == TK_Q8_0) test_avxvnni(wt, 21, 96, all, 40, 2);
            /* accuracy against the scalar reference / float64 for tile-sized batches */
            run_case(wt, 37, 5632, 20, 0);
            run_case(wt, 33, 2048, 40, 0);
            run_case(wt, 17, 32, 17, 0);
            run_case(wt, 50, 64, 70, 0);
            run_case(wt, 5, 96, 20, 1);
            if (wt == TK_Q8_0) run_case(wt, 5, 96, 20, 2);
        }
        /* the AVX2 k-quant panels: ragged panels, token passes and their
         * tails, token chunks (8192 columns: 28 tokens per chunk), extreme
         * values (all-0xFF blocks: the int16 sums at their bounds) */
        const tk_dtype kpanel[] = {TK_Q4_K, TK_Q5_K, TK_Q6_K};
        for (int i = 0; i < 3; i++) {
            const tk_dtype wt = kpanel[i];
            test_invariance(wt, 37, 1024, all, 40, 0);
            test_invariance(wt, 19, 8192, some, (int)(sizeof some / sizeof some[0]), 0);
            test_invariance(wt, 13, 512, all, 40, 1);
            test_panels(wt, 37, 1024, all, 40, 0);
            test_panels(wt, 19, 8192, some, (int)(sizeof some / sizeof some[0]), 0);
            test_panels(wt, 13, 512, all, 40, 1);
            test_panels_chunked(wt, 2053, 256, 1024);
            run_case(wt, 37, 2048, 20, 0);
            run_case(wt, 11, 8192, 40, 0);
            run_case(wt, 9, 512, 17, 1);
        }
    }
    printf("max |simd - scalar| / S = %.3g, max |y - y64| / S = %.3g\n", max_rel_simd, max_rel_ref);
    TK_TEST_END();
}
