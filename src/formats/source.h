/* A loaded model file of any format, reduced to what the engine needs:
 * an architecture name, hyper-parameters, and tensors under GGUF names
 * (token_embd.weight, blk.N.attn_q.weight, output_norm.weight, ...).
 *
 * Each format module fills one: GGUF (gguf_source.c), llama2.c checkpoints
 * (llama2c.c) and Hugging Face directories (hf.c).  The model module then
 * binds tensors by name using the architecture table. */
#ifndef TK_SOURCE_H
#define TK_SOURCE_H

#include <stdbool.h>

#include <tokamak.h> /* tk_gen_defaults */

#include "../util/err.h"
#include "tensor.h"

typedef enum tk_rope_style {
    TK_ROPE_ADJACENT = 0, /* rotate (x[2i], x[2i+1]): GGUF llama, llama2.c */
    TK_ROPE_HALVES = 1    /* rotate (x[i], x[i+d/2]): HF checkpoints, NeoX */
} tk_rope_style;

typedef enum tk_rope_scaling {
    TK_ROPE_SCALING_NONE = 0,
    TK_ROPE_SCALING_LINEAR = 1,
    TK_ROPE_SCALING_LLAMA3 = 2,
    TK_ROPE_SCALING_YARN = 3,
    /* Phi-3 LongRoPE: per-frequency divisors, one set for contexts up to
     * rope_orig_ctx and one beyond (tensors rope_factors_short/long.weight),
     * cos and sin multiplied by rope_attn_factor */
    TK_ROPE_SCALING_LONGROPE = 4
} tk_rope_scaling;

typedef struct tk_hparams {
    int n_vocab;
    int dim;          /* embedding / hidden size */
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;     /* usually dim / n_heads */
    int rope_dim;     /* leading dimensions of each head that RoPE rotates (partial rotary); 0: head_dim */
    int ffn_dim;
    int ctx_len;      /* trained context length */
    float norm_eps;
    float rope_theta;
    tk_rope_style rope_style;
    tk_rope_scaling rope_scaling;
    float rope_factor;            /* linear, llama3 and yarn */
    float rope_low_freq_factor;   /* llama3 */
    float rope_high_freq_factor;  /* llama3 */
    int rope_orig_ctx;            /* llama3, yarn, longrope: original max positions */
    float rope_yarn_beta_fast;    /* yarn: ramp bounds in rotations (HF defaults 32, 1) */
    float rope_yarn_beta_slow;
    float rope_attn_factor;       /* yarn: cos/sin multiplier, 0: 0.1 ln(factor) + 1; longrope: the multiplier (0: 1) */
    bool tied_output;             /* no output.weight: reuse token_embd */
    /* Sliding-window attention (0 / false / 0.0: not given; the
     * architecture table supplies defaults, see arch.h). */
    int swa_window;               /* a sliding layer sees the last swa_window positions; 0: none */
    bool has_swa_pattern;         /* swa_pattern was given by the file */
    int swa_pattern;              /* llama.cpp convention: layer l slides iff pattern == 0 or
                                     l % pattern < pattern - 1 (6: five local, one global) */
    float rope_theta_swa;         /* RoPE base of sliding layers; 0: the architecture's default */
    float attn_scale;             /* query scale; 0: 1/sqrt(head_dim) or the architecture's rule */
    float final_softcap;          /* logits = c * tanh(logits / c); 0: off */
    /* Mixture of experts (n_expert 0: a dense FFN).  Each token's FFN is the
     * weighted sum of n_expert_used of n_expert experts of expert_ffn_dim,
     * plus a shared expert of shexp_ffn_dim when that is > 0. */
    int n_expert;
    int n_expert_used;
    int expert_ffn_dim;
    int shexp_ffn_dim;
} tk_hparams;

typedef enum tk_source_format {
    TK_FORMAT_GGUF = 0,
    TK_FORMAT_LLAMA2C = 1,
    TK_FORMAT_HF = 2
} tk_source_format;

struct json_t;

typedef struct tk_source {
    tk_source_format format;
    char arch[32];        /* "llama" */
    char name[128];       /* general.name or directory name, may be empty */
    const char *path;     /* the file or directory opened */
    tk_hparams hp;
    tk_gen_defaults gen;  /* generation_config.json (HF); nothing given for other formats */
    char *chat_template;  /* GGUF tokenizer.chat_template or tokenizer_config.json's chat_template; NULL: none */
    tk_tensor *tensors;   /* owned array; names owned */
    int n_tensors;
    /* The tensors by name (then by position, so a repeated name finds its
     * first), for tk_source_find: a model's load looks up every role of every
     * layer, which by a linear scan is layers x roles x tensors string
     * compares, hours for a hostile file claiming 2^16 layers beside a
     * million tiny tensors.  Built by each opener (tk_source_index_tensors),
     * freed by tk_source_close. */
    const tk_tensor **by_name;
    /* A read-only file mapping (GGUF) holding tensor data, or NULL: pages
     * of it that a copy replaces may be dropped (tk_model_make_panels). */
    const tk_mapfile *mapping;
    /* Format-private state.  It owns everything the source points to
     * (path, chat template, tensor array and names, mappings, parsed
     * configs); impl_free releases it. */
    void *impl;
    void (*impl_free)(void *impl);
    /* What the tokenizer loaders read (tk_tokenizer_from_source); a
     * llama2.c checkpoint has only its vocabulary size, hp.n_vocab. */
    struct tk_gguf *gguf;           /* GGUF: the open file, with its tokenizer.ggml.* keys */
    struct json_t *hf_tok_config;   /* HF: tokenizer_config.json, NULL if absent (or unusable) */
    const char *hf_tok_config_error; /* HF: why tokenizer_config.json could not be read; NULL if it could */
} tk_source;

/* Detects the format: a directory is HF; a file starting with "GGUF" is
 * GGUF; anything else is tried as a llama2.c checkpoint. */
int tk_source_open(const char *path, tk_source *src, tk_err *err);
void tk_source_close(tk_source *src);
const tk_tensor *tk_source_find(const tk_source *src, const char *name);
/* Builds src->by_name once the opener has filled src->tensors; -1 (out of
 * memory) leaves the source for the opener to close. */
int tk_source_index_tensors(tk_source *src, tk_err *err);

/* Per-format openers (used by tk_source_open). */
int tk_gguf_source_open(const char *path, tk_source *src, tk_err *err);
int tk_llama2c_source_open(const char *path, tk_source *src, tk_err *err);
int tk_hf_source_open(const char *dir, tk_source *src, tk_err *err);

/* A Hugging Face tokenizer_config.json (the model directory's, or the one
 * beside a tokenizer.json).  *out gets the parsed object, or NULL when there
 * is no such regular file or its top level is not an object; -1 (err set)
 * when it cannot be read, is too large or is not valid JSON.  The caller
 * owns *out (json_decref). */
int tk_hf_tokenizer_config_read(const char *path, struct json_t **out, tk_err *err);

#endif
