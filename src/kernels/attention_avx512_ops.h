/* AVX-512F vector operations for the attention kernels, 16 floats per
 * vector: the interface attention_simd_common.h expects (see there).
 * Included by attention_avx512.c (the FP32 tile kernel) and attention_amx.c
 * (its softmax and conversions), after <immintrin.h>, in files compiled
 * with at least AVX-512F/BW/VL/DQ/VNNI + F16C + FMA. */
#ifndef TK_ATTENTION_AVX512_OPS_H
#define TK_ATTENTION_AVX512_OPS_H

#include <stdint.h>

#include "../formats/quant_blocks.h"

#define VL 16
typedef __m512 vf;

static inline vf vzero(void) { return _mm512_setzero_ps(); }
static inline vf vset1(float x) { return _mm512_set1_ps(x); }
static inline vf vload(const float *p) { return _mm512_loadu_ps(p); }
static inline vf vkeep(vf x) {
    __asm__("" : "+v"(x));
    return x;
}
static inline void vstore(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vround(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf vload_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
static inline vf vload_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}
static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
/* The f16 at rows[i] + off, i < 16, as floats (two 8-lane gathers by
 * address; each reads 4 bytes, inside the row). */
static inline vf vload_scales(const unsigned char *const *rows, size_t off) {
    const __m512i o = _mm512_set1_epi64((long long)off);
    const __m512i a = _mm512_add_epi64(_mm512_loadu_si512((const void *)rows), o);
    const __m512i b = _mm512_add_epi64(_mm512_loadu_si512((const void *)(rows + 8)), o);
    const __m256i ga = _mm512_i64gather_epi32(a, (const void *)0, 1), gb = _mm512_i64gather_epi32(b, (const void *)0, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(ga), gb, 1)));
}
static inline float vhmax(vf v) {
    __m256 a = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_max_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_max_ss(b, _mm_movehdup_ps(b)));
}
static inline float vhsum(vf v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}
static inline vf vmask(vf s, int la, int lb) {
    if (la <= 0 && lb >= VL) return s;
    if (la < 0) la = 0;
    if (lb > VL) lb = VL;
    unsigned keep = la < lb ? ((1u << lb) - 1) & ~((1u << la) - 1) : 0;
    return _mm512_mask_blend_ps((__mmask16)keep, vset1(-INFINITY), s);
}
static inline vf vexp_scale2(vf p, vf n) { return _mm512_scalef_ps(p, n); }
static inline vf vzero_where_lt(vf y, vf x, float c) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, vset1(c), _CMP_NLT_UQ), y);
}
/* Q8_0 integer ops (AVX512-VNNI; see attention_simd.h): K is stored with
 * its sign bit flipped (k + 128, unsigned) for vpdpbusd, and the
 * accumulator starts at -128 * sum(q) to take the 128s back out. */
typedef __m512i vi;
static inline vi vi_set1(int32_t x) { return _mm512_set1_epi32(x); }
static inline vi vi_load(const int32_t *p) { return _mm512_loadu_si512(p); }
static inline void vi_store(int32_t *p, vi v) { _mm512_storeu_si512(p, v); }
static inline vf vcvt_i(vi x) { return _mm512_cvtepi32_ps(x); }
static inline vi load_k8(const unsigned char *row, int u, int nb) {
    const tk_block_q8_0 *b = (const tk_block_q8_0 *)(const void *)row + 2 * u;
    __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)b[0].qs);
    __m256i hi = 2 * u + 1 < nb ? _mm256_loadu_si256((const __m256i *)(const void *)b[1].qs) : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
static inline vi k8_encode(vi k) { return _mm512_xor_si512(k, _mm512_set1_epi8((char)0x80)); }
static inline vi vdot4(vi acc, vi k, int32_t q) { return _mm512_dpbusd_epi32(acc, k, _mm512_set1_epi32(q)); }
static inline int32_t q8_bias(int32_t sum) { return -128 * sum; }

/* 16 x 16: pairs interleaved, then quads (as 8 x 8), then 128-bit lanes. */
static inline __attribute__((always_inline)) void transpose(vf r[16]) {
    vf t[16], u[16];
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 4; k++) {
        u[4 * k + 0] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    /* u[4k + c] holds rows 4k..4k+3, columns c, c+4, c+8, c+12 (128-bit lanes 0..3) */
    for (int c = 0; c < 4; c++) {
        vf v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], _MM_SHUFFLE(2, 0, 2, 0));
        vf w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(2, 0, 2, 0));
        vf v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 1, 3, 1));
        vf w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 1, 3, 1));
        r[c] = _mm512_shuffle_f32x4(v0, w0, _MM_SHUFFLE(2, 0, 2, 0));
        r[c + 8] = _mm512_shuffle_f32x4(v0, w0, _MM_SHUFFLE(3, 1, 3, 1));
        r[c + 4] = _mm512_shuffle_f32x4(v1, w1, _MM_SHUFFLE(2, 0, 2, 0));
        r[c + 12] = _mm512_shuffle_f32x4(v1, w1, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

#endif
