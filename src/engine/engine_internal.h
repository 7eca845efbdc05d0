/* The engine's state, shared by engine.c (model, KV, low-level batches)
 * and the scheduler (src/sched). Not part of the public API. */
#ifndef TK_ENGINE_INTERNAL_H
#define TK_ENGINE_INTERNAL_H

#include <pthread.h>

#include <tokamak.h>

#include "../model/model.h"
#include "../sample/sampler.h"
#include "../tokenizer/tokenizer.h"

struct tk_request;

typedef struct tk_sched {
    pthread_mutex_t mu;
    pthread_cond_t work;
    /* guarded by mu */
    struct tk_request *incoming_head, *incoming_tail;
    int n_incoming;
    uint64_t *cancel_ids;
    int n_cancel, cancel_cap;
    uint64_t next_id;
    int n_live;                 /* requests submitted and not yet finished */
    tk_engine_metrics metrics;  /* published at the end of each step */
    /* stepping thread only */
    struct tk_request *waiting_head, *waiting_tail;
    struct tk_request **running; /* in admission order */
    int n_running, running_cap;
    int max_waiting;
    uint64_t admit_counter;
    float *logits;               /* [max_batch_tokens][n_vocab] */
    float *row;                  /* one logits row being sampled */
    int32_t *b_token, *b_pos, *b_seq;
    uint8_t *b_logits;
    struct tk_sample_state **b_owner; /* per batch entry */
    tk_engine_metrics stats;     /* accumulating counters */
} tk_sched;

struct tk_engine {
    tk_model model;
    tk_tokenizer *tok;
    tk_kv_pool kv;
    tk_pool *pool;
    tk_forward_ws ws;
    int ctx_len;
    int max_seqs;
    tk_kv_seq *seqs;
    tk_kv_seq **seq_ptrs; /* NULL for free slots; what tk_forward indexes */
    int *saved_blocks;    /* per sequence, for undoing reservations */
    tk_sched sched;
};

int tk_sched_init(tk_engine *e, int max_waiting, tk_err *err);
void tk_sched_free(tk_engine *e);

#endif
