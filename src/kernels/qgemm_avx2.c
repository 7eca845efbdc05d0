/* AVX2 + FMA + F16C kernels (compiled with those flags only; reached only
 * through tk_qkernel_get after a CPU check).  qgemm_avxvnni.c compiles this
 * file a second time with TK_AVXVNNI and AVX-VNNI: the 8-row panel kernels of
 * the 32-element types then form their integer dots with vpdpbusd (see idotk).
 * qgemm_avx2_kbatch.c compiles it again with TK_QGEMM_KBATCH for the
 * k-quants' passes of more than 4 tokens alone (k_panel_gemm).
 *
 * Integer products use _mm256_maddubs_epi16 (unsigned x signed bytes ->
 * int16 pairs).  Weights with a signed range go through the sign trick:
 * maddubs(|w|, sign(a, w)); activation quants lie in [-127, 127], so the
 * negation never overflows and no pair sum saturates (2*128*127 < 32768).
 * Unsigned-coded weights (Q4_1, Q5_1, the k-quants) feed maddubs directly,
 * and a zero-point is removed with the activation block sums.
 *
 * The tiling, shared with the AVX-512 kernels, is in qgemm_simd.h. */
#include "qgemm_impl.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && \
    (!defined(TK_AVXVNNI) || defined(__AVXVNNI__))

#define NT_MAX 4
#define CHUNK_BYTES (256 * 1024)
#define GEMM_ISA TK_ISA_AVX2
#ifdef TK_AVXVNNI
#define GEMM_SUFFIX "/avx2+vnni"
#else
#define GEMM_SUFFIX "/avx2"
#endif
#include "qgemm_simd.h"

AI __m256i ldu(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
AI __m128i ldu128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

/* Fixed-order horizontal sum: ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)). */
AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 bytes of packed nibbles -> 32 bytes: low nibbles first, then high. */
AI __m256i nib32(const void *p) {
    const __m128i x = ldu128(p);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* Byte j = 0xFF if bit j of bits is set, else 0. */
AI __m256i bits32(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    const __m256i bm = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bm), bm);
}

AI __m256i madd1(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

/* ================= activation packing ================= */

/* 32 floats -> 32 int8 (x * id, round to nearest even), in order. */
AI __m256i quant32(const float *x, __m256 id) {
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id));
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

AI __m256 absmax8(const float *x, int n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < n; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    return m;
}

AI float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* The quantization multiplier 127/amax (0 for an all-zero group); see
 * group_amax in qgemm_scalar.c. */
AI float mult_of(float amax) { return amax != 0.0f ? 127.0f / amax : 0.0f; }

AI int sum_i8x32(__m256i q) {
    /* sum of 32 signed bytes: bias to unsigned, sum with sad, unbias */
    const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
    const __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    return (int)(_mm_cvtsi128_si64(t) + _mm_extract_epi64(t, 1)) - 32 * 128;
}

/* The activation packers exist once, in the plain AVX2 build; the AVX-VNNI
 * build's tables use them from there. */
#if !defined(TK_AVXVNNI) && !defined(TK_QGEMM_KBATCH)
void tk_qkernel_avx2_quant_q8_0(const float *x, void *out, int64_t n) {
    uint8_t *o = out;
    for (int64_t i = 0; i < n / 32; i++, x += 32, o += sizeof(tk_block_q8_0)) {
        const float amax = hmax8(absmax8(x, 32)), d = amax / 127.0f, id = mult_of(amax);
        const uint16_t dh = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        memcpy(o, &dh, 2);
        _mm256_storeu_si256((__m256i *)(o + 2), quant32(x, _mm256_set1_ps(id)));
    }
}

void tk_qkernel_avx2_quant_q8_1(const float *x, void *out, int64_t n) {
    uint8_t *o = out;
    for (int64_t i = 0; i < n / 32; i++, x += 32, o += sizeof(tk_block_q8_1)) {
        const float amax = hmax8(absmax8(x, 32)), d = amax / 127.0f, id = mult_of(amax);
        const __m256i q = quant32(x, _mm256_set1_ps(id));
        const uint16_t dh = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const uint16_t sh = _cvtss_sh(d * (float)sum_i8x32(q), _MM_FROUND_TO_NEAREST_INT);
        memcpy(o, &dh, 2);
        memcpy(o + 2, &sh, 2);
        _mm256_storeu_si256((__m256i *)(o + 4), q);
    }
}

void tk_qkernel_avx2_quant_q8_K(const float *x, void *out, int64_t n) {
    uint8_t *o = out;
    for (int64_t i = 0; i < n / 256; i++, x += 256, o += sizeof(tk_block_q8_K)) {
        const float id = mult_of(hmax8(absmax8(x, 256))), d = id != 0.0f ? 1.0f / id : 0.0f;
        memcpy(o, &d, 4);
        const __m256 idv = _mm256_set1_ps(id);
        int16_t bs[16];
        for (int j = 0; j < 8; j++) {
            const __m256i q = quant32(x + 32 * j, idv);
            _mm256_storeu_si256((__m256i *)(o + 4 + 32 * j), q);
            /* sums of 16: pair sums of bytes, then of the two 8-lane halves */
            const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
            /* s = 8 sums of 4: lanes 0..3 -> first 16 elements (lane 0 of
             * the 128-bit half), 4..7 -> next 16 */
            const __m128i h = _mm_hadd_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            const __m128i h2 = _mm_hadd_epi32(h, h);
            bs[2 * j] = (int16_t)_mm_cvtsi128_si32(h2);
            bs[2 * j + 1] = (int16_t)_mm_extract_epi32(h2, 1);
        }
        memcpy(o + 4 + 256, bs, sizeof bs);
    }
}
#endif

/* ================= legacy 32-blocks: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL ================= */

AI int loffset(int T) { return T == L_Q4_0 ? 8 : T == L_Q5_0 ? 16 : 0; }

#ifdef TK_AVXVNNI
enum { VNNI = 1 };
#else
enum { VNNI = 0 };
#endif

/* The offset the 8-row panel kernels remove per token block, times the sum of
 * its activation quants: loffset's, and with AVX-VNNI 128 for the signed
 * types, whose quants enter vpdpbusd's unsigned operand biased by 128. */
AI int panel_offset(int T) { return VNNI && (T == L_Q8_0 || T == L_IQ4_NL) ? 128 : loffset(T); }

/* Four half floats at p0..p3 (unaligned) -> 4 floats. */
AI __m128 ld4h(bptr p0, bptr p1, bptr p2, bptr p3) {
    uint16_t h0, h1, h2, h3;
    memcpy(&h0, p0, 2);
    memcpy(&h1, p1, 2);
    memcpy(&h2, p2, 2);
    memcpy(&h3, p3, 2);
    const uint64_t v = (uint64_t)h0 | (uint64_t)h1 << 16 | (uint64_t)h2 << 32 | (uint64_t)h3 << 48;
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)v));
}

/* Q8_0 and IQ4_NL (signed 8-bit values, pair sums up to 2 * 128 * 127, so
 * one block per vector).  Per block and (row, token): isum = integer dot
 * with the sign trick, acc += float(isum) * (dw * da) with one fma per lane
 * (the 8 lanes hold partial sums).  The scale products are computed four
 * rows at a time and broadcast from memory, which keeps them off the
 * shuffle and arithmetic ports. */
AI void mk_legacy(const int T, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf,
                  float *out) {
    const int64_t nb = n / 32;
    const size_t wb = lbytes(T), ab = 34;
    __m256 acc[4][4];
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        /* scale products s[j][i] = dw_i * da_j */
        float daf[4], s[4][4];
        const __m128 da4 = ld4h(ap[0] + b * ab, ap[NT > 1] + b * ab, ap[NT > 2 ? 2 : 0] + b * ab, ap[NT > 3 ? 3 : 0] + b * ab);
        const __m128 dw4 = ld4h(wp[0] + b * wb, wp[MR > 1] + b * wb, wp[MR > 2 ? 2 : 0] + b * wb, wp[MR > 3 ? 3 : 0] + b * wb);
        _mm_storeu_ps(daf, da4);
        UNROLL for (int j = 0; j < NT; j++) _mm_storeu_ps(s[j], _mm_mul_ps(dw4, _mm_broadcast_ss(&daf[j])));
        pfetch(MR, wp, b * wb, 1, pf);
        UNROLL for (int i = 0; i < MR; i++) {
            __m256i q;
            if (T == L_Q8_0) {
                q = ldu(wp[i] + b * wb + 2);
            } else {
                const __m256i kv = _mm256_broadcastsi128_si256(ldu128(tk_kvalues_iq4nl));
                q = _mm256_shuffle_epi8(kv, nib32(wp[i] + b * wb + 2));
            }
            const __m256i aq = _mm256_sign_epi8(q, q);
            UNROLL for (int j = 0; j < NT; j++) {
                const __m256i a = ldu(ap[j] + b * ab + 2);
                const __m256i d32 = madd1(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(a, q)));
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d32), _mm256_broadcast_ss(&s[j][i]), acc[i][j]);
            }
        }
    }
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] = hsum8(acc[i][j]);
}

/* Q4_0 Q4_1 Q5_0 Q5_1, two blocks per step.  The unsigned codes of blocks
 * b0, b1 are arranged as lo = [b0 elements 0..15 | b1 0..15] and hi =
 * [b0 16..31 | b1 16..31], the activations likewise; the int16 pair sums
 * of lo and hi are added (at most 2 * 2 * 31 * 127 < 32768), the offset
 * (8 or 16) times the activation pair sums is subtracted, and one madd
 * gives 8 int32 lanes, 4 per block.  Compared with one block per vector this
 * halves the int->float conversions and fmas.  An odd last block is paired
 * with zeros. */
AI void nib2_unpack(int T, bptr p, size_t wb, int has1, __m256i *lo, __m256i *hi) {
    const int qo = T == L_Q4_0 ? 2 : T == L_Q4_1 ? 4 : T == L_Q5_0 ? 6 : 8;
    const __m128i x1 = has1 ? ldu128(p + wb + qo) : _mm_setzero_si128();
    const __m256i y = _mm256_inserti128_si256(_mm256_castsi128_si256(ldu128(p + qo)), x1, 1);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    *lo = _mm256_and_si256(y, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(y, 4), m4);
    if (T == L_Q5_0 || T == L_Q5_1) {
        const int ho = T == L_Q5_0 ? 2 : 4;
        const uint32_t h0 = ld32(p + ho), h1 = has1 ? ld32(p + wb + ho) : 0;
        const __m256i b4 = _mm256_set1_epi8(0x10);
        *lo = _mm256_or_si256(*lo, _mm256_and_si256(bits32((h0 & 0xFFFF) | h1 << 16), b4));
        *hi = _mm256_or_si256(*hi, _mm256_and_si256(bits32(h0 >> 16 | (h1 & 0xFFFF0000u)), b4));
    }
}

/* Two half floats -> lanes 0, 1 (lane 1 = 0 without a second block; 2, 3 = 0). */
AI __m128 h2(bptr d0, bptr d1, int has1) {
    uint16_t h0, h1 = 0;
    memcpy(&h0, d0, 2);
    if (has1) memcpy(&h1, d1, 2);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)h0 | (uint32_t)h1 << 16)));
}

/* Two half-float scales -> [d0 x4 | d1 x4]. */
AI __m256 sc2(bptr d0, bptr d1, int has1) {
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(h2(d0, d1, has1)), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

AI __m256i ins2(bptr p0, bptr p1, int has1) {
    const __m128i x1 = has1 ? ldu128(p1) : _mm_setzero_si128();
    return _mm256_inserti128_si256(_mm256_castsi128_si256(ldu128(p0)), x1, 1);
}

AI void mk_nib2(const int T, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf,
                float *out) {
    const int64_t nb = n / 32;
    const size_t wb = lbytes(T), ab = lmin(T) ? 36 : 34, aq = lmin(T) ? 4 : 2;
    const int off = loffset(T);
    __m256 acc[4][4];
    __m128 macc[4][4]; /* min terms m * s of the _1 types (lanes 0, 1) */
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) {
            acc[i][j] = _mm256_setzero_ps();
            macc[i][j] = _mm_setzero_ps();
        }
    for (int64_t b = 0; b < nb; b += 2) {
        const int has1 = b + 1 < nb;
        __m256i alo[4], ahi[4], c16[4];
        __m256 da[4];
        __m128 sa[4];
        UNROLL for (int j = 0; j < NT; j++) {
            const bptr a0 = ap[j] + b * ab, a1 = a0 + ab;
            alo[j] = ins2(a0 + aq, a1 + aq, has1);
            ahi[j] = ins2(a0 + aq + 16, a1 + aq + 16, has1);
            da[j] = sc2(a0, a1, has1);
            if (off) {
                const __m256i o = _mm256_set1_epi8((char)off);
                c16[j] = _mm256_add_epi16(_mm256_maddubs_epi16(o, alo[j]), _mm256_maddubs_epi16(o, ahi[j]));
            }
            if (lmin(T)) sa[j] = h2(a0 + 2, a1 + 2, has1);
        }
        pfetch(MR, wp, b * wb, 2 * wb, pf);
        UNROLL for (int i = 0; i < MR; i++) {
            const bptr x = wp[i] + b * wb;
            __m256i lo, hi;
            nib2_unpack(T, x, wb, has1, &lo, &hi);
            const __m256 dw = sc2(x, x + wb, has1);
            const __m128 m = lmin(T) ? h2(x + 2, x + wb + 2, has1) : _mm_setzero_ps();
            UNROLL for (int j = 0; j < NT; j++) {
                __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, alo[j]), _mm256_maddubs_epi16(hi, ahi[j]));
                if (off) p = _mm256_sub_epi16(p, c16[j]);
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(madd1(p)), _mm256_mul_ps(dw, da[j]), acc[i][j]);
                if (lmin(T)) macc[i][j] = _mm_fmadd_ps(m, sa[j], macc[i][j]);
            }
        }
    }
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] =
        lmin(T) ? hsum8(acc[i][j]) + hsum4(macc[i][j]) : hsum8(acc[i][j]);
}

/* ================= k-quants (Q8_K activations) ================= */

/* int16 vector with the 16-bit scale at byte offset 2k of v (both lanes). */
AI __m256i bcast16(__m256i v, int k) { return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)(0x0100 + 0x0202 * k))); }

/* Q4_K: d dmin scales[12] qs[128]; Q5_K adds qh[32] before qs. */
AI void mk_q45k(const int Q5, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf, float *out) {
    const int64_t nb = n / 256;
    const size_t wb = Q5 ? 176 : 144, qoff = Q5 ? 48 : 16;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[8][4];
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        float da[4];
        UNROLL for (int j = 0; j < NT; j++) da[j] = ldf(ap[j] + b * QK_A);
        pfetch(MR, wp, b * wb, wb, pf);
        UNROLL for (int i = 0; i < MR; i++) {
            const bptr x = wp[i] + b * wb;
            const float d = ldh(x), dmin = ldh(x + 2);
            uint64_t sc64, mn64;
            tk_qkernel_k4_scales64(x + 4, &sc64, &mn64);
            const __m128i smv = _mm_set_epi64x((long long)mn64, (long long)sc64);
            const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(smv));
            const __m128i m8 = _mm_srli_si128(smv, 8);
            const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
            __m256i isum[4];
            UNROLL for (int j = 0; j < NT; j++) isum[j] = _mm256_setzero_si256();
            __m256i qh = Q5 ? ldu(x + 16) : _mm256_setzero_si256();
            UNROLL for (int c = 0; c < 4; c++) {
                const __m256i q = ldu(x + qoff + 32 * c);
                __m256i lo = _mm256_and_si256(q, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (Q5) {
                    const __m256i b4 = _mm256_set1_epi8(0x10);
                    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), b4));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), b4));
                    qh = _mm256_srli_epi16(qh, 2);
                }
                const __m256i slo = bcast16(sc, 2 * c), shi = bcast16(sc, 2 * c + 1);
                UNROLL for (int j = 0; j < NT; j++) {
                    const bptr a = ap[j] + b * QK_A + 4 + 64 * c;
                    const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ldu(a)), slo);
                    const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ldu(a + 32)), shi);
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(p0, p1));
                }
            }
            UNROLL for (int j = 0; j < NT; j++) {
                const __m256i ms = _mm256_madd_epi16(mins, ldu(ap[j] + b * QK_A + 260));
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_set1_ps(d * da[j]), acc[i][j]);
                acc[i][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(dmin * da[j]), acc[i][j]);
            }
        }
    }
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] = hsum8(acc[i][j]);
}

/* Scale vector for the 32 elements of sub-blocks k, k+1 (16 each): int16,
 * low lane sc[k], high lane sc[k+1]; sc8 holds 16 signed bytes. */
AI __m256i pair_scales(__m128i sc8, int k) {
    const __m128i idx = _mm_setr_epi8(k, k, k, k, k, k, k, k, k + 1, k + 1, k + 1, k + 1, k + 1, k + 1, k + 1, k + 1);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, idx));
}

/* Q6_K block x, half h: codes (value + 32) of elements 128h + 32g + l, l < 32, in q[g]. */
AI void q6k_unpack(bptr x, int h, __m256i q[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i l0 = ldu(x + 64 * h), l1 = ldu(x + 64 * h + 32), qh = ldu(x + 128 + 32 * h);
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
}

/* One Q6_K row's integer sum for super-block x against activations a:
 * sum_s sc_s * dot_s with the +32 of the codes removed, 8 int32 partial sums. */
AI __m256i q6k_row(bptr x, bptr a) {
    const __m128i sc8 = ldu128(x + 192);
    __m256i s = _mm256_setzero_si256();
    UNROLL for (int h = 0; h < 2; h++) {
        __m256i q[4];
        q6k_unpack(x, h, q);
        UNROLL for (int g = 0; g < 4; g++) {
            const __m256i p = _mm256_maddubs_epi16(q[g], ldu(a + 4 + 128 * h + 32 * g));
            s = _mm256_add_epi32(s, _mm256_madd_epi16(p, pair_scales(sc8, 8 * h + 2 * g)));
        }
    }
    return _mm256_sub_epi32(s, _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), ldu(a + 260)), 5));
}

/* The 16-element sub-block family: Q2_K, Q3_K, Q6_K.  Element 128h + 32g + l
 * of a super-block is quant group g of half h; it belongs to sub-block
 * 8h + 2g + l/16. */
enum { K_Q2, K_Q3, K_Q6 };

AI void mk_k16(const int T, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf, float *out) {
    const int64_t nb = n / 256;
    const size_t wb = T == K_Q2 ? 84 : T == K_Q3 ? 110 : 210;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc[8][4];
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        float da[4];
        UNROLL for (int j = 0; j < NT; j++) da[j] = ldf(ap[j] + b * QK_A);
        pfetch(MR, wp, b * wb, wb, pf);
        UNROLL for (int i = 0; i < MR; i++) {
            const bptr x = wp[i] + b * wb;
            float d, dmin = 0.0f;
            __m128i sc8;
            __m256i mins = _mm256_setzero_si256(); /* Q2_K: 16 int16 mins */
            if (T == K_Q2) {
                const __m128i s = ldu128(x);
                sc8 = _mm_and_si128(s, _mm_set1_epi8(0x0F));
                mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0F)));
                d = ldh(x + 80);
                dmin = ldh(x + 82);
            } else if (T == K_Q3) {
                uint64_t lo8, hi8;
                tk_qkernel_k3_scales64(x + 96, &lo8, &hi8);
                sc8 = _mm_sub_epi8(_mm_set_epi64x((long long)hi8, (long long)lo8), _mm_set1_epi8(32));
                d = ldh(x + 108);
            } else {
                sc8 = ldu128(x + 192);
                d = ldh(x + 208);
            }
            __m256i isum[4];
            UNROLL for (int j = 0; j < NT; j++) isum[j] = _mm256_setzero_si256();
            const __m256i hm = T == K_Q3 ? ldu(x) : _mm256_setzero_si256();
            UNROLL for (int h = 0; h < 2; h++) {
                __m256i q[4];
                if (T == K_Q6) {
                    q6k_unpack(x, h, q);
                } else {
                    const __m256i qv = ldu(x + (T == K_Q2 ? 16 : 32) + 32 * h);
                    q[0] = _mm256_and_si256(qv, m3);
                    q[1] = _mm256_and_si256(_mm256_srli_epi16(qv, 2), m3);
                    q[2] = _mm256_and_si256(_mm256_srli_epi16(qv, 4), m3);
                    q[3] = _mm256_and_si256(_mm256_srli_epi16(qv, 6), m3);
                    if (T == K_Q3) { /* + 4 where the hmask bit 4h+g is set: bit -> bit 2 */
                        const __m256i b2 = _mm256_set1_epi8(4);
                        UNROLL for (int g = 0; g < 4; g++) {
                            const int s = 4 * h + g;
                            const __m256i hb = s >= 2 ? _mm256_srli_epi16(hm, s - 2) : _mm256_slli_epi16(hm, 2 - s);
                            q[g] = _mm256_or_si256(q[g], _mm256_and_si256(hb, b2));
                        }
                    }
                }
                UNROLL for (int g = 0; g < 4; g++) {
                    const __m256i sv = pair_scales(sc8, 8 * h + 2 * g);
                    UNROLL for (int j = 0; j < NT; j++) {
                        const __m256i a = ldu(ap[j] + b * QK_A + 4 + 128 * h + 32 * g);
                        isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], a), sv));
                    }
                }
            }
            const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
            UNROLL for (int j = 0; j < NT; j++) {
                const __m256i bsums = ldu(ap[j] + b * QK_A + 260);
                if (T == K_Q6) /* quants were stored + 32 */
                    isum[j] = _mm256_sub_epi32(isum[j], _mm256_slli_epi32(_mm256_madd_epi16(sc16, bsums), 5));
                if (T == K_Q3) /* quants were stored + 4 */
                    isum[j] = _mm256_sub_epi32(isum[j], _mm256_slli_epi32(_mm256_madd_epi16(sc16, bsums), 2));
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_set1_ps(d * da[j]), acc[i][j]);
                if (T == K_Q2)
                    acc[i][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mins, bsums)),
                                                 _mm256_set1_ps(dmin * da[j]), acc[i][j]);
            }
        }
    }
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] = hsum8(acc[i][j]);
}

/* IQ4_XS: d scales_h scales_l[4] qs[128]; 8 sub-blocks of 32. */
AI void mk_iq4xs(const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf, float *out) {
    const int64_t nb = n / 256;
    const __m256i kv = _mm256_broadcastsi128_si256(ldu128(tk_kvalues_iq4nl));
    __m256 acc[8][4];
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        float da[4];
        UNROLL for (int j = 0; j < NT; j++) da[j] = ldf(ap[j] + b * QK_A);
        pfetch(MR, wp, b * 136, 136, pf);
        UNROLL for (int i = 0; i < MR; i++) {
            const bptr x = wp[i] + b * 136;
            const __m256i scv = _mm256_broadcastsi128_si256(_mm_sub_epi16(
                _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)tk_qkernel_iq4xs_scales64(x + 2, x + 4))), _mm_set1_epi16(32)));
            __m256i isum[4];
            UNROLL for (int j = 0; j < NT; j++) isum[j] = _mm256_setzero_si256();
            UNROLL for (int s = 0; s < 8; s++) {
                const __m256i q = _mm256_shuffle_epi8(kv, nib32(x + 8 + 16 * s));
                const __m256i aq = _mm256_sign_epi8(q, q);
                const __m256i sv = bcast16(scv, s);
                UNROLL for (int j = 0; j < NT; j++) {
                    const __m256i a = ldu(ap[j] + b * QK_A + 4 + 32 * s);
                    const __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(a, q));
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p, sv));
                }
            }
            const float d = ldh(x);
            UNROLL for (int j = 0; j < NT; j++)
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_set1_ps(d * da[j]), acc[i][j]);
        }
    }
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] = hsum8(acc[i][j]);
}

/* ================= float weights: F32 F16 BF16 ================= */

enum { F_F32, F_F16, F_BF16 };

AI __m256 fload(int T, bptr p) {
    if (T == F_F32) return _mm256_loadu_ps((const float *)p);
    if (T == F_F16) return _mm256_cvtph_ps(ldu128(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ldu128(p)), 16));
}

AI void mk_float(const int T, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf, float *out) {
    const size_t es = T == F_F32 ? 4 : 2;
    __m256 acc[8][4];
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        if ((k * (int64_t)es) % 64 == 0) pfetch(MR, wp, (int64_t)es * k, 1, pf);
        __m256 a[4];
        UNROLL for (int j = 0; j < NT; j++) a[j] = _mm256_loadu_ps((const float *)(ap[j] + 4 * k));
        UNROLL for (int i = 0; i < MR; i++) {
            const __m256 wv = fload(T, wp[i] + es * k);
            UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm256_fmadd_ps(wv, a[j], acc[i][j]);
        }
    }
    if (k < n) { /* tail: zero-padded copies, same lane assignment */
        const int rem = (int)(n - k);
        __m256 a[4];
        UNROLL for (int j = 0; j < NT; j++) {
            float buf[8] = {0};
            memcpy(buf, ap[j] + 4 * k, 4 * (size_t)rem);
            a[j] = _mm256_loadu_ps(buf);
        }
        UNROLL for (int i = 0; i < MR; i++) {
            uint8_t buf[32] = {0};
            memcpy(buf, wp[i] + es * k, es * (size_t)rem);
            const __m256 wv = fload(T, buf);
            UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm256_fmadd_ps(wv, a[j], acc[i][j]);
        }
    }
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] = hsum8(acc[i][j]);
}

/* ================= NF4 / NF4_DQ (definition: nf4_dot.h) ================= */

/* Per 32-element chunk, the int16 levels of the codes are looked up with two
 * pshufb (the low and the high bytes of TK_NF4_LEVELS_I16) and interleaved
 * with unpacklo/hi_epi8 into two int16 vectors (elements 0-7|16-23 and
 * 8-15|24-31); the activation bytes are sign-extended by the same unpacks,
 * once per token and shared by the MR rows.  Two pmaddwd give exact int32
 * lane sums (|L| <= 2^14, |q| <= 127).  Per block and (row, token) the
 * chunks' float lanes are scaled by their d and summed, and one fma adds
 * that times the row's absmax; the sum is scaled by 2^-14 at the end.  The weights of a block are unpacked
 * once per NT tokens. */

AI void nf4_lookup(__m256i codes, __m256i tlo, __m256i thi, __m256i *w0, __m256i *w1) {
    const __m256i lo = _mm256_shuffle_epi8(tlo, codes), hi = _mm256_shuffle_epi8(thi, codes);
    *w0 = _mm256_unpacklo_epi8(lo, hi);
    *w1 = _mm256_unpackhi_epi8(lo, hi);
}

/* One absmax block b (TAIL: the 32-element last block). */
AI void nf4_block(const int DQ, const int TAIL, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t nb,
                  int64_t ng, int64_t b, const float *amb, size_t pf, __m256i tlo, __m256i thi, __m256 acc[4][4]) {
    const int nh = TAIL ? 1 : 2; /* chunks in the block */
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    bptr cp[4];
    __m256 am[4];
    UNROLL for (int i = 0; i < MR; i++) {
        am[i] = amb ? _mm256_set1_ps(amb[16 * i]) : _mm256_set1_ps(nf4_absmax(DQ, wp[i], nb, ng, b, &cp[i]));
        if (amb) cp[i] = wp[i] + 8 * ng + nb + 32 * b;
    }
    if (DQ) {
        pfetch(MR, cp, 0, 1, pf);
        if (b % 64 == 0) pfetch(MR, wp, 8 * ng + b, 1, pf);
    } else {
        pfetch(MR, wp, 36 * b, 1, pf);
    }
    /* f[i][j]: the block's two chunks scaled by their d and summed */
    __m256 f[4][4];
    UNROLL for (int h = 0; h < nh; h++) {
        __m256i a0[4], a1[4];
        __m256 d[4];
        UNROLL for (int j = 0; j < NT; j++) {
            const bptr blk = ap[j] + (2 * b + h) * 34;
            const __m256i q = ldu(blk + 2), sg = _mm256_cmpgt_epi8(_mm256_setzero_si256(), q);
            a0[j] = _mm256_unpacklo_epi8(q, sg);
            a1[j] = _mm256_unpackhi_epi8(q, sg);
            d[j] = _mm256_set1_ps(ldh(blk));
        }
        UNROLL for (int i = 0; i < MR; i++) {
            __m256i codes;
            if (TAIL) codes = nib32(cp[i]);
            else codes = _mm256_and_si256(h ? _mm256_srli_epi16(ldu(cp[i]), 4) : ldu(cp[i]), m4);
            __m256i w0, w1;
            nf4_lookup(codes, tlo, thi, &w0, &w1);
            UNROLL for (int j = 0; j < NT; j++) {
                const __m256 p = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(w0, a0[j]), _mm256_madd_epi16(w1, a1[j])));
                f[i][j] = h ? _mm256_fmadd_ps(p, d[j], f[i][j]) : _mm256_mul_ps(p, d[j]);
            }
        }
    }
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm256_fmadd_ps(f[i][j], am[i], acc[i][j]);
}

AI void mk_nf4(const int DQ, const int MR, const int NT, const bptr *wp, const bptr *ap, int64_t n, size_t pf,
               float *out) {
    const int64_t nb = (n + TK_NF4_BLOCK - 1) / TK_NF4_BLOCK, nbf = n / TK_NF4_BLOCK;
    const int64_t ng = (nb + TK_NF4_DQ_GROUP - 1) / TK_NF4_DQ_GROUP;
    static const int16_t lv[16] = TK_NF4_LEVELS_I16;
    int8_t tl[16], th[16];
    for (int k = 0; k < 16; k++) {
        tl[k] = (int8_t)(lv[k] & 0xFF);
        th[k] = (int8_t)(lv[k] >> 8);
    }
    const __m256i tlo = _mm256_broadcastsi128_si256(ldu128(tl)), thi = _mm256_broadcastsi128_si256(ldu128(th));
    __m256 acc[4][4];
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm256_setzero_ps();
    if (!DQ) {
        for (int64_t b = 0; b < nbf; b++) nf4_block(0, 0, MR, NT, wp, ap, nb, ng, b, NULL, pf, tlo, thi, acc);
    } else {
        /* NF4_DQ: the absmax of 16 blocks at a time (u8 * scale + min, one
         * group: 256 is a multiple of 16; the 16 u8 read stay inside the
         * row, whose codes follow) */
        for (int64_t b0 = 0; b0 < nbf; b0 += 16) {
            float amb[4][16];
            UNROLL for (int i = 0; i < MR; i++) {
                const bptr g = wp[i] + 8 * (b0 / TK_NF4_DQ_GROUP), qa = wp[i] + 8 * ng + b0;
                const __m256 gs = _mm256_set1_ps(ldf(g)), gm = _mm256_set1_ps(ldf(g + 4));
                UNROLL for (int k = 0; k < 2; k++) {
                    const __m256 u = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qa + 8 * k))));
                    _mm256_storeu_ps(&amb[i][8 * k], _mm256_add_ps(_mm256_mul_ps(u, gs), gm));
                }
            }
            const int64_t b1 = b0 + 16 < nbf ? b0 + 16 : nbf;
            for (int64_t b = b0; b < b1; b++) nf4_block(1, 0, MR, NT, wp, ap, nb, ng, b, &amb[0][b - b0], pf, tlo, thi, acc);
        }
    }
    if (nbf < nb) nf4_block(DQ, 1, MR, NT, wp, ap, nb, ng, nbf, NULL, pf, tlo, thi, acc);
    UNROLL for (int i = 0; i < MR; i++) UNROLL for (int j = 0; j < NT; j++) out[i * NT_MAX + j] = hsum8(acc[i][j]) * 0x1p-14f;
}

/* ================= the 32-element block types in 8-row panels ================= */

/* These put rows in lanes instead of tiling them: for each block, the quants
 * of 8 rows are transposed in registers so that 32-bit lane i of vector k
 * holds bytes 4k..4k+3 of row i, and 4 bytes of a token's activations are
 * broadcast against them: one maddubs does 4 elements of 8 rows, and the
 * weights of a block are unpacked once for up to NT_P tokens.
 *   Q4_0: lane i of vector k has elements 4k..4k+3 of row i in the low
 *   nibbles, 16+4k.. in the high ones; the eight maddubs of the unsigned
 *   codes add up in int16 (at most 16 * 15 * 127 < 32768), one madd sums
 *   the pairs, and 8 * (sum of the activation quants) removes the offset.
 *   Q8_0: 8 vectors of signed quants, the sign trick maddubs(|w|, sign(a, w))
 *   (pair sums up to 2 * 128 * 127, so each is widened by its own madd).
 *   Q4_1: Q4_0's codes without offset (Q8_1 activations); the min term
 *   adds fma(m, s, acc) per block, m the rows' min, s the token block's
 *   stored d * sum.
 *   Q5_0: Q4_0's codes plus the 5th bit from qh (bit j for element j,
 *   gathered per row); codes 0..31, so the four maddubs of the low
 *   nibbles add up in int16 (at most 8 * 31 * 127 < 32768), those of the
 *   high ones likewise, each half gets its madd, offset 16.  Q5_1: the
 *   same codes, no offset, the min term as Q4_1's.
 *   IQ4_NL: the codes as Q4_0's, looked up (pshufb) into their signed values
 *   (-127..113), then as Q8_0 (pair sums up to 2 * 127 * 127).
 * Each gives the exact integer dot of the block, isum.  Each lane then
 * does acc = fma(isum, dw * da, acc) block after block, so a (row, token)
 * result never depends on the tile, the split or the batch, and no
 * horizontal sum is needed.  The scale and quant sum of each token's blocks
 * are computed once per token chunk. */
#ifndef NT_P
#define NT_P 32 /* tokens per pass, bench_qgemm on Q4_0: 4: 180, 8: 215, 16: 240, 32: 255 GF/s (64: +1 %) */
#endif
enum { PANEL = 8, TOKDATA_MAX = 4096 };

typedef struct tokblk {
    float d; /* activation block scale */
    union {
        int32_t off; /* Q4_0 / Q5_0: 8 / 16 * sum of its quants */
        float s;     /* Q4_1 / Q5_1 (Q8_1 activations): the block's stored d * sum */
    };
} tokblk;

/* 8 rows' f16 block scales at byte offset o -> 8 floats, lane i = row i.
 * Pairs of halves joined in 32 bits, then 64: the compiler keeps this in
 * integer registers (two vmovq), where four-at-a-time shift-or chains were
 * turned into vector shifts and ors on the ports the block's unpacking
 * needs (one-token Q4_0 29 -> 33 GB/s per core, docs/kernels.md). */
AI uint64_t halves4(const bptr *w, size_t o) {
    return (uint64_t)(ld16(w[0] + o) | ld16(w[1] + o) << 16) | (uint64_t)(ld16(w[2] + o) | ld16(w[3] + o) << 16) << 32;
}

/* PL (all the functions below): wp[0] is a panel of the panel layout
 * (kernels/panels.h), the other wp[i] unused; else wp[i] is row i. */
AI __m256 panel_scales(const int PL, const bptr *wp, size_t o) {
    if (PL) return _mm256_cvtph_ps(ldu128(wp[0] + PANEL * o));
    return _mm256_cvtph_ps(_mm_insert_epi64(_mm_cvtsi64_si128((long long)halves4(wp, o)), (long long)halves4(wp + 4, o), 1));
}

/* 16 bytes at byte offset o of 8 rows -> v[k] with dword k of row i in lane i. */
AI void panel_transpose(const int PL, const bptr *wp, size_t o, __m256i v[4]) {
    if (PL) {
        UNROLL for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_si256((const __m256i *)(wp[0] + PANEL * o + 32 * k));
        return;
    }
    __m256i r[4];
    UNROLL for (int i = 0; i < 4; i++) r[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(ldu128(wp[i] + o)), ldu128(wp[i + 4] + o), 1);
    const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    v[0] = _mm256_unpacklo_epi64(t0, t2);
    v[1] = _mm256_unpackhi_epi64(t0, t2);
    v[2] = _mm256_unpacklo_epi64(t1, t3);
    v[3] = _mm256_unpackhi_epi64(t1, t3);
}

AI __m256i bcast32(bptr p) { return _mm256_set1_epi32((int)ld32(p)); }

/* The int16 sum of K maddubs: q[0..K) against the activation bytes a, a+4, ... */
AI __m256i dotk(const int K, const __m256i *q, bptr a) {
    __m256i s = _mm256_maddubs_epi16(q[0], bcast32(a));
    UNROLL for (int k = 1; k < K; k++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(q[k], bcast32(a + 4 * k)));
    return s;
}

/* The int32 sum of the products of unsigned bytes q[0..K) with the
 * activation bytes a, a+4, ...: maddubs into int16 (K <= 8 and codes <= 15,
 * or K <= 4 and codes <= 31, keep those sums exact), one madd to int32.
 * AVX-VNNI: vpdpbusd adds each lane's four products straight into int32,
 * one multiply per 32 products where maddubs + madd take two, no int16 step
 * (so any byte values, e.g. the signed types' quants + 128); the sums are
 * exact either way, so both builds give the same integers (test_qgemm
 * compares them bit for bit).  Two chains (even and odd k) halve the
 * dependency on vpdpbusd's latency. */
AI __m256i idotk(const int K, const __m256i *q, bptr a) {
#ifdef TK_AVXVNNI
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    UNROLL for (int k = 0; k < K; k++) {
        if (k & 1) s1 = _mm256_dpbusd_avx_epi32(s1, q[k], bcast32(a + 4 * k));
        else s0 = _mm256_dpbusd_avx_epi32(s0, q[k], bcast32(a + 4 * k));
    }
    return _mm256_add_epi32(s0, s1);
#else
    return madd1(dotk(K, q, a));
#endif
}

/* The int32 sum of K sign-trick products: quants q[0..K) (u = |q|) against the activation bytes a, a+4, ... */
AI __m256i sdotk(const int K, const __m256i *u, const __m256i *q, bptr a) {
    __m256i s = madd1(_mm256_maddubs_epi16(u[0], _mm256_sign_epi8(bcast32(a), q[0])));
    UNROLL for (int k = 1; k < K; k++) s = _mm256_add_epi32(s, madd1(_mm256_maddubs_epi16(u[k], _mm256_sign_epi8(bcast32(a + 4 * k), q[k]))));
    return s;
}

/* Q5_0's 5th bits: byte b of lane i = 0x10 if bit s + b of qh lane i is set
 * (the 4 bits spread to bit 4 of bytes 0..3 by one multiply: the shifted
 * copies 7m + 4 apart never overlap, so nothing carries). */
AI __m256i q5_bits(__m256i qh, int s) {
    const __m256i x = _mm256_and_si256(_mm256_srli_epi32(qh, s), _mm256_set1_epi32(0xF));
    return _mm256_and_si256(_mm256_mullo_epi32(x, _mm256_set1_epi32(0x02040810)), _mm256_set1_epi8(0x10));
}

/* Q8_0 and IQ4_NL (signed quants, the sign trick) of one block, half a block
 * (16 elements) at a time: the 4 quant vectors of a half and their absolute
 * values fit in registers beside the token loop's temporaries, where the 8 +
 * 8 of a whole block were spilled and reloaded for every token.  part[j]
 * keeps token j's int32 sum of the first half; the sum is exact, so the
 * halves give the same isum and the same bits. */
AI void signed_block(const int T, const int PL, int nt, const bptr *wp, size_t o, bptr a, size_t arb, const tokblk *tk, __m256 *acc) {
    const __m256 dw = panel_scales(PL, wp, o);
    __m256i part[NT_P];
    for (int h = 0; h < 2; h++) {
        __m256i q[4], u[4];
        if (T == L_IQ4_NL) { /* low nibbles = elements 0..15, high = 16..31 */
            const __m256i kv = _mm256_broadcastsi128_si256(ldu128(tk_kvalues_iq4nl)), m4 = _mm256_set1_epi8(0x0F);
            panel_transpose(PL, wp, o + 2, q);
            UNROLL for (int k = 0; k < 4; k++)
                q[k] = _mm256_shuffle_epi8(kv, _mm256_and_si256(h ? _mm256_srli_epi16(q[k], 4) : q[k], m4));
        } else {
            panel_transpose(PL, wp, o + 2 + 16 * (size_t)h, q);
        }
        UNROLL for (int k = 0; k < 4; k++) u[k] = _mm256_sign_epi8(q[k], q[k]);
        for (int j = 0; j < nt; j++) {
            const __m256i s = sdotk(4, u, q, a + arb * (size_t)j + 16 * (size_t)h);
            if (h == 0) part[j] = s;
            else acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(part[j], s)),
                                          _mm256_mul_ps(dw, _mm256_set1_ps(tk[j].d)), acc[j]);
        }
    }
}

/* Rows wp[0..8) of type T (an L_ type), tokens j = 0..nt at a + j * arb,
 * their data of block b at tb[b * tbs + j]; acc[j] lane i = row i.  The
 * accumulators live in memory (L1): the unpacked weight vectors take the
 * registers. */
AI void mk_panel(const int T, const int PL, int nt, const bptr *wp, bptr a, size_t arb, const tokblk *tb, size_t tbs, int64_t nb,
                 size_t pf, __m256 *acc) {
    const size_t wb = lbytes(T), ab = lmin(T) ? 36 : 34, aq = lmin(T) ? 4 : 2;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < nt; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = wb * (size_t)b;
        const bptr ablk = a + ab * (size_t)b + aq;
        const tokblk *tk = tb + tbs * (size_t)b;
        if (pf && PL)
            for (size_t k = 0; k < PANEL * wb; k += 64) tk_prefetch_weights(wp[0] + pf + PANEL * o + k);
        else if (pf && (T == L_Q8_0 || !(b & 1))) /* every 36 bytes or less: each line of the next panel */
            UNROLL for (int i = 0; i < PANEL; i++) tk_prefetch_weights(wp[i] + o + pf);
        if ((T == L_Q8_0 || T == L_IQ4_NL) && nt > 1 && !VNNI) {
            signed_block(T, PL, nt, wp, o, ablk, arb, tk, acc);
            continue;
        }
        /* Q4_0 / Q5_0: q = codes, low nibbles then high; Q8_0 / IQ4_NL (one
         * token: nothing to spill): q = quants, u = |q|; with AVX-VNNI q =
         * quants + 128 (unsigned), the bias removed with the offset */
        __m256i q[8], u[8];
        if (T == L_Q4_0 || T == L_Q4_1) {
            __m256i v[4];
            panel_transpose(PL, wp, o + (T == L_Q4_1 ? 4 : 2), v);
            UNROLL for (int k = 0; k < 4; k++) {
                q[k] = _mm256_and_si256(v[k], m4);
                q[k + 4] = _mm256_and_si256(_mm256_srli_epi16(v[k], 4), m4);
            }
        } else if (T == L_Q5_0 || T == L_Q5_1) {
            const size_t ho = o + (T == L_Q5_1 ? 4 : 2); /* qh, then qs */
            __m256i v[4];
            panel_transpose(PL, wp, ho + 4, v);
            const __m256i qh = PL ? _mm256_loadu_si256((const __m256i *)(wp[0] + PANEL * ho))
                                  : _mm256_setr_epi32((int)ld32(wp[0] + ho), (int)ld32(wp[1] + ho), (int)ld32(wp[2] + ho),
                                                      (int)ld32(wp[3] + ho), (int)ld32(wp[4] + ho), (int)ld32(wp[5] + ho),
                                                      (int)ld32(wp[6] + ho), (int)ld32(wp[7] + ho));
            UNROLL for (int k = 0; k < 4; k++) {
                q[k] = _mm256_or_si256(_mm256_and_si256(v[k], m4), q5_bits(qh, 4 * k));
                q[k + 4] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v[k], 4), m4), q5_bits(qh, 16 + 4 * k));
            }
        } else if (T == L_IQ4_NL) {
            __m256i kv = _mm256_broadcastsi128_si256(ldu128(tk_kvalues_iq4nl));
            if (VNNI) kv = _mm256_xor_si256(kv, _mm256_set1_epi8((char)0x80));
            __m256i v[4];
            panel_transpose(PL, wp, o + 2, v);
            UNROLL for (int k = 0; k < 4; k++) {
                q[k] = _mm256_shuffle_epi8(kv, _mm256_and_si256(v[k], m4));
                q[k + 4] = _mm256_shuffle_epi8(kv, _mm256_and_si256(_mm256_srli_epi16(v[k], 4), m4));
            }
        } else {
            panel_transpose(PL, wp, o + 2, q);
            panel_transpose(PL, wp, o + 18, q + 4);
            if (VNNI) UNROLL for (int k = 0; k < 8; k++) q[k] = _mm256_xor_si256(q[k], _mm256_set1_epi8((char)0x80));
        }
        if ((T == L_Q8_0 || T == L_IQ4_NL) && !VNNI) UNROLL for (int k = 0; k < 8; k++) u[k] = _mm256_sign_epi8(q[k], q[k]);
        const __m256 dw = panel_scales(PL, wp, o), mw = lmin(T) ? panel_scales(PL, wp, o + 2) : _mm256_setzero_ps();
        for (int j = 0; j < nt; j++) {
            const bptr aj = ablk + arb * (size_t)j;
            __m256i isum;
            if (T == L_Q4_0 || T == L_Q4_1) {
                isum = idotk(8, q, aj);
                if (T == L_Q4_0) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(tk[j].off));
            } else if (T == L_Q5_0 || T == L_Q5_1) {
#ifdef TK_AVXVNNI
                isum = idotk(8, q, aj); /* no int16 bound: one pass over the 8 vectors */
#else
                isum = _mm256_add_epi32(idotk(4, q, aj), idotk(4, q + 4, aj + 16));
#endif
                if (T == L_Q5_0) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(tk[j].off));
            } else if (VNNI) { /* sum (q + 128) a = sum q a + 128 sum a */
                isum = _mm256_sub_epi32(idotk(8, q, aj), _mm256_set1_epi32(tk[j].off));
            } else {
                isum = sdotk(8, u, q, aj);
            }
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(tk[j].d)), acc[j]);
            if (lmin(T)) acc[j] = _mm256_fmadd_ps(mw, _mm256_set1_ps(tk[j].s), acc[j]);
        }
    }
}

/* 16 bytes at byte offset o of panels wp[0] and wp[1], as panel_transpose,
 * reduced to their low (HI 0) or high (HI 1) nibbles. */
AI void pair_nibbles(const bptr *wp, size_t o, const int HI, __m256i q0[4], __m256i q1[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    panel_transpose(1, wp, o, q0);
    panel_transpose(1, wp + 1, o, q1);
    UNROLL for (int k = 0; k < 4; k++) {
        q0[k] = _mm256_and_si256(HI ? _mm256_srli_epi16(q0[k], 4) : q0[k], m4);
        q1[k] = _mm256_and_si256(HI ? _mm256_srli_epi16(q1[k], 4) : q1[k], m4);
    }
}

/* dotk(4, q0, a) and dotk(4, q1, a), each broadcast of a serving both. */
AI void pair_dotk4(const __m256i *q0, const __m256i *q1, bptr a, __m256i *s0, __m256i *s1) {
    __m256i x = bcast32(a);
    *s0 = _mm256_maddubs_epi16(q0[0], x);
    *s1 = _mm256_maddubs_epi16(q1[0], x);
    UNROLL for (int k = 1; k < 4; k++) {
        x = bcast32(a + 4 * k);
        *s0 = _mm256_add_epi16(*s0, _mm256_maddubs_epi16(q0[k], x));
        *s1 = _mm256_add_epi16(*s1, _mm256_maddubs_epi16(q1[k], x));
    }
}

/* Q4_0 (and Q8_0 with AVX-VNNI), two panels (16 rows) at a time, for
 * passes of more than 4 tokens.  One panel's token loop issues 8 activation
 * broadcasts per 8 rows x 32 elements, besides the scale, offset and
 * accumulator loads: 11 loads to 11 multiplies, at the two load ports'
 * limit.  Here each broadcast feeds both panels.  The 16 rows' codes of a
 * whole block would take all 16 registers, so a block goes in halves (Q4_0:
 * low nibbles = elements 0..15, then high; Q8_0: bytes 0..15, then 16..31):
 * part[] keeps each token's sums of the first half (plain AVX2: int16, 4
 * maddubs each, 8 in all under 16 * 15 * 127 < 32768 as in dotk; AVX-VNNI:
 * the int32 vpdpbusd sums), the second half adds its own and finishes as
 * mk_panel does.  The integers are exact and each lane's float steps the
 * same: the same bits. */
AI void pair_half(const int T, const int H, int nt, const bptr *wp, size_t o, bptr ablk, size_t arb, const tokblk *tk,
                  const __m256 *dw, __m256i *part, __m256 *acc0, __m256 *acc1) {
    __m256i q0[4], q1[4];
    if (T == L_Q4_0) {
        pair_nibbles(wp, o + 2, H, q0, q1);
    } else { /* Q8_0 + 128 (AVX-VNNI only; the bias goes with the offset) */
        panel_transpose(1, wp, o + 2 + 16 * H, q0);
        panel_transpose(1, wp + 1, o + 2 + 16 * H, q1);
        UNROLL for (int k = 0; k < 4; k++) {
            q0[k] = _mm256_xor_si256(q0[k], _mm256_set1_epi8((char)0x80));
            q1[k] = _mm256_xor_si256(q1[k], _mm256_set1_epi8((char)0x80));
        }
    }
    for (int j = 0; j < nt; j++) {
        const bptr aj = ablk + arb * (size_t)j + 16 * H;
#ifdef TK_AVXVNNI
        __m256i x = bcast32(aj);
        __m256i s0 = _mm256_dpbusd_avx_epi32(H ? part[2 * j] : _mm256_setzero_si256(), q0[0], x);
        __m256i s1 = _mm256_dpbusd_avx_epi32(H ? part[2 * j + 1] : _mm256_setzero_si256(), q1[0], x);
        UNROLL for (int k = 1; k < 4; k++) {
            x = bcast32(aj + 4 * k);
            s0 = _mm256_dpbusd_avx_epi32(s0, q0[k], x);
            s1 = _mm256_dpbusd_avx_epi32(s1, q1[k], x);
        }
#else
        __m256i s0, s1;
        pair_dotk4(q0, q1, aj, &s0, &s1);
        if (H) {
            s0 = madd1(_mm256_add_epi16(s0, part[2 * j]));
            s1 = madd1(_mm256_add_epi16(s1, part[2 * j + 1]));
        }
#endif
        if (H == 0) {
            part[2 * j] = s0;
            part[2 * j + 1] = s1;
        } else {
            const __m256i off = _mm256_set1_epi32(tk[j].off);
            const __m256 d = _mm256_set1_ps(tk[j].d);
            acc0[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s0, off)), _mm256_mul_ps(dw[0], d), acc0[j]);
            acc1[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s1, off)), _mm256_mul_ps(dw[1], d), acc1[j]);
        }
    }
}

/* mk_panel for panels wp[0] and wp[1] of the panel layout (acc0, acc1), nt
 * > 4 tokens.  The halves are separate calls with H a constant: one loop
 * testing H kept two code vectors on the stack. */
AI void panel_pair(const int T, int nt, const bptr *wp, bptr a, size_t arb, const tokblk *tb, size_t tbs, int64_t nb, size_t pf,
                   __m256 *acc0, __m256 *acc1) {
    const size_t wb = lbytes(T);
    __m256i part[2 * NT_P];
    for (int j = 0; j < nt; j++) acc0[j] = acc1[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = wb * (size_t)b;
        const bptr ablk = a + 34 * (size_t)b + 2;
        const tokblk *tk = tb + tbs * (size_t)b;
        if (pf)
            for (size_t k = 0; k < PANEL * wb; k += 64) {
                tk_prefetch_weights(wp[0] + pf + PANEL * o + k);
                tk_prefetch_weights(wp[1] + pf + PANEL * o + k);
            }
        const __m256 dw[2] = {panel_scales(1, wp, o), panel_scales(1, wp + 1, o)};
        pair_half(T, 0, nt, wp, o, ablk, arb, tk, dw, part, acc0, acc1);
        pair_half(T, 1, nt, wp, o, ablk, arb, tk, dw, part, acc0, acc1);
    }
}

/* ================= Q4_K Q5_K Q6_K in 8-row panels ================= */

/* The same layout for the 256-element super-blocks (Q8_K activations): the
 * quants of 8 rows are transposed 16 bytes at a time (lane i of vector k =
 * bytes 4k..4k+3 of row i), each 4 activation bytes of a token broadcast.
 * Per super-block and lane, the integer sum isum = sum_s sc_s * dot_s over
 * its sub-blocks s is exact in int32 (dot_s: the sub-block's integer dot;
 * the int16 pair sums are widened by one madd with the row's scale sc_s
 * held twice in each lane), then per lane
 *     acc = fma(float(isum), d * da, acc)                  (all three)
 *     acc = fnmadd(float(msum), dmin * da, acc)            (Q4_K, Q5_K)
 * with msum = sum_s min_s * (sum of the activation quants of s), from the
 * Q8_K bsums (16-element sums, so each min is used twice).  Super-blocks go
 * in order: a (row, token) result depends on nothing but its row and token.
 * The weights of a 16-byte slice are unpacked once for up to NT_P tokens
 * and the token loop is inside; isum of each token lives in memory (L1)
 * across the slices, the weight vectors take the registers.
 *
 * int16 bounds (|a| <= 127, Q8_K quants are round(x * 127/amax)):
 *   Q4_K: codes 0..15; a sub-block half (16 elements) is 4 maddubs of 4
 *   elements per lane: |pair sum| <= 8 * 15 * 127 = 15240 < 32768.
 *   Q5_K: codes 0..31: 8 * 31 * 127 = 31496 < 32768.
 *   Q6_K: codes 0..63 (value + 32): two maddubs (4 elements) at most
 *   4 * 63 * 127 = 32004 < 32768, so each pair of them gets its own madd;
 *   the +32 is removed as 32 * sum_s sc_s * bsum_s (|32 sc| <= 4096 fits).
 * int32: Q4_K/Q5_K |isum| <= 8 * 63 * 32 * 31 * 127 < 2^26, msum <= 16 *
 * 63 * 2032; Q6_K |isum| <= 16 * 128 * 16 * 63 * 127 + 16 * 4096 * 2032
 * < 2^29. */
enum { PK_Q4 = 16, PK_Q5, PK_Q6 }; /* panel types past the L_ ones */

AI size_t kbytes(int T) { return T == PK_Q4 ? 144 : T == PK_Q5 ? 176 : 210; }

/* Byte b of each dword of v, in both int16 halves of that dword:
 * zero-extended (SX 0) or sign-extended (SX 1). */
AI __m256i dup_byte(__m256i v, int b, int SX) {
    const char z = (char)0x80, x = (char)b; /* z: a zero byte */
#define DUP_D(d) SX ? z : x + 4 * d, SX ? x + 4 * d : z, SX ? z : x + 4 * d, SX ? x + 4 * d : z
#define DUP_LANE DUP_D(0), DUP_D(1), DUP_D(2), DUP_D(3)
    const __m256i r = _mm256_shuffle_epi8(v, _mm256_setr_epi8(DUP_LANE, DUP_LANE));
#undef DUP_LANE
#undef DUP_D
    return SX ? _mm256_srai_epi16(r, 8) : r;
}

/* Bytes b and b + 1 of each dword of v, zero-extended into its low and
 * high int16 halves (a pair of bytes per lane for one madd). */
AI __m256i byte_pair(__m256i v, int b) {
    const char z = (char)0x80, x = (char)b; /* z: a zero byte */
#define PAIR_D(d) x + 4 * d, z, x + 1 + 4 * d, z
#define PAIR_LANE PAIR_D(0), PAIR_D(1), PAIR_D(2), PAIR_D(3)
    return _mm256_shuffle_epi8(v, _mm256_setr_epi8(PAIR_LANE, PAIR_LANE));
#undef PAIR_LANE
#undef PAIR_D
}

/* The bits of each byte shifted from position s to t, masked by m. */
AI __m256i bits_to(__m256i v, int s, int t, __m256i m) {
    const __m256i x = s < t ? _mm256_slli_epi16(v, t - s) : s > t ? _mm256_srli_epi16(v, s - t) : v;
    return _mm256_and_si256(x, m);
}

/* sum over the 8 bsum pairs p of madd(wq[p], (bsum 2p, bsum 2p+1) of a). */
AI __m256i bsum_dot(const __m256i wq[8], bptr a) {
    __m256i s = _mm256_madd_epi16(wq[0], bcast32(a + 260));
    UNROLL for (int p = 1; p < 8; p++) s = _mm256_add_epi32(s, _mm256_madd_epi16(wq[p], bcast32(a + 260 + 4 * p)));
    return s;
}

/* Part `part` of 4 of the next panel's super-block at p (kpanel_slices). */
AI void prefetch_quarter(const int T, bptr p, int part) {
    size_t l0, l1;
    tk_prefetch_part_lines(PANEL * kbytes(T), part, 4, &l0, &l1);
    for (size_t l = l0; l < l1; l++) tk_prefetch_weights(p + 64 * l);
}

/* Q4_K / Q5_K super-block o of 8 rows: sc[s] = sub-block s's scale twice
 * per lane; wq the mins: wq[p] = min p twice per lane (bsum pair p = the
 * two halves of sub-block p; bsum_dot), or with PAIRS wq[k] = (min 2k, min
 * 2k + 1) per lane (k < 4; sub_block_sums).  The 12 scale bytes as dwords
 * u0 u1 u2 per lane: tk_qkernel_k4_scales64 lane-wise. */
AI void k4_scales(const int PL, const int PAIRS, const bptr *wp, size_t o, __m256i sc[8], __m256i wq[8]) {
    __m256i v[4];
    panel_transpose(PL, wp, o + 4, v);
    const __m256i lo6 = _mm256_set1_epi8(0x3F), lo4 = _mm256_set1_epi8(0x0F), lo2 = _mm256_set1_epi8(3);
    const __m256i s03 = _mm256_and_si256(v[0], lo6), m03 = _mm256_and_si256(v[1], lo6);
    const __m256i s47 = _mm256_or_si256(_mm256_and_si256(v[2], lo4),
                                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(v[0], 6), lo2), 4));
    const __m256i m47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(v[2], 4), lo4),
                                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(v[1], 6), lo2), 4));
    UNROLL for (int s = 0; s < 4; s++) {
        sc[s] = dup_byte(s03, s, 0);
        sc[s + 4] = dup_byte(s47, s, 0);
        if (!PAIRS) {
            wq[s] = dup_byte(m03, s, 0);
            wq[s + 4] = dup_byte(m47, s, 0);
        }
    }
    if (PAIRS)
        UNROLL for (int k = 0; k < 2; k++) {
            wq[k] = byte_pair(m03, 2 * k);
            wq[k + 2] = byte_pair(m47, 2 * k);
        }
}

/* The 8 sub-block sums of a token's Q8_K super-block at a (its bsum pairs
 * added: at most 32 * 127, int16), stored to out[0..8) as int16 in order:
 * dword k of out = (sum 2k, sum 2k + 1), to be broadcast against
 * k4_scales' PAIRS mins. */
AI void sub_block_sums(bptr a, int16_t out[8]) {
    const __m256i s = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(a + 260)), _mm256_set1_epi16(1));
    const __m256i p = _mm256_packs_epi32(s, s); /* qwords: sums 0-3, 0-3, 4-7, 4-7 */
    _mm_storeu_si128((__m128i *)out, _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08)));
}

/* sum over k < 4 of madd(wq[k], dword k of ss): the min term of 8 rows, as bsum_dot */
AI __m256i pair_min_dot(const __m256i wq[4], const int16_t ss[8]) {
    __m256i m = _mm256_madd_epi16(wq[0], bcast32((bptr)ss));
    UNROLL for (int k = 1; k < 4; k++) m = _mm256_add_epi32(m, _mm256_madd_epi16(wq[k], bcast32((bptr)ss + 4 * k)));
    return m;
}

/* In lanes: isum[j] (Q6_K: less its bsum term) and msum[j] (Q4_K,
 * Q5_K) of super-block o of the 8 rows for tokens at + j * arb (j < nt), ao the block's
 * offset in an activation row; pfb: the next panel's super-block, or NULL,
 * prefetched in four parts over the slices (prefetch_quarter, as the
 * AVX-512 passes do; bench_qgemm, 2-4 tokens: 2-5 %). */
AI void kpanel_slices(const int T, const int PL, int nt, const bptr *wp, size_t o, bptr at, size_t arb, size_t ao, bptr pfb,
                      __m256i *isum, __m256i *msum) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i sc[16], wq[8]; /* sc[s]: sub-block s's scale twice per lane; wq: bsum weights */
    if (T != PK_Q6) {
        k4_scales(PL, 0, wp, o, sc, wq);
    } else {
        __m256i v[4];
        panel_transpose(PL, wp, o + 192, v); /* the 16 int8 scales */
        UNROLL for (int k = 0; k < 4; k++) UNROLL for (int s = 0; s < 4; s++) sc[4 * k + s] = dup_byte(v[k], s, 1);
        UNROLL for (int p = 0; p < 8; p++) /* (32 sc_2p, 32 sc_2p+1) */
            wq[p] = _mm256_slli_epi16(_mm256_blend_epi16(sc[2 * p], sc[2 * p + 1], 0xAA), 5);
    }
    if (T != PK_Q6) {
        /* slice (c, p): qs bytes 32c + 16p..: low nibbles = elements 64c + 16p.. (sub-block 2c),
         * high = 64c + 32 + 16p.. (2c + 1); Q5_K's 5th bits at bits 2c, 2c+1 of qh bytes 16p.. */
        const size_t qo = T == PK_Q5 ? 48 : 16;
        UNROLL for (int c = 0; c < 4; c++) UNROLL for (int p = 0; p < 2; p++) {
            if (pfb && p == 0) prefetch_quarter(T, pfb, c);
            __m256i v[4], q[8];
            panel_transpose(PL, wp, o + qo + 32 * c + 16 * p, v);
            UNROLL for (int k = 0; k < 4; k++) {
                q[k] = _mm256_and_si256(v[k], m4);
                q[k + 4] = _mm256_and_si256(_mm256_srli_epi16(v[k], 4), m4);
            }
            if (T == PK_Q5) {
                __m256i h[4];
                const __m256i b4 = _mm256_set1_epi8(0x10);
                panel_transpose(PL, wp, o + 16 + 16 * p, h);
                UNROLL for (int k = 0; k < 4; k++) {
                    q[k] = _mm256_or_si256(q[k], bits_to(h[k], 2 * c, 4, b4));
                    q[k + 4] = _mm256_or_si256(q[k + 4], bits_to(h[k], 2 * c + 1, 4, b4));
                }
            }
            for (int j = 0; j < nt; j++) {
                const bptr a = at + arb * (size_t)j + ao + 4 + 64 * c + 16 * p;
                const __m256i s0 = _mm256_madd_epi16(dotk(4, q, a), sc[2 * c]);
                const __m256i s1 = _mm256_madd_epi16(dotk(4, q + 4, a + 32), sc[2 * c + 1]);
                /* the first slice sets the sums (a zeroing loop became a memset call per super-block) */
                isum[j] = c == 0 && p == 0 ? _mm256_add_epi32(s0, s1) : _mm256_add_epi32(isum[j], _mm256_add_epi32(s0, s1));
            }
        }
    } else {
        /* slice (h, p, g2): element 128h + 32g + 16p + l (l < 16) of sub-block 8h + 2g + p:
         * 4 bits of ql byte 64h + 32(g & 1) + 16p + l (high nibble for g >= 2), 2 bits at
         * 2g of qh byte 128 + 32h + 16p + l; g = g2 and g2 + 2 */
        const __m256i m30 = _mm256_set1_epi8(0x30);
        UNROLL for (int h = 0; h < 2; h++) UNROLL for (int p = 0; p < 2; p++) {
            if (pfb) prefetch_quarter(T, pfb, 2 * h + p);
            __m256i hq[4];
            panel_transpose(PL, wp, o + 128 + 32 * h + 16 * p, hq);
            UNROLL for (int g2 = 0; g2 < 2; g2++) {
                __m256i v[4], q[8];
                panel_transpose(PL, wp, o + 64 * h + 32 * g2 + 16 * p, v);
                UNROLL for (int k = 0; k < 4; k++) {
                    q[k] = _mm256_or_si256(_mm256_and_si256(v[k], m4), bits_to(hq[k], 2 * g2, 4, m30));
                    q[k + 4] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v[k], 4), m4),
                                               bits_to(hq[k], 2 * g2 + 4, 4, m30));
                }
                const int s0 = 8 * h + 2 * g2 + p, s1 = s0 + 4;
                for (int j = 0; j < nt; j++) {
                    const bptr a = at + arb * (size_t)j + ao + 4 + 128 * h + 32 * g2 + 16 * p;
                    const __m256i d0 = _mm256_add_epi32(_mm256_madd_epi16(dotk(2, q, a), sc[s0]),
                                                        _mm256_madd_epi16(dotk(2, q + 2, a + 8), sc[s0]));
                    const __m256i d1 = _mm256_add_epi32(_mm256_madd_epi16(dotk(2, q + 4, a + 64), sc[s1]),
                                                        _mm256_madd_epi16(dotk(2, q + 6, a + 72), sc[s1]));
                    isum[j] = h == 0 && p == 0 && g2 == 0 ? _mm256_add_epi32(d0, d1)
                                                          : _mm256_add_epi32(isum[j], _mm256_add_epi32(d0, d1));
                }
            }
        }
    }
    for (int j = 0; j < nt; j++) {
        const bptr a = at + arb * (size_t)j + ao;
        if (T == PK_Q6) isum[j] = _mm256_sub_epi32(isum[j], bsum_dot(wq, a));
        else msum[j] = bsum_dot(wq, a);
    }
}

/* 8 vectors of int32 partial sums -> lane i = the sum of r[i] (exact). */
AI __m256i hsum_rows(const __m256i r[8]) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(r[0], r[1]), _mm256_hadd_epi32(r[2], r[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(r[4], r[5]), _mm256_hadd_epi32(r[6], r[7]));
    /* a = [rows 0..3, elements 0-3 | rows 0..3, 4-7], b likewise for rows 4..7 */
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* Q6_K in row layout, one token: the same integers as kpanel_slices, each
 * row's computed in its own vectors (32 elements each, no transposes) and
 * summed into lanes.  For Q6_K's 13 transposes and 6-bit unpacking per
 * super-block this is cheaper when the weights serve one token (decode)
 * from the file's rows; Q4_K and Q5_K decode faster in lanes, and from the
 * panel layout (no transposes) so does Q6_K. */
AI __m256i q6k_rows(const bptr *wp, size_t o, bptr a) {
    __m256i r[PANEL];
    UNROLL for (int i = 0; i < PANEL; i++) r[i] = q6k_row(wp[i] + o, a);
    return hsum_rows(r);
}

/* Rows wp[0..8) of type T (PK_*), tokens at + j * arb (j < nt), nb super-blocks;
 * acc[j] lane i = row i.  ROWS (Q6_K): one token, the integers in row layout. */
AI void mk_kpanel(const int T, const int PL, const int ROWS, int nt, const bptr *wp, bptr at, size_t arb, int64_t nb, size_t pf,
                  __m256 *acc) {
    const size_t wb = kbytes(T);
    __m256i isum[NT_P], msum[NT_P];
    for (int j = 0; j < nt; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = wb * (size_t)b, ao = QK_A * (size_t)b;
        /* the next panel's super-block spread over this one's slices, but
         * at once for one token of Q4_K or Q5_K (bench_qgemm, from DRAM:
         * spread, Q4_K 30 -> 21-29 GB/s; Q6_K 23-27 -> 25-29) */
        const int spread = pf && PL && (nt > 1 || T == PK_Q6);
        if (pf && PL && !spread)
            for (size_t k = 0; k < PANEL * wb; k += 64) tk_prefetch_weights(wp[0] + pf + PANEL * o + k);
        else if (pf && !PL)
            for (size_t k = 0; k < wb; k += 64)
                UNROLL for (int i = 0; i < PANEL; i++) tk_prefetch_weights(wp[i] + o + pf + k);
        if (ROWS) isum[0] = q6k_rows(wp, o, at + ao);
        else kpanel_slices(T, PL, nt, wp, o, at, arb, ao, spread ? wp[0] + pf + PANEL * o : NULL, isum, msum);
        const __m256 dw = panel_scales(PL, wp, T == PK_Q6 ? o + 208 : o);
        const __m256 dm = T == PK_Q6 ? _mm256_setzero_ps() : panel_scales(PL, wp, o + 2);
        for (int j = 0; j < nt; j++) {
            const __m256 da = _mm256_set1_ps(ldf(at + arb * (size_t)j + ao));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(dw, da), acc[j]);
            if (T != PK_Q6) acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[j]), _mm256_mul_ps(dm, da), acc[j]);
        }
    }
}

/* Q4_K, two panels (16 rows) at a time for passes of more than 4 tokens,
 * as panel_pair: each activation broadcast feeds both panels' maddubs, a
 * sub-block goes in halves of 16 elements (P), the first half's int16 sums
 * kept per token in part[], and the whole sub-block's 8 maddubs (at most
 * 16 * 15 * 127 < 32768) take one madd with its scale, where
 * kpanel_slices gives each half its own.  The same exact int32 sums per
 * lane: the same bits.  qo: the byte offset of the half's 16 qs bytes of
 * the 8 rows, HH its nibble, a0 the activations' offset. */
AI void k4_pair_half(const int P, const int FIRST, const int HH, int nt, const bptr *wp, size_t qo, bptr a, size_t arb,
                     const __m256i *sc0, const __m256i *sc1, __m256i *part, __m256i *isum) {
    __m256i q0[4], q1[4];
    pair_nibbles(wp, qo, HH, q0, q1);
#pragma GCC unroll 2
    for (int j = 0; j < nt; j++) {
        __m256i s0, s1;
        pair_dotk4(q0, q1, a + arb * (size_t)j, &s0, &s1);
        if (P == 0) {
            part[2 * j] = s0;
            part[2 * j + 1] = s1;
        } else {
            const __m256i m0 = _mm256_madd_epi16(_mm256_add_epi16(s0, part[2 * j]), *sc0);
            const __m256i m1 = _mm256_madd_epi16(_mm256_add_epi16(s1, part[2 * j + 1]), *sc1);
            isum[2 * j] = FIRST ? m0 : _mm256_add_epi32(isum[2 * j], m0);
            isum[2 * j + 1] = FIRST ? m1 : _mm256_add_epi32(isum[2 * j + 1], m1);
        }
    }
}

/* mk_kpanel for Q4_K from the panel layout, panels wp[0] and wp[1] (acc0,
 * acc1), nt > 4 tokens; the next pair's super-block prefetched in four
 * parts, as there. */
AI void mk_kpanel_pair(int nt, const bptr *wp, bptr at, size_t arb, int64_t nb, size_t pf, __m256 *acc0, __m256 *acc1) {
    const size_t wb = kbytes(PK_Q4);
    __m256i isum[2 * NT_P], part[2 * NT_P];
    for (int j = 0; j < nt; j++) acc0[j] = acc1[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = wb * (size_t)b, ao = QK_A * (size_t)b;
        __m256i sc0[8], wq0[8], sc1[8], wq1[8];
        k4_scales(1, 1, wp, o, sc0, wq0);
        k4_scales(1, 1, wp + 1, o, sc1, wq1);
        /* sub-block 2c + hh: elements 64c + 32hh + 16p.. in nibble hh of qs bytes 32c + 16p.. */
        UNROLL for (int c = 0; c < 4; c++) UNROLL for (int hh = 0; hh < 2; hh++) {
            if (pf && hh == 0) {
                prefetch_quarter(PK_Q4, wp[0] + pf + PANEL * o, c);
                prefetch_quarter(PK_Q4, wp[1] + pf + PANEL * o, c);
            }
            const size_t qo = o + 16 + 32 * (size_t)c, a0 = ao + 4 + 64 * (size_t)c + 32 * (size_t)hh;
            const int sb = 2 * c + hh;
            k4_pair_half(0, 0, hh, nt, wp, qo, at + a0, arb, &sc0[sb], &sc1[sb], part, isum);
            k4_pair_half(1, c == 0 && hh == 0, hh, nt, wp, qo + 16, at + a0 + 16, arb, &sc0[sb], &sc1[sb], part, isum);
        }
        const __m256 dw0 = panel_scales(1, wp, o), dm0 = panel_scales(1, wp, o + 2);
        const __m256 dw1 = panel_scales(1, wp + 1, o), dm1 = panel_scales(1, wp + 1, o + 2);
        for (int j = 0; j < nt; j++) {
            const bptr a = at + arb * (size_t)j + ao;
            const __m256 da = _mm256_set1_ps(ldf(a));
            int16_t ss[8];
            sub_block_sums(a, ss);
            const __m256i ms0 = pair_min_dot(wq0, ss), ms1 = pair_min_dot(wq1, ss);
            acc0[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[2 * j]), _mm256_mul_ps(dw0, da), acc0[j]);
            acc0[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms0), _mm256_mul_ps(dm0, da), acc0[j]);
            acc1[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[2 * j + 1]), _mm256_mul_ps(dw1, da), acc1[j]);
            acc1[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms1), _mm256_mul_ps(dm1, da), acc1[j]);
        }
    }
}

#ifdef TK_QGEMM_KBATCH
static const tk_qkernel *tiled_kernel(tk_dtype wtype) { return tk_qkernel_avx2_tiled(wtype); }
#else
static const tk_qkernel *tiled_kernel(tk_dtype wtype);
#endif

AI tk_dtype panel_dtype(int T) {
    return T == L_Q4_0 ? TK_Q4_0 : T == L_Q4_1 ? TK_Q4_1 : T == L_Q5_0 ? TK_Q5_0 : T == L_Q5_1 ? TK_Q5_1 : T == L_Q8_0 ? TK_Q8_0 : T == L_IQ4_NL ? TK_IQ4_NL : T == PK_Q4 ? TK_Q4_K
         : T == PK_Q5 ? TK_Q5_K : TK_Q6_K;
}

/* Token chunks, 8-row panels (the last repeats its last row), passes of up
 * to NT_P tokens.  Legacy types: a chunk's block data in a stack buffer of
 * TOKDATA_MAX blocks, block-major (a pass reads one run of it per block,
 * not one stream per token); rows longer than that (or empty) take the row-tiled
 * kernel (a choice made by n alone, so still the same bits for every batch
 * and split).  K-quants: chunks of CHUNK_BYTES of activations, which stay
 * in L2 while the panels pass over them. */
AI void panel_gemm(const int T, const int PL, const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1, const void *act,
                   size_t arb, int n_tok, float *y, int64_t ldy) {
    const int kq = T >= PK_Q4;
    const int64_t nb = n / (kq ? 256 : 32);
    if (nb == 0 || (!kq && nb > TOKDATA_MAX)) {
        tiled_kernel(panel_dtype(T))->gemm(w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);
        return;
    }
    tokblk td[TOKDATA_MAX];
    const uint8_t *W = w, *A = act;
    int64_t chunk = kq ? (int64_t)(CHUNK_BYTES) / (int64_t)arb : TOKDATA_MAX / nb;
    if (chunk > NT_P) chunk = chunk / NT_P * NT_P;
    else if (chunk < 1) chunk = 1;
    for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
        const int64_t t1 = t0 + chunk < n_tok ? t0 + chunk : n_tok;
        for (int64_t t = t0; t < t1 && !kq; t++)
            for (int64_t b = 0; b < nb; b++) {
                const bptr blk = A + (size_t)t * arb + (lmin(T) ? 36 : 34) * (size_t)b;
                tokblk *tb = &td[b * (t1 - t0) + (t - t0)];
                tb->d = ldh(blk);
                if (lmin(T)) tb->s = ldh(blk + 2);
                else tb->off = panel_offset(T) * sum_i8x32(ldu(blk + 2));
            }
        for (int64_t r = r0; r < r1; r += PANEL) {
            /* Q4_0, Q4_K (and Q8_0 with AVX-VNNI) with more than 4 tokens: two panels at a time
             * (panel_pair, mk_kpanel_pair), wp[1] the second; passes of 4 or fewer take them one by one */
            const int pair = (T == L_Q4_0 || T == PK_Q4 || (VNNI && T == L_Q8_0)) && PL && t1 - t0 > 4 && r + PANEL < r1;
            bptr wp[PANEL];
            for (int i = 0; i < PANEL; i++) wp[i] = W + (size_t)(PL ? r : r + i < r1 ? r + i : r1 - 1) * wrb;
            if (pair) wp[1] = W + (size_t)(r + PANEL) * wrb;
            for (int64_t t = t0; t < t1;) {
                const int nt = t1 - t >= NT_P ? NT_P : (int)(t1 - t);
                __m256 acc[2 * NT_P];
                /* the first pass prefetches the next panel (decode streams it from DRAM) */
                const size_t pf = t == t0 ? (size_t)(pair + 1) * PANEL * wrb : 0;
                const bptr at = A + (size_t)t * arb;
                const tokblk *tt = td + (t - t0);
                const size_t ts = (size_t)(t1 - t0);
                /* 1-4 tokens (decode, a few sequences, an expert's tokens, a draft's check) with
                 * the count a constant: the token loop unrolls, its sums stay in registers
                 * (bench_qgemm, 2-4 tokens: Q4_0 +4-11 %, Q4_K +4-7 %; docs/kernels.md).  An
                 * if-chain: the same calls as a switch ran Q4_0 up to 10 % slower (code layout). */
                if (T == PK_Q6 && nt == 1 && !PL) mk_kpanel(T, PL, 1, 1, wp, at, arb, nb, pf, acc);
                else if (kq && nt == 1) mk_kpanel(T, PL, 0, 1, wp, at, arb, nb, pf, acc);
                else if (kq && nt == 2) mk_kpanel(T, PL, 0, 2, wp, at, arb, nb, pf, acc);
                else if (kq && nt == 3) mk_kpanel(T, PL, 0, 3, wp, at, arb, nb, pf, acc);
                else if (kq && nt == 4) mk_kpanel(T, PL, 0, 4, wp, at, arb, nb, pf, acc);
                else if (kq && pair) mk_kpanel_pair(nt, wp, at, arb, nb, pf, acc, acc + NT_P);
                else if (kq) mk_kpanel(T, PL, 0, nt, wp, at, arb, nb, pf, acc);
                else if (nt == 1) mk_panel(T, PL, 1, wp, at, arb, tt, ts, nb, pf, acc);
                else if (nt == 2) mk_panel(T, PL, 2, wp, at, arb, tt, ts, nb, pf, acc);
                else if (nt == 3) mk_panel(T, PL, 3, wp, at, arb, tt, ts, nb, pf, acc);
                else if (nt == 4) mk_panel(T, PL, 4, wp, at, arb, tt, ts, nb, pf, acc);
                else if (pair) panel_pair(T, nt, wp, at, arb, tt, ts, nb, pf, acc, acc + NT_P);
                else mk_panel(T, PL, nt, wp, at, arb, tt, ts, nb, pf, acc);
                if (pair && nt <= 4 && kq) mk_kpanel(T, PL, 0, nt, wp + 1, at, arb, nb, pf, acc + NT_P);
                else if (pair && nt <= 4) mk_panel(T, PL, nt, wp + 1, at, arb, tt, ts, nb, pf, acc + NT_P);
                for (int p = 0; p <= pair; p++)
                    for (int j = 0; j < nt; j++) {
                        const int64_t rp = r + p * PANEL;
                        float *yt = y + (t + j) * ldy + rp;
                        if (rp + PANEL <= r1) {
                            _mm256_storeu_ps(yt, acc[p * NT_P + j]);
                        } else {
                            float o8[PANEL];
                            _mm256_storeu_ps(o8, acc[p * NT_P + j]);
                            memcpy(yt, o8, sizeof(float) * (size_t)(r1 - rp));
                        }
                    }
                t += nt;
            }
            r += pair * PANEL;
        }
    }
}

/* The k-quants' panel-layout passes: more than 4 tokens in the build of
 * qgemm_avx2_kbatch.c (tk_qkernel_avx2_k_batch), 1-4 here (both build the
 * same code, so the same bits). */
AI void k_panel_gemm(const int T, const int PL, const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1,
                     const void *act, size_t arb, int n_tok, float *y, int64_t ldy) {
    if (PL && n_tok > 4) tk_qkernel_avx2_k_batch(panel_dtype(T), w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);
    else panel_gemm(T, PL, w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);
}

#ifdef TK_QGEMM_KBATCH
/* one function per type: the three inlined into one were register-allocated
 * as one, with three times the spills (Q4_K 300 -> 200 GFLOP/s) */
#define K_BATCH_GEMM(NAME, T)                                                                                      \
    __attribute__((noinline)) static void NAME(const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1,      \
                                               const void *act, size_t arb, int n_tok, float *y, int64_t ldy) {    \
        panel_gemm(T, 1, w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);                                              \
    }
K_BATCH_GEMM(q4_K_batch, PK_Q4)
K_BATCH_GEMM(q5_K_batch, PK_Q5)
K_BATCH_GEMM(q6_K_batch, PK_Q6)

void tk_qkernel_avx2_k_batch(tk_dtype wtype, const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1,
                             const void *act, size_t arb, int n_tok, float *y, int64_t ldy) {
    if (wtype == TK_Q4_K) q4_K_batch(w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);
    else if (wtype == TK_Q5_K) q5_K_batch(w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);
    else q6_K_batch(w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);
}
#else
#define PANEL_GEMM(NAME, T) TK_QKERNEL_PANEL_GEMMS(NAME, panel_gemm, T)
PANEL_GEMM(q4_0_panel_gemm, L_Q4_0)
PANEL_GEMM(q4_1_panel_gemm, L_Q4_1)
PANEL_GEMM(q5_0_panel_gemm, L_Q5_0)
PANEL_GEMM(q5_1_panel_gemm, L_Q5_1)
PANEL_GEMM(q8_0_panel_gemm, L_Q8_0)
PANEL_GEMM(iq4_nl_panel_gemm, L_IQ4_NL)
#ifndef TK_AVXVNNI
TK_QKERNEL_PANEL_GEMMS(q4_K_panel_gemm, k_panel_gemm, PK_Q4)
TK_QKERNEL_PANEL_GEMMS(q5_K_panel_gemm, k_panel_gemm, PK_Q5)
TK_QKERNEL_PANEL_GEMMS(q6_K_panel_gemm, k_panel_gemm, PK_Q6)
#endif

/* ================= instantiation ================= */

#define C_Q4_0(MR, NT, ...) mk_nib2(L_Q4_0, MR, NT, __VA_ARGS__)
#define C_Q4_1(MR, NT, ...) mk_nib2(L_Q4_1, MR, NT, __VA_ARGS__)
#define C_Q5_0(MR, NT, ...) mk_nib2(L_Q5_0, MR, NT, __VA_ARGS__)
#define C_Q5_1(MR, NT, ...) mk_nib2(L_Q5_1, MR, NT, __VA_ARGS__)
#define C_Q8_0(MR, NT, ...) mk_legacy(L_Q8_0, MR, NT, __VA_ARGS__)
#define C_IQ4_NL(MR, NT, ...) mk_legacy(L_IQ4_NL, MR, NT, __VA_ARGS__)
#define C_Q4_K(MR, NT, ...) mk_q45k(0, MR, NT, __VA_ARGS__)
#define C_Q5_K(MR, NT, ...) mk_q45k(1, MR, NT, __VA_ARGS__)
#define C_Q2_K(MR, NT, ...) mk_k16(K_Q2, MR, NT, __VA_ARGS__)
#define C_Q3_K(MR, NT, ...) mk_k16(K_Q3, MR, NT, __VA_ARGS__)
#define C_Q6_K(MR, NT, ...) mk_k16(K_Q6, MR, NT, __VA_ARGS__)
#define C_IQ4_XS(MR, NT, ...) mk_iq4xs(MR, NT, __VA_ARGS__)
#define C_F32(MR, NT, ...) mk_float(F_F32, MR, NT, __VA_ARGS__)
#define C_F16(MR, NT, ...) mk_float(F_F16, MR, NT, __VA_ARGS__)
#define C_BF16(MR, NT, ...) mk_float(F_BF16, MR, NT, __VA_ARGS__)
#define C_NF4(MR, NT, ...) mk_nf4(0, MR, NT, __VA_ARGS__)
#define C_NF4_DQ(MR, NT, ...) mk_nf4(1, MR, NT, __VA_ARGS__)

/* Tile shapes (rows x tokens), tuned with bench_qgemm for 16 ymm
 * registers (the file is built without AVX-512, so EVEX ymm16-31 are never
 * used and this code is the one a Zen 3 runs). */
#ifndef MR_L
#define MR_L 3
#endif
#ifndef NT_L
#define NT_L 4
#endif
#ifndef MR_K
#define MR_K 3
#endif
#ifndef NT_K
#define NT_K 4
#endif
#ifndef MR_F
#define MR_F 4
#endif
#ifndef MR_N
#define MR_N 3
#endif
#ifndef NT_N
#define NT_N 4
#endif
#ifndef NT_F
#define NT_F 3
#endif

/* The 32-element types' panel kernels: the ones with vpdpbusd in the
 * AVX-VNNI build.  The k-quants' stay the plain build's: their sub-block
 * scales multiply the int16 pair sums in the madd itself (Q4_K's dot scaled
 * by a madd after vpdpbusd measured no faster; Q5_K's and Q6_K's can pass
 * int16 and would need a 32-bit multiply; docs/kernels.md). */
#define LEGACY_PANEL_KERNELS \
    TK_QKERNEL_SIMD_PANELS(GEMM_ISA, GEMM_SUFFIX, TK_Q4_0, Q8_0, "Q4_0", q4_0_panel_gemm, q4_0_panel_gemm_pl), \
    TK_QKERNEL_SIMD_PANELS(GEMM_ISA, GEMM_SUFFIX, TK_Q4_1, Q8_1, "Q4_1", q4_1_panel_gemm, q4_1_panel_gemm_pl), \
    TK_QKERNEL_SIMD_PANELS(GEMM_ISA, GEMM_SUFFIX, TK_Q5_0, Q8_0, "Q5_0", q5_0_panel_gemm, q5_0_panel_gemm_pl), \
    TK_QKERNEL_SIMD_PANELS(GEMM_ISA, GEMM_SUFFIX, TK_Q5_1, Q8_1, "Q5_1", q5_1_panel_gemm, q5_1_panel_gemm_pl), \
    TK_QKERNEL_SIMD_PANELS(GEMM_ISA, GEMM_SUFFIX, TK_Q8_0, Q8_0, "Q8_0", q8_0_panel_gemm, q8_0_panel_gemm_pl), \
    TK_QKERNEL_SIMD_PANELS(GEMM_ISA, GEMM_SUFFIX, TK_IQ4_NL, Q8_0, "IQ4_NL", iq4_nl_panel_gemm, iq4_nl_panel_gemm_pl),

#ifdef TK_AVXVNNI
/* The row-tiled kernels (no vpdpbusd) are the plain build's. */
static const tk_qkernel *tiled_kernel(tk_dtype wtype) { return tk_qkernel_avx2_tiled(wtype); }

static const tk_qkernel panel_kernels[TK_DTYPE_LIMIT] = {LEGACY_PANEL_KERNELS};

const tk_qkernel *tk_qkernel_avxvnni(tk_dtype wtype) { return tk_qkernel_pick(panel_kernels, wtype); }

#else
GEMM_KERNELS(tiled_kernel, GEMM_TYPES)

const tk_qkernel *tk_qkernel_avx2_tiled(tk_dtype wtype) { return tiled_kernel(wtype); }

/* The panel kernels replace the tiled ones of their types. */
static const tk_qkernel panel_kernels[TK_DTYPE_LIMIT] = {
    LEGACY_PANEL_KERNELS
    TK_QKERNEL_SIMD_PANELS(GEMM_ISA, GEMM_SUFFIX, TK_Q4_K, Q8_K, "Q4_K", q4_K_panel_gemm, q4_K_panel_gemm_pl),
    TK_QKERNEL_SIMD_PANELS(GEMM_ISA, GEMM_SUFFIX, TK_Q5_K, Q8_K, "Q5_K", q5_K_panel_gemm, q5_K_panel_gemm_pl),
    TK_QKERNEL_SIMD_PANELS(GEMM_ISA, GEMM_SUFFIX, TK_Q6_K, Q8_K, "Q6_K", q6_K_panel_gemm, q6_K_panel_gemm_pl),
};

const tk_qkernel *tk_qkernel_avx2(tk_dtype wtype) {
    const tk_qkernel *p = tk_qkernel_pick(panel_kernels, wtype);
    return p ? p : tiled_kernel(wtype);
}
#endif
#endif /* TK_QGEMM_KBATCH */

#elif defined(TK_QGEMM_KBATCH) /* not built with AVX2: nothing calls it */

typedef int tk_qgemm_kbatch_empty; /* a translation unit must declare something */

#elif defined(TK_AVXVNNI) /* not built with AVX-VNNI */

const tk_qkernel *tk_qkernel_avxvnni(tk_dtype wtype) {
    (void)wtype;
    return NULL;
}

#else /* not built with AVX2 */

const tk_qkernel *tk_qkernel_avx2(tk_dtype wtype) {
    (void)wtype;
    return NULL;
}

const tk_qkernel *tk_qkernel_avx2_tiled(tk_dtype wtype) {
    (void)wtype;
    return NULL;
}

#endif
