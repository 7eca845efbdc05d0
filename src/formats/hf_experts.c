#include "hf_experts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { X_GATE, X_UP, X_DOWN, X_PARTS };

struct tk_hf_experts {
    tk_hparams hp;              /* a copy: the caller's may not outlive the source */
    const tk_st_tensor **parts; /* [layer][part][expert] */
    void **stacked;             /* [layer][part] buffers */
};

static const char *const gguf_part[X_PARTS] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

int tk_hf_experts_new(const tk_hparams *hp, tk_hf_experts **out, tk_err *err) {
    *out = NULL;
    tk_hf_experts *x = calloc(1, sizeof *x);
    size_t slots = (size_t)hp->n_layers * X_PARTS;
    if (x) {
        x->hp = *hp;
        x->parts = calloc(slots * (size_t)(hp->n_expert ? hp->n_expert : 1), sizeof *x->parts);
        x->stacked = calloc(slots, sizeof *x->stacked);
    }
    if (!x || !x->parts || !x->stacked) {
        tk_hf_experts_free(x);
        return tk_err_set(err, "out of memory for %d experts", hp->n_expert);
    }
    *out = x;
    return 0;
}

/* "model.layers.L.<infix>.experts.E.<part>.weight" with L and E plain
 * decimal numbers; -1 if t is not such a name. */
static int parse_name(const char *name, long *layer, long *expert) {
    static const char *const infix[] = {"block_sparse_moe", "mlp"};
    static const char *const parts[][X_PARTS] = {{"w1", "w3", "w2"}, {"gate_proj", "up_proj", "down_proj"}};
    for (int f = 0; f < 2; f++) {
        char fmt[96];
        int end = -1;
        snprintf(fmt, sizeof fmt, "model.layers.%%9ld.%s.experts.%%9ld.%%n", infix[f]);
        if (sscanf(name, fmt, layer, expert, &end) != 2 || end < 0) continue;
        if (*layer < 0 || *expert < 0) return -1;
        for (int p = 0; p < X_PARTS; p++) {
            char tail[32];
            snprintf(tail, sizeof tail, "%s.weight", parts[f][p]);
            if (!strcmp(name + end, tail)) return p;
        }
    }
    return -1;
}

int tk_hf_experts_add(tk_hf_experts *x, const char *file, const tk_st_tensor *t, tk_err *err) {
    long layer, expert;
    int p = parse_name(t->name, &layer, &expert);
    if (p < 0) return 0;
    const tk_hparams *hp = &x->hp;
    if (hp->n_expert == 0)
        return tk_err_set(err, "%s: tensor '%.200s' is an expert but config.json gives no expert count", file,
                          t->name);
    if (layer >= hp->n_layers || expert >= hp->n_expert)
        return tk_err_set(err, "%s: tensor '%.200s': layer %ld / expert %ld beyond num_hidden_layers %d / "
                          "expert count %d", file, t->name, layer, expert, hp->n_layers, hp->n_expert);
    const int64_t out = p == X_DOWN ? hp->dim : hp->expert_ffn_dim, in = p == X_DOWN ? hp->expert_ffn_dim : hp->dim;
    if (t->ndim != 2 || t->shape[0] != out || t->shape[1] != in)
        return tk_err_set(err, "%s: tensor '%.200s' must have shape [%lld, %lld] (config.json)", file, t->name,
                          (long long)out, (long long)in);
    const tk_st_tensor **slot = &x->parts[((size_t)layer * X_PARTS + (size_t)p) * hp->n_expert + (size_t)expert];
    if (*slot) return tk_err_set(err, "%s: tensor '%.200s' appears twice", file, t->name);
    *slot = t;
    return 1;
}

int tk_hf_experts_stack(tk_hf_experts *x, tk_tensor *tensors, int *n, int cap, tk_err *err) {
    const tk_hparams *hp = &x->hp;
    const size_t E = (size_t)hp->n_expert;
    for (int l = 0; l < hp->n_layers && E; l++)
        for (int p = 0; p < X_PARTS; p++) {
            const tk_st_tensor **ts = &x->parts[((size_t)l * X_PARTS + (size_t)p) * E];
            size_t present = 0;
            for (size_t e = 0; e < E; e++) present += ts[e] != NULL;
            if (present == 0) continue; /* a dense layer: the model's binding names what is missing */
            if (present != E)
                return tk_err_set(err, "layer %d has %zu of %zu experts' %s", l, present, E, gguf_part[p]);
            for (size_t e = 1; e < E; e++)
                if (ts[e]->dtype != ts[0]->dtype || ts[e]->nbytes != ts[0]->nbytes)
                    return tk_err_set(err, "layer %d: experts' %s differ in type", l, gguf_part[p]);
            if (*n >= cap) return tk_err_set(err, "internal error: tensor overflow");
            unsigned char *buf = malloc(ts[0]->nbytes * E);
            char *name = malloc(64);
            if (!buf || !name) {
                free(buf);
                free(name);
                return tk_err_set(err, "out of memory stacking layer %d's experts", l);
            }
            x->stacked[(size_t)l * X_PARTS + (size_t)p] = buf;
            for (size_t e = 0; e < E; e++) memcpy(buf + e * ts[0]->nbytes, ts[e]->data, ts[0]->nbytes);
            snprintf(name, 64, "blk.%d.%s.weight", l, gguf_part[p]);
            tk_tensor *d = &tensors[(*n)++];
            memset(d, 0, sizeof *d);
            d->name = name;
            d->type = ts[0]->dtype;
            d->ndim = 3;
            d->ne[0] = ts[0]->shape[1];
            d->ne[1] = ts[0]->shape[0];
            d->ne[2] = (int64_t)E;
            d->ne[3] = 1;
            d->data = buf;
            d->nbytes = ts[0]->nbytes * E;
        }
    return 0;
}

void tk_hf_experts_free(tk_hf_experts *x) {
    if (!x) return;
    if (x->stacked)
        for (size_t i = 0; i < (size_t)x->hp.n_layers * X_PARTS; i++) free(x->stacked[i]);
    free(x->stacked);
    free(x->parts);
    free(x);
}
