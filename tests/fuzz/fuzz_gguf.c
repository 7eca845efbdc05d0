/* GGUF: the input is a .gguf file.  It is opened by the reader, then loaded
 * the way the engine loads a model (source, model binding of every tensor)
 * and its tokenizer metadata is loaded and used. */
#include "formats/gguf.h"
#include "formats/source.h"
#include "fuzz.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = tk_fuzz_file("in.gguf", data, size);
    tk_err err;
    tk_gguf *g;
    if (tk_gguf_open(path, &g, &err) != 0) return 0;
    tk_tokenizer *tok;
    if (tk_tokenizer_from_gguf(g, &tok, &err) == 0) {
        tk_fuzz_use_tokenizer(tok);
        tk_tokenizer_free(tok);
    }
    tk_gguf_close(g);
    tk_model m;
    if (tk_model_load(path, &m, &err) == 0) tk_model_free(&m);
    return 0;
}
