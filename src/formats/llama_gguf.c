#include "llama_gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tk_permute_rows_to_adjacent(float *w, int n_heads, int head_dim, int64_t row_len) {
    size_t row_bytes = (size_t)row_len * sizeof(float);
    float *tmp = malloc(row_bytes * (size_t)head_dim);
    if (!tmp) return -1;
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *head = w + (size_t)h * head_dim * row_len;
        for (int i = 0; i < half; i++) {
            memcpy(tmp + (size_t)(2 * i) * row_len, head + (size_t)i * row_len, row_bytes);
            memcpy(tmp + (size_t)(2 * i + 1) * row_len, head + (size_t)(half + i) * row_len, row_bytes);
        }
        memcpy(head, tmp, row_bytes * (size_t)head_dim);
    }
    free(tmp);
    return 0;
}

const char *tk_gguf_out_arch(const tk_source *src) {
    static const char *const own[] = {"qwen2", "qwen3", "qwen2moe", "qwen3moe", "olmoe", "phi3"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (!strcmp(src->arch, own[i])) return src->arch;
    return "llama";
}

bool tk_needs_qk_permute(const tk_source *src, const char *name, int *n_heads) {
    /* Qwen GGUFs keep the halves order (llama.cpp rotates them NeoX-style) */
    if (src->hp.rope_style != TK_ROPE_HALVES || strcmp(tk_gguf_out_arch(src), "llama") != 0) return false;
    if (strstr(name, ".attn_q.weight")) {
        *n_heads = src->hp.n_heads;
        return true;
    }
    if (strstr(name, ".attn_k.weight")) {
        *n_heads = src->hp.n_kv_heads;
        return true;
    }
    return false;
}

int tk_source_tensor_f32(const tk_source *src, const tk_tensor *t, float **out, tk_err *err) {
    *out = NULL;
    const tk_dtype_info *info = tk_dtype_get(t->type);
    if (!info || !info->can_dequant) return tk_err_set(err, "tensor '%s' has an unsupported type", t->name);
    int64_t n = tk_tensor_nelems(t), row = t->ne[0], rows = n / row;
    size_t src_row = tk_dtype_row_bytes(t->type, row);
    if (!src_row || src_row * (size_t)rows > t->nbytes)
        return tk_err_set(err, "tensor '%s' data is shorter than its shape", t->name);
    float *f = malloc(sizeof(float) * (size_t)n);
    if (!f) return tk_err_set(err, "out of memory for tensor '%s'", t->name);
    for (int64_t r = 0; r < rows; r++)
        tk_dequant_row(t->type, (const unsigned char *)t->data + (size_t)r * src_row, f + r * row, row);
    int heads;
    if (tk_needs_qk_permute(src, t->name, &heads)) {
        if (rows != (int64_t)heads * src->hp.head_dim) {
            free(f);
            return tk_err_set(err, "tensor '%s' has %lld rows, expected %d heads x %d", t->name, (long long)rows,
                              heads, src->hp.head_dim);
        }
        if (tk_permute_rows_to_adjacent(f, heads, src->hp.head_dim, row)) {
            free(f);
            return tk_err_set(err, "out of memory for tensor '%s'", t->name);
        }
    }
    *out = f;
    return 0;
}

float *tk_llama3_rope_factors(const tk_hparams *hp) {
    int half = hp->head_dim / 2;
    float *f = malloc(sizeof(float) * (size_t)half);
    if (!f) return NULL;
    for (int i = 0; i < half; i++) {
        double freq = pow((double)hp->rope_theta, -2.0 * i / hp->head_dim);
        double wavelen = 2 * M_PI / freq;
        double low_wl = hp->rope_orig_ctx / hp->rope_low_freq_factor;
        double high_wl = hp->rope_orig_ctx / hp->rope_high_freq_factor;
        if (wavelen < high_wl) {
            f[i] = 1.0f;
        } else if (wavelen > low_wl) {
            f[i] = hp->rope_factor;
        } else {
            double smooth = (hp->rope_orig_ctx / wavelen - hp->rope_low_freq_factor) /
                            (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
            f[i] = (float)(1.0 / ((1 - smooth) / hp->rope_factor + smooth));
        }
    }
    return f;
}

/* "{arch}.suffix" into buf. */
static const char *key(char *buf, size_t cap, const char *arch, const char *suffix) {
    snprintf(buf, cap, "%s.%s", arch, suffix);
    return buf;
}

int tk_gguf_set_llama_meta(tk_gguf_writer *w, const tk_source *src, int file_type) {
    const tk_hparams *hp = &src->hp;
    const char *arch = tk_gguf_out_arch(src);
    char k[96];
    int rc = 0;
    rc |= tk_gguf_set_str(w, "general.architecture", arch);
    rc |= tk_gguf_set_str(w, "general.name", src->name[0] ? src->name : "model");
    rc |= tk_gguf_set_u32(w, "general.file_type", (uint32_t)file_type);
    rc |= tk_gguf_set_u32(w, "general.quantization_version", 2);
    rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "context_length"), (uint32_t)hp->ctx_len);
    rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "embedding_length"), (uint32_t)hp->dim);
    rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "block_count"), (uint32_t)hp->n_layers);
    rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "feed_forward_length"), (uint32_t)hp->ffn_dim);
    rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "attention.head_count"), (uint32_t)hp->n_heads);
    rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "attention.head_count_kv"), (uint32_t)hp->n_kv_heads);
    rc |= tk_gguf_set_f32(w, key(k, sizeof k, arch, "attention.layer_norm_rms_epsilon"), hp->norm_eps);
    rc |= tk_gguf_set_f32(w, key(k, sizeof k, arch, "rope.freq_base"), hp->rope_theta);
    rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "rope.dimension_count"),
                          (uint32_t)(hp->rope_dim > 0 ? hp->rope_dim : hp->head_dim));
    rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "attention.key_length"), (uint32_t)hp->head_dim);
    rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "attention.value_length"), (uint32_t)hp->head_dim);
    rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "vocab_size"), (uint32_t)hp->n_vocab);
    if (hp->n_expert > 0) {
        rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "expert_count"), (uint32_t)hp->n_expert);
        rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "expert_used_count"), (uint32_t)hp->n_expert_used);
        rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "expert_feed_forward_length"), (uint32_t)hp->expert_ffn_dim);
        if (hp->shexp_ffn_dim > 0)
            rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "expert_shared_feed_forward_length"),
                                  (uint32_t)hp->shexp_ffn_dim);
    }
    /* a window only where the architecture slides with it (phi3; mistral is written as llama without) */
    if (hp->swa_window > 0 && strcmp(arch, "llama") != 0)
        rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "attention.sliding_window"), (uint32_t)hp->swa_window);
    if (hp->rope_scaling == TK_ROPE_SCALING_LONGROPE) {
        /* the factor sets are the source's rope_factors_long / _short tensors */
        rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "rope.scaling.original_context_length"),
                              (uint32_t)hp->rope_orig_ctx);
        rc |= tk_gguf_set_f32(w, key(k, sizeof k, arch, "rope.scaling.attn_factor"), hp->rope_attn_factor);
    }
    if (hp->rope_scaling == TK_ROPE_SCALING_LINEAR) {
        rc |= tk_gguf_set_str(w, key(k, sizeof k, arch, "rope.scaling.type"), "linear");
        rc |= tk_gguf_set_f32(w, key(k, sizeof k, arch, "rope.scaling.factor"), hp->rope_factor);
    }
    if (hp->rope_scaling == TK_ROPE_SCALING_YARN) {
        /* an explicit HF attention_factor has no llama.cpp key: convert refuses it */
        rc |= tk_gguf_set_str(w, key(k, sizeof k, arch, "rope.scaling.type"), "yarn");
        rc |= tk_gguf_set_f32(w, key(k, sizeof k, arch, "rope.scaling.factor"), hp->rope_factor);
        rc |= tk_gguf_set_u32(w, key(k, sizeof k, arch, "rope.scaling.original_context_length"),
                              (uint32_t)hp->rope_orig_ctx);
        rc |= tk_gguf_set_f32(w, key(k, sizeof k, arch, "rope.scaling.yarn_beta_fast"), hp->rope_yarn_beta_fast);
        rc |= tk_gguf_set_f32(w, key(k, sizeof k, arch, "rope.scaling.yarn_beta_slow"), hp->rope_yarn_beta_slow);
    }
    return rc ? -1 : 0;
}
