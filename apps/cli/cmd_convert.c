/* tokamak convert: llama2.c checkpoints and Hugging Face directories (or a
 * GGUF) to GGUF with the standard llama metadata keys, so that any GGUF
 * reader loads the result. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "formats/gguf.h"
#include "formats/llama_gguf.h"
#include "formats/source.h"
#include "tokenizer/tokenizer.h"
#include "common/args.h"
#include "commands.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tokamak convert SRC OUT.gguf [--type f32|f16|bf16|q8_0] [--tokenizer PATH]\n"
               "  SRC: llama2.c .bin (give --tokenizer tokenizer.bin), Hugging Face directory, or .gguf\n");
}

int tk_cmd_convert(int argc, char **argv) {
    const char *type_name = "f32", *tok_path = NULL, *pos[2] = {NULL, NULL};
    const tk_opt opts[] = {
        TK_OPT_S("--type", &type_name),
        TK_OPT_S("--tokenizer", &tok_path),
    };
    const tk_cli cli = {.cmd = "convert", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts), .pos = pos,
                        .max_pos = 2};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    const char *in = pos[0], *out = pos[1];
    if (tk_args_missing(&cli, out, "SRC and OUT")) return 2;
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
    if (!strcmp(src.arch, "mistral")) {
        /* Written as Llama, as llama.cpp's converter does: the format's
         * llama keys have no sliding window. */
        fprintf(stderr, "tokamak convert: warning: %s: the %d-position sliding window is not kept (written as llama)\n",
                in, src.hp.swa_window);
    } else if (strcmp(src.arch, "llama") != 0) {
        /* The writer emits llama keys and tensors only; other architectures'
         * extra tensors and options (e.g. Gemma 3's norms and sliding
         * window) would be lost. */
        fprintf(stderr, "tokamak convert: %s: architecture '%s' is not supported (llama only)\n", in, src.arch);
        tk_source_close(&src);
        return 1;
    }
    tk_tokenizer *tok = NULL;
    if (tk_tokenizer_from_source(&src, tok_path, &tok, &err)) {
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
    if (tk_gguf_set_llama_meta(w, &src, file_type) || tk_tokenizer_to_gguf(tok, w, &err)) {
        fprintf(stderr, "tokamak convert: metadata: %s\n", err.msg);
        goto done;
    }
    for (int i = 0; i < src.n_tensors; i++) {
        const tk_tensor *t = &src.tensors[i];
        int64_t n = tk_tensor_nelems(t), row = t->ne[0], rows = n / row;
        float *f;
        if (tk_source_tensor_f32(&src, t, &f, &err)) {
            fprintf(stderr, "tokamak convert: %s\n", err.msg);
            goto done;
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
        float *factors = tk_llama3_rope_factors(hp);
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
