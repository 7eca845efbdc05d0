/* Tokenizer tests: llama.cpp's conformance vectors (shared/tokenizer-tests),
 * llama2.c tokenizer.bin, tokenizer.bin vs tokenizer.json agreement,
 * streaming detokenization, invalid UTF-8, hostile inputs, GGUF export. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "tk_test.h"
#include "tokenizer/tokenizer.h"
#include "util/mapfile.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

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
    double t0 = now_s();
    if (tk_tokenizer_open(tk_shared("tokenizers/llama3/tokenizer.json"), NULL, &t, &err) == 0) {
        double dt = now_s() - t0;
        printf("llama3 tokenizer.json loaded in %.3f s\n", dt);
        CHECK(dt < 1.0, "loading the Llama-3 tokenizer.json took %.3f s", dt);
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

int main(void) {
    if (access(tk_shared("tokenizer-tests"), R_OK) != 0) TK_SKIP("no shared test data at %s", tk_shared(""));
    test_conformance();
    TK_TEST_END();
}
