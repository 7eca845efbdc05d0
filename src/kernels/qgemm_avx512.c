/* AVX-512 (F/BW/VL/DQ) + AVX512-VNNI kernels (Ice Lake, Sapphire Rapids,
 * Zen 4 and later).  Compiled with those flags only, reached only through
 * tk_qkernel_get after a CPU check.  Row-tiled kernels for every weight
 * type but Q4_1, Q5_0, Q5_1, Q5_K and Q6_K (AVX512_TYPES below); the 16-row
 * panel kernels (qgemm_avx512_kpanel.c, qgemm_avx512_lpanel.c) come first
 * for their types.
 *
 * Integer dots use vpdpbusd (u8 x s8 -> int32, no saturation) on the
 * weights' unsigned codes: a signed weight w is stored as w + off (off = 8
 * or 128), and off * (sum of the activation bytes of each 4-byte group)
 * is subtracted by starting the accumulation from its negation.  The
 * k-quants multiply int16 pair sums (vpmaddubsw) by their sub-block scales
 * with vpdpwssd.  The legacy types advance four 32-element blocks at a time
 * (missing blocks at the end of a row are zeros).
 *
 * The tiling, shared with the AVX2 kernels (qgemm_simd.h), gives every
 * (row, token) result the same instruction sequence for every tile shape,
 * so results do not depend on the row split or the batch; they differ from
 * the AVX2 ones only by float rounding. */
#include "qgemm_impl.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__)

#define NT_MAX 8
#define CHUNK_BYTES (512 * 1024)
#define GEMM_ISA TK_ISA_AVX512
#define GEMM_SUFFIX "/avx512"
#include "qgemm_simd.h"

AI __m512i ldz(const void *p) { return _mm512_loadu_si512(p); }
AI __m256i ldy(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
AI __m128i ldx(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

/* Fixed-order horizontal sum of 16 lanes. */
AI float hsum16(__m512 v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ================= legacy 32-blocks, four per step ================= */

/* Q4_0, Q8_0 and IQ4_NL, four blocks per step: lo holds elements 0..15 of blocks
 * b..b+3 (one 128-bit lane each), hi elements 16..31; both dot into the
 * same int32 lanes (4 per block), so one conversion and one fma serve four
 * blocks.  Missing blocks at the end of a row are zeros. */
AI __m512i ins4(bptr p, size_t stride, int cnt) {
    __m512i z = _mm512_castsi128_si512(ldx(p));
    if (cnt > 1) z = _mm512_inserti32x4(z, ldx(p + stride), 1);
    else z = _mm512_inserti32x4(z, _mm_setzero_si128(), 1);
    z = _mm512_inserti32x4(z, cnt > 2 ? ldx(p + 2 * stride) : _mm_setzero_si128(), 2);
    z = _mm512_inserti32x4(z, cnt > 3 ? ldx(p + 3 * stride) : _mm_setzero_si128(), 3);
    return z;
}

/* Four half floats at p + k * stride (0 for k >= cnt). */
AI __m128 h4(bptr p, size_t stride, int cnt) {
    uint64_t h = 0;
    for (int k = 0; k < 4; k++)
        if (k < cnt) h |= (uint64_t)ld16(p + k * stride) << (16 * k);
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h));
}

/* Four half-float scales (0 for missing blocks) -> [d0 x4, d1 x4, d2 x4, d3 x4]. */
AI __m512 sc4(bptr p, size_t stride, int cnt) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                 _mm512_castps128_ps512(h4(p, stride, cnt)));
}

/* One step of four blocks (cnt of them present) at block b. */
AI void nib4_step(const int T, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t b, const int cnt,
                  size_t pf, __m512 acc[8][8]) {
    const size_t wb = lbytes(T), ab = 34;
    const __m512i m4 = _mm512_set1_epi8(0x0F), o = _mm512_set1_epi8((char)(T == L_Q4_0 ? 8 : 128));
    __m512i alo[8], ahi[8], c[8];
    __m512 da[8];
    UNROLL for (int j = 0; j < NT; j++) {
        const bptr a = ap[j] + b * ab;
        alo[j] = ins4(a + 2, ab, cnt);
        ahi[j] = ins4(a + 18, ab, cnt);
        da[j] = sc4(a, ab, cnt);
        c[j] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), o, alo[j]), o, ahi[j]));
    }
    pfetch(MR, wp, b * wb, 4 * wb, pf);
    UNROLL for (int i = 0; i < MR; i++) {
        const bptr x = wp[i] + b * wb;
        __m512i lo, hi;
        if (T == L_Q8_0) { /* bytes 0..15 and 16..31, + 128 */
            const __m512i s80 = _mm512_set1_epi8((char)0x80);
            lo = _mm512_xor_si512(ins4(x + 2, wb, cnt), s80);
            hi = _mm512_xor_si512(ins4(x + 18, wb, cnt), s80);
        } else {
            const __m512i y = ins4(x + 2, wb, cnt);
            lo = _mm512_and_si512(y, m4);
            hi = _mm512_and_si512(_mm512_srli_epi16(y, 4), m4);
        }
        if (T == L_IQ4_NL) { /* code book + 128 */
            const __m512i kv = _mm512_broadcast_i32x4(_mm_xor_si128(ldx(tk_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
            lo = _mm512_shuffle_epi8(kv, lo);
            hi = _mm512_shuffle_epi8(kv, hi);
        }
        const __m512 dw = sc4(x, wb, cnt);
        UNROLL for (int j = 0; j < NT; j++) {
            const __m512i d32 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(c[j], lo, alo[j]), hi, ahi[j]);
            acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d32), _mm512_mul_ps(dw, da[j]), acc[i][j]);
        }
    }
}

AI void mk_nib4(const int T, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf,
                float *out) {
    const int64_t nb = n / 32;
    __m512 acc[8][8];
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) nib4_step(T, MR, NT, wp, ap, b, 4, pf, acc);
    switch (nb - b) {
    case 1: nib4_step(T, MR, NT, wp, ap, b, 1, pf, acc); break;
    case 2: nib4_step(T, MR, NT, wp, ap, b, 2, pf, acc); break;
    case 3: nib4_step(T, MR, NT, wp, ap, b, 3, pf, acc); break;
    default: break;
    }
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] = hsum16(acc[i][j]);
}

/* ================= k-quants ================= */

/* vpshufb index picking the int16 at byte 2k in lanes 0-1 and 2k' in 2-3. */
AI __m512i pick2(int k, int k2) {
    const int a = (0x0100 + 0x0202 * k) * 0x10001, b = (0x0100 + 0x0202 * k2) * 0x10001;
    return _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b);
}

/* Q4_K.  Each zmm of weights holds elements 64k..64k+63 (sub-blocks 2k and
 * 2k+1, natural order). */
AI void mk_q4k(const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf, float *out) {
    const int64_t nb = n / 256;
    const size_t wb = 144, qoff = 16;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[8][8];
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        float da[8];
        UNROLL for (int j = 0; j < NT; j++) da[j] = ldf(ap[j] + b * QK_A);
        pfetch(MR, wp, b * wb, wb, pf);
        UNROLL for (int i = 0; i < MR; i++) {
            const bptr x = wp[i] + b * wb;
            const float d = ldh(x), dmin = ldh(x + 2);
            uint64_t sc64, mn64;
            tk_qkernel_k4_scales64(x + 4, &sc64, &mn64);
            const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc64)));
            const __m128i mn = _mm_cvtsi64_si128((long long)mn64);
            const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
            __m512i q[4];
            UNROLL for (int h = 0; h < 2; h++) {
                const __m512i v = ldz(x + qoff + 64 * h);
                const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                q[2 * h] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
                q[2 * h + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
            }
            __m512i sv[4];
            UNROLL for (int k = 0; k < 4; k++) sv[k] = _mm512_shuffle_epi8(sc, pick2(2 * k, 2 * k + 1));
            UNROLL for (int j = 0; j < NT; j++) {
                const bptr a = ap[j] + b * QK_A;
                __m512i is = _mm512_setzero_si512();
                UNROLL for (int k = 0; k < 4; k++)
                    is = _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(q[k], ldz(a + 4 + 64 * k)), sv[k]);
                const __m256i ms = _mm256_madd_epi16(mins, ldy(a + 260));
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(d * da[j]), acc[i][j]);
                acc[i][j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_zextsi256_si512(ms)), _mm512_set1_ps(dmin * da[j]),
                                             acc[i][j]);
            }
        }
    }
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] = hsum16(acc[i][j]);
}

/* Q2_K and Q3_K, 16-element sub-blocks.  Each zmm of weight codes holds
 * elements 64k..64k+63 (sub-blocks 4k..4k+3, natural order); codes are
 * unsigned:
 *   Q2_K  q in [0, 3], minus the sub-block min term (dmin)
 *   Q3_K  q + 4 in [0, 7], offset 4 removed with the activation sums */
enum { K_Q2, K_Q3 };

AI void mk_k16(const int T, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf,
               float *out) {
    const int64_t nb = n / 256;
    const size_t wb = T == K_Q2 ? 84 : 110;
    const __m512i m3 = _mm512_set1_epi8(3), b2 = _mm512_set1_epi8(4);
    __m512 acc[8][8];
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        float da[8];
        UNROLL for (int j = 0; j < NT; j++) da[j] = ldf(ap[j] + b * QK_A);
        pfetch(MR, wp, b * wb, wb, pf);
        UNROLL for (int i = 0; i < MR; i++) {
            const bptr x = wp[i] + b * wb;
            float d, dmin = 0.0f;
            __m256i sc16, mins = _mm256_setzero_si256();
            __m512i q[4], sv[4];
            if (T == K_Q2) {
                const __m128i s8 = ldx(x);
                sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s8, _mm_set1_epi8(0x0F)));
                mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0x0F)));
                d = ldh(x + 80);
                dmin = ldh(x + 82);
                UNROLL for (int h = 0; h < 2; h++) {
                    const __m256i qs = ldy(x + 16 + 32 * h);
                    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(qs), _mm256_srli_epi16(qs, 2), 1);
                    q[2 * h] = _mm512_and_si512(z, m3);
                    q[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m3);
                }
            } else {
                uint64_t lo8, hi8;
                tk_qkernel_k3_scales64(x + 96, &lo8, &hi8);
                sc16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_set_epi64x((long long)hi8, (long long)lo8), _mm_set1_epi8(32)));
                d = ldh(x + 108);
                const __m256i hm = ldy(x);
                const __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(hm), _mm256_srli_epi16(hm, 1), 1);
                UNROLL for (int h = 0; h < 2; h++) {
                    const __m256i qs = ldy(x + 32 + 32 * h);
                    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(qs), _mm256_srli_epi16(qs, 2), 1);
                    /* hmask bit 4h + g (g = 0..3) -> bit 2 */
                    const __m512i h01 = h ? _mm512_srli_epi16(hz, 2) : _mm512_slli_epi16(hz, 2);
                    const __m512i h23 = h ? _mm512_srli_epi16(hz, 4) : hz;
                    q[2 * h] = _mm512_or_si512(_mm512_and_si512(z, m3), _mm512_and_si512(h01, b2));
                    q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(z, 4), m3), _mm512_and_si512(h23, b2));
                }
            }
            const __m512i scz = _mm512_castsi256_si512(sc16);
            UNROLL for (int k = 0; k < 4; k++) {
                /* int16 lanes 8s..8s+7 <- scale 4k + s */
                const __m512i idx = _mm512_srli_epi16(
                    _mm512_add_epi16(_mm512_set1_epi16((short)(32 * k)),
                                     _mm512_setr_epi32(0x00010000, 0x00030002, 0x00050004, 0x00070006, 0x00090008,
                                                       0x000B000A, 0x000D000C, 0x000F000E, 0x00110010, 0x00130012,
                                                       0x00150014, 0x00170016, 0x00190018, 0x001B001A, 0x001D001C,
                                                       0x001F001E)),
                    3);
                sv[k] = _mm512_permutexvar_epi16(idx, scz);
            }
            UNROLL for (int j = 0; j < NT; j++) {
                const bptr a = ap[j] + b * QK_A;
                __m512i is = _mm512_setzero_si512();
                UNROLL for (int k = 0; k < 4; k++)
                    is = _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(q[k], ldz(a + 4 + 64 * k)), sv[k]);
                const __m256i bsums = ldy(a + 260);
                if (T == K_Q3) { /* remove the offset: 4 * sum(scale * bsum) */
                    const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bsums), 2);
                    is = _mm512_sub_epi32(is, _mm512_zextsi256_si512(corr));
                }
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(d * da[j]), acc[i][j]);
                if (T == K_Q2)
                    acc[i][j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_zextsi256_si512(_mm256_madd_epi16(mins, bsums))),
                                                 _mm512_set1_ps(dmin * da[j]), acc[i][j]);
            }
        }
    }
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] = hsum16(acc[i][j]);
}

/* IQ4_XS: d scales_h scales_l[4] qs[128]; 8 sub-blocks of 32 with signed
 * code-book values.  No vpsignb in AVX-512: |w| times a with the sign of w
 * moved onto a by a masked negation; vpdpwssd applies the sub-block scale. */
AI void mk_iq4xs(const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf, float *out) {
    const int64_t nb = n / 256;
    const __m512i kv = _mm512_broadcast_i32x4(ldx(tk_kvalues_iq4nl));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[8][8];
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        float da[8];
        UNROLL for (int j = 0; j < NT; j++) da[j] = ldf(ap[j] + b * QK_A);
        pfetch(MR, wp, b * 136, 136, pf);
        UNROLL for (int i = 0; i < MR; i++) {
            const bptr x = wp[i] + b * 136;
            const float d = ldh(x);
            /* 8 scales as int16, in every 128-bit lane */
            const __m512i sc = _mm512_broadcast_i32x4(_mm_sub_epi16(
                _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)tk_qkernel_iq4xs_scales64(x + 2, x + 4))), _mm_set1_epi16(32)));
            __m512i w[4], sv[4];
            __mmask64 neg[4];
            UNROLL for (int k = 0; k < 4; k++) {
                /* sub-blocks 2k, 2k+1: [lo nibbles 2k | hi 2k | lo 2k+1 | hi 2k+1] */
                const __m256i y = ldy(x + 8 + 32 * k);
                const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(y), _mm256_srli_epi16(y, 4), 1);
                const __m512i v = _mm512_shuffle_epi8(kv, _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)), m4));
                neg[k] = _mm512_movepi8_mask(v);
                w[k] = _mm512_abs_epi8(v);
                /* int16 lanes 0..15 <- scale 2k, 16..31 <- scale 2k+1 */
                const int a0 = (0x0100 + 0x0202 * (2 * k)) * 0x10001, a1 = (0x0100 + 0x0202 * (2 * k + 1)) * 0x10001;
                sv[k] = _mm512_shuffle_epi8(sc, _mm512_setr_epi32(a0, a0, a0, a0, a0, a0, a0, a0, a1, a1, a1, a1, a1, a1, a1, a1));
            }
            UNROLL for (int j = 0; j < NT; j++) {
                const bptr a = ap[j] + b * QK_A;
                __m512i is = _mm512_setzero_si512();
                UNROLL for (int k = 0; k < 4; k++) {
                    const __m512i av = ldz(a + 4 + 64 * k);
                    const __m512i sa = _mm512_mask_sub_epi8(av, neg[k], _mm512_setzero_si512(), av);
                    is = _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(w[k], sa), sv[k]);
                }
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(d * da[j]), acc[i][j]);
            }
        }
    }
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] = hsum16(acc[i][j]);
}

/* ================= float weights ================= */

enum { F_F32, F_F16, F_BF16 };

AI __m512 fload(int T, bptr p) {
    if (T == F_F32) return _mm512_loadu_ps(p);
    if (T == F_F16) return _mm512_cvtph_ps(ldy(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ldy(p)), 16));
}

AI __m512 fload_tail(int T, bptr p, __mmask16 m) {
    if (T == F_F32) return _mm512_maskz_loadu_ps(m, p);
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (T == F_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI void mk_float(const int T, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf,
                 float *out) {
    const size_t es = T == F_F32 ? 4 : 2;
    __m512 acc[8][8];
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        if ((k * (int64_t)es) % 64 == 0) pfetch(MR, wp, (int64_t)es * k, 1, pf);
        __m512 a[8];
        UNROLL for (int j = 0; j < NT; j++) a[j] = _mm512_loadu_ps(ap[j] + 4 * k);
        UNROLL for (int i = 0; i < MR; i++) {
            const __m512 wv = fload(T, wp[i] + es * k);
            UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm512_fmadd_ps(wv, a[j], acc[i][j]);
        }
    }
    if (k < n) {
        const __mmask16 m = (__mmask16)((1u << (n - k)) - 1);
        __m512 a[8];
        UNROLL for (int j = 0; j < NT; j++) a[j] = _mm512_maskz_loadu_ps(m, ap[j] + 4 * k);
        UNROLL for (int i = 0; i < MR; i++) {
            const __m512 wv = fload_tail(T, wp[i] + es * k, m);
            UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm512_fmadd_ps(wv, a[j], acc[i][j]);
        }
    }
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] = hsum16(acc[i][j]);
}

/* ================= NF4 / NF4_DQ (definition: nf4_dot.h) ================= */

/* A whole 64-block per step: its 32 code bytes are zero-extended to 32
 * words, and vpermw looks the int16 levels up in a 32-entry table holding
 * TK_NF4_LEVELS_I16 twice (vpermw reads the low 5 bits of each index, so
 * the low nibble needs no masking: bit 4 only selects the copy); the high
 * nibbles are the words shifted right by 4.  The activations of the two
 * chunks are sign-extended to int16 in element order (vpmovsxbw), once per
 * token and shared by the MR rows; vpmaddwd gives exact int32 pair sums
 * (|L| <= 2^14, |q| <= 127); per block and (row, token) the two chunks'
 * lanes are scaled by their d (broadcast once per token), summed, and one
 * fma adds them times the row's absmax (broadcast once per row); the sum
 * is scaled by 2^-14 at the end.  A
 * 32-element tail block is one chunk: [low nibbles | high nibbles] of its
 * 16 bytes. */

AI void nf4_block(const int DQ, const int TAIL, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t nb,
                  int64_t ng, int64_t b, const float *amb, size_t pf, __m512i tab, __m512 acc[8][8]) {
    const int nh = TAIL ? 1 : 2;
    /* per token: the int16 activations of the block's chunks and their
     * scales d, broadcast */
    __m512i a[8][2];
    __m512 d[8][2];
    UNROLL for (int j = 0; j < NT; j++) UNROLL for (int h = 0; h < nh; h++) {
            const bptr blk = ap[j] + (2 * b + h) * 34;
            a[j][h] = _mm512_cvtepi8_epi16(ldy(blk + 2));
            d[j][h] = _mm512_set1_ps(ldh(blk));
        }
    if (!DQ) pfetch(MR, wp, 36 * b, 1, pf);
    else if (b % 64 == 0) pfetch(MR, wp, 8 * ng + b, 1, pf);
    UNROLL for (int i = 0; i < MR; i++) {
        bptr cp;
        const __m512 am = amb ? _mm512_set1_ps(amb[16 * i]) : _mm512_set1_ps(nf4_absmax(DQ, wp[i], nb, ng, b, &cp));
        if (amb) cp = wp[i] + 8 * ng + nb + 32 * b;
        if (DQ) pfetch(1, &cp, 0, 1, pf);
        __m512i w[2];
        if (TAIL) {
            const __m128i x = ldx(cp);
            w[0] = _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(_mm256_set_m128i(_mm_srli_epi16(x, 4), x)), tab);
        } else {
            const __m512i cz = _mm512_cvtepu8_epi16(ldy(cp));
            w[0] = _mm512_permutexvar_epi16(cz, tab);
            w[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(cz, 4), tab);
        }
        UNROLL for (int j = 0; j < NT; j++) {
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(w[0], a[j][0])), d[j][0]);
            if (!TAIL) f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(w[1], a[j][1])), d[j][1], f);
            acc[i][j] = _mm512_fmadd_ps(f, am, acc[i][j]);
        }
    }
}

AI void mk_nf4(const int DQ, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf,
               float *out) {
    const int64_t nb = (n + TK_NF4_BLOCK - 1) / TK_NF4_BLOCK, nbf = n / TK_NF4_BLOCK;
    const int64_t ng = (nb + TK_NF4_DQ_GROUP - 1) / TK_NF4_DQ_GROUP;
    static const int16_t lv[16] = TK_NF4_LEVELS_I16;
    const __m512i tab = _mm512_broadcast_i64x4(ldy(lv));
    __m512 acc[8][8];
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm512_setzero_ps();
    if (!DQ) {
        for (int64_t b = 0; b < nbf; b++) nf4_block(0, 0, MR, NT, wp, ap, nb, ng, b, NULL, pf, tab, acc);
    } else {
        /* NF4_DQ: the absmax of 16 blocks at a time (u8 * scale + min, one
         * group: 256 is a multiple of 16; the 16 u8 read stay inside the
         * row, whose codes follow) */
        for (int64_t b0 = 0; b0 < nbf; b0 += 16) {
            float amb[8][16];
            UNROLL for (int i = 0; i < MR; i++) {
                const bptr g = wp[i] + 8 * (b0 / TK_NF4_DQ_GROUP);
                const __m512 u = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(ldx(wp[i] + 8 * ng + b0)));
                _mm512_storeu_ps(amb[i], _mm512_add_ps(_mm512_mul_ps(u, _mm512_set1_ps(ldf(g))), _mm512_set1_ps(ldf(g + 4))));
            }
            const int64_t b1 = b0 + 16 < nbf ? b0 + 16 : nbf;
            for (int64_t b = b0; b < b1; b++) nf4_block(1, 0, MR, NT, wp, ap, nb, ng, b, &amb[0][b - b0], pf, tab, acc);
        }
    }
    if (nbf < nb) nf4_block(DQ, 1, MR, NT, wp, ap, nb, ng, nbf, NULL, pf, tab, acc);
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] = hsum16(acc[i][j]) * 0x1p-14f;
}

/* ================= instantiation ================= */

#define C_Q4_0(MR, NT, ...) mk_nib4(L_Q4_0, MR, NT, __VA_ARGS__)
#define C_Q8_0(MR, NT, ...) mk_nib4(L_Q8_0, MR, NT, __VA_ARGS__)
#define C_IQ4_NL(MR, NT, ...) mk_nib4(L_IQ4_NL, MR, NT, __VA_ARGS__)
#define C_Q4_K(MR, NT, ...) mk_q4k(MR, NT, __VA_ARGS__)
#define C_Q2_K(MR, NT, ...) mk_k16(K_Q2, MR, NT, __VA_ARGS__)
#define C_Q3_K(MR, NT, ...) mk_k16(K_Q3, MR, NT, __VA_ARGS__)
#define C_IQ4_XS(MR, NT, ...) mk_iq4xs(MR, NT, __VA_ARGS__)
#define C_F32(MR, NT, ...) mk_float(F_F32, MR, NT, __VA_ARGS__)
#define C_F16(MR, NT, ...) mk_float(F_F16, MR, NT, __VA_ARGS__)
#define C_BF16(MR, NT, ...) mk_float(F_BF16, MR, NT, __VA_ARGS__)
#define C_NF4(MR, NT, ...) mk_nf4(0, MR, NT, __VA_ARGS__)
#define C_NF4_DQ(MR, NT, ...) mk_nf4(1, MR, NT, __VA_ARGS__)

/* Tile shapes (rows x tokens), tuned with bench_qgemm (32 zmm registers). */
#ifndef MR_L
#define MR_L 6
#endif
#ifndef NT_L
#define NT_L 4
#endif
#ifndef MR_K
#define MR_K 3
#endif
#ifndef NT_K
#define NT_K 6
#endif
#ifndef MR_F
#define MR_F 6
#endif
#ifndef MR_N
#define MR_N 4
#endif
#ifndef NT_N
#define NT_N 4
#endif
#ifndef NT_F
#define NT_F 4
#endif

/* GEMM_TYPES less Q4_1, Q5_0, Q5_1, Q5_K and Q6_K: at this level they take
 * the 16-row panels (qgemm_avx512_lpanel.c, qgemm_avx512_kpanel.c); even
 * the AVX2 panel kernels were faster than these tiles at every batch size
 * (docs/kernels.md, session 32). */
#define AVX512_TYPES(X)                                                                                \
    X(Q4_0, Q8_0, q4_0, L) X(Q8_0, Q8_0, q8_0, L) X(IQ4_NL, Q8_0, iq4_nl, L)                           \
    X(Q4_K, Q8_K, q4_K, K) X(Q2_K, Q8_K, q2_K, K) X(Q3_K, Q8_K, q3_K, K) X(IQ4_XS, Q8_K, iq4_xs, K)    \
    X(F32, F32, f32, F) X(F16, F32, f16, F) X(BF16, F32, bf16, F)                                      \
    X(NF4, Q8_0, nf4, N) X(NF4_DQ, Q8_0, nf4dq, N)

static const tk_qkernel *tiled_kernel(tk_dtype wtype);
GEMM_KERNELS(tiled_kernel, AVX512_TYPES)

const tk_qkernel *tk_qkernel_avx512_tiled(tk_dtype wtype) { return tiled_kernel(wtype); }

/* The 16-row panels (qgemm_avx512_kpanel.c, qgemm_avx512_lpanel.c) replace
 * the tiled kernels of their types. */
const tk_qkernel *tk_qkernel_avx512(tk_dtype wtype) {
    const tk_qkernel *p = tk_qkernel_avx512_kpanel(wtype);
    if (!p) p = tk_qkernel_avx512_lpanel(wtype);
    return p ? p : tiled_kernel(wtype);
}

#else

const tk_qkernel *tk_qkernel_avx512(tk_dtype wtype) {
    (void)wtype;
    return NULL;
}

const tk_qkernel *tk_qkernel_avx512_tiled(tk_dtype wtype) {
    (void)wtype;
    return NULL;
}

#endif
