/* tokamak convert: llama2.c checkpoints and Hugging Face directories (or a
 * GGUF) to GGUF with the standard llama metadata keys, so that any GGUF
 * reader loads the result. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/dtype.h"
#include "../formats/gguf.h"
#include "../formats/source.h"
#include "../tokenizer/tokenizer.h"
#include "commands.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tokamak convert SRC OUT.gguf [--type f32|f16|bf16|q8_0] [--tokenizer PATH]\n"
               "  SRC: llama2.c .bin (give --tokenizer tokenizer.bin), Hugging Face directory, or .gguf\n");
}

/* HF checkpoints rotate halves (x[i], x[i+d/2]); GGUF llama expects
 * adjacent pairs.  Row (h, i) moves to (h, 2i), row (h, d/2+i) to (h, 2i+1),
 * as llama.cpp's converter permutes them. */
static void permute_rows_to_adjacent(float *w, int n_heads, int head_dim, int64_t row_len) {
    size_t row_bytes = (size_t)row_len * sizeof(float);
    float *tmp = malloc(row_bytes * (size_t)head_dim);
    if (!tmp) return;
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
}

/* Llama 3.1 RoPE scaling as llama.cpp stores it: a rope_freqs tensor of
 * per-frequency divisors. */
static float *llama3_rope_factors(const tk_hparams *hp) {
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

static int write_metadata(tk_gguf_writer *w, const tk_source *src, int file_type) {
    const tk_hparams *hp = &src->hp;
    int rc = 0;
    rc |= tk_gguf_set_str(w, "general.architecture", "llama");
    rc |= tk_gguf_set_str(w, "general.name", src->name[0] ? src->name : "model");
    rc |= tk_gguf_set_u32(w, "general.file_type", (uint32_t)file_type);
    rc |= tk_gguf_set_u32(w, "general.quantization_version", 2);
    rc |= tk_gguf_set_u32(w, "llama.context_length", (uint32_t)hp->ctx_len);
    rc |= tk_gguf_set_u32(w, "llama.embedding_length", (uint32_t)hp->dim);
    rc |= tk_gguf_set_u32(w, "llama.block_count", (uint32_t)hp->n_layers);
    rc |= tk_gguf_set_u32(w, "llama.feed_forward_length", (uint32_t)hp->ffn_dim);
    rc |= tk_gguf_set_u32(w, "llama.attention.head_count", (uint32_t)hp->n_heads);
    rc |= tk_gguf_set_u32(w, "llama.attention.head_count_kv", (uint32_t)hp->n_kv_heads);
    rc |= tk_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", hp->norm_eps);
    rc |= tk_gguf_set_f32(w, "llama.rope.freq_base", hp->rope_theta);
    rc |= tk_gguf_set_u32(w, "llama.rope.dimension_count", (uint32_t)hp->head_dim);
    rc |= tk_gguf_set_u32(w, "llama.attention.key_length", (uint32_t)hp->head_dim);
    rc |= tk_gguf_set_u32(w, "llama.attention.value_length", (uint32_t)hp->head_dim);
    rc |= tk_gguf_set_u32(w, "llama.vocab_size", (uint32_t)hp->n_vocab);
    if (hp->rope_scaling == TK_ROPE_SCALING_LINEAR) {
        rc |= tk_gguf_set_str(w, "llama.rope.scaling.type", "linear");
        rc |= tk_gguf_set_f32(w, "llama.rope.scaling.factor", hp->rope_factor);
    }
    return rc ? -1 : 0;
}

int tk_cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *type_name = "f32", *tok_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--type") && i + 1 < argc) {
            type_name = argv[++i];
        } else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
            tok_path = argv[++i];
        } else if (argv[i][0] != '-' && !in) {
            in = argv[i];
        } else if (argv[i][0] != '-' && !out) {
            out = argv[i];
        } else {
            fprintf(stderr, "tokamak convert: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!in || !out) {
        usage(stderr);
        return 2;
    }
    int target = tk_dtype_from_name(type_name);
    if (target != TK_F32 && target != TK_F16 && target != TK_BF16 && target != TK_Q8_0) {
        fprintf(stderr, "tokamak convert: --type must be f32, f16, bf16 or q8_0 (got '%s')\n", type_name);
        return 2;
    }
    /* general.file_type values of llama.cpp's llama_ftype. */
    int file_type = target == TK_F32 ? 0 : target == TK_F16 ? 1 : target == TK_Q8_0 ? 7 : 32;

    tk_err err;
    tk_source src;
    if (tk_source_open(in, &src, &err)) {
        fprintf(stderr, "tokamak convert: %s\n", err.msg);
        return 1;
    }
    tk_tokenizer *tok = NULL;
    if (tk_tokenizer_open(in, tok_path, &tok, &err)) {
        fprintf(stderr, "tokamak convert: tokenizer: %s\n", err.msg);
        tk_source_close(&src);
        return 1;
    }
    const tk_hparams *hp = &src.hp;
    tk_gguf_writer *w = tk_gguf_writer_new();
    void **buffers = calloc((size_t)src.n_tensors + 1, sizeof(void *));
    int rc = 1;
    if (!w || !buffers) {
        fprintf(stderr, "tokamak convert: out of memory\n");
        goto done;
    }
    if (write_metadata(w, &src, file_type) || tk_tokenizer_to_gguf(tok, w, &err)) {
        fprintf(stderr, "tokamak convert: metadata: %s\n", err.msg);
        goto done;
    }
    for (int i = 0; i < src.n_tensors; i++) {
        const tk_tensor *t = &src.tensors[i];
        int64_t n = tk_tensor_nelems(t), row = t->ne[0], rows = n / row;
        const tk_dtype_info *info = tk_dtype_get(t->type);
        if (!info || !info->can_dequant) {
            fprintf(stderr, "tokamak convert: tensor '%s' has an unsupported type\n", t->name);
            goto done;
        }
        float *f = malloc(sizeof(float) * (size_t)n);
        if (!f) {
            fprintf(stderr, "tokamak convert: out of memory for '%s'\n", t->name);
            goto done;
        }
        size_t src_row = tk_dtype_row_bytes(t->type, row);
        for (int64_t r = 0; r < rows; r++)
            tk_dequant_row(t->type, (const unsigned char *)t->data + (size_t)r * src_row, f + r * row, row);
        if (hp->rope_style == TK_ROPE_HALVES) {
            if (strstr(t->name, ".attn_q.weight")) permute_rows_to_adjacent(f, hp->n_heads, hp->head_dim, row);
            if (strstr(t->name, ".attn_k.weight")) permute_rows_to_adjacent(f, hp->n_kv_heads, hp->head_dim, row);
        }
        /* Norm vectors stay float32, as GGUF readers expect. */
        tk_dtype ty = t->ndim == 1 || rows == 1 ? TK_F32 : (tk_dtype)target;
        if (ty == TK_Q8_0 && row % 32 != 0) ty = TK_F16;
        size_t bytes = tk_dtype_row_bytes(ty, row) * (size_t)rows;
        void *data = f;
        if (ty != TK_F32) {
            data = malloc(bytes);
            if (!data) {
                free(f);
                fprintf(stderr, "tokamak convert: out of memory\n");
                goto done;
            }
            size_t dst_row = tk_dtype_row_bytes(ty, row);
            for (int64_t r = 0; r < rows; r++) {
                unsigned char *d = (unsigned char *)data + (size_t)r * dst_row;
                if (ty == TK_F16) tk_quantize_row_f16(f + r * row, d, row);
                else if (ty == TK_BF16) tk_quantize_row_bf16(f + r * row, d, row);
                else tk_quantize_row_q8_0(f + r * row, d, row);
            }
            free(f);
        }
        buffers[i] = data;
        if (tk_gguf_add_tensor(w, t->name, ty, t->ndim, t->ne, data, bytes)) {
            fprintf(stderr, "tokamak convert: cannot add tensor '%s'\n", t->name);
            goto done;
        }
    }
    if (hp->rope_scaling == TK_ROPE_SCALING_LLAMA3) {
        float *factors = llama3_rope_factors(hp);
        buffers[src.n_tensors] = factors;
        int64_t ne[1] = {hp->head_dim / 2};
        if (!factors ||
            tk_gguf_add_tensor(w, "rope_freqs.weight", TK_F32, 1, ne, factors, sizeof(float) * (size_t)ne[0])) {
            fprintf(stderr, "tokamak convert: cannot add rope_freqs\n");
            goto done;
        }
    }
    if (tk_gguf_write(w, out, &err)) {
        fprintf(stderr, "tokamak convert: %s\n", err.msg);
        goto done;
    }
    fprintf(stderr, "wrote %s: %d tensors, %s\n", out, src.n_tensors, type_name);
    rc = 0;
done:
    if (buffers)
        for (int i = 0; i <= src.n_tensors; i++) free(buffers[i]);
    free(buffers);
    tk_gguf_writer_free(w);
    tk_tokenizer_free(tok);
    tk_source_close(&src);
    return rc;
}
