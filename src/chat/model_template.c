/* A model file's chat template without an engine: the same template (and
 * origin) tk_engine_chat_template gives, for clients that tokenize and
 * render prompts but never run the model (tokamak router).  Opening the
 * source reads metadata only: GGUF is mapped, not read; an HF directory's
 * tensors are not loaded. */
#include <stdlib.h>
#include <string.h>

#include <tokamak.h>

#include "../formats/source.h"

int tk_model_chat_template(const char *model_path, const tk_tokenizer *tok, char **out, const char **origin,
                           tk_err *err) {
    *out = NULL;
    *origin = "none";
    tk_source src;
    if (tk_source_open(model_path, &src, err)) return -1;
    const char *preset = tok && !src.chat_template ? tk_chat_preset_detect(tok) : NULL;
    const char *text = src.chat_template ? src.chat_template : tk_chat_preset_source(preset);
    int rc = 0;
    if (text) {
        *out = strdup(text);
        if (!*out) rc = tk_err_set(err, "out of memory");
        else *origin = src.chat_template ? "file" : preset;
    }
    tk_source_close(&src);
    return rc;
}
