/* A model cut down to one rank's share for tensor parallelism. */
#ifndef TK_TP_SLICE_H
#define TK_TP_SLICE_H

#include "../model/model.h"

/* Keeps rank `rank` of n's share of every layer: its n_kv_heads / n KV
 * heads (or, with fewer KV heads than ranks, the one KV head it shares
 * with n / n_kv_heads - 1 other ranks) and their query heads (rows of Q, K, V and their biases; the same
 * columns of the output projection), ffn_dim / n FFN columns (rows of gate
 * and up; columns of down), likewise 1/n of every expert's and of the
 * shared expert's FFN columns (router and shared-expert gate whole) and,
 * when n_vocab divides by n, n_vocab / n
 * rows of the head (m->tp_head; else rank 0 keeps the whole head).
 * Embeddings and norms stay whole.  Row shares are views; column shares
 * are copied, whole quantized blocks only.  hp then describes the share
 * (heads, KV heads, FFN widths; n_vocab stays the whole vocabulary).
 * Refuses, naming the reason, a dimension that does not divide by n, a
 * share that would cut a quantized block, and what the split does not
 * cover (a q/k norm over the whole projection). */
int tk_tp_slice_model(tk_model *m, int rank, int n, tk_err *err);

#endif
