/* Each operator fusion computes exactly what the unfused path computes (the
 * same float operations in the same order, only fewer passes over memory),
 * so logits with any one fusion on equal the logits with none, bit for bit:
 * on quantized models (int8 activation path, where RMSNorm+quantize fuses),
 * a float model, and F16 / Q8_0 KV caches (RoPE written into the cache). */
#include <tokamak.h>

#include "tk_test.h"

static int logits_for(const char *model, const char *fusions, const char *kv_type, float *out, int *nv) {
    tk_engine_config cfg = {.model_path = model, .n_threads = 2, .fusions = fusions, .kv_type = kv_type};
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    *nv = tk_engine_n_vocab(e);
    const int32_t tokens[] = {1, 40, 90, 7, 300, 12, 5, 77, 61, 402, 99, 3};
    int rc = tk_engine_logits(e, tokens, 12, out, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    tk_engine_close(e);
    return rc;
}

int main(void) {
    static const char *models[] = {"gguf-fixtures/qfix-Q4_K_M.gguf", "gguf-fixtures/qfix-Q4_0.gguf",
                                   "gguf-fixtures/qfix-Q8_0.gguf", "gguf-fixtures/qfix-F16.gguf",
                                   "models/stories260K.bin"};
    static const char *fusions[] = {"norm-quant", "glu", "rope-kv", "rope-q", "residual", "all"};
    static const char *kv_types[] = {"f32", "f16", "q8_0"};
    size_t cap = 12 * 512;
    float *base = malloc(sizeof(float) * cap), *got = malloc(sizeof(float) * cap);
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
        for (int k = 0; k < 3; k++) {
            int nv;
            /* stories260K's head dim (8) cannot be stored as Q8_0 blocks of 32 */
            if (k == 2 && strstr(models[m], "stories")) continue;
            if (logits_for(tk_shared(models[m]), "none", kv_types[k], base, &nv)) {
                CHECK(0, "%s: cannot run", models[m]);
                continue;
            }
            for (size_t f = 0; f < sizeof fusions / sizeof fusions[0]; f++) {
                CHECK(logits_for(tk_shared(models[m]), fusions[f], kv_types[k], got, &nv) == 0, "run");
                CHECK(!memcmp(base, got, sizeof(float) * 12 * (size_t)nv), "%s, KV %s: fusion %s changes the logits",
                      models[m], kv_types[k], fusions[f]);
            }
        }
    tk_err err;
    tk_engine *e;
    tk_engine_config bad = {.model_path = tk_shared("models/stories260K.bin"), .fusions = "glu,warp"};
    CHECK(tk_engine_open(&bad, &e, &err) != 0 && strstr(err.msg, "warp"), "unknown fusion named: %s", err.msg);
    free(base);
    free(got);
    TK_TEST_END();
}
