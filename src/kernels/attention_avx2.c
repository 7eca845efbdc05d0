/* The attention tile kernel on AVX2 + FMA + F16C, 8 floats per vector
 * (compiled with those flags only; reached through tk_attn_tile_range after
 * a CPU check).  The kernels themselves are src/kernels/attention_simd.h
 * (tiles) and attention_decode_heads.h (one token, heads in the lanes). */
#include <math.h>
#include <stdbool.h>

#include "attention.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <stdint.h>

#include "../formats/quant_blocks.h"
#include "vec_avx2.h"

#define FN(name) name##_avx2_k
#define QK_MR 4
#define QK_NR 2
#define PV_MR 4
#define PV_NV 2
#define QK8_MR 2
#define QK8_NR 2

static inline vf vkeep(vf x) {
    __asm__("" : "+x"(x));
    return x;
}
static inline vf vload_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)); }
static inline vf vload_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}
static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
/* The f16 at rows[i] + off, i < 8, as floats (two 4-lane gathers by
 * address; each reads 4 bytes, inside the row). */
static inline vf vload_scales(const unsigned char *const *rows, size_t off) {
    const __m256i o = _mm256_set1_epi64x((long long)off);
    const __m256i a = _mm256_add_epi64(_mm256_loadu_si256((const __m256i *)(const void *)rows), o);
    const __m256i b = _mm256_add_epi64(_mm256_loadu_si256((const __m256i *)(const void *)(rows + 4)), o);
    const __m128i m = _mm_set1_epi32(0xffff);
    const __m128i ga = _mm256_i64gather_epi32((const int *)0, a, 1), gb = _mm256_i64gather_epi32((const int *)0, b, 1);
    return _mm256_cvtph_ps(_mm_packus_epi32(_mm_and_si128(ga, m), _mm_and_si128(gb, m)));
}
static inline float vhmax(vf v) {
    __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_max_ss(a, _mm_movehdup_ps(a)));
}
static inline float vhsum(vf v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
}
/* vhsum's tree lane by lane: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
static inline vf vhsum_lanes(const vf l[8]) {
    return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(l[0], l[4]), _mm256_add_ps(l[2], l[6])),
                         _mm256_add_ps(_mm256_add_ps(l[1], l[5]), _mm256_add_ps(l[3], l[7])));
}
static inline vf vmask(vf s, int la, int lb) {
    if (la <= 0 && lb >= VL) return s;
    const vf idx = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    vf keep = _mm256_and_ps(_mm256_cmp_ps(idx, vset1((float)la), _CMP_GE_OQ),
                            _mm256_cmp_ps(idx, vset1((float)lb), _CMP_LT_OQ));
    return _mm256_blendv_ps(vset1(-INFINITY), s, keep);
}
/* Q8_0 integer ops (see attention_simd.h): K as stored; the 4-byte dots
 * with vpmaddubsw on |k| and q with k's sign (pairs <= 2 * 128 * 127, so
 * it never saturates), then vpmaddwd with ones. */
typedef __m256i vi;
static inline vi vi_set1(int32_t x) { return _mm256_set1_epi32(x); }
static inline vi vi_load(const int32_t *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }
static inline void vi_store(int32_t *p, vi v) { _mm256_storeu_si256((__m256i *)(void *)p, v); }
static inline vf vcvt_i(vi x) { return _mm256_cvtepi32_ps(x); }
static inline vi load_k8(const unsigned char *row, int u, int nb) {
    (void)nb;
    const tk_block_q8_0 *b = (const tk_block_q8_0 *)(const void *)row + u;
    return _mm256_loadu_si256((const __m256i *)(const void *)b->qs);
}
static inline vi k8_encode(vi k) { return k; }
static inline vi vdot4(vi acc, vi k, int32_t q) {
    vi p = _mm256_maddubs_epi16(_mm256_abs_epi8(k), _mm256_sign_epi8(_mm256_set1_epi32(q), k));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
static inline int32_t q8_bias(int32_t sum) { (void)sum; return 0; }

static inline __attribute__((always_inline)) void transpose(vf r[8]) {
    vf t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    vf t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    vf t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    vf t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    vf s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    vf s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    vf s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    vf s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

static int tk_attn_tile_avx2_k(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head,
                               const tk_attn_tile *tile, float scale, int seg_lo, int seg_hi, float *acc, float *mx,
                               float *sum, float *scratch);
#include "attention_simd.h"

#include "attention_decode_heads.h"

int tk_attn_tile_avx2(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const tk_attn_tile *tile,
                      float scale, int seg_lo, int seg_hi, float *acc, float *mx, float *sum, float *scratch) {
    if (tk_attn_decode_avx2_k(kv, s, layer, kv_head, tile, scale, seg_lo, seg_hi, acc, mx, sum, scratch) == 0) return 0;
    return tk_attn_tile_avx2_k(kv, s, layer, kv_head, tile, scale, seg_lo, seg_hi, acc, mx, sum, scratch);
}

#else /* not built with AVX2 */

int tk_attn_tile_avx2(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const tk_attn_tile *tile,
                      float scale, int seg_lo, int seg_hi, float *acc, float *mx, float *sum, float *scratch) {
    (void)kv, (void)s, (void)layer, (void)kv_head, (void)tile, (void)scale, (void)seg_lo, (void)seg_hi;
    (void)acc, (void)mx, (void)sum, (void)scratch;
    return -1;
}

#endif
