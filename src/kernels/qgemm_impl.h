/* Internal to the qgemm kernels: per-ISA kernel tables and helpers shared by
 * the implementation files.  Not part of the engine API. */
#ifndef TK_QGEMM_IMPL_H
#define TK_QGEMM_IMPL_H

#include <string.h>

#include "../formats/quant_blocks.h"
#include "qgemm.h"

/* Each returns the ISA's kernel for a weight type, or NULL if it has none. */
const tk_qkernel *tk_qkernel_scalar(tk_dtype wtype);
const tk_qkernel *tk_qkernel_avx2(tk_dtype wtype);
const tk_qkernel *tk_qkernel_avx2_tiled(tk_dtype wtype); /* the row-tiled kernels alone */
/* Q4_K, Q5_K or Q6_K (wtype) from the panel layout, more than 4 tokens: the
 * AVX2 panel passes built with GCC's pressure-aware scheduling
 * (qgemm_avx2_kbatch.c); the arguments as tk_qkernel's gemm_panels */
void tk_qkernel_avx2_k_batch(tk_dtype wtype, const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1,
                             const void *act, size_t arb, int n_tok, float *y, int64_t ldy);
/* the 32-element types' AVX2 panel kernels with AVX-VNNI's vpdpbusd (the
 * same bits as tk_qkernel_avx2's); NULL for the other types or in builds
 * without AVX-VNNI */
const tk_qkernel *tk_qkernel_avxvnni(tk_dtype wtype);
const tk_qkernel *tk_qkernel_avx512(tk_dtype wtype);
const tk_qkernel *tk_qkernel_avx512_kpanel(tk_dtype wtype); /* 16-row k-quant panels, used by tk_qkernel_avx512 */
const tk_qkernel *tk_qkernel_avx512_lpanel(tk_dtype wtype); /* 16-row Q4_0 / Q8_0 panels, used by tk_qkernel_avx512 */
const tk_qkernel *tk_qkernel_avx512_tiled(tk_dtype wtype);  /* the row-tiled kernels alone */
const tk_qkernel *tk_qkernel_amx(tk_dtype wtype); /* Q4_0, Q8_0 */
/* arm64: the dotprod kernels when the CPU has them, else plain NEON */
const tk_qkernel *tk_qkernel_neon(tk_dtype wtype);
const tk_qkernel *tk_qkernel_neon_dotprod(tk_dtype wtype); /* NULL unless built with dotprod */

/* Packed activation row sizes. */
size_t tk_qkernel_act_bytes_q8_0(int64_t n);
size_t tk_qkernel_act_bytes_q8_1(int64_t n);
size_t tk_qkernel_act_bytes_q8_K(int64_t n);
size_t tk_qkernel_act_bytes_f32(int64_t n);

/* Scalar activation quantizers (the definition of the packed formats; the
 * SIMD ones must produce identical bytes). */
void tk_qkernel_quant_q8_0(const float *x, void *out, int64_t n);
void tk_qkernel_quant_q8_1(const float *x, void *out, int64_t n);
void tk_qkernel_quant_q8_K(const float *x, void *out, int64_t n);
void tk_qkernel_quant_f32(const float *x, void *out, int64_t n);

/* AVX2 versions (same bytes), also used by the AVX-512 kernels; only
 * defined in builds with the AVX2 file. */
void tk_qkernel_avx2_quant_q8_0(const float *x, void *out, int64_t n);
void tk_qkernel_avx2_quant_q8_1(const float *x, void *out, int64_t n);
void tk_qkernel_avx2_quant_q8_K(const float *x, void *out, int64_t n);

/* NEON versions (same bytes), used by both NEON kernel sets; only defined
 * in arm64 builds. */
void tk_qkernel_neon_quant_q8_0(const float *x, void *out, int64_t n);
void tk_qkernel_neon_quant_q8_1(const float *x, void *out, int64_t n);
void tk_qkernel_neon_quant_q8_K(const float *x, void *out, int64_t n);

/* table[wtype] if it has a kernel (a gemm), else NULL: the lookup of each
 * ISA's table, which is indexed by weight type. */
static inline const tk_qkernel *tk_qkernel_pick(const tk_qkernel table[TK_DTYPE_LIMIT], tk_dtype wtype) {
    return (unsigned)wtype < TK_DTYPE_LIMIT && table[wtype].gemm ? &table[wtype] : NULL;
}

/* A SIMD kernel table entry: weight type WT, activations packed as AT
 * (Q8_0, Q8_1, Q8_K by the AVX2 quantizers, or F32), named NAME SUFFIX. */
#define TK_QKERNEL_SIMD_KERNEL(ISA, SUFFIX, WT, AT, NAME, GEMM) \
    [WT] = {WT, TK_##AT, ISA, NAME SUFFIX, TK_QKERNEL_SIMD_PACK_##AT, GEMM, NULL}
/* ... and its panel-layout form PGEMM (kernels/panels.h) */
#define TK_QKERNEL_SIMD_PANELS(ISA, SUFFIX, WT, AT, NAME, GEMM, PGEMM) \
    [WT] = {WT, TK_##AT, ISA, NAME SUFFIX, TK_QKERNEL_SIMD_PACK_##AT, GEMM, PGEMM}
/* A panel kernel's two entry points over DRIVER(T, PL, w, ...): NAME reads
 * the row layout (PL = 0), NAME##_pl the panel layout (PL = 1). */
#define TK_QKERNEL_PANEL_GEMMS(NAME, DRIVER, T)                                                                 \
    static void NAME(const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1, const void *act, size_t arb, \
                     int n_tok, float *y, int64_t ldy) {                                                         \
        DRIVER(T, 0, w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);                                                \
    }                                                                                                            \
    static void NAME##_pl(const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1, const void *act,        \
                          size_t arb, int n_tok, float *y, int64_t ldy) {                                        \
        DRIVER(T, 1, w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);                                                \
    }
#define TK_QKERNEL_SIMD_PACK_Q8_0 tk_qkernel_act_bytes_q8_0, tk_qkernel_avx2_quant_q8_0
#define TK_QKERNEL_SIMD_PACK_Q8_1 tk_qkernel_act_bytes_q8_1, tk_qkernel_avx2_quant_q8_1
#define TK_QKERNEL_SIMD_PACK_Q8_K tk_qkernel_act_bytes_q8_K, tk_qkernel_avx2_quant_q8_K
#define TK_QKERNEL_SIMD_PACK_F32 tk_qkernel_act_bytes_f32, tk_qkernel_quant_f32

/* Q4_K / Q5_K: the 12 packed scale bytes to 8 scales (out[0..7]) and 8 mins
 * (out[8..15]), 6 bits each. */
static inline void tk_qkernel_k4_scales(const uint8_t *s, uint8_t out[16]) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    const uint32_t sc_lo = u0 & lo6;                                   /* sc 0..3 */
    const uint32_t m_lo = u1 & lo6;                                    /* m 0..3 */
    const uint32_t sc_hi = (u2 & lo4) | (((u0 >> 6) & lo2) << 4);      /* sc 4..7 */
    const uint32_t m_hi = ((u2 >> 4) & lo4) | (((u1 >> 6) & lo2) << 4); /* m 4..7 */
    memcpy(out, &sc_lo, 4);
    memcpy(out + 4, &sc_hi, 4);
    memcpy(out + 8, &m_lo, 4);
    memcpy(out + 12, &m_hi, 4);
}

/* The same as two 64-bit words (scales, mins), for building vectors
 * without a store / reload. */
static inline void tk_qkernel_k4_scales64(const uint8_t *s, uint64_t *sc, uint64_t *mn) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    *sc = (uint64_t)(u0 & lo6) | (uint64_t)((u2 & lo4) | (((u0 >> 6) & lo2) << 4)) << 32;
    *mn = (uint64_t)(u1 & lo6) | (uint64_t)(((u2 >> 4) & lo4) | (((u1 >> 6) & lo2) << 4)) << 32;
}

/* Q3_K: the 12 packed bytes to sixteen 6-bit scales (add -32 for their
 * value) as two 64-bit words: scales 0..7 and 8..15, one per byte.  Scale s
 * = low nibble (bytes 0..7: s < 8 low nibble of byte s, s >= 8 high nibble
 * of byte s - 8) | 2 bits from byte 8 + s%4 at bit pair s/4. */
static inline void tk_qkernel_k3_scales64(const uint8_t *s, uint64_t *lo8, uint64_t *hi8) {
    uint32_t a0, a1, hi;
    memcpy(&a0, s, 4);
    memcpy(&a1, s + 4, 4);
    memcpy(&hi, s + 8, 4);
    const uint32_t lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    const uint32_t v0 = (a0 & lo4) | ((hi & lo2) << 4);                 /* scales 0..3 */
    const uint32_t v1 = (a1 & lo4) | (((hi >> 2) & lo2) << 4);          /* 4..7 */
    const uint32_t v2 = ((a0 >> 4) & lo4) | (((hi >> 4) & lo2) << 4);   /* 8..11 */
    const uint32_t v3 = ((a1 >> 4) & lo4) | (((hi >> 6) & lo2) << 4);   /* 12..15 */
    *lo8 = (uint64_t)v0 | (uint64_t)v1 << 32;
    *hi8 = (uint64_t)v2 | (uint64_t)v3 << 32;
}

static inline void tk_qkernel_k3_scales(const uint8_t *s, int8_t out[16]) {
    uint64_t w[2];
    tk_qkernel_k3_scales64(s, &w[0], &w[1]);
    uint8_t u[16];
    memcpy(u, w, 16);
    for (int i = 0; i < 16; i++) out[i] = (int8_t)(u[i] - 32);
}

/* IQ4_XS: the eight 6-bit sub-block scales (add -32 for their value), one
 * per byte: low nibble j = bits 4j.. of scales_l, high 2 bits = bits 2j..
 * of scales_h. */
static inline uint64_t tk_qkernel_iq4xs_scales64(const uint8_t *scales_h, const uint8_t *scales_l) {
    uint32_t l32;
    uint16_t h16;
    memcpy(&l32, scales_l, 4);
    memcpy(&h16, scales_h, 2);
    uint64_t l = l32, h = h16;
    l = (l | l << 16) & 0x0000FFFF0000FFFFull; /* nibble j -> byte j */
    l = (l | l << 8) & 0x00FF00FF00FF00FFull;
    l = (l | l << 4) & 0x0F0F0F0F0F0F0F0Full;
    h = (h | h << 24) & 0x000000FF000000FFull; /* 2-bit field j -> byte j */
    h = (h | h << 12) & 0x000F000F000F000Full;
    h = (h | h << 6) & 0x0303030303030303ull;
    return l | h << 4;
}

/* IQ4_XS: sub-block scale j (0..7), minus 32. */
static inline int tk_qkernel_iq4xs_scale(const tk_block_iq4_xs *b, int j) {
    return (((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4)) - 32;
}

#endif
