/* The attention tile kernel on AMX-BF16 (Sapphire Rapids and later), for
 * F16 KV caches; head_dim a multiple of 32.  Compiled with AVX-512 + BF16 +
 * AMX flags only; reached through tk_attn_tile_range after a CPU check.
 *
 * Same chunk / row-block structure and online softmax as the FP32 kernel
 * (attention_simd.h; the softmax, mask and exp are its AVX-512 code, in
 * attention_simd_common.h), with the two products on the tile unit:
 *
 *   S = Q K^T   as Qh·Kh + (Ql·Kh + Qh·Kl)  (TDPBF16PS, fp32 accumulation;
 *                                            two accumulators, then added)
 *   O += P V    as Ph·Vh + Pl·Vh + Ph·Vl + Pl·Vl
 *
 * where x = xh + xl splits a float into two bf16.  For K and V (F16 in the
 * cache: 11 significant bits) the split is exact: xh is x rounded to 8
 * bits, x - xh has at most 3 bits.  Q (float) keeps 16 bits (error <=
 * 2^-17 |q|), P (in [0, 1]) likewise; the dropped product Ql·Kl is <=
 * 2^-17 of each term (adding it measurably changed nothing; Pl·Vl did:
 * 7.5e-6 -> 6.2e-6).  Measured error vs float64 (test_attention): <= 8.0e-6
 * of max |out|, within the FP32 kernels' bound of 1e-5.
 *
 * Tiles (one configuration per call, M = min(16, rows) rows):
 *   tmm0-3  C: 16 positions of scores, or 16 head dims of the output, fp32
 *   tmm4-5  A: Qh / Ql (32 dims) or Ph / Pl (32 positions), M x 32 bf16
 *   tmm6-7  B: Kh / Kl or Vh / Vl, 16 x 16 bf16 pairs
 * B layouts: K^T for 16 positions and 32 dims is [dim pair][pos][2], the
 * 16 x 16 dword transpose of the F16 rows (a dword = 2 adjacent dims); V for
 * 32 positions and 16 dims is [pos pair][dim][2], two V rows interleaved.
 *
 * Exactness across tiles: a row of C depends only on the same row of A and
 * on B, so a row's scores and P·V do not depend on the other rows of its
 * tile or on M; the rest is the FP32 kernel's argument (masked positions
 * give P = 0 exactly, and adding 0 products leaves the accumulator as it
 * is).  One caveat of the tile unit: it flushes denormal results, so an
 * accumulator below 2^-126 in magnitude (which needs an exact cancellation
 * of the row's values) could become 0 where another tile would not touch
 * it; the test holds tiles, lone tokens and cut tiles to identical bits. */
#include <math.h>
#include <stdbool.h>

#include "attention.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__) && \
    defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include "attention_avx512_ops.h"
#include "attention_simd_common.h"
#include "amx_tiles.h"

#define TB 16     /* rows of a row block (tile rows) */
#define MAX_RB 64 /* row blocks per call (1024 rows; bigger tiles go in pieces) */
#define TILE 512  /* bf16 elements of one 16 x 64-byte tile */

static inline void tile_configure(int m) {
    tk_amx_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.colsb[t] = 64;
        c.rows[t] = (uint8_t)(t < 6 ? m : 16);
    }
    tk_amx_load_config(&c);
}

/* x rounded to bf16 precision (8 bits, ties away from zero), as a float:
 * exact for finite x below 2^127 in magnitude. */
AI __m512 round_bf16(__m512 x) {
    __m512i b = _mm512_add_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(0x8000));
    return _mm512_castsi512_ps(_mm512_and_si512(b, _mm512_set1_epi32((int)0xffff0000u)));
}

/* 32 floats (a, then b) -> hi and lo bf16, in order (hi exact from
 * round_bf16; lo = x - hi rounded to nearest). */
AI void split32(__m512 a, __m512 b, __m512i *hi, __m512i *lo) {
    __m512 ha = round_bf16(a), hb = round_bf16(b);
    *hi = (__m512i)_mm512_cvtne2ps_pbh(hb, ha);
    *lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha));
}

/* Q rows (scaled by nothing) -> A tiles qa[row block][32-dim step][hi, lo],
 * rows past n_rows zero.  Q is split exactly as RNE hi + RNE lo. */
static void build_q(const tk_attn_tile *tile, int hd, int n_rows, int n_rb, uint16_t *qa) {
    const int nks = hd / 32;
    for (int r = 0; r < n_rb * TB; r++) {
        const int rb = r / TB, m = r % TB;
        const float *q = NULL;
        if (r < n_rows)
            q = tile->q + (size_t)(r / tile->group) * tile->q_stride + (size_t)(r % tile->group) * hd;
        for (int ks = 0; ks < nks; ks++) {
            uint16_t *dh = qa + ((size_t)(rb * nks + ks) * 2) * TILE + m * 32, *dl = dh + TILE;
            if (!q) {
                _mm512_storeu_si512(dh, _mm512_setzero_si512());
                _mm512_storeu_si512(dl, _mm512_setzero_si512());
                continue;
            }
            __m512 a = _mm512_loadu_ps(q + ks * 32), b = _mm512_loadu_ps(q + ks * 32 + 16);
            __m256i ha = (__m256i)_mm512_cvtneps_pbh(a), hb = (__m256i)_mm512_cvtneps_pbh(b);
            __m512 fa = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ha), 16));
            __m512 fb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hb), 16));
            _mm512_storeu_si512(dh, _mm512_inserti64x4(_mm512_castsi256_si512(ha), hb, 1));
            _mm512_storeu_si512(dl, (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, fb), _mm512_sub_ps(a, fa)));
        }
    }
}

/* K^T B tiles kt[16-position group j][32-dim step][hi, lo] for the groups
 * [j0, j1) of the chunk. */
static void build_kt_amx(int hd, rowp const *krow, int j0, int j1, uint16_t *kt) {
    const int nks = hd / 32;
    for (int j = j0; j < j1; j++)
        for (int ks = 0; ks < nks; ks++) {
            __m512 r[16];
            _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) r[i] =
                _mm512_loadu_ps((const float *)(const void *)(krow[j * 16 + i] + ks * 64));
            transpose(r); /* r[i]: dims 2i, 2i+1 of the 16 positions */
            uint16_t *dh = kt + ((size_t)(j * nks + ks) * 2) * TILE, *dl = dh + TILE;
            _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) {
                __m512i v = _mm512_castps_si512(r[i]), hi, lo;
                split32(_mm512_cvtph_ps(_mm512_castsi512_si256(v)), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)),
                        &hi, &lo);
                _mm512_storeu_si512(dh + i * 32, hi);
                _mm512_storeu_si512(dl + i * 32, lo);
            }
        }
}

/* V B tiles vt[32-position group pg][16-dim block][hi, lo] for the groups
 * [p0, p1) of the chunk: row i interleaves positions 2i and 2i+1. */
static void build_vt_amx(int hd, rowp const *vrow, int p0, int p1, uint16_t *vt) {
    const int ndb = hd / 16;
    for (int pg = p0; pg < p1; pg++)
        for (int i = 0; i < 16; i++) {
            const uint16_t *v0 = (const uint16_t *)(const void *)vrow[pg * 32 + 2 * i];
            const uint16_t *v1 = (const uint16_t *)(const void *)vrow[pg * 32 + 2 * i + 1];
            for (int db = 0; db < ndb; db++) {
                __m512 f0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(v0 + db * 16)));
                __m512 f1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(v1 + db * 16)));
                __m512 h0 = round_bf16(f0), h1 = round_bf16(f1);
                __m512 l0 = _mm512_sub_ps(f0, h0), l1 = _mm512_sub_ps(f1, h1); /* exact, <= 3 bits */
                __m512i hi = _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(_mm512_castps_si512(h0), 16),
                                                     _mm512_castps_si512(h1));
                __m512i lo = _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(_mm512_castps_si512(l0), 16),
                                                     _mm512_castps_si512(l1));
                uint16_t *dh = vt + ((size_t)(pg * ndb + db) * 2) * TILE + i * 32;
                _mm512_storeu_si512(dh, hi);
                _mm512_storeu_si512(dh + TILE, lo);
            }
        }
}

/* Scores of one row block for the 16-position groups [ja, jb), unscaled:
 * Qh·Kh into S (row m at S + m * CH) and Ql·Kh + Qh·Kl into S2; the caller
 * adds them.  Two groups at a time, each term in its own accumulator, so
 * four independent TDPBF16PS are in flight (a group out of [ja, jb) in a
 * pair is computed on stale tiles and not used). */
static void qk_amx(const uint16_t *qa, const uint16_t *kt, int nks, int ja, int jb, float *S, float *S2) {
    for (int j = ja & ~1; j < jb; j += 2) {
        TK_TILE_ZERO(0);
        TK_TILE_ZERO(1);
        TK_TILE_ZERO(2);
        TK_TILE_ZERO(3);
        for (int ks = 0; ks < nks; ks++) {
            const uint16_t *q = qa + (size_t)ks * 2 * TILE;
            const uint16_t *k0 = kt + ((size_t)(j * nks + ks) * 2) * TILE, *k1 = k0 + (size_t)nks * 2 * TILE;
            TK_TILE_LOAD(4, q, 64);
            TK_TILE_LOAD(5, q + TILE, 64);
            TK_TILE_LOAD(6, k0, 64);
            TK_TILE_LOAD(7, k1, 64);
            TK_TILE_DPBF16PS(0, 4, 6);
            TK_TILE_DPBF16PS(1, 4, 7);
            TK_TILE_DPBF16PS(2, 5, 6);
            TK_TILE_DPBF16PS(3, 5, 7);
            TK_TILE_LOAD(6, k0 + TILE, 64);
            TK_TILE_LOAD(7, k1 + TILE, 64);
            TK_TILE_DPBF16PS(2, 4, 6);
            TK_TILE_DPBF16PS(3, 4, 7);
        }
        TK_TILE_STORE(0, S + j * 16, CH * sizeof(float));
        TK_TILE_STORE(1, S + j * 16 + 16, CH * sizeof(float));
        TK_TILE_STORE(2, S2 + j * 16, CH * sizeof(float));
        TK_TILE_STORE(3, S2 + j * 16 + 16, CH * sizeof(float));
    }
}

/* ob (TB x hd, row stride hd) += P V over the 32-position groups [pa, pb);
 * pt holds the P tiles [group][hi, lo]. */
static void pv_amx(const uint16_t *pt, const uint16_t *vt, int hd, int pa, int pb, float *ob) {
    const int ndb = hd / 16;
    const long ostride = (long)hd * (long)sizeof(float);
    for (int d4 = 0; d4 < ndb; d4 += 4) {
        const int nd = ndb - d4 < 4 ? ndb - d4 : 4;
        float *o = ob + d4 * 16;
        TK_TILE_LOAD(0, o, ostride);
        if (nd > 1) TK_TILE_LOAD(1, o + 16, ostride);
        if (nd > 2) TK_TILE_LOAD(2, o + 32, ostride);
        if (nd > 3) TK_TILE_LOAD(3, o + 48, ostride);
        for (int pg = pa; pg < pb; pg++) {
            const uint16_t *p = pt + (size_t)pg * 2 * TILE;
            TK_TILE_LOAD(4, p, 64);
            TK_TILE_LOAD(5, p + TILE, 64);
#define PV_PAIR(D0, D1)                                                                                      \
    if (nd > D1) {                                                                                           \
        const uint16_t *v0 = vt + ((size_t)(pg * ndb + d4 + D0) * 2) * TILE, *v1 = v0 + 2 * TILE;           \
        TK_TILE_LOAD(6, v0, 64);                                                                                   \
        TK_TILE_LOAD(7, v1, 64);                                                                                   \
        TK_TILE_DPBF16PS(D0, 4, 6);                                                                                      \
        TK_TILE_DPBF16PS(D1, 4, 7);                                                                                      \
        TK_TILE_DPBF16PS(D0, 5, 6);                                                                                      \
        TK_TILE_DPBF16PS(D1, 5, 7);                                                                                      \
        TK_TILE_LOAD(6, v0 + TILE, 64);                                                                            \
        TK_TILE_LOAD(7, v1 + TILE, 64);                                                                            \
        TK_TILE_DPBF16PS(D0, 4, 6);                                                                                      \
        TK_TILE_DPBF16PS(D1, 4, 7);                                                                                      \
        TK_TILE_DPBF16PS(D0, 5, 6);                                                                                      \
        TK_TILE_DPBF16PS(D1, 5, 7);                                                                                      \
    } else if (nd > D0) {                                                                                    \
        const uint16_t *v = vt + ((size_t)(pg * ndb + d4 + D0) * 2) * TILE;                                  \
        TK_TILE_LOAD(6, v, 64);                                                                                    \
        TK_TILE_DPBF16PS(D0, 4, 6);                                                                                      \
        TK_TILE_DPBF16PS(D0, 5, 6);                                                                                      \
        TK_TILE_LOAD(7, v + TILE, 64);                                                                             \
        TK_TILE_DPBF16PS(D0, 4, 7);                                                                                      \
    }
            PV_PAIR(0, 1);
            PV_PAIR(2, 3);
#undef PV_PAIR
        }
        TK_TILE_STORE(0, o, ostride);
        if (nd > 1) TK_TILE_STORE(1, o + 16, ostride);
        if (nd > 2) TK_TILE_STORE(2, o + 32, ostride);
        if (nd > 3) TK_TILE_STORE(3, o + 48, ostride);
    }
}

/* Per row block and chunk: the lanes the block's rows see. */
typedef struct rb_span {
    int va, vb; /* 16-position vectors with scores */
    int pa, pb; /* 32-position groups for P·V (pa == pb: nothing) */
} rb_span;

int tk_attn_tile_amx(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const tk_attn_tile *tile,
                     float scale, int seg_lo, int seg_hi, float *acc, float *mx, float *sum, float *scratch) {
    const int hd = kv->head_dim, n_rows = tile->n_tok * tile->group;
    if (kv->type != TK_KV_F16 || hd % 32 || hd > 1024 || n_rows <= 0 || tile->group > MAX_RB * TB) return -1;
    if (n_rows > MAX_RB * TB) {
        /* rows are independent of their tile: in pieces of whole tokens */
        const int per = MAX_RB * TB / tile->group;
        for (int t = 0; t < tile->n_tok; t += per) {
            tk_attn_tile sub = *tile;
            size_t r = (size_t)t * tile->group;
            sub.q = tile->q + (size_t)t * tile->q_stride;
            sub.n_tok = tile->n_tok - t < per ? tile->n_tok - t : per;
            sub.lo = tile->lo + t;
            sub.hi = tile->hi + t;
            tk_attn_tile_amx(kv, s, layer, kv_head, &sub, scale, seg_lo, seg_hi, acc + r * hd, mx + r, sum + r,
                             scratch);
        }
        return 0;
    }
    int tlo, thi;
    tile_bounds(tile, seg_lo, seg_hi, &tlo, &thi);
    if (tlo >= thi) return 0;
    const int nks = hd / 32, n_rb = (n_rows + TB - 1) / TB, M = n_rows < TB ? n_rows : TB;
    /* scratch (see tk_attn_tile_scratch_floats): Q tiles, two sets of K and
     * V tiles (the next chunk's are built while this one's are used), per
     * row block scores, P tiles and the accumulators (kept here for the
     * whole call), a row of zeros */
    const size_t kv_tiles = (size_t)CH * hd * 2; /* bf16 of K (or V) tiles of a chunk */
    uint16_t *qa = (uint16_t *)(void *)align16f(scratch);
    uint16_t *kt = (uint16_t *)(void *)align16f((float *)(void *)(qa + (size_t)n_rb * TB * hd * 2));
    uint16_t *vt = kt + 2 * kv_tiles, *pt = vt + 2 * kv_tiles;
    float *S = align16f((float *)(void *)(pt + (size_t)n_rb * (CH / 32) * 2 * TILE));
    float *S2 = S + (size_t)n_rb * TB * CH, *ob = S2 + (size_t)n_rb * TB * CH;
    float *zero_row = ob + (size_t)n_rb * TB * hd; /* hd floats: 2 F16 rows */
    rb_span span[2][MAX_RB];
    memset(zero_row, 0, sizeof(float) * hd);
    for (int r = 0; r < n_rb * TB; r++) {
        float *o = ob + (size_t)r * hd;
        if (r < n_rows) memcpy(o, acc + (size_t)r * hd, sizeof(float) * hd);
        else memset(o, 0, sizeof(float) * hd);
    }
    build_q(tile, hd, n_rows, n_rb, qa);
    tile_configure(M);
    rowp krow[CH], vrow[CH];
    const vf vscale = vset1(scale);
    const int c_first = tlo / CH * CH;
    /* the K/V tiles of chunk c into set (c / CH) % 2 */
#define BUILD(c)                                                                                             \
    do {                                                                                                     \
        const int c0_ = (c), da_ = c0_ > tlo ? c0_ : tlo, db_ = c0_ + CH < thi ? c0_ + CH : thi;             \
        const size_t set_ = (size_t)((c0_ / CH) % 2) * kv_tiles;                                             \
        for (int i_ = 0; i_ < CH; i_++) krow[i_] = vrow[i_] = (rowp)(const void *)zero_row;                  \
        chunk_rows(kv, s, layer, kv_head, c0_, da_, db_, krow, vrow);                                        \
        if (db_ < thi) prefetch_rows(kv, s, layer, kv_head, db_, db_ + CH < thi ? db_ + CH : thi);           \
        build_kt_amx(hd, krow, (da_ - c0_) / 16, (db_ - c0_ + 15) / 16, kt + set_);                          \
        build_vt_amx(hd, vrow, (da_ - c0_) / 32, (db_ - c0_ + 31) / 32, vt + set_);                          \
    } while (0)
    BUILD(c_first);
    for (int c0 = c_first; c0 < thi + CH; c0 += CH) {
        const bool have = c0 < thi, have_prev = c0 > c_first;
        const size_t set = (size_t)((c0 / CH) % 2) * kv_tiles, prev_set = kv_tiles - set;
        rb_span *sp = span[(c0 / CH) % 2], *sp_prev = span[1 - (c0 / CH) % 2];
        /* scores of this chunk (tile unit) */
        if (have) {
            for (int b = 0; b < n_rb; b++) {
                const int r0 = b * TB, nr = n_rows - r0 < TB ? n_rows - r0 : TB;
                int ua = INT_MAX, ub = INT_MIN;
                for (int m = 0; m < nr; m++) {
                    int ra, rb;
                    row_lanes(tile, r0 + m, seg_lo, seg_hi, c0, &ra, &rb);
                    if (ra < rb) {
                        if (ra < ua) ua = ra;
                        if (rb > ub) ub = rb;
                    }
                }
                if (ua >= ub) {
                    sp[b] = (rb_span){0, 0, 0, 0};
                    continue;
                }
                sp[b] = (rb_span){ua / VL, (ub + VL - 1) / VL, ua / 32, (ub + 31) / 32};
                qk_amx(qa + (size_t)b * nks * 2 * TILE, kt + set, nks, sp[b].va, sp[b].vb, S + (size_t)b * TB * CH,
                       S2 + (size_t)b * TB * CH);
            }
        }
        /* P·V of the previous chunk (tile unit) */
        if (have_prev)
            for (int b = 0; b < n_rb; b++)
                if (sp_prev[b].pa < sp_prev[b].pb)
                    pv_amx(pt + (size_t)b * (CH / 32) * 2 * TILE, vt + prev_set, hd, sp_prev[b].pa, sp_prev[b].pb,
                           ob + (size_t)b * TB * hd);
        if (!have) break;
        /* the next chunk's K/V tiles (vector unit, while the tile unit works) */
        if (c0 + CH < thi) BUILD(c0 + CH);
        /* softmax, P tiles, rescaled accumulators */
        for (int b = 0; b < n_rb; b++) {
            if (sp[b].pa >= sp[b].pb) continue;
            const int r0 = b * TB, nr = n_rows - r0 < TB ? n_rows - r0 : TB;
            const int va = sp[b].va, vb = sp[b].vb;
            float *Sb = S + (size_t)b * TB * CH;
            const float *S2b = S2 + (size_t)b * TB * CH;
            uint16_t *pb_tiles = pt + (size_t)b * (CH / 32) * 2 * TILE;
            for (int m = 0; m < M; m++) {
                float *sr = Sb + (size_t)m * CH;
                float al = 1.0f;
                if (m < nr) {
                    int ra, rb;
                    row_lanes(tile, r0 + m, seg_lo, seg_hi, c0, &ra, &rb);
                    const float *s2 = S2b + (size_t)m * CH;
                    for (int j = va; j < vb; j++)
                        vstore(sr + j * VL, vmul(vadd(vload(sr + j * VL), vload(s2 + j * VL)), vscale));
                    softmax_row(sr, va, vb, ra, rb, &mx[r0 + m], &sum[r0 + m], &al);
                }
                for (int pg = sp[b].pa; pg < sp[b].pb; pg++) {
                    __m512 p[2];
                    for (int h = 0; h < 2; h++) {
                        int j = 2 * pg + h;
                        p[h] = m < nr && j >= va && j < vb ? vload(sr + j * VL) : vzero();
                    }
                    __m512i hi, lo;
                    split32(p[0], p[1], &hi, &lo);
                    _mm512_storeu_si512(pb_tiles + (size_t)pg * 2 * TILE + m * 32, hi);
                    _mm512_storeu_si512(pb_tiles + (size_t)pg * 2 * TILE + TILE + m * 32, lo);
                }
                if (al != 1.0f) {
                    float *o = ob + (size_t)(r0 + m) * hd;
                    vf a = vset1(al);
                    for (int d = 0; d < hd; d += VL) vstore(o + d, vmul(vload(o + d), a));
                }
            }
        }
    }
#undef BUILD
    tk_amx_release();
    memcpy(acc, ob, sizeof(float) * (size_t)n_rows * hd);
    return 0;
}

#else /* not built with AMX */

int tk_attn_tile_amx(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const tk_attn_tile *tile,
                     float scale, int seg_lo, int seg_hi, float *acc, float *mx, float *sum, float *scratch) {
    (void)kv, (void)s, (void)layer, (void)kv_head, (void)tile, (void)scale, (void)seg_lo, (void)seg_hi;
    (void)acc, (void)mx, (void)sum, (void)scratch;
    return -1;
}

#endif
