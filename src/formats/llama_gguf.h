/* Writing llama-architecture GGUFs from any source: the pieces `convert`
 * and `quantize` share (metadata keys, the HF -> GGUF Q/K row permutation,
 * Llama-3.1 RoPE factors, tensors as float32 in GGUF layout). */
#ifndef TK_LLAMA_GGUF_H
#define TK_LLAMA_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "../util/err.h"
#include "gguf.h"
#include "source.h"

/* HF checkpoints rotate halves (x[i], x[i+d/2]); GGUF llama expects
 * adjacent pairs.  Row (h, i) moves to (h, 2i), row (h, d/2+i) to
 * (h, 2i+1), as llama.cpp's converter permutes them.  Returns 0 or -1 (out
 * of memory). */
int tk_permute_rows_to_adjacent(float *w, int n_heads, int head_dim, int64_t row_len);

/* Whether tensor `name` of this source needs that permutation (attn_q /
 * attn_k of a halves-RoPE source); *n_heads gets the head count. */
bool tk_needs_qk_permute(const tk_source *src, const char *name, int *n_heads);

/* Tensor t of src as float32 in GGUF layout (Q/K permuted for HF
 * sources): a malloc'd array of all its elements. */
int tk_source_tensor_f32(const tk_source *src, const tk_tensor *t, float **out, tk_err *err);

/* Llama 3.1 RoPE scaling as llama.cpp stores it: head_dim/2 per-frequency
 * divisors (malloc'd), or NULL when out of memory. */
float *tk_llama3_rope_factors(const tk_hparams *hp);

/* The architecture a source is written as: qwen2, qwen3, the Qwen / OLMoE
 * MoE ones and phi3 as themselves, everything else (mistral and Mixtral
 * included) as llama. */
const char *tk_gguf_out_arch(const tk_source *src);
/* general.* and {tk_gguf_out_arch}.* keys for the source's hyper-parameters
 * (general.file_type = file_type, a llama_ftype value). */
int tk_gguf_set_llama_meta(tk_gguf_writer *w, const tk_source *src, int file_type);

#endif
