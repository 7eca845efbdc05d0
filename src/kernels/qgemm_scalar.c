/* Scalar reference kernels: the definition of what every SIMD kernel
 * computes.  Per block (or super-block) the weight quants are multiplied
 * with the int8 activation quants in exact integer arithmetic; the integer
 * sum is then converted to float once and scaled:
 *
 *   Q4_0 Q5_0 Q8_0 IQ4_NL:  acc += (float)isum * (dw * da)
 *   Q4_1 Q5_1:             acc += (float)isum * (dw * da) + mw * sa
 *   Q2_K Q4_K Q5_K:        acc += (float)isum * (d * da) - (float)msum * (dmin * da)
 *   Q3_K Q6_K IQ4_XS:      acc += (float)isum * (d * da)
 *   NF4 NF4_DQ:            acc += ((float)isum0 * da0 + (float)isum1 * da1) * absmax
 *                          (da per 32-chunk, absmax per 64-block, int16 levels of
 *                          scale 2^14 removed at the end; nf4_dot.c)
 *
 * where isum includes the sub-block scales of the k-quants and msum is the
 * sum of sub-block mins times activation block sums.  SIMD kernels compute
 * the same integers but split the float accumulation over lanes, so they
 * agree to float rounding.  F32/F16/BF16 weights use float activations. */
#include <math.h>

#include "nf4_dot.h"
#include "qgemm_impl.h"

/* ---- activation packing ---- */

size_t tk_qkernel_act_bytes_q8_0(int64_t n) { return (size_t)(n / TK_QK8_0) * sizeof(tk_block_q8_0); }
size_t tk_qkernel_act_bytes_q8_1(int64_t n) { return (size_t)(n / TK_QK8_1) * sizeof(tk_block_q8_1); }
size_t tk_qkernel_act_bytes_q8_K(int64_t n) { return (size_t)(n / TK_QK_K) * sizeof(tk_block_q8_K); }
size_t tk_qkernel_act_bytes_f32(int64_t n) { return (size_t)n * sizeof(float); }

/* Round to nearest, ties to even (the SIMD conversions' default).  |x| <=
 * 127 + rounding for finite inputs. */
static inline int8_t q8_round(float x) {
    const float r = nearbyintf(x);
    if (!(r >= -127.0f)) return r != r ? 0 : -127;
    if (r > 127.0f) return 127;
    return (int8_t)r;
}

/* A group's largest magnitude and the quantization multiplier id = 127/amax
 * (0 for an all-zero group).  The quants are round(x * id); llama.cpp's
 * x86 quantizers compute the multiplier the same way (127/amax, not
 * 1/(amax/127), which can differ in the last bit and move a quant that sits
 * on a rounding tie). */
static inline float group_amax(const float *x, int n, float *id) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        const float a = fabsf(x[j]);
        amax = amax > a ? amax : a;
    }
    *id = amax != 0.0f ? 127.0f / amax : 0.0f;
    return amax;
}

void tk_qkernel_quant_q8_0(const float *x, void *out, int64_t n) {
    unsigned char *o = out;
    for (int64_t i = 0; i < n / TK_QK8_0; i++, x += TK_QK8_0) {
        tk_block_q8_0 b;
        float id;
        const float d = group_amax(x, TK_QK8_0, &id) / 127.0f;
        b.d = tk_f32_to_f16(d);
        for (int j = 0; j < TK_QK8_0; j++) b.qs[j] = q8_round(x[j] * id);
        memcpy(o + i * sizeof b, &b, sizeof b);
    }
}

void tk_qkernel_quant_q8_1(const float *x, void *out, int64_t n) {
    unsigned char *o = out;
    for (int64_t i = 0; i < n / TK_QK8_1; i++, x += TK_QK8_1) {
        tk_block_q8_1 b;
        float id;
        const float d = group_amax(x, TK_QK8_1, &id) / 127.0f;
        int sum = 0;
        for (int j = 0; j < TK_QK8_1; j++) {
            b.qs[j] = q8_round(x[j] * id);
            sum += b.qs[j];
        }
        b.d = tk_f32_to_f16(d);
        b.s = tk_f32_to_f16(d * (float)sum);
        memcpy(o + i * sizeof b, &b, sizeof b);
    }
}

void tk_qkernel_quant_q8_K(const float *x, void *out, int64_t n) {
    unsigned char *o = out;
    for (int64_t i = 0; i < n / TK_QK_K; i++, x += TK_QK_K) {
        tk_block_q8_K b;
        float id;
        /* d = 1/id, so that d * q equals llama.cpp's Q8_K value exactly
         * (it stores d = 1/iscale with iscale = -127/max and the quants
         * negated when the largest-magnitude element is positive). */
        group_amax(x, TK_QK_K, &id);
        b.d = id != 0.0f ? 1.0f / id : 0.0f;
        for (int j = 0; j < TK_QK_K; j++) b.qs[j] = q8_round(x[j] * id);
        for (int g = 0; g < TK_QK_K / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += b.qs[16 * g + j];
            b.bsums[g] = (int16_t)s;
        }
        memcpy(o + i * sizeof b, &b, sizeof b);
    }
}

void tk_qkernel_quant_f32(const float *x, void *out, int64_t n) { memcpy(out, x, (size_t)n * sizeof(float)); }

/* ---- per-type row dots ---- */

#define LOAD(T, var, p) \
    T var;              \
    memcpy(&var, (p), sizeof var)

static float dot_q4_0(const unsigned char *w, const unsigned char *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        LOAD(tk_block_q4_0, x, w + i * sizeof x);
        LOAD(tk_block_q8_0, y, a + i * sizeof y);
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += ((x.qs[j] & 0xF) - 8) * y.qs[j] + ((x.qs[j] >> 4) - 8) * y.qs[j + 16];
        acc += (float)isum * (tk_f16_to_f32(x.d) * tk_f16_to_f32(y.d));
    }
    return acc;
}

static float dot_q4_1(const unsigned char *w, const unsigned char *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        LOAD(tk_block_q4_1, x, w + i * sizeof x);
        LOAD(tk_block_q8_1, y, a + i * sizeof y);
        int isum = 0;
        for (int j = 0; j < 16; j++) isum += (x.qs[j] & 0xF) * y.qs[j] + (x.qs[j] >> 4) * y.qs[j + 16];
        acc += (float)isum * (tk_f16_to_f32(x.d) * tk_f16_to_f32(y.d)) + tk_f16_to_f32(x.m) * tk_f16_to_f32(y.s);
    }
    return acc;
}

static inline uint32_t u32le(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static float dot_q5_0(const unsigned char *w, const unsigned char *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        LOAD(tk_block_q5_0, x, w + i * sizeof x);
        LOAD(tk_block_q8_0, y, a + i * sizeof y);
        const uint32_t qh = u32le(x.qh);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            const int v0 = ((x.qs[j] & 0xF) | (int)((qh >> j) & 1) << 4) - 16;
            const int v1 = ((x.qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4) - 16;
            isum += v0 * y.qs[j] + v1 * y.qs[j + 16];
        }
        acc += (float)isum * (tk_f16_to_f32(x.d) * tk_f16_to_f32(y.d));
    }
    return acc;
}

static float dot_q5_1(const unsigned char *w, const unsigned char *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        LOAD(tk_block_q5_1, x, w + i * sizeof x);
        LOAD(tk_block_q8_1, y, a + i * sizeof y);
        const uint32_t qh = u32le(x.qh);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            const int v0 = (x.qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            const int v1 = (x.qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            isum += v0 * y.qs[j] + v1 * y.qs[j + 16];
        }
        acc += (float)isum * (tk_f16_to_f32(x.d) * tk_f16_to_f32(y.d)) + tk_f16_to_f32(x.m) * tk_f16_to_f32(y.s);
    }
    return acc;
}

static float dot_q8_0(const unsigned char *w, const unsigned char *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        LOAD(tk_block_q8_0, x, w + i * sizeof x);
        LOAD(tk_block_q8_0, y, a + i * sizeof y);
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += x.qs[j] * y.qs[j];
        acc += (float)isum * (tk_f16_to_f32(x.d) * tk_f16_to_f32(y.d));
    }
    return acc;
}

static float dot_iq4_nl(const unsigned char *w, const unsigned char *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        LOAD(tk_block_iq4_nl, x, w + i * sizeof x);
        LOAD(tk_block_q8_0, y, a + i * sizeof y);
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += tk_kvalues_iq4nl[x.qs[j] & 0xF] * y.qs[j] + tk_kvalues_iq4nl[x.qs[j] >> 4] * y.qs[j + 16];
        acc += (float)isum * (tk_f16_to_f32(x.d) * tk_f16_to_f32(y.d));
    }
    return acc;
}

static float dot_q2_K(const unsigned char *w, const unsigned char *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        LOAD(tk_block_q2_K, x, w + i * sizeof x);
        LOAD(tk_block_q8_K, y, a + i * sizeof y);
        /* element 128h + 32g + l (l < 32): 2 bits at shift 2g of qs[32h + l];
         * sub-block 8h + 2g + l/16 */
        int isum = 0, msum = 0;
        for (int sb = 0; sb < 16; sb++) msum += (x.scales[sb] >> 4) * y.bsums[sb];
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 4; g++)
                for (int p = 0; p < 2; p++) {
                    const int sb = 8 * h + 2 * g + p;
                    int s = 0;
                    for (int l = 16 * p; l < 16 * p + 16; l++)
                        s += ((x.qs[32 * h + l] >> (2 * g)) & 3) * y.qs[128 * h + 32 * g + l];
                    isum += (x.scales[sb] & 0xF) * s;
                }
        acc += (float)isum * (tk_f16_to_f32(x.d) * y.d) - (float)msum * (tk_f16_to_f32(x.dmin) * y.d);
    }
    return acc;
}

static float dot_q3_K(const unsigned char *w, const unsigned char *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        LOAD(tk_block_q3_K, x, w + i * sizeof x);
        LOAD(tk_block_q8_K, y, a + i * sizeof y);
        int8_t sc[16];
        tk_qkernel_k3_scales(x.scales, sc);
        int isum = 0;
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 4; g++)
                for (int p = 0; p < 2; p++) {
                    const int sb = 8 * h + 2 * g + p;
                    const int hbit = 4 * h + g;
                    int s = 0;
                    for (int l = 16 * p; l < 16 * p + 16; l++) {
                        const int v = ((x.qs[32 * h + l] >> (2 * g)) & 3) - ((x.hmask[l] >> hbit) & 1 ? 0 : 4);
                        s += v * y.qs[128 * h + 32 * g + l];
                    }
                    isum += sc[sb] * s;
                }
        acc += (float)isum * (tk_f16_to_f32(x.d) * y.d);
    }
    return acc;
}

static float dot_q4_K(const unsigned char *w, const unsigned char *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        LOAD(tk_block_q4_K, x, w + i * sizeof x);
        LOAD(tk_block_q8_K, y, a + i * sizeof y);
        uint8_t sm[16];
        tk_qkernel_k4_scales(x.scales, sm);
        /* element 64c + l: low nibble of qs[32c + l] (sub-block 2c);
         * element 64c + 32 + l: high nibble (sub-block 2c + 1) */
        int isum = 0, msum = 0;
        for (int c = 0; c < 4; c++) {
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (x.qs[32 * c + l] & 0xF) * y.qs[64 * c + l];
                s1 += (x.qs[32 * c + l] >> 4) * y.qs[64 * c + 32 + l];
            }
            isum += sm[2 * c] * s0 + sm[2 * c + 1] * s1;
        }
        for (int j = 0; j < 8; j++) msum += sm[8 + j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
        acc += (float)isum * (tk_f16_to_f32(x.d) * y.d) - (float)msum * (tk_f16_to_f32(x.dmin) * y.d);
    }
    return acc;
}

static float dot_q5_K(const unsigned char *w, const unsigned char *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        LOAD(tk_block_q5_K, x, w + i * sizeof x);
        LOAD(tk_block_q8_K, y, a + i * sizeof y);
        uint8_t sm[16];
        tk_qkernel_k4_scales(x.scales, sm);
        int isum = 0, msum = 0;
        for (int c = 0; c < 4; c++) {
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                const int v0 = (x.qs[32 * c + l] & 0xF) | ((x.qh[l] >> (2 * c)) & 1) << 4;
                const int v1 = (x.qs[32 * c + l] >> 4) | ((x.qh[l] >> (2 * c + 1)) & 1) << 4;
                s0 += v0 * y.qs[64 * c + l];
                s1 += v1 * y.qs[64 * c + 32 + l];
            }
            isum += sm[2 * c] * s0 + sm[2 * c + 1] * s1;
        }
        for (int j = 0; j < 8; j++) msum += sm[8 + j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
        acc += (float)isum * (tk_f16_to_f32(x.d) * y.d) - (float)msum * (tk_f16_to_f32(x.dmin) * y.d);
    }
    return acc;
}

static float dot_q6_K(const unsigned char *w, const unsigned char *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        LOAD(tk_block_q6_K, x, w + i * sizeof x);
        LOAD(tk_block_q8_K, y, a + i * sizeof y);
        /* element 128h + 32g + l: 4 bits of ql[64h + 32(g&1) + l] (low
         * nibble for g < 2), 2 bits at shift 2g of qh[32h + l]; minus 32;
         * sub-block 8h + 2g + l/16 */
        int isum = 0;
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 4; g++)
                for (int p = 0; p < 2; p++) {
                    int s = 0;
                    for (int l = 16 * p; l < 16 * p + 16; l++) {
                        const int lo = (x.ql[64 * h + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 0xF;
                        const int hi = (x.qh[32 * h + l] >> (2 * g)) & 3;
                        s += ((lo | hi << 4) - 32) * y.qs[128 * h + 32 * g + l];
                    }
                    isum += x.scales[8 * h + 2 * g + p] * s;
                }
        acc += (float)isum * (tk_f16_to_f32(x.d) * y.d);
    }
    return acc;
}

static float dot_iq4_xs(const unsigned char *w, const unsigned char *a, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        LOAD(tk_block_iq4_xs, x, w + i * sizeof x);
        LOAD(tk_block_q8_K, y, a + i * sizeof y);
        int isum = 0;
        for (int j = 0; j < 8; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += tk_kvalues_iq4nl[x.qs[16 * j + l] & 0xF] * y.qs[32 * j + l] +
                     tk_kvalues_iq4nl[x.qs[16 * j + l] >> 4] * y.qs[32 * j + 16 + l];
            isum += tk_qkernel_iq4xs_scale(&x, j) * s;
        }
        acc += (float)isum * (tk_f16_to_f32(x.d) * y.d);
    }
    return acc;
}

/* Float weights: eight partial sums (element i goes to lane i % 8), added
 * pairwise at the end. */
static float lanes_sum(const float s[8]) { return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7])); }

static float dot_f32(const unsigned char *w, const unsigned char *a, int64_t n) {
    float s[8] = {0};
    for (int64_t i = 0; i < n; i += 8)
        for (int k = 0; k < 8 && i + k < n; k++) {
            float wv, av;
            memcpy(&wv, w + 4 * (i + k), 4);
            memcpy(&av, a + 4 * (i + k), 4);
            s[k] += wv * av;
        }
    return lanes_sum(s);
}

static float dot_f16(const unsigned char *w, const unsigned char *a, int64_t n) {
    float s[8] = {0};
    for (int64_t i = 0; i < n; i += 8)
        for (int k = 0; k < 8 && i + k < n; k++) {
            uint16_t h;
            float av;
            memcpy(&h, w + 2 * (i + k), 2);
            memcpy(&av, a + 4 * (i + k), 4);
            s[k] += tk_f16_to_f32(h) * av;
        }
    return lanes_sum(s);
}

static float dot_bf16(const unsigned char *w, const unsigned char *a, int64_t n) {
    float s[8] = {0};
    for (int64_t i = 0; i < n; i += 8)
        for (int k = 0; k < 8 && i + k < n; k++) {
            uint16_t h;
            float av;
            memcpy(&h, w + 2 * (i + k), 2);
            memcpy(&av, a + 4 * (i + k), 4);
            s[k] += tk_bf16_to_f32(h) * av;
        }
    return lanes_sum(s);
}

/* ---- gemm wrappers ---- */

#define SCALAR_GEMM(NAME, DOT, BLOCK)                                                                  \
    static void NAME(const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1, const void *act,   \
                     size_t arb, int n_tok, float *y, int64_t ldy) {                                   \
        const unsigned char *wb = w, *ab = act;                                                        \
        for (int64_t r = r0; r < r1; r++)                                                              \
            for (int t = 0; t < n_tok; t++)                                                            \
                y[(int64_t)t * ldy + r] = DOT(wb + (size_t)r * wrb, ab + (size_t)t * arb, n / (BLOCK)); \
    }

SCALAR_GEMM(gemm_f32, dot_f32, 1)
SCALAR_GEMM(gemm_f16, dot_f16, 1)
SCALAR_GEMM(gemm_bf16, dot_bf16, 1)
SCALAR_GEMM(gemm_q4_0, dot_q4_0, 32)
SCALAR_GEMM(gemm_q4_1, dot_q4_1, 32)
SCALAR_GEMM(gemm_q5_0, dot_q5_0, 32)
SCALAR_GEMM(gemm_q5_1, dot_q5_1, 32)
SCALAR_GEMM(gemm_q8_0, dot_q8_0, 32)
SCALAR_GEMM(gemm_iq4_nl, dot_iq4_nl, 32)
SCALAR_GEMM(gemm_q2_K, dot_q2_K, 256)
SCALAR_GEMM(gemm_q3_K, dot_q3_K, 256)
SCALAR_GEMM(gemm_q4_K, dot_q4_K, 256)
SCALAR_GEMM(gemm_q5_K, dot_q5_K, 256)
SCALAR_GEMM(gemm_q6_K, dot_q6_K, 256)
SCALAR_GEMM(gemm_iq4_xs, dot_iq4_xs, 256)

#define K(WT, AT, NAME, GEMM) \
    [WT] = {WT, TK_##AT, TK_ISA_SCALAR, NAME "/scalar", tk_qkernel_act_bytes_##AT, tk_qkernel_quant_##AT, GEMM, NULL}
#define tk_qkernel_act_bytes_F32 tk_qkernel_act_bytes_f32
#define tk_qkernel_quant_F32 tk_qkernel_quant_f32
#define tk_qkernel_act_bytes_Q8_0 tk_qkernel_act_bytes_q8_0
#define tk_qkernel_quant_Q8_0 tk_qkernel_quant_q8_0
#define tk_qkernel_act_bytes_Q8_1 tk_qkernel_act_bytes_q8_1
#define tk_qkernel_quant_Q8_1 tk_qkernel_quant_q8_1
#define tk_qkernel_act_bytes_Q8_K tk_qkernel_act_bytes_q8_K
#define tk_qkernel_quant_Q8_K tk_qkernel_quant_q8_K

static const tk_qkernel scalar_kernels[TK_DTYPE_LIMIT] = {
    K(TK_F32, F32, "F32", gemm_f32),
    K(TK_F16, F32, "F16", gemm_f16),
    K(TK_BF16, F32, "BF16", gemm_bf16),
    K(TK_Q4_0, Q8_0, "Q4_0", gemm_q4_0),
    K(TK_Q4_1, Q8_1, "Q4_1", gemm_q4_1),
    K(TK_Q5_0, Q8_0, "Q5_0", gemm_q5_0),
    K(TK_Q5_1, Q8_1, "Q5_1", gemm_q5_1),
    K(TK_Q8_0, Q8_0, "Q8_0", gemm_q8_0),
    K(TK_IQ4_NL, Q8_0, "IQ4_NL", gemm_iq4_nl),
    K(TK_Q2_K, Q8_K, "Q2_K", gemm_q2_K),
    K(TK_Q3_K, Q8_K, "Q3_K", gemm_q3_K),
    K(TK_Q4_K, Q8_K, "Q4_K", gemm_q4_K),
    K(TK_Q5_K, Q8_K, "Q5_K", gemm_q5_K),
    K(TK_Q6_K, Q8_K, "Q6_K", gemm_q6_K),
    K(TK_IQ4_XS, Q8_K, "IQ4_XS", gemm_iq4_xs),
    K(TK_NF4, Q8_0, "NF4", tk_nf4_gemm_scalar),       /* nf4_dot.c */
    K(TK_NF4_DQ, Q8_0, "NF4_DQ", tk_nf4dq_gemm_scalar),
};

const tk_qkernel *tk_qkernel_scalar(tk_dtype wtype) { return tk_qkernel_pick(scalar_kernels, wtype); }
