/* The grammar compilers: the input's first byte picks GBNF or regex, the
 * rest is the source; a compiled grammar is then run over the source's own
 * bytes (bounded expansion must end every walk). */
#include "fuzz.h"

#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *src = malloc(size);
    if (!src) return 0;
    memcpy(src, data + 1, size - 1);
    src[size - 1] = 0; /* the source ends at the first NUL */
    tk_grammar g;
    tk_err err;
    int rc = data[0] & 1 ? tk_grammar_from_regex(&g, src, &err) : tk_grammar_from_gbnf(&g, src, &err);
    if (rc == 0) {
        tk_gstate st, scratch = {0};
        if (tk_gstate_init(&st, &g, &err) == 0) {
            for (size_t i = 0; i + 1 < size && i < 256; i++)
                if (tk_gstate_advance(&st, data[i + 1], &scratch, &err) != 1) break;
            tk_gstate_free(&st);
        }
        tk_gstate_free(&scratch);
        tk_grammar_free(&g);
    }
    free(src);
    return 0;
}
