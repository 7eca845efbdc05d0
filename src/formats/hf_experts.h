/* Per-expert tensors of a Hugging Face MoE checkpoint (Mixtral's
 * block_sparse_moe.experts.E.w1/w3/w2, Qwen-MoE's mlp.experts.E.gate/up/
 * down_proj), collected while a directory is read and stacked at the end
 * into llama.cpp's 3-D blk.N.ffn_{gate,up,down}_exps tensors
 * [in, out, n_expert] (one copy: safetensors keeps each expert apart). */
#ifndef TK_HF_EXPERTS_H
#define TK_HF_EXPERTS_H

#include "safetensors.h"
#include "source.h"

typedef struct tk_hf_experts tk_hf_experts;

int tk_hf_experts_new(const tk_hparams *hp, tk_hf_experts **out, tk_err *err);
/* 1: t is a per-expert tensor (recorded); 0: it is not; -1: error (set). */
int tk_hf_experts_add(tk_hf_experts *x, const char *file, const tk_st_tensor *t, tk_err *err);
/* Appends the stacked tensors to tensors[*n..cap); every layer must have
 * every expert's three matrices, of one type and the config's shapes. */
int tk_hf_experts_stack(tk_hf_experts *x, tk_tensor *tensors, int *n, int cap, tk_err *err);
/* Frees the bookkeeping and, with the buffers, the stacked data. */
void tk_hf_experts_free(tk_hf_experts *x);

#endif
