/* Writes the vocabulary as standard tokenizer.ggml.* keys. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/gguf.h"
#include "tok_internal.h"

static int set_id(tk_gguf_writer *w, const char *key, int id) {
    if (id < 0) return 0;
    return tk_gguf_set_u32(w, key, (uint32_t)id);
}

int tk_tokenizer_to_gguf(const tk_tokenizer *t, tk_gguf_writer *w, tk_err *err) {
    int n = t->n_vocab;
    const char **pieces = malloc((size_t)n * sizeof *pieces);
    float *scores = malloc((size_t)n * sizeof *scores);
    int32_t *types = malloc((size_t)n * sizeof *types);
    char **merges = NULL;
    char *mblob = NULL;
    int nm = 0, rc = 0;
    if (!pieces || !scores || !types) {
        rc = tk_err_set(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        pieces[i] = t->blob + t->off[i];
        scores[i] = t->score[i];
        types[i] = t->type[i];
    }
    bool spm = t->kind == TK_TOK_SPM;
    if (tk_gguf_set_str(w, "tokenizer.ggml.model", spm ? "llama" : "gpt2") ||
        tk_gguf_set_str(w, "tokenizer.ggml.pre", t->pre_name[0] ? t->pre_name : "default") ||
        tk_gguf_set_arr_str(w, "tokenizer.ggml.tokens", pieces, (size_t)n) ||
        tk_gguf_set_arr_f32(w, "tokenizer.ggml.scores", scores, (size_t)n) ||
        tk_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)n)) {
        rc = tk_err_set(err, "writing the tokenizer vocabulary failed");
        goto done;
    }
    if (!spm && t->n_merges > 0) {
        size_t total = 0;
        for (int r = 0; r < t->n_merges; r++)
            if (t->merge_l[r] >= 0) total += t->len[t->merge_l[r]] + t->len[t->merge_r[r]] + 2;
        merges = malloc((size_t)t->n_merges * sizeof *merges);
        mblob = malloc(total + 1);
        if (!merges || !mblob) {
            rc = tk_err_set(err, "out of memory");
            goto done;
        }
        char *p = mblob;
        for (int r = 0; r < t->n_merges; r++) {
            if (t->merge_l[r] < 0) continue;
            int a = t->merge_l[r], b = t->merge_r[r];
            merges[nm++] = p;
            memcpy(p, t->blob + t->off[a], t->len[a]);
            p += t->len[a];
            *p++ = ' ';
            memcpy(p, t->blob + t->off[b], t->len[b]);
            p += t->len[b];
            *p++ = 0;
        }
        if (tk_gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, (size_t)nm)) {
            rc = tk_err_set(err, "writing tokenizer.ggml.merges failed");
            goto done;
        }
    }
    if (set_id(w, "tokenizer.ggml.bos_token_id", t->bos) ||
        set_id(w, "tokenizer.ggml.eos_token_id", t->eos) ||
        set_id(w, "tokenizer.ggml.unknown_token_id", t->unk) ||
        set_id(w, "tokenizer.ggml.eot_token_id", t->eot) ||
        set_id(w, "tokenizer.ggml.eom_token_id", t->eom) ||
        set_id(w, "tokenizer.ggml.padding_token_id", t->pad) ||
        tk_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos) ||
        tk_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", false)) {
        rc = tk_err_set(err, "writing the special token ids failed");
        goto done;
    }
    if (spm) {
        bool asp = t->n_norm > 0 && t->norm[0].kind == TK_NORM_PREPEND;
        if (tk_gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", asp)) {
            rc = tk_err_set(err, "writing tokenizer.ggml.add_space_prefix failed");
            goto done;
        }
    }
done:
    free(pieces);
    free(scores);
    free(types);
    free(merges);
    free(mblob);
    return rc;
}
