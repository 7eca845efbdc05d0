/* Paged attention with online softmax (FlashAttention-style).  Scores are
 * computed one chunk of positions at a time; a running max, a running sum
 * and a rescaled accumulator per query head replace the score matrix, so
 * memory is O(chunk) whatever the context.  The query heads that share one
 * KV head (GQA/MQA) are processed together, and so are the queries of a
 * tile of consecutive tokens (prefill), so each K/V chunk is read and
 * converted once per tile.  A position range can be processed in pieces (by
 * different threads) and the partial states merged: flash-decoding for long
 * contexts.
 *
 * Two implementations: the portable scalar reference (tk_attn_range, one
 * token at a time, per KV block) and SIMD kernels (AVX2+FMA+F16C, AVX-512,
 * AMX, arm64 NEON) chosen at run time (tk_attn_isa).  Every query row goes through the same
 * instruction sequence whatever tile it is in, so a token's result depends
 * only on its query, its visible range and the segment boundaries, not on
 * the other tokens of its tile or on the thread count.
 *
 * Q8_0 KV: the scores use exact integer dots, as a Q8_0 matmul does.  Each
 * query row is quantized to Q8_0 blocks of 32 dims (tk_qkernel_quant_q8_0:
 * q = round(x * 127/amax), d = f16(amax/127)); for a key with blocks
 * (dk_b, k_b):
 *
 *   isum_b = sum of q_b[i] * k_b[i]            (exact int32)
 *   acc    = (float)isum_0 * (dq_0 * dk_0)
 *   acc    = fmaf((float)isum_b, dq_b * dk_b, acc)     b = 1, 2, ... in order
 *   s      = acc * scale
 *
 * the same float sequence on every level (scalar included), so the scores
 * are bit-identical across levels.  P·V uses V as stored (int8 * dv) as
 * for the other types. */
#ifndef TK_ATTENTION_H
#define TK_ATTENTION_H

#include <stddef.h>

#include "../formats/quant_blocks.h"
#include "../kv/kv.h"
#include "cpu.h"

/* Starts an empty state for `group` heads of head_dim hd. */
void tk_attn_init(int group, int hd, float *acc, float *mx, float *sum);

/* Scalar reference: folds positions [lo, hi) of the sequence (layer,
 * kv_head) into the state.  q holds the group's query vectors, one after the
 * other.  scratch must hold tk_attn_scratch_floats(kv, group) floats. */
void tk_attn_range(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const float *q, int group,
                   float scale, int lo, int hi, float *acc, float *mx, float *sum, float *scratch);
size_t tk_attn_scratch_floats(const tk_kv_pool *kv, int group);

/* The Q8_0 score (see above) of a quantized query row q (n_blocks blocks)
 * and a stored key row. */
float tk_attn_q8_score(const tk_block_q8_0 *q, const unsigned char *krow, int n_blocks, float scale);

/* state a = merge(a, b): the softmax over the union of both ranges. */
void tk_attn_merge(int group, int hd, float *acc, float *mx, float *sum, const float *acc_b, const float *mx_b,
                   const float *sum_b);

/* out (group x hd) = acc / sum. */
void tk_attn_output(int group, int hd, const float *acc, const float *sum, float *out);

/* ---- tiles ---- */

/* Positions per SIMD chunk: chunks start at multiples of TK_ATTN_CHUNK
 * (absolute positions), so a row's chunks do not depend on its tile. */
#define TK_ATTN_CHUNK 64

/* The queries of n_tok tokens of one sequence; each has `group` heads that
 * share one KV head.  State row r = t * group + g (acc: row r at r * hd). */
typedef struct tk_attn_tile {
    const float *q;      /* head g of token t at q + t * q_stride + g * hd */
    size_t q_stride;
    int n_tok, group;
    const int *lo, *hi;  /* token t sees positions [lo[t], hi[t]) */
} tk_attn_tile;

/* The kernel level tk_attn_tile_range uses for a requested level and head
 * dimension: AMX needs head_dim % 32 == 0 (and runs only for F16 KV: for
 * other KV types the AMX level runs the AVX-512 kernel), AVX-512 head_dim %
 * 16 == 0, AVX2 head_dim % 8 == 0, NEON (arm64) head_dim % 4 == 0;
 * otherwise (or on other CPUs) the scalar reference. */
tk_isa tk_attn_isa(tk_isa want, int head_dim);

/* Scratch floats of one tk_attn_tile_range call for tiles of at most
 * max_rows rows (n_tok * group), on any level. */
size_t tk_attn_tile_scratch_floats(int head_dim, int block_size, int max_rows);

/* Folds, for every token t of the tile, positions [max(lo[t], seg_lo),
 * min(hi[t], seg_hi)) into its rows' state (rows with nothing there are left
 * as they are).  isa: a level returned by tk_attn_isa.  Every position below
 * the largest hi must hold K/V. */
void tk_attn_tile_range(tk_isa isa, const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head,
                        const tk_attn_tile *tile, float scale, int seg_lo, int seg_hi, float *acc, float *mx,
                        float *sum, float *scratch);

/* The SIMD implementations (attention_avx2.c, attention_avx512.c,
 * attention_amx.c, attention_neon.c); they return -1 without doing anything when not built
 * for this target (AMX: also for KV types other than F16). */
int tk_attn_tile_avx2(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const tk_attn_tile *tile,
                      float scale, int seg_lo, int seg_hi, float *acc, float *mx, float *sum, float *scratch);
int tk_attn_tile_avx512(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const tk_attn_tile *tile,
                        float scale, int seg_lo, int seg_hi, float *acc, float *mx, float *sum, float *scratch);
int tk_attn_tile_neon(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const tk_attn_tile *tile,
                      float scale, int seg_lo, int seg_hi, float *acc, float *mx, float *sum, float *scratch);
int tk_attn_tile_amx(const tk_kv_pool *kv, const tk_kv_seq *s, int layer, int kv_head, const tk_attn_tile *tile,
                     float scale, int seg_lo, int seg_hi, float *acc, float *mx, float *sum, float *scratch);

#endif
