/* The GEMM driver of the AVX2 and AVX-512 kernels, written once for both
 * vector widths: row and token tiles, token chunks, the prefetch of the next
 * row tile, one micro-kernel per token count, the kernel table and its
 * lookup, and the scalar helpers both kernel sets use.  Each of
 * qgemm_avx2.c and qgemm_avx512.c is compiled with its own -m flags, so
 * each includes this file inside its ISA guard and gets its own copy (all
 * static, but the lookup function), after defining
 *
 *   NT_MAX        the most tokens a micro-kernel takes (4 or 8); also
 *                 the row stride of its out tile
 *   CHUNK_BYTES   activation bytes of one token chunk, which stays in L2
 *                 while all row tiles pass over it
 *   GEMM_ISA      the kernels' tk_isa; GEMM_SUFFIX their name suffix
 *
 * and ends with GEMM_KERNELS(lookup function name), once it has defined a
 * micro-kernel for each weight type as C_<TYPE>(MR, NT, w, a, n, pf, out)
 * (see mk_fn) and the tile shapes MR_x x NT_x of each family x: L the
 * 32-element legacy blocks, K the k-quants and IQ4_XS, F the float weights,
 * N NF4 and NF4_DQ.
 *
 * Tiling: a micro-kernel computes MR rows x NT tokens at once, so each
 * weight block is unpacked once per NT tokens and each activation block is
 * loaded once per MR rows.  Every (row, token) accumulator goes through the
 * same instruction sequence whatever the tile shape, so results do not
 * depend on how rows or tokens are split; ragged row tiles repeat the last
 * row (results discarded) instead of using a different code path. */
#ifndef TK_QGEMM_SIMD_H
#define TK_QGEMM_SIMD_H

#include <immintrin.h>

#include "nf4_dot.h"
#include "qgemm_impl.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

enum { MR_MAX = 8 }; /* rows of a tile, at most */

typedef const uint8_t *bptr;

AI float ldf(const void *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
AI uint32_t ld32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
AI uint32_t ld16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
AI float ldh(const void *p) { return _cvtsh_ss((unsigned short)ld16(p)); }

AI float hsum4(__m128 v) {
    const __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* The legacy 32-element block types: block bytes, and whether the type
 * has a min (the _1 types, with Q8_1 activations). */
enum { L_Q4_0, L_Q4_1, L_Q5_0, L_Q5_1, L_Q8_0, L_IQ4_NL };

AI size_t lbytes(int T) {
    return T == L_Q4_0 ? 18 : T == L_Q4_1 ? 20 : T == L_Q5_0 ? 22 : T == L_Q5_1 ? 24 : T == L_Q8_0 ? 34 : 18;
}
AI int lmin(int T) { return T == L_Q4_1 || T == L_Q5_1; }

#define QK_A 292 /* sizeof(tk_block_q8_K): d at 0, qs at 4, bsums at 260 */

/* NF4 (definition: nf4_dot.h): absmax of block b and its code bytes (rows
 * of nb blocks, ng DQ groups). */
AI float nf4_absmax(const int DQ, bptr row, int64_t nb, int64_t ng, int64_t b, bptr *codes) {
    if (!DQ) {
        *codes = row + 36 * b + 4;
        return ldf(row + 36 * b);
    }
    const bptr g = row + 8 * (b / TK_NF4_DQ_GROUP), qa = row + 8 * ng;
    *codes = qa + nb + 32 * b;
    return (float)qa[b] * ldf(g) + ldf(g + 4);
}

/* A micro-kernel: rows w[0..MR), tokens a[0..NT), full depth; writes
 * out[i * NT_MAX + j] for row i, token j.  If pf is not 0, the kernel
 * prefetches the weights pf bytes ahead of those it reads (the next row
 * tile), which the hardware prefetchers alone do not reach in time when the
 * weights stream from DRAM once (decode). */
typedef void (*mk_fn)(const bptr *w, const bptr *a, int64_t n, size_t pf, float *out);

/* Prefetches bytes [off, off + len) of each row, pf bytes ahead. */
AI void pfetch(int MR, const bptr *wp, int64_t off, size_t len, size_t pf) {
    if (!pf) return;
    for (size_t k = 0; k < len; k += 64)
        for (int i = 0; i < MR; i++) tk_prefetch_weights(wp[i] + off + pf + k);
}

#if !defined(TK_AVXVNNI) && !defined(TK_QGEMM_KBATCH) /* the AVX-VNNI and k-batch builds of qgemm_avx2.c have no row-tiled kernels of their own */
/* Rows in tiles of mr (the last tile repeats its last row), tokens in
 * tiles of nt = 1..nt_max (kernels mk[nt - 1]); tokens grouped in chunks
 * whose activations stay in L2 while all row tiles pass over them. */
static void gemm_tiles(const mk_fn *mk, int mr, int nt_max, const void *w, size_t wrb, int64_t n, int64_t r0,
                       int64_t r1, const void *act, size_t arb, int n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w, *A = act;
    /* the first token tile of each row tile prefetches the next row tile:
     * its weights come from DRAM, while later token tiles find them in cache
     * (not past r1: those rows are another task's, read by then or later) */
    const size_t pf = (size_t)mr * wrb;
    int64_t chunk = (int64_t)(CHUNK_BYTES) / (int64_t)(arb ? arb : 1);
    chunk = chunk / nt_max * nt_max;
    if (chunk < nt_max) chunk = nt_max;
    for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
        const int64_t t1 = t0 + chunk < n_tok ? t0 + chunk : n_tok;
        for (int64_t r = r0; r < r1; r += mr) {
            bptr wp[MR_MAX];
            for (int i = 0; i < mr; i++) wp[i] = W + (size_t)(r + i < r1 ? r + i : r1 - 1) * wrb;
            for (int64_t t = t0; t < t1;) {
                const int nt = t1 - t >= nt_max ? nt_max : (int)(t1 - t);
                bptr ap[NT_MAX];
                for (int j = 0; j < nt; j++) ap[j] = A + (size_t)(t + j) * arb;
                float out[MR_MAX * NT_MAX];
                mk[nt - 1](wp, ap, n, t == t0 && r + mr < r1 ? pf : 0, out);
                for (int i = 0; i < mr && r + i < r1; i++)
                    for (int j = 0; j < nt; j++) y[(t + j) * ldy + r + i] = out[i * NT_MAX + j];
                t += nt;
            }
        }
    }
}
#endif

/* ================= instantiation ================= */

/* The micro-kernel of NAME for NT tokens.  A type's table holds NT_MAX of
 * them; those past its own NTMAX are never called and repeat NTMAX's (the
 * compiler folds them) instead of compiling wider kernels. */
#define GEMM_MK(NAME, MR, NTMAX, CALL, NT)                                                  \
    static void NAME##_##NT(const bptr *w, const bptr *a, int64_t n, size_t pf, float *o) { \
        CALL(MR, (NT) < (NTMAX) ? (NT) : (NTMAX), w, a, n, pf, o);                          \
    }
#define GEMM_MK_ENTRY(NAME, MR, NTMAX, CALL, NT) NAME##_##NT,

#if NT_MAX == 4
#define GEMM_FOR_NT(X, ...) X(__VA_ARGS__, 1) X(__VA_ARGS__, 2) X(__VA_ARGS__, 3) X(__VA_ARGS__, 4)
#elif NT_MAX == 8
#define GEMM_FOR_NT(X, ...)                                                                                  \
    X(__VA_ARGS__, 1) X(__VA_ARGS__, 2) X(__VA_ARGS__, 3) X(__VA_ARGS__, 4) X(__VA_ARGS__, 5) X(__VA_ARGS__, 6) \
    X(__VA_ARGS__, 7) X(__VA_ARGS__, 8)
#else
#error "NT_MAX must be 4 or 8"
#endif

/* The weight types, as X(type, activation type, kernel name, tile family). */
#define GEMM_TYPES(X)                                                                                  \
    X(Q4_0, Q8_0, q4_0, L) X(Q4_1, Q8_1, q4_1, L) X(Q5_0, Q8_0, q5_0, L) X(Q5_1, Q8_1, q5_1, L)        \
    X(Q8_0, Q8_0, q8_0, L) X(IQ4_NL, Q8_0, iq4_nl, L)                                                  \
    X(Q4_K, Q8_K, q4_K, K) X(Q5_K, Q8_K, q5_K, K) X(Q2_K, Q8_K, q2_K, K) X(Q3_K, Q8_K, q3_K, K)        \
    X(Q6_K, Q8_K, q6_K, K) X(IQ4_XS, Q8_K, iq4_xs, K)                                                  \
    X(F32, F32, f32, F) X(F16, F32, f16, F) X(BF16, F32, bf16, F)                                      \
    X(NF4, Q8_0, nf4, N) X(NF4_DQ, Q8_0, nf4dq, N)

/* A type's micro-kernels and its gemm entry point (tiles of MR_fam rows x
 * NT_fam tokens). */
#define GEMM_DEF(T, AT, NAME, FAM)                                                                         \
    GEMM_FOR_NT(GEMM_MK, NAME, MR_##FAM, NT_##FAM, C_##T)                                                  \
    static const mk_fn NAME##_mk[NT_MAX] = {GEMM_FOR_NT(GEMM_MK_ENTRY, NAME, MR_##FAM, NT_##FAM, C_##T)}; \
    static void NAME##_gemm(const void *w, size_t wrb, int64_t n, int64_t r0, int64_t r1, const void *act,   \
                            size_t arb, int n_tok, float *y, int64_t ldy) {                               \
        gemm_tiles(NAME##_mk, MR_##FAM, NT_##FAM, w, wrb, n, r0, r1, act, arb, n_tok, y, ldy);            \
    }
#define GEMM_ROW(T, AT, NAME, FAM) TK_QKERNEL_SIMD_KERNEL(GEMM_ISA, GEMM_SUFFIX, TK_##T, AT, #T, NAME##_gemm),

/* The kernels of the types in TYPES (a list like GEMM_TYPES), their table
 * and its lookup function FN. */
#define GEMM_KERNELS(FN, TYPES)                                                                          \
    TYPES(GEMM_DEF)                                                                                      \
    static const tk_qkernel gemm_kernels[TK_DTYPE_LIMIT] = {TYPES(GEMM_ROW)};                            \
    const tk_qkernel *FN(tk_dtype wtype) { return tk_qkernel_pick(gemm_kernels, wtype); }

#endif
