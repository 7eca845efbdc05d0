/* Helpers for comparing engine logits with the reference files in ../shared
 * (golden, gguf-fixtures and models directories). */
#ifndef TK_GOLDEN_UTIL_H
#define TK_GOLDEN_UTIL_H

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <tokamak.h>

static inline json_t *load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fprintf(stderr, "cannot parse %s: %s (line %d)\n", path, je.text, je.line);
    return j;
}

/* Reads a JSON array of integers; returns count, *out malloc'd. */
static inline int json_ints(json_t *arr, int32_t **out) {
    int n = (int)json_array_size(arr);
    *out = malloc(sizeof(int32_t) * (n ? n : 1));
    for (int i = 0; i < n; i++) (*out)[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return n;
}

/* max |a - ref| / (max(ref) - min(ref)) over one row. */
static inline double rel_row_error(const float *a, json_t *ref_row, int n, int *argmax_ref, double *margin) {
    double lo = INFINITY, hi = -INFINITY, worst = 0, second = -INFINITY;
    int best = 0;
    for (int i = 0; i < n; i++) {
        double r = json_number_value(json_array_get(ref_row, i));
        if (r < lo) lo = r;
        if (r > hi) {
            second = hi;
            hi = r;
            best = i;
        } else if (r > second) {
            second = r;
        }
        double d = fabs((double)a[i] - r);
        if (d > worst) worst = d;
    }
    if (argmax_ref) *argmax_ref = best;
    if (margin) *margin = hi - second;
    return worst / (hi - lo);
}

static inline int argmax_f(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Greedy continuation of `tokens` for n steps, one token per forward. */
static inline int greedy_continue(tk_engine *e, const int32_t *tokens, int n_prompt, int steps, int32_t *out,
                                  tk_err *err) {
    int nv = tk_engine_n_vocab(e);
    float *logits = malloc(sizeof(float) * (size_t)nv);
    int seq = tk_engine_seq_new(e, err);
    if (seq < 0) {
        free(logits);
        return -1;
    }
    int32_t pos[1024], seqs[1024];
    uint8_t flags[1024];
    int rc = 0;
    for (int i = 0; i < n_prompt; i++) {
        pos[i] = i;
        seqs[i] = seq;
        flags[i] = i == n_prompt - 1;
    }
    tk_batch b = {n_prompt, (int32_t *)tokens, pos, seqs, flags};
    rc = tk_engine_decode(e, &b, logits, err);
    for (int s = 0; s < steps && rc == 0; s++) {
        int32_t next = argmax_f(logits, nv);
        out[s] = next;
        int32_t p = n_prompt + s, q = seq;
        uint8_t f = 1;
        tk_batch one = {1, &next, &p, &q, &f};
        if (s + 1 < steps) rc = tk_engine_decode(e, &one, logits, err);
    }
    tk_engine_seq_free(e, seq);
    free(logits);
    return rc;
}

#endif
