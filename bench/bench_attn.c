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
 * (for profiling). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/attention.h"
#include "kernels/cpu.h"

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int ctx = argc > 1 ? atoi(argv[1]) : 4096;
    int type = argc > 2 ? tk_kv_type_from_name(argv[2]) : TK_KV_F32;
    const int n_kv = 4, group = 8, hd = 64, block = 16, tile_tok = 8, n_pre = ctx < 512 ? ctx : 512;
    if (ctx < 1 || type < 0) {
        fprintf(stderr, "usage: bench_attn [context] [f32|f16|q8_0]\n");
        return 1;
    }
    tk_kv_pool kv;
    tk_err err;
    if (tk_kv_pool_init(&kv, 1, n_kv, hd, block, ctx / block + 2, (tk_kv_type)type, false, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    tk_kv_seq seq = {0};
    tk_kv_seq_reserve(&kv, &seq, ctx, &err);
    float row[64];
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
    printf("context %d, %s KV\n", ctx, tk_kv_type_name((tk_kv_type)type));
    for (int ii = 0; ii < 4; ii++) {
        tk_isa isa = isas[ii];
        if (tk_attn_isa(isa, hd) != isa) continue;
        if (getenv("TK_BENCH_ISA") && strcmp(getenv("TK_BENCH_ISA"), tk_isa_name(isa))) continue;
        double best_d = 1e9, best_p = 1e9;
        int reps = getenv("TK_BENCH_REPS") ? atoi(getenv("TK_BENCH_REPS")) : 5;
        const int no_prefill = getenv("TK_BENCH_NO_PREFILL") != NULL;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = cpu_now();
            for (int h = 0; h < n_kv; h++) {
                tk_attn_tile tile = {q, (size_t)group * hd, 1, group, lo, hi + n_pre - 1};
                tk_attn_init(group, hd, st, st + group * hd, st + group * hd + group);
                tk_attn_tile_range(isa, &kv, &seq, 0, h, &tile, 0.125f, 0, INT_MAX, st, st + group * hd,
                                   st + group * hd + group, scratch);
            }
            double t1 = cpu_now();
            if (t1 - t0 < best_d) best_d = t1 - t0;
            if ((isa == TK_ISA_SCALAR && rep > 0) || rep >= 5 || no_prefill) continue;
            t0 = cpu_now();
            for (int h = 0; h < n_kv; h++)
                for (int t = 0; t < n_pre; t += tile_tok) {
                    tk_attn_tile tile = {q + (size_t)t * group * hd, (size_t)group * hd, tile_tok, group, lo + t, hi + t};
                    tk_attn_init(rows, hd, st, st + rows * hd, st + rows * hd + rows);
                    tk_attn_tile_range(isa, &kv, &seq, 0, h, &tile, 0.125f, 0, INT_MAX, st, st + rows * hd,
                                       st + rows * hd + rows, scratch);
                }
            t1 = cpu_now();
            if (t1 - t0 < best_p) best_p = t1 - t0;
        }
        double fl_d = 4.0 * n_kv * group * (double)ctx * hd;
        double fl_p = 0;
        for (int t = 0; t < n_pre; t++) fl_p += 4.0 * n_kv * group * (double)hi[t] * hd;
        printf("%-7s decode %8.3f ms (%6.1f GFLOP/s)   prefill %d tok %9.2f ms (%6.1f GFLOP/s)\n", tk_isa_name(isa),
               best_d * 1e3, fl_d / best_d * 1e-9, n_pre, best_p * 1e3, fl_p / best_p * 1e-9);
    }
    tk_kv_seq_release(&kv, &seq);
    tk_kv_pool_free(&kv);
    free(q), free(st), free(scratch), free(lo), free(hi);
    return 0;
}
