/* Hugging Face model directories: config.json + model.safetensors (or a
 * sharded model.safetensors.index.json) + optional generation_config.json.
 *
 * Llama-layout checkpoints (model_type "llama" or "mistral") are exposed
 * under GGUF tensor names; a Mistral config with a sliding_window gives the
 * "mistral" architecture (every layer slides), otherwise "llama".  HF stores a linear layer as [out, in] row-major,
 * which is exactly GGUF's ne[0] = in, ne[1] = out: the data is used in place
 * (BF16 stays BF16).  Q/K rows stay in HF order, so hp.rope_style is
 * TK_ROPE_HALVES.
 *
 * tokenizer_config.json is read here too, once: its chat_template becomes
 * src->chat_template and the parsed object is kept for the tokenizer loader
 * (src->hf_tok_config).  A config that cannot be read does not fail the
 * source: its error is kept in src->hf_tok_config_error for the loader that
 * needs the file (tokenizer.json; tokenizer.model uses it only for
 * add_bos_token and goes on without it).
 *
 * Ownership: everything the source points to (tensor array, tensor names,
 * path, chat template, parsed tokenizer config, the file mappings) belongs to
 * the impl and is released by impl_free.  The caller must not free any of it
 * itself. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <tokamak.h> /* tk_mapfile, tk_read_file */
#include "hf_experts.h"
#include "safetensors.h"
#include "source.h"

/* Small JSON files (config, index, generation and tokenizer config) larger
 * than this are rejected before reading. */
#define HF_MAX_JSON_BYTES ((long long)64 * 1024 * 1024)
#define HF_MAX_SHARD_NAME 255

typedef struct hf_impl {
    char *dir;
    tk_safetensors **shards;
    char **shard_names;
    int n_shards;
    tk_tensor *tensors;
    int n_tensors;
    json_t *tok_config;   /* tokenizer_config.json */
    tk_err tok_config_err;
    const char *tok_config_error; /* tok_config_err.msg when it could not be read */
    char *chat_template;
    tk_hf_experts *experts; /* owns the stacked expert tensors' data */
    float *rope_factors;    /* LongRoPE: long then short factors (rope_dim / 2 each), or NULL */
} hf_impl;

static void hf_impl_free(void *p) {
    hf_impl *im = p;
    if (!im) return;
    for (int i = 0; i < im->n_tensors; i++) free(im->tensors[i].name);
    free(im->tensors);
    for (int i = 0; i < im->n_shards; i++) {
        tk_safetensors_close(im->shards[i]);
        free(im->shard_names[i]);
    }
    free(im->shards);
    free(im->shard_names);
    free(im->dir);
    json_decref(im->tok_config);
    free(im->chat_template);
    tk_hf_experts_free(im->experts);
    free(im->rope_factors);
    free(im);
}

static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    bool slash = a > 0 && dir[a - 1] != '/';
    if (a > SIZE_MAX - b - 2) return NULL;
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    if (slash) p[a++] = '/';
    memcpy(p + a, name, b + 1);
    return p;
}

/* 1: regular file exists, 0: does not exist, -1: error (set). */
static int file_exists(const char *path, tk_err *err) {
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        return tk_err_set(err, "%s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) return tk_err_set(err, "%s: not a regular file", path);
    return 1;
}

/* Any JSON value, with jansson's decoding flags. */
static int read_json(const char *path, size_t flags, json_t **out, tk_err *err) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return tk_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return tk_err_set(err, "%s: not a regular file", path);
    if ((long long)st.st_size > HF_MAX_JSON_BYTES)
        return tk_err_set(err, "%s: file too large (%lld bytes)", path, (long long)st.st_size);
    char *buf;
    size_t len;
    if (tk_read_file(path, &buf, &len, err) != 0) return -1;
    json_error_t jerr;
    json_t *j = json_loadb(buf, len, flags, &jerr);
    free(buf);
    if (!j)
        return tk_err_set(err, "%s: invalid JSON: %s (line %d, column %d)", path, jerr.text,
                          jerr.line, jerr.column);
    *out = j;
    return 0;
}

static int load_json(const char *path, json_t **out, tk_err *err) {
    json_t *j;
    if (read_json(path, JSON_REJECT_DUPLICATES, &j, err) != 0) return -1;
    if (!json_is_object(j)) {
        json_decref(j);
        return tk_err_set(err, "%s: top level is not a JSON object", path);
    }
    *out = j;
    return 0;
}

int tk_hf_tokenizer_config_read(const char *path, json_t **out, tk_err *err) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    /* model_max_length is often 1e30 written as an integer: read integers
     * as reals; added tokens may hold "\u0000" */
    json_t *j;
    if (read_json(path, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &j, err) != 0) return -1;
    if (json_is_object(j))
        *out = j;
    else
        json_decref(j);
    return 0;
}

/* tokenizer_config.json's chat_template: a string, or a list of {name,
 * template} (the one named "default", else the first).  *out NULL: none,
 * or not in either form.  -1: out of memory. */
static int chat_template_of(const json_t *cfg, char **out) {
    *out = NULL;
    json_t *ct = json_object_get(cfg, "chat_template");
    const char *pick = json_is_string(ct) ? json_string_value(ct) : NULL;
    if (json_is_array(ct)) {
        size_t i;
        json_t *it;
        json_array_foreach(ct, i, it) {
            json_t *t = json_object_get(it, "template"), *name = json_object_get(it, "name");
            if (!json_is_string(t)) continue;
            if (!pick || (json_is_string(name) && !strcmp(json_string_value(name), "default")))
                pick = json_string_value(t);
        }
    }
    if (!pick) return 0;
    *out = strdup(pick);
    return *out ? 0 : -1;
}

/* Reads tokenizer_config.json into the impl; an unreadable one only
 * records its error (see the top of this file). */
static int read_tokenizer_config(hf_impl *im, tk_err *err) {
    char *path = path_join(im->dir, "tokenizer_config.json");
    if (!path) return tk_err_set(err, "%s: out of memory", im->dir);
    if (tk_hf_tokenizer_config_read(path, &im->tok_config, &im->tok_config_err) != 0)
        im->tok_config_error = im->tok_config_err.msg;
    free(path);
    if (im->tok_config && chat_template_of(im->tok_config, &im->chat_template) != 0)
        return tk_err_set(err, "%s: out of memory", im->dir);
    return 0;
}

/* ---- config.json helpers; a JSON null counts as absent ---- */

static json_t *cfg_get(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return (v && json_is_null(v)) ? NULL : v;
}

static int cfg_int(const char *path, json_t *o, const char *key, bool required, long long def,
                   long long lo, long long hi, int *out, tk_err *err) {
    json_t *v = cfg_get(o, key);
    if (!v) {
        if (required) return tk_err_set(err, "%s: missing '%s'", path, key);
        *out = (int)def;
        return 0;
    }
    if (!json_is_integer(v)) return tk_err_set(err, "%s: '%s' must be an integer", path, key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return tk_err_set(err, "%s: '%s' = %lld is out of range [%lld, %lld]", path, key, x, lo, hi);
    *out = (int)x;
    return 0;
}

/* Number in (lo, hi]. */
static int cfg_float(const char *path, json_t *o, const char *key, bool required, double def,
                     double lo, double hi, float *out, tk_err *err) {
    json_t *v = cfg_get(o, key);
    if (!v) {
        if (required) return tk_err_set(err, "%s: missing '%s'", path, key);
        *out = (float)def;
        return 0;
    }
    if (!json_is_number(v)) return tk_err_set(err, "%s: '%s' must be a number", path, key);
    double x = json_number_value(v);
    if (!isfinite(x) || !(x > lo && x <= hi))
        return tk_err_set(err, "%s: '%s' = %g is out of range (%g, %g]", path, key, x, lo, hi);
    *out = (float)x;
    return 0;
}

/* Supported checkpoints: config.json's model_type, its architectures
 * class, and the tokamak architecture it loads as ("mistral" becomes
 * "llama" without a sliding window, see parse_config). */
static const struct {
    const char *model_type, *class_name, *arch;
    int norm_topk; /* MoE: the norm_topk_prob the architecture implements (-1: not read) */
} hf_archs[] = {
    {"llama", "LlamaForCausalLM", "llama", -1},
    {"mistral", "MistralForCausalLM", "mistral", -1},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", -1},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", -1},
    /* Phi-3 / 3.5 / 4-mini: fused qkv_proj and gate_up_proj kept fused
     * under llama.cpp's names (attn_qkv, ffn_up) */
    {"phi3", "Phi3ForCausalLM", "phi3", -1},
    /* Mixtral: Llama with experts (tk_arch_for picks the MoE entry) */
    {"mixtral", "MixtralForCausalLM", "llama", -1},
    {"qwen2_moe", "Qwen2MoeForCausalLM", "qwen2moe", 0},
    {"qwen3_moe", "Qwen3MoeForCausalLM", "qwen3moe", 1},
    {"olmoe", "OlmoeForCausalLM", "olmoe", 0},
};
#define N_HF_ARCHS (sizeof hf_archs / sizeof hf_archs[0])

/* The supported model_types (or classes), comma-separated into buf (cut to fit). */
static void hf_arch_list(char *buf, size_t n, bool classes) {
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < N_HF_ARCHS && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "",
                                classes ? hf_archs[i].class_name : hf_archs[i].model_type);
}

/* The architecture, from model_type or else the first supported entry of
 * 'architectures': *entry indexes hf_archs. */
static int parse_arch(const char *path, json_t *cfg, size_t *entry, tk_err *err) {
    json_t *mt = cfg_get(cfg, "model_type");
    json_t *ar = cfg_get(cfg, "architectures");
    *entry = N_HF_ARCHS;
    if (mt) {
        if (!json_is_string(mt)) return tk_err_set(err, "%s: 'model_type' must be a string", path);
        const char *s = json_string_value(mt);
        for (size_t i = 0; i < N_HF_ARCHS; i++)
            if (!strcmp(s, hf_archs[i].model_type)) *entry = i;
        if (*entry == N_HF_ARCHS) {
            char types[384];
            hf_arch_list(types, sizeof types, false);
            return tk_err_set(err, "%s: unsupported model_type '%.64s' (supported: %s)", path, s, types);
        }
        return 0;
    }
    if (!ar) return tk_err_set(err, "%s: missing 'model_type'", path);
    if (!json_is_array(ar)) return tk_err_set(err, "%s: 'architectures' must be an array", path);
    size_t i;
    json_t *a;
    json_array_foreach(ar, i, a) {
        if (!json_is_string(a)) return tk_err_set(err, "%s: 'architectures' must hold strings", path);
        for (size_t j = 0; j < N_HF_ARCHS && *entry == N_HF_ARCHS; j++)
            if (!strcmp(json_string_value(a), hf_archs[j].class_name)) *entry = j;
    }
    if (*entry == N_HF_ARCHS) {
        char classes[512];
        hf_arch_list(classes, sizeof classes, true);
        return tk_err_set(err, "%s: no supported entry in 'architectures' (%s)", path, classes);
    }
    return 0;
}

/* LongRoPE's per-frequency list `key` of n positive numbers into out. */
static int cfg_factors(const char *where, json_t *rs, const char *key, int n, float *out, tk_err *err) {
    json_t *a = cfg_get(rs, key);
    if (!a) return tk_err_set(err, "%s: missing '%s'", where, key);
    if (!json_is_array(a) || json_array_size(a) != (size_t)n)
        return tk_err_set(err, "%s: '%s' must be a list of %d numbers (one per rotated frequency)", where, key, n);
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        double x = json_is_number(v) ? json_number_value(v) : -1;
        if (!(x > 0) || !isfinite(x) || x > 1e9)
            return tk_err_set(err, "%s: '%s'[%d] must be a positive number", where, key, i);
        out[i] = (float)x;
    }
    return 0;
}

/* LongRoPE (Phi-3.5, Phi-4-mini) as transformers reads it: short and long
 * factor lists, the original context (the top-level key first, as
 * transformers prefers it for Phi-3), and the attention factor, given or
 * sqrt(1 + ln(s) / ln(original)) with s = 'factor' or else
 * max_position_embeddings / original (1 when s <= 1).  *factors: long then
 * short, malloc'd. */
static int parse_longrope(const char *where, json_t *cfg, json_t *rs, tk_hparams *hp, float **factors, tk_err *err) {
    hp->rope_scaling = TK_ROPE_SCALING_LONGROPE;
    const char *orig = "original_max_position_embeddings";
    if (cfg_int(where, cfg_get(cfg, orig) ? cfg : rs, orig, true, 0, 1, 1 << 26, &hp->rope_orig_ctx, err)) return -1;
    float factor, af;
    if (cfg_float(where, rs, "factor", false, (double)hp->ctx_len / hp->rope_orig_ctx, 0.0, 1e6, &factor, err) ||
        cfg_float(where, rs, "attention_factor", false, 0.0, 0.0, 1e6, &af, err))
        return -1;
    if (af == 0) af = factor <= 1 ? 1.0f : (float)sqrt(1 + log(factor) / log(hp->rope_orig_ctx));
    hp->rope_attn_factor = af;
    const int n = hp->rope_dim / 2;
    *factors = malloc(2 * (size_t)n * sizeof **factors);
    if (!*factors) return tk_err_set(err, "%s: out of memory", where);
    return cfg_factors(where, rs, "long_factor", n, *factors, err) ||
                   cfg_factors(where, rs, "short_factor", n, *factors + n, err)
               ? -1
               : 0;
}

/* RoPE base and scaling: transformers 5 writes them all in one
 * 'rope_parameters' object (rope_theta, rope_type and the scaling fields),
 * older configs a top-level 'rope_theta' and a 'rope_scaling' object.
 * partial_rotary_factor (top level or in rope_parameters) sets rope_dim to
 * int(head_dim * factor), as transformers rounds it.  Partial rotary and
 * longrope only where transformers' model honours them (phi: Phi-3). */
static int parse_rope_scaling(const char *path, json_t *cfg, bool phi, tk_hparams *hp, float **factors, tk_err *err) {
    hp->rope_scaling = TK_ROPE_SCALING_NONE;
    hp->rope_factor = 1.0f;
    hp->rope_low_freq_factor = 0.0f;
    hp->rope_high_freq_factor = 0.0f;
    hp->rope_orig_ctx = 0;
    const char *key = "rope_parameters";
    json_t *rs = cfg_get(cfg, key);
    float prf;
    if (cfg_float(path, cfg, "partial_rotary_factor", false, 1.0, 0.0, 1.0, &prf, err) ||
        (json_is_object(rs) && cfg_float(path, rs, "partial_rotary_factor", false, prf, 0.0, 1.0, &prf, err)))
        return -1;
    if (prf != 1.0f && !phi)
        return tk_err_set(err, "%s: 'partial_rotary_factor' %g is not supported for this model_type (only Phi-3's)",
                          path, prf);
    hp->rope_dim = (int)((double)hp->head_dim * prf);
    if (hp->rope_dim < 2 || hp->rope_dim % 2 != 0)
        return tk_err_set(err, "%s: 'partial_rotary_factor' %g gives %d rotated dimensions of head_dim %d (must be "
                          "even and at least 2)", path, prf, hp->rope_dim, hp->head_dim);
    if (rs) {
        if (!json_is_object(rs)) return tk_err_set(err, "%s: 'rope_parameters' must be an object or null", path);
        char where[600];
        snprintf(where, sizeof where, "%s: rope_parameters", path);
        if (cfg_float(where, rs, "rope_theta", !cfg_get(cfg, "rope_theta"), hp->rope_theta, 0.0, 1e12,
                      &hp->rope_theta, err))
            return -1;
    } else {
        key = "rope_scaling";
        rs = cfg_get(cfg, key);
    }
    if (!rs) return 0;
    if (!json_is_object(rs)) return tk_err_set(err, "%s: '%s' must be an object or null", path, key);
    json_t *ty = cfg_get(rs, "rope_type");
    if (!ty) ty = cfg_get(rs, "type");
    if (!ty) return tk_err_set(err, "%s: '%s' has no 'rope_type' or 'type'", path, key);
    if (!json_is_string(ty)) return tk_err_set(err, "%s: %s type must be a string", path, key);
    const char *t = json_string_value(ty);
    char where[600];
    snprintf(where, sizeof where, "%s: %s", path, key);
    if (strcmp(t, "default") == 0) return 0;
    if (strcmp(t, "linear") == 0) {
        hp->rope_scaling = TK_ROPE_SCALING_LINEAR;
        return cfg_float(where, rs, "factor", true, 0, 0.0, 1e6, &hp->rope_factor, err);
    }
    if (strcmp(t, "llama3") == 0) {
        hp->rope_scaling = TK_ROPE_SCALING_LLAMA3;
        if (cfg_float(where, rs, "factor", true, 0, 0.0, 1e6, &hp->rope_factor, err) ||
            cfg_float(where, rs, "low_freq_factor", true, 0, 0.0, 1e6, &hp->rope_low_freq_factor, err) ||
            cfg_float(where, rs, "high_freq_factor", true, 0, 0.0, 1e6, &hp->rope_high_freq_factor, err) ||
            cfg_int(where, rs, "original_max_position_embeddings", true, 0, 1, 1 << 26,
                    &hp->rope_orig_ctx, err))
            return -1;
        if (!(hp->rope_high_freq_factor > hp->rope_low_freq_factor))
            return tk_err_set(err, "%s: high_freq_factor must exceed low_freq_factor", where);
        return 0;
    }
    if (strcmp(t, "yarn") == 0) {
        hp->rope_scaling = TK_ROPE_SCALING_YARN;
        json_t *tr = cfg_get(rs, "truncate");
        if (tr && !json_is_true(tr))
            return tk_err_set(err, "%s: 'truncate' other than true is not supported", where);
        if (cfg_get(rs, "mscale") || cfg_get(rs, "mscale_all_dim"))
            return tk_err_set(err, "%s: 'mscale' / 'mscale_all_dim' are not supported", where);
        return cfg_float(where, rs, "factor", true, 0, 0.0, 1e6, &hp->rope_factor, err) ||
                       cfg_int(where, rs, "original_max_position_embeddings", true, 0, 1, 1 << 26,
                               &hp->rope_orig_ctx, err) ||
                       cfg_float(where, rs, "beta_fast", false, 32.0, 0.0, 1e6, &hp->rope_yarn_beta_fast, err) ||
                       cfg_float(where, rs, "beta_slow", false, 1.0, 0.0, 1e6, &hp->rope_yarn_beta_slow, err) ||
                       cfg_float(where, rs, "attention_factor", false, 0.0, 0.0, 1e6, &hp->rope_attn_factor, err)
                   ? -1
                   : 0;
    }
    if (strcmp(t, "longrope") == 0 && phi) return parse_longrope(where, cfg, rs, hp, factors, err);
    return tk_err_set(err, "%s: unsupported %s.rope_type '%.64s' (supported: default, linear, llama3, yarn; longrope "
                      "for phi3)", path, key, t);
}

/* Mistral's sliding_window: an integer >= 1, or null / absent (none). */
static int parse_sliding_window(const char *path, json_t *cfg, tk_hparams *hp, tk_err *err) {
    json_t *v = cfg_get(cfg, "sliding_window");
    hp->swa_window = 0;
    if (!v || json_is_null(v)) return 0;
    return cfg_int(path, cfg, "sliding_window", false, 0, 1, INT_MAX, &hp->swa_window, err);
}

/* Mixture-of-experts keys (Mixtral: num_local_experts; Qwen-MoE:
 * num_experts, moe_intermediate_size, shared_expert_intermediate_size);
 * none: a dense model.  Consistency is checked when the model binds. */
static int parse_moe(const char *path, json_t *cfg, tk_hparams *hp, tk_err *err) {
    const char *count = cfg_get(cfg, "num_local_experts") ? "num_local_experts" : "num_experts";
    if (cfg_int(path, cfg, count, false, 0, 0, 4096, &hp->n_expert, err)) return -1;
    if (hp->n_expert == 0) return 0;
    return cfg_int(path, cfg, "num_experts_per_tok", true, 0, 0, 4096, &hp->n_expert_used, err) ||
                   cfg_int(path, cfg, "moe_intermediate_size", false, hp->ffn_dim, 1, 1 << 24, &hp->expert_ffn_dim,
                           err) ||
                   cfg_int(path, cfg, "shared_expert_intermediate_size", false, 0, 0, 1 << 24, &hp->shexp_ffn_dim,
                           err)
               ? -1
               : 0;
}

/* Qwen-MoE / OLMoE options tokamak's MoE layer does not have: every layer
 * routed (decoder_sparse_step 1, no mlp_only_layers), the architecture's
 * own top-k renormalization, no q/k/v clipping. */
static int check_moe_options(const char *path, json_t *cfg, int norm_topk, tk_err *err) {
    int step;
    if (cfg_int(path, cfg, "decoder_sparse_step", false, 1, 0, INT_MAX, &step, err)) return -1;
    if (step != 1) return tk_err_set(err, "%s: 'decoder_sparse_step' %d is not supported (only 1)", path, step);
    json_t *mol = cfg_get(cfg, "mlp_only_layers");
    if (mol && (!json_is_array(mol) || json_array_size(mol) != 0))
        return tk_err_set(err, "%s: 'mlp_only_layers' must be empty (dense layers among routed ones are not "
                          "supported)", path);
    if (cfg_get(cfg, "clip_qkv")) return tk_err_set(err, "%s: 'clip_qkv' is not supported", path);
    json_t *nt = cfg_get(cfg, "norm_topk_prob");
    if (nt && (!json_is_boolean(nt) || json_is_true(nt) != (norm_topk == 1)))
        return tk_err_set(err, "%s: 'norm_topk_prob' must be %s for this architecture", path,
                          norm_topk ? "true" : "false");
    return 0;
}

static int parse_config(const char *dir, tk_hparams *hp, bool *tie, const char **arch, float **rope_factors,
                        tk_err *err) {
    char *path = path_join(dir, "config.json");
    if (!path) return tk_err_set(err, "%s: out of memory", dir);
    json_t *cfg = NULL;
    int rc = -1;
    size_t entry;
    if (load_json(path, &cfg, err) != 0) goto done;
    if (parse_arch(path, cfg, &entry, err) != 0) goto done;
    *arch = hf_archs[entry].arch;

    memset(hp, 0, sizeof *hp);
    if (cfg_int(path, cfg, "hidden_size", true, 0, 1, 1 << 20, &hp->dim, err) ||
        cfg_int(path, cfg, "num_hidden_layers", true, 0, 1, 1 << 16, &hp->n_layers, err) ||
        cfg_int(path, cfg, "num_attention_heads", true, 0, 1, 1 << 16, &hp->n_heads, err) ||
        cfg_int(path, cfg, "num_key_value_heads", false, hp->n_heads, 1, hp->n_heads,
                &hp->n_kv_heads, err) ||
        cfg_int(path, cfg, "intermediate_size", true, 0, 1, 1 << 24, &hp->ffn_dim, err) ||
        cfg_int(path, cfg, "vocab_size", true, 0, 1, 1 << 26, &hp->n_vocab, err) ||
        cfg_int(path, cfg, "max_position_embeddings", false, 2048, 1, 1 << 26, &hp->ctx_len, err) ||
        cfg_float(path, cfg, "rms_norm_eps", false, 1e-6, 0.0, 1.0, &hp->norm_eps, err) ||
        cfg_float(path, cfg, "rope_theta", false, 10000.0, 0.0, 1e12, &hp->rope_theta, err))
        goto done;
    if (hp->n_heads % hp->n_kv_heads != 0) {
        tk_err_set(err, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                   path, hp->n_heads, hp->n_kv_heads);
        goto done;
    }
    if (!cfg_get(cfg, "head_dim") && hp->dim % hp->n_heads != 0) {
        tk_err_set(err, "%s: hidden_size %d is not a multiple of num_attention_heads %d (and no 'head_dim')",
                   path, hp->dim, hp->n_heads);
        goto done;
    }
    if (cfg_int(path, cfg, "head_dim", false, hp->dim / hp->n_heads, 1, 1 << 16, &hp->head_dim, err))
        goto done;
    if (hp->head_dim % 2 != 0) {
        tk_err_set(err, "%s: head_dim %d is odd (RoPE needs pairs)", path, hp->head_dim);
        goto done;
    }
    if ((long long)hp->n_heads * hp->head_dim > (1 << 24)) {
        tk_err_set(err, "%s: num_attention_heads x head_dim = %lld is absurd", path,
                   (long long)hp->n_heads * hp->head_dim);
        goto done;
    }
    if (parse_rope_scaling(path, cfg, !strcmp(*arch, "phi3"), hp, rope_factors, err) != 0) goto done;
    if (parse_moe(path, cfg, hp, err) != 0) goto done;
    if (hf_archs[entry].norm_topk >= 0 && check_moe_options(path, cfg, hf_archs[entry].norm_topk, err)) goto done;
    hp->rope_style = TK_ROPE_HALVES;
    /* A Mistral checkpoint with a window becomes the "mistral" architecture
     * (every layer slides); without one it is plain Llama.  Phi-3 slides
     * every layer too, in its own architecture. */
    bool mistral = !strcmp(*arch, "mistral");
    if ((mistral || !strcmp(*arch, "phi3")) && parse_sliding_window(path, cfg, hp, err) != 0) goto done;
    if (mistral && hp->swa_window == 0) *arch = "llama";
    json_t *usw = cfg_get(cfg, "use_sliding_window");
    if (!strncmp(*arch, "qwen", 4) && usw && !json_is_false(usw)) {
        tk_err_set(err, "%s: 'use_sliding_window' is not supported for %s", path, *arch);
        goto done;
    }

    json_t *tw = cfg_get(cfg, "tie_word_embeddings");
    *tie = false;
    if (tw) {
        if (!json_is_boolean(tw)) {
            tk_err_set(err, "%s: 'tie_word_embeddings' must be a boolean", path);
            goto done;
        }
        *tie = json_is_true(tw);
    }
    rc = 0;
done:
    if (cfg) json_decref(cfg);
    free(path);
    return rc;
}

static int parse_generation_config(const char *dir, int n_vocab, tk_gen_defaults *g, tk_err *err) {
    memset(g, 0, sizeof *g);
    g->temperature = -1.0f;
    g->top_p = -1.0f;
    g->top_k = -1;
    char *path = path_join(dir, "generation_config.json");
    if (!path) return tk_err_set(err, "%s: out of memory", dir);
    json_t *j = NULL;
    int rc = -1;
    int ex = file_exists(path, err);
    if (ex < 0) goto done;
    if (ex == 0) {
        rc = 0;
        goto done;
    }
    if (load_json(path, &j, err) != 0) goto done;

    json_t *eos = cfg_get(j, "eos_token_id");
    if (eos) {
        size_t n = 1;
        if (json_is_array(eos)) {
            n = json_array_size(eos);
            if (n > sizeof g->eos_ids / sizeof g->eos_ids[0]) {
                tk_err_set(err, "%s: too many eos_token_id entries (%zu, at most %zu)", path, n,
                           sizeof g->eos_ids / sizeof g->eos_ids[0]);
                goto done;
            }
        }
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_is_array(eos) ? json_array_get(eos, i) : eos;
            if (!json_is_integer(e)) {
                tk_err_set(err, "%s: 'eos_token_id' must be an integer or a list of integers", path);
                goto done;
            }
            long long id = json_integer_value(e);
            if (id < 0 || id >= n_vocab) {
                tk_err_set(err, "%s: eos_token_id %lld is outside the vocabulary (%d)", path, id,
                           n_vocab);
                goto done;
            }
            g->eos_ids[g->n_eos_ids++] = (int)id;
        }
    }
    json_t *v = cfg_get(j, "temperature");
    if (v) {
        double x = json_is_number(v) ? json_number_value(v) : -1.0;
        if (!json_is_number(v) || !isfinite(x) || x < 0 || x > 1e6) {
            tk_err_set(err, "%s: 'temperature' must be a number >= 0", path);
            goto done;
        }
        g->temperature = (float)x;
    }
    v = cfg_get(j, "top_p");
    if (v) {
        double x = json_is_number(v) ? json_number_value(v) : -1.0;
        if (!json_is_number(v) || !isfinite(x) || x < 0 || x > 1) {
            tk_err_set(err, "%s: 'top_p' must be a number in [0, 1]", path);
            goto done;
        }
        g->top_p = (float)x;
    }
    v = cfg_get(j, "top_k");
    if (v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT_MAX) {
            tk_err_set(err, "%s: 'top_k' must be a non-negative integer", path);
            goto done;
        }
        g->top_k = (int)json_integer_value(v);
    }
    rc = 0;
done:
    if (j) json_decref(j);
    free(path);
    return rc;
}

/* ---- tensor names and shapes ---- */

typedef enum hf_kind {
    K_EMBD, K_OUTPUT, K_NORM, K_Q, K_K, K_V, K_O, K_GATE, K_UP, K_DOWN,
    K_QB, K_KB,       /* q bias [q_dim]; k/v bias [kv_dim] */
    K_QNORM, K_KNORM, /* q/k RMSNorm: per head [head_dim] (Qwen3), whole projection (OLMoE) */
    K_QKV, K_GATE_UP, /* Phi-3's fused projections (the model splits them) */
    K_ROUTER,         /* the experts' router [n_expert, dim] */
    K_SHEXP_GATE,     /* Qwen2-MoE's shared-expert gate [1, dim] */
    K_SHEXP_IN,       /* its gate / up projections [shexp_ffn, dim] */
    K_SHEXP_DOWN      /* its down projection [dim, shexp_ffn] */
} hf_kind;

/* Tensors the source adds beyond the checkpoint's (LongRoPE's two factor sets). */
#define HF_EXTRA_TENSORS 2

static const struct {
    const char *hf, *gguf;
    hf_kind kind;
} layer_map[] = {
    {"input_layernorm.weight", "attn_norm.weight", K_NORM},
    {"post_attention_layernorm.weight", "ffn_norm.weight", K_NORM},
    {"self_attn.q_proj.weight", "attn_q.weight", K_Q},
    {"self_attn.k_proj.weight", "attn_k.weight", K_K},
    {"self_attn.v_proj.weight", "attn_v.weight", K_V},
    {"self_attn.o_proj.weight", "attn_output.weight", K_O},
    {"self_attn.q_proj.bias", "attn_q.bias", K_QB},
    {"self_attn.k_proj.bias", "attn_k.bias", K_KB},
    {"self_attn.v_proj.bias", "attn_v.bias", K_KB},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", K_QNORM},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight", K_QKV},
    {"mlp.gate_up_proj.weight", "ffn_up.weight", K_GATE_UP}, /* llama.cpp's fused ffn_up: rows gate | up */
    {"self_attn.k_norm.weight", "attn_k_norm.weight", K_KNORM},
    {"mlp.gate_proj.weight", "ffn_gate.weight", K_GATE},
    {"mlp.up_proj.weight", "ffn_up.weight", K_UP},
    {"mlp.down_proj.weight", "ffn_down.weight", K_DOWN},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight", K_ROUTER}, /* Mixtral */
    {"mlp.gate.weight", "ffn_gate_inp.weight", K_ROUTER},               /* Qwen-MoE, OLMoE */
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", K_SHEXP_GATE},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", K_SHEXP_IN},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", K_SHEXP_IN},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", K_SHEXP_DOWN},
};

/* 1: mapped into out/kind; 0: not a tensor we use; -1: error (set). */
static int map_name(const char *hf, int n_layers, char *out, size_t cap, hf_kind *kind, tk_err *err) {
    if (strcmp(hf, "model.embed_tokens.weight") == 0) {
        snprintf(out, cap, "token_embd.weight");
        *kind = K_EMBD;
        return 1;
    }
    if (strcmp(hf, "model.norm.weight") == 0) {
        snprintf(out, cap, "output_norm.weight");
        *kind = K_NORM;
        return 1;
    }
    if (strcmp(hf, "lm_head.weight") == 0) {
        snprintf(out, cap, "output.weight");
        *kind = K_OUTPUT;
        return 1;
    }
    static const char prefix[] = "model.layers.";
    size_t pl = sizeof prefix - 1;
    if (strncmp(hf, prefix, pl) != 0) return 0;
    const char *p = hf + pl;
    size_t nd = 0;
    while (p[nd] >= '0' && p[nd] <= '9') nd++;
    if (nd == 0 || p[nd] != '.') return 0;
    if (nd > 9 || (nd > 1 && p[0] == '0'))
        return tk_err_set(err, "tensor '%.200s': malformed layer index", hf);
    long layer = 0;
    for (size_t i = 0; i < nd; i++) layer = layer * 10 + (p[i] - '0');
    const char *suffix = p + nd + 1;
    for (size_t i = 0; i < sizeof layer_map / sizeof layer_map[0]; i++) {
        if (strcmp(suffix, layer_map[i].hf) != 0) continue;
        if (layer >= n_layers)
            return tk_err_set(err, "tensor '%.200s': layer %ld but num_hidden_layers is %d", hf,
                              layer, n_layers);
        snprintf(out, cap, "blk.%ld.%s", layer, layer_map[i].gguf);
        *kind = layer_map[i].kind;
        return 1;
    }
    return 0;
}

static void fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Architectures whose q/k norms cover the whole projection, not a head. */
static bool full_qk_norm(const char *arch) { return !strcmp(arch, "olmoe"); }

static int check_shape(const char *file, const tk_st_tensor *t, hf_kind kind, const tk_hparams *hp, const char *arch,
                       tk_err *err) {
    int64_t q = (int64_t)hp->n_heads * hp->head_dim;
    int64_t kv = (int64_t)hp->n_kv_heads * hp->head_dim;
    int64_t exp[2];
    int nd = 2;
    switch (kind) {
    case K_EMBD:
    case K_OUTPUT: exp[0] = hp->n_vocab; exp[1] = hp->dim; break;
    case K_NORM: exp[0] = hp->dim; nd = 1; break;
    case K_Q: exp[0] = q; exp[1] = hp->dim; break;
    case K_K:
    case K_V: exp[0] = kv; exp[1] = hp->dim; break;
    case K_O: exp[0] = hp->dim; exp[1] = q; break;
    case K_GATE:
    case K_UP: exp[0] = hp->ffn_dim; exp[1] = hp->dim; break;
    case K_DOWN: exp[0] = hp->dim; exp[1] = hp->ffn_dim; break;
    case K_QB: exp[0] = q; nd = 1; break;
    case K_KB: exp[0] = kv; nd = 1; break;
    case K_QNORM: exp[0] = full_qk_norm(arch) ? q : hp->head_dim; nd = 1; break;
    case K_KNORM: exp[0] = full_qk_norm(arch) ? kv : hp->head_dim; nd = 1; break;
    case K_QKV: exp[0] = q + 2 * kv; exp[1] = hp->dim; break;
    case K_GATE_UP: exp[0] = 2 * (int64_t)hp->ffn_dim; exp[1] = hp->dim; break;
    case K_ROUTER: exp[0] = hp->n_expert; exp[1] = hp->dim; break;
    case K_SHEXP_GATE: exp[0] = 1; exp[1] = hp->dim; break;
    case K_SHEXP_IN: exp[0] = hp->shexp_ffn_dim; exp[1] = hp->dim; break;
    case K_SHEXP_DOWN: exp[0] = hp->dim; exp[1] = hp->shexp_ffn_dim; break;
    default: return tk_err_set(err, "internal error: bad tensor kind");
    }
    bool ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == exp[i];
    if (ok) return 0;
    char got[128], want[64];
    fmt_shape(got, sizeof got, t->ndim, t->shape);
    fmt_shape(want, sizeof want, nd, exp);
    return tk_err_set(err, "%s: tensor '%.200s' has shape %s but config.json implies %s", file,
                      t->name, got, want);
}

typedef struct hf_load {
    hf_impl *im;
    const tk_hparams *hp;
    const char *arch;
    bool tie;
    bool have_output;
    int cap;  /* capacity of im->tensors */
} hf_load;

/* The next tensor slot, named `name`; NULL with err set when full or out of memory. */
static tk_tensor *new_tensor(hf_load *L, const char *file, const char *name, tk_err *err) {
    if (L->im->n_tensors >= L->cap) {
        tk_err_set(err, "%s: internal error: tensor overflow", file);
        return NULL;
    }
    tk_tensor *d = &L->im->tensors[L->im->n_tensors];
    memset(d, 0, sizeof *d);
    d->name = strdup(name);
    if (!d->name) {
        tk_err_set(err, "%s: out of memory", file);
        return NULL;
    }
    L->im->n_tensors++;
    return d;
}

static bool arch_is(const char *arch, const char *a, const char *b) { return !strcmp(arch, a) || !strcmp(arch, b); }

static int add_tensor(hf_load *L, const char *file, const tk_st_tensor *t, tk_err *err) {
    char gname[96];
    hf_kind kind = K_EMBD;
    int x = tk_hf_experts_add(L->im->experts, file, t, err);
    if (x != 0) return x < 0 ? -1 : 0;
    int m = map_name(t->name, L->hp->n_layers, gname, sizeof gname, &kind, err);
    if (m < 0) return tk_err_wrap(err, "%s", file);
    if (m == 0) return 0;
    if (kind == K_OUTPUT && L->tie) return 0; /* tied: the head is the embedding */
    /* a tensor the architecture would not bind must not be dropped silently */
    if (((kind == K_QB || kind == K_KB) && !arch_is(L->arch, "qwen2", "qwen2moe")) ||
        ((kind == K_QNORM || kind == K_KNORM) && !arch_is(L->arch, "qwen3", "qwen3moe") && !full_qk_norm(L->arch)))
        return tk_err_set(err, "%s: tensor '%.200s' is not supported for architecture %s", file, t->name,
                          L->arch);
    if (check_shape(file, t, kind, L->hp, L->arch, err) != 0) return -1;
    tk_tensor *d = new_tensor(L, file, gname, err);
    if (!d) return -1;
    d->type = t->dtype;
    d->ndim = t->ndim;
    for (int i = 0; i < TK_MAX_DIMS; i++) d->ne[i] = 1;
    for (int i = 0; i < t->ndim; i++) d->ne[i] = t->shape[t->ndim - 1 - i];
    d->data = t->data;
    d->nbytes = t->nbytes;
    if (kind == K_OUTPUT) L->have_output = true;
    return 0;
}

/* LongRoPE's factor lists as the tensors GGUF files carry them
 * (llama.cpp's rope_factors_long / rope_factors_short, float32). */
static int add_rope_factors(hf_load *L, const char *dir, const float *factors, tk_err *err) {
    const char *names[2] = {"rope_factors_long.weight", "rope_factors_short.weight"};
    const int n = L->hp->rope_dim / 2;
    for (int i = 0; i < 2; i++) {
        tk_tensor *d = new_tensor(L, dir, names[i], err);
        if (!d) return -1;
        d->type = TK_F32;
        d->ndim = 1;
        for (int k = 0; k < TK_MAX_DIMS; k++) d->ne[k] = 1;
        d->ne[0] = n;
        d->data = factors + (size_t)i * n;
        d->nbytes = (size_t)n * sizeof(float);
    }
    return 0;
}

static int add_shard(hf_impl *im, const char *name, tk_safetensors **out, tk_err *err) {
    for (int i = 0; i < im->n_shards; i++)
        if (strcmp(im->shard_names[i], name) == 0) {
            *out = im->shards[i];
            return 0;
        }
    char *path = path_join(im->dir, name);
    char *copy = strdup(name);
    tk_safetensors **ns = realloc(im->shards, (size_t)(im->n_shards + 1) * sizeof *ns);
    if (ns) im->shards = ns;
    char **nn = realloc(im->shard_names, (size_t)(im->n_shards + 1) * sizeof *nn);
    if (nn) im->shard_names = nn;
    if (!path || !copy || !ns || !nn) {
        free(path);
        free(copy);
        return tk_err_set(err, "%s: out of memory", im->dir);
    }
    tk_safetensors *st;
    int rc = tk_safetensors_open(path, &st, err);
    free(path);
    if (rc != 0) {
        free(copy);
        return -1;
    }
    im->shards[im->n_shards] = st;
    im->shard_names[im->n_shards] = copy;
    im->n_shards++;
    *out = st;
    return 0;
}

static bool shard_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > HF_MAX_SHARD_NAME) return false;
    if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '/' || c == '\\' || c < 0x20) return false;
    }
    return true;
}

static int load_single(hf_load *L, tk_err *err) {
    tk_safetensors *st;
    if (add_shard(L->im, "model.safetensors", &st, err) != 0) return -1;
    int n = tk_safetensors_count(st);
    if (n > INT32_MAX - HF_EXTRA_TENSORS) return tk_err_set(err, "%s: too many tensors", tk_safetensors_path(st));
    L->im->tensors = calloc((size_t)n + HF_EXTRA_TENSORS, sizeof *L->im->tensors);
    if (!L->im->tensors) return tk_err_set(err, "%s: out of memory", tk_safetensors_path(st));
    L->cap = n + HF_EXTRA_TENSORS;
    for (int i = 0; i < n; i++)
        if (add_tensor(L, tk_safetensors_path(st), tk_safetensors_get(st, i), err) != 0) return -1;
    return 0;
}

static int load_sharded(hf_load *L, const char *index_path, tk_err *err) {
    json_t *idx = NULL;
    int rc = -1;
    if (load_json(index_path, &idx, err) != 0) return -1;
    json_t *wm = json_object_get(idx, "weight_map");
    if (!wm) {
        tk_err_set(err, "%s: missing 'weight_map'", index_path);
        goto done;
    }
    if (!json_is_object(wm)) {
        tk_err_set(err, "%s: 'weight_map' must be an object", index_path);
        goto done;
    }
    size_t n = json_object_size(wm);
    if (n > (size_t)INT32_MAX - HF_EXTRA_TENSORS) {
        tk_err_set(err, "%s: too many tensors", index_path);
        goto done;
    }
    L->im->tensors = calloc(n + HF_EXTRA_TENSORS, sizeof *L->im->tensors);
    if (!L->im->tensors) {
        tk_err_set(err, "%s: out of memory", index_path);
        goto done;
    }
    L->cap = (int)n + HF_EXTRA_TENSORS;
    const char *tname;
    json_t *fv;
    json_object_foreach(wm, tname, fv) {
        if (!json_is_string(fv)) {
            tk_err_set(err, "%s: weight_map entry '%.200s' is not a string", index_path, tname);
            goto done;
        }
        const char *fname = json_string_value(fv);
        if (!shard_name_ok(fname)) {
            tk_err_set(err, "%s: shard name '%.200s' for '%.200s' is not a plain file name in the directory",
                       index_path, fname, tname);
            goto done;
        }
        tk_safetensors *st;
        if (add_shard(L->im, fname, &st, err) != 0) {
            tk_err_wrap(err, "%s: shard '%.100s'", index_path, fname);
            goto done;
        }
        const tk_st_tensor *t = tk_safetensors_find(st, tname);
        if (!t) {
            tk_err_set(err, "%s: tensor '%.200s' is listed in weight_map but not present in its shard",
                       tk_safetensors_path(st), tname);
            goto done;
        }
        if (add_tensor(L, tk_safetensors_path(st), t, err) != 0) goto done;
    }
    rc = 0;
done:
    json_decref(idx);
    return rc;
}

static void dir_basename(const char *dir, char *out, size_t cap) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    size_t len = n - b;
    if (len >= cap) len = cap - 1;
    memcpy(out, dir + b, len);
    out[len] = 0;
}

int tk_hf_source_open(const char *dir, tk_source *src, tk_err *err) {
    memset(src, 0, sizeof *src);
    struct stat sb;
    if (stat(dir, &sb) != 0) return tk_err_set(err, "%s: cannot open: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return tk_err_set(err, "%s: not a directory", dir);

    hf_impl *im = calloc(1, sizeof *im);
    if (!im) return tk_err_set(err, "%s: out of memory", dir);
    im->dir = strdup(dir);
    if (!im->dir) {
        free(im);
        return tk_err_set(err, "%s: out of memory", dir);
    }

    tk_hparams hp;
    tk_gen_defaults gen;
    bool tie = false;
    char *index_path = NULL, *single_path = NULL;
    const char *arch = NULL;
    if (parse_config(dir, &hp, &tie, &arch, &im->rope_factors, err) != 0) goto fail;
    if (parse_generation_config(dir, hp.n_vocab, &gen, err) != 0) goto fail;
    if (read_tokenizer_config(im, err) != 0) goto fail;

    hf_load L = {.im = im, .hp = &hp, .arch = arch, .tie = tie};
    if (tk_hf_experts_new(&hp, &im->experts, err) != 0) goto fail;
    index_path = path_join(dir, "model.safetensors.index.json");
    single_path = path_join(dir, "model.safetensors");
    if (!index_path || !single_path) {
        tk_err_set(err, "%s: out of memory", dir);
        goto fail;
    }
    int has_index = file_exists(index_path, err);
    if (has_index < 0) goto fail;
    if (has_index) {
        if (load_sharded(&L, index_path, err) != 0) goto fail;
    } else {
        int has_single = file_exists(single_path, err);
        if (has_single < 0) goto fail;
        if (!has_single) {
            tk_err_set(err, "%s: no model.safetensors or model.safetensors.index.json", dir);
            goto fail;
        }
        if (load_single(&L, err) != 0) goto fail;
    }
    free(index_path);
    free(single_path);
    index_path = single_path = NULL;
    if (tk_hf_experts_stack(im->experts, im->tensors, &im->n_tensors, L.cap, err) != 0) {
        tk_err_wrap(err, "%s", dir);
        goto fail;
    }
    if (im->rope_factors && add_rope_factors(&L, dir, im->rope_factors, err) != 0) goto fail;

    hp.tied_output = tie || !L.have_output;
    src->format = TK_FORMAT_HF;
    snprintf(src->arch, sizeof src->arch, "%s", arch);
    dir_basename(dir, src->name, sizeof src->name);
    src->path = im->dir;
    src->hp = hp;
    src->gen = gen;
    src->chat_template = im->chat_template;
    src->tensors = im->tensors;
    src->n_tensors = im->n_tensors;
    src->impl = im;
    src->impl_free = hf_impl_free;
    src->hf_tok_config = im->tok_config;
    src->hf_tok_config_error = im->tok_config_error;
    if (tk_source_index_tensors(src, err)) {
        tk_source_close(src);
        return -1;
    }
    return 0;

fail:
    free(index_path);
    free(single_path);
    hf_impl_free(im);
    memset(src, 0, sizeof *src);
    return -1;
}
