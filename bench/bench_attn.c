/* Micro-benchmark of the attention tile kernels, 1 thread, TinyLlama shapes
 * (4 KV heads, 8 query heads each, head_dim 64; one layer), this thread's
 * CPU time (steady on a busy machine).
 *
 *   bench_attn [context] [kv type]      default 4096 f32
 *
 * decode: one token at the end of the context, every KV head;
 * prefill: the last 512 tokens of the context in tiles of 8 tokens.
 * Reports ms and GFLOP/s (2 * rows * visible positions * head_dim * 2).
 * Environment: TK_BENCH_ISA=<level> runs one level, TK_BENCH_REPS=n
 * repeats (best of; prefill at most 5), TK_BENCH_NO_PREFILL=1 decode only
 * (for profiling), TK_BENCH_BLOCK=n tokens per KV block (default 64, as
 * the engine), TK_BENCH_TILE=n prefill tile tokens (default 8),
 * TK_BENCH_FLOOR=1 also prints lower bounds for the prefill call (the
 * softmax step alone, the AMX tile products alone: attn_floor.c).
 *
 * Engine-like decode (TK_BENCH_LAYERS=n, n > 1): a pool of n layers (the
 * engine's KV layout: a block holds every layer), decode of one token at
 * the end of the context on every layer and KV head, the range cut into
 * segments of TK_BENCH_SPLIT positions (default 512, as the forward pass)
 * folded with tk_attn_merge; between repeats TK_BENCH_FLUSH_MB (default
 * 600, about the weights of a 1.1B Q4_0 model) of other memory is read.
 * Reports ms per layer (median of the repeats) and the KV bytes read per
 * second. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_floor.h"
#include <tokamak.h>
#include "kernels/attention.h"
#include "kernels/cpu.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int kv_block_size(void) { return getenv("TK_BENCH_BLOCK") ? atoi(getenv("TK_BENCH_BLOCK")) : 64; }

/* The engine-like decode (see the header). */
static int engine_decode(int ctx, tk_kv_type type, int n_layers, int n_kv, int group, int hd) {
    const int block = kv_block_size();
    const int split = getenv("TK_BENCH_SPLIT") ? atoi(getenv("TK_BENCH_SPLIT")) : 512;
    const size_t flush_mb = getenv("TK_BENCH_FLUSH_MB") ? (size_t)atol(getenv("TK_BENCH_FLUSH_MB")) : 600;
    int reps = getenv("TK_BENCH_REPS") ? atoi(getenv("TK_BENCH_REPS")) : 15;
    if (split < TK_ATTN_CHUNK || split % TK_ATTN_CHUNK || reps < 1 || reps > 1000) {
        fprintf(stderr, "bad TK_BENCH_SPLIT or TK_BENCH_REPS\n");
        return 1;
    }
    /* TK_BENCH_POOLS=layer|head: one pool per layer / per (layer, head)
     * (a layout experiment: longer contiguous runs of one head's rows) */
    const char *pools_env = getenv("TK_BENCH_POOLS");
    const int per = pools_env && !strcmp(pools_env, "head") ? 2 : pools_env && !strcmp(pools_env, "layer") ? 1 : 0;
    const int n_pools = per == 2 ? n_layers * n_kv : per == 1 ? n_layers : 1;
    tk_kv_pool pools[256];
    tk_kv_seq seqs[256];
    tk_err err;
    if (n_pools > 256) return 1;
    for (int i = 0; i < n_pools; i++) {
        if (tk_kv_pool_init(&pools[i], per ? 1 : n_layers, per == 2 ? 1 : n_kv, hd, block, ctx / block + 2, type,
                            false, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        seqs[i] = (tk_kv_seq){0};
        if (tk_kv_seq_reserve(&pools[i], &seqs[i], ctx, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
    }
#define POOL(l, h) (&pools[per == 2 ? (l) * n_kv + (h) : per == 1 ? (l) : 0])
#define SEQ(l, h) (&seqs[per == 2 ? (l) * n_kv + (h) : per == 1 ? (l) : 0])
#define PL(l) (per ? 0 : (l))
#define PH(h) (per == 2 ? 0 : (h))
    const tk_kv_pool kv = pools[0];
    /* 4093 random rows, stored once, copied round-robin (fast to fill) */
    enum { N_ROWS = 4093 };
    unsigned char *rows = malloc(N_ROWS * kv.row_bytes);
    if (!rows) return 1;
    float row[512];
    uint64_t x = 1;
    for (int r = 0; r < N_ROWS; r++) {
        for (int d = 0; d < hd; d++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            row[d] = (float)((x >> 40) & 0xffff) / 32768.0f - 1.0f;
        }
        tk_kv_store(&kv, row, rows + (size_t)r * kv.row_bytes);
    }
    size_t ri = 0;
    for (int l = 0; l < n_layers; l++)
        for (int h = 0; h < n_kv; h++)
            for (int p = 0; p < ctx; p++) {
                memcpy(tk_kv_k(POOL(l, h), SEQ(l, h), PL(l), PH(h), p), rows + (ri++ % N_ROWS) * kv.row_bytes,
                       kv.row_bytes);
                memcpy(tk_kv_v(POOL(l, h), SEQ(l, h), PL(l), PH(h), p), rows + (ri++ % N_ROWS) * kv.row_bytes,
                       kv.row_bytes);
            }
    free(rows);
    float *q = malloc(sizeof(float) * (size_t)group * hd);
    if (!q) return 1;
    for (int i = 0; i < group * hd; i++) q[i] = (float)(i % 97) / 97.0f - 0.5f;
    const int st_n = group * (hd + 2);
    float *st = malloc(sizeof(float) * 2 * st_n), *out = malloc(sizeof(float) * group * hd);
    float *scratch = malloc(sizeof(float) * tk_attn_tile_scratch_floats(hd, block, group));
    size_t flush_n = flush_mb << 20;
    unsigned char *flush = flush_n ? malloc(flush_n) : NULL;
    double *times = malloc(sizeof(double) * reps);
    if (!st || !out || !scratch || (flush_n && !flush) || !times) return 1;
    if (flush) memset(flush, 1, flush_n);
    int lo = 0, hi = ctx;
    tk_isa isa = tk_attn_isa(tk_cpu_isa(), hd);
    if (getenv("TK_BENCH_ISA")) isa = tk_attn_isa(tk_cpu_isa_env("TK_BENCH_ISA", isa), hd);
    volatile unsigned sink = 0;
    float check = 0;
    for (int rep = 0; rep < reps; rep++) {
        unsigned fs = 0;
        for (size_t i = 0; i < flush_n; i += 64) fs += flush[i];
        sink += fs;
        double t0 = tk_clock_seconds(TK_CLOCK_THREAD_CPU);
        for (int l = 0; l < n_layers; l++)
            for (int h = 0; h < n_kv; h++) {
                tk_attn_tile tile = {q, (size_t)group * hd, 1, group, &lo, &hi};
                float *acc = st, *mx = acc + group * hd, *sum = mx + group;
                float *acc2 = st + st_n, *mx2 = acc2 + group * hd, *sum2 = mx2 + group;
                tk_attn_init(group, hd, acc, mx, sum);
                for (int s0 = 0; s0 < ctx; s0 += split) {
                    if (s0 == 0) {
                        tk_attn_tile_range(isa, POOL(l, h), SEQ(l, h), PL(l), PH(h), &tile, 0.125f, s0, s0 + split,
                                           acc, mx, sum, scratch);
                    } else {
                        tk_attn_init(group, hd, acc2, mx2, sum2);
                        tk_attn_tile_range(isa, POOL(l, h), SEQ(l, h), PL(l), PH(h), &tile, 0.125f, s0, s0 + split,
                                           acc2, mx2, sum2, scratch);
                        tk_attn_merge(group, hd, acc, mx, sum, acc2, mx2, sum2);
                    }
                }
                tk_attn_output(group, hd, acc, sum, out);
                check += out[0];
            }
        times[rep] = tk_clock_seconds(TK_CLOCK_THREAD_CPU) - t0;
    }
    (void)sink; /* the flush reads' only consumer: a volatile store the compiler keeps */
    qsort(times, reps, sizeof(double), cmp_double);
    double med = times[reps / 2];
    double bytes = 2.0 * n_layers * n_kv * (double)ctx * kv.row_bytes;
    printf("engine-like decode: context %d, %s KV, %d layers of %d KV heads x %d (head size %d), pools %d, %s, split %d: "
           "%.3f ms/layer (min %.3f), %.1f GB/s of KV (check %g)\n",
           ctx, tk_kv_type_name(type), n_layers, n_kv, group, hd, n_pools, tk_isa_name(isa), split, med * 1e3 / n_layers,
           times[0] * 1e3 / n_layers, bytes / med * 1e-9, (double)check);
    for (int i = 0; i < n_pools; i++) {
        tk_kv_seq_release(&pools[i], &seqs[i]);
        tk_kv_pool_free(&pools[i]);
    }
    free(q), free(st), free(out), free(scratch), free(flush), free(times);
    return 0;
}

int main(int argc, char **argv) {
    int ctx = argc > 1 ? atoi(argv[1]) : 4096;
    int type = argc > 2 ? tk_kv_type_from_name(argv[2]) : TK_KV_F32;
    /* TK_BENCH_GROUP / TK_BENCH_HD / TK_BENCH_KV_HEADS: other shapes (query
     * heads per KV head, head size, KV heads), e.g. 1 / 128 / 16 for
     * OLMoE's multi-head attention, 4 / 256 / 1 for Gemma 3 270M */
    const int group = getenv("TK_BENCH_GROUP") ? atoi(getenv("TK_BENCH_GROUP")) : 8;
    const int hd = getenv("TK_BENCH_HD") ? atoi(getenv("TK_BENCH_HD")) : 64;
    const int n_kv = getenv("TK_BENCH_KV_HEADS") ? atoi(getenv("TK_BENCH_KV_HEADS")) : 4;
    const int n_pre = ctx < 512 ? ctx : 512;
    const int block = kv_block_size();
    if (group < 1 || group > 64 || hd < 8 || hd > 512 || hd % 8 || n_kv < 1 || n_kv > 64) {
        fprintf(stderr, "bad TK_BENCH_GROUP, TK_BENCH_HD or TK_BENCH_KV_HEADS\n");
        return 1;
    }
    const int tile_tok = getenv("TK_BENCH_TILE") ? atoi(getenv("TK_BENCH_TILE")) : 8;
    if (ctx < 1 || type < 0) {
        fprintf(stderr, "usage: bench_attn [context] [f32|f16|q8_0]\n");
        return 1;
    }
    if (getenv("TK_BENCH_LAYERS") && atoi(getenv("TK_BENCH_LAYERS")) > 1)
        return engine_decode(ctx, (tk_kv_type)type, atoi(getenv("TK_BENCH_LAYERS")), n_kv, group, hd);
    tk_kv_pool kv;
    tk_err err;
    if (tk_kv_pool_init(&kv, 1, n_kv, hd, block, ctx / block + 2, (tk_kv_type)type, false, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    tk_kv_seq seq = {0};
    tk_kv_seq_reserve(&kv, &seq, ctx, &err);
    float row[512];
    uint64_t x = 1;
    for (int h = 0; h < n_kv; h++)
        for (int p = 0; p < ctx; p++) {
            for (int d = 0; d < hd; d++) {
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                row[d] = (float)((x >> 40) & 0xffff) / 32768.0f - 1.0f;
            }
            tk_kv_store(&kv, row, tk_kv_k(&kv, &seq, 0, h, p));
            tk_kv_store(&kv, row, tk_kv_v(&kv, &seq, 0, h, p));
        }
    int rows = tile_tok * group;
    float *q = malloc(sizeof(float) * (size_t)n_pre * group * hd);
    for (int i = 0; i < n_pre * group * hd; i++) q[i] = (float)(i % 97) / 97.0f - 0.5f;
    float *st = malloc(sizeof(float) * (size_t)rows * (hd + 2));
    float *scratch = malloc(sizeof(float) * tk_attn_tile_scratch_floats(hd, block, rows));
    int *lo = calloc((size_t)n_pre, sizeof(int)), *hi = malloc(sizeof(int) * n_pre);
    for (int t = 0; t < n_pre; t++) hi[t] = ctx - n_pre + t + 1;
    const tk_isa isas[4] = {TK_ISA_SCALAR, TK_ISA_AVX2, TK_ISA_AVX512, TK_ISA_AMX};
    printf("context %d, %s KV, %d KV heads of %d query heads, head size %d\n", ctx, tk_kv_type_name((tk_kv_type)type),
           n_kv, group, hd);
    for (int ii = 0; ii < 4; ii++) {
        tk_isa isa = isas[ii];
        if (tk_attn_isa(isa, hd) != isa) continue;
        if (getenv("TK_BENCH_ISA") && strcmp(getenv("TK_BENCH_ISA"), tk_isa_name(isa))) continue;
        double best_d = 1e9, best_p = 1e9;
        int reps = getenv("TK_BENCH_REPS") ? atoi(getenv("TK_BENCH_REPS")) : 5;
        const int no_prefill = getenv("TK_BENCH_NO_PREFILL") != NULL;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = tk_clock_seconds(TK_CLOCK_THREAD_CPU);
            for (int h = 0; h < n_kv; h++) {
                tk_attn_tile tile = {q, (size_t)group * hd, 1, group, lo, hi + n_pre - 1};
                tk_attn_init(group, hd, st, st + group * hd, st + group * hd + group);
                tk_attn_tile_range(isa, &kv, &seq, 0, h, &tile, 0.125f, 0, INT_MAX, st, st + group * hd,
                                   st + group * hd + group, scratch);
            }
            double t1 = tk_clock_seconds(TK_CLOCK_THREAD_CPU);
            if (t1 - t0 < best_d) best_d = t1 - t0;
            if ((isa == TK_ISA_SCALAR && rep > 0) || rep >= 5 || no_prefill) continue;
            t0 = tk_clock_seconds(TK_CLOCK_THREAD_CPU);
            for (int h = 0; h < n_kv; h++)
                for (int t = 0; t < n_pre; t += tile_tok) {
                    tk_attn_tile tile = {q + (size_t)t * group * hd, (size_t)group * hd, tile_tok, group, lo + t, hi + t};
                    tk_attn_init(rows, hd, st, st + rows * hd, st + rows * hd + rows);
                    tk_attn_tile_range(isa, &kv, &seq, 0, h, &tile, 0.125f, 0, INT_MAX, st, st + rows * hd,
                                       st + rows * hd + rows, scratch);
                }
            t1 = tk_clock_seconds(TK_CLOCK_THREAD_CPU);
            if (t1 - t0 < best_p) best_p = t1 - t0;
        }
        double fl_d = 4.0 * n_kv * group * (double)ctx * hd;
        double fl_p = 0;
        for (int t = 0; t < n_pre; t++) fl_p += 4.0 * n_kv * group * (double)hi[t] * hd;
        printf("%-7s decode %8.3f ms (%6.1f GFLOP/s)   prefill %d tok %9.2f ms (%6.1f GFLOP/s)\n", tk_isa_name(isa),
               best_d * 1e3, fl_d / best_d * 1e-9, n_pre, best_p * 1e3, fl_p / best_p * 1e-9);
    }
    if (getenv("TK_BENCH_FLOOR")) tk_bench_attn_floor(n_pre, group, n_kv, hd, hi, 3);
    tk_kv_seq_release(&kv, &seq);
    tk_kv_pool_free(&kv);
    free(q), free(st), free(scratch), free(lo), free(hi);
    return 0;
}
