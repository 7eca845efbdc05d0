/* The JSON Schema compiler: the input up to the first NUL is the schema;
 * a compiled grammar is then run over the bytes after it (at most 256;
 * bounded expansion must end every walk). */
#include "fuzz.h"

#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t n = nul ? (size_t)(nul - data) : size;
    tk_grammar g;
    tk_err err;
    if (tk_grammar_from_json_schema(&g, (const char *)data, n, &err)) return 0;
    tk_gstate st, scratch = {0};
    if (tk_gstate_init(&st, &g, &err) == 0) {
        for (size_t i = n + 1; i < size && i <= n + 256; i++)
            if (tk_gstate_advance(&st, data[i], &scratch, &err) != 1) break;
        tk_gstate_free(&st);
    }
    tk_gstate_free(&scratch);
    tk_grammar_free(&g);
    return 0;
}
