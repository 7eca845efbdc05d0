/* Tensor element types: the type table, half/bfloat16 conversion, and scalar
 * reference (de)quantizers.
 *
 * The dequantizers reproduce ggml's reference C code bit for bit in float32:
 * every product and difference is evaluated in the same order and with the
 * same intermediate roundings (e.g. Q4_K computes dl = d*sc and ml = dmin*m
 * first, then dl*q - ml).  The build uses ISO C (-std=c17), under which GCC
 * does not contract a*b - c into a fused multiply-add, so each operation is
 * rounded separately, as in the reference. */
#include "dtype.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "quant_blocks.h"

static const tk_dtype_info dtype_table[TK_DTYPE_LIMIT] = {
    [TK_F32] = {"F32", 1, 4, true},
    [TK_F16] = {"F16", 1, 2, true},
    [TK_Q4_0] = {"Q4_0", TK_QK4_0, sizeof(tk_block_q4_0), true},
    [TK_Q4_1] = {"Q4_1", TK_QK4_1, sizeof(tk_block_q4_1), true},
    [TK_Q5_0] = {"Q5_0", TK_QK5_0, sizeof(tk_block_q5_0), true},
    [TK_Q5_1] = {"Q5_1", TK_QK5_1, sizeof(tk_block_q5_1), true},
    [TK_Q8_0] = {"Q8_0", TK_QK8_0, sizeof(tk_block_q8_0), true},
    [TK_Q8_1] = {"Q8_1", TK_QK8_1, sizeof(tk_block_q8_1), true},
    [TK_Q2_K] = {"Q2_K", TK_QK_K, sizeof(tk_block_q2_K), true},
    [TK_Q3_K] = {"Q3_K", TK_QK_K, sizeof(tk_block_q3_K), true},
    [TK_Q4_K] = {"Q4_K", TK_QK_K, sizeof(tk_block_q4_K), true},
    [TK_Q5_K] = {"Q5_K", TK_QK_K, sizeof(tk_block_q5_K), true},
    [TK_Q6_K] = {"Q6_K", TK_QK_K, sizeof(tk_block_q6_K), true},
    [TK_Q8_K] = {"Q8_K", TK_QK_K, sizeof(tk_block_q8_K), true},
    [TK_IQ4_NL] = {"IQ4_NL", TK_QK4_NL, sizeof(tk_block_iq4_nl), true},
    [TK_IQ4_XS] = {"IQ4_XS", TK_QK_K, sizeof(tk_block_iq4_xs), true},
    [TK_BF16] = {"BF16", 1, 2, true},
    [TK_NF4] = {"NF4", 32, 0, true},
    [TK_NF4_DQ] = {"NF4_DQ", 32, 0, true},
};

/* Names of every GGML type id, including those this engine cannot load, so
 * that an error can say "IQ2_XXS is not supported" rather than "type 16". */
static const char *const ggml_type_names[] = {
    "F32",     "F16",    "Q4_0",   "Q4_1",   "Q4_2",    "Q4_3",   "Q5_0",
    "Q5_1",    "Q8_0",   "Q8_1",   "Q2_K",   "Q3_K",    "Q4_K",   "Q5_K",
    "Q6_K",    "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",
    "IQ3_S",   "IQ2_S",  "IQ4_XS", "I8",     "I16",     "I32",    "I64",
    "F64",     "IQ1_M",  "BF16",   "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
    "TQ2_0",   "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",
};

const tk_dtype_info *tk_dtype_get(int type) {
    if (type < 0 || type >= TK_DTYPE_LIMIT || !dtype_table[type].name) return NULL;
    return &dtype_table[type];
}

const char *tk_dtype_ggml_name(int type) {
    const size_t n = sizeof ggml_type_names / sizeof ggml_type_names[0];
    if (type < 0 || (size_t)type >= n) return NULL;
    return ggml_type_names[type];
}

int tk_dtype_from_name(const char *name) {
    if (!name) return -1;
    for (int t = 0; t < TK_DTYPE_LIMIT; t++)
        if (dtype_table[t].name && !strcasecmp(name, dtype_table[t].name)) return t;
    return -1;
}

/* NF4 rows: see dtype.h.  n is a multiple of 32 and below 2^62. */
static size_t nf4_row_bytes(tk_dtype t, int64_t n) {
    const uint64_t nb = ((uint64_t)n + TK_NF4_BLOCK - 1) / TK_NF4_BLOCK;
    if (t == TK_NF4) return (size_t)(nb * 4 + (uint64_t)n / 2);
    const uint64_t ng = (nb + TK_NF4_DQ_GROUP - 1) / TK_NF4_DQ_GROUP;
    return (size_t)(ng * 8 + nb + (uint64_t)n / 2);
}

size_t tk_dtype_row_bytes(tk_dtype t, int64_t n) {
    const tk_dtype_info *info = tk_dtype_get((int)t);
    if (!info || n < 0 || n % info->block_elems) return 0;
    if (t == TK_NF4 || t == TK_NF4_DQ) return n > (INT64_MAX >> 2) ? 0 : nf4_row_bytes(t, n);
    size_t bytes;
    if (__builtin_mul_overflow((uint64_t)(n / info->block_elems), (size_t)info->block_bytes, &bytes))
        return 0;
    return bytes;
}

/* ---- scalar conversions ---- */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float tk_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1F;
    uint32_t mant = h & 0x3FF;
    if (exp == 0x1F) /* inf / NaN: keep the payload */
        return bits_f32(sign | 0x7F800000 | (mant << 13));
    if (exp != 0) /* normal: rebias 15 -> 127 */
        return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return bits_f32(sign);
    /* subnormal: value = mant * 2^-24, exact in float32 */
    return sign ? -(float)mant * 0x1p-24f : (float)mant * 0x1p-24f;
}

uint16_t tk_f32_to_f16(float f) {
    const uint32_t u = f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    const uint32_t abs = u & 0x7FFFFFFF;
    if (abs > 0x7F800000) /* NaN: keep it quiet and keep the top payload bits */
        return (uint16_t)(sign | 0x7E00 | ((abs >> 13) & 0x3FF));
    if (abs >= 0x477FF000) /* rounds to >= 65536: overflow to infinity */
        return (uint16_t)(sign | 0x7C00);
    if (abs < 0x38800000) {
        /* Result is subnormal (or zero): quantize to multiples of 2^-24.
         * abs < 2^-14, so the float value times 2^24 is below 1024 and the
         * default rounding of the float->float multiply is exact; rintf then
         * rounds to nearest even. */
        float a = bits_f32(abs) * 0x1p24f;
        return (uint16_t)(sign | (uint16_t)rintf(a));
    }
    /* Normal: drop 13 mantissa bits with round-to-nearest-even.  A carry out of
     * the mantissa correctly bumps the exponent. */
    uint32_t r = abs + 0xFFF + ((abs >> 13) & 1);
    return (uint16_t)(sign | ((r >> 13) - (112u << 10)));
}

float tk_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t tk_f32_to_bf16(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000) /* NaN: truncate, force the quiet bit */
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

/* ---- dequantization, one block type at a time ---- */

static void deq_f32(const unsigned char *src, float *y, int64_t n) {
    memcpy(y, src, (size_t)n * sizeof(float));
}

static void deq_f16(const unsigned char *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        y[i] = tk_f16_to_f32(h);
    }
}

static void deq_bf16(const unsigned char *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        y[i] = tk_bf16_to_f32(h);
    }
}

static void deq_q4_0(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += TK_QK4_0) {
        tk_block_q4_0 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tk_f16_to_f32(b.d);
        for (int j = 0; j < TK_QK4_0 / 2; j++) {
            const int x0 = (b.qs[j] & 0x0F) - 8;
            const int x1 = (b.qs[j] >> 4) - 8;
            y[j] = (float)x0 * d;
            y[j + TK_QK4_0 / 2] = (float)x1 * d;
        }
    }
}

static void deq_q4_1(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += TK_QK4_1) {
        tk_block_q4_1 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tk_f16_to_f32(b.d);
        const float m = tk_f16_to_f32(b.m);
        for (int j = 0; j < TK_QK4_1 / 2; j++) {
            const int x0 = b.qs[j] & 0x0F;
            const int x1 = b.qs[j] >> 4;
            y[j] = (float)x0 * d + m;
            y[j + TK_QK4_1 / 2] = (float)x1 * d + m;
        }
    }
}

static uint32_t load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void deq_q5_0(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += TK_QK5_0) {
        tk_block_q5_0 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tk_f16_to_f32(b.d);
        const uint32_t qh = load_u32le(b.qh);
        for (int j = 0; j < TK_QK5_0 / 2; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4;
            const int h1 = (int)((qh >> (j + 16)) & 1) << 4;
            const int x0 = ((b.qs[j] & 0x0F) | h0) - 16;
            const int x1 = ((b.qs[j] >> 4) | h1) - 16;
            y[j] = (float)x0 * d;
            y[j + TK_QK5_0 / 2] = (float)x1 * d;
        }
    }
}

static void deq_q5_1(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += TK_QK5_1) {
        tk_block_q5_1 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tk_f16_to_f32(b.d);
        const float m = tk_f16_to_f32(b.m);
        const uint32_t qh = load_u32le(b.qh);
        for (int j = 0; j < TK_QK5_1 / 2; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4;
            const int h1 = (int)((qh >> (j + 16)) & 1) << 4;
            const int x0 = (b.qs[j] & 0x0F) | h0;
            const int x1 = (b.qs[j] >> 4) | h1;
            y[j] = (float)x0 * d + m;
            y[j + TK_QK5_1 / 2] = (float)x1 * d + m;
        }
    }
}

static void deq_q8_0(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += TK_QK8_0) {
        tk_block_q8_0 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tk_f16_to_f32(b.d);
        for (int j = 0; j < TK_QK8_0; j++) y[j] = (float)b.qs[j] * d;
    }
}

static void deq_q8_1(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += TK_QK8_1) {
        tk_block_q8_1 b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tk_f16_to_f32(b.d);
        for (int j = 0; j < TK_QK8_1; j++) y[j] = (float)b.qs[j] * d;
    }
}

static void deq_q2_K(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        tk_block_q2_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tk_f16_to_f32(b.d);
        const float dmin = tk_f16_to_f32(b.dmin);
        const uint8_t *q = b.qs;
        int is = 0;
        /* Two halves of 128; each byte of q holds four 2-bit quants that
         * belong to four consecutive 32-element groups. */
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; part++) {
                    const uint8_t sc = b.scales[is++];
                    const float dl = d * (float)(sc & 0xF);
                    const float ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[16 * part + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

static void deq_q3_K(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        tk_block_q3_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d_all = tk_f16_to_f32(b.d);
        /* Unpack sixteen 6-bit scales: low 4 bits from bytes 0..7 (low nibble
         * for scales 0..7, high nibble for 8..15), high 2 bits from bytes
         * 8..11 (scale s uses byte 8 + s%4, bit pair s/4). */
        int scales[16];
        for (int s = 0; s < 16; s++) {
            const int lo = s < 8 ? (b.scales[s] & 0xF) : (b.scales[s - 8] >> 4);
            const int hi = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
            scales[s] = (lo | (hi << 4)) - 32;
        }
        const uint8_t *q = b.qs;
        uint8_t m = 1; /* hmask bit for the current 32-element group */
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1)) {
                for (int part = 0; part < 2; part++) {
                    const float dl = d_all * (float)scales[is++];
                    for (int l = 16 * part; l < 16 * part + 16; l++) {
                        const int v = ((q[l] >> shift) & 3) - ((b.hmask[l] & m) ? 0 : 4);
                        *y++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

static void deq_q4_K(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        tk_block_q4_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tk_f16_to_f32(b.d);
        const float dmin = tk_f16_to_f32(b.dmin);
        const uint8_t *q = b.qs;
        for (int j = 0; j < 8; j += 2, q += 32) {
            uint8_t sc, m;
            tk_k4_scale_min(j, b.scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            tk_k4_scale_min(j + 1, b.scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void deq_q5_K(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        tk_block_q5_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tk_f16_to_f32(b.d);
        const float dmin = tk_f16_to_f32(b.dmin);
        const uint8_t *ql = b.qs;
        uint8_t u1 = 1, u2 = 2; /* qh bits of the two 32-element groups */
        for (int j = 0; j < 8; j += 2, ql += 32, u1 = (uint8_t)(u1 << 2), u2 = (uint8_t)(u2 << 2)) {
            uint8_t sc, m;
            tk_k4_scale_min(j, b.scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            tk_k4_scale_min(j + 1, b.scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0xF) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0)) - m2;
        }
    }
}

static void deq_q6_K(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        tk_block_q6_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tk_f16_to_f32(b.d);
        const uint8_t *ql = b.ql, *qh = b.qh;
        const int8_t *sc = b.scales;
        /* Two halves of 128 elements; within a half, element l (0..31) of each
         * of the four 32-groups shares qh[l] (two bits per group). */
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                /* (d * scale) * q, left to right as in the reference */
                y[l] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

static void deq_q8_K(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += TK_QK_K) {
        tk_block_q8_K b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        for (int j = 0; j < TK_QK_K; j++) y[j] = b.d * (float)b.qs[j];
    }
}

static void deq_iq4_nl(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += TK_QK4_NL) {
        tk_block_iq4_nl b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tk_f16_to_f32(b.d);
        for (int j = 0; j < TK_QK4_NL / 2; j++) {
            y[j] = d * (float)tk_kvalues_iq4nl[b.qs[j] & 0xF];
            y[j + TK_QK4_NL / 2] = d * (float)tk_kvalues_iq4nl[b.qs[j] >> 4];
        }
    }
}

static void deq_iq4_xs(const unsigned char *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        tk_block_iq4_xs b;
        memcpy(&b, src + i * sizeof b, sizeof b);
        const float d = tk_f16_to_f32(b.d);
        const uint8_t *qs = b.qs;
        for (int ib = 0; ib < TK_QK_K / 32; ib++, y += 32, qs += 16) {
            const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                           (((b.scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)tk_kvalues_iq4nl[qs[j] & 0xF];
                y[j + 16] = dl * (float)tk_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* Codes of one NF4 block of L (64 or 32) elements: byte j holds element j
 * (low nibble) and j + L/2 (high nibble). */
static void deq_nf4_codes(const unsigned char *q, int L, float absmax, float *y) {
    for (int j = 0; j < L / 2; j++) {
        y[j] = tk_nf4_values[q[j] & 0xF] * absmax;
        y[j + L / 2] = tk_nf4_values[q[j] >> 4] * absmax;
    }
}

static void deq_nf4(const unsigned char *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += TK_NF4_BLOCK) {
        const int L = n - i < TK_NF4_BLOCK ? (int)(n - i) : TK_NF4_BLOCK;
        float absmax;
        memcpy(&absmax, src, 4);
        deq_nf4_codes(src + 4, L, absmax, y + i);
        src += 4 + L / 2;
    }
}

static void deq_nf4_dq(const unsigned char *src, float *y, int64_t n) {
    const int64_t nb = (n + TK_NF4_BLOCK - 1) / TK_NF4_BLOCK;
    const int64_t ng = (nb + TK_NF4_DQ_GROUP - 1) / TK_NF4_DQ_GROUP;
    const unsigned char *qa = src + 8 * ng, *codes = qa + nb;
    for (int64_t b = 0; b < nb; b++) {
        float gs[2];
        memcpy(gs, src + 8 * (b / TK_NF4_DQ_GROUP), 8);
        const float absmax = (float)qa[b] * gs[0] + gs[1];
        const int64_t i = b * TK_NF4_BLOCK;
        const int L = n - i < TK_NF4_BLOCK ? (int)(n - i) : TK_NF4_BLOCK;
        deq_nf4_codes(codes + i / 2, L, absmax, y + i);
    }
}

void tk_dequant_row(tk_dtype t, const void *src, float *dst, int64_t n) {
    const tk_dtype_info *info = tk_dtype_get((int)t);
    if (n <= 0) return;
    if (!info || n % info->block_elems) {
        /* Precondition violated: make it visible rather than leave garbage. */
        for (int64_t i = 0; i < n; i++) dst[i] = NAN;
        return;
    }
    const unsigned char *s = src;
    const int64_t nb = n / info->block_elems;
    switch (t) {
    case TK_F32: deq_f32(s, dst, n); break;
    case TK_F16: deq_f16(s, dst, n); break;
    case TK_BF16: deq_bf16(s, dst, n); break;
    case TK_Q4_0: deq_q4_0(s, dst, nb); break;
    case TK_Q4_1: deq_q4_1(s, dst, nb); break;
    case TK_Q5_0: deq_q5_0(s, dst, nb); break;
    case TK_Q5_1: deq_q5_1(s, dst, nb); break;
    case TK_Q8_0: deq_q8_0(s, dst, nb); break;
    case TK_Q8_1: deq_q8_1(s, dst, nb); break;
    case TK_Q2_K: deq_q2_K(s, dst, nb); break;
    case TK_Q3_K: deq_q3_K(s, dst, nb); break;
    case TK_Q4_K: deq_q4_K(s, dst, nb); break;
    case TK_Q5_K: deq_q5_K(s, dst, nb); break;
    case TK_Q6_K: deq_q6_K(s, dst, nb); break;
    case TK_Q8_K: deq_q8_K(s, dst, nb); break;
    case TK_IQ4_NL: deq_iq4_nl(s, dst, nb); break;
    case TK_IQ4_XS: deq_iq4_xs(s, dst, nb); break;
    case TK_NF4: deq_nf4(s, dst, n); break;
    case TK_NF4_DQ: deq_nf4_dq(s, dst, n); break;
    default:
        for (int64_t i = 0; i < n; i++) dst[i] = NAN;
        break;
    }
}

/* ---- quantization ---- */

/* roundf (halves away from zero) into int8; NaN and out-of-range inputs,
 * which only non-finite data can produce, saturate instead of being UB.
 * Written without the roundf call, which was most of a KV store's time
 * (t = trunc |x|, an inline instruction, up by one from a remainder of
 * 1/2; a - t is exact): the same results, for every float. */
static inline int8_t round_i8(float x) {
    if (x != x) return 0;
    if (x >= 127.0f) return 127;
    if (x <= -128.0f) return -128;
    const float a = fabsf(x), t = truncf(a);
    const int r = (int)t + (a - t >= 0.5f);
    return (int8_t)(x < 0 ? -r : r);
}

void tk_quantize_row_q8_0(const float *src, void *dst, int64_t n) {
    unsigned char *out = dst;
    const int64_t nb = n / TK_QK8_0;
    for (int64_t i = 0; i < nb; i++, src += TK_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < TK_QK8_0; j++) {
            const float a = fabsf(src[j]);
            amax = amax > a ? amax : a;
        }
        /* The scale is computed and applied in float32; only its stored copy
         * is rounded to half precision (as ggml's reference does). */
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        tk_block_q8_0 b;
        b.d = tk_f32_to_f16(d);
        for (int j = 0; j < TK_QK8_0; j++) b.qs[j] = round_i8(src[j] * id);
        memcpy(out + i * sizeof b, &b, sizeof b);
    }
}

void tk_quantize_row_f16(const float *src, void *dst, int64_t n) {
    unsigned char *out = dst;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = tk_f32_to_f16(src[i]);
        memcpy(out + 2 * i, &h, 2);
    }
}

void tk_quantize_row_bf16(const float *src, void *dst, int64_t n) {
    unsigned char *out = dst;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = tk_f32_to_bf16(src[i]);
        memcpy(out + 2 * i, &h, 2);
    }
}
