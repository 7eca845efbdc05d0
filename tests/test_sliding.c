/* Sliding-window KV release (models whose layers all slide, Mistral-style).
 *
 * The model: code-target's trained weights in a Hugging Face directory
 * written here, whose config.json says model_type "mistral" with
 * sliding_window 32 (the safetensors file is linked, not copied).  With
 * KV blocks of 8 positions, sequences generate far past the window and:
 *  - tokens and logits (chosen-token logprob and the top 4, bit for bit)
 *    equal those of the same engine with release switched off, for
 *    concurrent requests, under a pool so small that requests are
 *    preempted and recomputed (the pool could not even hold one whole
 *    sequence), with n = 2 samples forked from one prompt, with a second
 *    request served from the prefix cache, and with speculative decoding
 *    (prompt lookup; a draft model that slides too), whose rejected drafts
 *    are rolled back;
 *  - after every step each sequence holds at most ceil(W / bs) + 2 blocks
 *    (release off: the whole sequence), and the pool's used blocks and
 *    reference counts are exactly what the live block tables reference;
 *  - at the end every block is back (free or cached).
 * The window is checked to matter: full attention (the llama config) gives
 * other logits.  A tiny random model written as GGUF checks the
 * architecture entry: "mistral" with a window wider than the sequence is
 * bit-identical to "llama" (sliding layers rotate like global ones), a
 * layer pattern with global layers (as Gemma 3 has) turns release off. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tokamak.h>

#include "../src/engine/engine_internal.h"
#include "formats/gguf.h"
#include "engine_test.h"
#include "tk_test.h"


enum { W = 32, BS = 8, TOP = 4, MAX_GEN = 200, N_PROMPTS = 3, MAX_PROMPT = 40 };
#define HELD_MAX ((W + BS - 1) / BS + 2)

static char root[256];

/* ---- model directories ---- */

static char *replace(const char *s, const char *from, const char *to) {
    const char *hit = strstr(s, from);
    if (!hit) return NULL;
    size_t n = strlen(s) + strlen(to) + 1;
    char *out = malloc(n);
    if (!out) return NULL;
    snprintf(out, n, "%.*s%s%s", (int)(hit - s), s, to, hit + strlen(from));
    return out;
}

/* root/name: the shared model's safetensors (linked) with a config.json
 * turned into Mistral's with the given window. */
static int make_mistral_dir(const char *name, const char *model, int window, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", root, name);
    if (mkdir(path, 0755)) return -1;
    char src[1024], dst[1024];
    snprintf(src, sizeof src, "%s/model.safetensors", tk_shared(model));
    snprintf(dst, sizeof dst, "%s/model.safetensors", path);
    if (symlink(src, dst)) return -1;
    snprintf(src, sizeof src, "%s/config.json", tk_shared(model));
    char *text;
    size_t len;
    tk_err err;
    if (tk_read_file(src, &text, &len, &err)) return -1;
    char mt[96];
    snprintf(mt, sizeof mt, "\"model_type\": \"mistral\", \"sliding_window\": %d", window);
    char *a = replace(text, "\"model_type\": \"llama\"", mt);
    char *b = a ? replace(a, "LlamaForCausalLM", "MistralForCausalLM") : NULL;
    free(text);
    free(a);
    if (!b) return -1;
    snprintf(dst, sizeof dst, "%s/config.json", path);
    FILE *f = fopen(dst, "w");
    int rc = f && fputs(b, f) >= 0 ? 0 : -1;
    if (f && fclose(f)) rc = -1;
    free(b);
    return rc;
}

static tk_engine *open_engine(const char *model, const char *draft, int max_seqs, size_t kv_memory, bool release) {
    tk_engine_config cfg = {.kv_type = "f32", .model_path = model, .draft_model_path = draft,
                            .tokenizer_path = tk_shared("models/code-target/tokenizer.json"),
                            .draft_tokenizer_path = draft ? tk_shared("models/code-target/tokenizer.json") : NULL,
                            .n_threads = 2, .max_seqs = max_seqs, .kv_memory = kv_memory, .kv_block_size = BS,
                            .max_batch_tokens = 64, .no_window_release = !release};
    return tk_test_open(&cfg, model);
}

/* ---- requests ---- */

typedef struct result {
    int32_t tokens[2][MAX_GEN];
    float lp[2][MAX_GEN];
    int32_t top_ids[2][MAX_GEN][TOP];
    float top_lp[2][MAX_GEN][TOP];
    int n[2];
    int done;
    int n_cached;
    int drafted, accepted;
} result;

static void on_event(void *user, const tk_event *ev) {
    result *r = user;
    int i = ev->index, k = r->n[i];
    if (ev->token >= 0 && k < MAX_GEN) {
        r->tokens[i][k] = ev->token;
        r->lp[i][k] = ev->logprob;
        for (int j = 0; j < TOP; j++) {
            r->top_ids[i][k][j] = j < ev->n_top ? ev->top_ids[j] : -1;
            r->top_lp[i][k][j] = j < ev->n_top ? ev->top_logprobs[j] : 0;
        }
        r->n[i]++;
    }
    if (ev->done) {
        r->done++;
        r->n_cached = ev->n_cached_tokens;
        r->drafted += ev->spec_drafted;
        r->accepted += ev->spec_accepted;
    }
}

/* Tokens equal; logprobs too (bit for bit) when both carry them. */
static bool same(const result *a, const result *b, int sample, bool logits) {
    int n = a->n[sample];
    if (n != b->n[sample] || memcmp(a->tokens[sample], b->tokens[sample], sizeof(int32_t) * (size_t)n)) return false;
    if (!logits) return true;
    return !memcmp(a->lp[sample], b->lp[sample], sizeof(float) * (size_t)n) &&
           !memcmp(a->top_ids[sample], b->top_ids[sample], sizeof(a->top_ids[0][0]) * (size_t)n) &&
           !memcmp(a->top_lp[sample], b->top_lp[sample], sizeof(a->top_lp[0][0]) * (size_t)n);
}

/* Block accounting after a step: used blocks and reference counts are
 * exactly those of the live tables (released entries excluded); released
 * entries are a prefix; returns the most blocks one sequence holds. */
static int check_tables(tk_engine *x, int *bad) {
    int *refs = calloc((size_t)x->kv.n_blocks, sizeof(int)), distinct = 0, most = 0;
    for (int i = 0; i < x->max_seqs; i++) {
        if (!x->seq_ptrs[i]) continue;
        const tk_kv_seq *s = &x->seqs[i];
        int held = 0;
        for (int b = 0; b < s->n_blocks; b++) {
            if ((s->blocks[b] < 0) != (b < s->n_dropped)) (*bad)++;
            if (s->blocks[b] < 0) continue;
            held++;
            distinct += refs[s->blocks[b]]++ == 0;
        }
        if (held > most) most = held;
    }
    if (distinct != tk_kv_used(&x->kv)) (*bad)++;
    for (int b = 0; b < x->kv.n_blocks; b++)
        if (refs[b] != x->kv.refcount[b]) (*bad)++;
    free(refs);
    return most;
}

typedef struct run_stats {
    int most_held, most_held_draft; /* blocks of one sequence, after any step */
    int most_used;                  /* pool blocks in use, after any step */
    int bad;                        /* accounting errors */
} run_stats;

/* After every step: the block tables are sane and the most blocks held so far. */
static int track_step(tk_engine *e, void *ctx) {
    run_stats *st = ctx;
    int held = check_tables(e, &st->bad);
    if (held > st->most_held) st->most_held = held;
    if (e->draft) {
        held = check_tables(e->draft, &st->bad);
        if (held > st->most_held_draft) st->most_held_draft = held;
    }
    if (tk_kv_used(&e->kv) > st->most_used) st->most_used = tk_kv_used(&e->kv);
    return 0;
}

static int run_all(tk_engine *e, tk_request_params *ps, int n, result *rs, run_stats *st) {
    memset(st, 0, sizeof *st);
    return tk_test_run_requests(e, ps, n, on_event, rs, sizeof *rs, track_step, st, 100000);
}

static bool all_back(tk_engine *e) {
    for (tk_engine *x = e; x; x = x == e ? e->draft : NULL)
        if (tk_kv_used(&x->kv) != 0 || x->kv.n_free + x->kv.n_cached != x->kv.n_blocks) return false;
    return true;
}

static int code_prompts(tk_engine *e, int32_t prompts[N_PROMPTS][MAX_PROMPT], int *lens) {
    char *text;
    size_t len;
    tk_err err;
    if (tk_read_file(tk_shared("models/code-eval.txt"), &text, &len, &err)) return -1;
    int32_t buf[400];
    for (int i = 0; i < N_PROMPTS; i++) {
        size_t o = len / N_PROMPTS * (size_t)i;
        while (o > 0 && o < len && text[o - 1] != '\n') o++; /* start of a line */
        size_t n = len - o < 300 ? len - o : 300;
        while (n > 0 && ((unsigned char)text[o + n] & 0xC0) == 0x80) n--;
        int got;
        if (tk_tokenize(tk_engine_tokenizer(e), text + o, n, true, false, buf, 400, &got, &err) || got > 400 ||
            got < 20) {
            free(text);
            return -1;
        }
        lens[i] = got < MAX_PROMPT - 4 * i ? got : MAX_PROMPT - 4 * i; /* 40, 36, 32 tokens */
        memcpy(prompts[i], buf, sizeof(int32_t) * (size_t)lens[i]);
    }
    free(text);
    return 0;
}

static tk_request_params params(const int32_t *prompt, int n, int gen, int mode) {
    tk_request_params p = {.prompt = prompt, .n_prompt = n, .max_tokens = gen, .n = 1, .top_logprobs = TOP,
                           .speculative = mode, .ignore_eos = true};
    tk_sampling_defaults(&p.sampling);
    p.sampling.temperature = 0;
    return p;
}

static void test_release(const char *dir, const char *draft_dir) {
    const int gen = SLOW_BUILD ? 72 : 160;
    tk_engine *on = open_engine(dir, NULL, N_PROMPTS, 0, true);
    tk_engine *off = open_engine(dir, NULL, N_PROMPTS, 0, false);
    tk_engine *full = open_engine(tk_shared("models/code-target"), NULL, 1, 0, true);
    CHECK(on && off && full, "open the engines");
    if (!on || !off || !full) goto out;
    tk_model_summary sm;
    tk_engine_summary(on, &sm);
    CHECK(!strcmp(sm.arch, "mistral") && sm.swa_window == W && sm.n_swa_layers == sm.n_layers &&
              sm.kv_window_release == W,
          "mistral dir: arch %s, window %d, %d of %d layers slide, release %d", sm.arch, sm.swa_window,
          sm.n_swa_layers, sm.n_layers, sm.kv_window_release);
    tk_engine_summary(off, &sm);
    CHECK(sm.swa_window == W && sm.kv_window_release == 0, "release switched off: %d", sm.kv_window_release);
    tk_engine_summary(full, &sm);
    CHECK(!strcmp(sm.arch, "llama") && sm.swa_window == 0 && sm.kv_window_release == 0, "llama: no window");

    int32_t prompts[N_PROMPTS][MAX_PROMPT];
    int lens[N_PROMPTS];
    CHECK(code_prompts(on, prompts, lens) == 0, "prompts from code-eval.txt");
    tk_request_params ps[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) ps[i] = params(prompts[i], lens[i], gen, TK_SPEC_OFF);

    /* concurrent requests, release on and off */
    static result ron[N_PROMPTS], roff[N_PROMPTS], rfull[1];
    run_stats son, soff, sfull;
    CHECK(run_all(on, ps, N_PROMPTS, ron, &son) == 0, "run with release");
    CHECK(run_all(off, ps, N_PROMPTS, roff, &soff) == 0, "run without release");
    CHECK(run_all(full, ps, 1, rfull, &sfull) == 0, "run with full attention");
    for (int i = 0; i < N_PROMPTS; i++) {
        CHECK(ron[i].n[0] == gen, "request %d: %d tokens", i, ron[i].n[0]);
        CHECK(same(&ron[i], &roff[i], 0, true), "request %d: tokens/logits with release differ from without", i);
    }
    CHECK(!same(&ron[0], &rfull[0], 0, true), "the window matters: full attention gives other logits");
    CHECK(son.bad == 0 && soff.bad == 0, "block accounting: %d / %d errors", son.bad, soff.bad);
    CHECK(son.most_held <= HELD_MAX, "with release a sequence held at most %d blocks (bound %d)", son.most_held,
          HELD_MAX);
    CHECK(son.most_used <= N_PROMPTS * HELD_MAX, "pool use with release: %d blocks", son.most_used);
    int whole = (lens[0] + gen + BS - 1) / BS;
    CHECK(soff.most_held >= whole, "without release a sequence holds all of its %d blocks (%d)", whole,
          soff.most_held);
    CHECK(all_back(on) && all_back(off), "all blocks back");
    printf("release: most blocks per sequence %d (bound %d), pool %d; without: %d, pool %d\n", son.most_held,
           HELD_MAX, son.most_used, soff.most_held, soff.most_used);

    /* n = 2 forked samples; then the same request again, from the prefix cache */
    {
        tk_request_params p = params(prompts[0], lens[0], gen / 2, TK_SPEC_OFF);
        p.n = 2;
        p.sampling.temperature = 0.8f;
        p.sampling.seed = 7;
        static result a, b, c;
        run_stats sa, sb, sc;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        memset(&c, 0, sizeof c);
        CHECK(run_all(on, &p, 1, &a, &sa) == 0 && run_all(off, &p, 1, &b, &sb) == 0, "n = 2");
        for (int k = 0; k < 2; k++)
            CHECK(a.n[k] == gen / 2 && same(&a, &b, k, true), "n = 2: sample %d differs with release", k);
        CHECK(memcmp(a.tokens[0], a.tokens[1], sizeof(int32_t) * (size_t)a.n[0]) != 0, "the samples differ");
        CHECK(sa.bad == 0 && sa.most_held <= HELD_MAX, "n = 2: accounting %d, held %d", sa.bad, sa.most_held);
        CHECK(run_all(on, &p, 1, &c, &sc) == 0, "n = 2 again");
        CHECK(c.n_cached == (lens[0] - 1) / BS * BS, "released prompt blocks serve the prefix cache: %d cached",
              c.n_cached);
        for (int k = 0; k < 2; k++) CHECK(same(&a, &c, k, true), "n = 2 from the cache: sample %d differs", k);
        CHECK(all_back(on), "all blocks back after n = 2");
    }

    /* a pool of 14 blocks: less than one whole sequence (the engine without
     * release refuses the request), three sequences need preemption */
    {
        size_t block_bytes = tk_kv_block_bytes(6, 2, 48, BS, TK_KV_F32);
        tk_engine *tight = open_engine(dir, NULL, N_PROMPTS, 14 * block_bytes, true);
        tk_engine *tight_off = open_engine(dir, NULL, N_PROMPTS, 14 * block_bytes, false);
        CHECK(tight && tight_off, "open with a tight pool");
        if (tight && tight_off) {
            tk_err err;
            result dummy;
            tk_request_params longer = ps[0];
            longer.max_tokens = 160; /* 25 blocks */
            CHECK(tk_engine_submit(tight_off, &longer, on_event, &dummy, NULL, &err) != 0 &&
                      strstr(err.msg, "KV blocks"),
                  "without release the request cannot fit: %s", err.msg);
            static result rt[N_PROMPTS];
            run_stats st;
            CHECK(run_all(tight, ps, N_PROMPTS, rt, &st) == 0, "tight pool run");
            tk_engine_metrics m;
            tk_engine_metrics_get(tight, &m);
            CHECK(m.preemptions > 0, "preemptions: %llu", (unsigned long long)m.preemptions);
            for (int i = 0; i < N_PROMPTS; i++)
                CHECK(same(&rt[i], &roff[i], 0, true), "request %d differs after preemption", i);
            CHECK(st.bad == 0 && all_back(tight), "tight pool: accounting %d", st.bad);
            printf("tight pool: 14 blocks, %llu preemptions\n", (unsigned long long)m.preemptions);
        }
        tk_engine_close(tight);
        tk_engine_close(tight_off);
    }

    /* speculative decoding: prompt lookup, and a draft model that slides too */
    {
        tk_engine *spec = draft_dir ? open_engine(dir, draft_dir, N_PROMPTS, 0, true) : NULL;
        CHECK(spec != NULL, "open with a draft model");
        if (spec) {
            tk_model_summary ds;
            tk_engine_summary(tk_engine_draft(spec), &ds);
            CHECK(ds.kv_window_release == W, "the draft model releases too: %d", ds.kv_window_release);
            static const int modes[2] = {TK_SPEC_NGRAM, TK_SPEC_DRAFT};
            for (int m = 0; m < 2; m++) {
                tk_request_params sp[N_PROMPTS];
                static result rs[N_PROMPTS];
                memset(rs, 0, sizeof rs);
                for (int i = 0; i < N_PROMPTS; i++) {
                    sp[i] = params(prompts[i], lens[i], gen, modes[m]);
                    sp[i].draft_min = 2; /* draft every step: rejections and rollbacks */
                    sp[i].draft_max = 4;
                }
                run_stats st;
                CHECK(run_all(spec, sp, N_PROMPTS, rs, &st) == 0, "speculative run %d", m);
                int drafted = 0, accepted = 0;
                for (int i = 0; i < N_PROMPTS; i++) {
                    CHECK(same(&rs[i], &roff[i], 0, false), "mode %d request %d: tokens differ", m, i);
                    drafted += rs[i].drafted;
                    accepted += rs[i].accepted;
                }
                CHECK(accepted > 0 && accepted < drafted, "mode %d: drafts accepted and rejected: %d of %d", m,
                      accepted, drafted);
                CHECK(st.bad == 0 && st.most_held <= HELD_MAX, "mode %d: accounting %d, held %d", m, st.bad,
                      st.most_held);
                /* the draft cache may run ahead by the drafts of one step */
                CHECK(m == 0 || (st.most_held_draft > 0 && st.most_held_draft <= HELD_MAX + 2),
                      "mode %d: draft held %d", m, st.most_held_draft);
                CHECK(all_back(spec), "mode %d: all blocks back", m);
                printf("speculative mode %d: %d of %d drafts accepted, held %d (draft %d)\n", m, accepted, drafted,
                       st.most_held, st.most_held_draft);
            }
        }
        tk_engine_close(spec);
    }
out:
    tk_engine_close(on);
    tk_engine_close(off);
    tk_engine_close(full);
}

/* ---- the architecture entry, on a tiny random GGUF ---- */

enum { DIM = 32, LAYERS = 2, HEADS = 4, KV_HEADS = 2, HD = 8, FFN = 48, VOCAB = 64, SEQ = 20 };

typedef struct weights {
    float embd[VOCAB * DIM], out_norm[DIM], out[VOCAB * DIM];
    float attn_norm[LAYERS][DIM], ffn_norm[LAYERS][DIM];
    float wq[LAYERS][HEADS * HD * DIM], wk[LAYERS][KV_HEADS * HD * DIM], wv[LAYERS][KV_HEADS * HD * DIM];
    float wo[LAYERS][DIM * HEADS * HD];
    float wg[LAYERS][FFN * DIM], wu[LAYERS][FFN * DIM], wd[LAYERS][DIM * FFN];
} weights;

static void fill(float *p, size_t n, float scale, float offset, uint64_t *rng) {
    for (size_t i = 0; i < n; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = offset + scale * (float)((*rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

static int write_gguf(const weights *w, const char *path, const char *arch, int window, int pattern) {
    tk_gguf_writer *g = tk_gguf_writer_new();
    char key[96];
#define KEY(s) (snprintf(key, sizeof key, "%s.%s", arch, s), key)
    tk_gguf_set_str(g, "general.architecture", arch);
    tk_gguf_set_u32(g, KEY("context_length"), 256);
    tk_gguf_set_u32(g, KEY("embedding_length"), DIM);
    tk_gguf_set_u32(g, KEY("block_count"), LAYERS);
    tk_gguf_set_u32(g, KEY("feed_forward_length"), FFN);
    tk_gguf_set_u32(g, KEY("attention.head_count"), HEADS);
    tk_gguf_set_u32(g, KEY("attention.head_count_kv"), KV_HEADS);
    tk_gguf_set_f32(g, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    tk_gguf_set_f32(g, KEY("rope.freq_base"), 10000.0f);
    tk_gguf_set_str(g, KEY("rope.scaling.type"), "linear");
    tk_gguf_set_f32(g, KEY("rope.scaling.factor"), 2.0f);
    if (window) tk_gguf_set_u32(g, KEY("attention.sliding_window"), (uint32_t)window);
    if (pattern) tk_gguf_set_u32(g, KEY("attention.sliding_window_pattern"), (uint32_t)pattern);
#undef KEY
    int64_t v1[1] = {DIM}, me[2] = {DIM, VOCAB};
    tk_gguf_add_tensor(g, "token_embd.weight", TK_F32, 2, me, w->embd, sizeof w->embd);
    tk_gguf_add_tensor(g, "output_norm.weight", TK_F32, 1, v1, w->out_norm, sizeof w->out_norm);
    tk_gguf_add_tensor(g, "output.weight", TK_F32, 2, me, w->out, sizeof w->out);
    char name[64];
    for (int l = 0; l < LAYERS; l++) {
        int64_t q[2] = {DIM, HEADS * HD}, kv[2] = {DIM, KV_HEADS * HD}, o[2] = {HEADS * HD, DIM};
        int64_t up[2] = {DIM, FFN}, down[2] = {FFN, DIM};
        struct { const char *fmt; int nd; int64_t *ne; const void *p; size_t bytes; } t[] = {
            {"blk.%d.attn_norm.weight", 1, v1, w->attn_norm[l], sizeof w->attn_norm[l]},
            {"blk.%d.attn_q.weight", 2, q, w->wq[l], sizeof w->wq[l]},
            {"blk.%d.attn_k.weight", 2, kv, w->wk[l], sizeof w->wk[l]},
            {"blk.%d.attn_v.weight", 2, kv, w->wv[l], sizeof w->wv[l]},
            {"blk.%d.attn_output.weight", 2, o, w->wo[l], sizeof w->wo[l]},
            {"blk.%d.ffn_norm.weight", 1, v1, w->ffn_norm[l], sizeof w->ffn_norm[l]},
            {"blk.%d.ffn_gate.weight", 2, up, w->wg[l], sizeof w->wg[l]},
            {"blk.%d.ffn_up.weight", 2, up, w->wu[l], sizeof w->wu[l]},
            {"blk.%d.ffn_down.weight", 2, down, w->wd[l], sizeof w->wd[l]},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            snprintf(name, sizeof name, t[i].fmt, l);
            tk_gguf_add_tensor(g, name, TK_F32, t[i].nd, t[i].ne, t[i].p, t[i].bytes);
        }
    }
    tk_err err;
    int rc = tk_gguf_write(g, path, &err);
    if (rc) fprintf(stderr, "write %s: %s\n", path, err.msg);
    tk_gguf_writer_free(g);
    return rc;
}

/* Logits of every position, and the release window of the engine. */
static int gguf_logits(const char *path, float *out, int *release) {
    tk_engine_config cfg = {.kv_type = "f32", .model_path = path, .n_threads = 2, .kv_block_size = 4};
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "open %s: %s\n", path, err.msg);
        return -1;
    }
    tk_model_summary s;
    tk_engine_summary(e, &s);
    *release = s.kv_window_release;
    int32_t tokens[SEQ];
    for (int i = 0; i < SEQ; i++) tokens[i] = (i * 37 + 5) % VOCAB;
    int rc = tk_engine_logits(e, tokens, SEQ, out, &err);
    if (rc) fprintf(stderr, "logits: %s\n", err.msg);
    tk_engine_close(e);
    return rc;
}

static void test_gguf_arch(void) {
    static weights w;
    uint64_t rng = 0x5eed;
    fill((float *)&w, sizeof w / sizeof(float), 0.5f, 0, &rng);
    for (int i = 0; i < DIM; i++) w.out_norm[i] = 1.0f + 0.1f * w.out_norm[i];
    for (int l = 0; l < LAYERS; l++)
        for (int i = 0; i < DIM; i++) {
            w.attn_norm[l][i] = 1.0f + 0.1f * w.attn_norm[l][i];
            w.ffn_norm[l][i] = 1.0f + 0.1f * w.ffn_norm[l][i];
        }
    char llama[512], wide[512], narrow[512], mixed[512];
    snprintf(llama, sizeof llama, "%s/llama.gguf", root);
    snprintf(wide, sizeof wide, "%s/mistral-wide.gguf", root);
    snprintf(narrow, sizeof narrow, "%s/mistral-narrow.gguf", root);
    snprintf(mixed, sizeof mixed, "%s/mistral-mixed.gguf", root);
    CHECK(write_gguf(&w, llama, "llama", 0, 0) == 0 && write_gguf(&w, wide, "mistral", 64, 0) == 0 &&
              write_gguf(&w, narrow, "mistral", 5, 0) == 0 && write_gguf(&w, mixed, "mistral", 5, 2) == 0,
          "write the GGUF files");
    static float lg[4][SEQ * VOCAB];
    int rel[4];
    const char *paths[4] = {llama, wide, narrow, mixed};
    for (int i = 0; i < 4; i++) CHECK(gguf_logits(paths[i], lg[i], &rel[i]) == 0, "logits of %s", paths[i]);
    CHECK(rel[0] == 0 && rel[1] == 64 && rel[2] == 5 && rel[3] == 0,
          "release windows: llama %d, mistral %d and %d, mixed layers %d", rel[0], rel[1], rel[2], rel[3]);
    CHECK(!memcmp(lg[0], lg[1], sizeof lg[0]),
          "a window wider than the sequence: mistral equals llama bit for bit (same RoPE, scaling included)");
    /* window 5: positions 0..4 see everything, later ones not */
    CHECK(!memcmp(lg[0], lg[2], sizeof(float) * 5 * VOCAB), "first 5 positions unchanged by the window");
    float diff = 0;
    for (int i = 5 * VOCAB; i < SEQ * VOCAB; i++) diff = fmaxf(diff, fabsf(lg[0][i] - lg[2][i]));
    CHECK(diff > 1e-3f, "the window changes later positions (max diff %g)", diff);
    CHECK(memcmp(lg[2], lg[3], sizeof lg[2]) != 0, "a global layer among sliding ones changes the result");
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/tk_sliding_XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    char dir[512], draft[512];
    int ok = make_mistral_dir("target", "models/code-target", W, dir, sizeof dir) == 0;
    int ok_d = make_mistral_dir("draft", "models/code-draft", W, draft, sizeof draft) == 0;
    CHECK(ok && ok_d, "write the mistral model directories");
    if (ok) test_release(dir, ok_d ? draft : NULL);
    test_gguf_arch();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    TK_TEST_END();
}
