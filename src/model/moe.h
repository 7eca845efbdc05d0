/* Mixture-of-experts FFN: binding (per-expert views of the stacked
 * tensors, the router in float) and the routed FFN of a batch. */
#ifndef TK_MOE_H
#define TK_MOE_H

#include "model.h"

/* Expert counts against the architecture (before binding). */
int tk_moe_check_hparams(const tk_model *m, tk_err *err);
/* After the roles are bound: router in float, expert views. */
int tk_moe_bind(tk_model *m, tk_err *err);
/* Workspace buffers for max_tokens tokens (no-op for dense models). */
int tk_moe_ws_init(tk_forward_ws *ws, const tk_model *m, int max_tokens);
void tk_moe_ws_free(tk_forward_ws *ws);
/* Rows the expert matmuls take at once for batches of max_tokens (the
 * matmul workspace's row capacity; 0 for dense models). */
int tk_moe_max_rows(const tk_model *m, int max_tokens);
/* The longest matmul input the experts have (0 for dense models). */
int64_t tk_moe_longest_input(const tk_model *m);
/* ws->moe_acc = MoE-FFN(xn) for the T tokens of ws->xn (already
 * normalized); the caller adds it to x (after summing the ranks' shares
 * under tensor parallelism). */
void tk_moe_ffn(const tk_model *m, int layer, int T, tk_forward_ws *ws, tk_threadpool *pool);

#endif
