/* Architectures as data: which tensors a layer has, their shapes in terms
 * of the hyper-parameters, and the options the forward pass switches on.
 * Adding an architecture means adding a table entry, not a code path. */
#ifndef TK_ARCH_H
#define TK_ARCH_H

#include <stdbool.h>
#include <stddef.h>

/* Symbolic dimensions resolved against tk_hparams. */
typedef enum tk_dim_sym {
    TK_DIM_NONE = 0, /* unused dimension (1) */
    TK_DIM_EMBD,     /* hp.dim */
    TK_DIM_Q,        /* n_heads * head_dim */
    TK_DIM_KV,       /* n_kv_heads * head_dim */
    TK_DIM_FFN,      /* ffn_dim */
    TK_DIM_VOCAB,    /* n_vocab */
    TK_DIM_HEAD,     /* head_dim */
    TK_DIM_EXPERTS,  /* n_expert */
    TK_DIM_EXP_FFN,  /* expert_ffn_dim (of experts stacked in ne[2]) */
    TK_DIM_SHEXP_FFN, /* shexp_ffn_dim */
    TK_DIM_QKV,      /* Q + 2 KV: fused q/k/v rows (Phi-3) */
    TK_DIM_FFN2,     /* 2 ffn_dim: fused gate/up rows (Phi-3) */
    TK_DIM_ROPE_HALF /* rope_dim / 2: one value per rotated frequency */
} tk_dim_sym;

typedef enum tk_act { TK_ACT_SILU = 0, TK_ACT_GELU_TANH = 1 } tk_act;

/* Where a bound tensor goes: a matrix (kept in its file type) or a vector
 * (converted to float32 at load). */
typedef struct tk_tensor_role {
    const char *name;  /* GGUF name; "%d" is the layer index for layer tensors */
    size_t offset;     /* offsetof into tk_layer or tk_model_weights */
    bool is_vector;
    bool required;
    tk_dim_sym ne0, ne1; /* a role with TK_DIM_EXP_FFN is stacked: ne2 = n_expert */
} tk_tensor_role;

#define TK_FUSED_MAX_PARTS 3

/* A fused layer matrix [ne0, ne1] (always required) whose rows are split,
 * in order, into views bound like matrix roles; the parts' row counts add
 * up to ne1 (rows of every block type are contiguous, so a view is a byte
 * range). */
typedef struct tk_fused_role {
    const char *name; /* GGUF name with "%d" for the layer */
    tk_dim_sym ne0, ne1;
    int n_parts;
    struct {
        size_t offset; /* offsetof into tk_layer */
        tk_dim_sym rows;
    } parts[TK_FUSED_MAX_PARTS];
} tk_fused_role;

/* How the attention scale is chosen when the file has no
 * {arch}.attention.scale key. */
typedef enum tk_attn_scale_rule {
    TK_ATTN_SCALE_HEAD_DIM = 0, /* 1/sqrt(head_dim) */
    /* Gemma 3: 1/sqrt(query_pre_attn_scalar).  GGUF does not store that
     * scalar; it equals head_dim except for the 27B model (62 layers), where
     * it is dim / n_heads.  llama.cpp derives it the same way. */
    TK_ATTN_SCALE_GEMMA3 = 1
} tk_attn_scale_rule;

typedef struct tk_arch {
    const char *name;
    const tk_tensor_role *global_roles;
    int n_global_roles;
    const tk_tensor_role *layer_roles;
    int n_layer_roles;
    const tk_fused_role *fused_roles; /* layer matrices split into views */
    int n_fused_roles;
    tk_act ffn_act;          /* gate activation: act(gate(x)) * up(x) */
    bool embd_scale;         /* token embeddings are multiplied by sqrt(dim) */
    bool qk_norm;            /* RMSNorm of every q and k head (attn_q_norm / attn_k_norm) before RoPE */
    bool post_norms;         /* RMSNorm of the attention and FFN outputs before each residual add */
    /* Sliding-window attention.  Without uses_swa the
     * {arch}.attention.sliding_window key is ignored (as llama.cpp does). */
    bool uses_swa;
    int swa_pattern;         /* default layer pattern (see tk_hparams.swa_pattern; 0: all layers slide) */
    /* default RoPE base of sliding layers (unscaled); 0: sliding layers
     * rotate exactly like global ones (same base and scaling) unless the
     * file gives {arch}.rope.freq_base_swa */
    float rope_theta_swa;
    tk_attn_scale_rule attn_scale;
    /* Mixture of experts (model/moe.c): the FFN is routed; moe_norm_topk:
     * the chosen experts' softmax weights are renormalized to sum 1. */
    bool moe;
    bool moe_norm_topk;
    /* RMSNorm over the whole q and k projections before RoPE (OLMoE;
     * attn_q_norm [n_heads * head_dim], attn_k_norm [n_kv_heads * head_dim]) */
    bool qk_norm_full;
} tk_arch;

const tk_arch *tk_arch_find(const char *name);
/* The names a file may give, comma-separated into buf (for error
 * messages; cut to fit). */
void tk_arch_names(char *buf, size_t n);
/* The table entry for a file's general.architecture: "llama" with experts
 * is Mixtral ("llama+moe"). */
const tk_arch *tk_arch_for(const char *name, bool has_experts);

#endif
