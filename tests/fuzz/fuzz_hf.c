/* Hugging Face model directory: the input is config.json, model.safetensors
 * and (optionally) generation_config.json, separated by TK_FUZZ_SEP.  The
 * directory is opened as a source and bound as a model. */
#include "formats/source.h"
#include "fuzz.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const names[] = {"config.json", "model.safetensors", "generation_config.json"};
    const char *dir = tk_fuzz_dir_files(data, size, 3, names);
    tk_err err;
    tk_model m;
    if (tk_model_load(dir, &m, &err) == 0) tk_model_free(&m);
    return 0;
}
