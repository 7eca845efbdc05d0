/* The arm64 NEON kernels: the activation quantizers (the same bytes as the
 * scalar ones) and the GEMM kernels for plain Advanced SIMD (armv8-a, the
 * widening multiplies), plus the run-time choice between them and the
 * dotprod kernels of qgemm_neon_dotprod.c (HWCAP_ASIMDDP). */
#include "qgemm_impl.h"

#if defined(__aarch64__) && defined(__ARM_NEON)

#define NEON_DOTPROD 0
#define NEON_SUFFIX "/neon"
#include "qgemm_neon.h"

/* The largest |x| of 32 k floats (k = 1 or 8: a Q8_0 or a Q8_K block). */
AI float absmax32(const float *x, int k) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int j = 0; j < 8 * k; j++) m = vmaxq_f32(m, vabsq_f32(ldq_f32(x + 4 * j)));
    return vmaxvq_f32(m);
}

/* The quantization multiplier 127/amax (0 for an all-zero group), as
 * group_amax in qgemm_scalar.c. */
AI float mult_of(float amax) { return amax != 0.0f ? 127.0f / amax : 0.0f; }

AI uint16_t f2h(float f) {
    const __fp16 h = (__fp16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

/* round(x[j] * id) (nearest, ties to even) clamped to [-127, 127] for 32
 * floats, as q8_round in qgemm_scalar.c. */
AI void quant32(const float *x, float id, int8x16_t q[2]) {
    for (int h = 0; h < 2; h++) {
        int16x8_t s[2];
        for (int k = 0; k < 2; k++) {
            const float *p = x + 16 * h + 8 * k;
            int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(ldq_f32(p), id));
            int32x4_t b = vcvtnq_s32_f32(vmulq_n_f32(ldq_f32(p + 4), id));
            a = vmaxq_s32(vminq_s32(a, vdupq_n_s32(127)), vdupq_n_s32(-127));
            b = vmaxq_s32(vminq_s32(b, vdupq_n_s32(127)), vdupq_n_s32(-127));
            s[k] = vcombine_s16(vmovn_s32(a), vmovn_s32(b));
        }
        q[h] = vcombine_s8(vmovn_s16(s[0]), vmovn_s16(s[1]));
    }
}

void tk_qkernel_neon_quant_q8_0(const float *x, void *out, int64_t n) {
    uint8_t *o = out;
    for (int64_t i = 0; i < n / 32; i++, x += 32, o += sizeof(tk_block_q8_0)) {
        const float amax = absmax32(x, 1);
        const uint16_t dh = f2h(amax / 127.0f);
        int8x16_t q[2];
        quant32(x, mult_of(amax), q);
        memcpy(o, &dh, 2);
        vst1q_s8((int8_t *)(o + 2), q[0]);
        vst1q_s8((int8_t *)(o + 18), q[1]);
    }
}

void tk_qkernel_neon_quant_q8_1(const float *x, void *out, int64_t n) {
    uint8_t *o = out;
    for (int64_t i = 0; i < n / 32; i++, x += 32, o += sizeof(tk_block_q8_1)) {
        const float amax = absmax32(x, 1), d = amax / 127.0f;
        int8x16_t q[2];
        quant32(x, mult_of(amax), q);
        const int sum = vaddlvq_s8(q[0]) + vaddlvq_s8(q[1]);
        const uint16_t dh = f2h(d), sh = f2h(d * (float)sum);
        memcpy(o, &dh, 2);
        memcpy(o + 2, &sh, 2);
        vst1q_s8((int8_t *)(o + 4), q[0]);
        vst1q_s8((int8_t *)(o + 20), q[1]);
    }
}

void tk_qkernel_neon_quant_q8_K(const float *x, void *out, int64_t n) {
    uint8_t *o = out;
    for (int64_t i = 0; i < n / 256; i++, x += 256, o += sizeof(tk_block_q8_K)) {
        const float id = mult_of(absmax32(x, 8)), d = id != 0.0f ? 1.0f / id : 0.0f;
        memcpy(o, &d, 4);
        int16_t bs[16];
        for (int j = 0; j < 8; j++) {
            int8x16_t q[2];
            quant32(x + 32 * j, id, q);
            vst1q_s8((int8_t *)(o + 4 + 32 * j), q[0]);
            vst1q_s8((int8_t *)(o + 20 + 32 * j), q[1]);
            bs[2 * j] = (int16_t)vaddlvq_s8(q[0]);
            bs[2 * j + 1] = (int16_t)vaddlvq_s8(q[1]);
        }
        memcpy(o + 4 + 256, bs, sizeof bs);
    }
}

NEON_KERNELS(neon_plain)

const tk_qkernel *tk_qkernel_neon(tk_dtype wtype) {
    const tk_qkernel *k = tk_cpu_features_get().dotprod ? tk_qkernel_neon_dotprod(wtype) : NULL;
    return k ? k : neon_plain(wtype);
}

#else /* not an arm64 build */

const tk_qkernel *tk_qkernel_neon(tk_dtype wtype) {
    (void)wtype;
    return NULL;
}

#endif
