/* tk_convert: llama2.c checkpoints and Hugging Face directories (or a GGUF)
 * to GGUF with the standard llama metadata keys, so that any GGUF reader
 * loads the result. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

#include "../formats/dtype.h"
#include "../formats/gguf.h"
#include "../formats/llama_gguf.h"
#include "../formats/source.h"
#include "../tokenizer/tokenizer.h"
#include "../util/err.h"

/* The output type named by p->type, or -1. */
static int target_type(const tk_convert_params *p) {
    const int t = tk_dtype_from_name(p->type ? p->type : "f32");
    return t == TK_F32 || t == TK_F16 || t == TK_BF16 || t == TK_Q8_0 ? t : -1;
}

int tk_convert_check(const tk_convert_params *p, tk_err *err) {
    if (target_type(p) < 0)
        return tk_err_set(err, "--type must be f32, f16, bf16 or q8_0 (got '%s')", p->type ? p->type : "");
    return 0;
}

/* One tensor in the output type: *data is f (taken over) or a new buffer. */
static int convert_tensor(float *f, tk_dtype ty, int64_t row, int64_t rows, void **data, tk_err *err) {
    *data = f;
    if (ty == TK_F32) return 0;
    const size_t dst_row = tk_dtype_row_bytes(ty, row);
    unsigned char *d = malloc(dst_row * (size_t)rows);
    if (!d) {
        free(f);
        *data = NULL;
        return tk_err_set(err, "out of memory");
    }
    for (int64_t r = 0; r < rows; r++) {
        unsigned char *o = d + (size_t)r * dst_row;
        if (ty == TK_F16) tk_quantize_row_f16(f + r * row, o, row);
        else if (ty == TK_BF16) tk_quantize_row_bf16(f + r * row, o, row);
        else tk_quantize_row_q8_0(f + r * row, o, row);
    }
    free(f);
    *data = d;
    return 0;
}

int tk_convert(const char *in_path, const char *out_path, const tk_convert_params *p, tk_convert_report *rep,
               tk_err *err) {
    tk_convert_report dummy;
    if (!rep) rep = &dummy;
    memset(rep, 0, sizeof *rep);
    if (tk_convert_check(p, err)) return -1;
    const int target = target_type(p);
    /* general.file_type values of llama.cpp's llama_ftype. */
    const int file_type = target == TK_F32 ? 0 : target == TK_F16 ? 1 : target == TK_Q8_0 ? 7 : 32;

    tk_source src;
    if (tk_source_open(in_path, &src, err)) return -1;
    if (!strcmp(src.arch, "mistral")) {
        /* Written as Llama, as llama.cpp's converter does: the format's
         * llama keys have no sliding window. */
        if (snprintf(rep->warning, sizeof rep->warning,
                     "%s: the %d-position sliding window is not kept (written as llama)", in_path,
                     src.hp.swa_window) < 0)
            rep->warning[0] = 0;
    } else if (strcmp(src.arch, tk_gguf_out_arch(&src)) != 0) {
        /* The writer emits llama keys and tensors only; other architectures'
         * extra tensors and options (e.g. Gemma 3's norms and sliding
         * window) would be lost. */
        tk_err_set(err, "%s: architecture '%s' is not supported (llama, mistral, qwen2, qwen3, qwen2moe, qwen3moe, olmoe, "
                        "phi3)", in_path, src.arch);
        tk_source_close(&src);
        return -1;
    }
    if (src.hp.rope_scaling == TK_ROPE_SCALING_YARN && src.hp.rope_attn_factor > 0) {
        tk_err_set(err, "%s: yarn attention_factor has no GGUF key (llama.cpp derives it from the factor)", in_path);
        tk_source_close(&src);
        return -1;
    }
    tk_tokenizer *tok = NULL;
    if (tk_tokenizer_from_source(&src, p->tokenizer_path, &tok, err)) {
        tk_err_wrap(err, "tokenizer");
        tk_source_close(&src);
        return -1;
    }
    const tk_hparams *hp = &src.hp;
    tk_gguf_writer *w = tk_gguf_writer_new();
    void **buffers = calloc((size_t)src.n_tensors + 1, sizeof(void *));
    int rc = -1;
    if (!w || !buffers) {
        tk_err_set(err, "out of memory");
        goto done;
    }
    if (tk_gguf_set_llama_meta(w, &src, file_type)) {
        tk_err_set(err, "metadata: cannot set the llama keys");
        goto done;
    }
    if (tk_tokenizer_to_gguf(tok, w, err)) {
        tk_err_wrap(err, "metadata");
        goto done;
    }
    for (int i = 0; i < src.n_tensors; i++) {
        const tk_tensor *t = &src.tensors[i];
        if (p->progress) p->progress(p->progress_user, i, src.n_tensors, t->name);
        int64_t n = tk_tensor_nelems(t), row = t->ne[0], rows = n / row;
        float *f;
        if (tk_source_tensor_f32(&src, t, &f, err)) goto done;
        /* Norm vectors stay float32, as GGUF readers expect. */
        tk_dtype ty = t->ndim == 1 || rows == 1 ? TK_F32 : (tk_dtype)target;
        if (ty == TK_Q8_0 && row % 32 != 0) ty = TK_F16;
        if (convert_tensor(f, ty, row, rows, &buffers[i], err)) goto done;
        if (tk_gguf_add_tensor(w, t->name, ty, t->ndim, t->ne, buffers[i], tk_dtype_row_bytes(ty, row) * (size_t)rows)) {
            tk_err_set(err, "cannot add tensor '%s'", t->name);
            goto done;
        }
    }
    if (p->progress) p->progress(p->progress_user, src.n_tensors, src.n_tensors, out_path);
    if (hp->rope_scaling == TK_ROPE_SCALING_LLAMA3) {
        float *factors = tk_llama3_rope_factors(hp);
        buffers[src.n_tensors] = factors;
        int64_t ne[1] = {hp->head_dim / 2};
        if (!factors ||
            tk_gguf_add_tensor(w, "rope_freqs.weight", TK_F32, 1, ne, factors, sizeof(float) * (size_t)ne[0])) {
            tk_err_set(err, "cannot add rope_freqs");
            goto done;
        }
    }
    if (tk_gguf_write(w, out_path, err)) goto done;
    rep->n_tensors = src.n_tensors;
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
