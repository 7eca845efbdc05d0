/* llama2.c: the input is a checkpoint and (optionally) its tokenizer.bin,
 * separated by TK_FUZZ_SEP.  The checkpoint is loaded as a model; the
 * tokenizer is opened for it (its header gives the vocabulary size), then
 * encodes and decodes. */
#include "fuzz.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[2];
    size_t len[2];
    tk_fuzz_split(data, size, 2, part, len);
    const char *model = tk_fuzz_file("model.bin", part[0], len[0]);
    const char *tok_path = tk_fuzz_file("tokenizer.bin", part[1], len[1]);
    tk_err err;
    tk_model m;
    if (tk_model_load(model, &m, &err) == 0) tk_model_free(&m);
    tk_tokenizer *tok;
    if (part[1] && tk_tokenizer_open(model, tok_path, &tok, &err) == 0) {
        tk_fuzz_use_tokenizer(tok);
        tk_tokenizer_free(tok);
    }
    return 0;
}
