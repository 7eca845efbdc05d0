/* The engine's state, shared by its files: engine.c (open, model, KV,
 * low-level batches), request.c (submission), step.c (the step loop),
 * output.c (tokens to events) and speculate.c (drafts).  Not part of the
 * public API. */
#ifndef TK_ENGINE_INTERNAL_H
#define TK_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>

#include <tokamak.h>

#include "../model/model.h"
#include "../parallel/plan.h"
#include "../sample/sampler.h"
#include "../sched/sched.h"
#include "../spec/spec.h"
#include "../tokenizer/tokenizer.h"
#include "constraint.h"

struct tk_request;

/* One sample of a request: its tokens, sampler, output and speculation
 * state.  seq is what the scheduler sees (slot, token counts). */
typedef struct tk_sample_state {
    tk_sched_seq seq;
    struct tk_request *req;
    int index;
    int32_t *tokens;        /* prompt + generated, then this step's drafts */
    int cap;
    int n_generated;
    int n_cached;           /* prompt tokens found in the prefix cache at admission */
    tk_sampler sampler;
    tk_detok detok;
    char *held;             /* decoded text not yet released (may start a stop string) */
    int n_held, held_cap;
    double last_token_time;
    /* speculative decoding */
    int spec_mode;          /* TK_SPEC_OFF, _NGRAM or _DRAFT */
    int k_min, k_max;       /* draft length bounds */
    tk_spec_rate rate;      /* running acceptance rate */
    int draft_want;         /* drafts wanted from the draft model this step */
    int draft_slot;         /* draft engine sequence; -1: none */
    int draft_computed;     /* tokens whose K/V are in the draft cache (all committed) */
    float *q;               /* [k_max][n_vocab]: the draft model's distributions (sampling) */
    tk_sampler draft_sampler; /* the draft model's sampler: same filters, its own generator */
    int spec_drafted, spec_accepted, spec_passes;
    tk_csample cs;          /* grammar state (cs.cg NULL: unconstrained) */
    char error[sizeof(((tk_err *)0)->msg)]; /* why the constraint failed (the final event's error) */
} tk_sample_state;

typedef struct tk_request {
    tk_sched_req sched;     /* its seqs point to the samples' seq members */
    uint64_t id;
    tk_request_params p;
    char *stop[TK_REQUEST_MAX_STOP];
    tk_event_cb cb;
    void *user;
    tk_sample_state *samples;
    int n;
    double submit_time;
    bool first_token;
    tk_cgrammar *cg;        /* the compiled constraint (a reference), NULL: none */
    struct tk_request *next; /* incoming list */
} tk_request;

static inline tk_sample_state *tk_sample_of(tk_sched_seq *q) {
    return (tk_sample_state *)((char *)q - offsetof(tk_sample_state, seq));
}
static inline tk_request *tk_request_of(tk_sched_req *r) {
    return (tk_request *)((char *)r - offsetof(tk_request, sched));
}

/* Continuous batching: what submitters hand over (under mu), the
 * scheduler, and the stepping thread's buffers and counters. */
typedef struct tk_batcher {
    pthread_mutex_t mu;
    pthread_cond_t work;
    /* guarded by mu */
    tk_request *incoming_head, *incoming_tail;
    int n_incoming;
    uint64_t *cancel_ids;
    int n_cancel, cancel_cap;
    uint64_t next_id;
    int n_live;                 /* requests submitted and not yet finished */
    int max_waiting;
    tk_engine_metrics metrics;  /* published at the end of each step */
    /* stepping thread only */
    tk_sched sched;
    /* Logits of one step, compacted: only batch entries that ask for them
     * get a row.  Each resident sample asks for at most one row of its own
     * (a decode step, or the end of its prefill) plus its verified drafts,
     * and drafts are granted from a per-step row budget (sched.draft_rows),
     * so logits_rows = max_seqs + draft rows (at most max_batch_tokens). */
    float *logits;               /* [logits_rows][n_vocab] */
    int logits_rows;
    float *row;                  /* one logits row being sampled */
    int32_t *batch_token, *batch_pos, *batch_seq;
    uint8_t *batch_logits;
    tk_engine_metrics stats;     /* accumulating counters */
    /* speculative decoding */
    float *dist_p;               /* n_vocab: the model's filtered distribution at a draft */
    float *resid;                /* n_vocab: residual max(0, p - q) */
    tk_sample_state **drafting;  /* samples drafting with the draft model this step */
    float *draft_logits;         /* [max_seqs][n_vocab]: draft model rows */
    int32_t *draft_token, *draft_pos, *draft_seq;
    uint8_t *draft_wants_logits;
    tk_sample_state **draft_owner;
} tk_batcher;

struct tk_engine {
    tk_model model;
    tk_tokenizer *tok;
    const char *chat_preset; /* the detected chat preset's name when the file has no template; NULL: none */
    tk_kv_pool kv;
    tk_threadpool *pool;
    tk_isa isa;            /* the kernels' level (tk_cpu_isa at open: cpuid is slow in a VM) */
    const char *kernels;   /* that level as the model stats name it (tk_model_stats.kernels) */
    tk_exp_row_fn exp_row; /* the samplers' softmax exp, resolved once at open for isa */
    tk_forward_ws ws;
    int ctx_len;
    int max_seqs;
    int kv_window;        /* model.kv_window unless release is switched off: the step releases
                             blocks before (next position - kv_window + 1); 0: never */
    tk_kv_seq *seqs;
    tk_kv_seq **seq_ptrs; /* NULL for free slots; what tk_forward indexes */
    int *saved_blocks;    /* per sequence, for undoing reservations */
    tk_batcher batcher;
    tk_constraint_cache constraints;
    bool owns_pool;       /* false for a draft engine, which runs on its target's pool */
    /* speculative decoding */
    struct tk_engine *draft; /* draft model engine (same vocabulary), NULL if none */
    int spec_mode;           /* resolved default: TK_SPEC_OFF, _NGRAM or _DRAFT */
    int draft_max, draft_min;
    tk_spec_cost cost;       /* c and v(k), measured as the engine runs (stepping thread) */
    tk_spec_cost cost_pub;   /* its copy published with the metrics (under batcher.mu) */
    /* tensor parallelism (cfg.tp > 1, docs/parallel.md): the job, the batch
     * plans rank 0 sends (the other ranks receive), and whether every rank
     * opened (then closing rank 0 stops the others) */
    tk_tp *tp;
    tk_tp_plan plan;
    bool tp_started;
};

/* request.c */
/* draft_rows: logits rows per step for speculative drafts (beyond one per
 * sequence). */
int tk_batcher_init(tk_engine *e, int max_waiting, int draft_rows, tk_err *err);
void tk_batcher_free(tk_engine *e);
void tk_request_free(tk_engine *e, tk_request *r);

/* output.c: a chosen token becomes text and events */
/* Appends a chosen token to a sample and reports it (logits: the raw row it
 * was chosen from, for logprobs); finishes the sample on EOS, a stop
 * string, max_tokens or a full context. */
void tk_output_commit(tk_engine *e, tk_sample_state *ss, int32_t tok, const float *logits, double now);
/* Samples the next token of one sample from a logits row and commits it. */
void tk_output_sample(tk_engine *e, tk_sample_state *ss, const float *logits, double now);
/* Ends a sample with a final event (flush: release held-back text first)
 * and frees its slots. */
void tk_output_finish(tk_engine *e, tk_sample_state *ss, const char *reason, bool flush);

/* Picks a sample's next token from a raw logits row (its grammar's mask
 * applied when constrained).  Returns -1 if its grammar allows no token
 * or failed. */
int32_t tk_output_choose(tk_engine *e, tk_sample_state *ss, const float *logits);
/* Records why a sample's constraint failed (why: a matcher bound's message,
 * "grammar: ..."; NULL: no token allowed), for its final event; other
 * messages (out of memory) are the engine's failure and are not recorded. */
void tk_output_constraint_failed(tk_sample_state *ss, const char *why);

/* step.c */
/* The scheduler's view of the KV cache: the engine's sequence slots and
 * block pool (ctx: the engine). */
extern const tk_sched_kv tk_step_kv_ops;
/* Frees a sample's target and draft sequences (it keeps its tokens). */
void tk_step_release_sample(tk_engine *e, tk_sample_state *ss);

/* speculate.c */
/* The clock that times passes for the speculative cost model. */
double tk_spec_pass_clock(const tk_engine *e);
/* Proposes drafts for every speculating sample in the decode phase
 * (prompt lookup, or draft-model passes batched over those samples). */
int tk_spec_propose(tk_engine *e, tk_err *err);
/* Verifies a sample's drafts against the model's rows, commits the
 * accepted ones and one token of the model's own, and cuts rejected
 * positions from both caches. */
void tk_spec_verify(tk_engine *e, tk_sample_state *ss, int group_len, const float *rows, double now);

#endif
