#include "arch.h"

#include <string.h>

#include "model.h"

#define L(field) offsetof(tk_layer, field)
#define G(field) offsetof(tk_model_weights, field)

static const tk_tensor_role llama_globals[] = {
    {"token_embd.weight", G(tok_embd), false, true, TK_DIM_EMBD, TK_DIM_VOCAB},
    {"output_norm.weight", G(output_norm), true, true, TK_DIM_EMBD, TK_DIM_NONE},
    {"output.weight", G(output), false, false, TK_DIM_EMBD, TK_DIM_VOCAB},
};

static const tk_tensor_role llama_layer[] = {
    {"blk.%d.attn_norm.weight", L(attn_norm), true, true, TK_DIM_EMBD, TK_DIM_NONE},
    {"blk.%d.attn_q.weight", L(wq), false, true, TK_DIM_EMBD, TK_DIM_Q},
    {"blk.%d.attn_k.weight", L(wk), false, true, TK_DIM_EMBD, TK_DIM_KV},
    {"blk.%d.attn_v.weight", L(wv), false, true, TK_DIM_EMBD, TK_DIM_KV},
    {"blk.%d.attn_output.weight", L(wo), false, true, TK_DIM_Q, TK_DIM_EMBD},
    {"blk.%d.ffn_norm.weight", L(ffn_norm), true, true, TK_DIM_EMBD, TK_DIM_NONE},
    {"blk.%d.ffn_gate.weight", L(w_gate), false, true, TK_DIM_EMBD, TK_DIM_FFN},
    {"blk.%d.ffn_up.weight", L(w_up), false, true, TK_DIM_EMBD, TK_DIM_FFN},
    {"blk.%d.ffn_down.weight", L(w_down), false, true, TK_DIM_FFN, TK_DIM_EMBD},
};

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

static const tk_arch archs[] = {
    {"llama", llama_globals, COUNT(llama_globals), llama_layer, COUNT(llama_layer), TK_ACT_SILU},
};

const tk_arch *tk_arch_find(const char *name) {
    for (int i = 0; i < COUNT(archs); i++)
        if (!strcmp(archs[i].name, name)) return &archs[i];
    return NULL;
}
