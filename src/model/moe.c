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
/* Tokens per pass through the experts: bounds the workspace (a chunk's
 * weights are read once; 256 tokens keep that a small share of a prefill). */
#define MOE_CHUNK 256

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

/* Rows of the expert matmuls per chunk of tokens: n_expert_used per token,
 * plus one for the shared expert. */
static int chunk_slots(const tk_model *m, int max_tokens) {
    const int chunk = max_tokens < MOE_CHUNK ? max_tokens : MOE_CHUNK;
    return chunk * (m->hp.n_expert_used + (m->hp.shexp_ffn_dim > 0));
}

int tk_moe_max_rows(const tk_model *m, int max_tokens) {
    return m->arch->moe ? chunk_slots(m, max_tokens) : 0;
}

int tk_moe_ws_init(tk_forward_ws *ws, const tk_model *m, int max_tokens) {
    if (!m->arch->moe) return 0;
    const tk_hparams *hp = &m->hp;
    const size_t T = (size_t)max_tokens, E = (size_t)hp->n_expert, K = (size_t)hp->n_expert_used;
    const size_t C = (size_t)(max_tokens < MOE_CHUNK ? max_tokens : MOE_CHUNK), S = (size_t)chunk_slots(m, max_tokens);
    const size_t D = (size_t)hp->dim, F = (size_t)tk_moe_longest_input(m);
    ws->moe_logits = malloc(C * E * sizeof(float));
    ws->moe_choice = malloc(C * K * sizeof(int));
    ws->moe_weight = malloc(C * K * sizeof(float));
    ws->moe_order = malloc((E + 2) * sizeof(int));
    ws->moe_rows = malloc(S * sizeof(int));
    ws->moe_row_w = malloc(S * sizeof(float));
    ws->moe_w = malloc(3 * (E + 1) * sizeof(const tk_tensor *));
    ws->moe_x = malloc(S * D * sizeof(float));
    ws->moe_y = malloc(S * D * sizeof(float));
    ws->moe_acc = malloc(T * D * sizeof(float));
    ws->moe_h1 = malloc(S * F * sizeof(float));
    ws->moe_h2 = malloc(S * F * sizeof(float));
    return ws->moe_logits && ws->moe_choice && ws->moe_weight && ws->moe_order && ws->moe_rows && ws->moe_row_w &&
                   ws->moe_w && ws->moe_x && ws->moe_y && ws->moe_acc && ws->moe_h1 && ws->moe_h2
               ? 0
               : -1;
}

void tk_moe_ws_free(tk_forward_ws *ws) {
    free(ws->moe_logits);
    free(ws->moe_choice);
    free(ws->moe_weight);
    free(ws->moe_order);
    free(ws->moe_rows);
    free(ws->moe_row_w);
    free(ws->moe_w);
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

/* The observe hook on rows of `dim` floats at stride ld. */
static void observe_rows(tk_forward_ws *ws, int layer, const tk_tensor *w, const float *x, int64_t ld, int n,
                         int dim) {
    if (ld == dim) {
        ws->observe(ws->observe_ctx, layer, w, x, n, dim);
        return;
    }
    for (int i = 0; i < n; i++) ws->observe(ws->observe_ctx, layer, w, x + (size_t)i * ld, 1, dim);
}

/* Rows of the grouped matmuls ("slots"): the (token, expert) pairs grouped
 * by expert in ascending order, tokens in batch order within a group, then
 * one per token for the shared expert.  ws->moe_order gets the groups'
 * offsets, moe_rows each slot's token (in the chunk), moe_row_w its
 * weight.  Returns the number of groups. */
static int group_slots(const tk_model *m, int layer, int n, const float *xn, tk_forward_ws *ws) {
    const tk_layer *L = &m->layers[layer];
    const int E = m->hp.n_expert, K = m->hp.n_expert_used, D = m->hp.dim;
    int *off = ws->moe_order;
    memset(off, 0, (size_t)(E + 2) * sizeof(int));
    for (int i = 0; i < n * K; i++) off[ws->moe_choice[i] + 1]++;
    for (int e = 0; e < E; e++) off[e + 1] += off[e];
    for (int i = 0; i < n * K; i++) {
        const int s = off[ws->moe_choice[i]]++;
        ws->moe_rows[s] = i / K;
        ws->moe_row_w[s] = ws->moe_weight[i];
    }
    for (int e = E; e > 0; e--) off[e] = off[e - 1];
    off[0] = 0;
    if (!L->gate_shexp) return E;
    for (int t = 0; t < n; t++) {
        const float g = tk_dot_f32(L->shexp_gate, xn + (size_t)t * D, D);
        ws->moe_rows[n * K + t] = t;
        ws->moe_row_w[n * K + t] = 1.0f / (1.0f + expf(-g));
    }
    off[E + 1] = n * K + n;
    return E + 1;
}

/* The routed FFN of tokens [t0, t0 + n) into ws->moe_acc. */
static void moe_chunk(const tk_model *m, int layer, int t0, int n, tk_forward_ws *ws, tk_threadpool *pool) {
    const tk_layer *L = &m->layers[layer];
    const int E = m->hp.n_expert, K = m->hp.n_expert_used, D = m->hp.dim;
    const int64_t F = tk_moe_longest_input(m);
    const float *xn = ws->xn + (size_t)t0 * D;
    /* router: float weights through the float kernel */
    const tk_tensor router = {.type = TK_F32, .ndim = 2, .ne = {D, E, 1, 1}, .data = L->router_f32,
                              .nbytes = (size_t)E * D * sizeof(float)};
    tk_matmul(pool, &ws->mm, &router, xn, D, n, ws->moe_logits, E);
    for (int t = 0; t < n; t++)
        route_token(m, ws->moe_logits + (size_t)t * E, ws->moe_choice + (size_t)t * K,
                    ws->moe_weight + (size_t)t * K);
    const int n_groups = group_slots(m, layer, n, xn, ws);
    const int *off = ws->moe_order, n_slots = off[n_groups];
    /* the observe hook sees each group's rows: gathered here; else the
     * grouped matmul packs each token's row once for all its experts */
    if (ws->observe)
        for (int s = 0; s < n_slots; s++)
            memcpy(ws->moe_x + (size_t)s * D, xn + (size_t)ws->moe_rows[s] * D, (size_t)D * sizeof(float));
    /* the groups' matrices: gate and up, then down */
    const tk_tensor **glu_w = ws->moe_w, **down_w = ws->moe_w + 2 * (E + 1);
    for (int e = 0; e < E; e++) {
        glu_w[2 * e] = &L->experts[3 * e];
        glu_w[2 * e + 1] = &L->experts[3 * e + 1];
        down_w[e] = &L->experts[3 * e + 2];
    }
    if (n_groups > E) {
        glu_w[2 * E] = L->gate_shexp;
        glu_w[2 * E + 1] = L->up_shexp;
        down_w[E] = L->down_shexp;
    }
    if (ws->observe)
        for (int g = 0; g < n_groups; g++) {
            if (off[g + 1] == off[g]) continue;
            ws->observe(ws->observe_ctx, layer, glu_w[2 * g], ws->moe_x + (size_t)off[g] * D, off[g + 1] - off[g], D);
            ws->observe(ws->observe_ctx, layer, glu_w[2 * g + 1], ws->moe_x + (size_t)off[g] * D,
                        off[g + 1] - off[g], D);
        }
    /* h1 = act(gate(x)) * up(x), every group in one dispatch */
    const bool gelu = m->arch->ffn_act == TK_ACT_GELU_TANH, fused = ws->fuse & TK_FUSE_GLU;
    tk_mm_grouped g1 = {.n_groups = n_groups, .n_w = 2, .W = glu_w, .off = off, .X = ws->observe ? ws->moe_x : xn,
                        .ldx = D, .src = ws->observe ? NULL : ws->moe_rows, .n_src = n, .gather = ws->moe_x,
                        .Y = {ws->moe_h1, ws->moe_h2}, .ldy = F,
                        .epi = !fused ? TK_MM_STORE : gelu ? TK_MM_GLU_GELU : TK_MM_GLU_SILU};
    tk_matmul_grouped(pool, &ws->mm, &g1);
    if (!fused)
        for (int g = 0; g < n_groups; g++)
            for (int s = off[g]; s < off[g + 1]; s++)
                ws->mm.glu(ws->moe_h1 + (size_t)s * F, ws->moe_h2 + (size_t)s * F, glu_w[2 * g]->ne[1], gelu);
    if (ws->observe)
        for (int g = 0; g < n_groups; g++)
            if (off[g + 1] > off[g])
                observe_rows(ws, layer, down_w[g], ws->moe_h1 + (size_t)off[g] * F, F, off[g + 1] - off[g],
                             (int)down_w[g]->ne[0]);
    /* acc[token] += weight * down(h1), groups in ascending order: the
     * routed experts, then the shared one (in a second dispatch when its
     * input length differs) */
    float *acc = ws->moe_acc + (size_t)t0 * D;
    memset(acc, 0, (size_t)n * D * sizeof(float));
    const bool sh_apart = n_groups > E && down_w[E]->ne[0] != down_w[0]->ne[0];
    tk_mm_grouped g2 = {.n_groups = sh_apart ? E : n_groups, .n_w = 1, .W = down_w, .off = off, .X = ws->moe_h1,
                        .ldx = F, .Y = {ws->moe_y}, .ldy = D, .epi = TK_MM_SCATTER, .dst = ws->moe_rows,
                        .weight = ws->moe_row_w, .out = acc, .ldo = D};
    tk_matmul_grouped(pool, &ws->mm, &g2);
    if (sh_apart) {
        g2.n_groups = 1;
        g2.W = down_w + E;
        g2.off = off + E;
        tk_matmul_grouped(pool, &ws->mm, &g2);
    }
}

void tk_moe_ffn(const tk_model *m, int layer, int T, tk_forward_ws *ws, tk_threadpool *pool) {
    for (int t0 = 0; t0 < T; t0 += MOE_CHUNK)
        moe_chunk(m, layer, t0, T - t0 < MOE_CHUNK ? T - t0 : MOE_CHUNK, ws, pool);
}
