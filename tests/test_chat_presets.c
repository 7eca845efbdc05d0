/* The built-in chat presets (src/chat/presets.c): each renders a
 * conversation exactly as its format writes it; the preset is detected from
 * the real tokenizers in ../shared (Llama 2 SentencePiece -> llama2, Llama 3
 * tokenizer.json -> llama3, plain vocabularies -> none) and from copies of
 * the aidreams model whose last pieces are renamed to a format's control
 * tokens; an engine on a model without a template reports the preset, hands
 * out its source and stops at its end-of-turn token. */
#include <unistd.h>

#include <tokamak.h>

#include "../src/formats/gguf.h"
#include "tk_test.h"

static const tk_chat_msg conv[] = {
    {"system", "Be brief."}, {"user", "Hi!"}, {"assistant", "Hello."}, {"user", "Name a color."}};

static void check_render(const char *name, const tk_chat_msg *msgs, int n, const char *bos, const char *eos,
                         const char *want) {
    const char *src = tk_chat_preset_source(name);
    CHECK(src != NULL, "preset %s exists", name);
    if (!src) return;
    tk_chat_template *t;
    tk_err err;
    char *out = NULL;
    int rc = tk_chat_template_parse(src, &t, &err);
    CHECK(rc == 0, "%s parses: %s", name, err.msg);
    if (rc) return;
    rc = tk_chat_template_render(t, msgs, n, true, bos, eos, &out, &err);
    CHECK(rc == 0, "%s renders: %s", name, err.msg);
    if (!rc) CHECK(!strcmp(out, want), "%s (%d messages):\n got '%s'\nwant '%s'", name, n, out, want);
    free(out);
    tk_chat_template_free(t);
}

static void check_renders(void) {
    check_render("gemma", conv, 4, "<bos>", "<eos>",
                 "<bos><start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                 "<start_of_turn>user\nName a color.<end_of_turn>\n<start_of_turn>model\n");
    check_render("gemma", conv + 1, 1, "<bos>", "<eos>", "<bos><start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n");
    check_render("llama3", conv, 4, "<|begin_of_text|>", "<|end_of_text|>",
                 "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nName a color.<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_render("chatml", conv, 4, NULL, "<|endoftext|>",
                 "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
                 "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nName a color.<|im_end|>\n"
                 "<|im_start|>assistant\n");
    check_render("phi3", conv, 4, "<s>", "<|endoftext|>",
                 "<|system|>\nBe brief.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\nHello.<|end|>\n"
                 "<|user|>\nName a color.<|end|>\n<|assistant|>\n");
    check_render("mistral", conv, 4, "<s>", "</s>", "<s>[INST] Be brief.\n\nHi![/INST] Hello.</s>[INST] Name a color.[/INST]");
    check_render("mistral", conv + 1, 1, "<s>", "</s>", "<s>[INST] Hi![/INST]");
    check_render("llama2", conv, 4, "<s>", "</s>",
                 "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi! [/INST] Hello. </s><s>[INST] Name a color. [/INST]");
    check_render("llama2", conv + 1, 3, "<s>", "</s>", "<s>[INST] Hi! [/INST] Hello. </s><s>[INST] Name a color. [/INST]");

    /* A role the format cannot write is an error naming it, not a guess. */
    tk_chat_template *t;
    tk_err err;
    char *out = NULL;
    const tk_chat_msg tool[] = {{"user", "a"}, {"tool", "b"}};
    CHECK(tk_chat_template_parse(tk_chat_preset_source("llama2"), &t, &err) == 0, "llama2 parses");
    CHECK(tk_chat_template_render(t, tool, 2, true, "<s>", "</s>", &out, &err) != 0 && strstr(err.msg, "tool"),
          "llama2 refuses a tool turn: %s", err.msg);
    tk_chat_template_free(t);

    int n = 0;
    while (tk_chat_preset_name(n)) n++;
    CHECK(n == 6, "six presets, got %d", n);
    CHECK(!tk_chat_preset_source("nope") && !tk_chat_preset_end_of_turn("nope"), "unknown preset");
    CHECK(!strcmp(tk_chat_preset_end_of_turn("gemma"), "<end_of_turn>") && !tk_chat_preset_end_of_turn("llama2"),
          "end-of-turn tokens");
}

/* The preset detected for the tokenizer at shared-relative (or absolute) path. */
static const char *detect(const char *path) {
    tk_tokenizer *t;
    tk_err err;
    if (tk_tokenizer_open(path, NULL, &t, &err)) {
        fprintf(stderr, "open %s: %s\n", path, err.msg);
        return "(open failed)";
    }
    const char *p = tk_chat_preset_detect(t);
    tk_tokenizer_free(t);
    return p ? p : "none";
}

/* aidreams260K.gguf with its last pieces renamed to `specials` (CONTROL
 * tokens): every key and tensor copied through the writer. */
static int renamed_model(const char *out, const char *const *specials, int n_specials) {
    tk_gguf *g;
    tk_err err;
    if (tk_gguf_open(tk_shared("models/aidreams260K.gguf"), &g, &err)) return -1;
    tk_gguf_writer *w = tk_gguf_writer_new();
    for (size_t i = 0; i < tk_gguf_n_kv(g); i++) {
        const tk_gguf_kv *kv = tk_gguf_kv_at(g, i);
        if (kv->type == TK_GGUF_STRING) {
            char *s = strndup(kv->v.s.ptr, kv->v.s.len);
            tk_gguf_set_str(w, kv->key, s);
            free(s);
        } else if (kv->type == TK_GGUF_U32) {
            tk_gguf_set_u32(w, kv->key, (uint32_t)kv->v.u);
        } else if (kv->type == TK_GGUF_F32) {
            tk_gguf_set_f32(w, kv->key, (float)kv->v.f);
        } else if (kv->type == TK_GGUF_ARRAY && kv->arr_type == TK_GGUF_STRING) {
            char **v = calloc(kv->arr_n, sizeof *v);
            for (uint64_t k = 0; k < kv->arr_n; k++) {
                int64_t s = (int64_t)k - (int64_t)(kv->arr_n - (uint64_t)n_specials);
                v[k] = s >= 0 ? strdup(specials[s]) : strndup(kv->arr_strs[k].ptr, kv->arr_strs[k].len);
            }
            tk_gguf_set_arr_str(w, kv->key, (const char *const *)v, kv->arr_n);
            for (uint64_t k = 0; k < kv->arr_n; k++) free(v[k]);
            free(v);
        } else if (kv->type == TK_GGUF_ARRAY && kv->arr_type == TK_GGUF_F32) {
            float *v = malloc(kv->arr_n * sizeof *v);
            for (uint64_t k = 0; k < kv->arr_n; k++) v[k] = (float)tk_gguf_arr_f(kv, k);
            tk_gguf_set_arr_f32(w, kv->key, v, kv->arr_n);
            free(v);
        } else if (kv->type == TK_GGUF_ARRAY && kv->arr_type == TK_GGUF_I32) { /* token types */
            int32_t *v = malloc(kv->arr_n * sizeof *v);
            for (uint64_t k = 0; k < kv->arr_n; k++)
                v[k] = k + (uint64_t)n_specials >= kv->arr_n ? TK_TOKEN_CONTROL : (int32_t)tk_gguf_arr_i(kv, k);
            tk_gguf_set_arr_i32(w, kv->key, v, kv->arr_n);
            free(v);
        }
    }
    for (size_t i = 0; i < tk_gguf_n_tensors(g); i++) {
        const tk_tensor *t = tk_gguf_tensor_at(g, i);
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        tk_gguf_add_tensor(w, t->name, t->type, t->ndim, ne, t->data, t->nbytes);
    }
    int rc = tk_gguf_write(w, out, &err);
    if (rc) fprintf(stderr, "write %s: %s\n", out, err.msg);
    tk_gguf_writer_free(w);
    tk_gguf_close(g);
    return rc;
}

static void check_detection(const char *tmpdir) {
    const char *got;
    got = detect(tk_shared("tokenizer-tests/ggml-vocab-llama-spm.gguf"));
    CHECK(!strcmp(got, "llama2"), "llama SPM gguf: %s", got);
    got = detect(tk_shared("tokenizers/llama2"));
    CHECK(!strcmp(got, "llama2"), "llama2 tokenizer.json: %s", got);
    got = detect(tk_shared("tokenizers/llama3/tokenizer.json"));
    CHECK(!strcmp(got, "llama3"), "llama3 tokenizer.json: %s", got);
    got = detect(tk_shared("tokenizer-tests/ggml-vocab-gpt-2.gguf"));
    CHECK(!strcmp(got, "none"), "gpt-2 vocabulary: %s", got);
    got = detect(tk_shared("models/aidreams260K.gguf"));
    CHECK(!strcmp(got, "none"), "aidreams (a 512-piece <s>/</s> vocabulary): %s", got);

    static const struct {
        const char *want;
        const char *specials[4];
    } cases[] = {
        {"gemma", {"<start_of_turn>", "<end_of_turn>"}},
        {"llama3", {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>"}},
        {"chatml", {"<|im_start|>", "<|im_end|>", "<|end|>"}},
        {"phi3", {"<|user|>", "<|assistant|>", "<|end|>"}},
        {"mistral", {"[INST]", "[/INST]"}},
        {"none", {"<|im_start|>", "<|user|>", "[INST]"}}, /* halves of formats */
    };
    char path[512];
    snprintf(path, sizeof path, "%s/renamed.gguf", tmpdir);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = 0;
        while (n < 4 && cases[c].specials[n]) n++;
        CHECK(renamed_model(path, cases[c].specials, n) == 0, "write the %s vocabulary", cases[c].want);
        got = detect(path);
        CHECK(!strcmp(got, cases[c].want), "vocabulary with %s...: %s, want %s", cases[c].specials[0], got,
              cases[c].want);
    }

    /* The real Gemma 3 file (no template in it) when tools/oracles.sh or
     * tools/demo.sh fetched it. */
    const char *gemma = TK_SOURCE_DIR "/.cache/models/gemma-3-270m-q4_k_m.gguf";
    if (access(gemma, R_OK) == 0) {
        got = detect(gemma);
        CHECK(!strcmp(got, "gemma"), "Gemma 3 270M: %s", got);
    } else {
        printf("note: %s absent, the real Gemma vocabulary is not checked\n", gemma);
    }
}

static tk_engine *open_engine(const char *path) {
    tk_engine_config cfg = {.model_path = path, .require_tokenizer = true};
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "open %s: %s\n", path, err.msg);
        return NULL;
    }
    return e;
}

static void check_engines(const char *tmpdir) {
    char path[512];
    snprintf(path, sizeof path, "%s/gemma-vocab.gguf", tmpdir);
    const char *const specials[] = {"<start_of_turn>", "<end_of_turn>"};
    CHECK(renamed_model(path, specials, 2) == 0, "write the model");
    tk_engine *e = open_engine(path);
    CHECK(e != NULL, "open the renamed model");
    if (e) {
        const tk_tokenizer *t = tk_engine_tokenizer(e);
        CHECK(!strcmp(tk_engine_chat_template_origin(e), "gemma"), "origin %s", tk_engine_chat_template_origin(e));
        CHECK(tk_engine_chat_template(e) == tk_chat_preset_source("gemma"), "the preset's source");
        int eot = tk_tokenizer_find(t, "<end_of_turn>");
        CHECK(eot >= 0 && tk_tokenizer_is_eog(t, eot), "<end_of_turn> (%d) ends generation", eot);
        tk_engine_close(e);
    }

    e = open_engine(tk_shared("models/aidreams260K.gguf"));
    CHECK(e != NULL, "open aidreams");
    if (e) {
        CHECK(!strcmp(tk_engine_chat_template_origin(e), "none") && !tk_engine_chat_template(e), "aidreams: none");
        tk_engine_close(e);
    }

    /* A template in the file wins, untouched. */
    e = open_engine(tk_shared("models/code-draft"));
    CHECK(e != NULL, "open code-draft");
    if (e) {
        const char *src = tk_engine_chat_template(e);
        CHECK(!strcmp(tk_engine_chat_template_origin(e), "file"), "code-draft origin %s",
              tk_engine_chat_template_origin(e));
        for (int i = 0; src && tk_chat_preset_name(i); i++)
            CHECK(src != tk_chat_preset_source(tk_chat_preset_name(i)), "code-draft: its own template");
        tk_engine_close(e);
    }
}

int main(void) {
    char tmpdir[] = "/tmp/tk_presets_XXXXXX";
    if (!mkdtemp(tmpdir)) TK_SKIP("cannot create a temp dir");
    check_renders();
    check_detection(tmpdir);
    check_engines(tmpdir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", tmpdir);
    TK_TEST_END();
}
