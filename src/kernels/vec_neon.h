/* arm64 NEON float vector operations, 4 floats per vector: the arithmetic
 * part of the interface attention_simd_common.h, vec_exp.h and the GLU and
 * exp-row kernels expect (vec_avx2.h's twin).  Included by attention_neon.c,
 * glu_neon.c and exp_row_neon.c after <arm_neon.h>. */
#ifndef TK_VEC_NEON_H
#define TK_VEC_NEON_H

#define VL 4
typedef float32x4_t vf;

static inline vf vzero(void) { return vdupq_n_f32(0.0f); }
static inline vf vset1(float x) { return vdupq_n_f32(x); }
static inline vf vload(const float *p) { return vld1q_f32(p); }
static inline void vstore(float *p, vf v) { vst1q_f32(p, v); }
static inline vf vfma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
static inline vf vmul(vf a, vf b) { return vmulq_f32(a, b); }
static inline vf vdiv(vf a, vf b) { return vdivq_f32(a, b); }
static inline vf vadd(vf a, vf b) { return vaddq_f32(a, b); }
static inline vf vsub(vf a, vf b) { return vsubq_f32(a, b); }
static inline vf vmax(vf a, vf b) { return vmaxq_f32(a, b); }
static inline vf vmin(vf a, vf b) { return vminq_f32(a, b); }
static inline vf vround(vf a) { return vrndnq_f32(a); }
static inline vf vexp_scale2(vf p, vf n) {
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}
static inline vf vzero_where_lt(vf y, vf x, float c) {
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), vcltq_f32(x, vset1(c))));
}

#endif
