/* AVX-512 + VNNI Q4_K, Q5_K and Q6_K (q6k_block, below) in 16-row panels:
 * the rows in the 16 dword lanes of a zmm (docs/kernels.md, "AVX-512
 * k-quant panels").  Per 16-byte slice of
 * a super-block the quants of 16 rows are transposed in registers from the
 * original layout (lane i of vector k = bytes 4k..4k+3 of row i), or loaded
 * from two 8-row panels of the panel layout (kernels/panels.h), unpacked
 * once and used for up to NT_P tokens; each 4 activation bytes of a token are broadcast (the {1to16} operand of
 * vpdpbusd), so one vpdpbusd does 4 elements of 16 rows.
 *
 * Per super-block and lane (one row, one token):
 *   dot_s = sum over sub-block s (32 elements) of code * a   (vpdpbusd;
 *           Q5_K's fifth bits are added to the codes first, vptestmb and a
 *           masked vpaddb of 16)
 *   isum  = sum_s sc_s * dot_s                                (vpmulld)
 *   msum  = sum_s min_s * (bsum_2s + bsum_2s+1)               (vpdpwssd)
 *   acc   = fma(float(isum), d * da, acc); acc = fnmadd(float(msum), dmin * da, acc)
 * the same float steps in the same order as the AVX2 panels.  Super-blocks
 * go in order and every lane runs the same instructions, so a (row, token)
 * result depends on nothing but its row and its token: not the batch, the
 * token pass, the panel a row falls in or the row split.
 *
 * Bounds (codes 0..31, Q8_K quants |a| <= 128, 6-bit sc and min <= 63):
 *   vpdpbusd sums exactly in int32 (no saturation): |dot_s| <= 32 * 31 * 128
 *   = 126976; |sc_s * dot_s| <= 7999488; |isum| <= 8 * that < 2^26.
 *   vpdpwssd: bsums are 16-element sums, |bsum| <= 2048; each pair product
 *   <= 63 * 2048 * 2, |msum| <= 8 * 63 * 4096 < 2^21.  All exact. */
#include "qgemm_impl.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__)

#include "qgemm_avx512_panel.h"

enum { QKA = 292 };                 /* sizeof(tk_block_q8_K) */
#define KP_CHUNK_BYTES (256 * 1024) /* activations of a token chunk, kept in L2 */

/* Byte b of each dword, zero-extended. */
AI __m512i kp_byte(__m512i v, int b) { return _mm512_and_si512(_mm512_srli_epi32(v, 8 * b), _mm512_set1_epi32(0xFF)); }

/* A value below 2^16 in both int16 halves of its dword. */
AI __m512i kp_twice(__m512i x) { return _mm512_or_si512(x, _mm512_slli_epi32(x, 16)); }

/* Q4_K (Q5 = 0) or Q5_K super-block at offset o of the 16 rows, tokens
 * ap[0..nt) at block offset ao: isum[j], msum[j]; dw, dm: the rows' d and
 * dmin.  Q5_K: qh (32 bytes) at 16, qs at 48; Q4_K: qs at 16. */
AI void q45k_block(const int Q5, const int PL, int nt, const bptr *wp, size_t o, const bptr *ap, size_t ao,
                   bptr next, bptr next_b, __m512i *isum, __m512i *msum, __m512 *dw, __m512 *dm) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), b16 = _mm512_set1_epi8(0x10);
    const size_t qs = Q5 ? 48 : 16;
    __m512i qh[8]; /* Q5_K: bytes l = 16p + 4k.. of qh in qh[4p + k], as the quant slices */
    if (Q5) {
        kp_rows16(PL, wp, o + 16, qh);
        kp_rows16(PL, wp, o + 32, qh + 4);
    }
    __m512i v[4]; /* d|dmin, then the 12 scale bytes as dwords u0 u1 u2: tk_qkernel_k4_scales64 lane-wise */
    if (PL) { /* d and dmin are 2-byte units of the panel layout, the scale bytes 4-byte ones */
        __m512i u[4];
        kp_rows16(1, wp, o + 4, u);
        v[1] = u[0];
        v[2] = u[1];
        v[3] = u[2];
        *dw = kp_scales16(1, wp, o);
        *dm = kp_scales16(1, wp, o + 2);
    } else {
        kp_transpose(wp, o, v);
        *dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v[0]));
        *dm = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v[0], 16)));
    }
    const __m512i lo6 = _mm512_set1_epi8(0x3F), lo2 = _mm512_set1_epi8(3);
    const __m512i s03 = _mm512_and_si512(v[1], lo6), m03 = _mm512_and_si512(v[2], lo6);
    const __m512i s47 = _mm512_or_si512(_mm512_and_si512(v[3], m4),
                                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(v[1], 6), lo2), 4));
    const __m512i m47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v[3], 4), m4),
                                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(v[2], 6), lo2), 4));
    for (int j = 0; j < nt; j++) isum[j] = _mm512_setzero_si512();
    /* sub-blocks 2c and 2c+1: qs bytes 32c..32c+31, two 16-byte slices p:
     * low nibbles = elements 64c + 16p.. (2c), high = 64c + 32 + 16p.. (2c+1);
     * Q5_K: their fifth bits are bits 2c and 2c + 1 of qh byte 16p + .. */
    UNROLL for (int c = 0; c < 4; c++) {
        kp_prefetch_part(PL, next, next_b, o, Q5 ? 176 : 144, c, 4);
        __m512i lo[8], hi[8];
        UNROLL for (int p = 0; p < 2; p++) {
            __m512i q[4];
            kp_rows16(PL, wp, o + qs + 32 * (size_t)c + 16 * (size_t)p, q);
            UNROLL for (int k = 0; k < 4; k++) {
                lo[4 * p + k] = _mm512_and_si512(q[k], m4);
                hi[4 * p + k] = _mm512_and_si512(_mm512_srli_epi16(q[k], 4), m4);
                if (Q5) {
                    const __m512i h = qh[4 * p + k];
                    const __mmask64 bl = _mm512_test_epi8_mask(h, _mm512_set1_epi8((char)(1 << (2 * c))));
                    const __mmask64 bh = _mm512_test_epi8_mask(h, _mm512_set1_epi8((char)(2 << (2 * c))));
                    lo[4 * p + k] = _mm512_mask_add_epi8(lo[4 * p + k], bl, lo[4 * p + k], b16);
                    hi[4 * p + k] = _mm512_mask_add_epi8(hi[4 * p + k], bh, hi[4 * p + k], b16);
                }
            }
        }
        const __m512i sc0 = kp_byte(c < 2 ? s03 : s47, 2 * c % 4), sc1 = kp_byte(c < 2 ? s03 : s47, 2 * c % 4 + 1);
        for (int j = 0; j < nt; j++) {
            const bptr a = ap[j] + ao + 4 + 64 * (size_t)c;
            __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
            UNROLL for (int k = 0; k < 8; k++) {
                const size_t e = 16 * (size_t)(k / 4) + 4 * (size_t)(k % 4);
                d0 = _mm512_dpbusd_epi32(d0, lo[k], kp_bcast(a + e));
                d1 = _mm512_dpbusd_epi32(d1, hi[k], kp_bcast(a + 32 + e));
            }
            isum[j] = _mm512_add_epi32(isum[j], _mm512_add_epi32(_mm512_mullo_epi32(d0, sc0), _mm512_mullo_epi32(d1, sc1)));
        }
    }
    /* min s in both int16 halves of its lane, against bsum pair s */
    __m512i wq[8];
    UNROLL for (int s = 0; s < 4; s++) {
        wq[s] = kp_twice(kp_byte(m03, s));
        wq[s + 4] = kp_twice(kp_byte(m47, s));
    }
    for (int j = 0; j < nt; j++) {
        const bptr b = ap[j] + ao + 260;
        __m512i m = _mm512_setzero_si512();
        UNROLL for (int s = 0; s < 8; s++) m = _mm512_dpwssd_epi32(m, wq[s], kp_bcast(b + 4 * (size_t)s));
        msum[j] = m;
    }
}

/* Rows wp (PL: kp_rows16), tokens ap[0..nt), nb super-blocks; acc[j] lane
 * i = row i.  next (and in the panel layout next_b): the next 16 rows or
 * NULL, one super-block's worth prefetched per step, spread over its four
 * 64-element chunks (kp_prefetch_part), in order as the hardware
 * prefetchers expect (per-row prefetches, 16 streams at once, read 15-25 %
 * slower from DRAM in bench_qgemm decode). */
AI void q45k_panel(const int Q5, const int PL, int nt, const bptr *wp, const bptr *ap, int64_t nb, bptr next,
                   bptr next_b, __m512 *acc) {
    const size_t wb = Q5 ? 176 : 144;
    __m512i isum[KP_NT], msum[KP_NT];
    for (int j = 0; j < nt; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = wb * (size_t)b, ao = QKA * (size_t)b;
        __m512 dw, dm;
        q45k_block(Q5, PL, nt, wp, o, ap, ao, next, next_b, isum, msum, &dw, &dm);
        for (int j = 0; j < nt; j++) {
            const __m512 da = _mm512_set1_ps(kp_ldf(ap[j] + ao));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), _mm512_mul_ps(dw, da), acc[j]);
            acc[j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[j]), _mm512_mul_ps(dm, da), acc[j]);
        }
    }
}

/* One token over the 8-row panel p of the panel layout, nb super-blocks, in
 * ymm lanes: per lane q45k_block's and q45k_panel's instructions (the same
 * integers, the same float roundings), so a row gets the same bits from
 * either.  One token reads the panels one after the other (as
 * qgemm_avx512_lpanel.c's lpanel8).  next: the next panel or NULL. */
AI __m256 q45k_panel8(const int Q5, bptr p, bptr a, int64_t nb, bptr next) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), lo6 = _mm256_set1_epi8(0x3F), lo2 = _mm256_set1_epi8(3),
                  ff = _mm256_set1_epi32(0xFF), b16 = _mm256_set1_epi8(0x10);
    const size_t wb = Q5 ? 176 : 144, qs = Q5 ? 48 : 16;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = wb * (size_t)b, ao = QKA * (size_t)b;
        kp_prefetch_block(1, next, NULL, o, wb);
        const bptr x = p + 8 * o;
        const __m256 dw = _mm256_cvtph_ps(kp_ldx(x)), dm = _mm256_cvtph_ps(kp_ldx(x + 16));
        __m256i v[3];
        UNROLL for (int k = 0; k < 3; k++) v[k] = _mm256_loadu_si256((const __m256i *)(x + 32 + 32 * k));
        const __m256i s03 = _mm256_and_si256(v[0], lo6), m03 = _mm256_and_si256(v[1], lo6);
        const __m256i s47 = _mm256_or_si256(_mm256_and_si256(v[2], m4),
                                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(v[0], 6), lo2), 4));
        const __m256i m47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(v[2], 4), m4),
                                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(v[1], 6), lo2), 4));
        __m256i isum = _mm256_setzero_si256();
        UNROLL for (int c = 0; c < 4; c++) {
            const bptr ac = a + ao + 4 + 64 * (size_t)c;
            __m256i d0 = _mm256_setzero_si256(), d1 = _mm256_setzero_si256();
            UNROLL for (int k = 0; k < 8; k++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(x + 8 * (qs + 32 * (size_t)c) + 32 * (size_t)k));
                const size_t e = 16 * (size_t)(k / 4) + 4 * (size_t)(k % 4);
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (Q5) {
                    const __m256i h = _mm256_loadu_si256((const __m256i *)(x + 8 * 16 + 32 * (size_t)k));
                    const __mmask32 bl = _mm256_test_epi8_mask(h, _mm256_set1_epi8((char)(1 << (2 * c))));
                    const __mmask32 bh = _mm256_test_epi8_mask(h, _mm256_set1_epi8((char)(2 << (2 * c))));
                    lo = _mm256_mask_add_epi8(lo, bl, lo, b16);
                    hi = _mm256_mask_add_epi8(hi, bh, hi, b16);
                }
                d0 = _mm256_dpbusd_epi32(d0, lo, _mm256_set1_epi32((int)kp_ld32(ac + e)));
                d1 = _mm256_dpbusd_epi32(d1, hi, _mm256_set1_epi32((int)kp_ld32(ac + 32 + e)));
            }
            const __m256i sv = c < 2 ? s03 : s47;
            const __m256i sc0 = _mm256_and_si256(_mm256_srli_epi32(sv, 8 * (2 * c % 4)), ff),
                          sc1 = _mm256_and_si256(_mm256_srli_epi32(sv, 8 * (2 * c % 4 + 1)), ff);
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_mullo_epi32(d0, sc0), _mm256_mullo_epi32(d1, sc1)));
        }
        __m256i msum = _mm256_setzero_si256();
        UNROLL for (int s = 0; s < 8; s++) {
            const __m256i mv = _mm256_and_si256(_mm256_srli_epi32(s < 4 ? m03 : m47, 8 * (s % 4)), ff);
            msum = _mm256_dpwssd_epi32(msum, _mm256_or_si256(mv, _mm256_slli_epi32(mv, 16)),
                                       _mm256_set1_epi32((int)kp_ld32(a + ao + 260 + 4 * (size_t)s)));
        }
        const __m256 da = _mm256_set1_ps(kp_ldf(a + ao));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, da), acc);
        acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dm, da), acc);
    }
    return acc;
}

/* Q6_K: ql[128] qh[64] scales[16] (int8) d; 16 sub-blocks of 16.  Per
 * super-block and lane (one row, one token), code = q + 32 in [0, 63]:
 *   dot_s = sum over sub-block s of code * a - 32 * bsum_s   (vpdpbusd from
 *           the broadcast -32 * bsum_s: the offset leaves exactly)
 *   isum  = sum_s sc_s * dot_s                                (vpmulld)
 *   acc   = fma(float(isum), d * da, acc)
 * Bounds: |dot_s| <= 16 * 63 * 128 + 32 * 2048 < 2^18, |sc_s| <= 128,
 * |isum| <= 16 * 2^25 = 2^29: exact. */
AI void q6k_block(const int PL, int nt, const bptr *wp, size_t o, const bptr *ap, size_t ao, bptr next, bptr next_b,
                  __m512i *isum) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512i scv[4]; /* lane i dword k: scales 4k..4k+3 of row i */
    kp_rows16(PL, wp, o + 192, scv);
    for (int j = 0; j < nt; j++) isum[j] = _mm512_setzero_si512();
    /* half h (elements 128h..), slice p: l = 16p + 4k + byte of ql[64h + l],
     * ql[64h + 32 + l], qh[32h + l] give elements 128h + l (+32, +64, +96),
     * sub-blocks 8h + p (+2, +4, +6) */
    UNROLL for (int h = 0; h < 2; h++) UNROLL for (int p = 0; p < 2; p++) {
            kp_prefetch_part(PL, next, next_b, o, 210, 2 * h + p, 4);
            __m512i qa[4], qb[4], qh[4];
            kp_rows16(PL, wp, o + 64 * (size_t)h + 16 * (size_t)p, qa);
            kp_rows16(PL, wp, o + 64 * (size_t)h + 32 + 16 * (size_t)p, qb);
            kp_rows16(PL, wp, o + 128 + 32 * (size_t)h + 16 * (size_t)p, qh);
            /* code group g: sub-block 8h + p + 2g (elements 128h + 32g + l) */
            UNROLL for (int g = 0; g < 4; g++) {
                __m512i c[4];
                UNROLL for (int k = 0; k < 4; k++) {
                    const __m512i lo = g & 1 ? qb[k] : qa[k];
                    const __m512i nib = g < 2 ? lo : _mm512_srli_epi16(lo, 4);
                    const __m512i hb = g == 0 ? _mm512_slli_epi16(qh[k], 4) : g == 1 ? _mm512_slli_epi16(qh[k], 2)
                                     : g == 2 ? qh[k] : _mm512_srli_epi16(qh[k], 2);
                    c[k] = _mm512_or_si512(_mm512_and_si512(nib, m4), _mm512_and_si512(hb, m30));
                }
                const int sb = 8 * h + p + 2 * g;
                const __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(scv[sb / 4], 24 - 8 * (sb % 4)), 24);
                for (int j = 0; j < nt; j++) {
                    const bptr a = ap[j] + ao + 4 + 128 * (size_t)h + 32 * (size_t)g + 16 * (size_t)p;
                    int16_t bsum;
                    memcpy(&bsum, ap[j] + ao + 260 + 2 * (size_t)sb, 2);
                    __m512i d = _mm512_set1_epi32(-32 * (int32_t)bsum);
                    UNROLL for (int k = 0; k < 4; k++) d = _mm512_dpbusd_epi32(d, c[k], kp_bcast(a + 4 * k));
                    isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(d, sc));
                }
            }
        }
}

/* Q6_K rows wp (PL: kp_rows16), tokens ap[0..nt), nb super-blocks, next
 * and next_b as in q45k_panel. */
AI void q6k_panel(const int PL, int nt, const bptr *wp, const bptr *ap, int64_t nb, bptr next, bptr next_b,
                  __m512 *acc) {
    __m512i isum[KP_NT];
    for (int j = 0; j < nt; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = 210 * (size_t)b, ao = QKA * (size_t)b;
        q6k_block(PL, nt, wp, o, ap, ao, next, next_b, isum);
        const __m512 dw = kp_scales16(PL, wp, o + 208);
        for (int j = 0; j < nt; j++)
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), _mm512_mul_ps(dw, _mm512_set1_ps(kp_ldf(ap[j] + ao))),
                                     acc[j]);
    }
}

/* One token a over the 8-row panel p of the panel layout in ymm lanes, as
 * q45k_panel8: per lane q6k_block's and q6k_panel's instructions.  Two
 * tokens once took this pass too (the 16-row pass read 10-11 GB/s from
 * DRAM); with its prefetches spread (kp_prefetch_part) the 16-row pass of
 * two tokens reads 22-26 GB/s against this one's 17-18 (bench_qgemm, every
 * shape; 28 / 19 cache-hot), so only one token comes here. */
AI __m256 q6k_panel8(bptr p, bptr a, int64_t nb, bptr next) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = 210 * (size_t)b, ao = QKA * (size_t)b;
        kp_prefetch_block(1, next, NULL, o, 210);
        const bptr x = p + 8 * o;
        __m256i isum = _mm256_setzero_si256();
        UNROLL for (int h = 0; h < 2; h++) UNROLL for (int q = 0; q < 2; q++) UNROLL for (int g = 0; g < 4; g++) {
                    /* code group g: sub-block 8h + q + 2g, elements 128h + 32g + 16q + .. */
                    const int sb = 8 * h + q + 2 * g;
                    __m256i c[4];
                    UNROLL for (int k = 0; k < 4; k++) {
                        const size_t ql = 64 * (size_t)h + 32 * (size_t)(g & 1) + 16 * (size_t)q;
                        const __m256i lo = _mm256_loadu_si256((const __m256i *)(x + 8 * ql + 32 * (size_t)k));
                        const __m256i qh = _mm256_loadu_si256(
                            (const __m256i *)(x + 8 * (128 + 32 * (size_t)h + 16 * (size_t)q) + 32 * (size_t)k));
                        const __m256i nib = g < 2 ? lo : _mm256_srli_epi16(lo, 4);
                        const __m256i hb = g == 0 ? _mm256_slli_epi16(qh, 4) : g == 1 ? _mm256_slli_epi16(qh, 2)
                                         : g == 2 ? qh : _mm256_srli_epi16(qh, 2);
                        c[k] = _mm256_or_si256(_mm256_and_si256(nib, m4), _mm256_and_si256(hb, m30));
                    }
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(x + 8 * (192 + 4 * (size_t)(sb / 4))));
                    const __m256i sc = _mm256_srai_epi32(_mm256_slli_epi32(v, 24 - 8 * (sb % 4)), 24);
                    const bptr ag = a + ao + 4 + 128 * (size_t)h + 32 * (size_t)g + 16 * (size_t)q;
                    int16_t bsum;
                    memcpy(&bsum, a + ao + 260 + 2 * (size_t)sb, 2);
                    __m256i d = _mm256_set1_epi32(-32 * (int32_t)bsum);
                    UNROLL for (int k = 0; k < 4; k++)
                        d = _mm256_dpbusd_epi32(d, c[k], _mm256_set1_epi32((int)kp_ld32(ag + 4 * k)));
                    isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(d, sc));
                }
        const __m256 dw = _mm256_cvtph_ps(kp_ldx(x + 8 * 208));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(kp_ldf(a + ao))), acc);
    }
    return acc;
}

/* A pass of nt tokens over the 16 rows wp of type T (Q4_K, Q5_K or Q6_K). */
enum { KQ_Q4, KQ_Q5, KQ_Q6 };
AI void kpanel_pass(const int T, const int PL, int nt, const bptr *wp, const bptr *ap, int64_t nb, bptr next,
                    bptr next_b, __m512 *acc) {
    if (T == KQ_Q6) q6k_panel(PL, nt, wp, ap, nb, next, next_b, acc);
    else q45k_panel(T == KQ_Q5, PL, nt, wp, ap, nb, next, next_b, acc);
}

/* One token over the two 8-row panels wp[0] and wp[1] one after the other
 * (kp_half_prefetch), lanes 8.. from wp[1].  next: the next 16 rows or
 * NULL; first: the rows' first pass. */
AI __m512 kpanel_halves(const int T, const bptr *wp, bptr a, int64_t nb, bptr next, int first) {
    __m256 half_acc[2];
    for (int half = 0; half < 2; half++) {
        if (half && wp[1] == wp[0]) { /* a lone panel */
            half_acc[1] = half_acc[0];
            break;
        }
        const bptr pf = kp_half_prefetch(wp, next, first, half);
        half_acc[half] = T == KQ_Q6 ? q6k_panel8(wp[half], a, nb, pf) : q45k_panel8(T == KQ_Q5, wp[half], a, nb, pf);
    }
    return kp_join_halves(half_acc[0], half_acc[1]);
}

/* Token chunks, 16-row panels (the last repeats row r1 - 1, never stored),
 * passes of up to KP_NT tokens; one token takes the instantiation with its
 * accumulators in registers. */
AI void kpanel_gemm(const int T, const int PL, const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1,
                    const void *act, size_t arb, int n_tok, float *y, int64_t ldy) {
    const int64_t nb = n / 256;
    const uint8_t *W = w, *A = act;
    int64_t chunk = (int64_t)KP_CHUNK_BYTES / (int64_t)(arb ? arb : 1);
    chunk = chunk > KP_NT ? chunk / KP_NT * KP_NT : chunk < 1 ? 1 : chunk;
    for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
        const int64_t t1 = t0 + chunk < n_tok ? t0 + chunk : n_tok;
        for (int64_t r = r0; r < r1; r += KP_ROWS) {
            bptr wp[KP_ROWS];
            const __mmask16 keep = kp_panel_rows(W, wrb, r, r1, wp);
            if (PL) kp_panel_pair(W, wrb, r, r1, wp);
            for (int64_t t = t0; t < t1;) {
                const int nt = t1 - t >= KP_NT ? KP_NT : (int)(t1 - t);
                bptr ap[KP_NT];
                for (int j = 0; j < nt; j++) ap[j] = A + (size_t)(t + j) * arb;
                __m512 acc[KP_NT];
                const bptr next = kp_next_panel(wp, wrb, r, r1, t == t0);
                const bptr next_b = kp_next_second(PL, next, wrb, r, r1);
                /* 1-4 tokens with the count a constant, as in qgemm_avx2.c's panel_gemm; in
                 * the panel layout one token one 8-row panel at a time */
                if (nt == 1 && PL) acc[0] = kpanel_halves(T, wp, ap[0], nb, next, t == t0);
                else if (nt == 1) kpanel_pass(T, PL, 1, wp, ap, nb, next, next_b, acc);
                else if (nt == 2) kpanel_pass(T, PL, 2, wp, ap, nb, next, next_b, acc);
                else if (nt == 3) kpanel_pass(T, PL, 3, wp, ap, nb, next, next_b, acc);
                else if (nt == 4) kpanel_pass(T, PL, 4, wp, ap, nb, next, next_b, acc);
                else kpanel_pass(T, PL, nt, wp, ap, nb, next, next_b, acc);
                kp_store(nt, acc, y, ldy, t, r, keep);
                t += nt;
            }
        }
    }
}

#define KPANEL_GEMM(NAME, T) TK_QKERNEL_PANEL_GEMMS(NAME, kpanel_gemm, T)
KPANEL_GEMM(q4_K_kpanel_gemm, KQ_Q4)
KPANEL_GEMM(q5_K_kpanel_gemm, KQ_Q5)
KPANEL_GEMM(q6_K_kpanel_gemm, KQ_Q6)

#define KP_KERNEL(WT, NAME, GEMM) \
    [WT] = {WT, TK_Q8_K, TK_ISA_AVX512, NAME "/avx512", tk_qkernel_act_bytes_q8_K, tk_qkernel_avx2_quant_q8_K, GEMM, \
            GEMM##_pl}
static const tk_qkernel kpanel_kernels[TK_DTYPE_LIMIT] = {
    KP_KERNEL(TK_Q4_K, "Q4_K", q4_K_kpanel_gemm),
    KP_KERNEL(TK_Q5_K, "Q5_K", q5_K_kpanel_gemm),
    KP_KERNEL(TK_Q6_K, "Q6_K", q6_K_kpanel_gemm),
};

const tk_qkernel *tk_qkernel_avx512_kpanel(tk_dtype wtype) { return tk_qkernel_pick(kpanel_kernels, wtype); }

#else

const tk_qkernel *tk_qkernel_avx512_kpanel(tk_dtype wtype) {
    (void)wtype;
    return NULL;
}

#endif
