/* tk_tokenizer_open and tk_tokenizer_from_source: pick the loader from the
 * model (a path: GGUF file, HF directory or tokenizer.json, llama2.c
 * checkpoint + tokenizer.bin; or an open tk_source, whose metadata is
 * reused). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "../formats/gguf.h"
#include "../formats/source.h"
#include "tok_internal.h"

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

/* Reads the first n bytes of a file; returns the count read or -1. */
static int read_head(const char *path, unsigned char *buf, int n, tk_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return tk_err_set(err, "%s: cannot open", path);
    size_t r = fread(buf, 1, (size_t)n, f);
    fclose(f);
    return (int)r;
}

static int from_gguf_path(const char *path, tk_tokenizer **out, tk_err *err) {
    tk_gguf *g = NULL;
    if (tk_gguf_open(path, &g, err)) return -1;
    int rc = tk_tokenizer_from_gguf(g, out, err);
    tk_gguf_close(g);
    if (rc) return tk_err_wrap(err, "%s", path);
    return 0;
}

/* A HF directory: like llama.cpp's converter, prefer the SentencePiece
 * tokenizer.model when there is one (it is the original vocabulary; a
 * tokenizer.json beside it is derived and can be stale or mismatched), then
 * apply tokenizer_config.json's add_bos_token (cfg; a config that could not
 * be read, cfg_error, is then passed over).  Otherwise tokenizer.json, which
 * needs the config. */
static int from_hf_dir(const char *dir, const json_t *cfg, const char *cfg_error, tk_tokenizer **out,
                       tk_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        return tk_tokenizer_from_hf_json(path, cfg, cfg_error, out, err);
    }
    if (tk_tokenizer_from_spm_model(path, out, err)) return -1;
    json_t *add_bos = cfg ? json_object_get(cfg, "add_bos_token") : NULL;
    if (json_is_boolean(add_bos)) (*out)->add_bos = json_is_true(add_bos);
    return 0;
}

/* A HF directory given by path: reads its tokenizer_config.json first. */
static int from_hf_dir_path(const char *dir, tk_tokenizer **out, tk_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_t *cfg;
    tk_err cfg_err;
    int bad = tk_hf_tokenizer_config_read(path, &cfg, &cfg_err);
    int rc = from_hf_dir(dir, cfg, bad ? cfg_err.msg : NULL, out, err);
    json_decref(cfg);
    return rc;
}

/* A path that names a tokenizer by itself (not a llama2.c tokenizer.bin). */
static int open_self_describing(const char *path, bool *handled, tk_tokenizer **out, tk_err *err) {
    *handled = true;
    if (is_dir(path)) return from_hf_dir_path(path, out, err);
    if (ends_with(path, ".json")) return tk_tokenizer_from_hf(path, out, err);
    if (ends_with(path, ".model")) return tk_tokenizer_from_spm_model(path, out, err);
    unsigned char head[4] = {0};
    int n = read_head(path, head, 4, err);
    if (n < 0) return -1;
    if (n == 4 && !memcmp(head, "GGUF", 4)) return from_gguf_path(path, out, err);
    *handled = false;
    return 0;
}

/* An explicit tokenizer, overriding the model's own: self-describing, or a
 * llama2.c tokenizer.bin of vocab_size tokens (0: every record). */
static int open_override(const char *tokenizer_path, int vocab_size, tk_tokenizer **out, tk_err *err) {
    bool handled = false;
    int rc = open_self_describing(tokenizer_path, &handled, out, err);
    if (handled) return rc;
    return tk_tokenizer_from_llama2c(tokenizer_path, vocab_size, out, err);
}

int tk_tokenizer_open(const char *model_path, const char *tokenizer_path, tk_tokenizer **out,
                      tk_err *err) {
    *out = NULL;
    if (!tokenizer_path) {
        if (!model_path) return tk_err_set(err, "no model or tokenizer path given");
        bool handled = false;
        int rc = open_self_describing(model_path, &handled, out, err);
        if (handled) return rc;
        unsigned char head[28];
        int n = read_head(model_path, head, 28, err);
        if (n < 0) return -1;
        if (n < 28)
            return tk_err_set(err, "%s: not a GGUF file, tokenizer.json or llama2.c checkpoint", model_path);
        return tk_err_set(err, "%s: a llama2.c checkpoint has no vocabulary: give its tokenizer.bin", model_path);
    }
    /* a llama2.c checkpoint still tells the vocabulary size of a
     * tokenizer.bin (header[5]) */
    int vocab_size = 0;
    if (model_path && !is_dir(model_path) && !ends_with(model_path, ".json")) {
        unsigned char head[28];
        int n = read_head(model_path, head, 28, err);
        if (n == 28 && memcmp(head, "GGUF", 4) != 0) {
            int32_t h5;
            memcpy(&h5, head + 20, 4);
            if (h5 != INT32_MIN) vocab_size = h5 < 0 ? -h5 : h5;
            if (vocab_size > (1 << 24)) vocab_size = 0;
        }
    }
    return open_override(tokenizer_path, vocab_size, out, err);
}

int tk_tokenizer_from_source(const tk_source *src, const char *tokenizer_path, tk_tokenizer **out, tk_err *err) {
    *out = NULL;
    int rc;
    if (tokenizer_path)
        rc = open_override(tokenizer_path, src->format == TK_FORMAT_LLAMA2C ? src->hp.n_vocab : 0, out, err);
    else if (src->format == TK_FORMAT_GGUF)
        rc = tk_tokenizer_from_gguf(src->gguf, out, err) ? tk_err_wrap(err, "%s", src->path) : 0;
    else if (src->format == TK_FORMAT_HF)
        rc = from_hf_dir(src->path, src->hf_tok_config, src->hf_tok_config_error, out, err);
    else
        rc = tk_err_set(err, "%s: a llama2.c checkpoint has no vocabulary: give its tokenizer.bin", src->path);
    if (rc) return -1;
    for (int i = 0; i < src->gen.n_eos_ids; i++)
        if (tk_eog_add(*out, src->gen.eos_ids[i])) {
            tk_tokenizer_free(*out);
            *out = NULL;
            return tk_err_set(err, "out of memory");
        }
    return 0;
}
