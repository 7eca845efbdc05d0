/* Scheduling policy of continuous batching: turns the running requests,
 * the waiting queue and the KV budget into one batch plan per step.  It
 * knows no model and no engine: the KV cache is reached through the few
 * calls in tk_sched_kv (the engine's pool, or a test's fake), and a plan
 * is a list of position ranges per sample that the caller turns into a
 * batch.
 *
 * Policy: running requests first, oldest first (decode steps, then the
 * rest of chunked prefills), then waiting requests first come, first
 * served, under the batch-token budget, the sequence slots and the KV
 * pool.  When blocks run out, the newest running request is preempted:
 * its blocks are freed and it goes back to the front of the queue to be
 * recomputed later (its tokens are kept, so the output does not change). */
#ifndef TK_SCHED_H
#define TK_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "../util/err.h"

struct tk_sched_req;

/* One sample (sequence) of a request, as the scheduler sees it. */
typedef struct tk_sched_seq {
    struct tk_sched_req *req;
    int slot;               /* sequence slot, -1 when not resident */
    int n_tokens;           /* committed tokens: prompt + generated */
    int n_computed;         /* tokens whose K/V are in the cache */
    int n_draft;            /* before planning: drafts proposed (after n_tokens); after: drafts granted */
    bool done;
    bool pending_fork;      /* waits for sample 0's prefill, then shares its blocks */
} tk_sched_seq;

typedef struct tk_sched_req {
    tk_sched_seq **seqs;    /* its n samples */
    int n;
    int n_done;
    struct tk_sched_req *next; /* waiting queue */
} tk_sched_req;

/* One entry of a plan: compute positions [from, to) of seq in this pass.
 * A verification group (the last committed token plus n_draft drafts)
 * wants logits at every position, any other chunk at its last position
 * when that is the last committed token. */
typedef struct tk_sched_chunk {
    tk_sched_seq *seq;
    int from, to;
    bool verify;
} tk_sched_chunk;

/* The KV cache as the scheduler uses it. */
typedef struct tk_sched_kv {
    void *ctx;
    int (*free_slots)(void *ctx);
    /* Gives a sample a slot, reusing cached prefix blocks (sets slot and
     * n_computed); -1 if no slot is free. */
    int (*place)(void *ctx, tk_sched_seq *s);
    /* Frees a sample's slot and blocks (slot -1, n_computed 0); no-op if
     * not resident. */
    void (*release)(void *ctx, tk_sched_seq *s);
    /* New blocks that writing positions [from, to) would need. */
    int (*blocks_needed)(void *ctx, const tk_sched_seq *s, int from, int to);
    /* Blocks a new allocation can get. */
    int (*available)(void *ctx);
    /* Reserves blocks for positions [from, to) and makes them writable;
     * -1 if the pool cannot. */
    int (*reserve)(void *ctx, tk_sched_seq *s, int from, int to);
} tk_sched_kv;

typedef struct tk_sched {
    tk_sched_kv kv;
    int max_batch_tokens;
    int draft_rows;              /* logits rows for drafts per step */
    tk_sched_req *waiting_head, *waiting_tail;
    tk_sched_req **running;      /* in admission order */
    int n_running, running_cap;
    tk_sched_chunk *plan;        /* the last plan */
    int n_plan;
    int n_plan_tokens;
    uint64_t preemptions;
    /* planning state */
    int budget;
    int draft_rows_left;
} tk_sched;

int tk_sched_init(tk_sched *s, const tk_sched_kv *kv, int max_running, int max_batch_tokens, int draft_rows,
                  tk_err *err);
/* Frees the scheduler's own arrays (not the requests). */
void tk_sched_free(tk_sched *s);

/* Appends a request to the waiting queue. */
void tk_sched_enqueue(tk_sched *s, tk_sched_req *r);
/* Removes a running request (by index) or a waiting one. */
void tk_sched_remove_running(tk_sched *s, int i);
void tk_sched_remove_waiting(tk_sched *s, tk_sched_req *r);
int tk_sched_n_waiting(const tk_sched *s);

/* Builds the next plan into s->plan (n_plan chunks, n_plan_tokens tokens
 * in all): reserves the KV blocks it needs, preempts and admits requests.
 * Returns n_plan_tokens. */
int tk_sched_plan(tk_sched *s);

#endif
