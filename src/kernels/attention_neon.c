/* The attention tile kernel on arm64 NEON, 4 floats per vector (reached
 * through tk_attn_tile_range for TK_ISA_NEON).  The kernel itself is
 * src/kernels/attention_simd.h; the Q8_0 score dots use the widening
 * multiplies (plain armv8-a, no dotprod needed). */
#include <math.h>
#include <stdbool.h>

#include "attention.h"

#if defined(__aarch64__) && defined(__ARM_NEON)

#include <arm_neon.h>
#include <stdint.h>

#include "../formats/quant_blocks.h"
#include "qgemm_impl.h"
#include "vec_neon.h"

#define FN(name) name##_neon
#define QK_MR 4
#define QK_NR 4
#define PV_MR 4
#define PV_NV 4
#define QK8_MR 2
#define QK8_NR 4
#define ATTN_QUANT_Q8_0 tk_qkernel_neon_quant_q8_0

/* NEON arithmetic takes no memory operands: a loaded vector stays in a register */
static inline vf vkeep(vf x) { return x; }
static inline vf vload_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
static inline vf vload_i8(const int8_t *p) {
    int32_t w;
    memcpy(&w, p, 4);
    const int16x8_t s = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(w)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(s)));
}
static inline float h2f(uint16_t h) {
    __fp16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}
/* The f16 at rows[i] + off, i < 4, as floats. */
static inline vf vload_scales(const unsigned char *const *rows, size_t off) {
    uint16_t h[VL];
    for (int i = 0; i < VL; i++) memcpy(&h[i], rows[i] + off, 2);
    return vload_f16(h);
}
static inline float vhmax(vf v) { return vmaxvq_f32(v); }
static inline float vhsum(vf v) { return vaddvq_f32(v); }
static inline vf vmask(vf s, int la, int lb) {
    if (la <= 0 && lb >= VL) return s;
    static const float lane[VL] = {0, 1, 2, 3};
    const vf idx = vld1q_f32(lane);
    const uint32x4_t keep = vandq_u32(vcgeq_f32(idx, vset1((float)la)), vcltq_f32(idx, vset1((float)lb)));
    return vbslq_f32(keep, s, vset1(-INFINITY));
}
/* Q8_0 integer ops (see attention_simd.h): K as stored; each dword lane's
 * four products with vmull_s8, summed pairwise into int32. */
typedef int32x4_t vi;
static inline vi vi_set1(int32_t x) { return vdupq_n_s32(x); }
static inline vi vi_load(const int32_t *p) { return vld1q_s32(p); }
static inline void vi_store(int32_t *p, vi v) { vst1q_s32(p, v); }
static inline vf vcvt_i(vi x) { return vcvtq_f32_s32(x); }
/* dims [16u, 16u + 16) of a Q8_0 row: half of block u / 2 */
static inline vi load_k8(const unsigned char *row, int u, int nb) {
    (void)nb;
    const tk_block_q8_0 *b = (const tk_block_q8_0 *)(const void *)row + u / 2;
    return vreinterpretq_s32_s8(vld1q_s8(b->qs + 16 * (u % 2)));
}
static inline vi k8_encode(vi k) { return k; }
static inline vi vdot4(vi acc, vi k, int32_t q) {
    const int8x16_t kb = vreinterpretq_s8_s32(k), qb = vreinterpretq_s8_s32(vdupq_n_s32(q));
    const int16x8_t lo = vmull_s8(vget_low_s8(kb), vget_low_s8(qb)), hi = vmull_high_s8(kb, qb);
    return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
}
static inline int32_t q8_bias(int32_t sum) { (void)sum; return 0; }

static inline __attribute__((always_inline)) void transpose(vf r[4]) {
    const vf t0 = vtrn1q_f32(r[0], r[1]), t1 = vtrn2q_f32(r[0], r[1]);
    const vf t2 = vtrn1q_f32(r[2], r[3]), t3 = vtrn2q_f32(r[2], r[3]);
    r[0] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    r[1] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
    r[2] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    r[3] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
}

#include "attention_simd.h"

#else /* not an arm64 build */

int tk_attn_tile_neon(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const tk_attn_tile *tile,
                      float scale, int seg_lo, int seg_hi, float *acc, float *mx, float *sum, float *scratch) {
    (void)kv, (void)s, (void)layer, (void)kv_head, (void)tile, (void)scale, (void)seg_lo, (void)seg_hi;
    (void)acc, (void)mx, (void)sum, (void)scratch;
    return -1;
}

#endif
