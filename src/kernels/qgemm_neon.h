/* The arm64 NEON GEMM kernels, written once for both integer dot-product
 * flavours: qgemm_neon.c includes this file for plain Advanced SIMD
 * (armv8-a: vmull/vmlal + vpadal), qgemm_neon_dotprod.c, compiled with
 * -march=armv8.2-a+dotprod, for vdotq_s32.  Each defines before including
 *
 *   NEON_DOTPROD   1 for vdotq_s32, 0 for the widening multiplies
 *   NEON_SUFFIX    the kernels' name suffix ("/neon", "/neon+dotprod")
 *
 * and ends with NEON_KERNELS(lookup function name).
 *
 * Bit-identical to the scalar reference (qgemm_scalar.c, nf4_dot.c): the
 * integer block dots are exact whatever the instruction, and every float
 * operation of the reference is done in the same order, one IEEE operation
 * per lane (vmulq / vaddq / vsubq, never a fused multiply-add: the
 * reference is compiled without contraction, ISO C), with one vector lane
 * per row (quantized types) or the reference's eight partial sums in two
 * vectors (float types).  So every result is the reference's, for any
 * batch size, row split or thread count.
 *
 * Tiling: a micro-kernel computes MR rows x NT tokens (MR = 4 rows in the
 * lanes of a vector for the quantized types, 1 for the float types; NT <=
 * NT_MAX = 4, NT_K for the 256-element types).  Each weight block is unpacked once per row and token tile and
 * the four rows' integer sums are reduced into one vector with three
 * pairwise adds.  Ragged row tiles repeat the last row (results dropped). */
#ifndef TK_QGEMM_NEON_H
#define TK_QGEMM_NEON_H

#include <arm_neon.h>
#include <stddef.h>

#include "nf4_dot.h"
#include "qgemm_impl.h"

#define AI static inline __attribute__((always_inline))
/* the row and token loops of a micro-kernel, fully unrolled (constant trip
 * counts: the vectors stay in registers) */
#define UNROLL _Pragma("GCC unroll 16")

enum { MR = 4, NT_MAX = 4 };
/* activation bytes of one token chunk, kept in L2 while all row tiles pass */
#define CHUNK_BYTES (256 * 1024)

typedef const uint8_t *bptr;

AI uint16_t ld16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
AI float ldf(const void *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
/* Vector loads from any address (weights and activations need no
 * alignment; vld1q_f32 on a float * would claim 4-byte alignment). */
AI float32x4_t ldq_f32(const void *p) { return vreinterpretq_f32_u8(vld1q_u8(p)); }
AI int16x8_t ldq_s16(const void *p) { return vreinterpretq_s16_u8(vld1q_u8(p)); }
AI uint16x8_t ldq_u16(const void *p) { return vreinterpretq_u16_u8(vld1q_u8(p)); }
/* A tile's sums, NT tokens x MR rows, into out (row i, token j at i * NT_MAX + j). */
AI void store_tile(const float32x4_t *acc, int nt, float *out) {
    UNROLL for (int j = 0; j < nt; j++) {
        float v[MR];
        vst1q_f32(v, acc[j]);
        UNROLL for (int i = 0; i < MR; i++) out[i * NT_MAX + j] = v[i];
    }
}
/* IEEE half to float (exact, as tk_f16_to_f32). */
AI float h2f(const void *p) {
    __fp16 h;
    memcpy(&h, p, 2);
    return (float)h;
}
/* The halves at offset off of the MR rows, as floats in lanes 0..3. */
AI float32x4_t h2f_rows(const bptr *w, size_t off) {
    uint16_t h[MR];
    UNROLL for (int i = 0; i < MR; i++) h[i] = ld16(w[i] + off);
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

/* ---- integer dots: 16 or 32 int8 x int8 products summed into lanes ---- */

AI int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) {
#if NEON_DOTPROD
    return vdotq_s32(acc, w, a);
#else
    /* two products per int16 lane: |w| <= 128, |a| <= 127, so <= 32512 */
    return vpadalq_s16(acc, vmlal_high_s8(vmull_s8(vget_low_s8(w), vget_low_s8(a)), w, a));
#endif
}
AI int32x4_t dot32(int32x4_t acc, int8x16_t w0, int8x16_t w1, int8x16_t a0, int8x16_t a1) {
    return dot16(dot16(acc, w0, a0), w1, a1);
}
/* lane i = the sum of p[i]'s lanes */
AI int32x4_t reduce4(const int32x4_t p[MR]) { return vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3])); }

/* lanes of b where m selects (b & m != 0) get v, the others 0 */
AI uint8x16_t bitsel(uint8x16_t b, uint8_t bit, uint8_t v) {
    return vandq_u8(vtstq_u8(b, vdupq_n_u8(bit)), vdupq_n_u8(v));
}

/* ================= legacy 32-element blocks ================= */

enum { L_Q4_0, L_Q4_1, L_Q5_0, L_Q5_1, L_Q8_0, L_IQ4_NL };

AI size_t lbytes(int T) {
    return T == L_Q4_0 ? 18 : T == L_Q4_1 ? 20 : T == L_Q5_0 ? 22 : T == L_Q5_1 ? 24 : T == L_Q8_0 ? 34 : 18;
}
AI int lmin(int T) { return T == L_Q4_1 || T == L_Q5_1; }

/* Q5: the 32 high bits (bit j: element j) as 0x10 in bytes 0..15, 16..31 */
AI void q5_high(bptr qh, uint8x16_t *h0, uint8x16_t *h1) {
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t m = vld1q_u8(bits);
    *h0 = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1])), m), vdupq_n_u8(0x10));
    *h1 = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3])), m), vdupq_n_u8(0x10));
}

/* A block's 32 weight quants, elements 0..15 and 16..31. */
AI void l_unpack(int T, bptr b, int8x16_t *w0, int8x16_t *w1) {
    const uint8x16_t lo4 = vdupq_n_u8(0xF);
    if (T == L_Q8_0) {
        *w0 = vld1q_s8((const int8_t *)(b + 2));
        *w1 = vld1q_s8((const int8_t *)(b + 18));
        return;
    }
    const size_t qs = T == L_Q4_0 || T == L_IQ4_NL ? 2 : T == L_Q4_1 ? 4 : T == L_Q5_0 ? 6 : 8;
    const uint8x16_t q = vld1q_u8(b + qs);
    uint8x16_t lo = vandq_u8(q, lo4), hi = vshrq_n_u8(q, 4);
    if (T == L_IQ4_NL) {
        const int8x16_t kv = vld1q_s8(tk_kvalues_iq4nl);
        *w0 = vqtbl1q_s8(kv, lo);
        *w1 = vqtbl1q_s8(kv, hi);
        return;
    }
    if (T == L_Q5_0 || T == L_Q5_1) {
        uint8x16_t h0, h1;
        q5_high(b + (T == L_Q5_0 ? 2 : 4), &h0, &h1);
        lo = vorrq_u8(lo, h0);
        hi = vorrq_u8(hi, h1);
    }
    const int8_t off = T == L_Q4_0 ? 8 : T == L_Q5_0 ? 16 : 0;
    *w0 = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(off));
    *w1 = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(off));
}

/* MR rows x NT tokens of a legacy type over nb blocks:
 *   acc += (float)isum * (dw * da)              (+ mw * sa for Q4_1, Q5_1) */
AI void mk_legacy(const int T, const int NT, const bptr *w, const bptr *a, int64_t nb, float *out) {
    const size_t bw = lbytes(T), ba = lmin(T) ? sizeof(tk_block_q8_1) : sizeof(tk_block_q8_0);
    const size_t aq = lmin(T) ? offsetof(tk_block_q8_1, qs) : offsetof(tk_block_q8_0, qs);
    float32x4_t acc[NT_MAX];
    UNROLL for (int j = 0; j < NT; j++) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        int32x4_t p[NT_MAX][MR];
        bptr wb[MR];
        UNROLL for (int i = 0; i < MR; i++) {
            wb[i] = w[i] + (size_t)b * bw;
            int8x16_t w0, w1;
            l_unpack(T, wb[i], &w0, &w1);
            UNROLL for (int j = 0; j < NT; j++) {
                const int8_t *q = (const int8_t *)(a[j] + (size_t)b * ba + aq);
                p[j][i] = dot32(vdupq_n_s32(0), w0, w1, vld1q_s8(q), vld1q_s8(q + 16));
            }
        }
        const float32x4_t dw = h2f_rows(wb, 0);
        const float32x4_t mw = lmin(T) ? h2f_rows(wb, 2) : dw;
        UNROLL for (int j = 0; j < NT; j++) {
            const bptr ab = a[j] + (size_t)b * ba;
            float32x4_t t = vmulq_f32(vcvtq_f32_s32(reduce4(p[j])), vmulq_n_f32(dw, h2f(ab)));
            if (lmin(T)) t = vaddq_f32(t, vmulq_n_f32(mw, h2f(ab + 2)));
            acc[j] = vaddq_f32(acc[j], t);
        }
    }
    store_tile(acc, NT, out);
}

#define C_Q4_0(NT, w, a, n, o) mk_legacy(L_Q4_0, NT, w, a, (n) / 32, o)
#define C_Q4_1(NT, w, a, n, o) mk_legacy(L_Q4_1, NT, w, a, (n) / 32, o)
#define C_Q5_0(NT, w, a, n, o) mk_legacy(L_Q5_0, NT, w, a, (n) / 32, o)
#define C_Q5_1(NT, w, a, n, o) mk_legacy(L_Q5_1, NT, w, a, (n) / 32, o)
#define C_Q8_0(NT, w, a, n, o) mk_legacy(L_Q8_0, NT, w, a, (n) / 32, o)
#define C_IQ4_NL(NT, w, a, n, o) mk_legacy(L_IQ4_NL, NT, w, a, (n) / 32, o)

/* ================= k-quants and IQ4_XS (256-element blocks) ================= */

enum { K_Q2, K_Q3, K_Q4, K_Q5, K_Q6, K_IQ4XS };

AI size_t kbytes(int T) {
    return T == K_Q2 ? sizeof(tk_block_q2_K)
         : T == K_Q3 ? sizeof(tk_block_q3_K)
         : T == K_Q4 ? sizeof(tk_block_q4_K)
         : T == K_Q5 ? sizeof(tk_block_q5_K)
         : T == K_Q6 ? sizeof(tk_block_q6_K)
                     : sizeof(tk_block_iq4_xs);
}
/* the type has a min per sub-block (msum term) */
AI int kmin(int T) { return T == K_Q2 || T == K_Q4 || T == K_Q5; }
/* sub-blocks of 32 elements (else 16) */
AI int ksb32(int T) { return T == K_Q4 || T == K_Q5 || T == K_IQ4XS; }
AI size_t koff_d(int T) {
    return T == K_Q2 ? offsetof(tk_block_q2_K, d)
         : T == K_Q3 ? offsetof(tk_block_q3_K, d)
         : T == K_Q6 ? offsetof(tk_block_q6_K, d)
                     : 0; /* Q4_K Q5_K IQ4_XS */
}
AI size_t koff_dmin(int T) { return T == K_Q2 ? offsetof(tk_block_q2_K, dmin) : offsetof(tk_block_q4_K, dmin); }

/* A block's sub-block scales: sc[g] for each 16-element group g (a
 * 32-element sub-block's scale twice), and its mins as int16 (Q4_K Q5_K: 8,
 * Q2_K: 16). */
AI void kscales(int T, bptr b, int32_t sc[16], int16x8_t mins[2]) {
    if (T == K_Q4 || T == K_Q5) {
        uint8_t sm[16];
        tk_qkernel_k4_scales(b + offsetof(tk_block_q4_K, scales), sm);
        for (int g = 0; g < 16; g++) sc[g] = sm[g / 2];
        mins[0] = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm + 8)));
    } else if (T == K_Q2) {
        const uint8x16_t s = vld1q_u8(b + offsetof(tk_block_q2_K, scales));
        uint8_t lo[16];
        vst1q_u8(lo, vandq_u8(s, vdupq_n_u8(0xF)));
        for (int g = 0; g < 16; g++) sc[g] = lo[g];
        const uint8x16_t m = vshrq_n_u8(s, 4);
        mins[0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(m)));
        mins[1] = vreinterpretq_s16_u16(vmovl_high_u8(m));
    } else if (T == K_Q3) {
        int8_t s[16];
        tk_qkernel_k3_scales(b + offsetof(tk_block_q3_K, scales), s);
        for (int g = 0; g < 16; g++) sc[g] = s[g];
    } else if (T == K_Q6) {
        const int8_t *s = (const int8_t *)(b + offsetof(tk_block_q6_K, scales));
        for (int g = 0; g < 16; g++) sc[g] = s[g];
    } else {
        tk_block_iq4_xs x;
        memcpy(&x, b, sizeof x);
        for (int g = 0; g < 16; g++) sc[g] = tk_qkernel_iq4xs_scale(&x, g / 2);
    }
}

/* Elements 64c .. 64c + 63 of a block (c < 4), in activation order, as
 * four vectors of 16. */
AI void kunpack(int T, bptr b, int c, int8x16_t w[4]) {
    const uint8x16_t lo4 = vdupq_n_u8(0xF), lo2 = vdupq_n_u8(3);
    if (T == K_Q4 || T == K_Q5) {
        /* low nibbles of qs[32c..]: sub-block 2c; high nibbles: 2c + 1 */
        const size_t qo = T == K_Q4 ? offsetof(tk_block_q4_K, qs) : offsetof(tk_block_q5_K, qs);
        const uint8x16_t q0 = vld1q_u8(b + qo + 32 * c), q1 = vld1q_u8(b + qo + 32 * c + 16);
        uint8x16_t v[4] = {vandq_u8(q0, lo4), vandq_u8(q1, lo4), vshrq_n_u8(q0, 4), vshrq_n_u8(q1, 4)};
        if (T == K_Q5) {
            /* the fifth bit of element l of sub-block s: bit s of qh[l] */
            const uint8x16_t h0 = vld1q_u8(b + offsetof(tk_block_q5_K, qh));
            const uint8x16_t h1 = vld1q_u8(b + offsetof(tk_block_q5_K, qh) + 16);
            v[0] = vorrq_u8(v[0], bitsel(h0, (uint8_t)(1u << (2 * c)), 0x10));
            v[1] = vorrq_u8(v[1], bitsel(h1, (uint8_t)(1u << (2 * c)), 0x10));
            v[2] = vorrq_u8(v[2], bitsel(h0, (uint8_t)(2u << (2 * c)), 0x10));
            v[3] = vorrq_u8(v[3], bitsel(h1, (uint8_t)(2u << (2 * c)), 0x10));
        }
        UNROLL for (int k = 0; k < 4; k++) w[k] = vreinterpretq_s8_u8(v[k]);
    } else if (T == K_IQ4XS) {
        /* sub-block s = 2c, 2c + 1: low nibbles of qs[16s..], then high */
        const int8x16_t kv = vld1q_s8(tk_kvalues_iq4nl);
        const bptr qs = b + offsetof(tk_block_iq4_xs, qs) + 32 * c;
        const uint8x16_t q0 = vld1q_u8(qs), q1 = vld1q_u8(qs + 16);
        w[0] = vqtbl1q_s8(kv, vandq_u8(q0, lo4));
        w[1] = vqtbl1q_s8(kv, vshrq_n_u8(q0, 4));
        w[2] = vqtbl1q_s8(kv, vandq_u8(q1, lo4));
        w[3] = vqtbl1q_s8(kv, vshrq_n_u8(q1, 4));
    } else {
        /* Q2_K Q3_K Q6_K: element 128h + 32g + l (l < 32), here h = c / 2,
         * g = 2 (c % 2) + k / 2, l = 16 (k % 2) + lane */
        const int h = c / 2, e = c % 2;
        UNROLL for (int k = 0; k < 4; k++) {
            const int g = 2 * e + k / 2, l0 = 16 * (k % 2);
            uint8x16_t v;
            if (T == K_Q6) {
                /* 4 bits of ql[64h + 32(g&1) + l] (high nibble for g >= 2),
                 * 2 bits at shift 2g of qh[32h + l]; minus 32 */
                const uint8x16_t ql = vld1q_u8(b + offsetof(tk_block_q6_K, ql) + 64 * h + 32 * (g & 1) + l0);
                const uint8x16_t qh = vld1q_u8(b + offsetof(tk_block_q6_K, qh) + 32 * h + l0);
                const uint8x16_t lo = g >= 2 ? vshrq_n_u8(ql, 4) : vandq_u8(ql, lo4);
                const uint8x16_t hi = vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t)(-2 * g))), lo2);
                w[k] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), vdupq_n_s8(32));
                continue;
            }
            /* Q2_K Q3_K: 2 bits at shift 2g of qs[32h + l] */
            const size_t qo = T == K_Q2 ? offsetof(tk_block_q2_K, qs) : offsetof(tk_block_q3_K, qs);
            const uint8x16_t q = vld1q_u8(b + qo + 32 * h + l0);
            v = vandq_u8(vshlq_u8(q, vdupq_n_s8((int8_t)(-2 * g))), lo2);
            if (T == K_Q2) {
                w[k] = vreinterpretq_s8_u8(v);
            } else {
                /* minus 4 unless bit 4h + g of hmask[l] is set */
                const uint8x16_t m = vld1q_u8(b + offsetof(tk_block_q3_K, hmask) + l0);
                v = vorrq_u8(v, bitsel(m, (uint8_t)(1u << (4 * h + g)), 4));
                w[k] = vsubq_s8(vreinterpretq_s8_u8(v), vdupq_n_s8(4));
            }
        }
    }
}

/* MR rows x NT tokens of a 256-element type over nb blocks:
 *   acc += (float)isum * (d * da) - (float)msum * (dmin * da)   (Q2_K Q4_K Q5_K)
 *   acc += (float)isum * (d * da)                               (Q3_K Q6_K IQ4_XS) */
AI void mk_k(const int T, const int NT, const bptr *w, const bptr *a, int64_t nb, float *out) {
    const size_t bw = kbytes(T);
    float32x4_t acc[NT_MAX];
    UNROLL for (int j = 0; j < NT; j++) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        bptr wb[MR], ab[NT_MAX];
        UNROLL for (int i = 0; i < MR; i++) wb[i] = w[i] + (size_t)b * bw;
        UNROLL for (int j = 0; j < NT; j++) ab[j] = a[j] + (size_t)b * sizeof(tk_block_q8_K);
        int32x4_t p[NT_MAX][MR], m[NT_MAX][MR];
        UNROLL for (int i = 0; i < MR; i++) {
            int32_t sc[16];
            int16x8_t mins[2];
            kscales(T, wb[i], sc, mins);
            UNROLL for (int j = 0; j < NT; j++) p[j][i] = vdupq_n_s32(0);
            UNROLL for (int c = 0; c < 4; c++) {
                int8x16_t wv[4];
                kunpack(T, wb[i], c, wv);
                const int32x4_t scv = vld1q_s32(sc + 4 * c); /* groups 4c .. 4c + 3 */
                UNROLL for (int j = 0; j < NT; j++) {
                    const int8_t *q = (const int8_t *)(ab[j] + offsetof(tk_block_q8_K, qs)) + 64 * c;
                    int8x16_t av[4];
                    UNROLL for (int k = 0; k < 4; k++) av[k] = vld1q_s8(q + 16 * k);
                    /* lane k of g: (a part of) group k's dot, then times its scale */
                    int32x4_t g;
                    if (ksb32(T)) {
                        g = vpaddq_s32(dot32(vdupq_n_s32(0), wv[0], wv[1], av[0], av[1]),
                                       dot32(vdupq_n_s32(0), wv[2], wv[3], av[2], av[3]));
                    } else {
                        int32x4_t d[MR];
                        UNROLL for (int k = 0; k < 4; k++) d[k] = dot16(vdupq_n_s32(0), wv[k], av[k]);
                        g = reduce4(d);
                    }
                    p[j][i] = vmlaq_s32(p[j][i], g, scv);
                }
            }
            if (kmin(T))
                UNROLL for (int j = 0; j < NT; j++) {
                    const bptr bs = ab[j] + offsetof(tk_block_q8_K, bsums);
                    const int16x8_t b0 = ldq_s16(bs), b1 = ldq_s16(bs + 16);
                    if (T == K_Q2) { /* min of sub-block g times bsums[g] */
                        int32x4_t s = vmull_s16(vget_low_s16(mins[0]), vget_low_s16(b0));
                        s = vmlal_high_s16(s, mins[0], b0);
                        s = vmlal_s16(s, vget_low_s16(mins[1]), vget_low_s16(b1));
                        m[j][i] = vmlal_high_s16(s, mins[1], b1);
                    } else { /* min of sub-block s times bsums[2s] + bsums[2s + 1] */
                        const int16x8_t bp = vpaddq_s16(b0, b1);
                        m[j][i] = vmlal_high_s16(vmull_s16(vget_low_s16(mins[0]), vget_low_s16(bp)), mins[0], bp);
                    }
                }
        }
        const float32x4_t d = h2f_rows(wb, koff_d(T));
        const float32x4_t dmin = kmin(T) ? h2f_rows(wb, koff_dmin(T)) : d;
        UNROLL for (int j = 0; j < NT; j++) {
            const float da = ldf(ab[j]);
            float32x4_t t = vmulq_f32(vcvtq_f32_s32(reduce4(p[j])), vmulq_n_f32(d, da));
            if (kmin(T)) t = vsubq_f32(t, vmulq_f32(vcvtq_f32_s32(reduce4(m[j])), vmulq_n_f32(dmin, da)));
            acc[j] = vaddq_f32(acc[j], t);
        }
    }
    store_tile(acc, NT, out);
}

#define C_Q2_K(NT, w, a, n, o) mk_k(K_Q2, NT, w, a, (n) / 256, o)
#define C_Q3_K(NT, w, a, n, o) mk_k(K_Q3, NT, w, a, (n) / 256, o)
#define C_Q4_K(NT, w, a, n, o) mk_k(K_Q4, NT, w, a, (n) / 256, o)
#define C_Q5_K(NT, w, a, n, o) mk_k(K_Q5, NT, w, a, (n) / 256, o)
#define C_Q6_K(NT, w, a, n, o) mk_k(K_Q6, NT, w, a, (n) / 256, o)
#define C_IQ4_XS(NT, w, a, n, o) mk_k(K_IQ4XS, NT, w, a, (n) / 256, o)

/* ================= NF4, NF4_DQ (nf4_dot.h) ================= */

/* Absmax of block b and its code bytes (rows of nb blocks, ng DQ groups). */
AI float nf4_absmax(int DQ, bptr row, int64_t nb, int64_t ng, int64_t b, bptr *codes) {
    if (!DQ) {
        *codes = row + 36 * b + 4;
        return ldf(row + 36 * b);
    }
    const bptr g = row + 8 * (b / TK_NF4_DQ_GROUP), qa = row + 8 * ng;
    *codes = qa + nb + 32 * b;
    return (float)qa[b] * ldf(g) + ldf(g + 4);
}

/* 16 codes (0..15) to their int16 levels: elements 0..7 and 8..15 */
AI void nf4_levels(uint8x16_t code, int16x8_t *l0, int16x8_t *l1) {
    static const int16_t lv[16] = TK_NF4_LEVELS_I16;
    uint8_t tlo[16], thi[16];
    for (int c = 0; c < 16; c++) {
        tlo[c] = (uint8_t)((uint16_t)lv[c] & 0xFF);
        thi[c] = (uint8_t)((uint16_t)lv[c] >> 8);
    }
    const uint8x16_t lo = vqtbl1q_u8(vld1q_u8(tlo), code), hi = vqtbl1q_u8(vld1q_u8(thi), code);
    *l0 = vreinterpretq_s16_u8(vzip1q_u8(lo, hi));
    *l1 = vreinterpretq_s16_u8(vzip2q_u8(lo, hi));
}

/* sum of 16 int16 levels times 16 int8 activations, into acc's lanes */
AI int32x4_t nf4_dot16(int32x4_t acc, uint8x16_t code, const int8_t *a) {
    int16x8_t l0, l1;
    nf4_levels(code, &l0, &l1);
    const int8x16_t av = vld1q_s8(a);
    const int16x8_t a0 = vmovl_s8(vget_low_s8(av)), a1 = vmovl_high_s8(av);
    acc = vmlal_s16(acc, vget_low_s16(l0), vget_low_s16(a0));
    acc = vmlal_high_s16(acc, l0, a0);
    acc = vmlal_s16(acc, vget_low_s16(l1), vget_low_s16(a1));
    return vmlal_high_s16(acc, l1, a1);
}

/* MR rows x NT tokens: per 64-block b, f = sum over its chunks k of
 * (float)isum_k * d_k, acc += f * absmax_b; y = acc * 2^-14. */
AI void mk_nf4(const int DQ, const int NT, const bptr *w, const bptr *a, int64_t n, float *out) {
    const int64_t nb = (n + TK_NF4_BLOCK - 1) / TK_NF4_BLOCK, ng = (nb + TK_NF4_DQ_GROUP - 1) / TK_NF4_DQ_GROUP;
    const uint8x16_t lo4 = vdupq_n_u8(0xF);
    float32x4_t acc[NT_MAX];
    UNROLL for (int j = 0; j < NT; j++) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const int full = n - TK_NF4_BLOCK * b >= TK_NF4_BLOCK;
        int32x4_t p[2][NT_MAX][MR];
        float am[MR];
        UNROLL for (int i = 0; i < MR; i++) {
            bptr c;
            am[i] = nf4_absmax(DQ, w[i], nb, ng, b, &c);
            /* chunk h's 32 codes, elements 0..15 and 16..31 */
            uint8x16_t cd[2][2];
            const uint8x16_t c0 = vld1q_u8(c);
            if (full) {
                const uint8x16_t c1 = vld1q_u8(c + 16);
                cd[0][0] = vandq_u8(c0, lo4);
                cd[0][1] = vandq_u8(c1, lo4);
                cd[1][0] = vshrq_n_u8(c0, 4);
                cd[1][1] = vshrq_n_u8(c1, 4);
            } else {
                cd[0][0] = vandq_u8(c0, lo4);
                cd[0][1] = vshrq_n_u8(c0, 4);
            }
            UNROLL for (int h = 0; h < 1 + full; h++)
                UNROLL for (int j = 0; j < NT; j++) {
                    const int8_t *q = (const int8_t *)(a[j] + (size_t)(2 * b + h) * sizeof(tk_block_q8_0) + 2);
                    p[h][j][i] = nf4_dot16(nf4_dot16(vdupq_n_s32(0), cd[h][0], q), cd[h][1], q + 16);
                }
        }
        const float32x4_t amv = vld1q_f32(am);
        UNROLL for (int j = 0; j < NT; j++) {
            float32x4_t f = vdupq_n_f32(0.0f);
            UNROLL for (int h = 0; h < 1 + full; h++) {
                const float d = h2f(a[j] + (size_t)(2 * b + h) * sizeof(tk_block_q8_0));
                f = vaddq_f32(f, vmulq_n_f32(vcvtq_f32_s32(reduce4(p[h][j])), d));
            }
            acc[j] = vaddq_f32(acc[j], vmulq_f32(f, amv));
        }
    }
    UNROLL for (int j = 0; j < NT; j++) {
        float v[MR];
        vst1q_f32(v, vmulq_n_f32(acc[j], 0x1p-14f));
        UNROLL for (int i = 0; i < MR; i++) out[i * NT_MAX + j] = v[i];
    }
}

#define C_NF4(NT, w, a, n, o) mk_nf4(0, NT, w, a, n, o)
#define C_NF4_DQ(NT, w, a, n, o) mk_nf4(1, NT, w, a, n, o)

/* ================= float weights: one row, eight partial sums ================= */

enum { F_F32, F_F16, F_BF16 };

/* weights [i, i + 8) of a row as floats */
AI void f_load(int T, bptr row, int64_t i, float32x4_t *lo, float32x4_t *hi) {
    if (T == F_F32) {
        *lo = ldq_f32(row + 4 * i);
        *hi = ldq_f32(row + 4 * i + 16);
        return;
    }
    const uint16x8_t h = ldq_u16(row + 2 * i);
    if (T == F_F16) {
        *lo = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h)));
        *hi = vcvt_high_f32_f16(vreinterpretq_f16_u16(h));
    } else {
        *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
        *hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
    }
}
AI float f_one(int T, bptr row, int64_t i) {
    if (T == F_F32) return ldf(row + 4 * i);
    if (T == F_F16) return h2f(row + 2 * i);
    const uint32_t u = (uint32_t)ld16(row + 2 * i) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* One row (w[0]) x NT tokens: s[i % 8] += w[i] * x[i], then the
 * reference's pairwise sum of the eight. */
AI void mk_f(const int T, const int NT, const bptr *w, const bptr *a, int64_t n, float *out) {
    float32x4_t s[NT_MAX][2];
    UNROLL for (int j = 0; j < NT; j++) s[j][0] = s[j][1] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t w0, w1;
        f_load(T, w[0], i, &w0, &w1);
        UNROLL for (int j = 0; j < NT; j++) {
            const bptr x = a[j] + 4 * i;
            s[j][0] = vaddq_f32(s[j][0], vmulq_f32(w0, ldq_f32(x)));
            s[j][1] = vaddq_f32(s[j][1], vmulq_f32(w1, ldq_f32(x + 16)));
        }
    }
    UNROLL for (int j = 0; j < NT; j++) {
        float l[8];
        vst1q_f32(l, s[j][0]);
        vst1q_f32(l + 4, s[j][1]);
        for (int k = 0; i + k < n; k++) l[k] += f_one(T, w[0], i + k) * ldf(a[j] + 4 * (i + k));
        out[j] = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    }
}

#define C_F32(NT, w, a, n, o) mk_f(F_F32, NT, w, a, n, o)
#define C_F16(NT, w, a, n, o) mk_f(F_F16, NT, w, a, n, o)
#define C_BF16(NT, w, a, n, o) mk_f(F_BF16, NT, w, a, n, o)

/* ================= driver ================= */

/* A micro-kernel: rows w[0..mr), tokens a[0..NT), full depth; writes
 * out[i * NT_MAX + j] for row i, token j. */
typedef void (*mk_fn)(const bptr *w, const bptr *a, int64_t n, float *out);

/* Rows in tiles of mr (the last tile repeats its last row), tokens in
 * tiles of 1..nt_max (kernels mk[nt - 1]), in chunks whose activations stay
 * in L2 while all row tiles pass over them. */
static void gemm_tiles(const mk_fn *mk, int mr, int nt_max, const void *w, size_t wrb, int64_t n, int64_t r0,
                       int64_t r1, const void *act, size_t arb, int n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w, *A = act;
    int64_t chunk = (int64_t)CHUNK_BYTES / (int64_t)(arb ? arb : 1) / nt_max * nt_max;
    if (chunk < nt_max) chunk = nt_max;
    for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
        const int64_t t1 = t0 + chunk < n_tok ? t0 + chunk : n_tok;
        for (int64_t r = r0; r < r1; r += mr) {
            bptr wp[MR];
            for (int i = 0; i < mr; i++) wp[i] = W + (size_t)(r + i < r1 ? r + i : r1 - 1) * wrb;
            for (int64_t t = t0; t < t1;) {
                const int nt = t1 - t >= nt_max ? nt_max : (int)(t1 - t);
                bptr ap[NT_MAX];
                for (int j = 0; j < nt; j++) ap[j] = A + (size_t)(t + j) * arb;
                float out[MR * NT_MAX];
                mk[nt - 1](wp, ap, n, out);
                for (int i = 0; i < mr && r + i < r1; i++)
                    for (int j = 0; j < nt; j++) y[(t + j) * ldy + r + i] = out[i * NT_MAX + j];
                t += nt;
            }
        }
    }
}

/* ================= instantiation ================= */

/* Tokens per tile of the 256-element types: their unpacked weights and
 * four rows' accumulators use up the registers sooner (more tokens spill:
 * more instructions per row and token in the compiled kernels). */
#define NT_K (NEON_DOTPROD ? 2 : 1)

/* The weight types, as X(type, activation type, kernel name, rows per
 * tile, tokens per tile). */
#define NEON_TYPES(X)                                                                                              \
    X(Q4_0, Q8_0, q4_0, MR, NT_MAX) X(Q4_1, Q8_1, q4_1, MR, NT_MAX) X(Q5_0, Q8_0, q5_0, MR, NT_MAX)                \
    X(Q5_1, Q8_1, q5_1, MR, NT_MAX) X(Q8_0, Q8_0, q8_0, MR, NT_MAX) X(IQ4_NL, Q8_0, iq4_nl, MR, NT_MAX)            \
    X(Q2_K, Q8_K, q2_K, MR, NT_K) X(Q3_K, Q8_K, q3_K, MR, NT_K) X(Q4_K, Q8_K, q4_K, MR, NT_K)                      \
    X(Q5_K, Q8_K, q5_K, MR, NT_K) X(Q6_K, Q8_K, q6_K, MR, NT_K) X(IQ4_XS, Q8_K, iq4_xs, MR, NT_K)                  \
    X(NF4, Q8_0, nf4, MR, NT_MAX) X(NF4_DQ, Q8_0, nf4dq, MR, NT_MAX)                                               \
    X(F32, F32, f32, 1, NT_MAX) X(F16, F32, f16, 1, NT_MAX) X(BF16, F32, bf16, 1, NT_MAX)

/* The micro-kernel of NAME for NT tokens; those past the type's NTMAX are
 * never called and repeat NTMAX's (the compiler folds them). */
#define NEON_MK(T, NAME, NTMAX, NT)                                                 \
    static void NAME##_##NT(const bptr *w, const bptr *a, int64_t n, float *o) {    \
        C_##T((NT) < (NTMAX) ? (NT) : (NTMAX), w, a, n, o);                         \
    }
#define NEON_DEF(T, AT, NAME, ROWS, NTMAX)                                                                   \
    NEON_MK(T, NAME, NTMAX, 1) NEON_MK(T, NAME, NTMAX, 2) NEON_MK(T, NAME, NTMAX, 3)                         \
    NEON_MK(T, NAME, NTMAX, 4)                                                                               \
    static const mk_fn NAME##_mk[NT_MAX] = {NAME##_1, NAME##_2, NAME##_3, NAME##_4};                         \
    static void NAME##_gemm(const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1, const void *act,   \
                            size_t arb, int n_tok, float *y, int64_t ldy) {                                  \
        gemm_tiles(NAME##_mk, ROWS, NTMAX, w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);                      \
    }
#define NEON_PACK_Q8_0 tk_qkernel_act_bytes_q8_0, tk_qkernel_neon_quant_q8_0
#define NEON_PACK_Q8_1 tk_qkernel_act_bytes_q8_1, tk_qkernel_neon_quant_q8_1
#define NEON_PACK_Q8_K tk_qkernel_act_bytes_q8_K, tk_qkernel_neon_quant_q8_K
#define NEON_PACK_F32 tk_qkernel_act_bytes_f32, tk_qkernel_quant_f32
#define NEON_ROW(T, AT, NAME, ROWS, NTMAX) [TK_##T] = {TK_##T, TK_##AT, TK_ISA_NEON, #T NEON_SUFFIX, NEON_PACK_##AT, NAME##_gemm, NULL},

/* Every type's kernels, the table and its lookup function FN. */
#define NEON_KERNELS(FN)                                                       \
    NEON_TYPES(NEON_DEF)                                                       \
    static const tk_qkernel neon_kernels[TK_DTYPE_LIMIT] = {NEON_TYPES(NEON_ROW)}; \
    const tk_qkernel *FN(tk_dtype wtype) { return tk_qkernel_pick(neon_kernels, wtype); }

#endif
