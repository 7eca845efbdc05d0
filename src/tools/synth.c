/* tk_synth_model: a GGUF with the exact shapes of a real model, seeded
 * random weights (normal, std 0.02; norms 1) and a real tokenizer, so that
 * benchmarks run at 1B scale without downloads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

#include "../formats/dtype.h"
#include "../formats/gguf.h"
#include "../quant/quant.h"
#include "../tokenizer/tokenizer.h"
#include "../util/err.h"
#include "../util/rng.h"

typedef struct shape {
    const char *name;
    int dim, layers, heads, kv_heads, ffn, vocab, ctx;
    float theta;
    bool tied;
    const char *tokenizer; /* relative to the shared assets directory */
    /* Mixture of experts (experts 0: dense); head_dim 0: dim / heads */
    const char *arch;      /* NULL: "llama" */
    int head_dim, experts, experts_used, expert_ffn;
} shape;

static const shape shapes[] = {
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, false, "tokenizers/llama2/tokenizer.model", NULL, 0, 0, 0, 0},
    {"llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256, 8192, 500000.0f, true, "tokenizers/llama3/tokenizer.json", NULL, 0, 0, 0, 0},
    {"llama-2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, false, "tokenizers/llama2/tokenizer.model", NULL, 0, 0, 0, 0},
    {"stories-15m", 288, 6, 6, 6, 768, 32000, 256, 10000.0f, true, "tokenizers/llama2/tokenizer.model", NULL, 0, 0, 0, 0},
    /* OLMoE-1B-7B (olmoe: 64 experts, top-8, 1024 wide, q/k norm over the
     * whole projections) with the llama2 vocabulary (32000, not 50304). */
    {.name = "olmoe-1b-7b", .dim = 2048, .layers = 16, .heads = 16, .kv_heads = 16, .ffn = 1024, .vocab = 32000,
     .ctx = 4096, .theta = 10000.0f, .tokenizer = "tokenizers/llama2/tokenizer.model", .arch = "olmoe", .experts = 64,
     .experts_used = 8, .expert_ffn = 1024},
    /* Qwen3-30B-A3B (qwen3moe: 128 experts, top-8, 768 wide, 32 q / 4 KV heads
     * of 128) with 24 of its 48 layers, so a Q4_K_M file (about 9 GB) fits
     * 24 GB of memory while synth holds it; the llama3 vocabulary (128256,
     * not 151936). */
    {.name = "qwen3-30b-a3b-half", .dim = 2048, .layers = 24, .heads = 32, .kv_heads = 4, .ffn = 6144,
     .vocab = 128256, .ctx = 4096, .theta = 1000000.0f, .tokenizer = "tokenizers/llama3/tokenizer.json",
     .arch = "qwen3moe", .head_dim = 128, .experts = 128, .experts_used = 8, .expert_ffn = 768},
    /* Not a real model: the smallest llama shape, with the 512-token
     * aidreams260K vocabulary, for harnesses that need a model's answers but
     * not good ones (the http fuzz target, where the forward pass was most of
     * an input's time). */
    {"micro", 32, 1, 2, 1, 32, 512, 256, 10000.0f, true, "models/aidreams260K.gguf", NULL, 0, 0, 0, 0},
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

const char *tk_synth_shape_name(int i) { return i >= 0 && i < N_SHAPES ? shapes[i].name : NULL; }

static const shape *find_shape(const char *name) {
    for (int i = 0; name && i < N_SHAPES; i++)
        if (!strcmp(shapes[i].name, name)) return &shapes[i];
    return NULL;
}

/* The base type of p->type (q4_k_m: Q4_K), or -1 if it cannot be produced. */
static int base_type(const tk_synth_params *p, bool *mix) {
    *mix = p->type && !strcmp(p->type, "q4_k_m");
    const int base = *mix ? TK_Q4_K : tk_dtype_from_name(p->type);
    return base >= 0 && tk_quant_can_quantize((tk_dtype)base) ? base : -1;
}

int tk_synth_check(const tk_synth_params *p, tk_err *err) {
    bool mix;
    if (!find_shape(p->like)) return tk_err_set(err, "unknown shape '%s'", p->like ? p->like : "");
    if (base_type(p, &mix) < 0) return tk_err_set(err, "unsupported --type '%s'", p->type ? p->type : "");
    return 0;
}

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

static int head_dim_of(const shape *sh) { return sh->head_dim ? sh->head_dim : sh->dim / sh->heads; }

static int set_meta(tk_gguf_writer *w, const shape *sh, const char *type_name, const tk_tokenizer *tok,
                    tk_err *err) {
    const int hd = head_dim_of(sh);
    const char *a = sh->arch ? sh->arch : "llama";
    int rc = 0;
    char name[64], key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    rc |= tk_gguf_set_str(w, "general.architecture", a);
    snprintf(name, sizeof name, "synthetic %s (%s)", sh->name, type_name);
    rc |= tk_gguf_set_str(w, "general.name", name);
    rc |= tk_gguf_set_u32(w, KEY("context_length"), (uint32_t)sh->ctx);
    rc |= tk_gguf_set_u32(w, KEY("embedding_length"), (uint32_t)sh->dim);
    rc |= tk_gguf_set_u32(w, KEY("block_count"), (uint32_t)sh->layers);
    rc |= tk_gguf_set_u32(w, KEY("feed_forward_length"), (uint32_t)sh->ffn);
    rc |= tk_gguf_set_u32(w, KEY("attention.head_count"), (uint32_t)sh->heads);
    rc |= tk_gguf_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)sh->kv_heads);
    rc |= tk_gguf_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    rc |= tk_gguf_set_f32(w, KEY("rope.freq_base"), sh->theta);
    rc |= tk_gguf_set_u32(w, KEY("rope.dimension_count"), (uint32_t)hd);
    rc |= tk_gguf_set_u32(w, KEY("attention.key_length"), (uint32_t)hd);
    rc |= tk_gguf_set_u32(w, KEY("vocab_size"), (uint32_t)sh->vocab);
    if (sh->experts) {
        rc |= tk_gguf_set_u32(w, KEY("expert_count"), (uint32_t)sh->experts);
        rc |= tk_gguf_set_u32(w, KEY("expert_used_count"), (uint32_t)sh->experts_used);
        rc |= tk_gguf_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)sh->expert_ffn);
    }
#undef KEY
    if (rc) return tk_err_set(err, "metadata: writer error");
    if (tk_tokenizer_to_gguf(tok, w, err)) return tk_err_wrap(err, "metadata");
    return 0;
}

/* Tensors in GGUF order: (name, ne0, ne1, ne2 stacked experts, layer). */
typedef struct spec {
    char name[64];
    int64_t ne0, ne1, ne2;
    int layer;
} spec;

static void add_spec(spec *specs, int *n, const char *name, int64_t ne0, int64_t ne1, int layer) {
    snprintf(specs[*n].name, sizeof specs[*n].name, "%s", name);
    specs[*n].ne0 = ne0;
    specs[*n].ne1 = ne1;
    specs[*n].ne2 = 1;
    specs[*n].layer = layer;
    (*n)++;
}

/* Tensors a layer has at most (MoE with q/k norms: 5 attention, 2 norms, ffn_norm, router, 3 stacks). */
#define MAX_LAYER_TENSORS 12

/* A mixture-of-experts layer: attention (q/k norms: per head for qwen3moe,
 * over the whole projections for olmoe), the router and stacked experts. */
static void list_moe_layer(const shape *sh, int l, spec *specs, int *n) {
    const int hd = head_dim_of(sh), q_dim = hd * sh->heads, kv_dim = hd * sh->kv_heads;
    const bool head_norm = sh->arch && !strcmp(sh->arch, "qwen3moe");
    const bool full_norm = sh->arch && !strcmp(sh->arch, "olmoe");
    char nm[64];
#define SPEC(part, a, b)                                                 \
    do {                                                                 \
        snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, part);            \
        add_spec(specs, n, nm, a, b, l);                                 \
    } while (0)
    SPEC("attn_norm", sh->dim, 1);
    SPEC("attn_q", sh->dim, q_dim);
    SPEC("attn_k", sh->dim, kv_dim);
    SPEC("attn_v", sh->dim, kv_dim);
    if (head_norm || full_norm) {
        SPEC("attn_q_norm", head_norm ? hd : q_dim, 1);
        SPEC("attn_k_norm", head_norm ? hd : kv_dim, 1);
    }
    SPEC("attn_output", q_dim, sh->dim);
    SPEC("ffn_norm", sh->dim, 1);
    SPEC("ffn_gate_inp", sh->dim, sh->experts);
    SPEC("ffn_gate_exps", sh->dim, sh->expert_ffn);
    specs[*n - 1].ne2 = sh->experts;
    SPEC("ffn_up_exps", sh->dim, sh->expert_ffn);
    specs[*n - 1].ne2 = sh->experts;
    SPEC("ffn_down_exps", sh->expert_ffn, sh->dim);
    specs[*n - 1].ne2 = sh->experts;
#undef SPEC
}

/* The model's tensors; returns how many (specs holds 3 + MAX_LAYER_TENSORS * layers). */
static int list_tensors(const shape *sh, spec *specs) {
    const int kv_dim = sh->dim / sh->heads * sh->kv_heads;
    int n = 0;
    add_spec(specs, &n, "token_embd.weight", sh->dim, sh->vocab, -1);
    for (int l = 0; l < sh->layers; l++) {
        if (sh->experts) {
            list_moe_layer(sh, l, specs, &n);
            continue;
        }
        static const struct { const char *s; int kind; } parts[] = {
            {"attn_norm", 0}, {"attn_q", 1}, {"attn_k", 2}, {"attn_v", 2}, {"attn_output", 1},
            {"ffn_norm", 0}, {"ffn_gate", 3}, {"ffn_up", 3}, {"ffn_down", 4}};
        for (int k = 0; k < 9; k++) {
            char nm[64];
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, parts[k].s);
            int kind = parts[k].kind;
            int64_t a = kind == 4 ? sh->ffn : sh->dim;
            int64_t b = kind == 0 ? 1 : kind == 1 ? sh->dim : kind == 2 ? kv_dim : kind == 3 ? sh->ffn : sh->dim;
            add_spec(specs, &n, nm, a, b, l);
        }
    }
    add_spec(specs, &n, "output_norm.weight", sh->dim, 1, -1);
    if (!sh->tied) add_spec(specs, &n, "output.weight", sh->dim, sh->vocab, -1);
    return n;
}

int tk_synth_model(const char *out_path, const tk_synth_params *p, tk_err *err) {
    if (tk_synth_check(p, err)) return -1;
    const shape *sh = find_shape(p->like);
    bool mix;
    const int base = base_type(p, &mix);
    char tok_path[1024];
    snprintf(tok_path, sizeof tok_path, "%s/%s", p->shared_dir ? p->shared_dir : "../shared", sh->tokenizer);
    tk_tokenizer *tok;
    if (tk_tokenizer_open(tok_path, NULL, &tok, err)) return tk_err_wrap(err, "tokenizer");
    tk_gguf_writer *w = tk_gguf_writer_new();
    const int cap = 3 + MAX_LAYER_TENSORS * sh->layers;
    spec *specs = calloc((size_t)cap, sizeof *specs);
    void **bufs = calloc((size_t)cap + 1, sizeof(void *));
    float *row = malloc(sizeof(float) * (size_t)(sh->dim > sh->ffn ? sh->dim : sh->ffn));
    int n_specs = 0, rc = -1;
    if (!w || !specs || !bufs || !row) {
        tk_err_set(err, "out of memory");
        goto done;
    }
    if (set_meta(w, sh, p->type, tok, err)) goto done;
    n_specs = list_tensors(sh, specs);
    rng r;
    for (int i = 0; i < n_specs; i++) {
        spec *sp = &specs[i];
        bool vec = sp->ne1 == 1;
        bool router = strstr(sp->name, "ffn_gate_inp") != NULL; /* float, as llama.cpp keeps it */
        tk_dtype ty = vec || router ? TK_F32 : mix ? q4_k_m_type(sp->name, sp->layer, sh->layers) : (tk_dtype)base;
        if (!mix && !strcmp(sp->name, "token_embd.weight") && ty != TK_F32 && ty != TK_F16 && ty != TK_BF16 &&
            sp->ne0 % 32 == 0)
            ty = (tk_dtype)base; /* same type as the rest, as llama-quantize does for Q4_0/Q8_0 */
        size_t row_bytes = tk_dtype_row_bytes(ty, sp->ne0);
        if (!row_bytes) ty = TK_F16, row_bytes = tk_dtype_row_bytes(ty, sp->ne0);
        const int64_t rows = sp->ne1 * sp->ne2;
        size_t bytes = row_bytes * (size_t)rows;
        unsigned char *data = malloc(bytes);
        bufs[i] = data;
        if (!data) {
            tk_err_set(err, "out of memory");
            goto done;
        }
        rng_seed(&r, p->seed * 1000003u + (uint64_t)i);
        int bad = 0;
        for (int64_t rr = 0; rr < rows && !bad; rr++) {
            for (int64_t c = 0; c < sp->ne0; c++) row[c] = vec ? 1.0f : (float)(0.02 * normal(&r));
            bad = tk_quantize_row(ty, row, data + (size_t)rr * row_bytes, sp->ne0, NULL) != 0;
        }
        int64_t ne[3] = {sp->ne0, sp->ne1, sp->ne2};
        if (bad || tk_gguf_add_tensor(w, sp->name, ty, vec ? 1 : sp->ne2 > 1 ? 3 : 2, ne, data, bytes)) {
            tk_err_set(err, "cannot quantize '%s'", sp->name);
            goto done;
        }
        if (p->progress) p->progress(p->progress_user, i + 1, n_specs);
    }
    if (tk_gguf_write(w, out_path, err)) goto done;
    rc = 0;
done:
    if (bufs)
        for (int i = 0; i < n_specs; i++) free(bufs[i]);
    free(bufs);
    free(specs);
    free(row);
    tk_gguf_writer_free(w);
    tk_tokenizer_free(tok);
    return rc;
}
