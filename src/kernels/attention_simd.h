/* The SIMD attention tile kernel, written once for any vector width.
 * Included by attention_avx2.c and attention_avx512.c after they define:
 *
 *   FN(name)                the kernel's name
 *   QK_MR, QK_NR            score micro-kernel: rows x vectors of positions
 *   PV_MR, PV_NV            P·V micro-kernel: rows x vectors of head dims
 *   QK8_MR, QK8_NR          the Q8_0 score micro-kernel: rows x vectors
 *   vkeep(x)                x, held in a register: a K or V vector loaded
 *                           once for several FMAs must not be folded into
 *                           each of them as a memory operand (GCC does that
 *                           on x86; the reloads then bound the score loop on
 *                           the load ports, 12 loads per 8 FMAs instead of 6)
 *   and the vector operations listed in attention_simd_common.h, and for
 *   Q8_0 KV the integer ones:
 *     vi                      VL int32 lanes
 *     vi_set1 vi_load vi_store vcvt_i (int32 -> float, exact below 2^24)
 *     load_k8(row, u, nb)     the int8 quants of dims [u*4VL, (u+1)*4VL) of
 *                             a Q8_0 row (VL dwords; zero past nb blocks)
 *     k8_encode(k)            the form vdot4 wants K in
 *     vdot4(acc, k, q)        acc + per dword lane: the exact dot of the
 *                             4 int8 of k with the 4 int8 of q, offset by
 *                             q8_bias (see below)
 *     q8_bias(sum)            the int32 an accumulator starts at for a
 *                             block whose query quants sum to `sum`, so
 *                             that after the block it holds the exact dot
 *
 * Layout of one chunk of TK_ATTN_CHUNK positions (starting at a multiple of
 * the chunk size): K is converted and transposed into kt[d][pos] once per
 * tile, so a score vector holds VL positions of one query row and needs no
 * horizontal sums (Q8_0: the int8 quants transposed by dwords into
 * kt8[d/4][pos] and the scales into dk[block][pos], and the scores are
 * exact integer dots, see attention.h); V rows are used as stored (F32, or converted in the
 * load: F16 with vcvtph2ps, Q8_0 as int8 * scale), or, for tiles of more
 * than one row block, converted once into a float chunk.
 *
 * Exactness across tiles: a row's scores, its mask, max, exps and the
 * order of its sums and of its P·V accumulation depend only on the row and
 * the absolute chunk.  Lanes outside the row's range hold -inf scores and
 * exactly 0 probabilities; adding 0 or 0·v (v finite) leaves a float
 * unchanged (the state never holds -0), so processing a wider range for the
 * other rows of a tile changes nothing. */

#include "attention_simd_common.h"

/* FMA chains of a full score block / P·V pass, and the width (vectors) a
 * block of r < MR rows gets so that about as many are in flight: a power
 * of two (a Q8_0 P·V pass must tile the 32-element blocks) */
#define POW2_FLOOR(x) ((x) >= 16 ? 16 : (x) >= 8 ? 8 : (x) >= 4 ? 4 : (x) >= 2 ? 2 : 1)
#define QK_CHAINS (QK_MR * QK_NR)
#define QK_WIDE(r) POW2_FLOOR(QK_CHAINS / (r) < CH / VL ? QK_CHAINS / (r) : CH / VL)
#define PV_CHAINS (PV_MR * PV_NV)
#define PV_WIDE(r) POW2_FLOOR(PV_CHAINS / (r))

#ifndef ATTN_QUANT_Q8_0
#define ATTN_QUANT_Q8_0 tk_qkernel_avx2_quant_q8_0
#endif

/* kt[d][pos] for the vectors [j0, j1) of the chunk (missing rows point to
 * a row of zeros). */
AI void build_kt_t(tk_kv_type type, int hd, rowp const *krow, int j0, int j1, float *kt, pf_cursor *pf, int pf_lines) {
    for (int j = j0; j < j1; j++, pf_step(pf, pf_lines))
        for (int d0 = 0; d0 < hd; d0 += VL) {
            vf r[VL];
            _Pragma("GCC unroll 16") for (int i = 0; i < VL; i++) r[i] = load_row(krow[j * VL + i], type, d0);
            transpose(r);
            _Pragma("GCC unroll 16") for (int i = 0; i < VL; i++) vstore(kt + (size_t)(d0 + i) * CH + j * VL, r[i]);
        }
}

static void build_kt(tk_kv_type type, int hd, rowp const *krow, int j0, int j1, float *kt, pf_cursor *pf,
                     int pf_lines) {
    switch (type) {
    case TK_KV_F32: build_kt_t(TK_KV_F32, hd, krow, j0, j1, kt, pf, pf_lines); break;
    case TK_KV_F16: build_kt_t(TK_KV_F16, hd, krow, j0, j1, kt, pf, pf_lines); break;
    case TK_KV_Q8_0: break; /* integer scores: build_kt8 */
    }
}

/* Q8_0: the scales of the VL rows at rows[0..VL) as floats, block b's at
 * d[b * CH] onwards (K and V chunks alike). */
AI void gather_scales(rowp const *rows, int nb, float *d) {
    for (int b = 0; b < nb; b++) vstore(d + (size_t)b * CH, vload_scales(rows, (size_t)b * sizeof(tk_block_q8_0)));
}

/* Q8_0: kt8[d4][pos] (dwords = 4 dims) and dk[block][pos] for the vectors
 * [j0, j1) of the chunk. */
static void build_kt8(int hd, rowp const *krow, int j0, int j1, int32_t *kt8, float *dk, pf_cursor *pf, int pf_lines) {
    const int nb = hd / 32, nd4 = hd / 4;
    for (int j = j0; j < j1; j++, pf_step(pf, pf_lines)) {
        for (int u = 0; u * 4 * VL < hd; u++) {
            vf r[VL];
            _Pragma("GCC unroll 16") for (int i = 0; i < VL; i++) r[i] = (vf)load_k8(krow[j * VL + i], u, nb);
            transpose(r);
            _Pragma("GCC unroll 16") for (int i = 0; i < VL; i++) if (u * VL + i < nd4)
                vi_store(kt8 + (size_t)(u * VL + i) * CH + j * VL, k8_encode((vi)r[i]));
        }
        gather_scales(krow + j * VL, nb, dk + j * VL);
    }
}

/* Q8_0: the rows' queries quantized (tk_qkernel_quant_q8_0's bytes, from its
 * AVX2 twin: the scalar one calls roundf per element, which cost ~15 % of
 * a 512-position segment's decode time): per row r, hd/4
 * dwords of quants at qw + r * hd/4, and per block the scale dq and the
 * accumulator start q8_bias(sum of the quants) at r * nb + b. */
static void quant_q(const tk_attn_tile *tile, int hd, int n_rows, int32_t *qw, float *dq, int32_t *qb) {
    const int nb = hd / 32;
    tk_block_q8_0 blk[1024 / 32];
    for (int r = 0; r < n_rows; r++) {
        const float *q = tile->q + (size_t)(r / tile->group) * tile->q_stride + (size_t)(r % tile->group) * hd;
        ATTN_QUANT_Q8_0(q, blk, hd);
        for (int b = 0; b < nb; b++) {
            int32_t sum = 0;
            for (int i = 0; i < 32; i++) sum += blk[b].qs[i];
            memcpy(qw + (size_t)r * (hd / 4) + b * 8, blk[b].qs, 32);
            dq[(size_t)r * nb + b] = h2f(blk[b].d);
            qb[(size_t)r * nb + b] = q8_bias(sum);
        }
    }
}

/* Q8_0 scores of MR rows x NR vectors: per block the exact int32 dots,
 * then acc = (float)isum * (dq * dk) (first block) or fma((float)isum,
 * dq * dk, acc), then the scale: tk_attn_q8_score's sequence. */
AI void qk8_block(const int MR, const int NR, const int32_t *const *qw, const float *const *dq,
                  const int32_t *const *qb, const int32_t *kt8, const float *dk, int nb, int j, float *const *srow,
                  float scale) {
    vf f[QK8_MR][QK8_NR];
    _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 8") for (int n = 0; n < NR; n++) f[m][n] = vzero(); /* (set by block 0) */
    for (int b = 0; b < nb; b++) {
        vi ia[QK8_MR][QK8_NR];
        _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++)
            _Pragma("GCC unroll 8") for (int n = 0; n < NR; n++) ia[m][n] = vi_set1(qb[m][b]);
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
            vi k[QK8_NR];
            _Pragma("GCC unroll 8") for (int n = 0; n < NR; n++) k[n] =
                vi_load(kt8 + (size_t)(b * 8 + i) * CH + (j + n) * VL);
            _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) {
                const int32_t qv = qw[m][b * 8 + i];
                _Pragma("GCC unroll 8") for (int n = 0; n < NR; n++) ia[m][n] = vdot4(ia[m][n], k[n], qv);
            }
        }
        _Pragma("GCC unroll 8") for (int n = 0; n < NR; n++) {
            vf dkv = vload(dk + (size_t)b * CH + (j + n) * VL);
            _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) {
                vf w = vmul(vset1(dq[m][b]), dkv), x = vcvt_i(ia[m][n]);
                f[m][n] = b == 0 ? vmul(x, w) : vfma(x, w, f[m][n]);
            }
        }
    }
    vf sc = vset1(scale);
    _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 8") for (int n = 0; n < NR; n++) vstore(srow[m] + (j + n) * VL, vmul(f[m][n], sc));
}

static void qk8_rows(int nr, const int32_t *const *qw, const float *const *dq, const int32_t *const *qb,
                     const int32_t *kt8, const float *dk, int nb, int va, int vb, float *const *srow, float scale) {
    int m = 0;
    for (; m + QK8_MR <= nr; m += QK8_MR) {
        int j = va;
        for (; j + QK8_NR <= vb; j += QK8_NR)
            qk8_block(QK8_MR, QK8_NR, qw + m, dq + m, qb + m, kt8, dk, nb, j, srow + m, scale);
        for (; j < vb; j++) qk8_block(QK8_MR, 1, qw + m, dq + m, qb + m, kt8, dk, nb, j, srow + m, scale);
    }
    for (; m < nr; m++) {
        int j = va;
        for (; j + QK8_NR <= vb; j += QK8_NR)
            qk8_block(1, QK8_NR, qw + m, dq + m, qb + m, kt8, dk, nb, j, srow + m, scale);
        for (; j < vb; j++) qk8_block(1, 1, qw + m, dq + m, qb + m, kt8, dk, nb, j, srow + m, scale);
    }
}

/* Scores of MR rows x NR vectors (positions j*VL...): an FMA chain over the
 * head dimensions in order, then the scale. */
AI void qk_block(const int MR, const int NR, const float *const *qr, const float *kt, int hd, int j,
                 float *const *srow, float scale) {
    vf acc[QK_CHAINS]; /* [m * NR + n]: MR * NR <= QK_CHAINS, flat so that it stays in registers */
    _Pragma("GCC unroll 16") for (int i = 0; i < MR * NR; i++) acc[i] = vzero();
    const float *kd = kt + (size_t)j * VL;
    for (int d = 0; d < hd; d++, kd += CH) {
        vf k[QK_CHAINS];
        /* one row: each K vector serves one FMA, as its memory operand */
        _Pragma("GCC unroll 16") for (int n = 0; n < NR; n++) k[n] = MR > 1 ? vkeep(vload(kd + n * VL)) : vload(kd + n * VL);
        _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) {
            vf qb = vset1(qr[m][d]);
            _Pragma("GCC unroll 16") for (int n = 0; n < NR; n++) acc[m * NR + n] = vfma(qb, k[n], acc[m * NR + n]);
        }
    }
    vf sc = vset1(scale);
    _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 16") for (int n = 0; n < NR; n++) vstore(srow[m] + (j + n) * VL, vmul(acc[m * NR + n], sc));
}

/* MR rows' scores over the vectors [va, vb): blocks of NR vectors, the
 * rest in blocks of halving width. */
AI void qk_span(const int MR, const int NR, const float *const *qr, const float *kt, int hd, int va, int vb,
                float *const *srow, float scale) {
    int j = va;
    for (; j + NR <= vb; j += NR) qk_block(MR, NR, qr, kt, hd, j, srow, scale);
    if (NR > 8 && j + 8 <= vb) qk_block(MR, 8, qr, kt, hd, j, srow, scale), j += 8;
    if (NR > 4 && j + 4 <= vb) qk_block(MR, 4, qr, kt, hd, j, srow, scale), j += 4;
    if (NR > 2 && j + 2 <= vb) qk_block(MR, 2, qr, kt, hd, j, srow, scale), j += 2;
    for (; j < vb; j++) qk_block(MR, 1, qr, kt, hd, j, srow, scale);
}

/* Rows left after the blocks of QK_MR (a decode step of multi-head
 * attention or of GQA groups of 2 or 3 has nothing else) go in blocks of
 * QK_WIDE(rows) vectors: each score is one FMA chain, and a
 * block of one row and QK_NR vectors had only QK_NR chains in flight
 * (bound by the FMA latency, not its throughput). */
static void qk_rows(int nr, const float *const *qr, const float *kt, int hd, int va, int vb, float *const *srow,
                    float scale) {
    int m = 0;
    for (; m + QK_MR <= nr; m += QK_MR) qk_span(QK_MR, QK_NR, qr + m, kt, hd, va, vb, srow + m, scale);
    for (; nr - m >= 3; m += 3) qk_span(3, QK_WIDE(3), qr + m, kt, hd, va, vb, srow + m, scale);
    if (nr - m == 2) qk_span(2, QK_WIDE(2), qr + m, kt, hd, va, vb, srow + m, scale);
    else if (nr - m == 1) qk_span(1, QK_WIDE(1), qr + m, kt, hd, va, vb, srow + m, scale);
}

/* acc rows (MR rows, NV vectors from head dim d0) = acc * alpha + sum over
 * positions [ia, ib) of p * v, in position order; row m's probability of
 * position i is prow[m][i * ps] (ps 1 in the tile kernel, the lane count in
 * the one-token kernel's heads-by-lanes layout).  Q8_0: dv holds the
 * chunk's V scales (dv[block * CH + lane]); a pass stays inside one block,
 * so a row's scale is loaded once per pass, already a float. */
AI void pv_block(const int MR, const int NV, tk_kv_type type, rowp const *vrow, const float *dv,
                 const float *const *prow, const int ps, int ia, int ib, int d0, float *const *arow,
                 const float *alpha) {
    vf acc[PV_CHAINS]; /* [m * NV + n], as in qk_block */
    _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) {
        vf a = vset1(alpha[m]);
        _Pragma("GCC unroll 16") for (int n = 0; n < NV; n++) acc[m * NV + n] = vmul(vload(arow[m] + d0 + n * VL), a);
    }
    for (int i = ia; i < ib; i++) {
        vf v[PV_CHAINS];
        if (type == TK_KV_Q8_0) {
            const vf sc = vset1(dv[(size_t)(d0 / 32) * CH + i]);
            _Pragma("GCC unroll 16") for (int n = 0; n < NV; n++) v[n] = load_q8(vrow[i], d0 + n * VL, sc);
        } else {
            _Pragma("GCC unroll 16") for (int n = 0; n < NV; n++) v[n] = vkeep(load_row(vrow[i], type, d0 + n * VL));
        }
        _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) {
            vf pb = vset1(prow[m][(size_t)i * ps]);
            _Pragma("GCC unroll 16") for (int n = 0; n < NV; n++) acc[m * NV + n] = vfma(pb, v[n], acc[m * NV + n]);
        }
    }
    _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++)
        _Pragma("GCC unroll 16") for (int n = 0; n < NV; n++) vstore(arow[m] + d0 + n * VL, acc[m * NV + n]);
}

/* MR rows' P·V over all head dims: passes of NV vectors (at most a Q8_0
 * block: a pass reads one scale per position), the rest in passes of
 * halving width. */
AI void pv_span(const int MR, const int WIDTH, tk_kv_type type, rowp const *vrow, const float *dv,
                const float *const *prow, const int ps, int ia, int ib, int hd, float *const *arow, const float *alpha,
                pf_cursor *pf) {
    _Static_assert(32 % (PV_NV * VL) == 0, "a P·V pass stays inside one Q8_0 block");
    const int NV = type == TK_KV_Q8_0 && WIDTH * VL > 32 ? 32 / VL : WIDTH;
    int d0 = 0;
    for (; d0 + NV * VL <= hd; d0 += NV * VL) {
        pv_block(MR, NV, type, vrow, dv, prow, ps, ia, ib, d0, arow, alpha);
        pf_step(pf, 12);
    }
    if (NV > 8 && d0 + 8 * VL <= hd) pv_block(MR, 8, type, vrow, dv, prow, ps, ia, ib, d0, arow, alpha), d0 += 8 * VL;
    if (NV > 4 && d0 + 4 * VL <= hd) pv_block(MR, 4, type, vrow, dv, prow, ps, ia, ib, d0, arow, alpha), d0 += 4 * VL;
    if (NV > 2 && d0 + 2 * VL <= hd) pv_block(MR, 2, type, vrow, dv, prow, ps, ia, ib, d0, arow, alpha), d0 += 2 * VL;
    for (; d0 < hd; d0 += VL) pv_block(MR, 1, type, vrow, dv, prow, ps, ia, ib, d0, arow, alpha);
}

/* pf: the next chunk's prefetches, a few issued after each pass (spread
 * over P·V, the longest phase, instead of a burst after it).  Rows left
 * after the blocks of PV_MR go in passes of PV_WIDE(rows) vectors (one
 * FMA chain per vector, down the positions), as in qk_rows. */
AI void pv_rows_t(tk_kv_type type, int nr, rowp const *vrow, const float *dv, const float *const *prow,
                  const int ps, int ia, int ib, int hd, float *const *arow, const float *alpha, pf_cursor *pf) {
    int m = 0;
    for (; m + PV_MR <= nr; m += PV_MR) pv_span(PV_MR, PV_NV, type, vrow, dv, prow + m, ps, ia, ib, hd, arow + m, alpha + m, pf);
    for (; nr - m >= 3; m += 3) pv_span(3, PV_WIDE(3), type, vrow, dv, prow + m, ps, ia, ib, hd, arow + m, alpha + m, pf);
    if (nr - m == 2) pv_span(2, PV_WIDE(2), type, vrow, dv, prow + m, ps, ia, ib, hd, arow + m, alpha + m, pf);
    else if (nr - m == 1) pv_span(1, PV_WIDE(1), type, vrow, dv, prow + m, ps, ia, ib, hd, arow + m, alpha + m, pf);
}

/* The tile kernel's P·V (probabilities in rows: ps 1). */
static void pv_rows(tk_kv_type type, int nr, rowp const *vrow, const float *dv, const float *const *prow, int ia,
                    int ib, int hd, float *const *arow, const float *alpha, pf_cursor *pf) {
    switch (type) {
    case TK_KV_F32: pv_rows_t(TK_KV_F32, nr, vrow, dv, prow, 1, ia, ib, hd, arow, alpha, pf); break;
    case TK_KV_F16: pv_rows_t(TK_KV_F16, nr, vrow, dv, prow, 1, ia, ib, hd, arow, alpha, pf); break;
    case TK_KV_Q8_0: pv_rows_t(TK_KV_Q8_0, nr, vrow, dv, prow, 1, ia, ib, hd, arow, alpha, pf); break;
    }
}

/* The next chunk's K lines (as many of V) to prefetch per VL positions of
 * the transpose: those of `positions` rows that the phases after it would
 * leave to the burst after P·V (8 after the transpose, 4 per row's softmax,
 * 12 per P·V pass of the first row block, counted as PV_NV wide: an
 * estimate), for n_rows rows. */
static int transpose_pf_lines(size_t row_bytes, int positions, int n_rows, int hd) {
    const int nr = n_rows < RB ? n_rows : RB;
    const int passes = (nr + PV_MR - 1) / PV_MR * (hd / (PV_NV * VL));
    const int later = 8 + 4 * nr + 12 * passes;
    const int lines = positions > 0 ? (int)(((size_t)positions * row_bytes + 63) / 64) : 0;
    return lines > later ? (lines - later + CH / VL - 1) / (CH / VL) : 0;
}

int FN(tk_attn_tile)(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const tk_attn_tile *tile,
                     float scale, int seg_lo, int seg_hi, float *acc, float *mx, float *sum, float *scratch) {
    const int hd = kv->head_dim, group = tile->group, n_rows = tile->n_tok * group;
    if (hd % VL || hd > 1024) return -1;
    float *kt = align16f(scratch), *vconv = align16f(kt + (size_t)hd * CH);
    float *P = align16f(vconv + (size_t)CH * hd), *alpha = align16f(P + (size_t)n_rows * CH);
    float *zero_row = align16f(alpha + n_rows); /* hd floats: at least one row of any type */
    memset(zero_row, 0, sizeof(float) * hd);
    /* Q8_0: kt8 and dk in kt's place, the quantized queries after the zero row */
    const bool q8 = kv->type == TK_KV_Q8_0;
    const int nb = hd / 32;
    int32_t *kt8 = (int32_t *)(void *)kt, *qw = (int32_t *)(void *)align16f(zero_row + hd), *qbias = NULL;
    float *dk = align16f(kt + (size_t)(hd / 4) * CH), *dq = NULL;
    float *dvs = NULL; /* Q8_0: the chunk's V scales, [block][lane] */
    if (q8) {
        dq = align16f((float *)(void *)(qw + (size_t)n_rows * (hd / 4)));
        qbias = (int32_t *)(void *)(dq + (size_t)n_rows * nb);
        dvs = align16f((float *)(void *)(qbias + (size_t)n_rows * nb));
    }
    int tlo, thi;
    tile_bounds(tile, seg_lo, seg_hi, &tlo, &thi);
    if (tlo >= thi) return 0;
    if (q8) quant_q(tile, hd, n_rows, qw, dq, qbias);
    /* the last chunk prefetches the first one of the next segment (what the
     * caller usually folds next), if the tile sees that far */
    const int next_hi = tile_reach(tile, thi);
    const bool convert_v = kv->type != TK_KV_F32 && n_rows > RB;
    rowp krow[CH], vrow[CH];
    pf_cursor pf;
    const float *qr[RB], *dqr[RB];
    const int32_t *qwr[RB], *qbr[RB];
    float *srow[RB], *arow[RB];
    for (int c0 = tlo / CH * CH; c0 < thi; c0 += CH) {
        const int da = c0 > tlo ? c0 : tlo, db = c0 + CH < thi ? c0 + CH : thi;
        for (int i = 0; i < CH; i++) krow[i] = vrow[i] = (rowp)(const void *)zero_row;
        chunk_rows(kv, s, layer, kv_head, c0, da, db, krow, vrow);
        /* the next chunk's K/V lines, a few at a time: a burst of more
         * prefetches than the core has fill buffers stalls it */
        pf_init(&pf, kv, s, layer, kv_head, db, db + CH < next_hi ? db + CH : next_hi);
        pf_step(&pf, 8);
        /* with few rows (multi-head attention, small GQA groups) the later
         * phases are short: what they would leave to one burst goes out
         * while K is transposed */
        const int pf_lines = transpose_pf_lines(kv->row_bytes, (db + CH < next_hi ? db + CH : next_hi) - db, n_rows, hd);
        if (q8) build_kt8(hd, krow, (da - c0) / VL, (db - c0 + VL - 1) / VL, kt8, dk, &pf, pf_lines);
        else build_kt(kv->type, hd, krow, (da - c0) / VL, (db - c0 + VL - 1) / VL, kt, &pf, pf_lines);
        pf_step(&pf, 8);
        tk_kv_type vtype = kv->type;
        if (q8)
            for (int j = (da - c0) / VL; j * VL < db - c0; j++) gather_scales(vrow + j * VL, nb, dvs + j * VL);
        if (convert_v) {
            for (int i = da - c0; i < db - c0; i++) {
                float *dst = vconv + (size_t)i * hd;
                if (q8) {
                    for (int d0 = 0; d0 < hd; d0 += VL)
                        vstore(dst + d0, load_q8(vrow[i], d0, vset1(dvs[(size_t)(d0 / 32) * CH + i])));
                } else {
                    for (int d0 = 0; d0 < hd; d0 += VL) vstore(dst + d0, load_row(vrow[i], TK_KV_F16, d0));
                }
                vrow[i] = (rowp)(const void *)dst;
            }
            vtype = TK_KV_F32;
        }
        for (int r0 = 0; r0 < n_rows; r0 += RB) {
            const int nr = n_rows - r0 < RB ? n_rows - r0 : RB;
            int ra[RB], rb[RB], ua = INT_MAX, ub = INT_MIN;
            for (int m = 0; m < nr; m++) {
                int t = (r0 + m) / group, g = (r0 + m) % group;
                row_lanes(tile, r0 + m, seg_lo, seg_hi, c0, &ra[m], &rb[m]);
                if (ra[m] < rb[m]) {
                    if (ra[m] < ua) ua = ra[m];
                    if (rb[m] > ub) ub = rb[m];
                }
                qr[m] = tile->q + (size_t)t * tile->q_stride + (size_t)g * hd;
                if (q8) {
                    qwr[m] = qw + (size_t)(r0 + m) * (hd / 4);
                    dqr[m] = dq + (size_t)(r0 + m) * nb;
                    qbr[m] = qbias + (size_t)(r0 + m) * nb;
                }
                srow[m] = P + (size_t)(r0 + m) * CH;
                arow[m] = acc + (size_t)(r0 + m) * hd;
            }
            if (ua >= ub) continue;
            const int va = ua / VL, vb = (ub + VL - 1) / VL;
            if (q8) qk8_rows(nr, qwr, dqr, qbr, kt8, dk, nb, va, vb, srow, scale);
            else qk_rows(nr, qr, kt, hd, va, vb, srow, scale);
            for (int m = 0; m < nr; m++) {
                softmax_row(srow[m], va, vb, ra[m], rb[m], &mx[r0 + m], &sum[r0 + m], &alpha[m]);
                pf_step(&pf, 4);
            }
            pv_rows(vtype, nr, vrow, dvs, (const float *const *)srow, ua, ub, hd, arow, alpha, &pf);
        }
        pf_step(&pf, INT_MAX);
    }
    return 0;
}
