/* Requests: validation, construction, and the calls any thread may make
 * (submit, cancel, wait for work, read the metrics).  Submitted requests
 * wait in the incoming list under the mutex until the stepping thread
 * takes them at its next step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"

static const double bucket_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75,
                                       1.0,   2.5,  5.0,   7.5,  10.0,  20.0, 40.0, INFINITY};

int tk_batcher_init(tk_engine *e, int max_waiting, int draft_rows, tk_err *err) {
    tk_batcher *b = &e->batcher;
    memset(b, 0, sizeof *b);
    pthread_mutex_init(&b->mu, NULL);
    /* timed waits on the monotonic clock: a wall-clock step must not
     * stretch or cut them */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->work, &ca);
    pthread_condattr_destroy(&ca);
    b->max_waiting = max_waiting;
    b->next_id = 1;
    size_t T = (size_t)e->ws.max_tokens, nv = (size_t)e->model.hp.n_vocab;
    /* one row per resident sample plus the drafts' budget, never more than
     * a batch has tokens */
    int rows = e->max_seqs < e->ws.max_tokens ? e->max_seqs : e->ws.max_tokens;
    if (draft_rows > e->ws.max_tokens - rows) draft_rows = e->ws.max_tokens - rows;
    if (draft_rows < 0) draft_rows = 0;
    tk_sched_kv kv = tk_step_kv_ops;
    kv.ctx = e;
    if (tk_sched_init(&b->sched, &kv, e->max_seqs, e->ws.max_tokens, draft_rows, err)) return -1;
    b->logits_rows = rows + draft_rows;
    b->logits = malloc((size_t)b->logits_rows * nv * sizeof(float));
    b->row = malloc(nv * sizeof(float));
    b->batch_token = malloc(T * sizeof(int32_t));
    b->batch_pos = malloc(T * sizeof(int32_t));
    b->batch_seq = malloc(T * sizeof(int32_t));
    b->batch_logits = malloc(T);
    b->dist_p = malloc(nv * sizeof(float));
    b->resid = malloc(nv * sizeof(float));
    b->drafting = malloc((size_t)e->max_seqs * sizeof *b->drafting);
    b->draft_logits = malloc((size_t)e->max_seqs * nv * sizeof(float));
    b->draft_token = malloc(T * sizeof(int32_t));
    b->draft_pos = malloc(T * sizeof(int32_t));
    b->draft_seq = malloc(T * sizeof(int32_t));
    b->draft_wants_logits = malloc(T);
    b->draft_owner = malloc(T * sizeof *b->draft_owner);
    if (!b->logits || !b->row || !b->batch_token || !b->batch_pos || !b->batch_seq || !b->batch_logits ||
        !b->dist_p || !b->resid || !b->drafting || !b->draft_logits || !b->draft_token || !b->draft_pos ||
        !b->draft_seq || !b->draft_wants_logits || !b->draft_owner)
        return tk_err_set(err, "out of memory for the scheduler");
    b->stats.n_buckets = (int)(sizeof bucket_bounds / sizeof bucket_bounds[0]);
    b->stats.bucket_bounds = bucket_bounds;
    b->metrics = b->stats;
    return 0;
}

void tk_request_free(tk_engine *e, tk_request *r) {
    for (int i = 0; i < r->n; i++) {
        tk_sample_state *ss = &r->samples[i];
        tk_step_release_sample(e, ss);
        free(ss->tokens);
        free(ss->held);
        free(ss->q);
        tk_sampler_free(&ss->sampler);
        tk_sampler_free(&ss->draft_sampler);
        tk_csample_free(&ss->cs);
    }
    tk_constraint_release(&e->constraints, r->cg);
    for (int i = 0; i < r->p.n_stop; i++) free(r->stop[i]);
    free(r->sched.seqs);
    free(r->samples);
    free((void *)r->p.prompt);
    free(r);
}

void tk_batcher_free(tk_engine *e) {
    tk_batcher *b = &e->batcher;
    for (tk_request *r = b->incoming_head, *next; r; r = next) {
        next = r->next;
        tk_request_free(e, r);
    }
    for (tk_sched_req *r = b->sched.waiting_head, *next; r; r = next) {
        next = r->next;
        tk_request_free(e, tk_request_of(r));
    }
    for (int i = 0; i < b->sched.n_running; i++) tk_request_free(e, tk_request_of(b->sched.running[i]));
    tk_sched_free(&b->sched);
    free(b->cancel_ids);
    free(b->logits);
    free(b->row);
    free(b->batch_token);
    free(b->batch_pos);
    free(b->batch_seq);
    free(b->batch_logits);
    free(b->dist_p);
    free(b->resid);
    free(b->drafting);
    free(b->draft_logits);
    free(b->draft_token);
    free(b->draft_pos);
    free(b->draft_seq);
    free(b->draft_wants_logits);
    free(b->draft_owner);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->work);
    memset(b, 0, sizeof *b);
}

static int validate(tk_engine *e, const tk_request_params *p, tk_err *err) {
    int nv = e->model.hp.n_vocab;
    if (p->n_prompt <= 0 || !p->prompt) return tk_err_set(err, "the prompt is empty");
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= nv)
            return tk_err_set(err, "prompt token %d (id %d) is out of range [0, %d)", i, p->prompt[i], nv);
    int n = p->n > 0 ? p->n : 1;
    if (n > TK_REQUEST_MAX_N || n > e->max_seqs)
        return tk_err_set(err, "n = %d exceeds the limit (%d)", n, e->max_seqs < TK_REQUEST_MAX_N ? e->max_seqs : TK_REQUEST_MAX_N);
    if (p->n_prompt >= e->ctx_len)
        return tk_err_set(err, "the prompt is %d tokens; the context is %d tokens (one is needed to generate)",
                          p->n_prompt, e->ctx_len);
    if (p->max_tokens > 0 && (int64_t)p->n_prompt + p->max_tokens > e->ctx_len)
        return tk_err_set(err, "prompt (%d tokens) + max_tokens (%d) exceeds the context length %d", p->n_prompt,
                          p->max_tokens, e->ctx_len);
    int64_t total = p->max_tokens > 0 ? (int64_t)p->n_prompt + p->max_tokens : e->ctx_len;
    int64_t blocks = (total + e->kv.block_size - 1) / e->kv.block_size;
    if (e->kv_window > 0) {
        /* at most the window before the next position plus one batch */
        int64_t held = ((int64_t)e->kv_window - 1 + e->ws.max_tokens + e->kv.block_size - 1) / e->kv.block_size + 1;
        if (held < blocks) blocks = held;
    }
    if (blocks > e->kv.n_blocks)
        return tk_err_set(err, "the request needs up to %lld KV blocks; the pool has %d", (long long)blocks,
                          e->kv.n_blocks);
    if (p->n_stop < 0 || p->n_stop > TK_REQUEST_MAX_STOP) return tk_err_set(err, "at most %d stop strings", TK_REQUEST_MAX_STOP);
    for (int i = 0; i < p->n_stop; i++) {
        size_t len = p->stop[i] ? strlen(p->stop[i]) : 0;
        if (len == 0 || len > TK_REQUEST_MAX_STOP_LEN)
            return tk_err_set(err, "stop strings must be 1 to %d bytes", TK_REQUEST_MAX_STOP_LEN);
    }
    if (p->top_logprobs > TK_REQUEST_MAX_TOP_LOGPROBS)
        return tk_err_set(err, "top_logprobs %d exceeds %d", p->top_logprobs, TK_REQUEST_MAX_TOP_LOGPROBS);
    if (p->speculative < TK_SPEC_DEFAULT || p->speculative > TK_SPEC_DRAFT)
        return tk_err_set(err, "unknown speculative mode %d", p->speculative);
    if (p->speculative == TK_SPEC_DRAFT && !e->draft)
        return tk_err_set(err, "speculative decoding with a draft model: the engine has no draft model");
    if (p->draft_max < 0 || p->draft_max > TK_SPEC_MAX_DRAFT || p->draft_min < 0 ||
        p->draft_min > TK_SPEC_MAX_DRAFT || (p->draft_max > 0 && p->draft_min > p->draft_max))
        return tk_err_set(err, "draft lengths: need 0 <= draft_min <= draft_max <= %d (got %d, %d)",
                          TK_SPEC_MAX_DRAFT, p->draft_min, p->draft_max);
    tk_sampler probe;
    if (tk_sampler_init(&probe, &p->sampling, 1, tk_exp_row_scalar, err)) return -1;
    tk_sampler_free(&probe);
    return 0;
}

static tk_request *request_new(tk_engine *e, const tk_request_params *p, tk_event_cb cb, void *user,
                               tk_err *err) {
    tk_request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->p = *p;
    r->n = p->n > 0 ? p->n : 1;
    r->cb = cb;
    r->user = user;
    r->p.stop = NULL;
    r->p.n_stop = 0;
    r->p.constraint = (tk_constraint){.kind = p->constraint.kind}; /* its text lives in r->cg */
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)p->n_prompt);
    r->p.prompt = prompt;
    r->samples = calloc((size_t)r->n, sizeof *r->samples);
    r->sched.seqs = calloc((size_t)r->n, sizeof *r->sched.seqs);
    if (!prompt || !r->samples || !r->sched.seqs) {
        /* nothing else is owned yet */
        free(prompt);
        free(r->samples);
        free(r->sched.seqs);
        free(r);
        return NULL;
    }
    r->sched.n = r->n;
    for (int i = 0; i < r->n; i++) r->sched.seqs[i] = &r->samples[i].seq;
    memcpy(prompt, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    /* no sequence slots yet (tk_request_free may run before the loop below ends) */
    for (int i = 0; i < r->n; i++) r->samples[i].seq.slot = r->samples[i].draft_slot = -1;
    if (p->constraint.kind != TK_CONSTRAINT_NONE &&
        !(r->cg = tk_constraint_acquire(&e->constraints, e->tok, &p->constraint, err)))
        goto fail;
    for (int i = 0; i < p->n_stop; i++) {
        r->stop[i] = strdup(p->stop[i]);
        if (!r->stop[i]) goto oom;
        r->p.n_stop++;
    }
    int mode = p->speculative != TK_SPEC_DEFAULT ? p->speculative : e->spec_mode;
    int k_max = p->draft_max > 0 ? p->draft_max : e->draft_max;
    int k_min = p->draft_min > 0 ? p->draft_min : e->draft_min;
    if (k_min > k_max) k_min = k_max;
    if (mode == TK_SPEC_DRAFT && !e->draft) mode = TK_SPEC_OFF;
    for (int i = 0; i < r->n; i++) {
        tk_sample_state *ss = &r->samples[i];
        ss->seq.req = &r->sched;
        ss->req = r;
        ss->index = i;
        ss->spec_mode = mode;
        ss->k_min = k_min;
        ss->k_max = k_max;
        tk_spec_rate_init(&ss->rate);
        /* room for the drafts written past the committed tokens */
        ss->cap = p->n_prompt + (p->max_tokens > 0 ? p->max_tokens : e->ctx_len - p->n_prompt) + 1 +
                  (mode != TK_SPEC_OFF ? k_max + 1 : 0);
        ss->tokens = malloc(sizeof(int32_t) * (size_t)ss->cap);
        if (!ss->tokens) goto oom;
        memcpy(ss->tokens, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
        ss->seq.n_tokens = p->n_prompt;
        ss->seq.pending_fork = i > 0;
        tk_sampling sp = p->sampling;
        sp.seed += (uint64_t)i;
        if (tk_sampler_init(&ss->sampler, &sp, e->model.hp.n_vocab, e->exp_row, err)) goto fail;
        if (mode == TK_SPEC_DRAFT) {
            tk_sampling dp = sp;
            dp.seed ^= 0x64726166742d7271ULL; /* the draft's own stream */
            if (tk_sampler_init(&ss->draft_sampler, &dp, e->model.hp.n_vocab, e->exp_row, err)) goto fail;
            if (sp.temperature > 0) {
                ss->q = malloc(sizeof(float) * (size_t)k_max * (size_t)e->model.hp.n_vocab);
                if (!ss->q) goto oom;
            }
        }
        if (tk_csample_init(&ss->cs, r->cg, err)) goto fail;
        if (e->tok) tk_detok_init(&ss->detok, e->tok, p->prompt[p->n_prompt - 1]);
    }
    return r;
oom:
    tk_err_set(err, "out of memory");
fail:
    tk_request_free(e, r);
    return NULL;
}

int tk_engine_submit(tk_engine *e, const tk_request_params *p, tk_event_cb cb, void *user, uint64_t *id,
                     tk_err *err) {
    if (validate(e, p, err)) return -1;
    tk_request *r = request_new(e, p, cb, user, err);
    if (!r) return -1;
    tk_batcher *b = &e->batcher;
    pthread_mutex_lock(&b->mu);
    if (b->n_live >= b->max_waiting + e->max_seqs) {
        pthread_mutex_unlock(&b->mu);
        tk_request_free(e, r);
        return tk_err_set(err, "queue full: %d requests are waiting or running", b->n_live);
    }
    r->id = b->next_id++;
    r->submit_time = tk_clock_seconds(TK_CLOCK_WALL);
    if (b->incoming_tail) b->incoming_tail->next = r;
    else b->incoming_head = r;
    b->incoming_tail = r;
    b->n_incoming++;
    b->n_live++;
    if (id) *id = r->id;
    pthread_cond_broadcast(&b->work);
    pthread_mutex_unlock(&b->mu);
    return 0;
}

int tk_engine_constraint_check(tk_engine *e, const tk_constraint *c, tk_err *err) {
    if (c->kind == TK_CONSTRAINT_NONE) return 0;
    tk_cgrammar *g = tk_constraint_acquire(&e->constraints, e->tok, c, err);
    tk_constraint_release(&e->constraints, g);
    return g ? 0 : -1;
}

void tk_engine_cancel(tk_engine *e, uint64_t id) {
    tk_batcher *b = &e->batcher;
    pthread_mutex_lock(&b->mu);
    if (b->n_cancel == b->cancel_cap) {
        int cap = b->cancel_cap ? b->cancel_cap * 2 : 16;
        uint64_t *n = realloc(b->cancel_ids, sizeof(uint64_t) * (size_t)cap);
        if (n) {
            b->cancel_ids = n;
            b->cancel_cap = cap;
        }
    }
    if (b->n_cancel < b->cancel_cap) b->cancel_ids[b->n_cancel++] = id;
    pthread_cond_broadcast(&b->work);
    pthread_mutex_unlock(&b->mu);
}

void tk_engine_wait_for_work(tk_engine *e, int timeout_ms) {
    tk_batcher *b = &e->batcher;
    pthread_mutex_lock(&b->mu);
    if (b->n_live == 0 && b->n_cancel == 0) {
        struct timespec ts = tk_clock_deadline(timeout_ms);
        pthread_cond_timedwait(&b->work, &b->mu, &ts);
    }
    pthread_mutex_unlock(&b->mu);
}

void tk_engine_metrics_get(tk_engine *e, tk_engine_metrics *m) {
    pthread_mutex_lock(&e->batcher.mu);
    *m = e->batcher.metrics;
    pthread_mutex_unlock(&e->batcher.mu);
}
