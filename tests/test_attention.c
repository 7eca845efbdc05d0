/* The paged online-softmax attention against a naive float64 softmax
 * attention: random shapes (heads, KV heads, head dims 64/128), lengths that
 * are not multiples of the block size, sliding windows, ranges processed in
 * one piece or split and merged (flash-decoding), K/V stored as F32, F16 or
 * Q8_0.
 *
 * Tolerances (max |out - ref| / max |ref|):
 *  - F32 KV: 1e-5 (float32 accumulation over at most a few thousand terms);
 *  - F16 / Q8_0 KV: 1e-5 against the reference computed on the values the
 *    cache actually holds (dequantized), i.e. the kernel adds nothing beyond
 *    float32 rounding; and the storage error itself, vs the unrounded values,
 *    is reported and bounded at 5e-3 (F16) and 5e-2 (Q8_0).
 *  - Q8_0 KV scores are integer dots of the Q8_0-quantized query (see
 *    attention.h), so the stored-values reference uses that query
 *    (dequantized: exact in float); seen <= 2.5e-6.  The storage bound (vs
 *    the float query and unrounded K/V) includes the query rounding: seen
 *    1.0e-2.
 *
 * The tile kernels (tk_attn_tile_range: several tokens of one sequence at
 * once, causal and sliding-window ranges, scalar / AVX2 / AVX-512 / AMX)
 * are held to the same tolerances, and additionally:
 *  - a token's output is bit-identical whether it is computed in a tile of
 *    many tokens, alone, or in a tile cut elsewhere (batch independence);
 *  - one pass over the whole range and the in-order fold of 512-position
 *    segments (flash-decoding) agree within 1e-5;
 *  - SIMD and scalar agree within 2e-5 of max |out|.
 * A one-token tile takes AVX2's decode kernel (attention_decode_heads.h, GQA
 * groups 5-8), so "alone" also checks that it gives the tile kernel's bits.
 * AMX (bf16 tiles, F16 KV only; other KV types run the AVX-512 kernel at
 * that level) splits Q and P into two bf16 (16 bits; K and V split exactly),
 * so it rounds a little more than the FP32 kernels (seen <= 8.0e-6 vs
 * float64) but is held to the same 1e-5 and 2e-5 bounds. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "../src/kernels/attention.h"
#include "../src/kernels/qgemm_impl.h"
#include "../src/kv/kv.h"
#include "tk_test.h"

static uint64_t rng_state = 88172645463325252ULL;
static double uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

static double naive(const float *q, const float *k, const float *v, int hd, int lo, int hi, float scale, double *out) {
    double mx = -INFINITY;
    double *sc = malloc(sizeof(double) * (size_t)(hi - lo));
    for (int i = lo; i < hi; i++) {
        double s = 0;
        for (int d = 0; d < hd; d++) s += (double)q[d] * k[(size_t)i * hd + d];
        sc[i - lo] = s * scale;
        if (sc[i - lo] > mx) mx = sc[i - lo];
    }
    double sum = 0;
    for (int d = 0; d < hd; d++) out[d] = 0;
    for (int i = lo; i < hi; i++) {
        double p = exp(sc[i - lo] - mx);
        sum += p;
        for (int d = 0; d < hd; d++) out[d] += p * v[(size_t)i * hd + d];
    }
    for (int d = 0; d < hd; d++) out[d] /= sum;
    free(sc);
    return sum;
}

/* The query values the kernels use: for Q8_0 KV the queries quantized to
 * Q8_0 (tk_qkernel_quant_q8_0, blocks of 32) and expanded back (q * d is exact
 * in float); else q itself.  n is a multiple of 32 for Q8_0. */
static void query_as_used(tk_kv_type type, const float *q, int n, float *out) {
    if (type != TK_KV_Q8_0) {
        memcpy(out, q, sizeof(float) * n);
        return;
    }
    tk_block_q8_0 *b = malloc(sizeof(tk_block_q8_0) * (size_t)(n / 32));
    tk_qkernel_quant_q8_0(q, b, n);
    for (int i = 0; i < n; i++) out[i] = (float)b[i / 32].qs[i % 32] * tk_f16_to_f32(b[i / 32].d);
    free(b);
}

static void one_case(tk_kv_type type, int n_kv, int group, int hd, int block, int len, int window, int split) {
    tk_kv_pool kv;
    tk_err err;
    int n_blocks = (len + block - 1) / block + 1;
    if (tk_kv_pool_init(&kv, 1, n_kv, hd, block, n_blocks, type, false, &err)) {
        CHECK(0, "pool: %s", err.msg);
        return;
    }
    tk_kv_seq seq = {0};
    tk_kv_seq_reserve(&kv, &seq, len, &err);
    float *k = malloc(sizeof(float) * (size_t)len * hd * n_kv), *v = malloc(sizeof(float) * (size_t)len * hd * n_kv);
    float *kq = malloc(sizeof(float) * (size_t)len * hd * n_kv), *vq = malloc(sizeof(float) * (size_t)len * hd * n_kv);
    for (int h = 0; h < n_kv; h++)
        for (int p = 0; p < len; p++) {
            float *kr = k + ((size_t)h * len + p) * hd, *vr = v + ((size_t)h * len + p) * hd;
            for (int d = 0; d < hd; d++) {
                kr[d] = (float)(uniform() * 2 - 1);
                vr[d] = (float)(uniform() * 2 - 1);
            }
            tk_kv_store(&kv, kr, tk_kv_k(&kv, &seq, 0, h, p));
            tk_kv_store(&kv, vr, tk_kv_v(&kv, &seq, 0, h, p));
            tk_kv_load(&kv, tk_kv_k(&kv, &seq, 0, h, p), 1, kq + ((size_t)h * len + p) * hd);
            tk_kv_load(&kv, tk_kv_v(&kv, &seq, 0, h, p), 1, vq + ((size_t)h * len + p) * hd);
        }
    float *q = malloc(sizeof(float) * (size_t)group * hd), *qu = malloc(sizeof(float) * (size_t)group * hd);
    float *acc = malloc(sizeof(float) * (size_t)group * hd * 2), *mx = malloc(sizeof(float) * group * 2);
    float *sum = malloc(sizeof(float) * group * 2), *out = malloc(sizeof(float) * (size_t)group * hd);
    float *scratch = malloc(sizeof(float) * tk_attn_scratch_floats(&kv, group));
    double *ref = malloc(sizeof(double) * hd), *ref_exact = malloc(sizeof(double) * hd);
    float scale = 1.0f / sqrtf((float)hd);
    int hi = len, lo = window > 0 && len > window ? len - window : 0;
    double worst = 0, worst_storage = 0;
    for (int h = 0; h < n_kv; h++) {
        for (int i = 0; i < group * hd; i++) q[i] = (float)(uniform() * 4 - 2);
        query_as_used(type, q, group * hd, qu);
        tk_attn_init(group, hd, acc, mx, sum);
        if (split > 0) {
            /* pieces merged in order, as the forward pass does */
            for (int a = lo; a < hi; a += split) {
                int b = a + split < hi ? a + split : hi;
                float *acc2 = acc + (size_t)group * hd, *mx2 = mx + group, *sum2 = sum + group;
                tk_attn_init(group, hd, acc2, mx2, sum2);
                tk_attn_range(&kv, &seq, 0, h, q, group, scale, a, b, acc2, mx2, sum2, scratch);
                tk_attn_merge(group, hd, acc, mx, sum, acc2, mx2, sum2);
            }
        } else {
            tk_attn_range(&kv, &seq, 0, h, q, group, scale, lo, hi, acc, mx, sum, scratch);
        }
        tk_attn_output(group, hd, acc, sum, out);
        for (int g = 0; g < group; g++) {
            naive(qu + (size_t)g * hd, kq + (size_t)h * len * hd, vq + (size_t)h * len * hd, hd, lo, hi, scale, ref);
            naive(q + (size_t)g * hd, k + (size_t)h * len * hd, v + (size_t)h * len * hd, hd, lo, hi, scale,
                  ref_exact);
            double mref = 0, d1 = 0, d2 = 0;
            for (int d = 0; d < hd; d++) {
                mref = fmax(mref, fabs(ref[d]));
                d1 = fmax(d1, fabs(out[(size_t)g * hd + d] - ref[d]));
                d2 = fmax(d2, fabs(out[(size_t)g * hd + d] - ref_exact[d]));
            }
            worst = fmax(worst, d1 / mref);
            worst_storage = fmax(worst_storage, d2 / mref);
        }
    }
    double storage_bound = type == TK_KV_F32 ? 1e-5 : type == TK_KV_F16 ? 5e-3 : 5e-2;
    CHECK(worst <= 1e-5, "%s kv=%d group=%d hd=%d block=%d len=%d window=%d split=%d: error %.3g",
          tk_kv_type_name(type), n_kv, group, hd, block, len, window, split, worst);
    CHECK(worst_storage <= storage_bound, "%s: storage error %.3g", tk_kv_type_name(type), worst_storage);
    static double max_storage[3];
    if (worst_storage > max_storage[type]) {
        max_storage[type] = worst_storage;
        printf("%s KV: storage error up to %.2e of max |out|\n", tk_kv_type_name(type), worst_storage);
    }
    tk_kv_seq_release(&kv, &seq);
    tk_kv_pool_free(&kv);
    free(k), free(v), free(kq), free(vq), free(q), free(qu), free(acc), free(mx), free(sum), free(out), free(scratch);
    free(ref), free(ref_exact);
}


/* ---- tiles ---- */

/* out (rows x hd) for n_tok tokens with query rows q (row t * group + g);
 * seg > 0: segments of seg positions folded in order, as the forward pass
 * does; else one pass. */
static void run_tile(tk_isa isa, const tk_kv_pool *kv, const tk_kv_seq *seq, int h, const float *q, int n_tok,
                     int group, const int *lo, const int *hi, float scale, int seg, float *out) {
    int hd = kv->head_dim, rows = n_tok * group;
    float *st = malloc(sizeof(float) * (size_t)rows * (hd + 2) * 2);
    float *scratch = malloc(sizeof(float) * tk_attn_tile_scratch_floats(hd, kv->block_size, rows));
    float *acc = st, *mx = acc + (size_t)rows * hd, *sum = mx + rows;
    float *acc2 = sum + rows, *mx2 = acc2 + (size_t)rows * hd, *sum2 = mx2 + rows;
    tk_attn_tile tile = {q, (size_t)group * hd, n_tok, group, lo, hi};
    tk_attn_init(rows, hd, acc, mx, sum);
    if (seg <= 0) {
        tk_attn_tile_range(isa, kv, seq, 0, h, &tile, scale, 0, INT_MAX, acc, mx, sum, scratch);
    } else {
        int a = INT_MAX, b = 0;
        for (int t = 0; t < n_tok; t++) {
            a = lo[t] < a ? lo[t] : a;
            b = hi[t] > b ? hi[t] : b;
        }
        for (int sg = a / seg; sg * seg < b; sg++) {
            tk_attn_init(rows, hd, acc2, mx2, sum2);
            tk_attn_tile_range(isa, kv, seq, 0, h, &tile, scale, sg * seg, (sg + 1) * seg, acc2, mx2, sum2, scratch);
            tk_attn_merge(rows, hd, acc, mx, sum, acc2, mx2, sum2);
        }
    }
    tk_attn_output(rows, hd, acc, sum, out);
    free(st);
    free(scratch);
}

static double rel_diff(const float *a, const float *b, int n) {
    double m = 0, d = 0;
    for (int i = 0; i < n; i++) {
        m = fmax(m, fabs((double)b[i]));
        d = fmax(d, fabs((double)a[i] - b[i]));
    }
    return m > 0 ? d / m : d;
}

static void tile_case(tk_kv_type type, int n_kv, int group, int hd, int block, int len, int n_tok, int window) {
    tk_kv_pool kv;
    tk_err err;
    if (tk_kv_pool_init(&kv, 1, n_kv, hd, block, (len + block - 1) / block + 1, type, false, &err)) {
        CHECK(0, "pool: %s", err.msg);
        return;
    }
    tk_kv_seq seq = {0};
    tk_kv_seq_reserve(&kv, &seq, len, &err);
    size_t plane = (size_t)len * hd;
    float *k = malloc(sizeof(float) * plane * n_kv), *v = malloc(sizeof(float) * plane * n_kv);
    float *kq = malloc(sizeof(float) * plane * n_kv), *vq = malloc(sizeof(float) * plane * n_kv);
    for (int h = 0; h < n_kv; h++)
        for (int p = 0; p < len; p++) {
            float *kr = k + h * plane + (size_t)p * hd, *vr = v + h * plane + (size_t)p * hd;
            for (int d = 0; d < hd; d++) {
                kr[d] = (float)(uniform() * 2 - 1);
                vr[d] = (float)(uniform() * 2 - 1);
            }
            tk_kv_store(&kv, kr, tk_kv_k(&kv, &seq, 0, h, p));
            tk_kv_store(&kv, vr, tk_kv_v(&kv, &seq, 0, h, p));
            tk_kv_load(&kv, tk_kv_k(&kv, &seq, 0, h, p), 1, kq + h * plane + (size_t)p * hd);
            tk_kv_load(&kv, tk_kv_v(&kv, &seq, 0, h, p), 1, vq + h * plane + (size_t)p * hd);
        }
    /* the last n_tok positions are the tile's tokens (a prefill chunk) */
    int rows = n_tok * group, *lo = malloc(sizeof(int) * n_tok), *hi = malloc(sizeof(int) * n_tok);
    for (int t = 0; t < n_tok; t++) {
        hi[t] = len - n_tok + t + 1;
        lo[t] = window > 0 && hi[t] > window ? hi[t] - window : 0;
    }
    float *q = malloc(sizeof(float) * (size_t)rows * hd), *qu = malloc(sizeof(float) * (size_t)rows * hd);
    float *out[5], *one = malloc(sizeof(float) * (size_t)rows * hd), *segd = malloc(sizeof(float) * (size_t)rows * hd);
    for (int i = 0; i < 5; i++) out[i] = malloc(sizeof(float) * (size_t)rows * hd);
    double *ref = malloc(sizeof(double) * hd), *ref_exact = malloc(sizeof(double) * hd);
    float scale = 1.0f / sqrtf((float)hd);
    static const tk_isa isas[5] = {TK_ISA_SCALAR, TK_ISA_AVX2, TK_ISA_AVX512, TK_ISA_AMX, TK_ISA_NEON};
    char what[160];
    snprintf(what, sizeof what, "%s kv=%d group=%d hd=%d block=%d len=%d tokens=%d window=%d", tk_kv_type_name(type),
             n_kv, group, hd, block, len, n_tok, window);
    double storage_bound = type == TK_KV_F32 ? 1e-5 : type == TK_KV_F16 ? 5e-3 : 5e-2;
    for (int h = 0; h < n_kv; h++) {
        for (int i = 0; i < rows * hd; i++) q[i] = (float)(uniform() * 4 - 2);
        query_as_used(type, q, rows * hd, qu);
        for (int ii = 0; ii < 5; ii++) {
            tk_isa isa = isas[ii];
            bool have = tk_attn_isa(isa, hd) == isa;
            if (!have) continue;
            run_tile(isa, &kv, &seq, h, q, n_tok, group, lo, hi, scale, 0, out[ii]);
            double worst = 0, worst_storage = 0;
            for (int r = 0; r < rows; r++) {
                int t = r / group;
                naive(qu + (size_t)r * hd, kq + h * plane, vq + h * plane, hd, lo[t], hi[t], scale, ref);
                naive(q + (size_t)r * hd, k + h * plane, v + h * plane, hd, lo[t], hi[t], scale, ref_exact);
                double mref = 0, d1 = 0, d2 = 0;
                for (int d = 0; d < hd; d++) {
                    mref = fmax(mref, fabs(ref[d]));
                    d1 = fmax(d1, fabs(out[ii][(size_t)r * hd + d] - ref[d]));
                    d2 = fmax(d2, fabs(out[ii][(size_t)r * hd + d] - ref_exact[d]));
                }
                worst = fmax(worst, d1 / mref);
                worst_storage = fmax(worst_storage, d2 / mref);
            }
            CHECK(worst <= 1e-5, "tile %s %s: error %.3g", tk_isa_name(isa), what, worst);
            static double max_err[3][5];
            if (worst > max_err[type][ii]) {
                max_err[type][ii] = worst;
                printf("tile %s, %s KV: error up to %.2e of max |out| (vs the stored values)\n", tk_isa_name(isa),
                       tk_kv_type_name(type), worst);
            }
            CHECK(worst_storage <= storage_bound, "tile %s %s: storage error %.3g", tk_isa_name(isa), what,
                  worst_storage);
            /* each token alone gives the same bits */
            bool same = true;
            for (int t = 0; t < n_tok; t++) {
                run_tile(isa, &kv, &seq, h, q + (size_t)t * group * hd, 1, group, lo + t, hi + t, scale, 0, one);
                same &= memcmp(one, out[ii] + (size_t)t * group * hd, sizeof(float) * group * hd) == 0;
            }
            CHECK(same, "tile %s %s: a token alone differs from the same token in a tile", tk_isa_name(isa), what);
            /* and so does a tile cut at another token */
            if (n_tok > 2) {
                int cut = 1 + (int)(uniform() * (n_tok - 1));
                run_tile(isa, &kv, &seq, h, q, cut, group, lo, hi, scale, 0, one);
                run_tile(isa, &kv, &seq, h, q + (size_t)cut * group * hd, n_tok - cut, group, lo + cut, hi + cut,
                         scale, 0, one + (size_t)cut * group * hd);
                CHECK(memcmp(one, out[ii], sizeof(float) * (size_t)rows * hd) == 0, "tile %s %s: cut at %d differs",
                      tk_isa_name(isa), what, cut);
            }
            /* segments of 512 folded in order (flash-decoding) */
            run_tile(isa, &kv, &seq, h, q, n_tok, group, lo, hi, scale, 512, segd);
            double ds = rel_diff(segd, out[ii], rows * hd);
            CHECK(ds <= 1e-5, "tile %s %s: segmented vs one pass %.3g", tk_isa_name(isa), what, ds);
            if (ii > 0) {
                double dv = rel_diff(out[ii], out[0], rows * hd);
                CHECK(dv <= 2e-5, "tile %s %s: SIMD vs scalar %.3g", tk_isa_name(isa), what, dv);
            }
        }
    }
    tk_kv_seq_release(&kv, &seq);
    tk_kv_pool_free(&kv);
    free(k), free(v), free(kq), free(vq), free(lo), free(hi), free(q), free(qu), free(one), free(segd), free(ref),
        free(ref_exact);
    for (int i = 0; i < 5; i++) free(out[i]);
}

int main(void) {
    static const int hds[] = {64, 128};
    for (int type = 0; type < 3; type++)
        for (int c = 0; c < 24; c++) {
            int hd = hds[c % 2];
            int n_kv = 1 + c % 3, group = 1 + (c * 5) % 8;
            int block = (int[]){16, 7, 32, 1}[c % 4];
            int len = 1 + (int)(uniform() * 1500);
            int window = c % 5 == 0 ? 1 + (int)(uniform() * 600) : 0;
            int split = c % 3 == 0 ? 0 : (int[]){512, 100, 33}[c % 3];
            one_case((tk_kv_type)type, n_kv, group, hd, block, len, window, split);
        }
    static const int tile_hds[] = {64, 128, 64, 128, 32, 8};
    for (int type = 0; type < 3; type++)
        for (int c = 0; c < 18; c++) {
            int hd = tile_hds[c % 6];
            if (type == TK_KV_Q8_0 && hd % 32) hd = 64;
            int n_kv = 1 + c % 2, group = (int[]){8, 1, 4, 3, 8, 2}[c % 6];
            int block = (int[]){16, 7, 32, 1, 16}[c % 5];
            int n_tok = 1 + (int)(uniform() * (c % 3 == 0 ? 3 : 24));
            int len = n_tok + (int)(uniform() * 1400);
            int window = c % 4 == 1 ? 1 + (int)(uniform() * 600) : 0;
            tile_case((tk_kv_type)type, n_kv, group, hd, block, len, n_tok, window);
        }
    /* More F16 shapes for the AMX kernel: GQA groups 1/4/8, head_dim 64 and
     * 128, lengths that are not multiples of the block or chunk, tiles of
     * several 16-row blocks with a partial last one, windows; and a tile of
     * more than 1024 rows (the AMX kernel does it in pieces). */
    if (tk_attn_isa(TK_ISA_AMX, 64) != TK_ISA_AMX)
        printf("AMX attention not tested: %s\n",
               tk_isa_supported(TK_ISA_AMX) ? "level mapped elsewhere" : "this CPU (or OS) has no AMX-BF16");
    for (int c = 0; c < 12; c++) {
        int hd = c % 2 ? 128 : 64, group = (int[]){1, 4, 8}[c % 3], block = (int[]){16, 7, 32, 5}[c % 4];
        int n_tok = 1 + (int)(uniform() * 40);
        int len = n_tok + (int)(uniform() * 900);
        int window = c % 4 == 3 ? 1 + (int)(uniform() * 300) : 0;
        tile_case(TK_KV_F16, 1 + c % 2, group, hd, block, len, n_tok, window);
    }
    tile_case(TK_KV_F16, 1, 8, 64, 16, 1300, 140, 0);
    /* GQA groups 5-7 (AVX2's one-token kernel with heads in the lanes, some
     * lanes empty), F32 and F16, head_dim 64/128/8, lengths across chunks */
    for (int c = 0; c < 6; c++) {
        int group = 5 + c % 3, n_tok = 1 + (int)(uniform() * 6), len = n_tok + 1 + (int)(uniform() * 1200);
        int block = (int[]){16, 7, 64}[c % 3], window = c == 4 ? 1 + (int)(uniform() * 300) : 0;
        tile_case(c < 3 ? TK_KV_F32 : TK_KV_F16, 1 + c % 2, group, (int[]){64, 128, 8}[c % 3], block, len, n_tok, window);
    }
    /* More Q8_0 shapes (integer scores): head_dim 32/64/128, GQA 1/4/8,
     * lengths off the block and chunk multiples, windows, and a tile of
     * more than 8 rows per token group (V converted once per chunk). */
    static const tk_isa all[5] = {TK_ISA_SCALAR, TK_ISA_AVX2, TK_ISA_AVX512, TK_ISA_AMX, TK_ISA_NEON};
    for (int i = 1; i < 5; i++)
        if (tk_attn_isa(all[i], 32) != all[i])
            printf("Q8_0 attention at %s not tested: %s\n", tk_isa_name(all[i]),
                   tk_isa_supported(all[i]) ? "level mapped elsewhere" : "not supported by this CPU (or OS)");
    for (int c = 0; c < 9; c++) {
        int hd = (int[]){32, 64, 128}[c % 3], group = (int[]){1, 4, 8}[(c / 3) % 3], block = (int[]){16, 7, 5}[c % 3];
        int n_tok = 1 + (int)(uniform() * 20);
        int len = n_tok + (int)(uniform() * 700);
        int window = c % 4 == 2 ? 1 + (int)(uniform() * 300) : 0;
        tile_case(TK_KV_Q8_0, 1 + c % 2, group, hd, block, len, n_tok, window);
    }
    TK_TEST_END();
}
