/* Tokenizer from GGUF metadata (tokenizer.ggml.*), following llama.cpp's
 * llama_vocab::load: model "llama" = SentencePiece scores, "gpt2" =
 * byte-level BPE with merges and a pre-tokenizer kind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/gguf.h"
#include "tok_internal.h"

static const tk_gguf_kv *find_array(const tk_gguf *g, const char *key, tk_err *err, bool required,
                                    int *rc) {
    *rc = 0;
    const tk_gguf_kv *kv = tk_gguf_find(g, key);
    if (!kv) {
        if (required) *rc = tk_err_set(err, "missing %s", key);
        return NULL;
    }
    if (kv->type != TK_GGUF_ARRAY) {
        *rc = tk_err_set(err, "%s is not an array", key);
        return NULL;
    }
    return kv;
}

static int special_id(const tk_gguf *g, const char *key, int n_vocab, int def) {
    int64_t v;
    if (tk_gguf_get_int(g, key, &v) != 0) return def;
    if (v < 0 || v >= n_vocab) return -1; /* e.g. 4294967295 = "none" */
    return (int)v;
}

static int build(tk_tokenizer *t, const tk_gguf *g, tk_err *err) {
    int rc;
    char *model = tk_gguf_get_str(g, "tokenizer.ggml.model");
    if (!model) return tk_err_set(err, "missing tokenizer.ggml.model (no vocabulary in this file)");
    bool spm = !strcmp(model, "llama");
    bool bpe = !strcmp(model, "gpt2");
    if (!spm && !bpe) {
        tk_err_set(err, "unsupported tokenizer.ggml.model '%.64s' (supported: llama, gpt2)", model);
        free(model);
        return -1;
    }
    free(model);

    const tk_gguf_kv *toks = find_array(g, "tokenizer.ggml.tokens", err, true, &rc);
    if (rc) return -1;
    if (toks->arr_type != TK_GGUF_STRING)
        return tk_err_set(err, "tokenizer.ggml.tokens is not a string array");
    if (toks->arr_n == 0 || toks->arr_n > (1u << 24))
        return tk_err_set(err, "tokenizer.ggml.tokens has %llu entries", (unsigned long long)toks->arr_n);
    if (!toks->arr_strs) return tk_err_set(err, "tokenizer.ggml.tokens: strings not decoded");
    int n = (int)toks->arr_n;

    const tk_gguf_kv *scores = find_array(g, "tokenizer.ggml.scores", err, false, &rc);
    if (rc) return -1;
    if (scores) {
        if (scores->arr_type != TK_GGUF_F32 && scores->arr_type != TK_GGUF_I32)
            return tk_err_set(err, "tokenizer.ggml.scores must be a float32 or int32 array");
        if (scores->arr_n < (uint64_t)n)
            return tk_err_set(err, "tokenizer.ggml.scores has %llu entries for %d tokens",
                              (unsigned long long)scores->arr_n, n);
    }
    const tk_gguf_kv *types = find_array(g, "tokenizer.ggml.token_type", err, false, &rc);
    if (rc) return -1;
    if (types) {
        if (types->arr_type != TK_GGUF_I32) return tk_err_set(err, "tokenizer.ggml.token_type must be an int32 array");
        if (types->arr_n < (uint64_t)n)
            return tk_err_set(err, "tokenizer.ggml.token_type has %llu entries for %d tokens",
                              (unsigned long long)types->arr_n, n);
    }

    t->kind = spm ? TK_TOK_SPM : TK_TOK_BPE;
    t->algo = spm ? TK_ALGO_SPM_SCORES : TK_ALGO_BPE_RANKS;
    t->byte_level = bpe;
    if (tk_vocab_init(t, n, err)) return -1;
    for (int i = 0; i < n; i++) {
        const tk_gguf_str *s = &toks->arr_strs[i];
        if (s->len > (1u << 20)) return tk_err_set(err, "token %d is %llu bytes long", i, (unsigned long long)s->len);
        float sc = scores ? (float)tk_gguf_arr_f(scores, (uint64_t)i) : 0.0f;
        int ty = TK_TOKEN_NORMAL;
        if (types) {
            int64_t v = tk_gguf_arr_i(types, (uint64_t)i);
            if (v >= TK_TOKEN_NORMAL && v <= TK_TOKEN_BYTE) ty = (int)v;
        }
        char tmp[32];
        const char *p = s->ptr;
        size_t len = (size_t)s->len;
        if (len == 0) { /* llama.cpp names empty tokens */
            len = (size_t)snprintf(tmp, sizeof tmp, "[EMPTY_%d]", i);
            p = tmp;
        }
        if (tk_vocab_set(t, i, p, len, sc, ty, err)) return -1;
    }
    if (tk_vocab_finish(t, true, err)) return -1;

    if (bpe) {
        const tk_gguf_kv *merges = find_array(g, "tokenizer.ggml.merges", err, true, &rc);
        if (rc) return -1;
        if (merges->arr_type != TK_GGUF_STRING || (merges->arr_n > 0 && !merges->arr_strs))
            return tk_err_set(err, "tokenizer.ggml.merges is not a string array");
        if (merges->arr_n > (1u << 26)) return tk_err_set(err, "tokenizer.ggml.merges has too many entries");
        if (tk_merges_init(t, (int)merges->arr_n, err)) return -1;
        tk_sbuf cat = {0};
        for (uint64_t i = 0; i < merges->arr_n; i++) {
            const tk_gguf_str *m = &merges->arr_strs[i];
            const char *sp = m->len > 1 ? memchr(m->ptr + 1, ' ', (size_t)m->len - 1) : NULL;
            if (!sp) continue; /* llama.cpp keeps such entries as unusable pairs */
            size_t al = (size_t)(sp - m->ptr), bl = (size_t)m->len - al - 1;
            int a = tk_vocab_find(t, m->ptr, al), b = tk_vocab_find(t, sp + 1, bl);
            if (a < 0 || b < 0) continue; /* a pair of unknown pieces never applies */
            cat.n = 0;
            if (tk_sbuf_put(&cat, m->ptr, al) || tk_sbuf_put(&cat, sp + 1, bl)) {
                free(cat.s);
                return tk_err_set(err, "out of memory");
            }
            int r = tk_vocab_find(t, cat.s, cat.n);
            if (r < 0) continue;
            tk_merges_add(t, a, b, r, true);
        }
        free(cat.s);
        char *pre = tk_gguf_get_str(g, "tokenizer.ggml.pre");
        int prc = tk_pretok_set_kind(t, pre ? pre : "default", err);
        free(pre);
        if (prc) return -1;
    } else {
        bool asp = true;
        (void)tk_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &asp);
        if (asp && tk_norm_add(t, TK_NORM_PREPEND, " ", 1, "", 0, err)) return -1;
        if (tk_norm_add(t, TK_NORM_REPLACE, " ", 1, "\xe2\x96\x81", 3, err)) return -1;
        t->add_bos = true;
        snprintf(t->pre_name, sizeof t->pre_name, "default");
    }

    t->bos = special_id(g, "tokenizer.ggml.bos_token_id", n, spm ? (n > 1 ? 1 : -1) : -1);
    t->eos = special_id(g, "tokenizer.ggml.eos_token_id", n, spm ? (n > 2 ? 2 : -1) : -1);
    t->unk = special_id(g, "tokenizer.ggml.unknown_token_id", n, spm ? 0 : -1);
    t->eot = special_id(g, "tokenizer.ggml.eot_token_id", n, -1);
    t->eom = special_id(g, "tokenizer.ggml.eom_token_id", n, -1);
    t->pad = special_id(g, "tokenizer.ggml.padding_token_id", n, -1);
    bool ab;
    if (tk_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &ab) == 0) t->add_bos = ab;
    return tk_finalize_specials(t, true, err);
}

int tk_tokenizer_from_gguf(const tk_gguf *g, tk_tokenizer **out, tk_err *err) {
    *out = NULL;
    tk_tokenizer *t = tk_tok_alloc();
    if (!t) return tk_err_set(err, "out of memory");
    if (build(t, g, err)) {
        tk_tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}
