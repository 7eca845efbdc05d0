/* Embeddings (include/tokamak.h, tk_engine_embed): the final-norm hidden
 * states of token sequences, pooled.  The inputs are packed into batches of
 * the workspace's size, several sequences per pass, through
 * tk_engine_decode with the forward's hidden-state output. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

typedef struct embed_run {
    int32_t *tok, *pos, *seq;
    uint8_t *flag;
    int *owner;  /* per output row: the input it belongs to */
    float *rows; /* cap rows of dim floats */
    int *seq_of, *fed;
} embed_run;

static void run_free(tk_engine *e, embed_run *r, int n_inputs) {
    for (int i = 0; r->seq_of && i < n_inputs; i++)
        if (r->seq_of[i] >= 0) tk_engine_seq_free(e, r->seq_of[i]);
    free(r->tok);
    free(r->pos);
    free(r->seq);
    free(r->flag);
    free(r->owner);
    free(r->rows);
    free(r->seq_of);
    free(r->fed);
}

static bool wants_row(tk_pooling pooling, int p, int n) {
    return pooling == TK_POOLING_MEAN || (pooling == TK_POOLING_LAST && p == n - 1) || (pooling == TK_POOLING_CLS && p == 0);
}

int tk_engine_embed(tk_engine *e, const int32_t *const *tokens, const int *n_tokens, int n_inputs, tk_pooling pooling,
                    bool normalize, float *out, tk_err *err) {
    if (n_inputs <= 0 || !tokens || !n_tokens || !out) return tk_err_set(err, "embed: no inputs");
    if (pooling != TK_POOLING_MEAN && pooling != TK_POOLING_LAST && pooling != TK_POOLING_CLS)
        return tk_err_set(err, "embed: unknown pooling %d", (int)pooling);
    int nv = e->model.hp.n_vocab;
    for (int i = 0; i < n_inputs; i++) {
        if (n_tokens[i] <= 0) return tk_err_set(err, "input %d is empty", i);
        if (n_tokens[i] > e->ctx_len)
            return tk_err_set(err, "input %d has %d tokens; the context holds %d", i, n_tokens[i], e->ctx_len);
        for (int k = 0; k < n_tokens[i]; k++)
            if (tokens[i][k] < 0 || tokens[i][k] >= nv)
                return tk_err_set(err, "input %d token %d (%d) is outside the vocabulary [0, %d)", i, k, tokens[i][k], nv);
    }
    size_t D = (size_t)e->model.hp.dim;
    int cap = e->ws.max_tokens;
    embed_run r = {0};
    r.tok = malloc((size_t)cap * sizeof *r.tok);
    r.pos = malloc((size_t)cap * sizeof *r.pos);
    r.seq = malloc((size_t)cap * sizeof *r.seq);
    r.flag = malloc((size_t)cap);
    r.owner = malloc((size_t)cap * sizeof *r.owner);
    r.rows = malloc((size_t)cap * D * sizeof *r.rows);
    r.seq_of = malloc((size_t)n_inputs * sizeof *r.seq_of);
    r.fed = calloc((size_t)n_inputs, sizeof *r.fed);
    if (!r.tok || !r.pos || !r.seq || !r.flag || !r.owner || !r.rows || !r.seq_of || !r.fed) {
        run_free(e, &r, r.seq_of ? 0 : n_inputs);
        return tk_err_set(err, "out of memory");
    }
    for (int i = 0; i < n_inputs; i++) r.seq_of[i] = -1;
    memset(out, 0, (size_t)n_inputs * D * sizeof *out);
    int lo = 0; /* inputs before lo are done */
    while (lo < n_inputs) {
        int T = 0, n_rows = 0;
        for (int i = lo; i < n_inputs && T < cap; i++) {
            if (r.fed[i] == n_tokens[i]) continue;
            if (r.seq_of[i] < 0) {
                tk_err slot_err;
                int s = tk_engine_seq_new(e, &slot_err);
                if (s < 0) break; /* every slot busy: run what is packed, then go on */
                r.seq_of[i] = s;
            }
            int take = n_tokens[i] - r.fed[i];
            if (take > cap - T) take = cap - T;
            for (int k = 0; k < take; k++, T++) {
                int p = r.fed[i] + k;
                r.tok[T] = tokens[i][p];
                r.pos[T] = p;
                r.seq[T] = r.seq_of[i];
                r.flag[T] = wants_row(pooling, p, n_tokens[i]);
                if (r.flag[T]) r.owner[n_rows++] = i;
            }
            r.fed[i] += take;
        }
        if (T == 0) {
            run_free(e, &r, n_inputs);
            return tk_err_set(err, "all %d sequence slots are in use", e->max_seqs);
        }
        tk_batch b = {T, r.tok, r.pos, r.seq, r.flag};
        e->ws.hidden_out = true;
        int rc = tk_engine_decode(e, &b, r.rows, err);
        e->ws.hidden_out = false;
        if (rc) {
            run_free(e, &r, n_inputs);
            return -1;
        }
        for (int k = 0; k < n_rows; k++) {
            float *o = out + (size_t)r.owner[k] * D;
            const float *h = r.rows + (size_t)k * D;
            for (size_t d = 0; d < D; d++) o[d] += h[d];
        }
        for (int i = lo; i < n_inputs; i++) {
            if (r.seq_of[i] >= 0 && r.fed[i] == n_tokens[i]) {
                tk_engine_seq_free(e, r.seq_of[i]);
                r.seq_of[i] = -1;
            }
        }
        while (lo < n_inputs && r.fed[lo] == n_tokens[lo] && r.seq_of[lo] < 0) lo++;
    }
    for (int i = 0; i < n_inputs; i++) {
        float *o = out + (size_t)i * D;
        double scale = pooling == TK_POOLING_MEAN ? 1.0 / n_tokens[i] : 1.0;
        if (normalize) {
            double ss = 0;
            for (size_t d = 0; d < D; d++) ss += (double)o[d] * o[d];
            scale = ss > 0 ? 1.0 / sqrt(ss) : 1.0; /* the mean's scale cancels */
        }
        for (size_t d = 0; d < D; d++) o[d] = (float)(o[d] * scale);
    }
    run_free(e, &r, n_inputs);
    return 0;
}
