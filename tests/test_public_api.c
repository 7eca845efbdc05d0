/* The public header on its own (this file includes nothing from src/): the
 * offline tools' parameter checks, a synthetic model (deterministic in its
 * seed, loadable by the engine, its tokenizer the shape's), conversion to
 * GGUF, and the tokenizer and chat-template entry points the applications
 * use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tokamak.h>

#include "tk_test.h"

static char tmpdir[256];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int slot;
    char *b = buf[slot++ & 3];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

static void test_checks(void) {
    tk_err err;
    const tk_convert_params ok[] = {{.type = NULL}, {.type = "f16"}, {.type = "BF16"}, {.type = "q8_0"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        CHECK(tk_convert_check(&ok[i], &err) == 0, "convert type %s: %s", ok[i].type ? ok[i].type : "NULL", err.msg);
    const tk_convert_params bad = {.type = "q4_0"};
    CHECK(tk_convert_check(&bad, &err) == -1 && strstr(err.msg, "q4_0"), "convert q4_0: %s", err.msg);

    int n_shapes = 0;
    while (tk_synth_shape_name(n_shapes)) n_shapes++;
    CHECK(n_shapes >= 1 && tk_synth_shape_name(-1) == NULL, "%d shapes", n_shapes);
    tk_synth_params s = {.like = "stories-15m", .type = "q4_k_m"};
    CHECK(tk_synth_check(&s, &err) == 0, "synth: %s", err.msg);
    s.like = "no-such-shape";
    CHECK(tk_synth_check(&s, &err) == -1 && strstr(err.msg, "unknown shape"), "synth shape: %s", err.msg);
    s.like = "stories-15m";
    s.type = "q4_9";
    CHECK(tk_synth_check(&s, &err) == -1 && strstr(err.msg, "q4_9"), "synth type: %s", err.msg);

    CHECK(tk_quant_type_check("Q4_K_M", &err) == 0 && tk_quant_type_check("nf4_dq", &err) == 0, "%s", err.msg);
    CHECK(tk_quant_type_check("q4_9", &err) == -1 && strstr(err.msg, "q4_9"), "quant type: %s", err.msg);
}

static int n_progress;
static void on_progress(void *user, int done, int total) {
    (void)user;
    CHECK(done == n_progress + 1 && done <= total, "progress %d/%d after %d", done, total, n_progress);
    n_progress = done;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void test_synth_and_convert(void) {
    tk_err err;
    tk_synth_params s = {.like = "stories-15m", .type = "q8_0", .seed = 7, .shared_dir = tk_shared(""),
                         .progress = on_progress};
    CHECK(tk_synth_model(tmp_path("a.gguf"), &s, &err) == 0, "synth: %s", err.msg);
    CHECK(n_progress == 2 + 9 * 6, "progress reached %d", n_progress); /* tied: no output.weight */
    s.progress = NULL;
    CHECK(tk_synth_model(tmp_path("b.gguf"), &s, &err) == 0, "synth again: %s", err.msg);
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK(tk_read_file(tmp_path("a.gguf"), &a, &na, &err) == 0 && tk_read_file(tmp_path("b.gguf"), &b, &nb, &err) == 0,
          "%s", err.msg);
    CHECK(a && b && na == nb && memcmp(a, b, na) == 0, "same seed, different files (%zu / %zu bytes)", na, nb);
    free(a);
    free(b);

    tk_engine_config cfg = {.model_path = tmp_path("a.gguf"), .ctx_len = 16, .n_threads = 2, .max_batch_tokens = 16};
    tk_engine *e = NULL;
    CHECK(tk_engine_open(&cfg, &e, &err) == 0, "open the synthetic model: %s", err.msg);
    if (e) {
        tk_model_summary sum;
        tk_engine_summary(e, &sum);
        CHECK(sum.dim == 288 && sum.n_layers == 6 && sum.n_vocab == 32000, "shape %d x %d, vocab %d", sum.dim,
              sum.n_layers, sum.n_vocab);
        CHECK(sum.cpu[0] && memchr(sum.cpu, 0, sizeof sum.cpu), "cpu '%s'", sum.cpu);
        const tk_tokenizer *t = tk_engine_tokenizer(e);
        CHECK(t && tk_tokenizer_kind(t) == TK_TOK_SPM && tk_tokenizer_n_vocab(t) == 32000, "tokenizer");
        tk_engine_close(e);
    }

    tk_convert_params c = {.type = "f16"};
    tk_convert_report rep;
    CHECK(tk_convert(tmp_path("a.gguf"), tmp_path("c.gguf"), &c, &rep, &err) == 0, "convert: %s", err.msg);
    CHECK(rep.n_tensors == 2 + 9 * 6 && rep.warning[0] == 0, "%d tensors, warning '%s'", rep.n_tensors,
          rep.warning);
    CHECK(file_size(tmp_path("c.gguf")) > file_size(tmp_path("a.gguf")), "f16 is larger than q8_0");
    CHECK(tk_convert(tmp_path("missing.gguf"), tmp_path("d.gguf"), &c, &rep, &err) == -1 && err.msg[0],
          "convert a missing file");
    remove(tmp_path("a.gguf"));
    remove(tmp_path("b.gguf"));
    remove(tmp_path("c.gguf"));
}

static void test_tokenizer_and_chat(void) {
    tk_err err;
    tk_tokenizer *t = NULL;
    CHECK(tk_tokenizer_open(tk_shared("tokenizers/llama2/tokenizer.model"), NULL, &t, &err) == 0, "%s", err.msg);
    if (!t) return;
    int32_t ids[64];
    int n = 0;
    const char *text = "Hello, wörld";
    CHECK(tk_tokenize(t, text, strlen(text), true, false, ids, 64, &n, &err) == 0 && n > 1 && n <= 64, "%s", err.msg);
    CHECK(ids[0] == tk_tokenizer_bos(t) && tk_tokenizer_add_bos(t), "BOS first");
    char out[128];
    int len = 0;
    tk_detok d;
    tk_detok_init(&d, t, ids[0]);
    for (int i = 1; i < n; i++) len += tk_detok_push(&d, ids[i], out + len, (int)sizeof out - len);
    len += tk_detok_flush(&d, out + len, (int)sizeof out - len);
    CHECK(len == (int)strlen(text) && memcmp(out, text, (size_t)len) == 0, "round trip '%.*s'", len, out);
    const int eos = tk_tokenizer_eos(t);
    CHECK(eos >= 0 && tk_tokenizer_is_eog(t, eos) && tk_tokenizer_find(t, tk_tokenizer_piece(t, eos)) == eos &&
              tk_tokenizer_token_type(t, eos) == TK_TOKEN_CONTROL,
          "EOS %d", eos);

    tk_chat_template *ct = NULL;
    CHECK(tk_chat_template_parse("{{ bos_token }}{% for m in messages %}[{{ m.role }}: {{ m.content }}]{% endfor %}"
                                 "{% if add_generation_prompt %}[assistant: {% endif %}",
                                 &ct, &err) == 0,
          "%s", err.msg);
    const tk_chat_msg msgs[] = {{"user", "hi"}};
    char *r = NULL;
    CHECK(tk_chat_template_render(ct, msgs, 1, true, tk_tokenizer_piece(t, tk_tokenizer_bos(t)), NULL, &r, &err) == 0 &&
              r && !strcmp(r, "<s>[user: hi][assistant: "),
          "render: %s", r ? r : err.msg);
    free(r);
    tk_chat_template_free(ct);
    tk_tokenizer_free(t);
}

/* tk_model_chat_template, without an engine, equals what an engine on the
 * same model says: a file's template (code-target's tokenizer_config.json),
 * and a GGUF with none whose vocabulary fits no preset. */
static void test_model_chat_template(void) {
    const char *models[] = {tk_shared("models/code-target"), tk_shared("models/aidreams260K.gguf")};
    for (int i = 0; i < 2; i++) {
        tk_err err;
        tk_engine_config cfg = {.model_path = models[i], .n_threads = 1, .ctx_len = 64};
        tk_engine *e = NULL;
        tk_tokenizer *t = NULL;
        if (tk_engine_open(&cfg, &e, &err) || tk_tokenizer_open(models[i], NULL, &t, &err)) {
            CHECK(0, "%s: %s", models[i], err.msg);
            tk_engine_close(e);
            continue;
        }
        char *text = NULL;
        const char *origin = NULL;
        CHECK(tk_model_chat_template(models[i], t, &text, &origin, &err) == 0, "%s", err.msg);
        const char *want = tk_engine_chat_template(e);
        CHECK(origin && !strcmp(origin, tk_engine_chat_template_origin(e)), "%s: origin %s, engine %s", models[i],
              origin ? origin : "?", tk_engine_chat_template_origin(e));
        CHECK(want ? text && !strcmp(text, want) : !text, "%s: a different template", models[i]);
        CHECK(i == 0 ? origin && !strcmp(origin, "file") : 1, "code-target's template is its file's");
        free(text);
        tk_tokenizer_free(t);
        tk_engine_close(e);
    }
    tk_err err;
    char *text = NULL;
    const char *origin;
    CHECK(tk_model_chat_template(tk_shared("models/no-such-model.gguf"), NULL, &text, &origin, &err) != 0 && !text,
          "a missing model");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tk_test_public_api_%d", (int)getpid());
    mkdir(tmpdir, 0755);
    test_checks();
    test_synth_and_convert();
    test_tokenizer_and_chat();
    test_model_chat_template();
    rmdir(tmpdir);
    TK_TEST_END();
}
