/* The engine's state, shared by engine.c (model, KV, low-level batches)
 * and the scheduler (src/sched). Not part of the public API. */
#ifndef TK_ENGINE_INTERNAL_H
#define TK_ENGINE_INTERNAL_H

#include <pthread.h>

#include <tokamak.h>

#include "../model/model.h"
#include "../sample/sampler.h"
#include "../spec/spec.h"
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
    /* Logits of one step, compacted: only batch entries that ask for them
     * get a row.  Each resident sample asks for at most one row of its own
     * (a decode step, or the end of its prefill) plus its verified drafts,
     * and drafts are granted from a per-step row budget, so
     * logits_rows = max_seqs + draft_rows (at most max_batch_tokens). */
    float *logits;               /* [logits_rows][n_vocab] */
    int logits_rows;
    int draft_rows;              /* rows for drafts per step */
    int draft_rows_left;         /* what is left of them in the step being built */
    float *row;                  /* one logits row being sampled */
    int32_t *b_token, *b_pos, *b_seq;
    uint8_t *b_logits;
    struct tk_sample_state **b_owner; /* per batch entry */
    tk_engine_metrics stats;     /* accumulating counters */
    /* speculative decoding (stepping thread) */
    float *dist_p;               /* n_vocab: the model's filtered distribution at a draft */
    float *resid;                /* n_vocab: residual max(0, p - q) */
    struct tk_sample_state **drafting; /* samples drafting with the draft model this step */
    float *d_logits;             /* [max_seqs][n_vocab]: draft model rows */
    int32_t *d_token, *d_pos, *d_seq;
    uint8_t *d_flag;
    struct tk_sample_state **d_owner;
} tk_sched;

struct tk_engine {
    tk_model model;
    tk_tokenizer *tok;
    tk_kv_pool kv;
    tk_pool *pool;
    tk_forward_ws ws;
    int ctx_len;
    int max_seqs;
    int kv_window;        /* model.kv_window unless release is switched off: the scheduler releases
                             blocks before (next position - kv_window + 1); 0: never */
    tk_kv_seq *seqs;
    tk_kv_seq **seq_ptrs; /* NULL for free slots; what tk_forward indexes */
    int *saved_blocks;    /* per sequence, for undoing reservations */
    tk_sched sched;
    bool owns_pool;       /* false for a draft engine, which runs on its target's pool */
    /* speculative decoding */
    struct tk_engine *draft; /* draft model engine (same vocabulary), NULL if none */
    int spec_mode;           /* resolved default: TK_SPEC_OFF, _NGRAM or _DRAFT */
    int draft_max, draft_min;
    tk_spec_cost cost;       /* c and v(k), measured as the engine runs (stepping thread) */
    tk_spec_cost cost_pub;   /* its copy published with the metrics (under sched.mu) */
};

/* Checks that a draft model can draft for a target: the same vocabulary
 * size, special tokens and token texts. */
int tk_spec_check_vocab(const tk_engine *target, const tk_engine *draft, tk_err *err);

/* draft_rows: logits rows per step for speculative drafts (beyond one per
 * sequence). */
int tk_sched_init(tk_engine *e, int max_waiting, int draft_rows, tk_err *err);
void tk_sched_free(tk_engine *e);

#endif
