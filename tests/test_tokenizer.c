/* Tokenizer tests: llama.cpp's conformance vectors (shared/tokenizer-tests),
 * llama2.c tokenizer.bin, tokenizer.bin vs tokenizer.json agreement,
 * streaming detokenization, invalid UTF-8, hostile inputs, GGUF export. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <pthread.h>
#include <sys/wait.h>

#include "formats/gguf.h"
#include "tk_test.h"
#include "tokenizer/tokenizer.h"
#include <tokamak.h> /* tk_mapfile, tk_read_file */

/* tests/data/tok_corpus.txt, found next to this source file */
static const char *corpus_path(void) {
    static char buf[2048];
    const char *f = __FILE__;
    const char *slash = strrchr(f, '/');
    int dir = slash ? (int)(slash - f) : 1;
    snprintf(buf, sizeof buf, "%.*s/data/tok_corpus.txt", dir, slash ? f : ".");
    return buf;
}
#define TK_CORPUS corpus_path()

/* Encodes into a malloc'd array; returns the count or -1 (err filled). */
static int enc(const tk_tokenizer *t, const char *s, size_t n, bool bos, bool special, int32_t **out,
               tk_err *err) {
    int cnt = 0;
    *out = NULL;
    if (tk_tokenize(t, s, n, bos, special, NULL, 0, &cnt, err)) return -1;
    *out = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof **out);
    int cnt2 = 0;
    if (tk_tokenize(t, s, n, bos, special, *out, cnt, &cnt2, err) || cnt2 != cnt) return -1;
    return cnt;
}

static void print_ids(FILE *f, const int32_t *v, int n) {
    for (int i = 0; i < n; i++) fprintf(f, " %d", v[i]);
}

/* ---- llama.cpp conformance vectors (test-tokenizer-0 reads them the same way:
 * inputs separated by "\n__ggml_vocab_test__\n", one output line per input,
 * add_special = false, parse_special = false) ---- */

static void run_vectors(const tk_tokenizer *t, const char *name) {
    char inp_path[1024], out_path[1024];
    snprintf(inp_path, sizeof inp_path, "%s", tk_shared("tokenizer-tests/"));
    snprintf(inp_path + strlen(inp_path), sizeof inp_path - strlen(inp_path), "%s.inp", name);
    snprintf(out_path, sizeof out_path, "%s", tk_shared("tokenizer-tests/"));
    snprintf(out_path + strlen(out_path), sizeof out_path - strlen(out_path), "%s.out", name);
    char *inp = NULL, *outp = NULL;
    size_t inl = 0, outl = 0;
    tk_err err;
    if (tk_read_file(inp_path, &inp, &inl, &err) || tk_read_file(out_path, &outp, &outl, &err)) {
        CHECK(0, "%s", err.msg);
        free(inp);
        return;
    }
    const char *sep = "\n__ggml_vocab_test__\n";
    size_t seplen = strlen(sep);
    size_t ip = 0;
    char *op = outp;
    int n_tests = 0, n_ok = 0;
    while (ip < inl) {
        const char *next = strstr(inp + ip, sep);
        size_t end = next ? (size_t)(next - inp) : inl;
        /* expected line */
        char *nl = strchr(op, '\n');
        if (!*op && !nl) {
            CHECK(0, "%s: more inputs than output lines", name);
            break;
        }
        size_t ol = nl ? (size_t)(nl - op) : strlen(op);
        int32_t expect[4096];
        int ne = 0;
        char *q = op, *qe = op + ol;
        while (q < qe && ne < 4096) {
            while (q < qe && (*q == ' ' || *q == '\r')) q++;
            if (q >= qe) break;
            expect[ne++] = (int32_t)strtol(q, &q, 10);
        }
        op = nl ? nl + 1 : op + ol;

        int32_t *got = NULL;
        int ng = enc(t, inp + ip, end - ip, false, false, &got, &err);
        n_tests++;
        bool ok = ng == ne && (ng == 0 || memcmp(got, expect, (size_t)ng * sizeof *got) == 0);
        if (ok) {
            n_ok++;
        } else {
            fprintf(stderr, "%s: input '%.*s'\n  expected:", name, (int)(end - ip), inp + ip);
            print_ids(stderr, expect, ne);
            fprintf(stderr, "\n  got:     ");
            if (ng < 0) fprintf(stderr, " error: %s", err.msg);
            else print_ids(stderr, got, ng);
            fprintf(stderr, "\n");
        }
        CHECK(ok, "%s vector %d", name, n_tests);
        free(got);
        if (!next) break;
        ip = end + seplen;
    }
    printf("%s: %d/%d vectors match\n", name, n_ok, n_tests);
    CHECK(n_tests >= 40, "%s: only %d vectors read", name, n_tests);
    free(inp);
    free(outp);
}

static void test_conformance(void) {
    tk_err err;
    tk_tokenizer *t = NULL;
    if (tk_tokenizer_open(tk_shared("tokenizer-tests/ggml-vocab-llama-spm.gguf"), NULL, &t, &err) == 0) {
        CHECK(tk_tokenizer_kind(t) == TK_TOK_SPM, "llama-spm kind");
        CHECK(tk_tokenizer_add_bos(t), "llama-spm adds BOS");
        run_vectors(t, "ggml-vocab-llama-spm.gguf");
        tk_tokenizer_free(t);
    } else {
        CHECK(0, "llama-spm: %s", err.msg);
    }
    if (tk_tokenizer_open(tk_shared("tokenizer-tests/ggml-vocab-gpt-2.gguf"), NULL, &t, &err) == 0) {
        CHECK(tk_tokenizer_kind(t) == TK_TOK_BPE, "gpt-2 kind");
        CHECK(!tk_tokenizer_add_bos(t), "gpt-2 adds no BOS");
        run_vectors(t, "ggml-vocab-gpt-2.gguf");
        tk_tokenizer_free(t);
    } else {
        CHECK(0, "gpt-2: %s", err.msg);
    }
    double t0 = tk_clock_seconds(TK_CLOCK_WALL);
    if (tk_tokenizer_open(tk_shared("tokenizers/llama3/tokenizer.json"), NULL, &t, &err) == 0) {
        double dt = tk_clock_seconds(TK_CLOCK_WALL) - t0;
        printf("llama3 tokenizer.json loaded in %.3f s\n", dt);
        printf("loading the Llama-3 tokenizer.json took %.3f s\n", dt); /* reported, not asserted: speed belongs to benchmarks */
        CHECK(tk_tokenizer_n_vocab(t) == 128256, "llama3 vocab %d", tk_tokenizer_n_vocab(t));
        CHECK(tk_tokenizer_bos(t) == 128000, "llama3 bos %d", tk_tokenizer_bos(t));
        CHECK(tk_tokenizer_add_bos(t), "llama3 adds BOS");
        CHECK(tk_tokenizer_is_eog(t, 128009), "<|eot_id|> is EOG");
        CHECK(tk_tokenizer_is_eog(t, 128001), "<|end_of_text|> is EOG");
        CHECK(!tk_tokenizer_is_eog(t, 128000), "BOS is not EOG");
        run_vectors(t, "ggml-vocab-llama-bpe.gguf");
        tk_tokenizer_free(t);
    } else {
        CHECK(0, "llama3: %s", err.msg);
    }
}

/* ---- helpers ---- */

static tk_tokenizer *open_tok(const char *model, const char *tok) {
    tk_err err;
    tk_tokenizer *t = NULL;
    if (tk_tokenizer_open(model, tok, &t, &err)) {
        CHECK(0, "open %s / %s: %s", model ? model : "-", tok ? tok : "-", err.msg);
        return NULL;
    }
    return t;
}

static bool ids_eq(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

/* Lines of a file (split on '\n' only), NULL-terminated; *buf owns them. */
static char **file_lines(const char *path, char **buf, int *n) {
    size_t len;
    tk_err err;
    *n = 0;
    if (tk_read_file(path, buf, &len, &err)) return NULL;
    int cap = 64;
    char **v = malloc((size_t)cap * sizeof *v);
    char *p = *buf;
    while (*p) {
        char *nl = strchr(p, '\n');
        if (*n + 1 >= cap) {
            cap *= 2;
            v = realloc(v, (size_t)cap * sizeof *v);
        }
        v[(*n)++] = p;
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    v[*n] = NULL;
    return v;
}

/* ---- llama2.c tokenizer.bin ---- */

static void test_llama2c(void) {
    static const int32_t want[] = {1, 303, 281, 269, 435, 447, 328};
    tk_err err;
    tk_tokenizer *t = NULL;
    CHECK(tk_tokenizer_from_llama2c(tk_shared("models/aidreams260K.tok512.bin"), 512, &t, &err) == 0, "%s", err.msg);
    if (t) {
        int32_t *ids;
        int n = enc(t, "I dreamed", 9, true, true, &ids, &err);
        CHECK(ids_eq(ids, n, want, 7), "aidreams 'I dreamed' (got %d tokens)", n);
        free(ids);
        CHECK(tk_tokenizer_n_vocab(t) == 512, "vocab %d", tk_tokenizer_n_vocab(t));
        CHECK(!strcmp(tk_tokenizer_piece(t, 1), "<s>") && tk_tokenizer_token_type(t, 1) == TK_TOKEN_CONTROL,
              "BOS piece '%s'", tk_tokenizer_piece(t, 1));
        CHECK(tk_tokenizer_bos(t) == 1 && tk_tokenizer_eos(t) == 2 && tk_tokenizer_is_eog(t, 2), "special ids");
        CHECK(tk_tokenizer_token_type(t, 3) == TK_TOKEN_BYTE, "<0x00> is a byte piece");
        tk_tokenizer_free(t);
    }
    /* through tk_tokenizer_open: checkpoint header gives the vocab size */
    t = open_tok(tk_shared("models/aidreams260K.bin"), tk_shared("models/aidreams260K.tok512.bin"));
    if (t) {
        int32_t *ids;
        int n = enc(t, "I dreamed", 9, tk_tokenizer_add_bos(t), true, &ids, &err);
        CHECK(ids_eq(ids, n, want, 7), "open(aidreams.bin, tok512.bin)");
        free(ids);
        tk_tokenizer_free(t);
    }
    /* the same vocabulary from llama.cpp's converted GGUF */
    t = open_tok(tk_shared("models/aidreams260K.gguf"), NULL);
    if (t) {
        int32_t *ids;
        int n = enc(t, "I dreamed", 9, tk_tokenizer_add_bos(t), true, &ids, &err);
        CHECK(ids_eq(ids, n, want, 7), "aidreams260K.gguf 'I dreamed'");
        free(ids);
        tk_tokenizer_free(t);
    }
    /* a checkpoint without a tokenizer is an error naming the fix */
    t = NULL;
    CHECK(tk_tokenizer_open(tk_shared("models/aidreams260K.bin"), NULL, &t, &err) != 0 && strstr(err.msg, "tokenizer.bin"),
          "checkpoint without tokenizer: %s", err.msg);
}

/* code-target's golden prompts were tokenized with the Llama-2 tokenizer.bin */
static void test_golden_prompts(void) {
    tk_tokenizer *t = open_tok(tk_shared("models/code-target.llama2c.bin"), tk_shared("tokenizers/llama2/tokenizer.bin"));
    if (!t) return;
    json_error_t je;
    json_t *g = json_load_file(tk_shared("models/code-target.golden.json"), 0, &je);
    CHECK(json_is_array(g), "golden json: %s", je.text);
    size_t i;
    json_t *c;
    int n_cases = 0;
    json_array_foreach(g, i, c) {
        json_t *pr = json_object_get(c, "prompt"), *tk = json_object_get(c, "tokens");
        if (!json_is_string(pr) || !json_is_array(tk)) continue;
        int nw = (int)json_array_size(tk);
        int32_t *want = malloc((size_t)nw * sizeof *want);
        for (int k = 0; k < nw; k++) want[k] = (int32_t)json_integer_value(json_array_get(tk, (size_t)k));
        int32_t *ids;
        tk_err err;
        int n = enc(t, json_string_value(pr), json_string_length(pr), tk_tokenizer_add_bos(t), true, &ids, &err);
        CHECK(ids_eq(ids, n, want, nw), "golden prompt %zu", i);
        n_cases++;
        free(want);
        free(ids);
    }
    CHECK(n_cases == 3, "golden cases %d", n_cases);
    json_decref(g);
    tk_tokenizer_free(t);
}

/* Two independent files holding the Llama-2 vocabulary (llama2.c's
 * tokenizer.bin and llama.cpp's GGUF) must tokenize identically. */
static void test_bin_vs_gguf(void) {
    tk_tokenizer *a = open_tok(NULL, tk_shared("tokenizers/llama2/tokenizer.bin"));
    tk_tokenizer *b = open_tok(tk_shared("tokenizer-tests/ggml-vocab-llama-spm.gguf"), NULL);
    if (!a || !b) goto out;
    const char *files[] = {tk_shared("models/code-eval.txt"), TK_CORPUS, NULL};
    int compared = 0, differ = 0;
    for (int f = 0; files[f]; f++) {
        char *buf = NULL;
        int n;
        char **lines = file_lines(files[f], &buf, &n);
        CHECK(lines != NULL, "read %s", files[f]);
        for (int i = 0; i < n; i++) {
            for (int sp = 0; sp < 2; sp++) {
                int32_t *x, *y;
                tk_err e1, e2;
                int nx = enc(a, lines[i], strlen(lines[i]), true, sp, &x, &e1);
                int ny = enc(b, lines[i], strlen(lines[i]), true, sp, &y, &e2);
                compared++;
                if (!ids_eq(x, nx, y, ny)) {
                    if (differ++ < 5) fprintf(stderr, "bin vs gguf differ on '%s'\n", lines[i]);
                }
                free(x);
                free(y);
            }
        }
        free(lines);
        free(buf);
    }
    printf("llama2 tokenizer.bin vs ggml-vocab-llama-spm.gguf: %d encodings compared, %d differ\n", compared, differ);
    CHECK(differ == 0 && compared > 1000, "%d of %d differ", differ, compared);
out:
    tk_tokenizer_free(a);
    tk_tokenizer_free(b);
}

/* ---- decoding ---- */

static bool valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (i < n) {
        unsigned c = p[i];
        int k = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!k || i + (size_t)k > n) return false;
        for (int j = 1; j < k; j++)
            if ((p[i + j] & 0xC0) != 0x80) return false;
        i += (size_t)k;
    }
    return true;
}

/* decode(encode(x)) == x, fed one token at a time; every chunk is complete UTF-8. */
static int roundtrip(const tk_tokenizer *t, const char *x, size_t n, const char *name) {
    /* SentencePiece cannot give back a literal U+2581: it is the space marker */
    if (tk_tokenizer_kind(t) == TK_TOK_SPM && memmem(x, n, "\xe2\x96\x81", 3)) return 0;
    int32_t *ids;
    tk_err err;
    bool bos = tk_tokenizer_bos(t) >= 0;
    int k = enc(t, x, n, bos, false, &ids, &err);
    if (k < 0) {
        CHECK(0, "%s: encode: %s", name, err.msg);
        return 1;
    }
    tk_detok d;
    tk_detok_init(&d, t, -1);
    size_t cap = n * 3 + 64, len = 0;
    char *out = malloc(cap);
    bool chunks_ok = true;
    for (int i = 0; i < k; i++) {
        int w = tk_detok_push(&d, ids[i], out + len, (int)(cap - len));
        if (w < 0) {
            chunks_ok = false;
            break;
        }
        if (!valid_utf8(out + len, (size_t)w)) chunks_ok = false;
        len += (size_t)w;
    }
    int w = tk_detok_flush(&d, out + len, (int)(cap - len));
    bool ok = chunks_ok && w == 0 && len == n && memcmp(out, x, n) == 0;
    if (!ok) fprintf(stderr, "%s: round trip of '%.*s' gave '%.*s'\n", name, (int)n, x, (int)len, out);
    free(out);
    free(ids);
    return ok ? 0 : 1;
}

static void test_roundtrip(void) {
    const char *paths[][2] = {
        {NULL, "tokenizers/llama2/tokenizer.bin"},
        {"tokenizers/llama2/tokenizer.json", NULL},
        {"tokenizers/llama3/tokenizer.json", NULL},
        {"tokenizer-tests/ggml-vocab-gpt-2.gguf", NULL},
        {"tokenizer-tests/ggml-vocab-llama-spm.gguf", NULL},
    };
    static const char *extra[] = {
        "", " ", "\n", "line one\nline two\r\n\ttabbed\n\n", "中文 and 日本語 and 한국어 🦙🦙🦙",
        "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 family", "   leading spaces",
        "trailing spaces   ", "e\xcc\x81\xcc\x82\xcc\x83 combining", "\xf4\x8f\xbf\xbd astral",
    };
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        const char *m = paths[p][0] ? tk_shared(paths[p][0]) : NULL;
        const char *tk = paths[p][1] ? tk_shared(paths[p][1]) : NULL;
        const char *name = paths[p][0] ? paths[p][0] : paths[p][1];
        tk_tokenizer *t = open_tok(m, tk);
        if (!t) continue;
        int bad = 0, total = 0;
        char *buf = NULL;
        int n;
        char **lines = file_lines(TK_CORPUS, &buf, &n);
        for (int i = 0; lines && i < n; i++, total++) bad += roundtrip(t, lines[i], strlen(lines[i]), name);
        free(lines);
        free(buf);
        for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++, total++) bad += roundtrip(t, extra[i], strlen(extra[i]), name);
        char *code = NULL;
        size_t cl;
        tk_err err;
        if (tk_read_file(tk_shared("models/code-eval.txt"), &code, &cl, &err) == 0) {
            bad += roundtrip(t, code, cl, name);
            total++;
        }
        free(code);
        CHECK(bad == 0, "%s: %d of %d round trips failed", name, bad, total);
        tk_tokenizer_free(t);
    }
}

static void test_detok_bytes(void) {
    tk_tokenizer *t = open_tok(tk_shared("tokenizer-tests/ggml-vocab-llama-spm.gguf"), NULL);
    if (!t) return;
    int e4 = tk_tokenizer_find(t, "<0xE4>"), b8 = tk_tokenizer_find(t, "<0xB8>"), ad = tk_tokenizer_find(t, "<0xAD>");
    int ff = tk_tokenizer_find(t, "<0xFF>"), a = tk_tokenizer_find(t, "a"), hello = tk_tokenizer_find(t, "\xe2\x96\x81Hello");
    CHECK(e4 > 0 && b8 > 0 && ad > 0 && ff > 0 && a > 0 && hello > 0, "byte pieces present");
    char out[64];
    tk_detok d;
    tk_detok_init(&d, t, -1);
    CHECK(tk_detok_push(&d, e4, out, sizeof out) == 0, "partial 1 held back");
    CHECK(tk_detok_push(&d, b8, out, sizeof out) == 0, "partial 2 held back");
    int n = tk_detok_push(&d, ad, out, sizeof out);
    CHECK(n == 3 && !memcmp(out, "\xe4\xb8\xad", 3), "completed character emitted (%d)", n);
    n = tk_detok_push(&d, ff, out, sizeof out);
    CHECK(n == 3 && !memcmp(out, "\xef\xbf\xbd", 3), "invalid byte -> U+FFFD (%d)", n);
    CHECK(tk_detok_push(&d, e4, out, sizeof out) == 0, "partial held back");
    n = tk_detok_push(&d, a, out, sizeof out);
    CHECK(n == 4 && !memcmp(out, "\xef\xbf\xbd" "a", 4), "broken sequence -> U+FFFD then 'a' (%d)", n);
    tk_detok_push(&d, e4, out, sizeof out);
    tk_detok_push(&d, b8, out, sizeof out);
    n = tk_detok_flush(&d, out, sizeof out);
    CHECK(n == 3 && !memcmp(out, "\xef\xbf\xbd", 3), "flush of a partial -> U+FFFD (%d)", n);
    CHECK(tk_detok_flush(&d, out, sizeof out) == 0, "nothing left");
    /* cap too small: nothing consumed */
    tk_detok_init(&d, t, -1);
    n = tk_detok_push(&d, hello, out, 2);
    CHECK(n == -6, "needs 6 bytes, got %d", n);
    n = tk_detok_push(&d, hello, out, sizeof out);
    CHECK(n == 6 && !memcmp(out, " Hello", 6), "' Hello' (%d)", n);
    /* SPM: a leading space is dropped after BOS only */
    n = tk_token_to_bytes(t, 1, hello, false, out, sizeof out);
    CHECK(n == 5 && !memcmp(out, "Hello", 5), "after BOS: '%.*s'", n, out);
    n = tk_token_to_bytes(t, -1, hello, false, out, sizeof out);
    CHECK(n == 6, "no BOS before: %d", n);
    CHECK(tk_token_to_bytes(t, -1, 1, false, out, sizeof out) == 0, "control hidden");
    n = tk_token_to_bytes(t, -1, 1, true, out, sizeof out);
    CHECK(n == 3 && !memcmp(out, "<s>", 3), "control rendered");
    CHECK(tk_token_to_bytes(t, -1, hello, false, out, 3) == -6, "too small -> -needed");
    CHECK(tk_token_to_bytes(t, -1, 999999, false, out, sizeof out) == 0, "bad id -> nothing");
    tk_tokenizer_free(t);

    t = open_tok(tk_shared("tokenizers/llama3/tokenizer.json"), NULL);
    if (!t) return;
    int sp = tk_tokenizer_find(t, "\xc4\xa0Hello"); /* "ĠHello" */
    n = tk_token_to_bytes(t, 128000, sp, false, out, sizeof out);
    CHECK(n == 6 && !memcmp(out, " Hello", 6), "byte-level keeps the space after BOS: '%.*s'", n, out);
    tk_tokenizer_free(t);
}

/* ---- input validation ---- */

static void test_invalid_utf8(void) {
    const char *paths[] = {"tokenizer-tests/ggml-vocab-llama-spm.gguf", "tokenizers/llama3/tokenizer.json",
                           "tokenizers/llama2/tokenizer.json", "tokenizer-tests/ggml-vocab-gpt-2.gguf"};
    static const struct { const char *s; size_t n; size_t at; } bad[] = {
        {"abc\xff", 4, 3}, {"\x80", 1, 0}, {"ok \xc0\xaf", 5, 3}, {"\xed\xa0\x80 surrogate", 12, 0},
        {"x\xe4\xb8", 3, 1}, {"12\xf5\x80\x80\x80", 6, 2}, {"\xf4\x90\x80\x80", 4, 0}, {"a\xe4" "a", 3, 1},
    };
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        tk_tokenizer *t = open_tok(tk_shared(paths[p]), NULL);
        if (!t) continue;
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            tk_err err = {{0}};
            int n = -1;
            int rc = tk_tokenize(t, bad[i].s, bad[i].n, true, true, NULL, 0, &n, &err);
            char want[64];
            snprintf(want, sizeof want, "invalid UTF-8 at byte %zu", bad[i].at);
            CHECK(rc == -1 && !strcmp(err.msg, want), "%s case %zu: rc %d '%s'", paths[p], i, rc, err.msg);
        }
        /* cap smaller than the count: *n_out tells the total */
        int32_t ids[2];
        int n = 0;
        tk_err err;
        CHECK(tk_tokenize(t, "hello world, hello world", 24, false, false, ids, 2, &n, &err) == 0 && n > 2,
              "count beyond cap: %d", n);
        CHECK(tk_tokenize(t, "", 0, false, false, ids, 2, &n, &err) == 0 && n == 0, "empty text");
        tk_tokenizer_free(t);
    }
}

/* ---- hostile inputs ---- */

static char tmpdir[256];

static const char *tmp_file(const char *name, const void *data, size_t n) {
    static char path[8][512];
    static int slot;
    char *p = path[slot++ & 7];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
    return p;
}

static void expect_hf_error(const char *json, const char *want, int line) {
    const char *p = tmp_file("bad.json", json, strlen(json));
    tk_err err = {{0}};
    tk_tokenizer *t = NULL;
    int rc = tk_tokenizer_from_hf(p, &t, &err);
    CHECK(rc == -1 && t == NULL && strstr(err.msg, want), "line %d: want error containing '%s', got rc %d '%s'",
          line, want, rc, err.msg);
    tk_tokenizer_free(t);
}

#define MODEL_OK "\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"\\u0120\":3}"
#define BL "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}"

static void test_hostile_json(void) {
    /* a valid miniature byte-level tokenizer first */
    const char *ok = "{\"model\":{" MODEL_OK ",\"merges\":[\"a b\"]}," BL "}";
    const char *p = tmp_file("ok.json", ok, strlen(ok));
    tk_err err;
    tk_tokenizer *t = NULL;
    CHECK(tk_tokenizer_from_hf(p, &t, &err) == 0, "mini tokenizer: %s", err.msg);
    if (t) {
        int32_t *ids;
        static const int32_t want[] = {2, 3, 0};
        int n = enc(t, "ab a", 4, false, true, &ids, &err);
        CHECK(ids_eq(ids, n, want, 3), "mini tokenizer encodes 'ab a' (%d)", n);
        free(ids);
        tk_tokenizer_free(t);
    }
    /* Replace steps whose replacement holds what they replace: 12 steps of
     * "a" -> 10 a's would make a one-byte text 10^12 bytes; refused at 64x */
    char chain[2048];
    int k = snprintf(chain, sizeof chain, "{\"model\":{" MODEL_OK ",\"merges\":[\"a b\"]},\"normalizer\":"
                                          "{\"type\":\"Sequence\",\"normalizers\":[");
    for (int i = 0; i < 12; i++)
        k += snprintf(chain + k, sizeof chain - (size_t)k,
                      "%s{\"type\":\"Replace\",\"pattern\":{\"String\":\"a\"},\"content\":\"aaaaaaaaaa\"}", i ? "," : "");
    snprintf(chain + k, sizeof chain - (size_t)k, "]}}");
    p = tmp_file("chain.json", chain, strlen(chain));
    t = NULL;
    CHECK(tk_tokenizer_from_hf(p, &t, &err) == 0, "replace chain: %s", err.msg);
    if (t) {
        int32_t *ids = NULL;
        CHECK(enc(t, "ab", 2, false, false, &ids, &err) == -1 && strstr(err.msg, "normalizers make the text longer"),
              "replace chain: '%s'", err.msg);
        free(ids);
        tk_tokenizer_free(t);
    }
    expect_hf_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", "invalid JSON", __LINE__);
    expect_hf_error("[1, 2]", "top level is not an object", __LINE__);
    expect_hf_error("{}", "missing \"model\"", __LINE__);
    expect_hf_error("{\"model\":{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}}", "model.vocab is not an object", __LINE__);
    expect_hf_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}", "model.vocab is empty", __LINE__);
    expect_hf_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}", "out of range", __LINE__);
    expect_hf_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999},\"merges\":[]}}", "out of range", __LINE__);
    expect_hf_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":9999999},\"merges\":[]}}", "too many unused ids", __LINE__);
    expect_hf_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"x\"},\"merges\":[]}}", "is not an integer", __LINE__);
    expect_hf_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}", "id 0 is used twice", __LINE__);
    expect_hf_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":{\"a\":0},\"merges\":[]}}", "unsupported model type 'Unigram'", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK "}}", "model.merges is not an array", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[\"a c\"]}}", "model.merges[0]: 'c' is not in the vocabulary", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[\"a b\",\"zz b\"]}}", "model.merges[1]: 'zz' is not in the vocabulary", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[\"b a\"]}}", "result 'ba' is not in the vocabulary", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[\"ab\"]}}", "not a pair", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[42]}}", "not a pair", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[[\"a\"]]}}", "not a pair", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[],\"unk_token\":\"<nope>\"}}", "unk_token '<nope>' is not in the vocabulary", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[]},\"added_tokens\":[{\"id\":0,\"content\":\"zz\"}]}", "id 0 is 'a' in model.vocab but 'zz'", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[]},\"added_tokens\":[{\"id\":\"7\",\"content\":\"zz\"}]}", "needs integer \"id\"", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[]},\"added_tokens\":[{\"id\":-3,\"content\":\"zz\"}]}", "out of range", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[]},\"added_tokens\":{}}", "added_tokens is not an array", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[]},\"normalizer\":{\"type\":\"BertNormalizer\"}}", "unsupported normalizer 'BertNormalizer'", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Whitespace\"}}", "unsupported pre_tokenizer 'Whitespace'", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(ab\"},\"behavior\":\"Isolated\"}}", "bad pre-tokenizer regex", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Sideways\"}}", "unknown behavior 'Sideways'", __LINE__);
    expect_hf_error("{\"model\":{" MODEL_OK ",\"merges\":[],\"continuing_subword_prefix\":\"##\"}}", "continuing_subword_prefix", __LINE__);

    /* a real tokenizer.json cut short */
    char *buf = NULL;
    size_t len;
    if (tk_read_file(tk_shared("tokenizers/llama2/tokenizer.json"), &buf, &len, &err) == 0) {
        buf[len / 2] = 0;
        expect_hf_error(buf, "invalid JSON", __LINE__);
        free(buf);
    }
    /* missing file */
    t = NULL;
    CHECK(tk_tokenizer_from_hf("/nonexistent/tokenizer.json", &t, &err) == -1 && strstr(err.msg, "cannot open"), "%s", err.msg);
}

static void put32(unsigned char *p, int32_t v) { memcpy(p, &v, 4); }

static void expect_bin_error(const void *data, size_t n, int vocab, const char *want, int line) {
    const char *p = tmp_file("bad.bin", data, n);
    tk_err err = {{0}};
    tk_tokenizer *t = NULL;
    int rc = tk_tokenizer_from_llama2c(p, vocab, &t, &err);
    CHECK(rc == -1 && t == NULL && strstr(err.msg, want), "line %d: want '%s', got rc %d '%s'", line, want, rc, err.msg);
    tk_tokenizer_free(t);
}

static void test_hostile_bin(void) {
    unsigned char b[256];
    memset(b, 0, sizeof b);
    /* header max_len 8; tokens "<unk>", "\n<s>\n", "ab" */
    size_t n = 0;
    put32(b, 8);
    n = 4;
    const char *pieces[] = {"<unk>", "\n<s>\n", "ab"};
    for (int i = 0; i < 3; i++) {
        float sc = -(float)i;
        memcpy(b + n, &sc, 4);
        put32(b + n + 4, (int32_t)strlen(pieces[i]));
        memcpy(b + n + 8, pieces[i], strlen(pieces[i]));
        n += 8 + strlen(pieces[i]);
    }
    const char *p = tmp_file("ok.bin", b, n);
    tk_err err;
    tk_tokenizer *t = NULL;
    CHECK(tk_tokenizer_from_llama2c(p, 3, &t, &err) == 0, "mini tokenizer.bin: %s", err.msg);
    if (t) { /* no byte pieces: an unknown character becomes one <unk> */
        int32_t *ids;
        static const int32_t want[] = {0, 2, 0, 0};
        int k = enc(t, "ab z", 4, false, false, &ids, &err);
        CHECK(ids_eq(ids, k, want, 4), "unknown characters -> unk (%d tokens)", k);
        free(ids);
    }
    tk_tokenizer_free(t);
    t = NULL;
    CHECK(tk_tokenizer_from_llama2c(p, 0, &t, &err) == 0 && t && tk_tokenizer_n_vocab(t) == 3, "vocab 0 = all records: %s", err.msg);
    tk_tokenizer_free(t);

    expect_bin_error(b, 2, 3, "too short", __LINE__);
    expect_bin_error(b, n, 4, "truncated at token 3 of 4", __LINE__);
    expect_bin_error(b, n, 1 << 20, "cannot hold 1048576 tokens", __LINE__);
    expect_bin_error(b, n - 1, 3, "exceeds the file", __LINE__);
    expect_bin_error(b, 30, 3, "truncated at token 2", __LINE__);
    unsigned char c[256];
    memcpy(c, b, n);
    put32(c + 4 + 4, -5);
    expect_bin_error(c, n, 3, "length -5", __LINE__);
    memcpy(c, b, n);
    put32(c + 4 + 4, 1000);
    expect_bin_error(c, n, 3, "exceeds the file", __LINE__);
    memcpy(c, b, n);
    put32(c, -1);
    expect_bin_error(c, n, 3, "bad max_token_length", __LINE__);
    memcpy(c, b, n);
    put32(c, 2);
    expect_bin_error(c, n, 3, "exceeds max_token_length", __LINE__);
    expect_bin_error(b, n - 1, 0, "not a llama2.c tokenizer.bin", __LINE__);
    expect_bin_error(b, n, -4, "bad vocabulary size", __LINE__);
    /* a real tokenizer.bin cut short */
    char *buf = NULL;
    size_t len;
    if (tk_read_file(tk_shared("tokenizers/llama2/tokenizer.bin"), &buf, &len, &err) == 0) {
        expect_bin_error(buf, len / 3, 32000, "truncated", __LINE__);
        expect_bin_error(buf, len - 3, 32000, "exceeds the file", __LINE__);
        free(buf);
    }
}

typedef void (*gguf_setup)(tk_gguf_writer *w);

static int write_gguf(const char *name, gguf_setup fn, char *path_out, size_t cap) {
    tk_gguf_writer *w = tk_gguf_writer_new();
    fn(w);
    snprintf(path_out, cap, "%s/%s", tmpdir, name);
    tk_err err;
    int rc = tk_gguf_write(w, path_out, &err);
    tk_gguf_writer_free(w);
    return rc;
}

static const char *const g_tokens[] = {"<unk>", "<s>", "</s>", "a", "b", "ab"};

static void g_base(tk_gguf_writer *w) {
    tk_gguf_set_str(w, "general.architecture", "llama");
    tk_gguf_set_arr_str(w, "tokenizer.ggml.tokens", g_tokens, 6);
}
static void g_no_model(tk_gguf_writer *w) { g_base(w); }
static void g_t5(tk_gguf_writer *w) { g_base(w); tk_gguf_set_str(w, "tokenizer.ggml.model", "t5"); }
static void g_tokens_str(tk_gguf_writer *w) {
    tk_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    tk_gguf_set_str(w, "tokenizer.ggml.tokens", "abc");
}
static void g_tokens_i32(tk_gguf_writer *w) {
    static const int32_t v[] = {1, 2, 3};
    tk_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    tk_gguf_set_arr_i32(w, "tokenizer.ggml.tokens", v, 3);
}
static void g_short_scores(tk_gguf_writer *w) {
    static const float sc[] = {0, 0};
    g_base(w);
    tk_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    tk_gguf_set_arr_f32(w, "tokenizer.ggml.scores", sc, 2);
}
static void g_types_f32(tk_gguf_writer *w) {
    static const float ty[] = {1, 1, 1, 1, 1, 1};
    g_base(w);
    tk_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    tk_gguf_set_arr_f32(w, "tokenizer.ggml.token_type", ty, 6);
}
static void g_short_types(tk_gguf_writer *w) {
    static const int32_t ty[] = {2, 3, 3};
    g_base(w);
    tk_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    tk_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", ty, 3);
}
static void g_dup(tk_gguf_writer *w) {
    static const char *const toks[] = {"a", "b", "a"};
    tk_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    tk_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
}
static void g_gpt2_no_merges(tk_gguf_writer *w) { g_base(w); tk_gguf_set_str(w, "tokenizer.ggml.model", "gpt2"); }
static void g_gpt2_bad_pre(tk_gguf_writer *w) {
    static const char *const merges[] = {"a b"};
    g_base(w);
    tk_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    tk_gguf_set_str(w, "tokenizer.ggml.pre", "nonsense");
    tk_gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
}
static void g_gpt2_ok(tk_gguf_writer *w) {
    static const char *const merges[] = {"a b", "x y", "ab", "b a"}; /* unknown / malformed ones never apply */
    g_base(w);
    tk_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    tk_gguf_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    tk_gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, 4);
    tk_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 4000000000u);
    tk_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
}
static void g_empty(tk_gguf_writer *w) {
    tk_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    tk_gguf_set_arr_str(w, "tokenizer.ggml.tokens", g_tokens, 0);
}

static void test_hostile_gguf(void) {
    static const struct { const char *name; gguf_setup fn; const char *want; } cases[] = {
        {"nomodel.gguf", g_no_model, "missing tokenizer.ggml.model"},
        {"t5.gguf", g_t5, "unsupported tokenizer.ggml.model 't5'"},
        {"tokstr.gguf", g_tokens_str, "tokenizer.ggml.tokens is not an array"},
        {"toki32.gguf", g_tokens_i32, "tokenizer.ggml.tokens is not a string array"},
        {"scores.gguf", g_short_scores, "tokenizer.ggml.scores has 2 entries for 6 tokens"},
        {"typesf.gguf", g_types_f32, "token_type must be an int32 array"},
        {"types.gguf", g_short_types, "tokenizer.ggml.token_type has 3 entries for 6 tokens"},
        {"dup.gguf", g_dup, "duplicate token in vocabulary: 'a' has ids 0 and 2"},
        {"nomerges.gguf", g_gpt2_no_merges, "missing tokenizer.ggml.merges"},
        {"pre.gguf", g_gpt2_bad_pre, "unknown pre-tokenizer type 'nonsense'"},
        {"empty.gguf", g_empty, "tokenizer.ggml.tokens has 0 entries"},
    };
    char path[600];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (write_gguf(cases[i].name, cases[i].fn, path, sizeof path)) {
            CHECK(0, "could not write %s", cases[i].name);
            continue;
        }
        tk_err err = {{0}};
        tk_tokenizer *t = NULL;
        int rc = tk_tokenizer_open(path, NULL, &t, &err);
        CHECK(rc == -1 && !t && strstr(err.msg, cases[i].want), "%s: want '%s', got rc %d '%s'", cases[i].name,
              cases[i].want, rc, err.msg);
        tk_tokenizer_free(t);
    }
    if (write_gguf("gpt2ok.gguf", g_gpt2_ok, path, sizeof path) == 0) {
        tk_tokenizer *t = open_tok(path, NULL);
        if (t) {
            CHECK(tk_tokenizer_bos(t) == -1, "out-of-range BOS id means none (%d)", tk_tokenizer_bos(t));
            CHECK(tk_tokenizer_eos(t) == 2 && tk_tokenizer_is_eog(t, 2), "eos");
            CHECK(!tk_tokenizer_add_bos(t), "gpt2 adds no BOS by default");
            int32_t *ids;
            tk_err err;
            static const int32_t want[] = {5, 4, 3};
            int n = enc(t, "abba", 4, true, true, &ids, &err);
            CHECK(ids_eq(ids, n, want, 3), "'abba' with the one usable merge (%d)", n);
            free(ids);
            tk_tokenizer_free(t);
        }
    }
}

/* ---- GGUF pre-tokenizer kinds ----
 * A byte-level vocabulary of the 256 byte pieces plus "12" and "Ġ1", merges
 * "1 2" and "Ġ 1": whether "12" is merged shows whether the kind's regexes
 * keep digits together. */

static const char *g_pre_kind;

static void g_kind(tk_gguf_writer *w) {
    static char pieces[258][8];
    static const char *ptrs[258];
    for (int b = 0; b < 256; b++) {
        unsigned cp = b <= 0x20 ? 256u + (unsigned)b : (b >= 0x7F && b <= 0xA0) ? 289u + (unsigned)(b - 0x7F) : b == 0xAD ? 323u : (unsigned)b;
        if (cp < 0x80) { pieces[b][0] = (char)cp; pieces[b][1] = 0; }
        else { pieces[b][0] = (char)(0xC0 | (cp >> 6)); pieces[b][1] = (char)(0x80 | (cp & 0x3F)); pieces[b][2] = 0; }
        ptrs[b] = pieces[b];
    }
    ptrs[256] = "12";
    ptrs[257] = "\xc4\xa0" "1";
    static const char *const merges[] = {"1 2", "\xc4\xa0 1"};
    tk_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    tk_gguf_set_str(w, "tokenizer.ggml.pre", g_pre_kind);
    tk_gguf_set_arr_str(w, "tokenizer.ggml.tokens", ptrs, 258);
    tk_gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, 2);
}

static void test_pre_kinds(void) {
    static const struct { const char *kind; bool digits_merge; } kinds[] = {
        {"default", true}, {"llama-bpe", true}, {"gpt-2", true}, {"mpt", true}, {"falcon", true},
        {"deepseek-llm", true}, {"qwen2", false}, {"deepseek-coder", false}, {"starcoder", false}, {"refact", false},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        g_pre_kind = kinds[k].kind;
        char path[600];
        if (write_gguf("kind.gguf", g_kind, path, sizeof path)) {
            CHECK(0, "write %s", kinds[k].kind);
            continue;
        }
        tk_tokenizer *t = open_tok(path, NULL);
        if (!t) continue;
        int32_t *ids;
        tk_err err;
        int n = enc(t, "a12", 3, false, false, &ids, &err);
        bool merged = n == 2 && ids[0] == 'a' && ids[1] == 256;
        bool split = n == 3 && ids[0] == 'a' && ids[1] == '1' && ids[2] == '2';
        CHECK(kinds[k].digits_merge ? merged : split, "pre '%s': 'a12' gave %d tokens", kinds[k].kind, n);
        free(ids);
        /* byte-exact on varied text, whatever the split */
        const char *txt = "Hello, y'all! 1234567 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\xa6\x99  x\n\n\t$+<=>^~|` end  ";
        n = enc(t, txt, strlen(txt), false, false, &ids, &err);
        CHECK(n > 0, "pre '%s': %s", kinds[k].kind, err.msg);
        char out[256];
        size_t len = 0;
        for (int i = 0; i < n; i++) {
            int w = tk_token_to_bytes(t, -1, ids[i], false, out + len, (int)(sizeof out - len));
            if (w > 0) len += (size_t)w;
        }
        CHECK(len == strlen(txt) && !memcmp(out, txt, len), "pre '%s': decode(encode(x)) == x", kinds[k].kind);
        free(ids);
        tk_tokenizer_free(t);
    }
}

/* ---- mutation smoke test: damaged files load or fail cleanly ---- */

static uint32_t lcg(uint32_t *st) {
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

static void try_use(const tk_tokenizer *t) {
    int32_t *ids;
    tk_err err;
    const char *txt = "Hello, world! 12 ab a\xe4\xbd\xa0 <s> <|eot_id|>";
    int n = enc(t, txt, strlen(txt), true, true, &ids, &err);
    tk_detok d;
    tk_detok_init(&d, t, -1);
    char out[1024];
    for (int i = 0; i < n; i++) (void)tk_detok_push(&d, ids[i], out, sizeof out);
    (void)tk_detok_flush(&d, out, sizeof out);
    free(ids);
}

static void mutate_and_load(const unsigned char *orig, size_t n, const char *name, int kind, int iters) {
    unsigned char *buf = malloc(n);
    uint32_t st = 12345u + (uint32_t)kind;
    int loaded = 0, failed = 0;
    for (int it = 0; it < iters; it++) {
        memcpy(buf, orig, n);
        size_t len = n;
        int edits = 1 + (int)(lcg(&st) % 4);
        for (int e = 0; e < edits; e++) {
            size_t pos = lcg(&st) % n;
            switch (lcg(&st) % 8) {
            case 0: case 1: case 2: buf[pos] = (unsigned char)lcg(&st); break;
            case 3: case 4: case 5: buf[pos] ^= (unsigned char)(1u << (lcg(&st) % 8)); break;
            case 6: len = pos + 1; break;
            default: buf[pos] = (unsigned char)"{}[]\",:0123456789\xff"[lcg(&st) % 19]; break;
            }
        }
        const char *p = tmp_file(name, buf, len);
        tk_tokenizer *t = NULL;
        tk_err err = {{0}};
        int rc = kind == 0 ? tk_tokenizer_from_hf(p, &t, &err)
               : kind == 1 ? tk_tokenizer_from_llama2c(p, 0, &t, &err)
                           : tk_tokenizer_open(p, NULL, &t, &err);
        if (rc == 0 && t) {
            loaded++;
            try_use(t);
        } else {
            failed++;
            CHECK(err.msg[0] != 0, "%s: failure without a message", name);
        }
        tk_tokenizer_free(t);
    }
    printf("mutated %s: %d loaded, %d rejected\n", name, loaded, failed);
    free(buf);
}

static void test_mutations(void) {
    const char *json = "{\"model\":{" MODEL_OK ",\"merges\":[\"a b\"]},\"added_tokens\":[{\"id\":4,\"content\":\"<s>\",\"special\":true}],"
                       "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}]}," BL "}";
    mutate_and_load((const unsigned char *)json, strlen(json), "mut.json", 0, 400);
    char *buf = NULL;
    size_t len;
    tk_err err;
    if (tk_read_file(tk_shared("models/aidreams260K.tok512.bin"), &buf, &len, &err) == 0) {
        mutate_and_load((unsigned char *)buf, len, "mut.bin", 1, 300);
        free(buf);
    }
    char path[600];
    g_pre_kind = "llama-bpe";
    if (write_gguf("mut_src.gguf", g_kind, path, sizeof path) == 0 && tk_read_file(path, &buf, &len, &err) == 0) {
        mutate_and_load((unsigned char *)buf, len, "mut.gguf", 2, 300);
        free(buf);
    }
}

/* ---- GGUF export ---- */

static int compare_on_corpus(const tk_tokenizer *a, const tk_tokenizer *b, const char *name) {
    const char *files[] = {TK_CORPUS, tk_shared("models/code-eval.txt"), NULL};
    int differ = 0, compared = 0;
    for (int f = 0; files[f]; f++) {
        char *buf = NULL;
        int n;
        char **lines = file_lines(files[f], &buf, &n);
        for (int i = 0; lines && i < n; i++) {
            int32_t *x, *y;
            tk_err e;
            int nx = enc(a, lines[i], strlen(lines[i]), true, true, &x, &e);
            int ny = enc(b, lines[i], strlen(lines[i]), true, true, &y, &e);
            compared++;
            if (!ids_eq(x, nx, y, ny) && differ++ < 3) fprintf(stderr, "%s: differ on '%s'\n", name, lines[i]);
            free(x);
            free(y);
        }
        free(lines);
        free(buf);
    }
    printf("%s: %d lines compared, %d differ\n", name, compared, differ);
    return differ;
}

static void test_to_gguf(void) {
    const char *srcs[][2] = {
        {"tokenizers/llama3/tokenizer.json", NULL},
        {"tokenizer-tests/ggml-vocab-gpt-2.gguf", NULL},
        {"tokenizer-tests/ggml-vocab-llama-spm.gguf", NULL},
        {NULL, "tokenizers/llama2/tokenizer.bin"},
        {"tokenizers/llama2/tokenizer.json", NULL},
    };
    for (size_t s = 0; s < sizeof srcs / sizeof srcs[0]; s++) {
        const char *name = srcs[s][0] ? srcs[s][0] : srcs[s][1];
        tk_tokenizer *a = open_tok(srcs[s][0] ? tk_shared(srcs[s][0]) : NULL, srcs[s][1] ? tk_shared(srcs[s][1]) : NULL);
        if (!a) continue;
        tk_gguf_writer *w = tk_gguf_writer_new();
        tk_err err;
        char path[600];
        snprintf(path, sizeof path, "%s/export%zu.gguf", tmpdir, s);
        tk_gguf_set_str(w, "general.architecture", "llama");
        int rc = tk_tokenizer_to_gguf(a, w, &err);
        CHECK(rc == 0, "%s: to_gguf: %s", name, err.msg);
        rc = rc ? rc : tk_gguf_write(w, path, &err);
        tk_gguf_writer_free(w);
        tk_tokenizer *b = rc ? NULL : open_tok(path, NULL);
        if (b) {
            CHECK(tk_tokenizer_kind(a) == tk_tokenizer_kind(b) && tk_tokenizer_n_vocab(a) == tk_tokenizer_n_vocab(b) &&
                      tk_tokenizer_bos(a) == tk_tokenizer_bos(b) && tk_tokenizer_eos(a) == tk_tokenizer_eos(b) &&
                      tk_tokenizer_add_bos(a) == tk_tokenizer_add_bos(b),
                  "%s: exported header fields", name);
            char label[300];
            snprintf(label, sizeof label, "%s -> GGUF -> reload", name);
            int d = compare_on_corpus(a, b, label);
            /* (tokenizer.json SentencePiece merges are exported as scores
             * -rank; llama.cpp's score-based merge then gives the same ids) */
            CHECK(d == 0, "%s: %d lines differ after export", name, d);
            for (int id = 0; id < tk_tokenizer_n_vocab(a); id++) {
                if (strcmp(tk_tokenizer_piece(a, id), tk_tokenizer_piece(b, id)) ||
                    tk_tokenizer_token_type(a, id) != tk_tokenizer_token_type(b, id)) {
                    CHECK(0, "%s: token %d differs after export", name, id);
                    break;
                }
            }
            tk_tokenizer_free(b);
        }
        tk_tokenizer_free(a);
    }
}

/* ---- speed, threads, CLI ---- */

static void test_speed(void) {
    const char *paths[] = {"tokenizers/llama3/tokenizer.json", "tokenizers/llama2/tokenizer.json",
                           "tokenizer-tests/ggml-vocab-llama-spm.gguf", "tokenizer-tests/ggml-vocab-gpt-2.gguf"};
    char *code = NULL;
    size_t cl;
    tk_err err;
    if (tk_read_file(tk_shared("models/code-eval.txt"), &code, &cl, &err)) return;
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        tk_tokenizer *t = open_tok(tk_shared(paths[p]), NULL);
        if (!t) continue;
        double t0 = tk_clock_seconds(TK_CLOCK_WALL);
        int32_t *ids;
        int n = enc(t, code, cl, true, true, &ids, &err);
        double dt = tk_clock_seconds(TK_CLOCK_WALL) - t0;
        printf("%s: code-eval.txt (%zu bytes) -> %d tokens in %.1f ms\n", paths[p], cl, n, dt * 1e3);
        CHECK(n > 0, "%s: encoding failed", paths[p]);
        free(ids);
        tk_tokenizer_free(t);
    }
    free(code);
}

typedef struct thr_arg {
    const tk_tokenizer *t;
    char **lines;
    int n;
    int bad;
    int32_t **want;
    int *nwant;
} thr_arg;

static void *thr_main(void *p) {
    thr_arg *a = p;
    for (int rep = 0; rep < 3; rep++) {
        for (int i = 0; i < a->n; i++) {
            int32_t *ids;
            tk_err err;
            int n = enc(a->t, a->lines[i], strlen(a->lines[i]), true, true, &ids, &err);
            if (!ids_eq(ids, n, a->want[i], a->nwant[i])) a->bad++;
            free(ids);
        }
    }
    return NULL;
}

static void test_threads(void) {
    tk_tokenizer *t = open_tok(tk_shared("tokenizers/llama3/tokenizer.json"), NULL);
    if (!t) return;
    char *buf = NULL;
    int n;
    char **lines = file_lines(TK_CORPUS, &buf, &n);
    int32_t **want = calloc((size_t)n, sizeof *want);
    int *nwant = calloc((size_t)n, sizeof *nwant);
    tk_err err;
    for (int i = 0; i < n; i++) nwant[i] = enc(t, lines[i], strlen(lines[i]), true, true, &want[i], &err);
    pthread_t th[4];
    thr_arg args[4];
    for (int k = 0; k < 4; k++) {
        args[k] = (thr_arg){t, lines, n, 0, want, nwant};
        pthread_create(&th[k], NULL, thr_main, &args[k]);
    }
    int bad = 0;
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        bad += args[k].bad;
    }
    CHECK(bad == 0, "%d encodings differ when run from 4 threads", bad);
    for (int i = 0; i < n; i++) free(want[i]);
    free(want);
    free(nwant);
    free(lines);
    free(buf);
    tk_tokenizer_free(t);
}

static int run_cmd(const char *cmd, char *out, size_t cap) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(void) {
    if (access(TK_TOKAMAK_BIN, X_OK) != 0) {
        printf("CLI test skipped: %s not built\n", TK_TOKAMAK_BIN);
        return;
    }
    char cmd[4096], out[8192];
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' --tokenizer '%s' -p 'I dreamed' --ids", TK_TOKAMAK_BIN,
             tk_shared("models/aidreams260K.bin"), tk_shared("models/aidreams260K.tok512.bin"));
    int rc = run_cmd(cmd, out, sizeof out);
    CHECK(rc == 0 && !strcmp(out, "[1, 303, 281, 269, 435, 447, 328]\n"), "cli --ids: rc %d '%s'", rc, out);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' -p 'Hello world'", TK_TOKAMAK_BIN,
             tk_shared("tokenizer-tests/ggml-vocab-llama-spm.gguf"));
    rc = run_cmd(cmd, out, sizeof out);
    CHECK(rc == 0 && !strcmp(out, "     1 -> '<s>'\n 15043 -> ' Hello'\n  3186 -> ' world'\n"), "cli pieces: rc %d '%s'", rc, out);
    const char *lines = tmp_file("lines.txt", "Hello world\n\n<s>x\n", 17);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' -f '%s' --lines --no-bos", TK_TOKAMAK_BIN,
             tk_shared("tokenizer-tests/ggml-vocab-llama-spm.gguf"), lines);
    rc = run_cmd(cmd, out, sizeof out);
    CHECK(rc == 0 && !strcmp(out, "15043 3186\n\n1 921\n"), "cli --lines: rc %d '%s'", rc, out);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' -f '%s' --lines --no-bos --no-parse-special", TK_TOKAMAK_BIN,
             tk_shared("tokenizer-tests/ggml-vocab-llama-spm.gguf"), lines);
    rc = run_cmd(cmd, out, sizeof out);
    CHECK(rc == 0 && strncmp(out, "15043 3186\n\n", 12) == 0 && !strstr(out + 12, "1 921"), "cli --no-parse-special: '%s'", out);
    const char *bad = tmp_file("bad.txt", "ok\xff", 3);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' -f '%s' 2>&1", TK_TOKAMAK_BIN,
             tk_shared("tokenizer-tests/ggml-vocab-gpt-2.gguf"), bad);
    rc = run_cmd(cmd, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "invalid UTF-8 at byte 2"), "cli invalid UTF-8: rc %d '%s'", rc, out);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m /nonexistent.gguf -p x 2>&1", TK_TOKAMAK_BIN);
    rc = run_cmd(cmd, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "/nonexistent.gguf"), "cli missing model: rc %d '%s'", rc, out);
}

int main(void) {
    if (access(tk_shared("tokenizer-tests"), R_OK) != 0) TK_SKIP("no shared test data at %s", tk_shared(""));
    test_conformance();
    test_llama2c();
    test_golden_prompts();
    test_bin_vs_gguf();
    test_roundtrip();
    test_detok_bytes();
    test_invalid_utf8();

    snprintf(tmpdir, sizeof tmpdir, "/tmp/tk_tok_test_XXXXXX");
    if (!mkdtemp(tmpdir)) TK_SKIP("cannot create a temporary directory");
    test_hostile_json();
    test_hostile_bin();
    test_hostile_gguf();
    test_pre_kinds();
    test_mutations();
    test_to_gguf();
    test_speed();
    test_threads();
    test_cli();
    char rm[400];
    snprintf(rm, sizeof rm, "rm -rf '%s'", tmpdir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TK_TEST_END();
}
