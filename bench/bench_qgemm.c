/* Micro-benchmark of the qgemm kernels on TinyLlama-like shapes, 1 thread.
 *
 *   bench_qgemm                 all types, all shapes, scalar vs best ISA
 *   TK_BENCH_TYPES=Q4_0,NF4     these types (default Q4_0 Q8_0 Q4_K Q6_K F16)
 *   TK_BENCH_ISAS=avx2,avx512   only these ISAs (default: scalar + every
 *                               supported SIMD level)
 *   TK_BENCH_SHAPES=0,3         only these shapes (indices into the list)
 *   TK_BENCH_MODE=decode        only decode (or prefill)
 *   TK_BENCH_NTOK=16            tokens of the "prefill" column (default 128)
 *   TK_BENCH_DECODE_NTOK=2      tokens of the "decode" column (default 1: a
 *                               few sequences or an expert's tokens, still
 *                               streaming the weights from DRAM)
 *   TK_BENCH_HOT=1              decode re-reads one copy (cache-resident
 *                               when small: compute speed, not DRAM)
 *   TK_BENCH_CPUTIME=1          time with this thread's CPU time instead of
 *                               wall time (steadier on a busy machine)
 *   TK_BENCH_SPLIT=128          decode calls the kernel on row ranges of this
 *                               many rows (as the engine's tasks do) instead
 *                               of the whole matrix at once
 *   TK_BENCH_POOL_MB=1024       decode streams the weights from a pool of
 *                               copies this large, so they come from DRAM
 *                               rather than cache (as in a real model)
 *   TK_BENCH_PANELS=1           kernels that read the panel layout
 *                               (kernels/panels.h) get the weights in it, as
 *                               the engine gives them at load (in 2 MiB
 *                               pages where the kernel has them)
 *
 * Decode (n_tok = 1) reports GB/s of weight bytes read; prefill (n_tok =
 * 128) reports GFLOP/s (2 * out * in * n_tok).  Decode times are medians,
 * prefill times the best of three; both exclude activation packing.  Slow scalar prefill runs are timed
 * on a subset of rows (the rate does not depend on the row count). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <tokamak.h>

#include "formats/dtype.h"
#include "kernels/cpu.h"
#include "kernels/panels.h"
#include "kernels/qgemm.h"

static int use_cputime;

static double now(void) { return tk_clock_seconds(use_cputime ? TK_CLOCK_THREAD_CPU : TK_CLOCK_WALL); }

static uint64_t rs = 88172645463325252ull;
static uint64_t xr(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

/* Random bytes, then sane values where the format has scales / floats. */
static void fill(tk_dtype t, uint8_t *p, size_t bytes) {
    uint64_t *q = (uint64_t *)p;
    for (size_t i = 0; i < bytes / 8; i++) q[i] = xr();
    if (t == TK_F16) { /* clear the top exponent bit: |v| < 2, no inf/NaN */
        for (size_t i = 0; i < bytes / 8; i++) q[i] &= 0xBFFFBFFFBFFFBFFFull;
        return;
    }
    if (t == TK_BF16 || t == TK_F32) { /* sign, mantissa random; exponent of [0.5, 1) */
        const uint64_t keep = t == TK_BF16 ? 0x807F807F807F807Full : 0x807FFFFF807FFFFFull;
        const uint64_t expo = t == TK_BF16 ? 0x3F003F003F003F00ull : 0x3F0000003F000000ull;
        for (size_t i = 0; i < bytes / 8; i++) q[i] = (q[i] & keep) | expo;
        return;
    }
    const tk_dtype_info *info = tk_dtype_get(t);
    if (!info->block_bytes) return; /* NF4 types: fill_nf4 per shape */
    int d_off = 0, m_off = -1;
    if (t == TK_Q4_1 || t == TK_Q5_1 || t == TK_Q4_K || t == TK_Q5_K) m_off = 2;
    if (t == TK_Q2_K) d_off = 80, m_off = 82;
    if (t == TK_Q3_K) d_off = 108;
    if (t == TK_Q6_K) d_off = 208;
    const uint16_t h = tk_f32_to_f16(0.01f);
    for (size_t b = 0; b + (size_t)info->block_bytes <= bytes; b += (size_t)info->block_bytes) {
        memcpy(p + b + d_off, &h, 2);
        if (m_off >= 0) memcpy(p + b + m_off, &h, 2);
    }
}

/* NF4 / NF4_DQ (rows of in elements, wrb bytes): the float scale fields of
 * every row in the first `bytes` of p (the codes stay random). */
static void fill_nf4(tk_dtype t, uint8_t *p, size_t bytes, size_t wrb, int64_t in) {
    const int64_t nb = (in + 63) / 64, ng = (nb + 255) / 256;
    const float absmax = 0.05f, gs[2] = {0.05f / 255, 0.001f};
    for (size_t r = 0; r + wrb <= bytes; r += wrb) {
        if (t == TK_NF4)
            for (int64_t b = 0; b < nb; b++) memcpy(p + r + 36 * b, &absmax, 4);
        else
            for (int64_t g = 0; g < ng; g++) memcpy(p + r + 8 * g, gs, 8);
    }
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The panel pool as the model allocates its panel layout (model/panels.c):
 * 2 MiB pages where the kernel gives them, so that decode's DRAM figures
 * are not those of a TLB miss every 4 KiB.  The row pool stays malloc's,
 * as a mapped file's page cache has 4 KiB pages. */
static void *huge_alloc(size_t bytes) {
    const size_t huge = (size_t)2 << 20, rounded = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, rounded);
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}

static int listed(const char *list, const char *name) {
    if (!list) return 1;
    const size_t n = strlen(name);
    for (const char *s = list; (s = strstr(s, name)); s += n)
        if ((s == list || s[-1] == ',') && (s[n] == ',' || s[n] == 0)) return 1;
    return 0;
}

int main(void) {
    static const tk_dtype types[] = {TK_Q4_0, TK_Q8_0, TK_Q4_K, TK_Q6_K, TK_F16};
    static const struct { int64_t out, in; } shapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};
    const char *tlist = getenv("TK_BENCH_TYPES"), *ilist = getenv("TK_BENCH_ISAS");
    const char *slist = getenv("TK_BENCH_SHAPES"), *mode = getenv("TK_BENCH_MODE");
    const int do_dec = !mode || !strcmp(mode, "decode"), do_pre = !mode || !strcmp(mode, "prefill");
    size_t pool_bytes = (size_t)(getenv("TK_BENCH_POOL_MB") ? atol(getenv("TK_BENCH_POOL_MB")) : 1024) << 20;
    if (pool_bytes < ((size_t)140 << 20)) pool_bytes = (size_t)140 << 20; /* the largest matrix */
    const int hot = getenv("TK_BENCH_HOT") && atoi(getenv("TK_BENCH_HOT"));
    const int prefill_tok = getenv("TK_BENCH_NTOK") && atoi(getenv("TK_BENCH_NTOK")) > 0 ? atoi(getenv("TK_BENCH_NTOK")) : 128;
    const int dec_env = getenv("TK_BENCH_DECODE_NTOK") ? atoi(getenv("TK_BENCH_DECODE_NTOK")) : 1;
    const int decode_tok = dec_env < 1 ? 1 : dec_env > prefill_tok ? prefill_tok : dec_env;
    use_cputime = getenv("TK_BENCH_CPUTIME") && atoi(getenv("TK_BENCH_CPUTIME"));
    const int64_t split = getenv("TK_BENCH_SPLIT") && atoi(getenv("TK_BENCH_SPLIT")) > 0 ? atoi(getenv("TK_BENCH_SPLIT")) : 0;
    const int panels = getenv("TK_BENCH_PANELS") && atoi(getenv("TK_BENCH_PANELS"));
    if (panels && split % TK_PANEL_ROWS) {
        fprintf(stderr, "TK_BENCH_SPLIT must be a multiple of %d with TK_BENCH_PANELS\n", TK_PANEL_ROWS);
        return 2;
    }

    tk_isa isas[TK_ISA_COUNT];
    int n_isa = 0;
    for (int i = 0; i < TK_ISA_COUNT; i++)
        if (tk_isa_supported((tk_isa)i) && listed(ilist, tk_isa_name((tk_isa)i))) isas[n_isa++] = (tk_isa)i;
    printf("best isa: %s; pool %zu MiB; decode = n_tok %d (GB/s of weights), prefill = n_tok %d (GFLOP/s)\n",
           tk_isa_name(tk_cpu_best_isa()), pool_bytes >> 20, decode_tok, prefill_tok);

    uint8_t *pool = malloc(pool_bytes), *panel_pool = panels ? huge_alloc(pool_bytes) : NULL;
    if (panels && !panel_pool) return 1;
    float *x = malloc(sizeof(float) * 5632 * prefill_tok);
    float *y = malloc(sizeof(float) * 32000 * prefill_tok);
    void *act = malloc((size_t)5632 * 4 * prefill_tok);
    for (int i = 0; i < 5632 * prefill_tok; i++) x[i] = (float)((int)(xr() % 2001) - 1000) * 1e-3f;
    if (!pool || !x || !y || !act) return 1;

    printf("%-6s %-11s %-7s %12s %14s\n", "type", "shape", "isa", "decode GB/s", "prefill GF/s");
    /* default: the five types above; TK_BENCH_TYPES may name any type */
    tk_dtype order[TK_DTYPE_LIMIT];
    size_t n_types = 0;
    if (!tlist)
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) order[n_types++] = types[ti];
    else
        for (int t = 0; t < TK_DTYPE_LIMIT; t++)
            if (tk_dtype_get(t) && tk_qkernel_get((tk_dtype)t, TK_ISA_SCALAR) && listed(tlist, tk_dtype_get(t)->name))
                order[n_types++] = (tk_dtype)t;
    for (size_t ti = 0; ti < n_types; ti++) {
        const tk_dtype t = order[ti];
        fill(t, pool, pool_bytes);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            char sidx[8];
            snprintf(sidx, sizeof sidx, "%zu", si);
            if (!listed(slist, sidx)) continue;
            const int64_t out = shapes[si].out, in = shapes[si].in;
            const size_t wrb = tk_dtype_row_bytes(t, in), mbytes = wrb * (size_t)out;
            const size_t copies = hot ? 1 : pool_bytes / mbytes;
            if (t == TK_NF4 || t == TK_NF4_DQ) fill_nf4(t, pool, copies * mbytes, wrb, in);
            const int in_panels = panels && tk_panels_layout(t) && out % TK_PANEL_ROWS == 0;
            for (size_t cp = 0; in_panels && cp < copies; cp++)
                tk_panels_pack(t, pool + cp * mbytes, wrb, out, panel_pool + cp * mbytes);
            for (int ii = 0; ii < n_isa; ii++) {
                const tk_qkernel *k = tk_qkernel_get(t, isas[ii]);
                if (!k || (ii > 0 && k->isa != isas[ii])) continue; /* no kernel of its own */
                /* the kernel's gemm, or its panel-layout one on the packed copies */
                void (*gemm)(const void *, size_t, int64_t, int64_t, int64_t, const void *, size_t, int, float *,
                             int64_t) = in_panels && k->gemm_panels ? k->gemm_panels : k->gemm;
                const uint8_t *wpool = in_panels && k->gemm_panels ? panel_pool : pool;
                const size_t arb = k->act_row_bytes(in);
                for (int tok = 0; tok < prefill_tok; tok++) k->quantize_act(x + tok * in, (uint8_t *)act + tok * arb, in);
                /* decode: stream through the pool copies; median time */
                enum { MAXR = 4096 };
                static double times[MAXR];
                int reps = 0;
                size_t c = 0;
                const double tend = now() + (k->isa == TK_ISA_SCALAR ? 0.6 : 0.4);
                while (do_dec && reps < MAXR && (reps < 3 || now() < tend)) {
                    const double t0 = now();
                    if (!split) gemm(wpool + c * mbytes, wrb, in, 0, out, act, arb, decode_tok, y, out);
                    else
                        for (int64_t r = 0; r < out; r += split) {
                            const int64_t r1 = r + split < out ? r + split : out;
                            gemm(wpool + c * mbytes, wrb, in, r, r1, act, arb, decode_tok, y, out);
                        }
                    times[reps++] = now() - t0;
                    c = (c + 1) % copies;
                }
                qsort(times, (size_t)reps, sizeof times[0], cmp_double);
                const double gbs = reps ? (double)mbytes / times[reps / 2] * 1e-9 : 0.0;
                double best;
                /* prefill: hot weights (one copy), maybe fewer rows */
                int64_t rows = out;
                if (k->isa == TK_ISA_SCALAR && rows > 256) rows = 256;
                best = 1e30;
                for (int rep = 0; rep < (do_pre ? 3 : 0); rep++) {
                    const double t0 = now();
                    gemm(wpool, wrb, in, 0, rows, act, arb, prefill_tok, y, out);
                    const double dt = now() - t0;
                    if (dt < best) best = dt;
                }
                const double gfs = 2.0 * (double)rows * (double)in * prefill_tok / best * 1e-9;
                char shape[32];
                snprintf(shape, sizeof shape, "%lldx%lld", (long long)out, (long long)in);
                printf("%-6s %-11s %-7s %12.2f %14.2f\n", tk_dtype_get(t)->name, shape, tk_isa_name(k->isa), gbs, gfs);
                fflush(stdout);
            }
        }
    }
    free(pool);
    free(panel_pool);
    free(x);
    free(y);
    free(act);
    return 0;
}
