/* The routed FFN.  The router runs in float; each token picks the
 * n_expert_used largest logits (ties: the lower index), weighted by their
 * softmax over all experts (renormalized over the chosen ones with
 * moe_norm_topk, which equals a softmax over the chosen logits).  Tokens
 * are grouped by expert so each expert's weights are read once per batch:
 * its rows are gathered, multiplied with the ordinary quantized kernels,
 * and added, weighted, into each token's sum.  A token's sum is built over
 * its experts in ascending expert order whatever the batch holds, and the
 * kernels compute each row independently of the others, so a token gets
 * the same bits alone or in any batch. */
#include "moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/ops.h"

#define MOE_MAX_EXPERTS 4096

int tk_moe_check_hparams(const tk_model *m, tk_err *err) {
    const tk_hparams *hp = &m->hp;
    if (!m->arch->moe) {
        if (hp->n_expert > 0)
            return tk_err_set(err, "expert_count %d given for architecture '%s', which has no experts",
                              hp->n_expert, m->arch->name);
        return 0;
    }
    if (hp->n_expert <= 0 || hp->n_expert > MOE_MAX_EXPERTS)
        return tk_err_set(err, "expert_count %d must be in [1, %d] for architecture '%s'", hp->n_expert,
                          MOE_MAX_EXPERTS, m->arch->name);
    if (hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert)
        return tk_err_set(err, "expert_used_count %d must be in [1, expert_count %d]", hp->n_expert_used,
                          hp->n_expert);
    if (hp->expert_ffn_dim <= 0)
        return tk_err_set(err, "expert_feed_forward_length %d must be positive", hp->expert_ffn_dim);
    return 0;
}

int64_t tk_moe_longest_input(const tk_model *m) {
    if (!m->arch->moe) return 0;
    return m->hp.expert_ffn_dim > m->hp.shexp_ffn_dim ? m->hp.expert_ffn_dim : m->hp.shexp_ffn_dim;
}

/* Expert e of a stacked [ne0, ne1, n_expert] tensor as a 2-D view. */
static void expert_view(const tk_tensor *stack, int e, tk_tensor *out) {
    size_t bytes = tk_dtype_row_bytes(stack->type, stack->ne[0]) * (size_t)stack->ne[1];
    *out = *stack;
    out->ndim = 2;
    out->ne[2] = 1;
    out->data = (const unsigned char *)stack->data + bytes * (size_t)e;
    out->nbytes = bytes;
}

int tk_moe_bind(tk_model *m, tk_err *err) {
    const tk_hparams *hp = &m->hp;
    const size_t E = (size_t)hp->n_expert, D = (size_t)hp->dim, nl = (size_t)hp->n_layers;
    /* gate_shexp and the others are bound together or not at all */
    for (int l = 0; l < hp->n_layers; l++) {
        const tk_layer *L = &m->layers[l];
        int n_sh = !!L->gate_shexp + !!L->up_shexp + !!L->down_shexp;
        if (n_sh != 0 && n_sh != 3)
            return tk_err_set(err, "layer %d has an incomplete shared expert (gate, up and down are needed)", l);
    }
    /* attention biases in a file whose table has no bias roles: ignoring
     * them would give wrong logits */
    if (tk_source_find(&m->src, "blk.0.attn_q.bias") && !m->layers[0].bq)
        return tk_err_set(err, "architecture '%s': attention biases (blk.0.attn_q.bias) are not supported yet",
                          m->arch->name);
    m->moe_router_f32 = malloc(nl * E * D * sizeof(float));
    m->moe_views = malloc(nl * E * 3 * sizeof(tk_tensor));
    if (!m->moe_router_f32 || !m->moe_views) return tk_err_set(err, "out of memory for the experts");
    for (size_t l = 0; l < nl; l++) {
        tk_layer *L = &m->layers[l];
        L->router_f32 = m->moe_router_f32 + l * E * D;
        size_t row = tk_dtype_row_bytes(L->moe_router->type, (int64_t)D);
        for (size_t e = 0; e < E; e++)
            tk_dequant_row(L->moe_router->type, (const unsigned char *)L->moe_router->data + e * row,
                           L->router_f32 + e * D, (int64_t)D);
        L->experts = m->moe_views + l * E * 3;
        for (size_t e = 0; e < E; e++) {
            expert_view(L->gate_exps, (int)e, &L->experts[3 * e]);
            expert_view(L->up_exps, (int)e, &L->experts[3 * e + 1]);
            expert_view(L->down_exps, (int)e, &L->experts[3 * e + 2]);
        }
    }
    return 0;
}

int tk_moe_ws_init(tk_forward_ws *ws, const tk_model *m, int max_tokens) {
    if (!m->arch->moe) return 0;
    const tk_hparams *hp = &m->hp;
    const size_t T = (size_t)max_tokens, E = (size_t)hp->n_expert, K = (size_t)hp->n_expert_used;
    const size_t D = (size_t)hp->dim, F = (size_t)tk_moe_longest_input(m);
    ws->moe_logits = malloc(T * E * sizeof(float));
    ws->moe_choice = malloc(T * K * sizeof(int));
    ws->moe_weight = malloc(T * K * sizeof(float));
    ws->moe_order = malloc((E + 1) * sizeof(int));
    ws->moe_rows = malloc(T * K * sizeof(int));
    ws->moe_x = malloc(T * D * sizeof(float));
    ws->moe_y = malloc(T * D * sizeof(float));
    ws->moe_acc = malloc(T * D * sizeof(float));
    ws->moe_h1 = malloc(T * F * sizeof(float));
    ws->moe_h2 = malloc(T * F * sizeof(float));
    return ws->moe_logits && ws->moe_choice && ws->moe_weight && ws->moe_order && ws->moe_rows && ws->moe_x &&
                   ws->moe_y && ws->moe_acc && ws->moe_h1 && ws->moe_h2
               ? 0
               : -1;
}

void tk_moe_ws_free(tk_forward_ws *ws) {
    free(ws->moe_logits);
    free(ws->moe_choice);
    free(ws->moe_weight);
    free(ws->moe_order);
    free(ws->moe_rows);
    free(ws->moe_x);
    free(ws->moe_y);
    free(ws->moe_acc);
    free(ws->moe_h1);
    free(ws->moe_h2);
}

/* Token t's experts (ascending index) and their weights. */
static void route_token(const tk_model *m, const float *logits, int *choice, float *weight) {
    const int E = m->hp.n_expert, K = m->hp.n_expert_used;
    float mx = -INFINITY;
    for (int e = 0; e < E; e++)
        if (logits[e] > mx) mx = logits[e];
    double z = 0;
    for (int e = 0; e < E; e++) z += exp((double)logits[e] - mx);
    /* top-K by repeated selection; a chosen expert's slot is skipped */
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int j = 0; j < k; j++) taken |= choice[j] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        choice[k] = best;
    }
    /* ascending expert order: the order a token's sum is built in */
    for (int i = 1; i < K; i++)
        for (int j = i; j > 0 && choice[j - 1] > choice[j]; j--) {
            int c = choice[j];
            choice[j] = choice[j - 1];
            choice[j - 1] = c;
        }
    double sum = 0;
    for (int k = 0; k < K; k++) sum += exp((double)logits[choice[k]] - mx) / z;
    for (int k = 0; k < K; k++) {
        double p = exp((double)logits[choice[k]] - mx) / z;
        weight[k] = (float)(m->arch->moe_norm_topk ? p / sum : p);
    }
}

/* out (n rows of dim floats) = down(act(gate(in)) * up(in)). */
static void glu_ffn(const tk_model *m, int layer, const tk_tensor *gate, const tk_tensor *up, const tk_tensor *down,
                    const float *in, int n, float *out, tk_forward_ws *ws, tk_threadpool *pool) {
    tk_forward_glu(m, layer, gate, up, in, n, ws->moe_h1, ws->moe_h2, ws, pool);
    if (ws->observe) ws->observe(ws->observe_ctx, layer, down, ws->moe_h1, n, (int)gate->ne[1]);
    tk_matmul(pool, &ws->mm, down, ws->moe_h1, gate->ne[1], n, out, m->hp.dim);
}

void tk_moe_ffn(const tk_model *m, int layer, int T, tk_forward_ws *ws, tk_threadpool *pool) {
    const tk_layer *L = &m->layers[layer];
    const int E = m->hp.n_expert, K = m->hp.n_expert_used, D = m->hp.dim;
    for (int t = 0; t < T; t++) {
        const float *x = ws->xn + (size_t)t * D;
        float *lg = ws->moe_logits + (size_t)t * E;
        for (int e = 0; e < E; e++) {
            const float *r = L->router_f32 + (size_t)e * D;
            float s = 0;
            for (int i = 0; i < D; i++) s += r[i] * x[i];
            lg[e] = s;
        }
        route_token(m, lg, ws->moe_choice + (size_t)t * K, ws->moe_weight + (size_t)t * K);
    }
    /* group (token, slot) pairs by expert, tokens in batch order */
    int *off = ws->moe_order;
    memset(off, 0, (size_t)(E + 1) * sizeof(int));
    for (int i = 0; i < T * K; i++) off[ws->moe_choice[i] + 1]++;
    for (int e = 0; e < E; e++) off[e + 1] += off[e];
    for (int i = 0; i < T * K; i++) ws->moe_rows[off[ws->moe_choice[i]]++] = i;
    for (int e = E; e > 0; e--) off[e] = off[e - 1];
    off[0] = 0;

    memset(ws->moe_acc, 0, (size_t)T * D * sizeof(float));
    for (int e = 0; e < E; e++) {
        const int n = off[e + 1] - off[e];
        if (n == 0) continue;
        const int *rows = ws->moe_rows + off[e];
        for (int i = 0; i < n; i++)
            memcpy(ws->moe_x + (size_t)i * D, ws->xn + (size_t)(rows[i] / K) * D, (size_t)D * sizeof(float));
        const tk_tensor *ex = L->experts + 3 * (size_t)e;
        glu_ffn(m, layer, &ex[0], &ex[1], &ex[2], ws->moe_x, n, ws->moe_y, ws, pool);
        for (int i = 0; i < n; i++) {
            float w = ws->moe_weight[rows[i]], *acc = ws->moe_acc + (size_t)(rows[i] / K) * D;
            const float *y = ws->moe_y + (size_t)i * D;
            for (int c = 0; c < D; c++) acc[c] += w * y[c];
        }
    }
    if (L->gate_shexp) {
        glu_ffn(m, layer, L->gate_shexp, L->up_shexp, L->down_shexp, ws->xn, T, ws->moe_y, ws, pool);
        for (int t = 0; t < T; t++) {
            const float *x = ws->xn + (size_t)t * D, *y = ws->moe_y + (size_t)t * D;
            float g = 0;
            for (int i = 0; i < D; i++) g += L->shexp_gate[i] * x[i];
            g = 1.0f / (1.0f + expf(-g));
            float *acc = ws->moe_acc + (size_t)t * D;
            for (int c = 0; c < D; c++) acc[c] += g * y[c];
        }
    }
}
