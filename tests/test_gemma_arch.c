/* Gemma 3 architecture on a tiny synthetic model (random F32 weights written
 * as a gemma3 GGUF): the engine's batched, paged forward pass against a
 * naive float64 reference written here from the architecture's definition —
 * sqrt(dim) embedding scale, per-head q/k RMSNorm, post-attention and
 * post-FFN norms, GeGLU (GELU-tanh), 1/sqrt(head_dim) attention scale,
 * sliding-window layers with their own RoPE base (every 6th layer global),
 * tied output and a final logit soft-cap.
 *
 * The window (5) is not a multiple of the KV block size (4), so attention
 * both skips whole blocks and masks inside a block; the sequence is long
 * enough that several blocks fall out of the window.  The reference with
 * the window removed must differ, so the test would notice a missing mask. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tokamak.h>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "ref64.h"
#include "tk_test.h"

enum { DIM = 32, LAYERS = 6, HEADS = 4, KV_HEADS = 2, HD = 16, FFN = 48, VOCAB = 64, WINDOW = 5, SEQ = 23 };
#define THETA 1000000.0
#define THETA_SWA 10000.0
#define EPS 1e-6
#define SOFTCAP 30.0

typedef struct weights {
    float embd[VOCAB * DIM], out_norm[DIM];
    float attn_norm[LAYERS][DIM], ffn_norm[LAYERS][DIM], post_attn[LAYERS][DIM], post_ffw[LAYERS][DIM];
    float q_norm[LAYERS][HD], k_norm[LAYERS][HD];
    float wq[LAYERS][HEADS * HD * DIM], wk[LAYERS][KV_HEADS * HD * DIM], wv[LAYERS][KV_HEADS * HD * DIM];
    float wo[LAYERS][DIM * HEADS * HD];
    float wg[LAYERS][FFN * DIM], wu[LAYERS][FFN * DIM], wd[LAYERS][DIM * FFN];
} weights;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}
static void fill(float *p, size_t n, float scale, float offset) {
    for (size_t i = 0; i < n; i++) p[i] = offset + scale * frand();
}

static void init_weights(weights *w) {
    fill(w->embd, sizeof w->embd / 4, 0.5f, 0);
    fill(w->out_norm, DIM, 0.3f, 1.0f);
    for (int l = 0; l < LAYERS; l++) {
        fill(w->attn_norm[l], DIM, 0.3f, 1.0f);
        fill(w->ffn_norm[l], DIM, 0.3f, 1.0f);
        fill(w->post_attn[l], DIM, 0.3f, 1.0f);
        fill(w->post_ffw[l], DIM, 0.3f, 1.0f);
        fill(w->q_norm[l], HD, 0.3f, 1.0f);
        fill(w->k_norm[l], HD, 0.3f, 1.0f);
        /* large q/k weights make attention peaked, so the window matters */
        fill(w->wq[l], sizeof w->wq[l] / 4, 0.6f, 0);
        fill(w->wk[l], sizeof w->wk[l] / 4, 0.6f, 0);
        fill(w->wv[l], sizeof w->wv[l] / 4, 0.3f, 0);
        fill(w->wo[l], sizeof w->wo[l] / 4, 0.3f, 0);
        fill(w->wg[l], sizeof w->wg[l] / 4, 0.3f, 0);
        fill(w->wu[l], sizeof w->wu[l] / 4, 0.3f, 0);
        fill(w->wd[l], sizeof w->wd[l] / 4, 0.3f, 0);
    }
}

static int write_model(const weights *w, const char *path, int pattern_key) {
    tk_gguf_writer *g = tk_gguf_writer_new();
    tk_gguf_set_str(g, "general.architecture", "gemma3");
    tk_gguf_set_u32(g, "gemma3.context_length", 128);
    tk_gguf_set_u32(g, "gemma3.embedding_length", DIM);
    tk_gguf_set_u32(g, "gemma3.block_count", LAYERS);
    tk_gguf_set_u32(g, "gemma3.feed_forward_length", FFN);
    tk_gguf_set_u32(g, "gemma3.attention.head_count", HEADS);
    tk_gguf_set_u32(g, "gemma3.attention.head_count_kv", KV_HEADS);
    tk_gguf_set_u32(g, "gemma3.attention.key_length", HD);
    tk_gguf_set_u32(g, "gemma3.attention.value_length", HD);
    tk_gguf_set_f32(g, "gemma3.attention.layer_norm_rms_epsilon", (float)EPS);
    tk_gguf_set_f32(g, "gemma3.rope.freq_base", (float)THETA);
    tk_gguf_set_u32(g, "gemma3.attention.sliding_window", WINDOW);
    tk_gguf_set_f32(g, "gemma3.final_logit_softcapping", (float)SOFTCAP);
    if (pattern_key) tk_gguf_set_u32(g, "gemma3.attention.sliding_window_pattern", (uint32_t)pattern_key);
    int64_t v1[1] = {DIM}, vh[1] = {HD};
    int64_t me[2] = {DIM, VOCAB};
    tk_gguf_add_tensor(g, "token_embd.weight", TK_F32, 2, me, w->embd, sizeof w->embd);
    tk_gguf_add_tensor(g, "output_norm.weight", TK_F32, 1, v1, w->out_norm, sizeof w->out_norm);
    char name[64];
#define ADD(fmt, nd, ne, ptr, bytes)                        \
    do {                                                     \
        snprintf(name, sizeof name, fmt, l);                 \
        tk_gguf_add_tensor(g, name, TK_F32, nd, ne, ptr, bytes); \
    } while (0)
    for (int l = 0; l < LAYERS; l++) {
        int64_t q[2] = {DIM, HEADS * HD}, kv[2] = {DIM, KV_HEADS * HD}, o[2] = {HEADS * HD, DIM};
        int64_t up[2] = {DIM, FFN}, down[2] = {FFN, DIM};
        ADD("blk.%d.attn_norm.weight", 1, v1, w->attn_norm[l], sizeof w->attn_norm[l]);
        ADD("blk.%d.attn_q.weight", 2, q, w->wq[l], sizeof w->wq[l]);
        ADD("blk.%d.attn_k.weight", 2, kv, w->wk[l], sizeof w->wk[l]);
        ADD("blk.%d.attn_v.weight", 2, kv, w->wv[l], sizeof w->wv[l]);
        ADD("blk.%d.attn_q_norm.weight", 1, vh, w->q_norm[l], sizeof w->q_norm[l]);
        ADD("blk.%d.attn_k_norm.weight", 1, vh, w->k_norm[l], sizeof w->k_norm[l]);
        ADD("blk.%d.attn_output.weight", 2, o, w->wo[l], sizeof w->wo[l]);
        ADD("blk.%d.post_attention_norm.weight", 1, v1, w->post_attn[l], sizeof w->post_attn[l]);
        ADD("blk.%d.ffn_norm.weight", 1, v1, w->ffn_norm[l], sizeof w->ffn_norm[l]);
        ADD("blk.%d.ffn_gate.weight", 2, up, w->wg[l], sizeof w->wg[l]);
        ADD("blk.%d.ffn_up.weight", 2, up, w->wu[l], sizeof w->wu[l]);
        ADD("blk.%d.ffn_down.weight", 2, down, w->wd[l], sizeof w->wd[l]);
        ADD("blk.%d.post_ffw_norm.weight", 1, v1, w->post_ffw[l], sizeof w->post_ffw[l]);
    }
#undef ADD
    tk_err err;
    int rc = tk_gguf_write(g, path, &err);
    if (rc) fprintf(stderr, "write %s: %s\n", path, err.msg);
    tk_gguf_writer_free(g);
    return rc;
}

/* ---- naive float64 reference ---- */

static double gelu_tanh(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* swa_pattern: layer l slides iff l % p < p - 1; window 0 disables it. */
static void reference(const weights *w, const int32_t *tok, int n, int window, int pattern, double *logits) {
    static double x[SEQ][DIM], K[SEQ][KV_HEADS * HD], V[SEQ][KV_HEADS * HD], Q[SEQ][HEADS * HD];
    double xn[DIM], att[HEADS * HD], o[DIM], g[FFN], u[FFN], sc[SEQ];
    for (int t = 0; t < n; t++)
        for (int i = 0; i < DIM; i++) x[t][i] = w->embd[tok[t] * DIM + i] * sqrt((double)DIM);
    for (int l = 0; l < LAYERS; l++) {
        bool swa = window > 0 && l % pattern < pattern - 1;
        double theta = swa ? THETA_SWA : THETA;
        for (int t = 0; t < n; t++) {
            ref64_rmsnorm(xn, x[t], w->attn_norm[l], DIM, EPS);
            ref64_matvec(Q[t], w->wq[l], xn, DIM, HEADS * HD);
            ref64_matvec(K[t], w->wk[l], xn, DIM, KV_HEADS * HD);
            ref64_matvec(V[t], w->wv[l], xn, DIM, KV_HEADS * HD);
            for (int h = 0; h < HEADS; h++) {
                ref64_rmsnorm(Q[t] + h * HD, Q[t] + h * HD, w->q_norm[l], HD, EPS);
                ref64_rope(Q[t] + h * HD, HD, t, theta, true);
            }
            for (int h = 0; h < KV_HEADS; h++) {
                ref64_rmsnorm(K[t] + h * HD, K[t] + h * HD, w->k_norm[l], HD, EPS);
                ref64_rope(K[t] + h * HD, HD, t, theta, true);
            }
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < HEADS; h++) {
                int kvh = h / (HEADS / KV_HEADS);
                ref64_attend(att + h * HD, Q[t] + h * HD, &K[0][kvh * HD], &V[0][kvh * HD], KV_HEADS * HD, t, HD,
                             swa ? window : 0, sc);
            }
            ref64_matvec(o, w->wo[l], att, HEADS * HD, DIM);
            ref64_rmsnorm(o, o, w->post_attn[l], DIM, EPS);
            for (int i = 0; i < DIM; i++) x[t][i] += o[i];
            ref64_rmsnorm(xn, x[t], w->ffn_norm[l], DIM, EPS);
            ref64_matvec(g, w->wg[l], xn, DIM, FFN);
            ref64_matvec(u, w->wu[l], xn, DIM, FFN);
            for (int i = 0; i < FFN; i++) g[i] = gelu_tanh(g[i]) * u[i];
            ref64_matvec(o, w->wd[l], g, FFN, DIM);
            ref64_rmsnorm(o, o, w->post_ffw[l], DIM, EPS);
            for (int i = 0; i < DIM; i++) x[t][i] += o[i];
        }
    }
    for (int t = 0; t < n; t++) {
        ref64_rmsnorm(xn, x[t], w->out_norm, DIM, EPS);
        ref64_matvec(logits + (size_t)t * VOCAB, w->embd, xn, DIM, VOCAB);
        for (int i = 0; i < VOCAB; i++)
            logits[(size_t)t * VOCAB + i] = SOFTCAP * tanh(logits[(size_t)t * VOCAB + i] / SOFTCAP);
    }
}

static double max_diff(const float *a, const double *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* Engine logits for every position: prefill in chunks of `chunk` tokens,
 * the rest one token at a time. */
static int engine_logits(const char *path, int threads, int block, int chunk, const int32_t *tok, int n, float *out,
                         const char *fusions) {
    tk_engine_config cfg = {.kv_type = "f32", .model_path = path, .n_threads = threads, .kv_block_size = block, .max_seqs = 1,
                            .max_batch_tokens = chunk, .fusions = fusions};
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "open: %s\n", err.msg);
        return -1;
    }
    int seq = tk_engine_seq_new(e, &err);
    int rc = 0;
    for (int start = 0; start < n && rc == 0;) {
        int m = start == 0 ? chunk : 1;
        if (m > n - start) m = n - start;
        int32_t pos[SEQ], sq[SEQ];
        uint8_t fl[SEQ];
        for (int i = 0; i < m; i++) {
            pos[i] = start + i;
            sq[i] = seq;
            fl[i] = 1;
        }
        tk_batch b = {m, (int32_t *)tok + start, pos, sq, fl};
        rc = tk_engine_decode(e, &b, out + (size_t)start * VOCAB, &err);
        if (rc) fprintf(stderr, "decode: %s\n", err.msg);
        start += m;
    }
    tk_engine_close(e);
    return rc;
}

/* The real Gemma 3 270M vocabulary (tools/oracles.sh puts the GGUF in
 * .cache/models; TK_GEMMA_GGUF overrides): <end_of_turn> and <eos> end
 * generation, <start_of_turn> does not, and neither does "</s>" (a
 * user-defined HTML tag in this vocabulary; llama.cpp's string heuristic
 * makes it one, tokamak follows the file's token types); the chat markers
 * tokenize as single tokens; no space prefix is added. */
static void check_gemma_vocab(void) {
    const char *path = getenv("TK_GEMMA_GGUF");
    char buf[1024];
    if (!path) {
        snprintf(buf, sizeof buf, "%s/.cache/models/gemma-3-270m-q4_k_m.gguf", TK_SOURCE_DIR);
        path = buf;
    }
    if (access(path, R_OK) != 0) {
        printf("SKIP gemma vocabulary checks: %s not found (run tools/oracles.sh)\n", path);
        return;
    }
    tk_tokenizer *t;
    tk_err err;
    if (tk_tokenizer_open(path, NULL, &t, &err)) {
        CHECK(0, "open %s: %s", path, err.msg);
        return;
    }
    CHECK(tk_tokenizer_n_vocab(t) == 262144, "vocab %d", tk_tokenizer_n_vocab(t));
    CHECK(tk_tokenizer_bos(t) == 2 && tk_tokenizer_add_bos(t), "BOS");
    CHECK(tk_tokenizer_is_eog(t, 106), "<end_of_turn> ends generation");
    CHECK(tk_tokenizer_is_eog(t, 1), "<eos> ends generation");
    CHECK(!tk_tokenizer_is_eog(t, 105), "<start_of_turn> does not");
    CHECK(!tk_tokenizer_is_eog(t, 212), "</s> does not");
    const char *chat = "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n";
    int32_t ids[32];
    int n = 0;
    CHECK(tk_tokenize(t, chat, strlen(chat), true, true, ids, 32, &n, &err) == 0, "tokenize: %s", err.msg);
    const int32_t want[] = {2, 105, 2364, 107, 10979, 106, 107, 105, 4368, 107};
    CHECK(n == 10 && !memcmp(ids, want, sizeof want), "chat prompt tokens (%d)", n);
    CHECK(tk_tokenize(t, "Hello", 5, false, true, ids, 32, &n, &err) == 0 && n == 1 && ids[0] == 9259,
          "no space prefix: 'Hello' -> [9259], got %d tokens, first %d", n, ids[0]);
    tk_tokenizer_free(t);
}

int main(void) {
    check_gemma_vocab();
    static weights w;
    init_weights(&w);
    char dir[] = "/tmp/tk_gemma_XXXXXX";
    if (!mkdtemp(dir)) TK_SKIP("cannot create a temp dir");
    char path[64], path3[64];
    snprintf(path, sizeof path, "%s/g.gguf", dir);
    snprintf(path3, sizeof path3, "%s/g3.gguf", dir);
    CHECK(write_model(&w, path, 0) == 0, "write default-pattern model");
    CHECK(write_model(&w, path3, 3) == 0, "write pattern-3 model");

    int32_t tok[SEQ];
    for (int i = 0; i < SEQ; i++) tok[i] = (i * 29 + 7) % VOCAB;
    static double ref[SEQ * VOCAB], ref3[SEQ * VOCAB], ref_full[SEQ * VOCAB];
    static float got[SEQ * VOCAB];
    reference(&w, tok, SEQ, WINDOW, 6, ref);
    reference(&w, tok, SEQ, WINDOW, 3, ref3);
    reference(&w, tok, SEQ, 0, 6, ref_full);

    double range = 0;
    for (int i = 0; i < SEQ * VOCAB; i++)
        if (fabs(ref[i]) > range) range = fabs(ref[i]);
    double tol = 1e-4 * range;
    double sensitivity = 0;
    for (int i = 0; i < SEQ * VOCAB; i++)
        if (fabs(ref[i] - ref_full[i]) > sensitivity) sensitivity = fabs(ref[i] - ref_full[i]);
    /* Positions inside the first window are unaffected; later ones must be. */
    CHECK(sensitivity > 100 * tol, "the window changes the reference logits (max change %g, tol %g)",
          sensitivity, tol);

    /* Prefill sizes, thread counts and block sizes must all agree with the
     * reference; block 4 with window 5 masks inside blocks and skips whole
     * blocks, block 1 and 64 are the extremes. */
    const int cfgs[][3] = {{1, 4, SEQ}, {2, 4, 7}, {2, 1, 3}, {1, 64, 1}, {2, 5, 11}, {2, 3, SEQ}};
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        memset(got, 0, sizeof got);
        int rc = engine_logits(path, cfgs[c][0], cfgs[c][1], cfgs[c][2], tok, SEQ, got, NULL);
        CHECK(rc == 0, "engine run (threads %d, block %d, chunk %d)", cfgs[c][0], cfgs[c][1], cfgs[c][2]);
        double d = max_diff(got, ref, SEQ * VOCAB);
        CHECK(d < tol, "threads %d block %d chunk %d: max |diff| %g (tol %g)", cfgs[c][0], cfgs[c][1],
              cfgs[c][2], d, tol);
    }
    /* An explicit sliding_window_pattern key overrides the default. */
    memset(got, 0, sizeof got);
    CHECK(engine_logits(path3, 2, 4, 9, tok, SEQ, got, NULL) == 0, "engine run, pattern 3");
    double d3 = max_diff(got, ref3, SEQ * VOCAB);
    CHECK(d3 < tol, "pattern 3: max |diff| %g (tol %g)", d3, tol);
    /* Fusions (QK-norm + RoPE of Q in the projection's store among them)
     * give the same bits as the unfused passes. */
    static float unfused[SEQ * VOCAB];
    CHECK(engine_logits(path3, 2, 4, 9, tok, SEQ, unfused, "none") == 0, "engine run, no fusions");
    CHECK(memcmp(unfused, got, sizeof unfused) == 0, "fused and unfused logits differ");

    unlink(path);
    unlink(path3);
    rmdir(dir);
    TK_TEST_END();
}
