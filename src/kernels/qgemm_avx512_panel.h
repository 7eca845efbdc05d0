/* Helpers of the AVX-512 16-row panel kernels (qgemm_avx512_kpanel.c: the
 * k-quants, qgemm_avx512_lpanel.c: the 32-element block types): rows in the
 * 16 dword lanes of a zmm, their bytes transposed in registers from the
 * original layout.  Included inside each file's AVX-512 guard. */
#ifndef TK_QGEMM_AVX512_PANEL_H
#define TK_QGEMM_AVX512_PANEL_H

#include <immintrin.h>
#include <string.h>

#include "qgemm_impl.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

typedef const uint8_t *bptr;

enum { KP_ROWS = 16, KP_NT = 32 }; /* rows per panel, tokens per pass */

AI uint32_t kp_ld32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
AI float kp_ldf(const void *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
AI __m128i kp_ldx(const void *p) { return _mm_loadu_si128((const __m128i *)p); }
AI __m512i kp_bcast(bptr p) { return _mm512_set1_epi32((int)kp_ld32(p)); }

/* 16 bytes at byte offset o of 16 rows -> v[k], dword lane i = dword k of row i. */
AI void kp_transpose(const bptr *wp, size_t o, __m512i v[4]) {
    __m512i r[4];
    UNROLL for (int i = 0; i < 4; i++) {
        __m512i z = _mm512_castsi128_si512(kp_ldx(wp[i] + o));
        z = _mm512_inserti32x4(z, kp_ldx(wp[i + 4] + o), 1);
        z = _mm512_inserti32x4(z, kp_ldx(wp[i + 8] + o), 2);
        r[i] = _mm512_inserti32x4(z, kp_ldx(wp[i + 12] + o), 3);
    }
    /* 128-bit lane L of r[i] = row i + 4L; the 4x4 dword transpose per lane */
    const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]), t1 = _mm512_unpackhi_epi32(r[0], r[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(r[2], r[3]), t3 = _mm512_unpackhi_epi32(r[2], r[3]);
    v[0] = _mm512_unpacklo_epi64(t0, t2);
    v[1] = _mm512_unpackhi_epi64(t0, t2);
    v[2] = _mm512_unpacklo_epi64(t1, t3);
    v[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* The f16 at byte offset o of each of the 16 rows -> 16 floats, lane i = row i. */
AI __m512 kp_halves(const bptr *wp, size_t o) {
    uint64_t h[4];
    UNROLL for (int q = 0; q < 4; q++) {
        uint16_t x[4];
        UNROLL for (int i = 0; i < 4; i++) memcpy(&x[i], wp[4 * q + i] + o, 2);
        h[q] = (uint64_t)x[0] | (uint64_t)x[1] << 16 | (uint64_t)x[2] << 32 | (uint64_t)x[3] << 48;
    }
    const __m256i v = _mm256_setr_epi64x((long long)h[0], (long long)h[1], (long long)h[2], (long long)h[3]);
    return _mm512_cvtph_ps(v);
}

/* PL: wp[0] and wp[1] are the two adjacent 8-row panels of the panel layout
 * (kernels/panels.h) holding the 16 rows, else wp[i] is row i.  16 bytes
 * at byte offset o of the 16 rows -> v[k], dword lane i = dword k of row i:
 * in the panel layout one 32-byte load from each panel per vector instead
 * of a transpose. */
AI void kp_rows16(const int PL, const bptr *wp, size_t o, __m512i v[4]) {
    if (!PL) {
        kp_transpose(wp, o, v);
        return;
    }
    UNROLL for (int k = 0; k < 4; k++)
        v[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(wp[0] + 8 * o + 32 * k))),
                                  _mm256_loadu_si256((const __m256i *)(wp[1] + 8 * o + 32 * k)), 1);
}

/* The f16 at byte offset o of each of the 16 rows (PL as above) -> 16 floats, lane i = row i. */
AI __m512 kp_scales16(const int PL, const bptr *wp, size_t o) {
    if (!PL) return kp_halves(wp, o);
    const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(kp_ldx(wp[0] + 8 * o)), kp_ldx(wp[1] + 8 * o), 1);
    return _mm512_cvtph_ps(h);
}

/* The panel layout: the second 8-row panel of the 16 rows at r (past r1 the
 * first again, its lanes never stored). */
AI void kp_panel_pair(const uint8_t *W, size_t wrb, int64_t r, int64_t r1, bptr wp[KP_ROWS]) {
    wp[1] = r + 8 < r1 ? W + (size_t)(r + 8) * wrb : wp[0];
}

/* The 16 rows of the panel at row r of [r, r1) (past r1 the last row
 * repeats; its results are never stored) and the mask of the rows to store. */
AI __mmask16 kp_panel_rows(const uint8_t *W, size_t wrb, int64_t r, int64_t r1, bptr wp[KP_ROWS]) {
    for (int i = 0; i < KP_ROWS; i++) wp[i] = W + (size_t)(r + i < r1 ? r + i : r1 - 1) * wrb;
    return r + KP_ROWS <= r1 ? (__mmask16)0xFFFF : (__mmask16)((1u << (r1 - r)) - 1);
}

/* The panel after the one at row r, for the first token pass of a chunk to
 * prefetch (decode streams it from DRAM), or NULL. */
AI bptr kp_next_panel(const bptr *wp, size_t wrb, int64_t r, int64_t r1, int first_pass) {
    return first_pass && r + KP_ROWS < r1 ? wp[0] + KP_ROWS * wrb : NULL;
}

/* In the panel layout, the second 8-row panel of the next 16 rows
 * (kp_next_panel) when it is inside [r, r1), else NULL. */
AI bptr kp_next_second(const int PL, bptr next, size_t wrb, int64_t r, int64_t r1) {
    return PL && next && r + KP_ROWS + 8 < r1 ? next + 8 * wrb : NULL;
}

/* Prefetches part `part` of `parts` of block o (wb bytes of each row) of
 * the next 16 rows: in the row layout linearly, 16 x wb bytes from next +
 * 16 o (its first 16 x wb x nb bytes: all of it when rows are not padded);
 * in the panel layout that block of each of its two 8-row panels.  The
 * k-quant passes spread a super-block's 36-53 lines over its work in parts:
 * issued at once, they held the passes of several tokens back from DRAM
 * (bench_qgemm, TK_BENCH_DECODE_NTOK=4, Q6_K 8.9-9.4 -> 18.8-20.2 GB/s).
 * The one-token ymm passes read one 8-row panel at a time and prefetch a
 * block at once (kp_prefetch_block; spread, they were slower). */
AI void kp_prefetch_part(const int PL, bptr next, bptr next_b, size_t o, size_t wb, int part, int parts) {
    if (!next) return;
    const size_t rows = PL ? 8 : KP_ROWS;
    const bptr base = next + rows * o;
    size_t l0, l1;
    tk_prefetch_part_lines(rows * wb, part, parts, &l0, &l1);
    for (size_t l = l0; l < l1; l++) {
        tk_prefetch_weights(base + 64 * l);
        if (PL && next_b) tk_prefetch_weights(next_b + 8 * o + 64 * l);
    }
}

/* The whole of block o (kp_prefetch_part in one part). */
AI void kp_prefetch_block(const int PL, bptr next, bptr next_b, size_t o, size_t wb) {
    kp_prefetch_part(PL, next, next_b, o, wb, 0, 1);
}

/* Passes that read the 16 rows' two 8-row panels wp[0], wp[1] one after the
 * other in ymm lanes (wp[1] == wp[0]: one panel, the last 8 rows): what the
 * pass over panel `half` prefetches.  On the rows' first pass (first) the
 * first panel's pass fetches the second panel, the second's the next 16
 * rows (next; NULL on later passes); a lone panel fetches next. */
AI bptr kp_half_prefetch(const bptr *wp, bptr next, int first, int half) {
    return half || wp[1] == wp[0] ? next : first ? wp[1] : NULL;
}

/* The two halves' results as one 16-lane vector (a lone panel: hi = lo). */
AI __m512 kp_join_halves(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }

/* A pass's nt accumulators into tokens t.. of y, the kept rows from row r. */
AI void kp_store(int nt, const __m512 *acc, float *y, int64_t ldy, int64_t t, int64_t r, __mmask16 keep) {
    for (int j = 0; j < nt; j++) _mm512_mask_storeu_ps(y + (t + j) * ldy + r, keep, acc[j]);
}

#endif
