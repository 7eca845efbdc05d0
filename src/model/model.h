/* A model: hyper-parameters, weights bound by name through the
 * architecture table, and the batched, paged forward pass. */
#ifndef TK_MODEL_H
#define TK_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include <tokamak.h> /* tk_batch */

#include "../formats/source.h"
#include "../kernels/matmul.h"
#include "../kernels/threadpool.h"
#include "../kv/kv.h"
#include "arch.h"

typedef struct tk_layer {
    float *attn_norm;     /* [dim] */
    float *ffn_norm;      /* [dim] */
    const tk_tensor *wq, *wk, *wv, *wo;
    const tk_tensor *w_gate, *w_up, *w_down;
    float *attn_q_norm, *attn_k_norm;    /* [head_dim], arch->qk_norm */
    float *bq, *bk, *bv;  /* optional projection biases (Qwen2): [q_dim], [kv_dim], [kv_dim] */
    float *attn_post_norm, *ffn_post_norm; /* [dim], arch->post_norms */
    bool swa;             /* sliding-window layer (not bound: derived from hparams) */
    /* Mixture of experts (arch->moe): router [dim, n_expert], stacked
     * experts [in, out, n_expert], optional shared expert and its gate. */
    const tk_tensor *moe_router;
    const tk_tensor *gate_exps, *up_exps, *down_exps;
    const tk_tensor *gate_shexp, *up_shexp, *down_shexp;
    float *shexp_gate;    /* [dim] */
    float *router_f32;    /* [n_expert][dim]: the router in float (not bound: moe.c) */
    tk_tensor *experts;   /* [n_expert][3]: gate, up, down views of expert e (moe.c) */
} tk_layer;

typedef struct tk_model_weights {
    const tk_tensor *tok_embd;
    float *output_norm;
    const tk_tensor *output; /* tok_embd when tied */
    float *rope_factors_long, *rope_factors_short; /* LongRoPE divisors [rope_dim / 2] */
} tk_model_weights;

typedef struct tk_model {
    tk_source src;
    const tk_arch *arch;
    tk_hparams hp;
    tk_model_weights w;
    tk_layer *layers;
    float *rope_inv_freq; /* [rope_dim / 2], scaling applied */
    int rope_dim;         /* leading dimensions of each head that RoPE rotates (hp.rope_dim or head_dim) */
    float rope_mscale;    /* cos and sin multiplier: the yarn / longrope attention factor, else 1 */
    /* Sliding-window attention: layers with swa set only attend to the last
     * swa_window positions (0: no sliding layers) and rotate with
     * rope_inv_freq_swa (the local base, no scaling). */
    int swa_window;
    int n_swa_layers;
    /* swa_window when every layer slides (Mistral-style), else 0: then no
     * query at position p reads K/V before p - kv_window + 1, in any layer,
     * and KV blocks wholly before that can be released.  Gemma 3 (global
     * layers among the sliding ones) keeps 0. */
    int kv_window;
    float *rope_inv_freq_swa; /* NULL: sliding layers use rope_inv_freq */
    float rope_theta_swa;
    float attn_scale;     /* multiplies q.k: 1/sqrt(head_dim) or the architecture's rule */
    float embd_scale;     /* multiplies token embeddings (1 or sqrt(dim)) */
    float *vectors;       /* storage for all float32 vectors */
    float *moe_router_f32; /* storage of the layers' router_f32 */
    tk_tensor *moe_views;  /* storage of the layers' expert views */
    tk_tensor *fused_views; /* storage of the views of fused matrices (arch->fused_roles) */
    size_t weight_bytes;  /* bytes of all bound tensors */
    /* Tensor parallelism (src/parallel): the job this model is one rank's
     * share of (NULL: the whole model), and the storage of its share's
     * views and copied columns; tp_head: this rank's rows of the head when
     * it is split by vocabulary, NULL: rank 0 computes the whole head;
     * tp_kv_copies: ranks holding each KV head (above 1 when the model has
     * fewer KV heads than ranks). */
    struct tk_tp *tp;
    int tp_kv_copies;
    const tk_tensor *tp_head;
    tk_tensor *tp_views;
    unsigned char *tp_data;
    /* the matrices' panel-layout copies (tk_model_make_panels) */
    unsigned char *panel_data;
    size_t panel_bytes;
} tk_model;


/* Largest head dimension the forward pass takes (per-head stack buffers). */
#define TK_MAX_HEAD_DIM 1024

/* Operator fusions (each can be turned off to measure it). */
enum {
    TK_FUSE_NORM_QUANT = 1, /* RMSNorm and activation quantization in one pass */
    TK_FUSE_GLU = 2,        /* gate and up in one kernel, SiLU(gate)*up on the way out */
    TK_FUSE_ROPE_KV = 4,    /* RoPE applied while writing K into the cache */
    TK_FUSE_RESIDUAL = 8,   /* residual add folded into the output projection's store */
    TK_FUSE_ROPE_Q = 16,    /* Q's QK-norm and RoPE applied in its projection's store */
    TK_FUSE_ALL = 31
};

/* One attention task: a tile of n_tok consecutive batch tokens (one
 * sequence) against one KV head, over the segments [seg_a, seg_b) of
 * ATTN_SPLIT positions; part < 0: the task covers every segment of its tile
 * and writes the output itself, else it writes each segment's partial state
 * on its own, segment seg_a's at att_parts + part and the next ones after
 * it, and a merge task folds the tile's segments in order. */
typedef struct tk_attn_task {
    int t0, n_tok, kv_head, seg_a, seg_b;
    long part;
} tk_attn_task;

/* Scratch for one forward pass of up to max_tokens tokens; allocated once. */
typedef struct tk_forward_ws {
    int max_tokens;
    int max_ctx;
    float *x, *xn, *q, *k, *v, *att, *h1, *h2, *logits_in;
    float *rope_cos, *rope_sin; /* [max_tokens][head_dim/2] */
    float *rope_cos_swa, *rope_sin_swa; /* the same for sliding layers (when the model has them) */
    tk_matmul_ws mm;            /* packed activations, dequant rows */
    unsigned fuse;              /* TK_FUSE_* operator fusions in use */
    bool hidden_out;            /* the output is each asked-for token's final-norm hidden state (dim floats), not logits */
    float *att_scratch;         /* per-thread: kernel scratch and two tile states */
    size_t att_scratch_stride, att_kernel_floats;
    int att_group, att_hd;
    int att_tile_tokens;        /* tokens per tile (ATTN_TILE_ROWS / group) */
    int att_isa;                /* tk_isa of the attention kernels (scalar for reference_kernels) */
    int *att_lo, *att_hi;       /* per batch token: visible positions (this layer) */
    float *att_parts;           /* partial softmax states of split tiles */
    size_t att_parts_cap;       /* floats */
    struct tk_attn_task *att_tasks;
    int att_tasks_cap;
    int *att_merge;             /* per split (tile, KV head): first task, end task */
    int n_threads;
    /* Mixture of experts (models with experts; sized at init), per chunk
     * of C tokens (moe.c): router logits [C][n_expert]; per token its
     * chosen experts and weights [C][n_expert_used]; the slots, (token,
     * expert) pairs grouped by expert, then the shared expert's
     * (moe_order: group offsets [n_expert + 2]; moe_rows, moe_row_w: each
     * slot's token and weight); the groups' matrices [3][n_expert + 1];
     * per slot its gathered input and down output [dim], GLU halves
     * [largest expert FFN]; the per-token sums [T][dim]. */
    float *moe_logits;
    int *moe_choice;
    float *moe_weight;
    int *moe_order, *moe_rows;
    float *moe_row_w;
    const tk_tensor **moe_w;
    float *moe_x, *moe_y, *moe_acc, *moe_h1, *moe_h2;
    /* Optional: called with the input of every weight matmul (calibration
     * for GPTQ/AWQ).  x holds n_tok rows of `dim` floats. */
    void (*observe)(void *ctx, int layer, const tk_tensor *w, const float *x, int n_tok, int dim);
    void *observe_ctx;
    /* Tensor parallelism, ranks other than 0 of a head split by vocabulary:
     * their rows' logits [max_tokens][n_vocab / ranks] before the gather. */
    float *tp_logits;
} tk_forward_ws;

int tk_model_load(const char *path, tk_model *m, tk_err *err);
/* Binds an already-open source (takes ownership on success). */
int tk_model_from_source(tk_source *src, tk_model *m, tk_err *err);
/* The context the model runs with: LongRoPE uses its long factors when it
 * exceeds the original context (llama.cpp's rule), else the short ones
 * (the default after loading).  Other models: no effect. */
void tk_model_set_context(tk_model *m, int ctx_len);
void tk_model_free(tk_model *m);
/* Gives every matrix the forward pass multiplies by a copy in the panel
 * layout (kernels/panels.h) when its kernel at `isa` reads that layout: made
 * once, after any tensor-parallel slicing, on the pool's threads.  The
 * results are the same bits; decode reads the weights without transposing
 * them.  Costs panel_bytes of memory beside the file's mapping. */
int tk_model_make_panels(tk_model *m, tk_isa isa, tk_threadpool *pool, tk_err *err);

/* isa: the kernel level (tk_cpu_isa(), read once by the caller). */
int tk_forward_ws_init(tk_forward_ws *ws, const tk_model *m, int max_tokens, int ctx_len, int kv_block_size,
                       int n_threads, tk_isa isa, bool reference, tk_err *err);
void tk_forward_ws_free(tk_forward_ws *ws);

/* Runs the batch.  Every token's sequence must already have KV blocks
 * reserved up to its position (tk_kv_seq_reserve).  K/V are written at each
 * token's position; attention for a token covers positions 0..pos of its
 * sequence (pos-window+1..pos in sliding-window layers).  Logits rows
 * (n_vocab floats each) are written to `logits` in batch order for the
 * tokens that asked for them.  seqs[i]->len is raised to
 * cover the written positions. */
/* h1 = act(gate(in)) * up(in) for n rows of in (dim floats each): the fused
 * kernel, or without TK_FUSE_GLU two GEMMs and the activation (h2: scratch
 * of the same size); the observe hook sees gate and up.  The dense FFN
 * (a MoE layer's experts, shared ones too, go through tk_matmul_grouped). */
void tk_forward_glu(const tk_model *m, int layer, const tk_tensor *gate, const tk_tensor *up, const float *in, int n,
                    float *h1, float *h2, tk_forward_ws *ws, tk_threadpool *pool);
int tk_forward(const tk_model *m, tk_kv_pool *kv, tk_kv_seq *const *seqs, int n_seqs, const tk_batch *batch,
               float *logits, tk_forward_ws *ws, tk_threadpool *pool, tk_err *err);

#endif
