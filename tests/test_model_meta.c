/* What a model file says besides its weights, read once with the model:
 *
 * - generation_config.json's eos_token_id (an int or a list) ends
 *   generation: a copy of code-draft whose config names an extra EOS id
 *   stops on the token that plain greedy decoding produces there, and
 *   ignore_eos still runs past it; the sampling defaults are reported, not
 *   applied.
 * - The chat template reaches tk_engine_chat_template: tokenizer_config.json's
 *   chat_template (a string, or a list of {name, template}) for a Hugging
 *   Face directory, tokenizer.chat_template for a GGUF file (written here
 *   from aidreams260K.gguf), NULL for files without one.
 * - Broken configs: a malformed generation_config.json fails the open with
 *   a message naming it; a malformed tokenizer_config.json is passed over
 *   beside a tokenizer.model and fails a tokenizer.json load with a message
 *   naming it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <tokamak.h>

#include "engine_test.h"
#include "formats/gguf.h"
#include "formats/llama_gguf.h"
#include "formats/source.h"
#include "tk_test.h"
#include "tokenizer/tokenizer.h"

static char root[256];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static int write_str(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = strlen(s);
    size_t w = fwrite(s, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* root/name: a directory of links to code-draft's files (those listed),
 * plus generation_config.json and tokenizer_config.json when given. */
static const char *make_dir(const char *name, const char *const *links, const char *gen_config,
                            const char *tok_config) {
    static char dir[512];
    char p[1024];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    if (mkdir(dir, 0755)) return NULL;
    for (int i = 0; links[i]; i++) {
        char from[512];
        snprintf(from, sizeof from, "models/code-draft/%s", links[i]);
        snprintf(p, sizeof p, "%s/%s", dir, links[i]);
        if (symlink(tk_shared(from), p)) return NULL;
    }
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    if (gen_config && write_str(p, gen_config)) return NULL;
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    if (tok_config && write_str(p, tok_config)) return NULL;
    return dir;
}

static const char *const model_files[] = {"config.json", "model.safetensors", "tokenizer.model", NULL};
static const char *const json_tok_files[] = {"config.json", "model.safetensors", "tokenizer.json", NULL};

/* ---------- generation stops on generation_config.json's eos ids ---------- */

typedef struct run {
    int32_t tokens[64];
    int n;
    bool done;
    char finish[16];
} run;

static void on_event(void *user, const tk_event *ev) {
    run *r = user;
    if (ev->token >= 0 && r->n < 64) r->tokens[r->n++] = ev->token;
    if (ev->done) {
        r->done = true;
        snprintf(r->finish, sizeof r->finish, "%s", ev->finish_reason);
    }
}

static int greedy(tk_engine *e, bool ignore_eos, int max_tokens, run *r) {
    memset(r, 0, sizeof *r);
    const char *prompt = "def fibonacci(n):\n    ";
    int32_t ids[64];
    int n = 0;
    tk_err err;
    if (tk_tokenize(tk_engine_tokenizer(e), prompt, strlen(prompt), true, false, ids, 64, &n, &err) || n > 64) {
        fprintf(stderr, "tokenize: %s\n", err.msg);
        return -1;
    }
    tk_request_params p = {.prompt = ids, .n_prompt = n, .max_tokens = max_tokens, .ignore_eos = ignore_eos,
                           .top_logprobs = -1};
    tk_sampling_defaults(&p.sampling);
    p.sampling.temperature = 0;
    return tk_test_run_requests(e, &p, 1, on_event, r, sizeof *r, NULL, NULL, 1000);
}

static tk_engine *open_engine(const char *path) {
    tk_engine_config cfg = {.model_path = path, .n_threads = 2, .ctx_len = 128, .require_tokenizer = true};
    return tk_test_open(&cfg, path);
}

static void test_eos_stop(void) {
    enum { N = 24 };
    tk_engine *e = open_engine(tk_shared("models/code-draft"));
    CHECK(e != NULL, "open code-draft");
    if (!e) return;
    run base;
    CHECK(greedy(e, false, N, &base) == 0 && base.done && base.n == N && !strcmp(base.finish, "length"),
          "plain greedy run: %d tokens, %s", base.n, base.finish);
    tk_engine_close(e);
    /* x: an id first produced at step k >= 3, not the tokenizer's EOS */
    int k = -1;
    for (int i = 3; i < base.n && k < 0; i++) {
        bool seen = base.tokens[i] == 2;
        for (int j = 0; j < i; j++) seen |= base.tokens[j] == base.tokens[i];
        if (!seen) k = i;
    }
    CHECK(k >= 0, "no fresh token in the greedy run");
    if (k < 0) return;
    int x = base.tokens[k];

    char gen[128];
    snprintf(gen, sizeof gen, "{\"bos_token_id\": 1, \"eos_token_id\": [2, %d], \"temperature\": 0.6, \"top_k\": 40}",
             x);
    const char *dir = make_dir("eos-list", model_files, gen, NULL);
    CHECK(dir != NULL, "make eos-list");
    if (!dir) return;
    e = open_engine(dir);
    CHECK(e != NULL, "open eos-list");
    if (!e) return;
    tk_gen_defaults g;
    tk_engine_generation_defaults(e, &g);
    CHECK(g.n_eos_ids == 2 && g.eos_ids[0] == 2 && g.eos_ids[1] == x, "eos ids %d", g.n_eos_ids);
    CHECK(g.temperature == 0.6f && g.top_k == 40 && g.top_p < 0, "sampling defaults reported");
    CHECK(tk_tokenizer_is_eog(tk_engine_tokenizer(e), x) && tk_tokenizer_is_eog(tk_engine_tokenizer(e), 2),
          "eos ids end generation");
    CHECK(tk_tokenizer_eos(tk_engine_tokenizer(e)) == 2, "the tokenizer's EOS stays");
    run r;
    CHECK(greedy(e, false, N, &r) == 0 && r.done, "eos-list run");
    CHECK(!strcmp(r.finish, "stop") && r.n == k + 1 && !memcmp(r.tokens, base.tokens, sizeof(int32_t) * (k + 1)),
          "stops on %d at step %d: %d tokens, %s", x, k, r.n, r.finish);
    /* the defaults are not applied: greedy stays greedy; ignore_eos runs on */
    CHECK(greedy(e, true, N, &r) == 0 && r.n == N && !memcmp(r.tokens, base.tokens, sizeof(int32_t) * N),
          "ignore_eos: %d tokens", r.n);
    tk_engine_close(e);

    /* a single int */
    snprintf(gen, sizeof gen, "{\"eos_token_id\": %d}", x);
    dir = make_dir("eos-int", model_files, gen, NULL);
    e = dir ? open_engine(dir) : NULL;
    CHECK(e != NULL, "open eos-int");
    if (!e) return;
    CHECK(greedy(e, false, N, &r) == 0 && !strcmp(r.finish, "stop") && r.n == k + 1, "int eos: %d tokens", r.n);
    tk_engine_close(e);
}

static void test_bad_gen_config(void) {
    static const struct {
        const char *name, *json, *want;
    } cases[] = {
        {"gen-syntax", "{\"eos_token_id\": [2,", "invalid JSON"},
        {"gen-range", "{\"eos_token_id\": 32000}", "outside the vocabulary"},
        {"gen-type", "{\"eos_token_id\": \"</s>\"}", "eos_token_id"},
        {"gen-many", "{\"eos_token_id\": [1,2,3,4,5,6,7,8,9]}", "too many"},
        {"gen-top", "[]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *dir = make_dir(cases[i].name, model_files, cases[i].json, NULL);
        CHECK(dir != NULL, "make %s", cases[i].name);
        if (!dir) continue;
        tk_engine_config cfg = {.model_path = dir, .n_threads = 1, .ctx_len = 16};
        tk_engine *e;
        tk_err err = {{0}};
        int rc = tk_engine_open(&cfg, &e, &err);
        CHECK(rc == -1, "%s: should fail", cases[i].name);
        if (rc == 0) tk_engine_close(e);
        CHECK(strstr(err.msg, "generation_config.json") && strstr(err.msg, cases[i].want), "%s: '%s'",
              cases[i].name, err.msg);
    }
}

/* ---------- chat templates ---------- */

static char *file_template(const char *tok_config) {
    json_error_t je;
    json_t *j = json_load_file(tok_config, JSON_DECODE_INT_AS_REAL, &je);
    const char *s = json_string_value(json_object_get(j, "chat_template"));
    char *out = s ? strdup(s) : NULL;
    json_decref(j);
    return out;
}

static void test_hf_templates(void) {
    tk_engine *e = open_engine(tk_shared("models/code-draft"));
    char *want = file_template(tk_shared("models/code-draft/tokenizer_config.json"));
    CHECK(e && want, "open code-draft, read its template");
    if (e && want) {
        const char *got = tk_engine_chat_template(e);
        CHECK(got && !strcmp(got, want), "code-draft: the tokenizer_config.json template");
    }
    free(want);
    tk_engine_close(e);

    static const struct {
        const char *name, *config, *want; /* want NULL: no template */
    } cases[] = {
        {"tmpl-list", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", "
                      "\"template\": \"D\"}], \"model_max_length\": 1000000000000000019884624838656}", "D"},
        {"tmpl-list-first", "{\"chat_template\": [{\"name\": \"a\", \"template\": \"A\"}, {\"name\": \"b\"}, 7]}", "A"},
        {"tmpl-number", "{\"chat_template\": 7, \"add_bos_token\": false}", NULL},
        {"tmpl-none", "{}", NULL},
        /* malformed: passed over beside tokenizer.model, as before */
        {"tmpl-broken", "{\"chat_template\": \"x", NULL},
        {"tmpl-array", "[\"chat_template\"]", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *dir = make_dir(cases[i].name, model_files, NULL, cases[i].config);
        e = dir ? open_engine(dir) : NULL;
        CHECK(e != NULL, "open %s", cases[i].name);
        if (!e) continue;
        /* no template in the file: the preset the Llama-2 vocabulary calls for */
        const char *got = tk_engine_chat_template(e), *origin = tk_engine_chat_template_origin(e);
        CHECK(cases[i].want ? got && !strcmp(got, cases[i].want) && !strcmp(origin, "file")
                            : got == tk_chat_preset_source("llama2") && !strcmp(origin, "llama2"),
              "%s: template '%s' from %s", cases[i].name, got ? got : "(none)", origin);
        bool add_bos = tk_tokenizer_add_bos(tk_engine_tokenizer(e));
        CHECK(add_bos == (strstr(cases[i].config, "\"add_bos_token\": false") == NULL), "%s: add_bos %d",
              cases[i].name, add_bos);
        tk_engine_close(e);
    }

    /* tokenizer.json needs its config: a broken one is an error naming it */
    const char *dir = make_dir("json-broken", json_tok_files, NULL, "{\"bos_token\": ");
    CHECK(dir != NULL, "make json-broken");
    if (dir) {
        tk_engine_config cfg = {.model_path = dir, .n_threads = 1, .ctx_len = 16, .require_tokenizer = true};
        tk_err err = {{0}};
        int rc = tk_engine_open(&cfg, &e, &err);
        CHECK(rc == -1 && strstr(err.msg, "tokenizer_config.json") && strstr(err.msg, "invalid JSON"), "json-broken: %s",
              rc ? err.msg : "opened");
        if (rc == 0) tk_engine_close(e);
        /* without require_tokenizer the model opens, with no tokenizer */
        cfg.require_tokenizer = false;
        rc = tk_engine_open(&cfg, &e, &err);
        CHECK(rc == 0 && !tk_engine_tokenizer(e) && !tk_engine_chat_template(e), "json-broken, no tokenizer needed");
        if (rc == 0) tk_engine_close(e);
    }
    /* tokenizer.json with a good config: the template and the tokenizer */
    dir = make_dir("json-ok", json_tok_files, NULL, "{\"chat_template\": \"J\", \"bos_token\": \"<s>\"}");
    e = dir ? open_engine(dir) : NULL;
    CHECK(e && tk_engine_chat_template(e) && !strcmp(tk_engine_chat_template(e), "J") &&
              tk_tokenizer_bos(tk_engine_tokenizer(e)) == 1,
          "json-ok");
    tk_engine_close(e);
}

/* aidreams260K.gguf rewritten with a tokenizer.chat_template (a string, or
 * of another type, which is no template). */
static int write_gguf(const char *path, const char *tmpl, bool as_string) {
    tk_source src;
    tk_tokenizer *tok = NULL;
    tk_err err;
    if (tk_source_open(tk_shared("models/aidreams260K.gguf"), &src, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    tk_gguf_writer *w = tk_gguf_writer_new();
    int rc = -1;
    if (!w || tk_tokenizer_from_source(&src, NULL, &tok, &err) || tk_gguf_set_llama_meta(w, &src, 0) ||
        tk_tokenizer_to_gguf(tok, w, &err))
        goto done;
    if (as_string ? tk_gguf_set_str(w, "tokenizer.chat_template", tmpl)
                  : tk_gguf_set_u32(w, "tokenizer.chat_template", 7))
        goto done;
    for (int i = 0; i < src.n_tensors; i++) {
        const tk_tensor *t = &src.tensors[i];
        if (tk_gguf_add_tensor(w, t->name, t->type, t->ndim, t->ne, t->data, t->nbytes)) goto done;
    }
    rc = tk_gguf_write(w, path, &err);
done:
    if (rc) fprintf(stderr, "write %s: %s\n", path, err.msg);
    tk_gguf_writer_free(w);
    tk_tokenizer_free(tok);
    tk_source_close(&src);
    return rc;
}

static void test_gguf_templates(void) {
    const char *tmpl = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}";
    char path[512];
    snprintf(path, sizeof path, "%s/tmpl.gguf", root);
    CHECK(write_gguf(path, tmpl, true) == 0, "write tmpl.gguf");
    tk_engine *e = open_engine(path);
    CHECK(e && tk_engine_chat_template(e) && !strcmp(tk_engine_chat_template(e), tmpl), "GGUF template");
    if (e) {
        tk_gen_defaults g;
        tk_engine_generation_defaults(e, &g);
        CHECK(g.n_eos_ids == 0 && g.temperature < 0 && g.top_p < 0 && g.top_k < 0, "GGUF: no generation defaults");
        /* the tokenizer is the file's own, as tk_tokenizer_open reads it */
        tk_tokenizer *t;
        tk_err err;
        CHECK(tk_tokenizer_open(path, NULL, &t, &err) == 0, "%s", err.msg);
        if (t) {
            CHECK(tk_tokenizer_n_vocab(t) == tk_tokenizer_n_vocab(tk_engine_tokenizer(e)) &&
                      tk_tokenizer_bos(t) == tk_tokenizer_bos(tk_engine_tokenizer(e)),
                  "same tokenizer");
            tk_tokenizer_free(t);
        }
    }
    tk_engine_close(e);

    snprintf(path, sizeof path, "%s/tmpl-u32.gguf", root);
    CHECK(write_gguf(path, tmpl, false) == 0, "write tmpl-u32.gguf");
    e = open_engine(path);
    CHECK(e && !tk_engine_chat_template(e), "GGUF template of another type: none");
    tk_engine_close(e);

    e = open_engine(tk_shared("models/aidreams260K.gguf"));
    CHECK(e && !tk_engine_chat_template(e), "aidreams260K.gguf: no template");
    tk_engine_close(e);

    tk_engine_config cfg = {.model_path = tk_shared("models/aidreams260K.bin"), .n_threads = 1,
                            .tokenizer_path = tk_shared("models/aidreams260K.tok512.bin")};
    e = tk_test_open(&cfg, "aidreams260K.bin");
    CHECK(e && !tk_engine_chat_template(e) && tk_tokenizer_n_vocab(tk_engine_tokenizer(e)) == 512,
          "llama2.c: no template, tokenizer.bin override");
    tk_engine_close(e);
}

int main(void) {
    struct stat st;
    if (stat(tk_shared("models/code-draft"), &st) != 0) TK_SKIP("../shared/models/code-draft is not present");
    snprintf(root, sizeof root, "/tmp/tk_model_meta_XXXXXX");
    if (!mkdtemp(root)) TK_SKIP("cannot create a temp dir");
    test_eos_stop();
    test_bad_gen_config();
    test_hf_templates();
    test_gguf_templates();
    nftw(root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    TK_TEST_END();
}
