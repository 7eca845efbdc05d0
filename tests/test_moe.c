/* Mixture-of-experts FFN on tiny synthetic models (random F32 weights
 * written as GGUF): Mixtral ("llama" with experts), Qwen2-MoE (shared expert
 * with its sigmoid gate, no top-k renormalization), Qwen3-MoE (per-head
 * q/k norm, renormalized top-k) and OLMoE (q/k norm over the whole
 * projections, no renormalization).  The engine's batched, paged forward pass
 * is checked against a naive float64 reference written here from the
 * models' definitions (router softmax, top-k, weighted expert sum), for
 * several prefill chunkings and thread counts; three sequences decoded
 * together must give the same bits as each alone.  The same with the
 * experts' matrices quantized (Q8_0, Q4_0: the int8 kernels, several
 * activation packings in one layer), where 1 and 2 threads must also agree
 * bit for bit.  Inconsistent expert metadata is refused naming the field. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tokamak.h>

#include "formats/dtype.h"
#include "formats/gguf.h"
#include "quant/quant.h"
#include "ref64.h"
#include "tk_test.h"

/* EFF and SHFF: whole blocks of 32 (the quantized variants' rows), and
 * different (the shared expert's down projection takes a longer input) */
enum { DIM = 32, LAYERS = 2, HEADS = 4, KV_HEADS = 2, HD = 8, E = 6, K = 2, EFF = 32, SHFF = 64, VOCAB = 64 };
enum { SEQ = 19, N_SEQ = 3 };
#define THETA 10000.0
#define EPS 1e-6

typedef enum variant { MIXTRAL, QWEN2MOE, QWEN3MOE, OLMOE } variant;
static const char *const arch_name[] = {"llama", "qwen2moe", "qwen3moe", "olmoe"};

typedef struct weights {
    float embd[VOCAB * DIM], out_norm[DIM], output[VOCAB * DIM];
    float attn_norm[LAYERS][DIM], ffn_norm[LAYERS][DIM];
    float q_norm[LAYERS][HD], k_norm[LAYERS][HD];
    float q_normf[LAYERS][HEADS * HD], k_normf[LAYERS][KV_HEADS * HD]; /* OLMoE: whole projections */
    float wq[LAYERS][HEADS * HD * DIM], wk[LAYERS][KV_HEADS * HD * DIM], wv[LAYERS][KV_HEADS * HD * DIM];
    float wo[LAYERS][DIM * HEADS * HD];
    float router[LAYERS][E * DIM];
    float wg[LAYERS][E * EFF * DIM], wu[LAYERS][E * EFF * DIM], wd[LAYERS][E * DIM * EFF];
    float sh_gate[LAYERS][DIM], sg[LAYERS][SHFF * DIM], su[LAYERS][SHFF * DIM], sd[LAYERS][DIM * SHFF];
} weights;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}
static void fill(float *p, size_t n, float scale, float offset) {
    for (size_t i = 0; i < n; i++) p[i] = offset + scale * frand();
}
#define FILL(a, s, o) fill((float *)(a), sizeof(a) / sizeof(float), s, o)

static void init_weights(weights *w) {
    FILL(w->embd, 0.5f, 0);
    FILL(w->output, 0.5f, 0);
    FILL(w->out_norm, 0.3f, 1.0f);
    FILL(w->attn_norm, 0.3f, 1.0f);
    FILL(w->ffn_norm, 0.3f, 1.0f);
    FILL(w->q_norm, 0.3f, 1.0f);
    FILL(w->k_norm, 0.3f, 1.0f);
    FILL(w->q_normf, 0.3f, 1.0f);
    FILL(w->k_normf, 0.3f, 1.0f);
    FILL(w->wq, 0.4f, 0);
    FILL(w->wk, 0.4f, 0);
    FILL(w->wv, 0.3f, 0);
    FILL(w->wo, 0.3f, 0);
    FILL(w->router, 0.8f, 0); /* spread logits: distinct routes */
    FILL(w->wg, 0.3f, 0);
    FILL(w->wu, 0.3f, 0);
    FILL(w->wd, 0.3f, 0);
    FILL(w->sh_gate, 0.3f, 0);
    FILL(w->sg, 0.3f, 0);
    FILL(w->su, 0.3f, 0);
    FILL(w->sd, 0.3f, 0);
}

/* n floats as `type` (quantized row by row, rows of `in`) into a new buffer. */
static void *as_type(tk_dtype type, const float *src, size_t n, int64_t in, size_t *bytes) {
    const size_t row = tk_dtype_row_bytes(type, in), rows = n / (size_t)in;
    unsigned char *out = malloc(row * rows);
    for (size_t r = 0; r < rows; r++)
        if (tk_quantize_row(type, src + r * (size_t)in, out + r * row, in, NULL)) abort();
    *bytes = row * rows;
    return out;
}

/* The expert matrices (routed and shared) as a reader of `type` sees them. */
static void roundtrip_experts(weights *w, tk_dtype type) {
#define RT(a, in)                                                                          \
    for (size_t r = 0; r < sizeof(a) / sizeof(float) / (in); r++)                          \
        if (tk_quantize_roundtrip(type, (float *)(a) + r * (in), (float *)(a) + r * (in), in, NULL)) abort()
    RT(w->wg, DIM);
    RT(w->wu, DIM);
    RT(w->wd, EFF);
    RT(w->sg, DIM);
    RT(w->su, DIM);
    RT(w->sd, SHFF);
#undef RT
}

/* n_expert / n_used / stacked: what the file claims (bad-input cases);
 * expert_type: the routed and shared experts' matrices. */
static int write_model(const weights *w, variant v, const char *path, int n_expert, int n_used, int stacked,
                       tk_dtype expert_type) {
    const char *a = arch_name[v];
    char key[96], name[64];
    tk_gguf_writer *g = tk_gguf_writer_new();
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    tk_gguf_set_str(g, "general.architecture", a);
    tk_gguf_set_u32(g, KEY("context_length"), 128);
    tk_gguf_set_u32(g, KEY("embedding_length"), DIM);
    tk_gguf_set_u32(g, KEY("block_count"), LAYERS);
    tk_gguf_set_u32(g, KEY("feed_forward_length"), 4 * DIM);
    tk_gguf_set_u32(g, KEY("attention.head_count"), HEADS);
    tk_gguf_set_u32(g, KEY("attention.head_count_kv"), KV_HEADS);
    tk_gguf_set_u32(g, KEY("attention.key_length"), HD);
    tk_gguf_set_f32(g, KEY("attention.layer_norm_rms_epsilon"), (float)EPS);
    tk_gguf_set_f32(g, KEY("rope.freq_base"), (float)THETA);
    tk_gguf_set_u32(g, KEY("expert_count"), (uint32_t)n_expert);
    tk_gguf_set_u32(g, KEY("expert_used_count"), (uint32_t)n_used);
    tk_gguf_set_u32(g, KEY("expert_feed_forward_length"), EFF);
    if (v == QWEN2MOE) tk_gguf_set_u32(g, KEY("expert_shared_feed_forward_length"), SHFF);
#undef KEY
    int64_t v1[1] = {DIM}, vh[1] = {HD}, me[2] = {DIM, VOCAB};
    tk_gguf_add_tensor(g, "token_embd.weight", TK_F32, 2, me, w->embd, sizeof w->embd);
    tk_gguf_add_tensor(g, "output_norm.weight", TK_F32, 1, v1, w->out_norm, sizeof w->out_norm);
    tk_gguf_add_tensor(g, "output.weight", TK_F32, 2, me, w->output, sizeof w->output);
    void *quantized[LAYERS * 6] = {0};
    int n_quantized = 0;
#define ADD(fmt, nd, ne, ptr, bytes)                             \
    do {                                                         \
        snprintf(name, sizeof name, fmt, l);                     \
        tk_gguf_add_tensor(g, name, TK_F32, nd, ne, ptr, bytes); \
    } while (0)
#define ADD_EXPERT(fmt, nd, ne, ptr, bytes)                                                          \
    do {                                                                                             \
        size_t qbytes;                                                                               \
        void *q = quantized[n_quantized++] = as_type(expert_type, (const float *)(ptr),              \
                                                     (bytes) / sizeof(float), (ne)[0], &qbytes);     \
        snprintf(name, sizeof name, fmt, l);                                                         \
        tk_gguf_add_tensor(g, name, expert_type, nd, ne, q, qbytes);                                 \
    } while (0)
    for (int l = 0; l < LAYERS; l++) {
        int64_t q[2] = {DIM, HEADS * HD}, kv[2] = {DIM, KV_HEADS * HD}, o[2] = {HEADS * HD, DIM};
        int64_t r[2] = {DIM, E}, up[3] = {DIM, EFF, stacked}, down[3] = {EFF, DIM, stacked};
        int64_t sup[2] = {DIM, SHFF}, sdown[2] = {SHFF, DIM};
        size_t per = (size_t)EFF * DIM * sizeof(float) * (size_t)stacked;
        ADD("blk.%d.attn_norm.weight", 1, v1, w->attn_norm[l], sizeof w->attn_norm[l]);
        ADD("blk.%d.attn_q.weight", 2, q, w->wq[l], sizeof w->wq[l]);
        ADD("blk.%d.attn_k.weight", 2, kv, w->wk[l], sizeof w->wk[l]);
        ADD("blk.%d.attn_v.weight", 2, kv, w->wv[l], sizeof w->wv[l]);
        if (v == QWEN3MOE) {
            ADD("blk.%d.attn_q_norm.weight", 1, vh, w->q_norm[l], sizeof w->q_norm[l]);
            ADD("blk.%d.attn_k_norm.weight", 1, vh, w->k_norm[l], sizeof w->k_norm[l]);
        }
        if (v == OLMOE) {
            int64_t vq[1] = {HEADS * HD}, vk[1] = {KV_HEADS * HD};
            ADD("blk.%d.attn_q_norm.weight", 1, vq, w->q_normf[l], sizeof w->q_normf[l]);
            ADD("blk.%d.attn_k_norm.weight", 1, vk, w->k_normf[l], sizeof w->k_normf[l]);
        }
        ADD("blk.%d.attn_output.weight", 2, o, w->wo[l], sizeof w->wo[l]);
        ADD("blk.%d.ffn_norm.weight", 1, v1, w->ffn_norm[l], sizeof w->ffn_norm[l]);
        ADD("blk.%d.ffn_gate_inp.weight", 2, r, w->router[l], sizeof w->router[l]);
        ADD_EXPERT("blk.%d.ffn_gate_exps.weight", 3, up, w->wg[l], per);
        ADD_EXPERT("blk.%d.ffn_up_exps.weight", 3, up, w->wu[l], per);
        ADD_EXPERT("blk.%d.ffn_down_exps.weight", 3, down, w->wd[l], per);
        if (v == QWEN2MOE) {
            ADD("blk.%d.ffn_gate_inp_shexp.weight", 1, v1, w->sh_gate[l], sizeof w->sh_gate[l]);
            ADD_EXPERT("blk.%d.ffn_gate_shexp.weight", 2, sup, w->sg[l], sizeof w->sg[l]);
            ADD_EXPERT("blk.%d.ffn_up_shexp.weight", 2, sup, w->su[l], sizeof w->su[l]);
            ADD_EXPERT("blk.%d.ffn_down_shexp.weight", 2, sdown, w->sd[l], sizeof w->sd[l]);
        }
    }
#undef ADD
#undef ADD_EXPERT
    tk_err err;
    int rc = tk_gguf_write(g, path, &err);
    if (rc) fprintf(stderr, "write %s: %s\n", path, err.msg);
    tk_gguf_writer_free(g);
    for (int i = 0; i < n_quantized; i++) free(quantized[i]);
    return rc;
}

/* ---- naive float64 reference ---- */

static double silu(double x) { return x / (1.0 + exp(-x)); }

/* y = down(silu(gate x) * up x) for one expert's matrices. */
static void glu(double *y, const float *wg, const float *wu, const float *wd, const double *x, int f) {
    double g[EFF > SHFF ? EFF : SHFF], u[EFF > SHFF ? EFF : SHFF];
    ref64_matvec(g, wg, x, DIM, f);
    ref64_matvec(u, wu, x, DIM, f);
    for (int i = 0; i < f; i++) g[i] = silu(g[i]) * u[i];
    ref64_matvec(y, wd, g, f, DIM);
}

static void moe_ref(const weights *w, variant v, int l, const double *xn, double *out) {
    double lg[E], p[E], y[DIM], mx = -1e300, z = 0;
    ref64_matvec(lg, w->router[l], xn, DIM, E);
    for (int e = 0; e < E; e++) mx = lg[e] > mx ? lg[e] : mx;
    for (int e = 0; e < E; e++) z += p[e] = exp(lg[e] - mx);
    for (int e = 0; e < E; e++) p[e] /= z;
    int chosen[K];
    double psum = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int j = 0; j < k; j++) taken |= chosen[j] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        chosen[k] = best;
        psum += p[best];
    }
    for (int i = 0; i < DIM; i++) out[i] = 0;
    for (int k = 0; k < K; k++) {
        int e = chosen[k];
        double wt = v == QWEN2MOE || v == OLMOE ? p[e] : p[e] / psum;
        glu(y, w->wg[l] + (size_t)e * EFF * DIM, w->wu[l] + (size_t)e * EFF * DIM, w->wd[l] + (size_t)e * DIM * EFF,
            xn, EFF);
        for (int i = 0; i < DIM; i++) out[i] += wt * y[i];
    }
    if (v == QWEN2MOE) {
        double gs = 0;
        for (int i = 0; i < DIM; i++) gs += w->sh_gate[l][i] * xn[i];
        gs = 1.0 / (1.0 + exp(-gs));
        glu(y, w->sg[l], w->su[l], w->sd[l], xn, SHFF);
        for (int i = 0; i < DIM; i++) out[i] += gs * y[i];
    }
}

static void reference(const weights *w, variant v, const int32_t *tok, int n, double *logits) {
    static double x[SEQ][DIM], Kc[SEQ][KV_HEADS * HD], Vc[SEQ][KV_HEADS * HD], Q[SEQ][HEADS * HD];
    double xn[DIM], att[HEADS * HD], o[DIM], sc[SEQ];
    const bool halves = v != MIXTRAL;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < DIM; i++) x[t][i] = w->embd[tok[t] * DIM + i];
    for (int l = 0; l < LAYERS; l++) {
        for (int t = 0; t < n; t++) {
            ref64_rmsnorm(xn, x[t], w->attn_norm[l], DIM, EPS);
            ref64_matvec(Q[t], w->wq[l], xn, DIM, HEADS * HD);
            ref64_matvec(Kc[t], w->wk[l], xn, DIM, KV_HEADS * HD);
            ref64_matvec(Vc[t], w->wv[l], xn, DIM, KV_HEADS * HD);
            if (v == OLMOE) {
                ref64_rmsnorm(Q[t], Q[t], w->q_normf[l], HEADS * HD, EPS);
                ref64_rmsnorm(Kc[t], Kc[t], w->k_normf[l], KV_HEADS * HD, EPS);
            }
            for (int h = 0; h < HEADS; h++) {
                if (v == QWEN3MOE) ref64_rmsnorm(Q[t] + h * HD, Q[t] + h * HD, w->q_norm[l], HD, EPS);
                ref64_rope(Q[t] + h * HD, HD, t, THETA, halves);
            }
            for (int h = 0; h < KV_HEADS; h++) {
                if (v == QWEN3MOE) ref64_rmsnorm(Kc[t] + h * HD, Kc[t] + h * HD, w->k_norm[l], HD, EPS);
                ref64_rope(Kc[t] + h * HD, HD, t, THETA, halves);
            }
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < HEADS; h++) {
                int kvh = h / (HEADS / KV_HEADS);
                ref64_attend(att + h * HD, Q[t] + h * HD, &Kc[0][kvh * HD], &Vc[0][kvh * HD], KV_HEADS * HD, t, HD, 0, sc);
            }
            ref64_matvec(o, w->wo[l], att, HEADS * HD, DIM);
            for (int i = 0; i < DIM; i++) x[t][i] += o[i];
            ref64_rmsnorm(xn, x[t], w->ffn_norm[l], DIM, EPS);
            moe_ref(w, v, l, xn, o);
            for (int i = 0; i < DIM; i++) x[t][i] += o[i];
        }
    }
    for (int t = 0; t < n; t++) {
        ref64_rmsnorm(xn, x[t], w->out_norm, DIM, EPS);
        ref64_matvec(logits + (size_t)t * VOCAB, w->output, xn, DIM, VOCAB);
    }
}

static tk_engine *open_engine(const char *path, int threads, int chunk, int max_seqs, bool reference) {
    tk_engine_config cfg = {.kv_type = "f32", .model_path = path, .n_threads = threads, .kv_block_size = 4,
                            .max_seqs = max_seqs, .max_batch_tokens = chunk, .reference_kernels = reference};
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "open: %s\n", err.msg);
        return NULL;
    }
    return e;
}

/* Logits of every position of one sequence: a prefill chunk, then one token at a time. */
static int run_alone(const char *path, int threads, int chunk, bool reference, const int32_t *tok, int n,
                     float *out) {
    tk_engine *e = open_engine(path, threads, chunk, 1, reference);
    if (!e) return -1;
    tk_err err;
    int seq = tk_engine_seq_new(e, &err), rc = 0;
    for (int start = 0; start < n && rc == 0;) {
        int m = start == 0 ? chunk : 1;
        if (m > n - start) m = n - start;
        int32_t pos[SEQ], sq[SEQ];
        uint8_t fl[SEQ];
        for (int i = 0; i < m; i++) pos[i] = start + i, sq[i] = seq, fl[i] = 1;
        tk_batch b = {m, (int32_t *)tok + start, pos, sq, fl};
        rc = tk_engine_decode(e, &b, out + (size_t)start * VOCAB, &err);
        if (rc) fprintf(stderr, "decode: %s\n", err.msg);
        start += m;
    }
    tk_engine_close(e);
    return rc;
}

/* N_SEQ sequences in shared batches: their first `pre` tokens in one
 * batch, then one token of each per step. */
static int run_together(const char *path, int pre, int32_t tok[N_SEQ][SEQ], float out[N_SEQ][SEQ * VOCAB]) {
    tk_engine *e = open_engine(path, 2, N_SEQ * SEQ, N_SEQ, false);
    if (!e) return -1;
    tk_err err;
    int seq[N_SEQ], rc = 0;
    for (int s = 0; s < N_SEQ; s++) seq[s] = tk_engine_seq_new(e, &err);
    int32_t bt[N_SEQ * SEQ], pos[N_SEQ * SEQ], sq[N_SEQ * SEQ];
    uint8_t fl[N_SEQ * SEQ];
    static float lg[N_SEQ * SEQ * VOCAB];
    for (int start = 0; start < SEQ && rc == 0;) {
        int m = start == 0 ? pre : 1, n = 0;
        for (int s = 0; s < N_SEQ; s++)
            for (int i = 0; i < m; i++) bt[n] = tok[s][start + i], pos[n] = start + i, sq[n] = seq[s], fl[n++] = 1;
        tk_batch b = {n, bt, pos, sq, fl};
        rc = tk_engine_decode(e, &b, lg, &err);
        if (rc) fprintf(stderr, "decode: %s\n", err.msg);
        for (int k = 0; k < n && rc == 0; k++) {
            int s = k / m;
            memcpy(out[s] + (size_t)pos[k] * VOCAB, lg + (size_t)k * VOCAB, VOCAB * sizeof(float));
        }
        start += m;
    }
    tk_engine_close(e);
    return rc;
}

/* Logits of tok at every position, for several prefill chunkings and
 * thread counts, against ref: within tol. */
static void check_chunkings(const char *path, const char *what, bool reference, const int32_t *tok,
                            const double *ref, double tol) {
    static float got[SEQ * VOCAB];
    const int cfgs[][2] = {{1, SEQ}, {2, 7}, {2, 1}, {1, 3}};
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        memset(got, 0, sizeof got);
        CHECK(run_alone(path, cfgs[c][0], cfgs[c][1], reference, tok, SEQ, got) == 0, "%s run", what);
        double d = 0;
        for (int i = 0; i < SEQ * VOCAB; i++) d = fabs(got[i] - ref[i]) > d ? fabs(got[i] - ref[i]) : d;
        CHECK(d < tol, "%s%s, threads %d chunk %d: max |diff| %g (tol %g)", what, reference ? " (reference)" : "",
              cfgs[c][0], cfgs[c][1], d, tol);
    }
}

/* expert_type F32: logits within 1e-4 of the logit range of the float64
 * reference.  Quantized experts: the reference uses the dequantized
 * weights; the engine's reference kernels (float activations) must be
 * within 1e-4 of it, the int8 kernels within 5e-2, which is what their
 * int8 activations allow here (0.4 % of a block's largest value per
 * element, blocks of 32 that are whole rows at these sizes: 1-2 % of the
 * range measured; a wrong expert or weight is off by far more), and 1
 * and 2 threads must agree bit for bit. */
static void check_variant(const weights *w0, variant v, const char *dir, tk_dtype expert_type) {
    static weights w1;
    const weights *w = w0;
    if (expert_type != TK_F32) {
        w1 = *w0;
        roundtrip_experts(&w1, expert_type);
        w = &w1;
    }
    char path[96], what[64];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, arch_name[v]);
    snprintf(what, sizeof what, "%s, %s experts", arch_name[v], tk_dtype_get(expert_type)->name);
    CHECK(write_model(w0, v, path, E, K, E, expert_type) == 0, "write %s", what);
    int32_t tok[N_SEQ][SEQ];
    for (int s = 0; s < N_SEQ; s++)
        for (int i = 0; i < SEQ; i++) tok[s][i] = (i * 29 + 7 + 13 * s * (i % 3)) % VOCAB;
    static double ref[SEQ * VOCAB];
    reference(w, v, tok[0], SEQ, ref);
    double range = 0;
    for (int i = 0; i < SEQ * VOCAB; i++) range = fabs(ref[i]) > range ? fabs(ref[i]) : range;
    if (expert_type == TK_F32) {
        check_chunkings(path, what, false, tok[0], ref, 1e-4 * range);
    } else {
        check_chunkings(path, what, true, tok[0], ref, 1e-4 * range);
        check_chunkings(path, what, false, tok[0], ref, 5e-2 * range);
        static float one[SEQ * VOCAB], two[SEQ * VOCAB];
        CHECK(run_alone(path, 1, 7, false, tok[0], SEQ, one) == 0, "%s run", what);
        CHECK(run_alone(path, 2, 7, false, tok[0], SEQ, two) == 0, "%s run", what);
        CHECK(memcmp(one, two, sizeof one) == 0, "%s: 2 threads differ from 1", what);
    }
    /* batched == alone, bit for bit */
    static float alone[N_SEQ][SEQ * VOCAB], together[N_SEQ][SEQ * VOCAB];
    for (int s = 0; s < N_SEQ; s++) CHECK(run_alone(path, 2, 5, false, tok[s], SEQ, alone[s]) == 0, "alone %d", s);
    CHECK(run_together(path, 5, tok, together) == 0, "together");
    for (int s = 0; s < N_SEQ; s++)
        CHECK(memcmp(alone[s], together[s], sizeof alone[s]) == 0,
              "%s, sequence %d: batched logits differ from alone", what, s);
    unlink(path);
}

/* Opening fails and the error names `field`. */
static void check_refused(const weights *w, const char *dir, int n_expert, int n_used, int stacked,
                          const char *field) {
    char path[96];
    snprintf(path, sizeof path, "%s/bad.gguf", dir);
    CHECK(write_model(w, MIXTRAL, path, n_expert, n_used, stacked, TK_F32) == 0, "write bad model");
    tk_engine_config cfg = {.model_path = path, .n_threads = 1, .max_seqs = 1};
    tk_engine *e = NULL;
    tk_err err = {0};
    int rc = tk_engine_open(&cfg, &e, &err);
    CHECK(rc != 0 && strstr(err.msg, field), "experts %d used %d stacked %d: want an error naming '%s', got '%s'",
          n_expert, n_used, stacked, field, rc ? err.msg : "(opened)");
    if (!rc) tk_engine_close(e);
    unlink(path);
}

int main(void) {
    static weights w;
    init_weights(&w);
    char dir[] = "/tmp/tk_moe_XXXXXX";
    if (!mkdtemp(dir)) TK_SKIP("cannot create a temp dir");
    check_variant(&w, MIXTRAL, dir, TK_F32);
    check_variant(&w, QWEN2MOE, dir, TK_F32);
    check_variant(&w, QWEN3MOE, dir, TK_F32);
    check_variant(&w, OLMOE, dir, TK_F32);
    check_variant(&w, MIXTRAL, dir, TK_Q8_0);
    check_variant(&w, QWEN2MOE, dir, TK_Q8_0);
    check_variant(&w, QWEN2MOE, dir, TK_Q4_0);
    check_refused(&w, dir, E, E + 1, E, "expert_used_count");
    check_refused(&w, dir, E, 0, E, "expert_used_count");
    check_refused(&w, dir, E, K, E - 1, "ffn_gate_exps");   /* tensors hold fewer experts than expert_count */
    check_refused(&w, dir, E - 1, K, E - 1, "ffn_gate_inp"); /* router has E rows, expert_count says E - 1 */
    rmdir(dir);
    TK_TEST_END();
}
