/* AMX-INT8 kernels for Q4_0 and Q8_0 weights (Sapphire Rapids and later).
 * Compiled with AVX-512 + AMX flags only, reached only through
 * tk_qkernel_get after a CPU check (tk_isa_supported(TK_ISA_AMX), which
 * also asks Linux for the tile-data permission).  Other weight types fall
 * through to the AVX-512 kernels.
 *
 * Same packed activations as the AVX-512 kernels (TK_Q8_0 rows from the
 * AVX2 quantizer).  One 32-element block at a time, with tiles
 *
 *   A  up to 16 tokens x 32 int8: the activation quants of one block, loaded
 *      straight from the packed rows (stride act_row_bytes, no repacking);
 *   B  8 rows x 64 bytes, the weights of 16 output rows for that block in
 *      the VNNI layout: B row g = for each output row j (in order), its
 *      elements 4g..4g+3.  Built from the weight blocks by a 4x4 dword
 *      transpose in every 128-bit lane (four rows per lane), Q4_0 nibbles
 *      split and shifted to signed (q - 8), Q8_0 quants as they are;
 *   C  16 x 16 int32 = TDPBSSD(A, B): the exact integer block dot of every
 *      (token, row) pair.
 *
 * C is stored, and per token t the 16 rows' dots scale into one zmm of
 * accumulators: acc[t] = fma(float(C[t]), dw * da[t], acc[t]) (dw: the 16
 * rows' block scales, da[t]: the token's).  Blocks go strictly in order and
 * each output element has its own float accumulator (a lane), with no
 * horizontal sum, so an element's value depends only on its row, its token
 * and its weights/activations: never on r0/r1, n_tok, the token's position,
 * the tile shape or the K chunking (accumulators spilled to y between K
 * chunks are reloaded exactly).  Missing rows of a 16-row panel repeat its
 * last row (never stored); a token tail uses a tile shape of its own.
 *
 * Schedules (both give the same bits):
 *   n_tok <= 16  "stream": each block's B is built right before its TDPBSSD,
 *                the row is walked once (decode, small batches), and the
 *                next panel's weights are prefetched;
 *   n_tok > 16   B tiles (and scales) of a panel are built once per K chunk
 *                into a stack buffer and reused by every 16-token tile. */
#include "qgemm_impl.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AMX_TILE__) && defined(__AMX_INT8__)

#include <immintrin.h>
#include <stdalign.h>

#include "amx_tiles.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

typedef const uint8_t *bptr;

enum { W_Q4_0, W_Q8_0 };
AI size_t wbytes(int T) { return T == W_Q4_0 ? 18 : 34; }

enum {
    AB = 34,          /* bytes of one packed Q8_0 activation block */
    KC_STREAM = 256,  /* blocks per K chunk, stream schedule */
    KC_BUF = 64,      /* blocks per K chunk, buffered schedule (B: 32 KiB) */
    TC_BUF = 64,      /* tokens per token chunk, buffered schedule */
};
/* Token counts up to this use the VNNI integer dots, no tiles (measured
 * crossover with bench_qgemm on Sapphire Rapids: Q4_0 about 8, Q8_0 4-6). */
AI int m_vnni(int T) { return T == W_Q4_0 ? 8 : 4; }

/* Tiles: 0, 1 C; 2, 3 A (rows = min(n_tok, 16)); 4, 5 B; 6 C and 7 A of
 * the token tail (n_tok > 16, n_tok % 16 rows). */

AI uint32_t ld16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
AI float ldh(const void *p) { return _cvtsh_ss((unsigned short)ld16(p)); }
AI uint32_t ld32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
AI __m128i ldx(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

/* Lane L of the result = 16 bytes at wp[4L + k] + off. */
AI __m512i rows4(const bptr *wp, int k, size_t off) {
    /* masked broadcasts: load + blend, which spare the shuffle port that
     * vinserti32x4 and the transpose share */
    __m512i z = _mm512_castsi128_si512(ldx(wp[k] + off));
    z = _mm512_mask_broadcast_i32x4(z, 0x00F0, ldx(wp[4 + k] + off));
    z = _mm512_mask_broadcast_i32x4(z, 0x0F00, ldx(wp[8 + k] + off));
    return _mm512_mask_broadcast_i32x4(z, 0xF000, ldx(wp[12 + k] + off));
}

/* 16 rows' 16-byte pieces at off -> o[g] = dword g of rows 0..15 in order. */
AI void transpose16x4(const bptr *wp, size_t off, __m512i o[4]) {
    const __m512i z0 = rows4(wp, 0, off), z1 = rows4(wp, 1, off), z2 = rows4(wp, 2, off), z3 = rows4(wp, 3, off);
    const __m512i t0 = _mm512_unpacklo_epi32(z0, z1), t1 = _mm512_unpackhi_epi32(z0, z1);
    const __m512i t2 = _mm512_unpacklo_epi32(z2, z3), t3 = _mm512_unpackhi_epi32(z2, z3);
    o[0] = _mm512_unpacklo_epi64(t0, t2);
    o[1] = _mm512_unpackhi_epi64(t0, t2);
    o[2] = _mm512_unpacklo_epi64(t1, t3);
    o[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* The 16 rows' f16 block scales (first two bytes of the block at off). */
AI __m512 scales16(const bptr *wp, size_t off) {
    alignas(32) uint16_t h[16];
    UNROLL for (int i = 0; i < 16; i++) h[i] = (uint16_t)ld16(wp[i] + off);
    return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)h));
}

/* B tile (512 bytes at B) and scales of block b of the 16 rows wp. */
AI __m512 build_b(const int T, const bptr *wp, int64_t b, int8_t *B) {
    const size_t off = (size_t)b * wbytes(T);
    __m512i o[4];
    if (T == W_Q4_0) {
        /* qs[j]: element j in the low nibble, j + 16 in the high one */
        transpose16x4(wp, off + 2, o);
        const __m512i m4 = _mm512_set1_epi8(0x0F), s8 = _mm512_set1_epi8(8);
        UNROLL for (int g = 0; g < 4; g++) {
            _mm512_store_si512(B + 64 * g, _mm512_sub_epi8(_mm512_and_si512(o[g], m4), s8));
            _mm512_store_si512(B + 64 * (g + 4),
                               _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(o[g], 4), m4), s8));
        }
    } else {
        transpose16x4(wp, off + 2, o);
        UNROLL for (int g = 0; g < 4; g++) _mm512_store_si512(B + 64 * g, o[g]);
        transpose16x4(wp, off + 18, o);
        UNROLL for (int g = 0; g < 4; g++) _mm512_store_si512(B + 64 * (g + 4), o[g]);
    }
    return scales16(wp, off);
}

/* acc[t] += float(C[t]) * (dw * da[t]) for the M tokens of a stored C tile. */
AI void scale_acc(const int M, const int32_t *c, __m512 dw, const float *da, __m512 *acc) {
    UNROLL for (int t = 0; t < M; t++) {
        const __m512 ci = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * t));
        acc[t] = _mm512_fmadd_ps(ci, _mm512_mul_ps(dw, _mm512_set1_ps(da[t])), acc[t]);
    }
}

/* Weight pointers of the 16-row panel at r (rows past r1 repeat r1 - 1). */
AI void panel_rows(const uint8_t *W, size_t wrb, int64_t r, int64_t r1, bptr wp[16]) {
    UNROLL for (int i = 0; i < 16; i++) wp[i] = W + (size_t)(r + i < r1 ? r + i : r1 - 1) * wrb;
}

/* da[kb * ds + tt]: scale of token tc0 + tt, block kb0 + kb; if corr, also
 * corr[kb * ds + tt] = -off * (sum of that block's 32 quants). */
static void act_scales(const uint8_t *A, size_t arb, int64_t tc0, int64_t tc1, int64_t kb0, int kc, float *da,
                       int32_t *corr, int off, int ds) {
    const __m128i s80 = _mm_set1_epi8((char)0x80);
    for (int64_t t = tc0; t < tc1; t++) {
        const uint8_t *a = A + (size_t)t * arb + (size_t)kb0 * AB;
        for (int kb = 0; kb < kc; kb++) {
            const uint8_t *blk = a + (size_t)kb * AB;
            da[kb * ds + (t - tc0)] = ldh(blk);
            if (corr) { /* sum(q + 128) - 32 * 128 */
                const __m128i s = _mm_add_epi64(_mm_sad_epu8(_mm_xor_si128(ldx(blk + 2), s80), _mm_setzero_si128()),
                                                _mm_sad_epu8(_mm_xor_si128(ldx(blk + 18), s80), _mm_setzero_si128()));
                const int sum = _mm_cvtsi128_si32(_mm_add_epi64(s, _mm_unpackhi_epi64(s, s))) - 32 * 128;
                corr[kb * ds + (t - tc0)] = -off * sum;
            }
        }
    }
}

AI void acc_load(const int M, int first, const float *y, int64_t ldy, __mmask16 m, __m512 *acc) {
    UNROLL for (int t = 0; t < M; t++) acc[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, y + t * ldy);
}
AI void acc_store(const int M, float *y, int64_t ldy, __mmask16 m, const __m512 *acc) {
    UNROLL for (int t = 0; t < M; t++) _mm512_mask_storeu_ps(y + t * ldy, m, acc[t]);
}

/* The same integer dots with AVX512-VNNI, for the stream schedule's small
 * token counts (where a TDPBSSD, its tile loads and the C round trip cost
 * more than they save): the transposed weights as unsigned bytes (Q4_0
 * nibbles, Q8_0 quants + 128) times each activation dword broadcast over
 * the 16 rows, starting from corr = -offset * sum(a).  vpdpbusd does not
 * saturate and the sums are exact, so C[t] is bit for bit TDPBSSD's. */
AI void vnni_block(const int T, const int M, const bptr *wp, int64_t b, const uint8_t *a, size_t arb,
                   const float *da, const int32_t *corr, __m512 *acc) {
    const size_t off = (size_t)b * wbytes(T);
    __m512i w[8];
    __m512i o[4];
    transpose16x4(wp, off + 2, o);
    if (T == W_Q4_0) {
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        UNROLL for (int g = 0; g < 4; g++) {
            w[g] = _mm512_and_si512(o[g], m4);
            w[g + 4] = _mm512_and_si512(_mm512_srli_epi16(o[g], 4), m4);
        }
    } else {
        const __m512i s80 = _mm512_set1_epi8((char)0x80);
        UNROLL for (int g = 0; g < 4; g++) w[g] = _mm512_xor_si512(o[g], s80);
        transpose16x4(wp, off + 18, o);
        UNROLL for (int g = 0; g < 4; g++) w[g + 4] = _mm512_xor_si512(o[g], s80);
    }
    const __m512 dw = scales16(wp, off);
    UNROLL for (int t = 0; t < M; t++) {
        const uint8_t *q = a + (size_t)t * arb + (size_t)b * AB + 2;
        __m512i c = _mm512_set1_epi32(corr[t]);
        UNROLL for (int g = 0; g < 8; g++) c = _mm512_dpbusd_epi32(c, w[g], _mm512_set1_epi32((int)ld32(q + 4 * g)));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), _mm512_mul_ps(dw, _mm512_set1_ps(da[t])), acc[t]);
    }
}

/* Stream schedule: one token tile of M (= n_tok <= 16) tokens, blocks
 * [kb0, kb0 + kc) of the panel wp (integer dots by VNNI for M <= m_vnni,
 * else B built per block for TDPBSSD).  pn: the address of the next 16
 * rows (pbytes bytes, nbr blocks a row), prefetched along (prefetches are
 * hints: they read nothing and cannot fault, even past the rows given). */
AI void run_stream(const int T, const int M, const bptr *wp, uintptr_t pn, size_t pbytes, int64_t nbr,
                   const uint8_t *a, size_t arb,
                   int64_t kb0, int kc, const float *da, const int32_t *corr, int first, float *y, int64_t ldy,
                   __mmask16 m) {
    alignas(64) int8_t B[2][512];
    alignas(64) int32_t C[2][256];
    __m512 acc[16];
    acc_load(M, first, y, ldy, m, acc);
    const size_t wb = wbytes(T);
    int kb = 0;
    if (M <= m_vnni(T)) {
        for (; kb < kc; kb++) {
            const int64_t b = kb0 + kb;
            /* prefetch: to L2, the next panel (16 contiguous rows) as one
             * sequential stream, 1/nbr of it per block; to L1, the lines of
             * this panel's rows that start 256 bytes ahead (measured: about
             * +5% decode tokens/s over prefetching the next panel row by row) */
            for (size_t o = (size_t)b * pbytes / nbr / 64 * 64; o < (size_t)(b + 1) * pbytes / nbr; o += 64)
                _mm_prefetch((const char *)(pn + o), _MM_HINT_T1);
            for (size_t o = ((size_t)b * wb + 63) / 64 * 64; o < (size_t)(b + 1) * wb; o += 64)
                UNROLL for (int i = 0; i < 16; i++) _mm_prefetch((const char *)((uintptr_t)wp[i] + o + 256), _MM_HINT_T0);
            vnni_block(T, M, wp, b, a, arb, da + kb * 16, corr + kb * 16, acc);
        }
        acc_store(M, y, ldy, m, acc);
        return;
    }
    for (; kb + 2 <= kc; kb += 2) {
        const int64_t b = kb0 + kb;
        for (size_t o = (size_t)b * pbytes / nbr / 64 * 64; o < (size_t)(b + 2) * pbytes / nbr; o += 64)
            _mm_prefetch((const char *)(pn + o), _MM_HINT_T1);
        const __m512 dw0 = build_b(T, wp, b, B[0]);
        const __m512 dw1 = build_b(T, wp, b + 1, B[1]);
        TK_TILE_ZERO(0);
        TK_TILE_ZERO(1);
        TK_TILE_LOAD(2, a + (size_t)b * AB + 2, (long)arb);
        TK_TILE_LOAD(4, B[0], 64);
        TK_TILE_DPBSSD(0, 2, 4);
        TK_TILE_LOAD(3, a + (size_t)(b + 1) * AB + 2, (long)arb);
        TK_TILE_LOAD(5, B[1], 64);
        TK_TILE_DPBSSD(1, 3, 5);
        TK_TILE_STORE(0, C[0], 64);
        TK_TILE_STORE(1, C[1], 64);
        scale_acc(M, C[0], dw0, da + kb * 16, acc);
        scale_acc(M, C[1], dw1, da + (kb + 1) * 16, acc);
    }
    if (kb < kc) {
        const int64_t b = kb0 + kb;
        const __m512 dw0 = build_b(T, wp, b, B[0]);
        TK_TILE_ZERO(0);
        TK_TILE_LOAD(2, a + (size_t)b * AB + 2, (long)arb);
        TK_TILE_LOAD(4, B[0], 64);
        TK_TILE_DPBSSD(0, 2, 4);
        TK_TILE_STORE(0, C[0], 64);
        scale_acc(M, C[0], dw0, da + kb * 16, acc);
    }
    acc_store(M, y, ldy, m, acc);
}

/* Buffered schedule: one token tile of 16 (TAIL = 0: tiles 0-5, two blocks
 * per step) or M < 16 tokens (TAIL = 1: tiles 6, 7, 4), over kc blocks
 * whose B tiles and scales are in Bb / dwb; da has stride TC_BUF. */
AI void run_buf(const int M, const int TAIL, const int8_t *Bb, const float *dwb, const uint8_t *a, size_t arb,
                int64_t kb0, int kc, const float *da, int first, float *y, int64_t ldy, __mmask16 m) {
    alignas(64) int32_t C[2][256];
    __m512 acc[16];
    acc_load(M, first, y, ldy, m, acc);
    int kb = 0;
    if (!TAIL)
        for (; kb + 2 <= kc; kb += 2) {
            const int64_t b = kb0 + kb;
            TK_TILE_ZERO(0);
            TK_TILE_ZERO(1);
            TK_TILE_LOAD(2, a + (size_t)b * AB + 2, (long)arb);
            TK_TILE_LOAD(4, Bb + 512 * kb, 64);
            TK_TILE_DPBSSD(0, 2, 4);
            TK_TILE_LOAD(3, a + (size_t)(b + 1) * AB + 2, (long)arb);
            TK_TILE_LOAD(5, Bb + 512 * (kb + 1), 64);
            TK_TILE_DPBSSD(1, 3, 5);
            TK_TILE_STORE(0, C[0], 64);
            TK_TILE_STORE(1, C[1], 64);
            scale_acc(M, C[0], _mm512_load_ps(dwb + 16 * kb), da + kb * TC_BUF, acc);
            scale_acc(M, C[1], _mm512_load_ps(dwb + 16 * (kb + 1)), da + (kb + 1) * TC_BUF, acc);
        }
    for (; kb < kc; kb++) {
        const int64_t b = kb0 + kb;
        if (TAIL) {
            TK_TILE_ZERO(6);
            TK_TILE_LOAD(7, a + (size_t)b * AB + 2, (long)arb);
            TK_TILE_LOAD(4, Bb + 512 * kb, 64);
            TK_TILE_DPBSSD(6, 7, 4);
            TK_TILE_STORE(6, C[0], 64);
        } else {
            TK_TILE_ZERO(0);
            TK_TILE_LOAD(2, a + (size_t)b * AB + 2, (long)arb);
            TK_TILE_LOAD(4, Bb + 512 * kb, 64);
            TK_TILE_DPBSSD(0, 2, 4);
            TK_TILE_STORE(0, C[0], 64);
        }
        scale_acc(M, C[0], _mm512_load_ps(dwb + 16 * kb), da + kb * TC_BUF, acc);
    }
    acc_store(M, y, ldy, m, acc);
}

typedef void (*stream_fn)(const bptr *wp, uintptr_t pn, size_t pbytes, int64_t nbr, const uint8_t *a, size_t arb,
                          int64_t kb0, int kc,
                          const float *da, const int32_t *corr, int first, float *y, int64_t ldy, __mmask16 m);
typedef void (*buf_fn)(const int8_t *Bb, const float *dwb, const uint8_t *a, size_t arb, int64_t kb0, int kc,
                       const float *da, int first, float *y, int64_t ldy, __mmask16 m);

AI void gemm_amx(const int T, const stream_fn *sf, const buf_fn *bf, const void *w, size_t wrb, int64_t n,
                     int64_t r0, int64_t r1, const void *act, size_t arb, int n_tok, float *y, int64_t ldy) {
    if (r0 >= r1 || n_tok <= 0) return;
    const uint8_t *W = w, *A = act;
    const int64_t nb = n / 32;
    tk_amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    const int mp = n_tok < 16 ? n_tok : 16, mt = n_tok > 16 ? n_tok % 16 : 0;
    for (int i = 0; i < 2; i++) {
        cfg.colsb[i] = 64, cfg.rows[i] = (uint8_t)mp;         /* C */
        cfg.colsb[2 + i] = 32, cfg.rows[2 + i] = (uint8_t)mp; /* A */
        cfg.colsb[4 + i] = 64, cfg.rows[4 + i] = 8;           /* B */
    }
    if (mt) {
        cfg.colsb[6] = 64, cfg.rows[6] = (uint8_t)mt;
        cfg.colsb[7] = 32, cfg.rows[7] = (uint8_t)mt;
    }
    const int tiles = n_tok > m_vnni(T);
    if (tiles) tk_amx_load_config(&cfg);
    if (n_tok <= 16) {
        alignas(64) float da[KC_STREAM * 16];
        alignas(64) int32_t corr[KC_STREAM * 16];
        for (int64_t kb0 = 0; kb0 < nb; kb0 += KC_STREAM) {
            const int kc = nb - kb0 < KC_STREAM ? (int)(nb - kb0) : KC_STREAM;
            act_scales(A, arb, 0, n_tok, kb0, kc, da, n_tok <= m_vnni(T) ? corr : NULL, T == W_Q4_0 ? 8 : 128, 16);
            for (int64_t r = r0; r < r1; r += 16) {
                bptr wp[16];
                panel_rows(W, wrb, r, r1, wp);
                /* the next 16 rows, to prefetch, even past r1 (most often the
                 * next task's rows; a prefetch reads nothing and cannot fault) */
                const uintptr_t pn = (uintptr_t)W + (uintptr_t)(r + 16) * wrb;
                const __mmask16 m = (__mmask16)(r1 - r >= 16 ? 0xFFFF : (1u << (r1 - r)) - 1);
                sf[n_tok - 1](wp, pn, 16 * wrb, nb, A, arb, kb0, kc, da, corr, kb0 == 0, y + r, ldy, m);
            }
        }
    } else {
        alignas(64) int8_t Bb[KC_BUF * 512];
        alignas(64) float dwb[KC_BUF * 16];
        alignas(64) float da[KC_BUF * TC_BUF];
        for (int64_t tc0 = 0; tc0 < n_tok; tc0 += TC_BUF) {
            const int64_t tc1 = tc0 + TC_BUF < n_tok ? tc0 + TC_BUF : n_tok;
            for (int64_t kb0 = 0; kb0 < nb; kb0 += KC_BUF) {
                const int kc = nb - kb0 < KC_BUF ? (int)(nb - kb0) : KC_BUF;
                act_scales(A, arb, tc0, tc1, kb0, kc, da, NULL, 0, TC_BUF);
                for (int64_t r = r0; r < r1; r += 16) {
                    bptr wp[16];
                    panel_rows(W, wrb, r, r1, wp);
                    const __mmask16 m = (__mmask16)(r1 - r >= 16 ? 0xFFFF : (1u << (r1 - r)) - 1);
                    for (int kb = 0; kb < kc; kb++) {
                        _mm512_store_ps(dwb + 16 * kb, build_b(T, wp, kb0 + kb, Bb + 512 * kb));
                    }
                    for (int64_t t = tc0; t < tc1; t += 16) {
                        const int nt = tc1 - t < 16 ? (int)(tc1 - t) : 16;
                        bf[nt - 1](Bb, dwb, A + (size_t)t * arb, arb, kb0, kc, da + (t - tc0), kb0 == 0,
                                   y + t * ldy + r, ldy, m);
                    }
                }
            }
        }
    }
    if (tiles) tk_amx_release();
}

/* ================= instantiation ================= */

#define SF(T, NAME, M)                                                                                            \
    static void NAME##_s##M(const bptr *wp, uintptr_t pn, size_t pbytes, int64_t nbr, const uint8_t *a,          \
                            size_t arb, int64_t kb0, int kc,                                                      \
                            const float *da, const int32_t *corr, int first, float *y, int64_t ldy,              \
                            __mmask16 m) {                                                                        \
        run_stream(T, M, wp, pn, pbytes, nbr, a, arb, kb0, kc, da, corr, first, y, ldy, m);                                        \
    }
#define BF(NAME, M, TAIL)                                                                                         \
    static void NAME##_b##M(const int8_t *Bb, const float *dwb, const uint8_t *a, size_t arb, int64_t kb0,       \
                            int kc, const float *da, int first, float *y, int64_t ldy, __mmask16 m) {            \
        run_buf(M, TAIL, Bb, dwb, a, arb, kb0, kc, da, first, y, ldy, m);                                        \
    }
#define SF16(T, NAME)                                                                                             \
    SF(T, NAME, 1) SF(T, NAME, 2) SF(T, NAME, 3) SF(T, NAME, 4) SF(T, NAME, 5) SF(T, NAME, 6) SF(T, NAME, 7)    \
    SF(T, NAME, 8) SF(T, NAME, 9) SF(T, NAME, 10) SF(T, NAME, 11) SF(T, NAME, 12) SF(T, NAME, 13)                \
    SF(T, NAME, 14) SF(T, NAME, 15) SF(T, NAME, 16)                                                              \
    static const stream_fn NAME##_sf[16] = {NAME##_s1,  NAME##_s2,  NAME##_s3,  NAME##_s4, NAME##_s5,  NAME##_s6, \
                                            NAME##_s7,  NAME##_s8,  NAME##_s9,  NAME##_s10, NAME##_s11,           \
                                            NAME##_s12, NAME##_s13, NAME##_s14, NAME##_s15, NAME##_s16};

SF16(W_Q4_0, q4_0)
SF16(W_Q8_0, q8_0)

/* the buffered token tiles only depend on the tile shape, not on the type */
BF(any, 1, 1) BF(any, 2, 1) BF(any, 3, 1) BF(any, 4, 1) BF(any, 5, 1) BF(any, 6, 1) BF(any, 7, 1) BF(any, 8, 1)
BF(any, 9, 1) BF(any, 10, 1) BF(any, 11, 1) BF(any, 12, 1) BF(any, 13, 1) BF(any, 14, 1) BF(any, 15, 1)
BF(any, 16, 0)
static const buf_fn any_bf[16] = {any_b1, any_b2,  any_b3,  any_b4,  any_b5,  any_b6,  any_b7,  any_b8,
                                  any_b9, any_b10, any_b11, any_b12, any_b13, any_b14, any_b15, any_b16};

static void q4_0_gemm(const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1, const void *act, size_t arb,
                      int n_tok, float *y, int64_t ldy) {
    gemm_amx(W_Q4_0, q4_0_sf, any_bf, w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);
}
static void q8_0_gemm(const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1, const void *act, size_t arb,
                      int n_tok, float *y, int64_t ldy) {
    gemm_amx(W_Q8_0, q8_0_sf, any_bf, w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);
}

static const tk_qkernel amx_kernels[TK_DTYPE_LIMIT] = {
    TK_QKERNEL_SIMD_KERNEL(TK_ISA_AMX, "/amx", TK_Q4_0, Q8_0, "Q4_0", q4_0_gemm),
    TK_QKERNEL_SIMD_KERNEL(TK_ISA_AMX, "/amx", TK_Q8_0, Q8_0, "Q8_0", q8_0_gemm),
};

const tk_qkernel *tk_qkernel_amx(tk_dtype wtype) { return tk_qkernel_pick(amx_kernels, wtype); }

#else

const tk_qkernel *tk_qkernel_amx(tk_dtype wtype) {
    (void)wtype;
    return NULL;
}

#endif
