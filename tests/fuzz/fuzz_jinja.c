/* The chat-template interpreter: the input is a template, parsed and
 * rendered with fixed messages, with and without the generation prompt. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const tk_chat_msg msgs[] = {
        {"system", "You are terse."},
        {"user", "Hi {{ there }} <|im_end|>"},
        {"assistant", "Hello."},
        {"user", "caf\xc3\xa9 \xf0\x9f\x98\x80"},
    };
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0; /* the source ends at the first NUL, as a C string does */
    tk_chat_template *t;
    tk_err err;
    if (tk_chat_template_parse(src, &t, &err) == 0) {
        for (int gen = 0; gen < 2; gen++) {
            char *out;
            if (tk_chat_template_render(t, msgs, 4 - gen, gen, "<s>", "</s>", &out, &err) == 0) free(out);
        }
        tk_chat_template_free(t);
    }
    free(src);
    return 0;
}
