/* NF4 / NF4_DQ x Q8_0 kernels: scalar reference and AVX2 (table lookup by
 * pshufb).  See nf4_dot.h. */
#include "nf4_dot.h"

#include <math.h>
#include <string.h>

#include "../formats/dtype.h"
#include "../formats/quant_blocks.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TK_NF4_X86 1
#endif

/* tk_nf4_values * 16384, rounded to nearest */
static const int16_t nf4_i16[16] = {-16384, -11406, -8603, -6470, -4660, -3027, -1492, 0,
                                    1304,   2637,   4032,  5536,  7221,  9218,  11845, 16384};

size_t tk_nf4_act_row_bytes(int64_t n) { return (size_t)(n / 32) * sizeof(tk_block_q8_0); }

void tk_nf4_quantize_act(const float *x, void *out, int64_t n) {
    unsigned char *o = out;
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        tk_block_q8_0 blk;
        blk.d = tk_f32_to_f16(d);
        for (int j = 0; j < 32; j++) {
            long q = lrintf(x[j] * id); /* nearest even */
            blk.qs[j] = (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
        }
        memcpy(o + (size_t)b * sizeof blk, &blk, sizeof blk);
    }
}

/* ---- row walking ----
 * A row is a sequence of 32-element chunks.  Chunk k has its codes at
 * nibble positions given by (byte pointer, shift/stride) and a block absmax:
 *   64-element block, first half: low nibbles of its 32 bytes
 *   64-element block, second half: high nibbles of the same bytes
 *   32-element tail block: its 16 bytes, low nibbles then high nibbles */

typedef struct nf4_row {
    const unsigned char *w;
    int64_t n, nb;
    int dq;
    const unsigned char *qa, *codes; /* DQ */
} nf4_row;

static float row_absmax(const nf4_row *r, int64_t b, const unsigned char **codes) {
    if (!r->dq) {
        /* blocks are [f32][32 bytes]; all before b are full */
        const unsigned char *p = r->w + (size_t)b * 36;
        float a;
        memcpy(&a, p, 4);
        *codes = p + 4;
        return a;
    }
    float gs[2];
    memcpy(gs, r->w + 8 * (b / TK_NF4_DQ_GROUP), 8);
    *codes = r->codes + (size_t)b * 32;
    return (float)r->qa[b] * gs[0] + gs[1];
}

static void row_init(nf4_row *r, const void *w, int64_t n, int dq) {
    r->w = w;
    r->n = n;
    r->nb = (n + 63) / 64;
    r->dq = dq;
    if (dq) {
        const int64_t ng = (r->nb + TK_NF4_DQ_GROUP - 1) / TK_NF4_DQ_GROUP;
        r->qa = r->w + 8 * ng;
        r->codes = r->qa + r->nb;
    }
}

/* ---- scalar ---- */

static int32_t dot32_scalar(const uint8_t *code, const int8_t *a) {
    int32_t s = 0;
    for (int j = 0; j < 32; j++) s += (int32_t)nf4_i16[code[j]] * a[j];
    return s;
}

static void gemm_scalar(int dq, const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                        size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    uint8_t code[32];
    for (int64_t r = r0; r < r1; r++) {
        nf4_row row;
        row_init(&row, (const unsigned char *)w + (size_t)r * w_row_bytes, n, dq);
        for (int t = 0; t < n_tok; t++) {
            const unsigned char *at = (const unsigned char *)act + (size_t)t * act_row_bytes;
            float acc = 0;
            for (int64_t b = 0; b < row.nb; b++) {
                const unsigned char *c;
                const float amax = row_absmax(&row, b, &c) * (1.0f / 16384.0f);
                const int L = n - 64 * b < 64 ? 32 : 64;
                for (int h = 0; h < L / 32; h++) {
                    if (L == 64)
                        for (int j = 0; j < 32; j++) code[j] = h ? c[j] >> 4 : c[j] & 0xF;
                    else
                        for (int j = 0; j < 16; j++) {
                            code[j] = c[j] & 0xF;
                            code[j + 16] = c[j] >> 4;
                        }
                    tk_block_q8_0 ab;
                    memcpy(&ab, at + (size_t)(2 * b + h) * sizeof ab, sizeof ab);
                    acc += (float)dot32_scalar(code, ab.qs) * (amax * tk_f16_to_f32(ab.d));
                }
            }
            y[(size_t)t * ldy + r] = acc;
        }
    }
}

void tk_nf4_gemm_scalar(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                        size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    gemm_scalar(0, w, w_row_bytes, n, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}

void tk_nf4dq_gemm_scalar(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                          size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    gemm_scalar(1, w, w_row_bytes, n, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}

/* ---- AVX2 ---- */

#ifdef TK_NF4_X86
int tk_nf4_have_avx2(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

#define AVX2 __attribute__((target("avx2,fma")))

/* int32 lane sums of 32 products: codes (32 bytes, values 0..15, element
 * order) x int8 activations. */
AVX2 static inline __m256i dot32_avx2(__m256i codes, __m256i a, __m256i tlo, __m256i thi) {
    const __m256i lo = _mm256_shuffle_epi8(tlo, codes); /* low bytes of the int16 levels */
    const __m256i hi = _mm256_shuffle_epi8(thi, codes); /* high bytes */
    const __m256i w0 = _mm256_unpacklo_epi8(lo, hi);    /* int16: elements 0-7 | 16-23 */
    const __m256i w1 = _mm256_unpackhi_epi8(lo, hi);    /*        elements 8-15 | 24-31 */
    const __m256i sgn = _mm256_cmpgt_epi8(_mm256_setzero_si256(), a);
    const __m256i a0 = _mm256_unpacklo_epi8(a, sgn); /* sign-extended, same order */
    const __m256i a1 = _mm256_unpackhi_epi8(a, sgn);
    return _mm256_add_epi32(_mm256_madd_epi16(w0, a0), _mm256_madd_epi16(w1, a1));
}

AVX2 static void gemm_avx2(int dq, const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1,
                           const void *act, size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    int8_t tl[16], th[16];
    for (int i = 0; i < 16; i++) {
        tl[i] = (int8_t)(nf4_i16[i] & 0xFF);
        th[i] = (int8_t)((uint16_t)nf4_i16[i] >> 8);
    }
    const __m256i tlo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tl));
    const __m256i thi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)th));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t r = r0; r < r1; r++) {
        nf4_row row;
        row_init(&row, (const unsigned char *)w + (size_t)r * w_row_bytes, n, dq);
        for (int t = 0; t < n_tok; t++) {
            const unsigned char *at = (const unsigned char *)act + (size_t)t * act_row_bytes;
            __m256 acc = _mm256_setzero_ps();
            for (int64_t b = 0; b < row.nb; b++) {
                const unsigned char *c;
                const float amax = row_absmax(&row, b, &c) * (1.0f / 16384.0f);
                const unsigned char *a0p = at + (size_t)(2 * b) * sizeof(tk_block_q8_0);
                uint16_t d0;
                memcpy(&d0, a0p, 2);
                if (n - 64 * b >= 64) {
                    uint16_t d1;
                    memcpy(&d1, a0p + sizeof(tk_block_q8_0), 2);
                    const __m256i bytes = _mm256_loadu_si256((const __m256i *)c);
                    const __m256i c0 = _mm256_and_si256(bytes, m4);
                    const __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4);
                    const __m256i s0 = dot32_avx2(c0, _mm256_loadu_si256((const __m256i *)(a0p + 2)), tlo, thi);
                    const __m256i s1 = dot32_avx2(
                        c1, _mm256_loadu_si256((const __m256i *)(a0p + sizeof(tk_block_q8_0) + 2)), tlo, thi);
                    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(amax * tk_f16_to_f32(d0)), acc);
                    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_set1_ps(amax * tk_f16_to_f32(d1)), acc);
                } else {
                    const __m128i bytes = _mm_loadu_si128((const __m128i *)c);
                    const __m128i m = _mm_set1_epi8(0x0F);
                    const __m256i cc = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), m),
                                                        _mm_and_si128(bytes, m));
                    const __m256i s0 = dot32_avx2(cc, _mm256_loadu_si256((const __m256i *)(a0p + 2)), tlo, thi);
                    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(amax * tk_f16_to_f32(d0)), acc);
                }
            }
            __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
            s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            s = _mm_add_ss(s, _mm_movehdup_ps(s));
            y[(size_t)t * ldy + r] = _mm_cvtss_f32(s);
        }
    }
}

void tk_nf4_gemm_avx2(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                      size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    if (tk_nf4_have_avx2())
        gemm_avx2(0, w, w_row_bytes, n, r0, r1, act, act_row_bytes, n_tok, y, ldy);
    else
        gemm_scalar(0, w, w_row_bytes, n, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}

void tk_nf4dq_gemm_avx2(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                        size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    if (tk_nf4_have_avx2())
        gemm_avx2(1, w, w_row_bytes, n, r0, r1, act, act_row_bytes, n_tok, y, ldy);
    else
        gemm_scalar(1, w, w_row_bytes, n, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}
#else
int tk_nf4_have_avx2(void) { return 0; }
void tk_nf4_gemm_avx2(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                      size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    gemm_scalar(0, w, w_row_bytes, n, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}
void tk_nf4dq_gemm_avx2(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                        size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    gemm_scalar(1, w, w_row_bytes, n, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}
#endif

void tk_nf4_gemm(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                 size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    tk_nf4_gemm_avx2(w, w_row_bytes, n, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}

void tk_nf4dq_gemm(const void *w, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1, const void *act,
                   size_t act_row_bytes, int n_tok, float *y, int64_t ldy) {
    tk_nf4dq_gemm_avx2(w, w_row_bytes, n, r0, r1, act, act_row_bytes, n_tok, y, ldy);
}
