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
 *    is reported and bounded at 5e-3 (F16) and 5e-2 (Q8_0). */
#include <math.h>

#include "../src/kernels/attention.h"
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
    float *q = malloc(sizeof(float) * (size_t)group * hd);
    float *acc = malloc(sizeof(float) * (size_t)group * hd * 2), *mx = malloc(sizeof(float) * group * 2);
    float *sum = malloc(sizeof(float) * group * 2), *out = malloc(sizeof(float) * (size_t)group * hd);
    float *scratch = malloc(sizeof(float) * tk_attn_scratch_floats(&kv, group));
    double *ref = malloc(sizeof(double) * hd), *ref_exact = malloc(sizeof(double) * hd);
    float scale = 1.0f / sqrtf((float)hd);
    int hi = len, lo = window > 0 && len > window ? len - window : 0;
    double worst = 0, worst_storage = 0;
    for (int h = 0; h < n_kv; h++) {
        for (int i = 0; i < group * hd; i++) q[i] = (float)(uniform() * 4 - 2);
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
            naive(q + (size_t)g * hd, kq + (size_t)h * len * hd, vq + (size_t)h * len * hd, hd, lo, hi, scale, ref);
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
    free(k), free(v), free(kq), free(vq), free(q), free(acc), free(mx), free(sum), free(out), free(scratch);
    free(ref), free(ref_exact);
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
    TK_TEST_END();
}
