/* AVX2 + FMA float vector operations, 8 floats per vector: the arithmetic
 * part of the interface attention_simd_common.h, vec_exp.h and the GLU and
 * exp-row kernels expect.  Included by attention_avx2.c, glu_avx2.c and
 * exp_row_avx2.c, after <immintrin.h>, in files compiled with AVX2 + FMA
 * (and never AVX-512). */
#ifndef TK_VEC_AVX2_H
#define TK_VEC_AVX2_H

#define VL 8
typedef __m256 vf;

static inline vf vzero(void) { return _mm256_setzero_ps(); }
static inline vf vset1(float x) { return _mm256_set1_ps(x); }
static inline vf vload(const float *p) { return _mm256_loadu_ps(p); }
static inline void vstore(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vround(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf vexp_scale2(vf p, vf n) {
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
static inline vf vzero_where_lt(vf y, vf x, float c) {
    return _mm256_andnot_ps(_mm256_cmp_ps(x, vset1(c), _CMP_LT_OQ), y);
}

#endif
