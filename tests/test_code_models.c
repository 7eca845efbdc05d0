/* The trained code-target / code-draft models (Llama-2 tokenizer, GQA,
 * head dim 48) as a Hugging Face directory (BF16 safetensors, RoPE on
 * halves) and as llama2.c exports (RoPE on adjacent pairs): both must match
 * the float32 reference in the models directory golden files. */
#include <sys/stat.h>
#include <unistd.h>

#include <tokamak.h>

#include "../src/tokenizer/tokenizer.h"
#include "golden_util.h"
#include "tk_test.h"

static void check_model(const char *model_path, const char *tokenizer_path, const char *golden_path) {
    json_t *g = load_json(golden_path);
    CHECK(g != NULL, "%s", golden_path);
    if (!g) return;
    tk_engine_config cfg = {.model_path = model_path, .tokenizer_path = tokenizer_path, .n_threads = 2,
                            .require_tokenizer = true};
    tk_engine *e;
    tk_err err;
    int rc = tk_engine_open(&cfg, &e, &err);
    CHECK(rc == 0, "open %s: %s", model_path, err.msg);
    if (rc) {
        json_decref(g);
        return;
    }
    int nv = tk_engine_n_vocab(e);
    for (size_t c = 0; c < json_array_size(g); c++) {
        json_t *cs = json_array_get(g, c);
        int32_t *tokens;
        int n = json_ints(json_object_get(cs, "tokens"), &tokens);
        /* The tokenizer must reproduce the reference encoding. */
        const char *prompt = json_string_value(json_object_get(cs, "prompt"));
        int32_t ids[512];
        int n_ids = 0;
        rc = tk_tokenize(tk_engine_tokenizer(e), prompt, strlen(prompt), true, false, ids, 512, &n_ids, &err);
        CHECK(rc == 0 && n_ids == n && !memcmp(ids, tokens, sizeof(int32_t) * n),
              "%s case %zu: prompt tokenization differs (%d vs %d tokens)", model_path, c, n_ids, n);

        float *logits = malloc(sizeof(float) * (size_t)n * nv);
        rc = tk_engine_logits(e, tokens, n, logits, &err);
        CHECK(rc == 0, "%s: %s", model_path, err.msg);
        double r = rel_row_error(logits + (size_t)(n - 1) * nv, json_object_get(cs, "logits_last"), nv, NULL, NULL);
        CHECK(r <= 1e-4, "%s case %zu: last-position logit error %.3g of the range", model_path, c, r);
        json_t *top5 = json_object_get(cs, "top5_per_position");
        int top1_same = 0;
        for (int t = 0; t < n; t++)
            top1_same += argmax_f(logits + (size_t)t * nv, nv) ==
                         json_integer_value(json_array_get(json_array_get(top5, t), 0));
        CHECK(top1_same == n, "%s case %zu: top-1 agrees at %d of %d positions", model_path, c, top1_same, n);
        int32_t *want, out[64];
        int ng = json_ints(json_object_get(cs, "greedy_continuation_32"), &want);
        rc = greedy_continue(e, tokens, n, ng, out, &err);
        CHECK(rc == 0 && !memcmp(out, want, sizeof(int32_t) * ng), "%s case %zu: greedy continuation differs",
              model_path, c);
        printf("%s case %zu: %d tokens, last-row error %.2e, top-1 %d/%d, greedy %d tokens\n", model_path, c, n, r,
               top1_same, n, ng);
        free(want);
        free(tokens);
        free(logits);
    }
    tk_engine_close(e);
    json_decref(g);
}

int main(void) {
    struct stat st;
    if (stat(tk_shared("models/code-target"), &st) != 0) TK_SKIP("../shared/models/code-target is not present");
    const char *names[] = {"code-target", "code-draft"};
    for (int i = 0; i < 2; i++) {
        char dir[64], bin[64], golden[64];
        snprintf(dir, sizeof dir, "models/%s", names[i]);
        snprintf(bin, sizeof bin, "models/%s.llama2c.bin", names[i]);
        snprintf(golden, sizeof golden, "models/%s.golden.json", names[i]);
        check_model(tk_shared(dir), NULL, tk_shared(golden));
        check_model(tk_shared(bin), tk_shared("tokenizers/llama2/tokenizer.bin"), tk_shared(golden));
        /* Converted to GGUF (Q/K rows permuted to adjacent pairs): F32 and
         * BF16 are lossless here because the weights are BF16 already. */
        static const char *types[] = {"f32", "bf16"};
        for (int k = 0; k < 2; k++) {
            char tmp[] = "/tmp/tk_convert_XXXXXX", out[128], cmd[1024];
            if (!mkdtemp(tmp)) continue;
            snprintf(out, sizeof out, "%s/model.gguf", tmp);
            snprintf(cmd, sizeof cmd, "%s convert %s %s --type %s 2>/dev/null", TK_TOKAMAK_BIN, tk_shared(dir), out,
                     types[k]);
            CHECK(system(cmd) == 0, "%s", cmd);
            check_model(out, NULL, tk_shared(golden));
            unlink(out);
            rmdir(tmp);
        }
    }
    TK_TEST_END();
}
