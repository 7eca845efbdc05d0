/* The batched, paged forward pass: several sequences decoded together in
 * mixed batches (one prefilling while others decode) give the same logits
 * as each decoded alone; results do not depend on the thread count or the
 * KV block size.  Past 512 positions, a decoded token's attention is cut
 * into segments spread over the threads (flash-decoding) and folded in
 * order: the same logits as the same positions computed in a prefill. */
#include <math.h>

#include <tokamak.h>

#include "tk_test.h"

#define N_SEQ 3
#define STEPS 12

static const int32_t prompts[N_SEQ][8] = {
    {1, 40, 90, 7, 300, 12, 5, 77}, {1, 411, 2}, {1, 9, 9, 9, 250, 251},
};
static const int prompt_len[N_SEQ] = {8, 3, 6};

/* Logits of each sequence at every step: prompt prefill (last position),
 * then STEPS forced tokens (t * 37 + s) % 500 + 3. */
static int run_alone(const char *model, int threads, int block, int s, float *out, int nv) {
    tk_engine_config cfg = {.model_path = model, .n_threads = threads, .kv_block_size = block, .max_seqs = 1};
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    int seq = tk_engine_seq_new(e, &err);
    int32_t pos[8], seqs[8];
    uint8_t flags[8];
    for (int i = 0; i < prompt_len[s]; i++) {
        pos[i] = i;
        seqs[i] = seq;
        flags[i] = i == prompt_len[s] - 1;
    }
    tk_batch b = {prompt_len[s], (int32_t *)prompts[s], pos, seqs, flags};
    int rc = tk_engine_decode(e, &b, out, &err);
    for (int t = 0; t < STEPS && rc == 0; t++) {
        int32_t tok = (t * 37 + s) % 500 + 3, p = prompt_len[s] + t, q = seq;
        uint8_t f = 1;
        tk_batch one = {1, &tok, &p, &q, &f};
        rc = tk_engine_decode(e, &one, out + (size_t)(t + 1) * nv, &err);
    }
    if (rc) fprintf(stderr, "%s\n", err.msg);
    tk_engine_close(e);
    return rc;
}

/* Same work, all sequences in shared batches; sequence s joins at step s
 * (its prefill shares a batch with the others' decode tokens). */
static int run_together(const char *model, float *out[N_SEQ], int nv) {
    tk_engine_config cfg = {.model_path = model, .n_threads = 2, .kv_block_size = 4, .max_seqs = N_SEQ};
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(&cfg, &e, &err)) return -1;
    int seq[N_SEQ], step[N_SEQ] = {0};
    for (int s = 0; s < N_SEQ; s++) seq[s] = tk_engine_seq_new(e, &err);
    float *logits = malloc(sizeof(float) * (size_t)nv * 16);
    int rc = 0;
    for (int round = 0; round < STEPS + N_SEQ + 1 && rc == 0; round++) {
        int32_t tok[32], pos[32], sq[32];
        uint8_t fl[32];
        int n = 0, owner[32], slot[32];
        for (int s = 0; s < N_SEQ; s++) {
            if (round < s || step[s] > STEPS) continue;
            if (step[s] == 0) {
                for (int i = 0; i < prompt_len[s]; i++) {
                    tok[n] = prompts[s][i];
                    pos[n] = i;
                    sq[n] = seq[s];
                    fl[n] = i == prompt_len[s] - 1;
                    owner[n] = s;
                    slot[n] = 0;
                    n++;
                }
            } else {
                int t = step[s] - 1;
                tok[n] = (t * 37 + s) % 500 + 3;
                pos[n] = prompt_len[s] + t;
                sq[n] = seq[s];
                fl[n] = 1;
                owner[n] = s;
                slot[n] = step[s];
                n++;
            }
            step[s]++;
        }
        if (!n) continue;
        tk_batch b = {n, tok, pos, sq, fl};
        rc = tk_engine_decode(e, &b, logits, &err);
        int row = 0;
        for (int i = 0; i < n && rc == 0; i++)
            if (fl[i]) memcpy(out[owner[i]] + (size_t)slot[i] * nv, logits + (size_t)row++ * nv, sizeof(float) * nv);
    }
    if (rc) fprintf(stderr, "%s\n", err.msg);
    free(logits);
    tk_engine_close(e);
    return rc;
}

/* LONG_PROMPT forced tokens, then LONG_STEPS more: all in one prefill
 * (logits of the last LONG_STEPS positions), or prefilled and then decoded
 * one by one with `threads` threads. */
#define LONG_PROMPT 1100
#define LONG_STEPS 4
static int run_long(const char *model, int threads, bool decode, float *out, int nv) {
    tk_engine_config cfg = {.model_path = model, .n_threads = threads, .ctx_len = 1200, .max_seqs = 1};
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    int seq = tk_engine_seq_new(e, &err), n = LONG_PROMPT + LONG_STEPS, rc = 0;
    int32_t *tok = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * n), *sq = malloc(sizeof(int32_t) * n);
    uint8_t *fl = malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        tok[i] = (i * 131 + 7) % 500 + 3;
        pos[i] = i;
        sq[i] = seq;
        fl[i] = !decode && i >= LONG_PROMPT;
    }
    /* the prefill in batches of at most 256 tokens */
    int end = decode ? LONG_PROMPT : n;
    float *o = out;
    for (int a = 0; a < end && rc == 0; a += 256) {
        int k = end - a < 256 ? end - a : 256, wants = 0;
        for (int i = a; i < a + k; i++) wants += fl[i];
        tk_batch b = {k, tok + a, pos + a, sq + a, fl + a};
        rc = tk_engine_decode(e, &b, o, &err);
        o += (size_t)wants * nv;
    }
    for (int i = LONG_PROMPT; decode && i < n && rc == 0; i++) {
        uint8_t f = 1;
        tk_batch one = {1, tok + i, pos + i, sq + i, &f};
        rc = tk_engine_decode(e, &one, out + (size_t)(i - LONG_PROMPT) * nv, &err);
    }
    if (rc) fprintf(stderr, "%s\n", err.msg);
    free(tok), free(pos), free(sq), free(fl);
    tk_engine_close(e);
    return rc;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

int main(void) {
    const char *model = tk_shared("models/stories260K.bin");
    const int nv = 512;
    size_t rows = (size_t)(STEPS + 1) * nv;
    float *alone[N_SEQ], *alone_t1[N_SEQ], *alone_b16[N_SEQ], *together[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) {
        alone[s] = calloc(rows, sizeof(float));
        alone_t1[s] = calloc(rows, sizeof(float));
        alone_b16[s] = calloc(rows, sizeof(float));
        together[s] = calloc(rows, sizeof(float));
        CHECK(run_alone(model, 2, 4, s, alone[s], nv) == 0, "alone %d", s);
        CHECK(run_alone(model, 1, 4, s, alone_t1[s], nv) == 0, "alone, 1 thread, %d", s);
        CHECK(run_alone(model, 2, 16, s, alone_b16[s], nv) == 0, "alone, block 16, %d", s);
    }
    CHECK(run_together(model, together, nv) == 0, "together");
    for (int s = 0; s < N_SEQ; s++) {
        double d = max_diff(alone[s], together[s], rows);
        /* Each token's computation is independent of the rest of the batch,
         * so results are identical, not just close. */
        CHECK(d == 0, "sequence %d: batched vs alone differ by %g", s, d);
        d = max_diff(alone[s], alone_t1[s], rows);
        CHECK(d == 0, "sequence %d: 1 thread vs 2 threads differ by %g", s, d);
        /* Another block size splits the online softmax differently: float
         * rounding only (logits here span about 20). */
        d = max_diff(alone[s], alone_b16[s], rows);
        CHECK(d < 1e-4, "sequence %d: block 4 vs block 16 differ by %g", s, d);
    }

    /* Long context: decode (segments split over 1, 2, 3 threads) = prefill */
    {
        size_t n = (size_t)LONG_STEPS * nv;
        float *pre = calloc(n, sizeof(float)), *dec = calloc(n, sizeof(float));
        CHECK(run_long(model, 2, false, pre, nv) == 0, "long prefill");
        for (int threads = 1; threads <= 3; threads++) {
            CHECK(run_long(model, threads, true, dec, nv) == 0, "long decode, %d threads", threads);
            double d = max_diff(pre, dec, n);
            CHECK(d == 0, "position %d+: decoded with %d threads vs prefilled differ by %g", LONG_PROMPT, threads, d);
        }
        free(pre);
        free(dec);
    }

    /* The pool is never exceeded: a batch needing more blocks than exist
     * fails cleanly and leaves the sequence usable. */
    tk_engine_config cfg = {.model_path = model, .n_threads = 1, .ctx_len = 32, .kv_block_size = 4, .max_seqs = 1};
    tk_engine *e;
    tk_err err;
    CHECK(tk_engine_open(&cfg, &e, &err) == 0, "%s", err.msg);
    int seq = tk_engine_seq_new(e, &err);
    int32_t tok[40], pos[40], sq[40];
    uint8_t fl[40];
    for (int i = 0; i < 40; i++) {
        tok[i] = 5 + i;
        pos[i] = i;
        sq[i] = seq;
        fl[i] = 0;
    }
    float *lg = malloc(sizeof(float) * nv);
    tk_batch big = {33, tok, pos, sq, fl};
    CHECK(tk_engine_decode(e, &big, lg, &err) != 0, "33 tokens in a 32-token context must fail");
    CHECK(strstr(err.msg, "context") != NULL, "error names the context: %s", err.msg);
    tk_batch ok = {32, tok, pos, sq, fl};
    ok.logits[31] = 1;
    CHECK(tk_engine_decode(e, &ok, lg, &err) == 0, "32 tokens fit: %s", err.msg);
    int32_t bad_tok = 600, p0 = 0;
    uint8_t f1 = 1;
    tk_batch bad = {1, &bad_tok, &p0, &seq, &f1};
    CHECK(tk_engine_decode(e, &bad, lg, &err) != 0 && strstr(err.msg, "token id"), "bad token id: %s", err.msg);
    int32_t gap_pos = 20, t5 = 5, seq2 = tk_engine_seq_new(e, &err);
    CHECK(seq2 < 0, "max_seqs = 1: second sequence refused");
    tk_engine_seq_free(e, seq);
    seq = tk_engine_seq_new(e, &err);
    tk_batch gap = {1, &t5, &gap_pos, &seq, &f1};
    CHECK(tk_engine_decode(e, &gap, lg, &err) != 0, "a position past the cached length must fail");
    free(lg);
    tk_engine_close(e);
    for (int s = 0; s < N_SEQ; s++) {
        free(alone[s]);
        free(alone_t1[s]);
        free(alone_b16[s]);
        free(together[s]);
    }
    TK_TEST_END();
}
