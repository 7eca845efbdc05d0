/* AVX-512 + VNNI Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL in 16-row panels
 * (docs/kernels.md, "AVX-512 panels"): the rows in the 16 dword lanes of a
 * zmm, each block's quants of 16 rows transposed in registers from the
 * original layout (qgemm_avx512_panel.h) or loaded from two 8-row panels of
 * the panel layout (kernels/panels.h, made at load: no transposes),
 * unpacked once and used for up to KP_NT tokens; each 4 activation bytes of
 * a token are broadcast, so one vpdpbusd does 4 elements of 16 rows.
 * vpdpbusd takes unsigned weights: Q4_0's and Q4_1's codes 0..15 as they
 * are, Q5_0's and Q5_1's 0..31 (the fifth bits from qh), Q8_0's quants + 128
 * (the sign bit flipped), IQ4_NL's code-book values + 128 (one vpshufb of
 * the codes); the offset (8, 16 or 128 times the sum of the token's block
 * quants, computed once per token chunk) is subtracted from the integer.
 *
 * Per block and lane (one row, one token), with the Q8_0 activations:
 *   isum = sum of code * a - offset * sum(a)     (exact in int32)
 *   acc  = fma(float(isum), d_w * d_a, acc)
 * and for Q4_1 and Q5_1 (Q8_1 activations, s_a = d_a * sum(a); no offset)
 *   acc  = fma(float(isum), d_w * d_a, acc); acc = fma(m_w, s_a, acc)
 * blocks in order, every lane the same instructions: a (row, token) result
 * depends on nothing but its row and its token, not the batch, the token
 * pass, the panel a row falls in or the row split.  Rows of more than
 * TOKDATA_MAX blocks take the tiled kernel (Q5_0: the AVX2 one; a choice
 * made by the row length alone, so still the same bits for every batch and
 * split).
 *
 * Bounds (|a| <= 127): vpdpbusd sums 4 products of at most 255 * 127 per
 * lane; a block's sum is at most 32 * 255 * 127 < 2^20 and the offset term
 * 128 * 32 * 127 < 2^19: exact, and exact again as a float (< 2^24). */
#include "qgemm_impl.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__)

#include "qgemm_avx512_panel.h"

enum { LP_Q4_0, LP_Q8_0, LP_IQ4_NL, LP_Q5_0, LP_Q4_1, LP_Q5_1 };
enum { TOKDATA_MAX = 4096 }; /* token-blocks of one chunk's data */

/* Block bytes of type T; the byte its quants start at; its qh (Q5_0, Q5_1);
 * whether it has a min (the _1 types, with Q8_1 activations: d, s = d *
 * sum(q), qs; else Q8_0: d, qs); the activation block's bytes. */
AI size_t lp_wb(int T) { return T == LP_Q8_0 ? 34 : T == LP_Q5_0 ? 22 : T == LP_Q4_1 ? 20 : T == LP_Q5_1 ? 24 : 18; }
AI size_t lp_qo(int T) { return T == LP_Q5_0 ? 6 : T == LP_Q4_1 ? 4 : T == LP_Q5_1 ? 8 : 2; }
AI size_t lp_ho(int T) { return T == LP_Q5_1 ? 4 : 2; }
AI int lp_min(int T) { return T == LP_Q4_1 || T == LP_Q5_1; }
AI size_t lp_ab(int T) { return lp_min(T) ? 36 : 34; }

typedef struct tokblk {
    float d;     /* the activation block's scale */
    float s;     /* _1 types: its d * sum(q) (the min's factor) */
    int32_t off; /* the weights' offset (8, 16 or 128; _1 types 0) times the sum of its quants */
} tokblk;

/* Q5_0: the fifth bits of the codes in a dword lane's 4 bytes, bit 4 of
 * byte b = bit s + b of the lane's qh (the 4 bits spread by one multiply:
 * the copies land 7 bits apart and never carry), as qgemm_avx2.c's
 * q5_bits; 16 and 8 lanes. */
AI __m512i lp_q5_bits(__m512i qh, int s) {
    const __m512i x = _mm512_and_si512(_mm512_srli_epi32(qh, s), _mm512_set1_epi32(0xF));
    return _mm512_and_si512(_mm512_mullo_epi32(x, _mm512_set1_epi32(0x02040810)), _mm512_set1_epi8(0x10));
}
AI __m256i lp_q5_bits8(__m256i qh, int s) {
    const __m256i x = _mm256_and_si256(_mm256_srli_epi32(qh, s), _mm256_set1_epi32(0xF));
    return _mm256_and_si256(_mm256_mullo_epi32(x, _mm256_set1_epi32(0x02040810)), _mm256_set1_epi8(0x10));
}

AI float lp_ldh(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Rows wp (PL: kp_rows16) of type T, tokens j = 0..nt at a + j * arb, their
 * data of block b at tb[b * tbs + j]; acc[j] lane i = row i.  next (and in
 * the panel layout next_b): the next 16 rows or NULL, one block's worth
 * prefetched per block step (kp_prefetch_block). */
AI void lpanel(const int T, const int PL, int nt, const bptr *wp, bptr a, size_t arb, const tokblk *tb, size_t tbs,
               int64_t nb, bptr next, bptr next_b, __m512 *acc) {
    const size_t wb = lp_wb(T), qo = lp_qo(T), ab = lp_ab(T);
    const __m512i m4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8((char)0x80);
    const __m512i book = _mm512_xor_si512(_mm512_broadcast_i32x4(kp_ldx(tk_kvalues_iq4nl)), flip); /* values + 128 */
    for (int j = 0; j < nt; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = wb * (size_t)b;
        const bptr ablk = a + ab * (size_t)b + ab - 32;
        const tokblk *tk = tb + tbs * (size_t)b;
        kp_prefetch_block(PL, next, next_b, o, wb);
        /* q[k]: elements 4k..4k+3 of each row (4-bit codes: low nibbles = 0..15, high = 16..31) */
        __m512i q[8];
        if (T != LP_Q8_0) {
            __m512i v[4], h[4]; /* Q5_0, Q5_1: h[0] lane i = qh of row i */
            kp_rows16(PL, wp, o + qo, v);
            if (T == LP_Q5_0 || T == LP_Q5_1) kp_rows16(PL, wp, o + lp_ho(T), h);
            UNROLL for (int k = 0; k < 4; k++) {
                q[k] = _mm512_and_si512(v[k], m4);
                q[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v[k], 4), m4);
                if (T == LP_Q5_0 || T == LP_Q5_1) {
                    q[k] = _mm512_or_si512(q[k], lp_q5_bits(h[0], 4 * k));
                    q[k + 4] = _mm512_or_si512(q[k + 4], lp_q5_bits(h[0], 16 + 4 * k));
                }
                if (T == LP_IQ4_NL) {
                    q[k] = _mm512_shuffle_epi8(book, q[k]);
                    q[k + 4] = _mm512_shuffle_epi8(book, q[k + 4]);
                }
            }
        } else {
            kp_rows16(PL, wp, o + 2, q);
            kp_rows16(PL, wp, o + 18, q + 4);
            UNROLL for (int k = 0; k < 8; k++) q[k] = _mm512_xor_si512(q[k], flip);
        }
        const __m512 dw = kp_scales16(PL, wp, o), mw = lp_min(T) ? kp_scales16(PL, wp, o + 2) : dw;
        for (int j = 0; j < nt; j++) {
            const bptr aj = ablk + arb * (size_t)j;
            __m512i isum = _mm512_setzero_si512();
            UNROLL for (int k = 0; k < 8; k++) isum = _mm512_dpbusd_epi32(isum, q[k], kp_bcast(aj + 4 * k));
            if (!lp_min(T)) isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(tk[j].off));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(tk[j].d)), acc[j]);
            if (lp_min(T)) acc[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(tk[j].s), acc[j]);
        }
    }
}

/* One token over the 8-row panel p of the panel layout, in ymm lanes: per
 * lane lpanel's instructions (the same integers, the same float roundings),
 * so a row gets the same bits from either.  One token reads the panels one
 * after the other, a single sequential stream: two adjacent panels at a time
 * read slower from DRAM (docs/kernels.md).  tk: the token's data of block b
 * at tk[b * tbs]; next: the next panel or NULL, one block's worth prefetched
 * per block step. */
AI __m256 lpanel8(const int T, bptr p, bptr a, const tokblk *tk, size_t tbs, int64_t nb, bptr next) {
    const size_t wb = lp_wb(T), qo = lp_qo(T), ab = lp_ab(T);
    const __m256i m4 = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8((char)0x80);
    const __m256i book = _mm256_xor_si256(_mm256_broadcastsi128_si256(kp_ldx(tk_kvalues_iq4nl)), flip);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = wb * (size_t)b;
        const bptr ablk = a + ab * (size_t)b + ab - 32, x = p + 8 * (o + qo);
        kp_prefetch_block(1, next, NULL, o, wb);
        __m256i q[8];
        if (T != LP_Q8_0) {
            const bool q5 = T == LP_Q5_0 || T == LP_Q5_1;
            const __m256i h = q5 ? _mm256_loadu_si256((const __m256i *)(p + 8 * (o + lp_ho(T)))) : m4;
            UNROLL for (int k = 0; k < 4; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(x + 32 * k));
                q[k] = _mm256_and_si256(v, m4);
                q[k + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                if (q5) {
                    q[k] = _mm256_or_si256(q[k], lp_q5_bits8(h, 4 * k));
                    q[k + 4] = _mm256_or_si256(q[k + 4], lp_q5_bits8(h, 16 + 4 * k));
                }
                if (T == LP_IQ4_NL) {
                    q[k] = _mm256_shuffle_epi8(book, q[k]);
                    q[k + 4] = _mm256_shuffle_epi8(book, q[k + 4]);
                }
            }
        } else { /* bytes 2..17 then 18..33 of the rows: 256 consecutive bytes */
            UNROLL for (int k = 0; k < 8; k++)
                q[k] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + 32 * k)), flip);
        }
        const __m256 dw = _mm256_cvtph_ps(kp_ldx(p + 8 * o));
        __m256i isum = _mm256_setzero_si256();
        UNROLL for (int k = 0; k < 8; k++)
            isum = _mm256_dpbusd_epi32(isum, q[k], _mm256_set1_epi32((int)kp_ld32(ablk + 4 * k)));
        const tokblk *t = tk + tbs * (size_t)b;
        if (!lp_min(T)) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(t->off));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(t->d)), acc);
        if (lp_min(T)) acc = _mm256_fmadd_ps(_mm256_cvtph_ps(kp_ldx(p + 8 * (o + 2))), _mm256_set1_ps(t->s), acc);
    }
    return acc;
}

/* Token chunks of at most TOKDATA_MAX token-blocks (their scale and offset
 * in a stack buffer, block-major: a pass reads one run of it per block),
 * 16-row panels (the last repeats row r1 - 1, never stored), passes of up
 * to KP_NT tokens; one token takes the instantiation with its accumulators
 * in registers. */
AI void lpanel_gemm(const int T, const int PL, const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1,
                    const void *act, size_t arb, int n_tok, float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    if (nb == 0 || nb > TOKDATA_MAX) { /* Q5_0, Q4_1, Q5_1 have no AVX-512 tiles: the AVX2 kernels */
        const tk_dtype wt = T == LP_Q4_0 ? TK_Q4_0 : T == LP_Q8_0 ? TK_Q8_0 : T == LP_Q5_0 ? TK_Q5_0
                          : T == LP_Q4_1 ? TK_Q4_1 : T == LP_Q5_1 ? TK_Q5_1 : TK_IQ4_NL;
        const int tiles = T == LP_Q4_0 || T == LP_Q8_0 || T == LP_IQ4_NL;
        (tiles ? tk_qkernel_avx512_tiled(wt) : tk_qkernel_avx2(wt))->gemm(w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);
        return;
    }
    tokblk td[TOKDATA_MAX];
    const uint8_t *W = w, *A = act;
    const int32_t offset = T == LP_Q4_0 ? 8 : T == LP_Q5_0 ? 16 : 128;
    int64_t chunk = TOKDATA_MAX / nb;
    if (chunk > KP_NT) chunk = chunk / KP_NT * KP_NT;
    for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
        const int64_t t1 = t0 + chunk < n_tok ? t0 + chunk : n_tok;
        for (int64_t t = t0; t < t1; t++)
            for (int64_t b = 0; b < nb; b++) {
                const bptr blk = A + (size_t)t * arb + lp_ab(T) * (size_t)b;
                tokblk *tb = &td[b * (t1 - t0) + (t - t0)];
                tb->d = lp_ldh(blk);
                if (lp_min(T)) { /* no offset: the min term takes s */
                    tb->s = lp_ldh(blk + 2);
                    tb->off = 0;
                    continue;
                }
                /* the sum of the 32 quants: vpsadbw sums a + 128 (as unsigned bytes), less 32 * 128 */
                const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)),
                                                                   _mm256_set1_epi8((char)0x80)),
                                                  _mm256_setzero_si256());
                const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                const int32_t sum = (int32_t)(_mm_cvtsi128_si32(s2) + _mm_extract_epi32(s2, 2)) - 32 * 128;
                tb->s = 0.0f;
                tb->off = offset * sum;
            }
        for (int64_t r = r0; r < r1; r += KP_ROWS) {
            bptr wp[KP_ROWS];
            const __mmask16 keep = kp_panel_rows(W, wrb, r, r1, wp);
            if (PL) kp_panel_pair(W, wrb, r, r1, wp);
            for (int64_t t = t0; t < t1;) {
                const int nt = t1 - t >= KP_NT ? KP_NT : (int)(t1 - t);
                __m512 acc[KP_NT];
                const bptr next = kp_next_panel(wp, wrb, r, r1, t == t0);
                const bptr next_b = kp_next_second(PL, next, wrb, r, r1);
                const bptr a = A + (size_t)t * arb;
                const tokblk *tb = td + (t - t0);
                const size_t ts = (size_t)(t1 - t0);
                /* 1-4 tokens with the count a constant, as in qgemm_avx2.c's panel_gemm; one
                 * token in the panel layout one 8-row panel at a time (lpanel8) */
                if (nt == 1 && PL) {
                    const __m256 lo = lpanel8(T, wp[0], a, tb, ts, nb, kp_half_prefetch(wp, next, t == t0, 0));
                    const __m256 hi =
                        wp[1] != wp[0] ? lpanel8(T, wp[1], a, tb, ts, nb, kp_half_prefetch(wp, next, t == t0, 1)) : lo;
                    acc[0] = kp_join_halves(lo, hi);
                } else if (nt == 1) lpanel(T, PL, 1, wp, a, arb, tb, ts, nb, next, next_b, acc);
                else if (nt == 2) lpanel(T, PL, 2, wp, a, arb, tb, ts, nb, next, next_b, acc);
                else if (nt == 3) lpanel(T, PL, 3, wp, a, arb, tb, ts, nb, next, next_b, acc);
                else if (nt == 4) lpanel(T, PL, 4, wp, a, arb, tb, ts, nb, next, next_b, acc);
                else lpanel(T, PL, nt, wp, a, arb, tb, ts, nb, next, next_b, acc);
                kp_store(nt, acc, y, ldy, t, r, keep);
                t += nt;
            }
        }
    }
}

#define LPANEL_GEMM(NAME, T) TK_QKERNEL_PANEL_GEMMS(NAME, lpanel_gemm, T)
LPANEL_GEMM(q4_0_lpanel_gemm, LP_Q4_0)
LPANEL_GEMM(q8_0_lpanel_gemm, LP_Q8_0)
LPANEL_GEMM(iq4_nl_lpanel_gemm, LP_IQ4_NL)
LPANEL_GEMM(q5_0_lpanel_gemm, LP_Q5_0)
LPANEL_GEMM(q4_1_lpanel_gemm, LP_Q4_1)
LPANEL_GEMM(q5_1_lpanel_gemm, LP_Q5_1)

#define LP_KERNEL(WT, AT, NAME, GEMM) \
    [WT] = {WT, TK_##AT, TK_ISA_AVX512, NAME "/avx512", TK_QKERNEL_SIMD_PACK_##AT, GEMM, GEMM##_pl}
static const tk_qkernel lpanel_kernels[TK_DTYPE_LIMIT] = {
    LP_KERNEL(TK_Q4_0, Q8_0, "Q4_0", q4_0_lpanel_gemm),  LP_KERNEL(TK_Q8_0, Q8_0, "Q8_0", q8_0_lpanel_gemm),
    LP_KERNEL(TK_IQ4_NL, Q8_0, "IQ4_NL", iq4_nl_lpanel_gemm), LP_KERNEL(TK_Q5_0, Q8_0, "Q5_0", q5_0_lpanel_gemm),
    LP_KERNEL(TK_Q4_1, Q8_1, "Q4_1", q4_1_lpanel_gemm),  LP_KERNEL(TK_Q5_1, Q8_1, "Q5_1", q5_1_lpanel_gemm),
};

const tk_qkernel *tk_qkernel_avx512_lpanel(tk_dtype wtype) { return tk_qkernel_pick(lpanel_kernels, wtype); }

#else

const tk_qkernel *tk_qkernel_avx512_lpanel(tk_dtype wtype) {
    (void)wtype;
    return NULL;
}

#endif
