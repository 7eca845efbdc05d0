/* GGUF reader and dequantizers against files written and quantized by
 * llama.cpp (shared/gguf-fixtures), plus other independently written GGUFs.
 *
 * Exactness of the golden comparison: the golden JSON prints every
 * dequantized float with at most 9 significant digits (%.9g style), and 9
 * digits identify a float32 uniquely (FLT_DECIMAL_DIG == 9).  Parsing such a
 * decimal to double and rounding to float therefore gives back the exact
 * float32 that was printed, so `(float)json_real_value(v) == out[i]` is an
 * exact, bit-level comparison (no tolerance for any dtype). */
#include <float.h>
#include <glob.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "formats/source.h"
#include <tokamak.h> /* tk_mapfile, tk_read_file */
#include "tk_test.h"

_Static_assert(FLT_DECIMAL_DIG == 9, "9 digits round-trip a float");

static int count_sig_digits(const char *num) {
    int n = 0, started = 0;
    for (const char *p = num; *p && *p != 'e' && *p != 'E'; p++) {
        if (*p >= '1' && *p <= '9') started = 1;
        if (started && *p >= '0' && *p <= '9') n++;
    }
    return n;
}

/* Guards the exactness argument above: no printed sample has more than 9
 * significant digits (more would not break exactness, but fewer than needed
 * would show up as mismatches, which this test reports). */
static void check_digit_count(const char *json_path) {
    char *text = NULL;
    size_t len = 0;
    tk_err err;
    if (tk_read_file(json_path, &text, &len, &err)) return;
    const char *p = strstr(text, "\"dequant_samples\"");
    int maxd = 0;
    while (p && *p) {
        if ((*p >= '0' && *p <= '9') || *p == '-') {
            const char *s = p;
            while (*p && strchr("0123456789.eE+-", *p)) p++;
            char buf[64];
            size_t n = (size_t)(p - s) < sizeof buf - 1 ? (size_t)(p - s) : sizeof buf - 1;
            memcpy(buf, s, n);
            buf[n] = 0;
            int d = count_sig_digits(buf);
            if (d > maxd) maxd = d;
        } else {
            p++;
        }
    }
    CHECK(maxd > 0 && maxd <= 9, "%s: samples printed with %d significant digits", json_path, maxd);
    free(text);
}

static const tk_tensor *find(tk_gguf *g, const char *name) {
    return tk_gguf_find_tensor(g, name);
}

static void check_fixture(const char *gguf_path) {
    char json_path[1024];
    snprintf(json_path, sizeof json_path, "%.*s.golden.json", (int)(strlen(gguf_path) - 5), gguf_path);
    json_error_t jerr;
    json_t *golden = json_load_file(json_path, 0, &jerr);
    CHECK(golden != NULL, "%s: %s", json_path, jerr.text);
    if (!golden) return;
    check_digit_count(json_path);

    tk_gguf *g = NULL;
    tk_err err = {{0}};
    CHECK(tk_gguf_open(gguf_path, &g, &err) == 0, "%s", err.msg);
    if (!g) {
        json_decref(golden);
        return;
    }
    CHECK(tk_gguf_version(g) == 3, "%s: version %u", gguf_path, tk_gguf_version(g));

    /* tensor types */
    json_t *types = json_object_get(golden, "tensor_types");
    CHECK(json_object_size(types) == tk_gguf_n_tensors(g), "%s: %zu tensors, golden has %zu",
          gguf_path, tk_gguf_n_tensors(g), json_object_size(types));
    const char *name;
    json_t *val;
    json_object_foreach(types, name, val) {
        const tk_tensor *t = find(g, name);
        CHECK(t != NULL, "%s: tensor %s missing", gguf_path, name);
        if (!t) continue;
        const tk_dtype_info *info = tk_dtype_get(t->type);
        CHECK(info && !strcmp(info->name, json_string_value(val)), "%s: %s is %s, golden %s",
              gguf_path, name, info ? info->name : "?", json_string_value(val));
    }

    /* dequantized samples, exact in float32 */
    json_t *samples = json_object_get(golden, "dequant_samples");
    CHECK(json_object_size(samples) > 0, "%s: no dequant_samples", json_path);
    json_object_foreach(samples, name, val) {
        const tk_tensor *t = find(g, name);
        CHECK(t != NULL, "%s: sample tensor %s missing", gguf_path, name);
        if (!t) continue;
        const size_t n = json_array_size(val);
        /* dequantize the whole first row (a whole number of blocks) */
        float *out = malloc((size_t)t->ne[0] * sizeof *out);
        tk_dequant_row(t->type, t->data, out, t->ne[0]);
        int bad = 0;
        for (size_t i = 0; i < n && i < (size_t)t->ne[0]; i++) {
            const float want = (float)json_real_value(json_array_get(val, i));
            if (!(want == out[i] && signbit(want) == signbit(out[i]))) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s %s[%zu]: got %.9g want %.9g\n", gguf_path, name, i, out[i],
                            want);
            }
        }
        CHECK(bad == 0 && n == 64, "%s: %s (%s): %d of %zu samples differ", gguf_path, name,
              tk_dtype_get(t->type)->name, bad, n);
        free(out);
    }

    /* every tensor dequantizes to finite values (exercises all rows/blocks) */
    for (size_t i = 0; i < tk_gguf_n_tensors(g); i++) {
        const tk_tensor *t = tk_gguf_tensor_at(g, i);
        const int64_t rows = tk_tensor_nelems(t) / t->ne[0];
        const size_t rb = tk_dtype_row_bytes(t->type, t->ne[0]);
        CHECK(rb * (size_t)rows == t->nbytes, "%s: %s nbytes", gguf_path, t->name);
        float *out = malloc((size_t)t->ne[0] * sizeof *out);
        int finite = 1;
        for (int64_t r = 0; r < rows; r++) {
            tk_dequant_row(t->type, (const unsigned char *)t->data + r * rb, out, t->ne[0]);
            for (int64_t j = 0; j < t->ne[0]; j++) finite &= isfinite(out[j]) != 0;
        }
        CHECK(finite, "%s: %s has non-finite values", gguf_path, t->name);
        free(out);
    }

    /* hyper-parameters through the source interface */
    tk_source src;
    CHECK(tk_gguf_source_open(gguf_path, &src, &err) == 0, "%s", err.msg);
    if (src.gguf) {
        const tk_hparams *hp = &src.hp;
        CHECK(!strcmp(src.arch, "llama"), "arch %s", src.arch);
        CHECK(!strcmp(src.name, "synthetic-quant-fixture"), "name %s", src.name);
        CHECK(src.format == TK_FORMAT_GGUF, "format");
        CHECK(hp->dim == 256 && hp->n_layers == 2 && hp->n_heads == 4 && hp->n_kv_heads == 2,
              "%s: dim %d layers %d heads %d kv %d", gguf_path, hp->dim, hp->n_layers, hp->n_heads,
              hp->n_kv_heads);
        CHECK(hp->ffn_dim == 512 && hp->n_vocab == 512 && hp->head_dim == 64 && hp->ctx_len == 256,
              "%s: ffn %d vocab %d head_dim %d ctx %d", gguf_path, hp->ffn_dim, hp->n_vocab,
              hp->head_dim, hp->ctx_len);
        CHECK(hp->norm_eps == 1e-5f && hp->rope_theta == 10000.0f, "eps %g theta %g", hp->norm_eps,
              hp->rope_theta);
        CHECK(hp->rope_style == TK_ROPE_ADJACENT && hp->rope_scaling == TK_ROPE_SCALING_NONE &&
                  !hp->tied_output,
              "rope style/scaling/tied");
        CHECK(src.n_tensors == (int)tk_gguf_n_tensors(g), "n_tensors");
        const tk_tensor *a = NULL;
        for (int i = 0; i < src.n_tensors; i++)
            if (!strcmp(src.tensors[i].name, "blk.1.ffn_down.weight")) a = &src.tensors[i];
        const tk_tensor *b = find(g, "blk.1.ffn_down.weight");
        CHECK(a && b && a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes) && a->type == b->type &&
                  a->name != b->name,
              "source tensor copy");
        tk_source_close(&src);
    }
    tk_gguf_close(g);
    json_decref(golden);
}

/* Our reference quantizers reproduce llama-quantize's output from the F32
 * fixture byte for byte (Q8_0 has no importance-matrix path; F16/BF16 are
 * plain conversions). */
static void check_quantizers(void) {
    tk_gguf *f32 = NULL;
    tk_err err;
    if (tk_gguf_open(tk_shared("gguf-fixtures/qfix-F32.gguf"), &f32, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    static const struct {
        const char *file;
        tk_dtype type;
        void (*quant)(const float *, void *, int64_t);
    } cases[] = {
        {"gguf-fixtures/qfix-Q8_0.gguf", TK_Q8_0, tk_quantize_row_q8_0},
        {"gguf-fixtures/qfix-F16.gguf", TK_F16, tk_quantize_row_f16},
        {"gguf-fixtures/qfix-BF16.gguf", TK_BF16, tk_quantize_row_bf16},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tk_gguf *q = NULL;
        if (tk_gguf_open(tk_shared(cases[c].file), &q, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        int compared = 0;
        for (size_t i = 0; i < tk_gguf_n_tensors(q); i++) {
            const tk_tensor *tq = tk_gguf_tensor_at(q, i);
            const tk_tensor *tf = tk_gguf_find_tensor(f32, tq->name);
            if (tq->type != cases[c].type || !tf || tf->type != TK_F32) continue;
            const int64_t n = tk_tensor_nelems(tf);
            unsigned char *buf = malloc(tq->nbytes);
            float *src = malloc((size_t)n * sizeof *src);
            memcpy(src, tf->data, (size_t)n * sizeof *src);
            cases[c].quant(src, buf, n);
            CHECK(memcmp(buf, tq->data, tq->nbytes) == 0, "%s: %s: quantized bytes differ",
                  cases[c].file, tq->name);
            compared++;
            free(buf);
            free(src);
        }
        CHECK(compared >= 10, "%s: only %d tensors compared", cases[c].file, compared);
        tk_gguf_close(q);
    }
    tk_gguf_close(f32);
}

/* aidreams260K.gguf was converted by llama.cpp from aidreams260K.bin: the
 * embedding table and the norm weights are copied verbatim, so they must
 * equal the llama2.c checkpoint's floats. */
static void check_aidreams(void) {
    const char *path = tk_shared("models/aidreams260K.gguf");
    tk_gguf *g = NULL;
    tk_err err;
    CHECK(tk_gguf_open(path, &g, &err) == 0, "%s", err.msg);
    if (!g) return;
    const tk_gguf_kv *tokens = tk_gguf_find(g, "tokenizer.ggml.tokens");
    CHECK(tokens && tokens->type == TK_GGUF_ARRAY && tokens->arr_type == TK_GGUF_STRING &&
              tokens->arr_n == 512 && tokens->arr_strs[1].len == 3 &&
              !memcmp(tokens->arr_strs[1].ptr, "<s>", 3),
          "aidreams tokens");
    const tk_gguf_kv *scores = tk_gguf_find(g, "tokenizer.ggml.scores");
    CHECK(scores && scores->arr_type == TK_GGUF_F32 && scores->arr_n == 512, "scores");
    const tk_gguf_kv *tt = tk_gguf_find(g, "tokenizer.ggml.token_type");
    CHECK(tt && tt->arr_type == TK_GGUF_I32 && tk_gguf_arr_i(tt, 0) == 2 && tk_gguf_arr_i(tt, 1) == 3 &&
              tk_gguf_arr_i(tt, 3) == 6 && tk_gguf_arr_f(tt, 3) == 6.0,
          "token_type");
    int64_t v = 0;
    CHECK(tk_gguf_get_int(g, "tokenizer.ggml.padding_token_id", &v) == 0 && v == 4294967295LL,
          "padding id %lld", (long long)v);
    char *model = tk_gguf_get_str(g, "tokenizer.ggml.model");
    CHECK(model && !strcmp(model, "llama"), "tokenizer model");
    free(model);
    double eps = 0;
    CHECK(tk_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &eps) == 0 &&
              (float)eps == 1e-5f,
          "eps");
    CHECK(tk_gguf_get_str(g, "llama.block_count") == NULL, "get_str on an int");
    CHECK(tk_gguf_get_int(g, "general.name", &v) == -1, "get_int on a string");
    CHECK(tk_gguf_get_int(g, "no.such.key", &v) == -1, "missing key");

    char *bin = NULL;
    size_t len = 0;
    if (tk_read_file(tk_shared("models/aidreams260K.bin"), &bin, &len, &err) == 0) {
        int32_t hdr[7];
        memcpy(hdr, bin, sizeof hdr);
        const int dim = hdr[0], n_layers = hdr[2], vocab = abs(hdr[5]);
        const float *emb = (const float *)(bin + 28);
        const float *rms_att = emb + (size_t)vocab * dim;
        const tk_tensor *te = tk_gguf_find_tensor(g, "token_embd.weight");
        CHECK(te && te->ne[0] == dim && te->ne[1] == vocab &&
                  memcmp(te->data, emb, (size_t)vocab * dim * 4) == 0,
              "token_embd matches the llama2.c checkpoint");
        for (int l = 0; l < n_layers; l++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
            const tk_tensor *t = tk_gguf_find_tensor(g, name);
            CHECK(t && memcmp(t->data, rms_att + (size_t)l * dim, (size_t)dim * 4) == 0, "%s", name);
        }
        free(bin);
    }
    tk_gguf_close(g);

    tk_source src;
    CHECK(tk_gguf_source_open(path, &src, &err) == 0, "%s", err.msg);
    if (src.gguf) {
        const tk_hparams *hp = &src.hp;
        CHECK(hp->dim == 64 && hp->ffn_dim == 172 && hp->n_layers == 4 && hp->n_heads == 4 &&
                  hp->n_kv_heads == 4 && hp->n_vocab == 512 && hp->ctx_len == 128 &&
                  hp->head_dim == 16,
              "aidreams hparams: dim %d ffn %d layers %d heads %d kv %d vocab %d ctx %d hd %d",
              hp->dim, hp->ffn_dim, hp->n_layers, hp->n_heads, hp->n_kv_heads, hp->n_vocab,
              hp->ctx_len, hp->head_dim);
        CHECK(!hp->tied_output && src.n_tensors == 39, "aidreams tensors");
        tk_source_close(&src);
    }
}

static void check_vocab_only(const char *rel, uint64_t n_tokens, const char *pre) {
    const char *path = tk_shared(rel);
    tk_gguf *g = NULL;
    tk_err err;
    CHECK(tk_gguf_open(path, &g, &err) == 0, "%s", err.msg);
    if (!g) return;
    CHECK(tk_gguf_n_tensors(g) == 0, "%s: tensors", rel);
    const tk_gguf_kv *tokens = tk_gguf_find(g, "tokenizer.ggml.tokens");
    CHECK(tokens && tokens->arr_type == TK_GGUF_STRING && tokens->arr_n == n_tokens,
          "%s: %llu tokens", rel, tokens ? (unsigned long long)tokens->arr_n : 0ULL);
    if (pre) {
        char *s = tk_gguf_get_str(g, "tokenizer.ggml.pre");
        CHECK(s && !strcmp(s, pre), "%s: pre %s", rel, s ? s : "(none)");
        free(s);
        const tk_gguf_kv *merges = tk_gguf_find(g, "tokenizer.ggml.merges");
        CHECK(merges && merges->arr_type == TK_GGUF_STRING && merges->arr_n > 40000 &&
                  merges->arr_strs[0].len == 4 && !memcmp(merges->arr_strs[0].ptr, "\xc4\xa0 t", 4),
              "%s: merges", rel);
    }
    tk_gguf_close(g);

    tk_source src;
    CHECK(tk_gguf_source_open(path, &src, &err) == -1 && strstr(err.msg, "no tensors"),
          "%s: source open of a vocab-only file: %s", rel, err.msg);
}

int main(void) {
    glob_t gl;
    char pattern[1024];
    snprintf(pattern, sizeof pattern, "%s", tk_shared("gguf-fixtures/qfix-*.gguf"));
    if (glob(pattern, 0, NULL, &gl) != 0) TK_SKIP("no fixtures at %s", pattern);
    CHECK(gl.gl_pathc == 15, "expected 15 fixtures, found %zu", gl.gl_pathc);
    for (size_t i = 0; i < gl.gl_pathc; i++) check_fixture(gl.gl_pathv[i]);
    globfree(&gl);

    check_quantizers();
    check_aidreams();
    check_vocab_only("tokenizer-tests/ggml-vocab-gpt-2.gguf", 50257, "gpt-2");
    check_vocab_only("tokenizer-tests/ggml-vocab-llama-spm.gguf", 32000, NULL);
    TK_TEST_END();
}
