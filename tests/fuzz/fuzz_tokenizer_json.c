/* Hugging Face tokenizer: the input is tokenizer.json and (optionally)
 * tokenizer_config.json, separated by TK_FUZZ_SEP.  The directory is loaded
 * as a tokenizer, which then encodes and decodes. */
#include "fuzz.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json"};
    const char *dir = tk_fuzz_dir_files(data, size, 2, names);
    tk_err err;
    tk_tokenizer *tok;
    if (tk_tokenizer_from_hf(dir, &tok, &err) == 0) {
        tk_fuzz_use_tokenizer(tok);
        tk_tokenizer_free(tok);
    }
    return 0;
}
