/* SentencePiece: the input is a tokenizer.model (protobuf ModelProto),
 * loaded as a tokenizer, which then encodes and decodes. */
#include "fuzz.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = tk_fuzz_file("tokenizer.model", data, size);
    tk_err err;
    tk_tokenizer *tok;
    if (tk_tokenizer_from_spm_model(path, &tok, &err) == 0) {
        tk_fuzz_use_tokenizer(tok);
        tk_tokenizer_free(tok);
    }
    return 0;
}
