#include "arch.h"

#include <stdio.h>
#include <string.h>

#include "model.h"

#define L(field) offsetof(tk_layer, field)
#define G(field) offsetof(tk_model_weights, field)

#define LLAMA_GLOBAL_ROLES                                                                             \
    {"token_embd.weight", G(tok_embd), false, true, TK_DIM_EMBD, TK_DIM_VOCAB},                        \
    {"output_norm.weight", G(output_norm), true, true, TK_DIM_EMBD, TK_DIM_NONE},                      \
    {"output.weight", G(output), false, false, TK_DIM_EMBD, TK_DIM_VOCAB}

static const tk_tensor_role llama_globals[] = {LLAMA_GLOBAL_ROLES};

/* Phi-3: LongRoPE's two sets of per-frequency divisors when the model
 * scales its RoPE that way (model.c requires both then). */
static const tk_tensor_role phi3_globals[] = {
    LLAMA_GLOBAL_ROLES,
    {"rope_factors_long.weight", G(rope_factors_long), true, false, TK_DIM_ROPE_HALF, TK_DIM_NONE},
    {"rope_factors_short.weight", G(rope_factors_short), true, false, TK_DIM_ROPE_HALF, TK_DIM_NONE},
};

/* Rows the layer tables share (llama.cpp's tensor names). */
#define ATTN_IN_ROLES                                                                                  \
    {"blk.%d.attn_norm.weight", L(attn_norm), true, true, TK_DIM_EMBD, TK_DIM_NONE},                   \
    {"blk.%d.attn_q.weight", L(wq), false, true, TK_DIM_EMBD, TK_DIM_Q},                               \
    {"blk.%d.attn_k.weight", L(wk), false, true, TK_DIM_EMBD, TK_DIM_KV},                              \
    {"blk.%d.attn_v.weight", L(wv), false, true, TK_DIM_EMBD, TK_DIM_KV}

#define ATTN_OUT_ROLE {"blk.%d.attn_output.weight", L(wo), false, true, TK_DIM_Q, TK_DIM_EMBD}

#define QKV_BIAS_ROLES(required)                                                                       \
    {"blk.%d.attn_q.bias", L(bq), true, required, TK_DIM_Q, TK_DIM_NONE},                              \
    {"blk.%d.attn_k.bias", L(bk), true, required, TK_DIM_KV, TK_DIM_NONE},                             \
    {"blk.%d.attn_v.bias", L(bv), true, required, TK_DIM_KV, TK_DIM_NONE}

/* per-head q/k RMSNorm */
#define QK_HEAD_NORM_ROLES                                                                             \
    {"blk.%d.attn_q_norm.weight", L(attn_q_norm), true, true, TK_DIM_HEAD, TK_DIM_NONE},               \
    {"blk.%d.attn_k_norm.weight", L(attn_k_norm), true, true, TK_DIM_HEAD, TK_DIM_NONE}

#define FFN_ROLES                                                                                      \
    {"blk.%d.ffn_norm.weight", L(ffn_norm), true, true, TK_DIM_EMBD, TK_DIM_NONE},                     \
    {"blk.%d.ffn_gate.weight", L(w_gate), false, true, TK_DIM_EMBD, TK_DIM_FFN},                       \
    {"blk.%d.ffn_up.weight", L(w_up), false, true, TK_DIM_EMBD, TK_DIM_FFN},                           \
    {"blk.%d.ffn_down.weight", L(w_down), false, true, TK_DIM_FFN, TK_DIM_EMBD}

/* Mixture-of-experts FFN: a router and experts stacked in 3-D tensors
 * [in, out, n_expert], optionally a shared expert with a sigmoid gate
 * (Qwen2-MoE). */
#define MOE_ROLES                                                                                      \
    {"blk.%d.ffn_norm.weight", L(ffn_norm), true, true, TK_DIM_EMBD, TK_DIM_NONE},                     \
    {"blk.%d.ffn_gate_inp.weight", L(moe_router), false, true, TK_DIM_EMBD, TK_DIM_EXPERTS},           \
    {"blk.%d.ffn_gate_exps.weight", L(gate_exps), false, true, TK_DIM_EMBD, TK_DIM_EXP_FFN},           \
    {"blk.%d.ffn_up_exps.weight", L(up_exps), false, true, TK_DIM_EMBD, TK_DIM_EXP_FFN},               \
    {"blk.%d.ffn_down_exps.weight", L(down_exps), false, true, TK_DIM_EXP_FFN, TK_DIM_EMBD}

static const tk_tensor_role llama_layer[] = {ATTN_IN_ROLES, ATTN_OUT_ROLE, FFN_ROLES};

/* Phi-3 / Phi-3.5 / Phi-4-mini as llama.cpp stores them: Llama's layer with
 * q/k/v fused in attn_qkv (rows q | k | v) and gate/up fused in ffn_up
 * (rows gate | up, as HF's gate_up_proj). */
static const tk_tensor_role phi3_layer[] = {
    {"blk.%d.attn_norm.weight", L(attn_norm), true, true, TK_DIM_EMBD, TK_DIM_NONE},
    ATTN_OUT_ROLE,
    {"blk.%d.ffn_norm.weight", L(ffn_norm), true, true, TK_DIM_EMBD, TK_DIM_NONE},
    {"blk.%d.ffn_down.weight", L(w_down), false, true, TK_DIM_FFN, TK_DIM_EMBD},
};
static const tk_fused_role phi3_fused[] = {
    {"blk.%d.attn_qkv.weight", TK_DIM_EMBD, TK_DIM_QKV, 3, {{L(wq), TK_DIM_Q}, {L(wk), TK_DIM_KV}, {L(wv), TK_DIM_KV}}},
    {"blk.%d.ffn_up.weight", TK_DIM_EMBD, TK_DIM_FFN2, 2, {{L(w_gate), TK_DIM_FFN}, {L(w_up), TK_DIM_FFN}}},
};

/* Qwen2 / Qwen2.5: Llama's tensors plus Q/K/V biases (GGUF q/k rows in
 * NeoX order, see gguf_source.c). */
static const tk_tensor_role qwen2_layer[] = {ATTN_IN_ROLES, QKV_BIAS_ROLES(true), ATTN_OUT_ROLE, FFN_ROLES};

/* Qwen3 (dense): Llama's tensors plus per-head q/k RMSNorm (weights used
 * as-is), no biases. */
static const tk_tensor_role qwen3_layer[] = {ATTN_IN_ROLES, QK_HEAD_NORM_ROLES, ATTN_OUT_ROLE, FFN_ROLES};

/* Gemma 3 (text): Llama's tensors plus per-head q/k norms and post-norms
 * after attention and FFN.  llama.cpp's converter stores Gemma's RMSNorm
 * weights with the "+1" of (1 + w) already added, so they are used as-is. */
static const tk_tensor_role gemma3_layer[] = {
    ATTN_IN_ROLES,
    QK_HEAD_NORM_ROLES,
    ATTN_OUT_ROLE,
    {"blk.%d.post_attention_norm.weight", L(attn_post_norm), true, true, TK_DIM_EMBD, TK_DIM_NONE},
    FFN_ROLES,
    {"blk.%d.post_ffw_norm.weight", L(ffn_post_norm), true, true, TK_DIM_EMBD, TK_DIM_NONE},
};

/* Mixtral: Llama attention, routed FFN. */
static const tk_tensor_role llama_moe_layer[] = {ATTN_IN_ROLES, ATTN_OUT_ROLE, MOE_ROLES};

/* Qwen2-MoE: routed experts plus a shared expert scaled by
 * sigmoid(ffn_gate_inp_shexp . x). */
static const tk_tensor_role qwen2moe_layer[] = {
    ATTN_IN_ROLES,
    ATTN_OUT_ROLE,
    QKV_BIAS_ROLES(false), /* as dense Qwen2 (optional: bias-free test files load too) */
    MOE_ROLES,
    {"blk.%d.ffn_gate_inp_shexp.weight", L(shexp_gate), true, true, TK_DIM_EMBD, TK_DIM_NONE},
    {"blk.%d.ffn_gate_shexp.weight", L(gate_shexp), false, true, TK_DIM_EMBD, TK_DIM_SHEXP_FFN},
    {"blk.%d.ffn_up_shexp.weight", L(up_shexp), false, true, TK_DIM_EMBD, TK_DIM_SHEXP_FFN},
    {"blk.%d.ffn_down_shexp.weight", L(down_shexp), false, true, TK_DIM_SHEXP_FFN, TK_DIM_EMBD},
};

/* Qwen3-MoE: per-head q/k RMSNorm, routed FFN, no shared expert. */
static const tk_tensor_role qwen3moe_layer[] = {ATTN_IN_ROLES, ATTN_OUT_ROLE, QK_HEAD_NORM_ROLES, MOE_ROLES};

/* OLMoE: q/k RMSNorm over the whole projections, routed FFN (top-8 of 64,
 * norm_topk_prob false). */
static const tk_tensor_role olmoe_layer[] = {
    ATTN_IN_ROLES,
    ATTN_OUT_ROLE,
    {"blk.%d.attn_q_norm.weight", L(attn_q_norm), true, true, TK_DIM_Q, TK_DIM_NONE},
    {"blk.%d.attn_k_norm.weight", L(attn_k_norm), true, true, TK_DIM_KV, TK_DIM_NONE},
    MOE_ROLES,
};

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

static const tk_arch archs[] = {
    {
        .name = "llama",
        .global_roles = llama_globals,
        .n_global_roles = COUNT(llama_globals),
        .layer_roles = llama_layer,
        .n_layer_roles = COUNT(llama_layer),
        .ffn_act = TK_ACT_SILU,
    },
    {
        .name = "gemma3",
        .global_roles = llama_globals, /* output.weight absent: tied to token_embd */
        .n_global_roles = COUNT(llama_globals),
        .layer_roles = gemma3_layer,
        .n_layer_roles = COUNT(gemma3_layer),
        .ffn_act = TK_ACT_GELU_TANH,
        .embd_scale = true,
        .qk_norm = true,
        .post_norms = true,
        .uses_swa = true,
        .swa_pattern = 6,         /* every 6th layer global */
        .rope_theta_swa = 10000.0f,
        .attn_scale = TK_ATTN_SCALE_GEMMA3,
    },
    {
        /* Mistral (v0.1 style): Llama's tensors, every layer attends to the
         * last {arch}.attention.sliding_window positions (no window: plain
         * Llama).  Sliding layers rotate like global ones (same base and
         * scaling).  With every layer sliding, the scheduler releases KV
         * blocks that leave the window (docs/serving.md). */
        .name = "mistral",
        .global_roles = llama_globals,
        .n_global_roles = COUNT(llama_globals),
        .layer_roles = llama_layer,
        .n_layer_roles = COUNT(llama_layer),
        .ffn_act = TK_ACT_SILU,
        .uses_swa = true,
        .swa_pattern = 0,         /* all layers slide */
    },
    {
        /* Phi-3: every layer slides when the file gives a window (as
         * Mistral); NeoX RoPE; partial rotary from rope.dimension_count */
        .name = "phi3",
        .global_roles = phi3_globals,
        .n_global_roles = COUNT(phi3_globals),
        .layer_roles = phi3_layer,
        .n_layer_roles = COUNT(phi3_layer),
        .fused_roles = phi3_fused,
        .n_fused_roles = COUNT(phi3_fused),
        .ffn_act = TK_ACT_SILU,
        .uses_swa = true,
        .swa_pattern = 0,
    },
    {
        .name = "qwen2",
        .global_roles = llama_globals, /* output.weight absent: tied (small models) */
        .n_global_roles = COUNT(llama_globals),
        .layer_roles = qwen2_layer,
        .n_layer_roles = COUNT(qwen2_layer),
        .ffn_act = TK_ACT_SILU,
    },
    {
        .name = "qwen3",
        .global_roles = llama_globals,
        .n_global_roles = COUNT(llama_globals),
        .layer_roles = qwen3_layer,
        .n_layer_roles = COUNT(qwen3_layer),
        .ffn_act = TK_ACT_SILU,
        .qk_norm = true,
    },
    {
        /* Mixtral: a "llama" file with {arch}.expert_count > 0 (see
         * tk_arch_for); softmax over the chosen experts' logits. */
        .name = "llama+moe",
        .global_roles = llama_globals,
        .n_global_roles = COUNT(llama_globals),
        .layer_roles = llama_moe_layer,
        .n_layer_roles = COUNT(llama_moe_layer),
        .ffn_act = TK_ACT_SILU,
        .moe = true,
        .moe_norm_topk = true,
    },
    {
        /* Qwen2-MoE (norm_topk_prob false) */
        .name = "qwen2moe",
        .global_roles = llama_globals,
        .n_global_roles = COUNT(llama_globals),
        .layer_roles = qwen2moe_layer,
        .n_layer_roles = COUNT(qwen2moe_layer),
        .ffn_act = TK_ACT_SILU,
        .moe = true,
    },
    {
        .name = "qwen3moe", /* norm_topk_prob true */
        .global_roles = llama_globals,
        .n_global_roles = COUNT(llama_globals),
        .layer_roles = qwen3moe_layer,
        .n_layer_roles = COUNT(qwen3moe_layer),
        .ffn_act = TK_ACT_SILU,
        .qk_norm = true,
        .moe = true,
        .moe_norm_topk = true,
    },
    {
        .name = "olmoe",
        .global_roles = llama_globals,
        .n_global_roles = COUNT(llama_globals),
        .layer_roles = olmoe_layer,
        .n_layer_roles = COUNT(olmoe_layer),
        .ffn_act = TK_ACT_SILU,
        .qk_norm_full = true,
        .moe = true,
    },
};

void tk_arch_names(char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < COUNT(archs) && len < n; i++)
        if (!strchr(archs[i].name, '+')) /* "base+variant": chosen by tk_arch_for, never named by a file */
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? ", " : "", archs[i].name);
}

const tk_arch *tk_arch_find(const char *name) {
    for (int i = 0; i < COUNT(archs); i++)
        if (!strcmp(archs[i].name, name)) return &archs[i];
    return NULL;
}

const tk_arch *tk_arch_for(const char *name, bool has_experts) {
    if (has_experts && !strcmp(name, "llama")) return tk_arch_find("llama+moe");
    return tk_arch_find(name);
}
