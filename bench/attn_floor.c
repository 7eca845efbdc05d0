/* Lower bounds for the prefill attention call that bench_attn times (see
 * attn_floor.h): how long two parts that any tiled online-softmax kernel
 * must do would take on their own, each at its best on this core.
 *
 *   softmax: the kernels' own online-softmax step (softmax_row of
 *            attention_simd_common.h: mask, max, exp, sum, rescale factor)
 *            over every (row, 64-position chunk) of the call, on a score
 *            buffer that stays in L1; no score arithmetic, no P conversion.
 *   tiles:   the AMX-BF16 products at one bf16 per operand (less precise
 *            than the 1e-5 the tests hold the kernels to), S = Q K^T and
 *            O += P V as 16 x 16 x 32 TDPBF16PS, with no tile loads or
 *            stores at all: rows * positions * head_dim / 8192 operations
 *            per product.
 *
 * Compiled with the AMX flags on x86-64 (CMakeLists.txt); elsewhere, or on
 * a CPU without AMX, the tile figure is left out. */
#include "attn_floor.h"

#include <math.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AMX_TILE__) && \
    defined(__AMX_BF16__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <tokamak.h>
#include "kernels/amx_tiles.h"
#include "kernels/attention_avx512_ops.h"
#include "kernels/attention_simd_common.h"

/* The softmax steps of rows [0, n_rows) where row r sees positions
 * [0, hi[r / group]) in chunks of CH. */
static double softmax_floor(int n_tok, int group, const int *hi, float *check) {
    alignas(64) float sr[CH];
    for (int i = 0; i < CH; i++) sr[i] = (float)(i % 13) * 0.25f - 1.0f;
    float total = 0;
    double t0 = tk_clock_seconds(TK_CLOCK_THREAD_CPU);
    for (int t = 0; t < n_tok; t++)
        for (int g = 0; g < group; g++) {
            float mx = -INFINITY, sum = 0, alpha;
            for (int c0 = 0; c0 < hi[t]; c0 += CH) {
                const int rb = hi[t] - c0 < CH ? hi[t] - c0 : CH;
                softmax_row(sr, 0, (rb + VL - 1) / VL, 0, rb, &mx, &sum, &alpha);
            }
            total += sum;
        }
    double t1 = tk_clock_seconds(TK_CLOCK_THREAD_CPU);
    *check += total;
    return t1 - t0;
}

static double tiles_floor(double n_ops) {
    tk_amx_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) c.colsb[t] = 64, c.rows[t] = 16;
    alignas(64) uint16_t zeros[512] = {0};
    tk_amx_load_config(&c);
    TK_TILE_LOAD(4, zeros, 64);
    TK_TILE_LOAD(5, zeros, 64);
    TK_TILE_LOAD(6, zeros, 64);
    TK_TILE_LOAD(7, zeros, 64);
    TK_TILE_ZERO(0);
    TK_TILE_ZERO(1);
    TK_TILE_ZERO(2);
    TK_TILE_ZERO(3);
    double t0 = tk_clock_seconds(TK_CLOCK_THREAD_CPU);
    for (double k = 0; k < n_ops; k += 4) {
        TK_TILE_DPBF16PS(0, 4, 6);
        TK_TILE_DPBF16PS(1, 4, 7);
        TK_TILE_DPBF16PS(2, 5, 6);
        TK_TILE_DPBF16PS(3, 5, 7);
    }
    double t1 = tk_clock_seconds(TK_CLOCK_THREAD_CPU);
    tk_amx_release();
    return t1 - t0;
}

int tk_bench_attn_floor(int n_tok, int group, int n_kv, int hd, const int *hi, int reps) {
    if (!tk_isa_supported(TK_ISA_AVX512)) return -1;
    float check = 0;
    double best_s = 1e30, best_t = 1e30, rows_pos = 0;
    for (int t = 0; t < n_tok; t++) rows_pos += (double)group * hi[t];
    /* per KV head and product: 16 x 16 outputs over 32 dims (S) or 32
     * positions (P V) per operation */
    const double n_ops = n_kv * (rows_pos * hd / 8192.0) * 2.0;
    const bool tiles = tk_isa_supported(TK_ISA_AMX);
    for (int r = 0; r < reps; r++) {
        double s = 0;
        for (int h = 0; h < n_kv; h++) s += softmax_floor(n_tok, group, hi, &check);
        if (s < best_s) best_s = s;
        if (tiles) {
            double t = tiles_floor(n_ops);
            if (t < best_t) best_t = t;
        }
    }
    printf("floor   softmax step %9.2f ms", best_s * 1e3);
    if (tiles) printf("   tile products (1 bf16, no loads) %7.2f ms (%.0f TDPBF16PS)   sum %9.2f ms", best_t * 1e3,
                      n_ops, (best_s + best_t) * 1e3);
    printf("   (check %g)\n", (double)check);
    return 0;
}

#else

int tk_bench_attn_floor(int n_tok, int group, int n_kv, int hd, const int *hi, int reps) {
    (void)n_tok, (void)group, (void)n_kv, (void)hd, (void)hi, (void)reps;
    return -1;
}

#endif
