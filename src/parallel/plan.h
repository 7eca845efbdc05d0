/* The batch plan rank 0 sends before each forward pass of a
 * tensor-parallel engine, and what the other ranks rebuild from it: the
 * batch (tokens, positions, sequences, wants-logits; hidden states or
 * logits out), the block table,
 * length and released prefix of each sequence in it, and the
 * copy-on-write block copies made since the last plan, which they replay
 * on their own pools.  Block ids are the same on every rank: each holds
 * the same number of blocks, of its own KV heads. */
#ifndef TK_TP_PLAN_H
#define TK_TP_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include <tokamak.h> /* tk_batch */

#include "../kv/kv.h"
#include "tp.h"

typedef struct tk_tp_plan {
    tk_tp *tp;
    int max_tokens, max_seqs, max_blocks, pool_blocks;
    uint64_t steps;     /* forward passes sent or received so far (errors name the step) */
    int32_t *buf;       /* header and payload */
    size_t cap;         /* ints */
    bool *listed;       /* [max_seqs]: sequences already in the payload being built or read */
    /* rank 0: copies made since the last plan, (src, dst) pairs */
    int32_t *copies;
    int n_copies;
    bool copies_lost;   /* more than pool_blocks copies: the plan cannot describe them */
    /* other ranks: the received batch, its output kind and sequences */
    bool hidden_out;
    uint8_t *flags;     /* [max_tokens] */
    tk_kv_seq *seqs;    /* [max_seqs], tables in tables[id * max_blocks] */
    tk_kv_seq **seq_ptrs;
    int *tables;
} tk_tp_plan;

/* For an engine of max_tokens per batch and max_seqs sequences of at most
 * max_blocks blocks each over kv; on rank 0 kv's copies are recorded. */
int tk_tp_plan_init(tk_tp_plan *p, tk_tp *tp, tk_kv_pool *kv, int max_tokens, int max_seqs, int max_blocks,
                    tk_err *err);
void tk_tp_plan_free(tk_tp_plan *p, tk_kv_pool *kv);
/* Rank 0: sends the batch over sequences seqs (indexed by batch->seq);
 * hidden_out: the forward's outputs are hidden states (tk_forward_ws). */
int tk_tp_plan_send(tk_tp_plan *p, const tk_batch *b, tk_kv_seq *const *seqs, bool hidden_out, tk_err *err);
/* Rank 0: tells the other ranks to stop. */
int tk_tp_plan_stop(tk_tp_plan *p, tk_err *err);
/* Other ranks: waits for the next plan.  1: a batch, in *b over p->seq_ptrs,
 * with its copies replayed on kv; 0: stop; -1: error (a plan out of
 * bounds, or the transport). */
int tk_tp_plan_recv(tk_tp_plan *p, tk_kv_pool *kv, tk_batch *b, tk_err *err);

#endif
