#include "attention.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "ops.h"
#include "qgemm_impl.h"

/* Head dimensions the SIMD kernels handle (also bounds their stack use). */
#define SIMD_MAX_HD 1024

void tk_attn_init(int group, int hd, float *acc, float *mx, float *sum) {
    memset(acc, 0, sizeof(float) * (size_t)group * hd);
    for (int g = 0; g < group; g++) {
        mx[g] = -FLT_MAX;
        sum[g] = 0;
    }
}

size_t tk_attn_scratch_floats(const tk_kv_pool *kv, int group) {
    /* converted K and V rows of one block, one block of scores, and (Q8_0)
     * the group's quantized queries (34-byte blocks, in 36-byte units) */
    size_t q8 = kv->type == TK_KV_Q8_0 ? (size_t)group * (size_t)(kv->head_dim / 32) * 9 + 1 : 0;
    return (size_t)kv->block_size * (2 * (size_t)kv->head_dim + 1) + q8;
}

float tk_attn_q8_score(const tk_block_q8_0 *q, const unsigned char *krow, int n_blocks, float scale) {
    float acc = 0;
    for (int b = 0; b < n_blocks; b++) {
        tk_block_q8_0 k;
        memcpy(&k, krow + (size_t)b * sizeof k, sizeof k);
        int32_t isum = 0;
        for (int i = 0; i < 32; i++) isum += (int32_t)q[b].qs[i] * k.qs[i];
        const float w = tk_f16_to_f32(q[b].d) * tk_f16_to_f32(k.d);
        acc = b == 0 ? (float)isum * w : fmaf((float)isum, w, acc);
    }
    return acc * scale;
}

void tk_attn_range(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const float *q, int group,
                   float scale, int lo, int hi, float *acc, float *mx, float *sum, float *scratch) {
    const int hd = kv->head_dim, bs = kv->block_size, nb = hd / 32;
    float *kf = scratch, *vf = scratch + (size_t)bs * hd, *scores = vf + (size_t)bs * hd;
    /* Q8_0 KV: the queries quantized like the activations of a Q8_0 matmul */
    tk_block_q8_0 *q8 = (tk_block_q8_0 *)(void *)(scores + bs);
    const bool quant = kv->type == TK_KV_Q8_0;
    if (quant && lo < hi) tk_qkernel_quant_q8_0(q, q8, (int64_t)group * hd);
    for (int start = lo; start < hi;) {
        /* the part of this block inside [start, hi) */
        int block_end = (start / bs + 1) * bs;
        int n = (hi < block_end ? hi : block_end) - start;
        const unsigned char *krows = tk_kv_k(kv, s, layer, kv_head, start);
        const unsigned char *vrows = tk_kv_v(kv, s, layer, kv_head, start);
        const float *kb, *vb;
        if (kv->type == TK_KV_F32) {
            kb = (const float *)krows;
            vb = (const float *)vrows;
        } else {
            if (!quant) tk_kv_load(kv, krows, n, kf);
            tk_kv_load(kv, vrows, n, vf);
            kb = kf;
            vb = vf;
        }
        for (int g = 0; g < group; g++) {
            const float *qh = q + (size_t)g * hd;
            float bmax = -FLT_MAX;
            for (int i = 0; i < n; i++) {
                scores[i] = quant ? tk_attn_q8_score(q8 + (size_t)g * nb, krows + (size_t)i * kv->row_bytes, nb, scale)
                                  : tk_dot_f32(qh, kb + (size_t)i * hd, hd) * scale;
                if (scores[i] > bmax) bmax = scores[i];
            }
            float *a = acc + (size_t)g * hd;
            if (bmax > mx[g]) {
                float r = expf(mx[g] - bmax);
                sum[g] *= r;
                for (int d = 0; d < hd; d++) a[d] *= r;
                mx[g] = bmax;
            }
            for (int i = 0; i < n; i++) {
                float p = expf(scores[i] - mx[g]);
                sum[g] += p;
                const float *vv = vb + (size_t)i * hd;
                for (int d = 0; d < hd; d++) a[d] += p * vv[d];
            }
        }
        start += n;
    }
}

void tk_attn_merge(int group, int hd, float *acc, float *mx, float *sum, const float *acc_b, const float *mx_b,
                   const float *sum_b) {
    for (int g = 0; g < group; g++) {
        if (sum_b[g] == 0) continue;
        /* one of the two factors is exp(0) = 1: no call for it */
        float m = mx[g] > mx_b[g] ? mx[g] : mx_b[g];
        float ra = sum[g] == 0 ? 0 : mx[g] == m ? 1.0f : expf(mx[g] - m), rb = mx_b[g] == m ? 1.0f : expf(mx_b[g] - m);
        float *restrict a = acc + (size_t)g * hd;
        const float *restrict b = acc_b + (size_t)g * hd;
        /* 16 at a time in GCC's generic vectors (the same two products and
         * sum per element as the scalar tail) */
        typedef float v16 __attribute__((vector_size(64)));
        int d = 0;
        for (; d + 16 <= hd; d += 16) {
            v16 x, y;
            memcpy(&x, a + d, sizeof x);
            memcpy(&y, b + d, sizeof y);
            x = x * ra + y * rb;
            memcpy(a + d, &x, sizeof x);
        }
        for (; d < hd; d++) a[d] = a[d] * ra + b[d] * rb;
        sum[g] = sum[g] * ra + sum_b[g] * rb;
        mx[g] = m;
    }
}

void tk_attn_output(int group, int hd, const float *acc, const float *sum, float *out) {
    for (int g = 0; g < group; g++) {
        float inv = sum[g] > 0 ? 1.0f / sum[g] : 0;
        for (int d = 0; d < hd; d++) out[(size_t)g * hd + d] = acc[(size_t)g * hd + d] * inv;
    }
}

/* ---- tiles ---- */

tk_isa tk_attn_isa(tk_isa want, int head_dim) {
#if defined(__x86_64__) || defined(_M_X64)
    if (head_dim <= 0 || head_dim > SIMD_MAX_HD || !tk_isa_supported(want)) return TK_ISA_SCALAR;
    /* AMX: F16 KV only; the kernel declines other types (tk_attn_tile_range
     * then runs the AVX-512 one, the same for every token of an engine) */
    if (want == TK_ISA_AMX && head_dim % 32 == 0) return TK_ISA_AMX;
    if (want == TK_ISA_AMX) want = TK_ISA_AVX512;
    if (want == TK_ISA_AVX512 && head_dim % 16 == 0) return TK_ISA_AVX512;
    if ((want == TK_ISA_AVX512 || want == TK_ISA_AVX2) && head_dim % 8 == 0 && tk_isa_supported(TK_ISA_AVX2))
        return TK_ISA_AVX2;
#elif defined(__aarch64__)
    if (want == TK_ISA_NEON && head_dim > 0 && head_dim <= SIMD_MAX_HD && head_dim % 4 == 0 && tk_isa_supported(want))
        return TK_ISA_NEON;
#else
    (void)want;
    (void)head_dim;
#endif
    return TK_ISA_SCALAR;
}

size_t tk_attn_tile_scratch_floats(int head_dim, int block_size, int max_rows) {
    size_t hd = (size_t)head_dim, ch = TK_ATTN_CHUNK;
    /* SIMD: transposed K chunk, converted V chunk, scores, per-row factors,
     * a row of zeros, each rounded up to 64 bytes */
    size_t simd = (hd * ch + 16) + (ch * hd + 16) + ((size_t)max_rows * ch + 16) + ((size_t)max_rows + 16) + (hd + 16) + 16;
    /* Q8_0: the quantized queries (hd/4 dwords and two words per block per
     * row, rounded up to 64 bytes) */
    simd += (size_t)max_rows * (hd / 4 + 2 * (hd / 32)) + 32;
    /* Q8_0: the chunk's V scales */
    simd += (hd / 32) * ch + 16;
    /* AMX (per 16-row block, rows rounded up to 16, at most 1024): Q tiles,
     * scores, P tiles and accumulators; two chunks of K and of V tiles (hi
     * and lo bf16); a row of zeros; rounding to 64 bytes */
    size_t amx_rows = ((size_t)(max_rows < 1024 ? max_rows : 1024) + 15) / 16 * 16;
    size_t amx = amx_rows * (hd + 3 * ch + hd) + 4 * ch * hd + hd + 32;
    size_t scalar = (size_t)block_size * (2 * hd + 1);
    size_t most = simd > scalar ? simd : scalar;
    return amx > most ? amx : most;
}

void tk_attn_tile_range(tk_isa isa, const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head,
                        const tk_attn_tile *tile, float scale, int seg_lo, int seg_hi, float *acc, float *mx,
                        float *sum, float *scratch) {
    if (isa == TK_ISA_AMX &&
        tk_attn_tile_amx(kv, s, layer, kv_head, tile, scale, seg_lo, seg_hi, acc, mx, sum, scratch) == 0)
        return;
    if ((isa == TK_ISA_AVX512 || isa == TK_ISA_AMX) &&
        tk_attn_tile_avx512(kv, s, layer, kv_head, tile, scale, seg_lo, seg_hi, acc, mx, sum, scratch) == 0)
        return;
    if (isa == TK_ISA_AVX2 &&
        tk_attn_tile_avx2(kv, s, layer, kv_head, tile, scale, seg_lo, seg_hi, acc, mx, sum, scratch) == 0)
        return;
    if (isa == TK_ISA_NEON &&
        tk_attn_tile_neon(kv, s, layer, kv_head, tile, scale, seg_lo, seg_hi, acc, mx, sum, scratch) == 0)
        return;
    /* the scalar reference, one token at a time */
    const int hd = kv->head_dim, group = tile->group;
    for (int t = 0; t < tile->n_tok; t++) {
        int lo = tile->lo[t] > seg_lo ? tile->lo[t] : seg_lo, hi = tile->hi[t] < seg_hi ? tile->hi[t] : seg_hi;
        if (lo >= hi) continue;
        size_t r = (size_t)t * group;
        tk_attn_range(kv, s, layer, kv_head, tile->q + (size_t)t * tile->q_stride, group, scale, lo, hi,
                      acc + r * hd, mx + r, sum + r, scratch);
    }
}
