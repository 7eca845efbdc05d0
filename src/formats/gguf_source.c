/* tk_source from a GGUF file: architecture, hyper-parameters from the
 * `{arch}.*` metadata keys, and the tensor table (which already uses GGUF
 * names, so no renaming is needed).
 *
 * Ownership follows source.h: the impl (the open tk_gguf handle, which owns
 * the mapping, plus the copied path, chat template, tensor table and names)
 * owns everything and is released by impl_free. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf.h"
#include "source.h"

typedef struct gguf_impl {
    tk_gguf *g;
    tk_tensor *tensors;
    int n_tensors;
    char *path;
    char *chat_template;
} gguf_impl;

static void free_tensors(tk_tensor *t, int n) {
    for (int i = 0; i < n; i++) free(t[i].name);
    free(t);
}

static void gguf_impl_free(void *p) {
    gguf_impl *impl = p;
    free_tensors(impl->tensors, impl->n_tensors);
    tk_gguf_close(impl->g);
    free(impl->path);
    free(impl->chat_template);
    free(impl);
}

/* Architectures whose GGUF q/k weights are laid out for NeoX-style RoPE
 * (rotating halves).  Everything else, llama included, rotates adjacent
 * pairs: llama.cpp's converter permutes HF llama weights into that form. */
static const char *const neox_archs[] = {
    "gptneox", "falcon", "qwen", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "phi2", "phi3",
    "gemma",   "gemma2", "gemma3", "stablelm", "starcoder2", "olmo2", "olmoe", "codeshell", "orion",
};

static tk_rope_style rope_style_for(const char *arch) {
    for (size_t i = 0; i < sizeof neox_archs / sizeof neox_archs[0]; i++)
        if (!strcmp(arch, neox_archs[i])) return TK_ROPE_HALVES;
    return TK_ROPE_ADJACENT;
}

typedef struct keyctx {
    const tk_gguf *g;
    const char *path;
    const char *arch;
    tk_err *err;
} keyctx;

static const char *akey(const keyctx *k, const char *suffix, char *buf, size_t n) {
    snprintf(buf, n, "%s.%s", k->arch, suffix);
    return buf;
}

/* Upper bounds of the hyper-parameters, the same as the Hugging Face
 * loader's (hf.c): generous for real models, and small enough that the
 * sizes the model and the KV cache derive from them cannot overflow. */
#define GGUF_MAX_DIM (1 << 20)      /* embedding_length */
#define GGUF_MAX_LAYERS (1 << 16)   /* block_count */
#define GGUF_MAX_HEADS (1 << 16)    /* head_count */
#define GGUF_MAX_FFN (1 << 24)      /* feed_forward_length */
#define GGUF_MAX_VOCAB (1 << 26)    /* vocab_size, token list, token_embd rows */
#define GGUF_MAX_CTX (1 << 26)      /* context_length, original_context_length */
#define GGUF_MAX_HEAD_DIM (1 << 16) /* key_length, value_length, rope.dimension_count */
#define GGUF_MAX_Q_DIM (1 << 24)    /* head_count x key_length */

/* Reads `{arch}.suffix` as an int in [1, max].  Missing: *out = dflt, or an
 * error naming the key when dflt < 0 (required). */
static int get_pos_int(const keyctx *k, const char *suffix, int dflt, int max, int *out) {
    char key[160];
    akey(k, suffix, key, sizeof key);
    const tk_gguf_kv *kv = tk_gguf_find(k->g, key);
    if (!kv) {
        if (dflt < 0) return tk_err_set(k->err, "%s: missing required key '%s'", k->path, key);
        *out = dflt;
        return 0;
    }
    if (kv->type == TK_GGUF_ARRAY)
        return tk_err_set(k->err, "%s: key '%s' is an array (per-layer values are not supported)",
                          k->path, key);
    int64_t v;
    if (tk_gguf_get_int(k->g, key, &v))
        return tk_err_set(k->err, "%s: key '%s' must be an integer", k->path, key);
    if (v <= 0 || v > max)
        return tk_err_set(k->err, "%s: key '%s' has invalid value %lld (must be in [1, %d])", k->path, key,
                          (long long)v, max);
    *out = (int)v;
    return 0;
}

/* `{arch}.suffix` as a number; missing: *out = dflt, or an error if
 * required. */
static int get_num(const keyctx *k, const char *suffix, bool required, double dflt, double *out) {
    char key[160];
    akey(k, suffix, key, sizeof key);
    if (!tk_gguf_find(k->g, key)) {
        if (required) return tk_err_set(k->err, "%s: missing required key '%s'", k->path, key);
        *out = dflt;
        return 0;
    }
    if (tk_gguf_get_float(k->g, key, out))
        return tk_err_set(k->err, "%s: key '%s' must be a number", k->path, key);
    return 0;
}

static int read_rope_scaling(const keyctx *k, tk_hparams *hp) {
    char key[160];
    hp->rope_scaling = TK_ROPE_SCALING_NONE;
    hp->rope_factor = 1.0f;
    double v;
    char *type = tk_gguf_get_str(k->g, akey(k, "rope.scaling.type", key, sizeof key));
    if (type) {
        if (!strcasecmp(type, "linear")) {
            hp->rope_scaling = TK_ROPE_SCALING_LINEAR;
        } else if (!strcasecmp(type, "yarn")) {
            hp->rope_scaling = TK_ROPE_SCALING_YARN;
        } else if (strcasecmp(type, "none") != 0) {
            int rc = tk_err_set(k->err, "%s: rope scaling type '%.40s' (%s) is not supported", k->path,
                                type, key);
            free(type);
            return rc;
        }
        free(type);
    } else if (tk_gguf_find(k->g, key)) {
        return tk_err_set(k->err, "%s: key '%s' must be a string", k->path, key);
    } else if (tk_gguf_get_float(k->g, akey(k, "rope.scale_linear", key, sizeof key), &v) == 0) {
        /* older files: a bare linear factor */
        if (v != 1.0) hp->rope_scaling = TK_ROPE_SCALING_LINEAR;
        hp->rope_factor = (float)v;
    }
    if (hp->rope_scaling != TK_ROPE_SCALING_NONE) {
        if (get_num(k, "rope.scaling.factor", false, hp->rope_factor, &v)) return -1;
        if (!(v > 0.0))
            return tk_err_set(k->err, "%s: rope scaling factor %g must be positive", k->path, v);
        hp->rope_factor = (float)v;
    }
    if (get_pos_int(k, "rope.scaling.original_context_length", hp->ctx_len, GGUF_MAX_CTX,
                    &hp->rope_orig_ctx))
        return -1;
    if (hp->rope_scaling == TK_ROPE_SCALING_YARN) {
        /* llama.cpp's keys; its attn_factor multiplies the derived factor
         * (1 here: a file with another value is refused, not misread) */
        double fast, slow, af;
        if (get_num(k, "rope.scaling.yarn_beta_fast", false, 32.0, &fast) ||
            get_num(k, "rope.scaling.yarn_beta_slow", false, 1.0, &slow) ||
            get_num(k, "rope.scaling.attn_factor", false, 1.0, &af))
            return -1;
        if (af != 1.0)
            return tk_err_set(k->err, "%s: %s.rope.scaling.attn_factor %g is not supported (only 1)", k->path,
                              k->arch, af);
        hp->rope_yarn_beta_fast = (float)fast;
        hp->rope_yarn_beta_slow = (float)slow;
    }
    /* Llama 3 style frequency scaling is stored by llama.cpp as a per-dim
     * factor tensor (rope_freqs.weight), not as metadata; the model module
     * applies it when present.  Phi-3's LongRoPE likewise: two factor
     * tensors, and the cos/sin multiplier in rope.scaling.attn_factor. */
    if (tk_gguf_find_tensor(k->g, "rope_factors_long.weight")) {
        if (hp->rope_scaling != TK_ROPE_SCALING_NONE)
            return tk_err_set(k->err, "%s: rope_factors_long.weight with another rope scaling type", k->path);
        hp->rope_scaling = TK_ROPE_SCALING_LONGROPE;
        if (get_num(k, "rope.scaling.attn_factor", false, 1.0, &v)) return -1;
        if (!(v > 0.0 && v < 1e6))
            return tk_err_set(k->err, "%s: %s.rope.scaling.attn_factor %g must be positive", k->path, k->arch, v);
        hp->rope_attn_factor = (float)v;
    }
    return 0;
}

/* `{arch}.suffix` as an integer >= 0; missing: *out = dflt, *given = false. */
static int get_nonneg_int(const keyctx *k, const char *suffix, int dflt, int *out, bool *given) {
    char key[160];
    akey(k, suffix, key, sizeof key);
    const tk_gguf_kv *kv = tk_gguf_find(k->g, key);
    *given = kv != NULL;
    if (!kv) {
        *out = dflt;
        return 0;
    }
    if (kv->type == TK_GGUF_ARRAY)
        return tk_err_set(k->err, "%s: key '%s' is an array (per-layer values are not supported)",
                          k->path, key);
    int64_t v;
    if (tk_gguf_get_int(k->g, key, &v))
        return tk_err_set(k->err, "%s: key '%s' must be an integer", k->path, key);
    if (v < 0 || v > INT_MAX)
        return tk_err_set(k->err, "%s: key '%s' has invalid value %lld", k->path, key, (long long)v);
    *out = (int)v;
    return 0;
}

/* Options of Gemma-style models, all optional: sliding-window attention
 * (window, layer pattern, RoPE base of the sliding layers), an explicit
 * attention scale and a final logit soft-cap.  Whether an architecture uses
 * them, and their defaults when a key is absent, is the architecture
 * table's business (model/arch.c). */
static int read_gemma_style(const keyctx *k, tk_hparams *hp) {
    bool given;
    double v;
    char key[160];
    if (get_nonneg_int(k, "attention.sliding_window", 0, &hp->swa_window, &given) ||
        get_nonneg_int(k, "attention.sliding_window_pattern", 0, &hp->swa_pattern, &hp->has_swa_pattern))
        return -1;
    if (get_num(k, "rope.freq_base_swa", false, 0.0, &v)) return -1;
    if (!(v > 0.0) && tk_gguf_find(k->g, akey(k, "rope.freq_base_swa", key, sizeof key)))
        return tk_err_set(k->err, "%s: rope.freq_base_swa %g must be positive", k->path, v);
    hp->rope_theta_swa = (float)v;
    if (get_num(k, "attention.scale", false, 0.0, &v)) return -1;
    if (!(v >= 0.0)) return tk_err_set(k->err, "%s: attention.scale %g must be positive", k->path, v);
    hp->attn_scale = (float)v;
    if (get_num(k, "final_logit_softcapping", false, 0.0, &v)) return -1;
    if (!(v >= 0.0))
        return tk_err_set(k->err, "%s: final_logit_softcapping %g must be positive", k->path, v);
    hp->final_softcap = (float)v;
    return 0;
}

/* Mixture-of-experts keys, all optional (absent: a dense model); their
 * consistency with each other and with the tensors is checked at bind
 * time (model/moe.c). */
static int read_moe(const keyctx *k, tk_hparams *hp) {
    bool given;
    if (get_nonneg_int(k, "expert_count", 0, &hp->n_expert, &given) ||
        get_nonneg_int(k, "expert_used_count", 0, &hp->n_expert_used, &given) ||
        get_nonneg_int(k, "expert_feed_forward_length", hp->ffn_dim, &hp->expert_ffn_dim, &given) ||
        get_nonneg_int(k, "expert_shared_feed_forward_length", 0, &hp->shexp_ffn_dim, &given))
        return -1;
    return 0;
}

static int read_hparams(const keyctx *k, const tk_gguf *g, tk_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    if (get_pos_int(k, "embedding_length", -1, GGUF_MAX_DIM, &hp->dim) ||
        get_pos_int(k, "block_count", -1, GGUF_MAX_LAYERS, &hp->n_layers) ||
        get_pos_int(k, "attention.head_count", -1, GGUF_MAX_HEADS, &hp->n_heads) ||
        get_pos_int(k, "attention.head_count_kv", hp->n_heads, hp->n_heads, &hp->n_kv_heads) ||
        get_pos_int(k, "feed_forward_length", -1, GGUF_MAX_FFN, &hp->ffn_dim) ||
        get_pos_int(k, "context_length", -1, GGUF_MAX_CTX, &hp->ctx_len))
        return -1;
    if (hp->n_heads % hp->n_kv_heads)
        return tk_err_set(k->err, "%s: head_count %d is not a multiple of head_count_kv %d", k->path,
                          hp->n_heads, hp->n_kv_heads);

    /* head_dim: explicit key length, else the rotary dimension (equal to the
     * head size for llama), else dim / heads. */
    int dflt = hp->dim % hp->n_heads == 0 ? hp->dim / hp->n_heads : -1;
    int rot;
    if (get_pos_int(k, "rope.dimension_count", dflt > 0 ? dflt : 0, GGUF_MAX_HEAD_DIM, &rot)) return -1;
    if (get_pos_int(k, "attention.key_length", rot, GGUF_MAX_HEAD_DIM, &hp->head_dim)) return -1;
    char rkey[160];
    /* a rotary dimension below the head size: partial rotary (Phi-4-mini) */
    if (tk_gguf_find(g, akey(k, "rope.dimension_count", rkey, sizeof rkey)) && rot != hp->head_dim) hp->rope_dim = rot;
    int v_len;
    if (get_pos_int(k, "attention.value_length", hp->head_dim, GGUF_MAX_HEAD_DIM, &v_len)) return -1;
    if (hp->head_dim > 0 && v_len != hp->head_dim)
        return tk_err_set(k->err, "%s: value_length %d differs from key_length %d (not supported)", k->path,
                          v_len, hp->head_dim);
    if (hp->head_dim <= 0)
        return tk_err_set(k->err,
                          "%s: cannot derive head size: embedding_length %d is not a multiple of "
                          "head_count %d and no key_length is given",
                          k->path, hp->dim, hp->n_heads);
    if ((long long)hp->n_heads * hp->head_dim > GGUF_MAX_Q_DIM)
        return tk_err_set(k->err, "%s: head_count x key_length = %lld is above %d", k->path,
                          (long long)hp->n_heads * hp->head_dim, GGUF_MAX_Q_DIM);

    double v;
    if (get_num(k, "attention.layer_norm_rms_epsilon", true, 0, &v)) return -1;
    if (!(v > 0.0 && v < 1.0))
        return tk_err_set(k->err, "%s: layer_norm_rms_epsilon %g is out of range", k->path, v);
    hp->norm_eps = (float)v;
    if (get_num(k, "rope.freq_base", false, 10000.0, &v)) return -1;
    if (!(v > 0.0)) return tk_err_set(k->err, "%s: rope.freq_base %g must be positive", k->path, v);
    hp->rope_theta = (float)v;
    if (read_rope_scaling(k, hp)) return -1;
    hp->rope_style = rope_style_for(k->arch);

    /* Vocabulary size: explicit key, else the token list, else the
     * embedding matrix's row count. */
    const tk_gguf_kv *tokens = tk_gguf_find(g, "tokenizer.ggml.tokens");
    const tk_tensor *embd = tk_gguf_find_tensor(g, "token_embd.weight");
    char key[160];
    if (tk_gguf_find(g, akey(k, "vocab_size", key, sizeof key))) {
        if (get_pos_int(k, "vocab_size", -1, GGUF_MAX_VOCAB, &hp->n_vocab)) return -1;
    } else if (tokens && tokens->type == TK_GGUF_ARRAY && tokens->arr_n > 0 &&
               tokens->arr_n <= GGUF_MAX_VOCAB) {
        hp->n_vocab = (int)tokens->arr_n;
    } else if (embd && embd->ndim >= 2 && embd->ne[1] <= GGUF_MAX_VOCAB) {
        hp->n_vocab = (int)embd->ne[1];
    } else {
        return tk_err_set(k->err,
                          "%s: cannot determine the vocabulary size (no '%s', no "
                          "tokenizer.ggml.tokens, no token_embd.weight)",
                          k->path, key);
    }
    hp->tied_output = tk_gguf_find_tensor(g, "output.weight") == NULL;
    if (read_moe(k, hp)) return -1;
    return read_gemma_style(k, hp);
}

int tk_gguf_source_open(const char *path, tk_source *src, tk_err *err) {
    memset(src, 0, sizeof *src);
    tk_gguf *g;
    if (tk_gguf_open(path, &g, err)) return -1;

    const size_t nt = tk_gguf_n_tensors(g);
    char *arch = NULL;
    tk_tensor *tensors = NULL;
    int n_copied = 0;
    if (nt == 0) {
        tk_err_set(err, "%s: GGUF file has no tensors (a vocab-only file?); cannot load it as a model",
                   path);
        goto fail;
    }
    if (nt > INT_MAX) {
        tk_err_set(err, "%s: too many tensors (%zu)", path, nt);
        goto fail;
    }
    arch = tk_gguf_get_str(g, "general.architecture");
    if (!arch) {
        tk_err_set(err, "%s: missing required key 'general.architecture'%s", path,
                   tk_gguf_find(g, "general.architecture") ? " (not a string)" : "");
        goto fail;
    }
    if (arch[0] == 0 || strlen(arch) >= sizeof src->arch || strchr(arch, '.')) {
        tk_err_set(err, "%s: invalid general.architecture '%.40s'", path, arch);
        goto fail;
    }
    snprintf(src->arch, sizeof src->arch, "%s", arch);
    char *name = tk_gguf_get_str(g, "general.name");
    if (name) {
        snprintf(src->name, sizeof src->name, "%s", name);
        free(name);
    }

    keyctx k = {g, path, src->arch, err};
    if (read_hparams(&k, g, &src->hp)) goto fail;

    tensors = calloc(nt, sizeof *tensors);
    if (!tensors) {
        tk_err_set(err, "%s: out of memory", path);
        goto fail;
    }
    for (size_t i = 0; i < nt; i++, n_copied++) {
        tensors[i] = *tk_gguf_tensor_at(g, i);
        tensors[i].name = strdup(tensors[i].name);
        if (!tensors[i].name) {
            tk_err_set(err, "%s: out of memory", path);
            goto fail;
        }
    }

    gguf_impl *impl = malloc(sizeof *impl);
    char *path_copy = strdup(path);
    /* a chat template that is not a string is no template */
    const tk_gguf_kv *ct = tk_gguf_find(g, "tokenizer.chat_template");
    bool has_tmpl = ct && ct->type == TK_GGUF_STRING;
    char *tmpl = has_tmpl ? tk_gguf_get_str(g, "tokenizer.chat_template") : NULL;
    if (!impl || !path_copy || (has_tmpl && !tmpl)) {
        free(impl);
        free(path_copy);
        free(tmpl);
        tk_err_set(err, "%s: out of memory", path);
        goto fail;
    }
    impl->g = g;
    impl->tensors = tensors;
    impl->n_tensors = (int)nt;
    impl->path = path_copy;
    impl->chat_template = tmpl;
    free(arch);
    src->format = TK_FORMAT_GGUF;
    src->path = path_copy;
    src->chat_template = tmpl;
    src->gen.temperature = -1.0f;
    src->gen.top_p = -1.0f;
    src->gen.top_k = -1;
    src->tensors = tensors;
    src->n_tensors = (int)nt;
    src->gguf = g;
    src->mapping = tk_gguf_mapping(g);
    src->impl = impl;
    src->impl_free = gguf_impl_free;
    if (tk_source_index_tensors(src, err)) {
        tk_source_close(src);
        return -1;
    }
    return 0;

fail:
    free_tensors(tensors, n_copied);
    free(arch);
    tk_gguf_close(g);
    memset(src, 0, sizeof *src);
    return -1;
}
