/* tokamak synth: a GGUF with the exact shapes of a real model, seeded
 * random weights (normal, std 0.02; norms 1) and a real tokenizer, so that
 * benchmarks run at 1B scale without downloads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "formats/gguf.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"
#include "util/rng.h"
#include "common/args.h"
#include "commands.h"

typedef struct shape {
    const char *name;
    int dim, layers, heads, kv_heads, ffn, vocab, ctx;
    float theta;
    bool tied;
    const char *tokenizer; /* relative to the shared assets directory */
} shape;

static const shape shapes[] = {
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, false, "tokenizers/llama2/tokenizer.model"},
    {"llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256, 8192, 500000.0f, true, "tokenizers/llama3/tokenizer.json"},
    {"llama-2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, false, "tokenizers/llama2/tokenizer.model"},
    {"stories-15m", 288, 6, 6, 6, 768, 32000, 256, 10000.0f, true, "tokenizers/llama2/tokenizer.model"},
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

/* Box-Muller normals from the shared seeded generator. */
typedef struct rng {
    uint64_t s[4];
    int have_spare;
    double spare;
} rng;

static void rng_seed(rng *r, uint64_t seed) {
    tk_rng_seed(r->s, seed);
    r->have_spare = 0;
}

static double normal(rng *r) {
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    double u, v, s;
    do {
        u = tk_rng_uniform(r->s) * 2 - 1;
        v = tk_rng_uniform(r->s) * 2 - 1;
        s = u * u + v * v;
    } while (s >= 1 || s == 0);
    double f = sqrt(-2 * log(s) / s);
    r->spare = v * f;
    r->have_spare = 1;
    return u * f;
}

/* llama.cpp's Q4_K_M rule: Q6_K for the output head and for attn_v /
 * ffn_down in the first and last eighth of the layers and every third layer
 * in between; Q4_K elsewhere. */
static tk_dtype q4_k_m_type(const char *name, int layer, int n_layers) {
    if (!strcmp(name, "output.weight")) return TK_Q6_K;
    if (strstr(name, "attn_v") || strstr(name, "ffn_down")) {
        bool more = layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
        if (more) return TK_Q6_K;
    }
    return TK_Q4_K;
}

static void usage(FILE *f) {
    fprintf(f, "usage: tokamak synth --like SHAPE --type q4_0|q8_0|q4_k_m|f16|... -o FILE [--seed S] [--shared DIR]\n"
               "shapes:");
    for (int i = 0; i < N_SHAPES; i++) fprintf(f, " %s", shapes[i].name);
    fprintf(f, "\n");
}

int tk_cmd_synth(int argc, char **argv) {
    const char *like = NULL, *type_name = NULL, *out = NULL, *shared = getenv("TK_SHARED_DIR");
    uint64_t seed = 1234;
    if (!shared) shared = "../shared";
    const tk_opt opts[] = {
        TK_OPT_S("--like", &like),
        TK_OPT_S("--type", &type_name),
        TK_OPT_S("-o", &out),
        TK_OPT_U("--seed", &seed),
        TK_OPT_S("--shared", &shared),
    };
    const tk_cli cli = {.cmd = "synth", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts)};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    if (tk_args_missing(&cli, like, "--like SHAPE") || tk_args_missing(&cli, type_name, "--type TYPE") ||
        tk_args_missing(&cli, out, "-o OUT"))
        return 2;
    const shape *sh = NULL;
    for (int i = 0; i < N_SHAPES; i++)
        if (!strcmp(shapes[i].name, like)) sh = &shapes[i];
    if (!sh) {
        fprintf(stderr, "tokamak synth: unknown shape '%s'\n", like);
        usage(stderr);
        return 2;
    }
    bool mix = !strcmp(type_name, "q4_k_m");
    int base = mix ? TK_Q4_K : tk_dtype_from_name(type_name);
    if (base < 0 || !tk_quant_can_quantize((tk_dtype)base)) {
        fprintf(stderr, "tokamak synth: unsupported --type '%s'\n", type_name);
        return 2;
    }
    char tok_path[1024];
    snprintf(tok_path, sizeof tok_path, "%s/%s", shared, sh->tokenizer);
    tk_err err;
    tk_tokenizer *tok;
    if (tk_tokenizer_open(tok_path, NULL, &tok, &err)) {
        fprintf(stderr, "tokamak synth: tokenizer: %s\n", err.msg);
        return 1;
    }
    tk_gguf_writer *w = tk_gguf_writer_new();
    int hd = sh->dim / sh->heads, kv_dim = hd * sh->kv_heads;
    int rc = 0;
    char name[64];
    rc |= tk_gguf_set_str(w, "general.architecture", "llama");
    snprintf(name, sizeof name, "synthetic %s (%s)", sh->name, type_name);
    rc |= tk_gguf_set_str(w, "general.name", name);
    rc |= tk_gguf_set_u32(w, "llama.context_length", (uint32_t)sh->ctx);
    rc |= tk_gguf_set_u32(w, "llama.embedding_length", (uint32_t)sh->dim);
    rc |= tk_gguf_set_u32(w, "llama.block_count", (uint32_t)sh->layers);
    rc |= tk_gguf_set_u32(w, "llama.feed_forward_length", (uint32_t)sh->ffn);
    rc |= tk_gguf_set_u32(w, "llama.attention.head_count", (uint32_t)sh->heads);
    rc |= tk_gguf_set_u32(w, "llama.attention.head_count_kv", (uint32_t)sh->kv_heads);
    rc |= tk_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    rc |= tk_gguf_set_f32(w, "llama.rope.freq_base", sh->theta);
    rc |= tk_gguf_set_u32(w, "llama.rope.dimension_count", (uint32_t)hd);
    rc |= tk_gguf_set_u32(w, "llama.vocab_size", (uint32_t)sh->vocab);
    if (rc || tk_tokenizer_to_gguf(tok, w, &err)) {
        fprintf(stderr, "tokamak synth: metadata: %s\n", rc ? "writer error" : err.msg);
        tk_gguf_writer_free(w);
        tk_tokenizer_free(tok);
        return 1;
    }
    /* Tensors in GGUF order: (name, ne0, ne1, layer). */
    typedef struct spec {
        char name[64];
        int64_t ne0, ne1;
        int layer;
    } spec;
    int n_specs = 0, cap = 3 + 9 * sh->layers;
    spec *specs = calloc((size_t)cap, sizeof *specs);
    void **bufs = calloc((size_t)cap + 1, sizeof(void *));
#define ADD(nm, a, b, l)                                                                                              \
    do {                                                                                                              \
        snprintf(specs[n_specs].name, sizeof specs[n_specs].name, "%s", nm);                                         \
        specs[n_specs].ne0 = (a);                                                                                     \
        specs[n_specs].ne1 = (b);                                                                                     \
        specs[n_specs].layer = (l);                                                                                   \
        n_specs++;                                                                                                    \
    } while (0)
    ADD("token_embd.weight", sh->dim, sh->vocab, -1);
    for (int l = 0; l < sh->layers; l++) {
        static const struct { const char *s; int kind; } parts[] = {
            {"attn_norm", 0}, {"attn_q", 1}, {"attn_k", 2}, {"attn_v", 2}, {"attn_output", 1},
            {"ffn_norm", 0}, {"ffn_gate", 3}, {"ffn_up", 3}, {"ffn_down", 4}};
        for (int k = 0; k < 9; k++) {
            char nm[64];
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, parts[k].s);
            int kind = parts[k].kind;
            int64_t a = kind == 4 ? sh->ffn : sh->dim;
            int64_t b = kind == 0 ? 1 : kind == 1 ? sh->dim : kind == 2 ? kv_dim : kind == 3 ? sh->ffn : sh->dim;
            ADD(nm, a, b, l);
        }
    }
    ADD("output_norm.weight", sh->dim, 1, -1);
    if (!sh->tied) ADD("output.weight", sh->dim, sh->vocab, -1);
#undef ADD
    rng r;
    rc = 0;
    float *row = malloc(sizeof(float) * (size_t)(sh->dim > sh->ffn ? sh->dim : sh->ffn));
    for (int i = 0; i < n_specs && rc == 0; i++) {
        spec *sp = &specs[i];
        bool vec = sp->ne1 == 1;
        tk_dtype ty = vec ? TK_F32 : mix ? q4_k_m_type(sp->name, sp->layer, sh->layers) : (tk_dtype)base;
        if (!mix && !strcmp(sp->name, "token_embd.weight") && ty != TK_F32 && ty != TK_F16 && ty != TK_BF16 &&
            sp->ne0 % 32 == 0)
            ty = (tk_dtype)base; /* same type as the rest, as llama-quantize does for Q4_0/Q8_0 */
        size_t row_bytes = tk_dtype_row_bytes(ty, sp->ne0);
        if (!row_bytes) ty = TK_F16, row_bytes = tk_dtype_row_bytes(ty, sp->ne0);
        size_t bytes = row_bytes * (size_t)sp->ne1;
        unsigned char *data = malloc(bytes);
        bufs[i] = data;
        if (!data || !row) {
            fprintf(stderr, "tokamak synth: out of memory\n");
            rc = 1;
            break;
        }
        rng_seed(&r, seed * 1000003u + (uint64_t)i);
        for (int64_t rr = 0; rr < sp->ne1 && rc == 0; rr++) {
            for (int64_t c = 0; c < sp->ne0; c++) row[c] = vec ? 1.0f : (float)(0.02 * normal(&r));
            if (tk_quantize_row(ty, row, data + (size_t)rr * row_bytes, sp->ne0, NULL)) rc = 1;
        }
        int64_t ne[2] = {sp->ne0, sp->ne1};
        if (rc || tk_gguf_add_tensor(w, sp->name, ty, vec ? 1 : 2, ne, data, bytes)) {
            fprintf(stderr, "tokamak synth: cannot quantize '%s'\n", sp->name);
            rc = 1;
        }
        fprintf(stderr, "\rsynth: %d/%d tensors", i + 1, n_specs);
    }
    fprintf(stderr, "\n");
    if (rc == 0 && tk_gguf_write(w, out, &err)) {
        fprintf(stderr, "tokamak synth: %s\n", err.msg);
        rc = 1;
    }
    if (rc == 0) fprintf(stderr, "wrote %s (%s, %s)\n", out, sh->name, type_name);
    for (int i = 0; i < n_specs; i++) free(bufs[i]);
    free(bufs);
    free(specs);
    free(row);
    tk_gguf_writer_free(w);
    tk_tokenizer_free(tok);
    return rc;
}
