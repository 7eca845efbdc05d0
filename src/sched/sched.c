/* Continuous batching.  Each step builds one batch from the running
 * requests (oldest first: decode tokens, then the rest of chunked prefills)
 * and newly admitted waiting requests (first come, first served), under
 * the batch-token budget, the sequence slots and the KV pool.  When blocks
 * run out, the newest running request is preempted: its blocks are freed
 * and it goes back to the front of the queue to be recomputed later
 * (generated tokens and sampler state are kept, so nothing is lost and the
 * output does not change).  Requests join and leave between any two steps.
 *
 * Speculative decoding fits into the same step: before the batch is built,
 * every speculating sample in the decode phase gets its drafts (prompt
 * lookup, or draft-model passes batched over all such samples); the batch
 * then carries its last token plus the drafts, all asking for logits, next
 * to the other samples' decode and prefill tokens; after the pass each
 * sample's drafts are verified, the accepted ones and one token of the
 * model's own are emitted, and rejected positions are cut from both KV
 * caches. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../engine/engine_internal.h"

#define MAX_STOP 8
#define MAX_STOP_LEN 256
#define MAX_N 64
#define MAX_TOP_LOGPROBS 20

typedef struct tk_sample_state {
    struct tk_request *req;
    int index;
    int slot;               /* engine sequence slot, -1 when not resident */
    int32_t *tokens;        /* prompt + generated */
    int n_tokens, cap;
    int n_computed;         /* tokens whose K/V are in the cache */
    int n_generated;
    int n_cached;           /* prompt tokens found in the prefix cache at admission */
    int n_hashed;           /* full blocks registered in the prefix cache */
    uint64_t last_hash;
    tk_sampler sampler;
    tk_detok detok;
    char *held;             /* decoded text not yet released (may start a stop string) */
    int n_held, held_cap;
    bool done;
    bool pending_fork;      /* waits for sample 0's prefill, then shares its blocks */
    double last_token_time;
    /* speculative decoding */
    int spec_mode;          /* TK_SPEC_OFF, _NGRAM or _DRAFT */
    int k_min, k_max;       /* draft length bounds */
    tk_spec_rate rate;      /* running acceptance rate */
    int n_draft;            /* drafts this step, at tokens[n_tokens ..] */
    int d_want;             /* drafts wanted from the draft model this step */
    int group_start;        /* batch index of this step's verification group; -1: none */
    int group_len;          /* last token + drafts */
    int d_slot;             /* draft engine sequence; -1: none */
    int d_computed;         /* tokens whose K/V are in the draft cache (all committed) */
    float *q;               /* [k_max][n_vocab]: the draft model's distributions (sampling) */
    tk_sampler d_sampler;   /* the draft model's sampler: same filters, its own generator */
    int spec_drafted, spec_accepted, spec_passes;
} tk_sample_state;

typedef struct tk_request {
    uint64_t id;
    tk_request_params p;
    char *stop[MAX_STOP];
    tk_event_cb cb;
    void *user;
    tk_sample_state *samples;
    int n;
    int n_done;
    double submit_time;
    bool first_token;
    bool cancelled;
    struct tk_request *next; /* incoming / waiting lists */
} tk_request;

/* The clock for the speculative cost model's pass times: with a pool of one
 * thread, the stepping thread's CPU time (on a shared machine, a pass
 * descheduled part-way would otherwise look several times dearer); with
 * more threads, the wall clock (the caller's CPU time would miss its
 * helpers' work). */
static double pass_clock(const tk_engine *e) {
    return tk_clock_seconds(tk_pool_size(e->pool) == 1 ? TK_CLOCK_THREAD_CPU : TK_CLOCK_WALL);
}

static const double bucket_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75,
                                       1.0,   2.5,  5.0,   7.5,  10.0,  20.0, 40.0, INFINITY};
#define N_BUCKETS ((int)(sizeof bucket_bounds / sizeof bucket_bounds[0]))

static void observe(uint64_t *buckets, double *sum, uint64_t *count, double v) {
    for (int i = 0; i < N_BUCKETS; i++)
        if (v <= bucket_bounds[i]) buckets[i]++;
    *sum += v;
    (*count)++;
}

/* ---- setup ---- */

int tk_sched_init(tk_engine *e, int max_waiting, int draft_rows, tk_err *err) {
    tk_sched *s = &e->sched;
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    /* timed waits on the monotonic clock: a wall-clock step must not
     * stretch or cut them */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->work, &ca);
    pthread_condattr_destroy(&ca);
    s->max_waiting = max_waiting;
    s->next_id = 1;
    size_t T = (size_t)e->ws.max_tokens, nv = (size_t)e->model.hp.n_vocab;
    /* one row per resident sample plus the drafts' budget, never more than
     * a batch has tokens */
    int rows = e->max_seqs < e->ws.max_tokens ? e->max_seqs : e->ws.max_tokens;
    s->draft_rows = draft_rows < e->ws.max_tokens - rows ? draft_rows : e->ws.max_tokens - rows;
    if (s->draft_rows < 0) s->draft_rows = 0;
    s->logits_rows = rows + s->draft_rows;
    s->logits = malloc((size_t)s->logits_rows * nv * sizeof(float));
    s->row = malloc(nv * sizeof(float));
    s->b_token = malloc(T * sizeof(int32_t));
    s->b_pos = malloc(T * sizeof(int32_t));
    s->b_seq = malloc(T * sizeof(int32_t));
    s->b_logits = malloc(T);
    s->b_owner = malloc(T * sizeof *s->b_owner);
    s->running_cap = e->max_seqs;
    s->running = malloc((size_t)s->running_cap * sizeof *s->running);
    s->dist_p = malloc(nv * sizeof(float));
    s->resid = malloc(nv * sizeof(float));
    s->drafting = malloc((size_t)e->max_seqs * sizeof *s->drafting);
    s->d_logits = malloc((size_t)e->max_seqs * nv * sizeof(float));
    s->d_token = malloc(T * sizeof(int32_t));
    s->d_pos = malloc(T * sizeof(int32_t));
    s->d_seq = malloc(T * sizeof(int32_t));
    s->d_flag = malloc(T);
    s->d_owner = malloc(T * sizeof *s->d_owner);
    if (!s->logits || !s->row || !s->b_token || !s->b_pos || !s->b_seq || !s->b_logits || !s->b_owner ||
        !s->running || !s->dist_p || !s->resid || !s->drafting || !s->d_logits || !s->d_token ||
        !s->d_pos || !s->d_seq || !s->d_flag || !s->d_owner)
        return tk_err_set(err, "out of memory for the scheduler");
    s->stats.n_buckets = N_BUCKETS;
    s->stats.bucket_bounds = bucket_bounds;
    s->metrics = s->stats;
    return 0;
}

static void request_free(tk_engine *e, tk_request *r) {
    for (int i = 0; i < r->n; i++) {
        tk_sample_state *ss = &r->samples[i];
        if (ss->slot >= 0) tk_engine_seq_free(e, ss->slot);
        if (ss->d_slot >= 0 && e->draft) tk_engine_seq_free(e->draft, ss->d_slot);
        free(ss->tokens);
        free(ss->held);
        free(ss->q);
        tk_sampler_free(&ss->sampler);
        tk_sampler_free(&ss->d_sampler);
    }
    for (int i = 0; i < r->p.n_stop; i++) free(r->stop[i]);
    free(r->samples);
    free((void *)r->p.prompt);
    free(r);
}

void tk_sched_free(tk_engine *e) {
    tk_sched *s = &e->sched;
    for (tk_request *r = s->incoming_head, *next; r; r = next) {
        next = r->next;
        request_free(e, r);
    }
    for (tk_request *r = s->waiting_head, *next; r; r = next) {
        next = r->next;
        request_free(e, r);
    }
    for (int i = 0; i < s->n_running; i++) request_free(e, s->running[i]);
    free(s->running);
    free(s->cancel_ids);
    free(s->logits);
    free(s->row);
    free(s->b_token);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_logits);
    free(s->b_owner);
    free(s->dist_p);
    free(s->resid);
    free(s->drafting);
    free(s->d_logits);
    free(s->d_token);
    free(s->d_pos);
    free(s->d_seq);
    free(s->d_flag);
    free(s->d_owner);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    memset(s, 0, sizeof *s);
}

/* ---- submission (any thread) ---- */

static int validate(tk_engine *e, const tk_request_params *p, tk_err *err) {
    int nv = e->model.hp.n_vocab;
    if (p->n_prompt <= 0 || !p->prompt) return tk_err_set(err, "the prompt is empty");
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= nv)
            return tk_err_set(err, "prompt token %d (id %d) is out of range [0, %d)", i, p->prompt[i], nv);
    int n = p->n > 0 ? p->n : 1;
    if (n > MAX_N || n > e->max_seqs)
        return tk_err_set(err, "n = %d exceeds the limit (%d)", n, e->max_seqs < MAX_N ? e->max_seqs : MAX_N);
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
    if (p->n_stop < 0 || p->n_stop > MAX_STOP) return tk_err_set(err, "at most %d stop strings", MAX_STOP);
    for (int i = 0; i < p->n_stop; i++) {
        size_t len = p->stop[i] ? strlen(p->stop[i]) : 0;
        if (len == 0 || len > MAX_STOP_LEN)
            return tk_err_set(err, "stop strings must be 1 to %d bytes", MAX_STOP_LEN);
    }
    if (p->top_logprobs > MAX_TOP_LOGPROBS)
        return tk_err_set(err, "top_logprobs %d exceeds %d", p->top_logprobs, MAX_TOP_LOGPROBS);
    if (p->speculative < TK_SPEC_DEFAULT || p->speculative > TK_SPEC_DRAFT)
        return tk_err_set(err, "unknown speculative mode %d", p->speculative);
    if (p->speculative == TK_SPEC_DRAFT && !e->draft)
        return tk_err_set(err, "speculative decoding with a draft model: the engine has no draft model");
    if (p->draft_max < 0 || p->draft_max > TK_SPEC_MAX_DRAFT || p->draft_min < 0 ||
        p->draft_min > TK_SPEC_MAX_DRAFT || (p->draft_max > 0 && p->draft_min > p->draft_max))
        return tk_err_set(err, "draft lengths: need 0 <= draft_min <= draft_max <= %d (got %d, %d)",
                          TK_SPEC_MAX_DRAFT, p->draft_min, p->draft_max);
    tk_sampler probe;
    if (tk_sampler_init(&probe, &p->sampling, 1, err)) return -1;
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
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)p->n_prompt);
    r->p.prompt = prompt;
    r->samples = calloc((size_t)r->n, sizeof *r->samples);
    if (!prompt || !r->samples) goto oom;
    memcpy(prompt, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    /* no sequence slots yet (request_free may run before the loop below ends) */
    for (int i = 0; i < r->n; i++) r->samples[i].slot = r->samples[i].d_slot = -1;
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
        ss->req = r;
        ss->index = i;
        ss->slot = -1;
        ss->d_slot = -1;
        ss->group_start = -1;
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
        ss->n_tokens = p->n_prompt;
        ss->pending_fork = i > 0;
        tk_sampling sp = p->sampling;
        sp.seed += (uint64_t)i;
        if (tk_sampler_init(&ss->sampler, &sp, e->model.hp.n_vocab, err)) goto fail;
        if (mode == TK_SPEC_DRAFT) {
            tk_sampling dp = sp;
            dp.seed ^= 0x64726166742d7271ULL; /* the draft's own stream */
            if (tk_sampler_init(&ss->d_sampler, &dp, e->model.hp.n_vocab, err)) goto fail;
            if (sp.temperature > 0) {
                ss->q = malloc(sizeof(float) * (size_t)k_max * (size_t)e->model.hp.n_vocab);
                if (!ss->q) goto oom;
            }
        }
        if (e->tok) tk_detok_init(&ss->detok, e->tok, p->prompt[p->n_prompt - 1]);
    }
    return r;
oom:
    tk_err_set(err, "out of memory");
fail:
    request_free(e, r);
    return NULL;
}

int tk_engine_submit(tk_engine *e, const tk_request_params *p, tk_event_cb cb, void *user, uint64_t *id,
                     tk_err *err) {
    if (validate(e, p, err)) return -1;
    tk_request *r = request_new(e, p, cb, user, err);
    if (!r) return -1;
    tk_sched *s = &e->sched;
    pthread_mutex_lock(&s->mu);
    if (s->n_live >= s->max_waiting + e->max_seqs) {
        pthread_mutex_unlock(&s->mu);
        request_free(e, r);
        return tk_err_set(err, "queue full: %d requests are waiting or running", s->n_live);
    }
    r->id = s->next_id++;
    r->submit_time = tk_clock_seconds(TK_CLOCK_WALL);
    if (s->incoming_tail) s->incoming_tail->next = r;
    else s->incoming_head = r;
    s->incoming_tail = r;
    s->n_incoming++;
    s->n_live++;
    if (id) *id = r->id;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void tk_engine_cancel(tk_engine *e, uint64_t id) {
    tk_sched *s = &e->sched;
    pthread_mutex_lock(&s->mu);
    if (s->n_cancel == s->cancel_cap) {
        int cap = s->cancel_cap ? s->cancel_cap * 2 : 16;
        uint64_t *n = realloc(s->cancel_ids, sizeof(uint64_t) * (size_t)cap);
        if (n) {
            s->cancel_ids = n;
            s->cancel_cap = cap;
        }
    }
    if (s->n_cancel < s->cancel_cap) s->cancel_ids[s->n_cancel++] = id;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
}

void tk_engine_wait_for_work(tk_engine *e, int timeout_ms) {
    tk_sched *s = &e->sched;
    pthread_mutex_lock(&s->mu);
    if (s->n_live == 0 && s->n_cancel == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->work, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
}

void tk_engine_metrics_get(tk_engine *e, tk_engine_metrics *m) {
    pthread_mutex_lock(&e->sched.mu);
    *m = e->sched.metrics;
    pthread_mutex_unlock(&e->sched.mu);
}

/* ---- events ---- */

static void emit(tk_request *r, tk_sample_state *ss, const char *text, int len, int32_t token, float logprob,
                 int n_top, const int32_t *top_ids, const float *top_lp, const char *finish) {
    if (!r->cb) return;
    tk_event ev = {
        .request = r->id, .index = ss->index, .text = text ? text : "", .text_len = len, .token = token,
        .logprob = logprob, .n_top = n_top, .top_ids = top_ids, .top_logprobs = top_lp, .done = finish != NULL,
        .finish_reason = finish, .n_prompt_tokens = r->p.n_prompt, .n_cached_tokens = ss->n_cached,
        .n_generated = ss->n_generated, .spec_drafted = ss->spec_drafted, .spec_accepted = ss->spec_accepted,
        .spec_target_passes = ss->spec_passes,
    };
    r->cb(r->user, &ev);
}

static void release_slot(tk_engine *e, tk_sample_state *ss) {
    if (ss->slot >= 0) tk_engine_seq_free(e, ss->slot);
    if (ss->d_slot >= 0 && e->draft) tk_engine_seq_free(e->draft, ss->d_slot);
    ss->d_slot = -1;
    ss->d_computed = 0;
    ss->n_draft = 0;
    ss->group_start = -1;
    ss->slot = -1;
    ss->n_computed = 0;
    ss->n_hashed = 0;
    ss->last_hash = 0;
}

/* Appends to the held-back text (dropped only if memory runs out). */
static void held_append(tk_sample_state *ss, const char *text, int len) {
    if (len <= 0) return;
    if (ss->n_held + len > ss->held_cap) {
        int cap = ss->held_cap ? ss->held_cap : 256;
        while (cap < ss->n_held + len) cap *= 2;
        char *nb = realloc(ss->held, (size_t)cap);
        if (!nb) return;
        ss->held = nb;
        ss->held_cap = cap;
    }
    memcpy(ss->held + ss->n_held, text, (size_t)len);
    ss->n_held += len;
}

static void finish_sample(tk_engine *e, tk_sample_state *ss, const char *reason, bool flush) {
    tk_request *r = ss->req;
    if (ss->done) return;
    if (flush && e->tok) {
        /* Release what was held back for stop strings, plus any incomplete
         * UTF-8 tail. */
        char tail[64];
        int n = tk_detok_flush(&ss->detok, tail, sizeof tail);
        held_append(ss, tail, n);
        emit(r, ss, ss->held, ss->n_held, -1, 0, 0, NULL, NULL, reason);
    } else {
        emit(r, ss, NULL, 0, -1, 0, 0, NULL, NULL, reason);
    }
    ss->n_held = 0;
    ss->done = true;
    r->n_done++;
    release_slot(e, ss);
}

/* Appends decoded text and releases what can no longer start a stop
 * string.  Returns true if a stop string matched (text before it released). */
static bool push_text(tk_sample_state *ss, const char *text, int len, char **out, int *out_len) {
    tk_request *r = ss->req;
    *out = ss->held;
    *out_len = 0;
    held_append(ss, text, len);
    *out = ss->held;
    if (ss->n_held == 0) return false;
    /* earliest complete match */
    int best = -1;
    for (int i = 0; i < r->p.n_stop; i++) {
        const char *hit = memmem(ss->held, (size_t)ss->n_held, r->stop[i], strlen(r->stop[i]));
        if (hit && (best < 0 || hit - ss->held < best)) best = (int)(hit - ss->held);
    }
    if (best >= 0) {
        *out_len = best;
        return true;
    }
    /* keep the longest suffix that is a prefix of a stop string */
    int keep = 0;
    for (int i = 0; i < r->p.n_stop; i++) {
        int sl = (int)strlen(r->stop[i]);
        for (int k = sl - 1 < ss->n_held ? sl - 1 : ss->n_held; k > keep; k--)
            if (!memcmp(ss->held + ss->n_held - k, r->stop[i], (size_t)k)) {
                keep = k;
                break;
            }
    }
    *out_len = ss->n_held - keep;
    return false;
}

static void drop_released(tk_sample_state *ss, int n) {
    if (n == 0) return;
    memmove(ss->held, ss->held + n, (size_t)(ss->n_held - n));
    ss->n_held -= n;
}

/* log-softmax of the raw logits: the chosen token's and the top-k. */
static float logprobs(const float *logits, int nv, int32_t chosen, int k, int32_t *top_ids, float *top_lp) {
    float maxl = logits[0];
    for (int i = 1; i < nv; i++)
        if (logits[i] > maxl) maxl = logits[i];
    double sum = 0;
    for (int i = 0; i < nv; i++) sum += exp((double)(logits[i] - maxl));
    float lse = maxl + (float)log(sum);
    for (int j = 0; j < k; j++) {
        top_ids[j] = -1;
        top_lp[j] = -INFINITY;
    }
    for (int i = 0; i < nv && k > 0; i++) {
        float v = logits[i] - lse;
        if (v <= top_lp[k - 1]) continue;
        int j = k - 1;
        while (j > 0 && top_lp[j - 1] < v) {
            top_lp[j] = top_lp[j - 1];
            top_ids[j] = top_ids[j - 1];
            j--;
        }
        top_lp[j] = v;
        top_ids[j] = i;
    }
    return logits[chosen] - lse;
}

/* Appends a chosen token to a sample and reports it (logits: the raw row it
 * was chosen from, for logprobs); finishes the sample on EOS, a stop
 * string, max_tokens or a full context. */
static void commit_token(tk_engine *e, tk_sample_state *ss, int32_t tok, const float *logits, double now) {
    tk_sched *s = &e->sched;
    tk_request *r = ss->req;
    int nv = e->model.hp.n_vocab;
    float lp = 0;
    int32_t top_ids[MAX_TOP_LOGPROBS];
    float top_lp[MAX_TOP_LOGPROBS];
    int k = r->p.top_logprobs > 0 ? r->p.top_logprobs : 0;
    if (r->p.top_logprobs >= 0) lp = logprobs(logits, nv, tok, k, top_ids, top_lp);

    if (!r->first_token) {
        r->first_token = true;
        observe(s->stats.ttft_buckets, &s->stats.ttft_sum, &s->stats.ttft_count, now - r->submit_time);
    } else if (ss->last_token_time > 0) {
        observe(s->stats.itl_buckets, &s->stats.itl_sum, &s->stats.itl_count, now - ss->last_token_time);
    }
    ss->last_token_time = now;
    s->stats.generation_tokens++;
    ss->n_generated++;

    if (!r->p.ignore_eos && e->tok && tk_tokenizer_is_eog(e->tok, tok)) {
        emit(r, ss, NULL, 0, tok, lp, k, top_ids, top_lp, NULL);
        finish_sample(e, ss, "stop", true);
        return;
    }
    ss->tokens[ss->n_tokens++] = tok;
    char buf[512], *text = buf, *out;
    int n = e->tok ? tk_detok_push(&ss->detok, tok, text, sizeof buf) : 0, out_len;
    if (n < 0) {
        /* a very long piece: nothing was consumed, retry with room for it */
        text = malloc((size_t)-n);
        n = text ? tk_detok_push(&ss->detok, tok, text, -n) : 0;
    }
    bool stopped = push_text(ss, text, n, &out, &out_len);
    if (text != buf) free(text);
    emit(r, ss, out, out_len, tok, lp, k, top_ids, top_lp, NULL);
    if (stopped) {
        ss->n_held = 0;
        finish_sample(e, ss, "stop", false);
        return;
    }
    drop_released(ss, out_len);
    if ((r->p.max_tokens > 0 && ss->n_generated >= r->p.max_tokens) || ss->n_tokens >= e->ctx_len)
        finish_sample(e, ss, "length", true);
}

/* Samples the next token of one sample from a logits row and reports it. */
static void sample_token(tk_engine *e, tk_sample_state *ss, const float *logits, double now) {
    tk_sched *s = &e->sched;
    memcpy(s->row, logits, sizeof(float) * (size_t)e->model.hp.n_vocab);
    int32_t tok = tk_sample(&ss->sampler, s->row, ss->tokens, ss->n_tokens);
    commit_token(e, ss, tok, logits, now);
}

/* ---- scheduling ---- */

static void running_remove(tk_sched *s, int i) {
    memmove(&s->running[i], &s->running[i + 1], sizeof *s->running * (size_t)(s->n_running - i - 1));
    s->n_running--;
}

static void waiting_push_front(tk_sched *s, tk_request *r) {
    r->next = s->waiting_head;
    s->waiting_head = r;
    if (!s->waiting_tail) s->waiting_tail = r;
}

/* Frees the request's blocks and queues it for recomputation. */
static void preempt(tk_engine *e, int running_index) {
    tk_sched *s = &e->sched;
    tk_request *r = s->running[running_index];
    for (int i = 0; i < r->n; i++) release_slot(e, &r->samples[i]);
    running_remove(s, running_index);
    waiting_push_front(s, r);
    s->stats.preemptions++;
}

static void finish_request_if_done(tk_engine *e, int running_index) {
    tk_sched *s = &e->sched;
    tk_request *r = s->running[running_index];
    if (r->n_done < r->n) return;
    running_remove(s, running_index);
    s->stats.requests_finished++;
    pthread_mutex_lock(&s->mu);
    s->n_live--;
    pthread_mutex_unlock(&s->mu);
    request_free(e, r);
}

static int free_slots(const tk_engine *e) {
    int n = 0;
    for (int i = 0; i < e->max_seqs; i++) n += e->seq_ptrs[i] == NULL;
    return n;
}

/* Slots a request needs while resident: each unfinished sample (pending
 * forks included, so that forking never fails). */
static int slots_needed(const tk_request *r) { return r->n - r->n_done; }

static void cancel_request(tk_engine *e, tk_request *r) {
    for (int i = 0; i < r->n; i++) finish_sample(e, &r->samples[i], "cancelled", false);
}

static void process_cancels(tk_engine *e) {
    tk_sched *s = &e->sched;
    pthread_mutex_lock(&s->mu);
    /* move newly submitted requests to the waiting queue */
    if (s->incoming_head) {
        if (s->waiting_tail) s->waiting_tail->next = s->incoming_head;
        else s->waiting_head = s->incoming_head;
        s->waiting_tail = s->incoming_tail;
        s->incoming_head = s->incoming_tail = NULL;
        s->n_incoming = 0;
    }
    uint64_t ids[64];
    int n = s->n_cancel < 64 ? s->n_cancel : 64;
    if (n > 0) {
        memcpy(ids, s->cancel_ids, sizeof(uint64_t) * (size_t)n);
        memmove(s->cancel_ids, s->cancel_ids + n, sizeof(uint64_t) * (size_t)(s->n_cancel - n));
        s->n_cancel -= n;
    }
    pthread_mutex_unlock(&s->mu);
    for (int c = 0; c < n; c++) {
        for (int i = 0; i < s->n_running; i++)
            if (s->running[i]->id == ids[c]) {
                cancel_request(e, s->running[i]);
                finish_request_if_done(e, i);
                break;
            }
        for (tk_request **link = &s->waiting_head; *link; link = &(*link)->next)
            if ((*link)->id == ids[c]) {
                tk_request *r = *link;
                *link = r->next;
                if (s->waiting_tail == r) {
                    s->waiting_tail = NULL;
                    for (tk_request *w = s->waiting_head; w; w = w->next) s->waiting_tail = w;
                }
                cancel_request(e, r);
                s->stats.requests_finished++;
                pthread_mutex_lock(&s->mu);
                s->n_live--;
                pthread_mutex_unlock(&s->mu);
                request_free(e, r);
                break;
            }
    }
}

/* Puts a resident sample into a fresh slot, reusing cached prefix blocks. */
static int place_sample(tk_engine *e, tk_sample_state *ss) {
    tk_err err;
    int slot = tk_engine_seq_new(e, &err);
    if (slot < 0) return -1;
    ss->slot = slot;
    tk_kv_seq *seq = &e->seqs[slot];
    /* at least the last token is recomputed: it produces the logits */
    int max_blocks = (ss->n_tokens - 1) / e->kv.block_size;
    int got = tk_kv_seq_match_prefix(&e->kv, seq, ss->tokens, max_blocks, &ss->last_hash);
    ss->n_computed = got * e->kv.block_size;
    ss->n_hashed = got;
    if (ss->n_generated == 0) {
        ss->n_cached = ss->n_computed;
        e->sched.stats.prefix_query_tokens += (uint64_t)ss->n_tokens;
        e->sched.stats.prefix_hit_tokens += (uint64_t)ss->n_computed;
    }
    return 0;
}

/* Adds up to `budget` of the sample's uncomputed tokens to the batch,
 * reserving blocks.  Returns tokens added, or -1 if the pool is short. */
static int add_tokens(tk_engine *e, tk_sample_state *ss, int budget, int *n_batch) {
    tk_sched *s = &e->sched;
    int todo = ss->n_tokens - ss->n_computed;
    int chunk = todo < budget ? todo : budget;
    if (chunk <= 0) return 0;
    tk_kv_seq *seq = &e->seqs[ss->slot];
    int from = ss->n_computed, to = from + chunk;
    if (tk_kv_seq_blocks_needed(&e->kv, seq, from, to) > tk_kv_available(&e->kv)) return -1;
    tk_err err;
    if (tk_kv_seq_reserve(&e->kv, seq, to, &err) || tk_kv_seq_prepare_write(&e->kv, seq, from, to, &err))
        return -1;
    for (int j = 0; j < chunk; j++) {
        int b = (*n_batch)++;
        s->b_token[b] = ss->tokens[from + j];
        s->b_pos[b] = from + j;
        s->b_seq[b] = ss->slot;
        s->b_logits[b] = j == chunk - 1 && to == ss->n_tokens;
        s->b_owner[b] = ss;
    }
    return chunk;
}

/* Adds a decode-phase sample's last token and its drafts, all asking for
 * logits, as one verification group.  Fewer drafts if the budget is short;
 * none (a plain decode step) if the pool is, or if the drafts' extra blocks
 * would leave less than one block per running request (speculation never
 * makes the scheduler preempt). */
static int add_verify_tokens(tk_engine *e, tk_sample_state *ss, int budget, int *n_batch) {
    tk_sched *s = &e->sched;
    int k = ss->n_draft < budget - 1 ? ss->n_draft : budget - 1;
    if (k > s->draft_rows_left) k = s->draft_rows_left; /* logits rows */
    ss->n_draft = 0;
    if (k <= 0) return add_tokens(e, ss, budget, n_batch);
    tk_kv_seq *seq = &e->seqs[ss->slot];
    int from = ss->n_computed, to = ss->n_tokens + k;
    int need = tk_kv_seq_blocks_needed(&e->kv, seq, from, to);
    int extra = need - tk_kv_seq_blocks_needed(&e->kv, seq, from, from + 1);
    tk_err err;
    if (need > tk_kv_available(&e->kv) || (extra > 0 && tk_kv_available(&e->kv) - need < s->n_running) ||
        tk_kv_seq_reserve(&e->kv, seq, to, &err) || tk_kv_seq_prepare_write(&e->kv, seq, from, to, &err))
        return add_tokens(e, ss, budget, n_batch);
    ss->n_draft = k;
    s->draft_rows_left -= k;
    ss->group_start = *n_batch;
    ss->group_len = to - from;
    for (int pos = from; pos < to; pos++) {
        int b = (*n_batch)++;
        s->b_token[b] = ss->tokens[pos];
        s->b_pos[b] = pos;
        s->b_seq[b] = ss->slot;
        s->b_logits[b] = 1;
        s->b_owner[b] = ss;
    }
    return to - from;
}

static bool in_batch(const tk_sched *s, int n_batch, const tk_request *r) {
    for (int b = 0; b < n_batch; b++)
        if (s->b_owner[b]->req == r) return true;
    return false;
}

/* Forks the pending samples of r from sample 0 (whose prefill just ended). */
static void fork_pending(tk_engine *e, tk_request *r) {
    tk_sample_state *src = &r->samples[0];
    for (int i = 1; i < r->n; i++) {
        tk_sample_state *ss = &r->samples[i];
        if (!ss->pending_fork) continue;
        ss->pending_fork = false;
        tk_err err;
        int slot = tk_engine_seq_new(e, &err);
        /* slots were counted at admission, so this cannot fail */
        if (slot < 0) continue;
        ss->slot = slot;
        tk_kv_seq_fork(&e->kv, &e->seqs[src->slot], &e->seqs[slot], &err);
        ss->n_computed = src->n_computed;
        ss->n_hashed = src->n_hashed;
        ss->last_hash = src->last_hash;
        ss->n_cached = src->n_cached;
    }
}

/* Schedules the running requests' samples: pass 0 takes decode steps (one
 * token each), pass 1 the rest of chunked prefills and recomputations.
 * When the pool is short, the newest running request not yet in this batch
 * is preempted; if that is the request itself, it is preempted (or, if it
 * already has tokens in the batch, simply waits). */
static void schedule_running(tk_engine *e, int *budget, int *n_batch) {
    tk_sched *s = &e->sched;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < s->n_running && *budget > 0; i++) {
            tk_request *r = s->running[i];
            for (int k = 0; k < r->n && *budget > 0; k++) {
                tk_sample_state *ss = &r->samples[k];
                if (ss->done || ss->slot < 0) continue;
                int todo = ss->n_tokens - ss->n_computed;
                if (todo <= 0 || (pass == 0) != (todo == 1)) continue;
                int added;
                while ((added = pass == 0 && ss->n_draft > 0 ? add_verify_tokens(e, ss, *budget, n_batch)
                                                             : add_tokens(e, ss, *budget, n_batch)) < 0) {
                    int victim = s->n_running - 1;
                    if (victim == i || in_batch(s, *n_batch, s->running[victim])) break;
                    preempt(e, victim);
                }
                if (added < 0) {
                    if (!in_batch(s, *n_batch, r)) {
                        preempt(e, i);
                        i--;
                    }
                    break;
                }
                *budget -= added;
            }
        }
    }
}

/* Admits waiting requests in order while slots, budget and blocks allow;
 * never lets a later request overtake the head of the queue. */
static void admit_waiting(tk_engine *e, int *budget, int *n_batch) {
    tk_sched *s = &e->sched;
    while (s->waiting_head && *budget > 0 && s->n_running < s->running_cap) {
        tk_request *r = s->waiting_head;
        if (slots_needed(r) > free_slots(e)) break;
        int first_batch = *n_batch, used = 0, ok = 1;
        for (int k = 0; k < r->n && ok; k++) {
            tk_sample_state *ss = &r->samples[k];
            if (ss->done || ss->pending_fork) continue;
            if (place_sample(e, ss)) {
                ok = 0;
            } else if (*budget - used > 0) {
                int added = add_tokens(e, ss, *budget - used, n_batch);
                if (added < 0) ok = 0;
                else used += added;
            }
        }
        if (!ok) {
            /* the pool cannot take it now: undo and wait */
            for (int k = 0; k < r->n; k++) release_slot(e, &r->samples[k]);
            *n_batch = first_batch;
            break;
        }
        *budget -= used;
        s->waiting_head = r->next;
        if (!s->waiting_head) s->waiting_tail = NULL;
        r->next = NULL;
        s->running[s->n_running++] = r;
    }
}

/* ---- speculative decoding ---- */

/* Draws draft j of a drafting sample from the draft model's row: the
 * argmax (greedy) or a sample from its filtered distribution, kept as q. */
static int32_t draft_choose(tk_engine *e, tk_sample_state *ss, const float *row) {
    tk_sched *s = &e->sched;
    int nv = e->model.hp.n_vocab, j = ss->n_draft;
    memcpy(s->row, row, sizeof(float) * (size_t)nv);
    int n_hist = ss->n_tokens + j;
    if (!ss->q) return tk_sample(&ss->d_sampler, s->row, ss->tokens, n_hist);
    float *q = ss->q + (size_t)j * nv;
    tk_sampler_dist(&ss->d_sampler, s->row, ss->tokens, n_hist, q);
    int32_t t = tk_sampler_draw(&ss->d_sampler, q, nv);
    return t < 0 ? tk_argmax(row, nv) : t;
}

/* Runs the draft model for the samples in s->drafting: first the tokens
 * its cache lacks (the prompt on first use, otherwise the last one or two
 * committed tokens), then one draft per pass, all samples in shared
 * batches; each sample stops at d_want drafts (or an end-of-generation
 * draft).  Drafts go to tokens[n_tokens ..]. */
static int draft_run(tk_engine *e, int n, tk_err *err) {
    tk_sched *s = &e->sched;
    tk_engine *d = e->draft;
    int nv = e->model.hp.n_vocab, cap = d->ws.max_tokens;
    for (int i = 0; i < n; i++) {
        tk_sample_state *ss = s->drafting[i];
        ss->n_draft = 0;
        if (ss->d_slot < 0) {
            ss->d_slot = tk_engine_seq_new(d, err);
            if (ss->d_slot < 0) return -1;
            ss->d_computed = 0;
        }
    }
    for (;;) {
        int nb = 0;
        for (int i = 0; i < n && nb < cap; i++) {
            tk_sample_state *ss = s->drafting[i];
            int end = ss->n_tokens + ss->n_draft; /* feed tokens[d_computed, end) */
            if (ss->n_draft >= ss->d_want || ss->d_computed >= end) continue;
            int take = end - ss->d_computed < cap - nb ? end - ss->d_computed : cap - nb;
            for (int j = 0; j < take; j++, nb++) {
                s->d_token[nb] = ss->tokens[ss->d_computed + j];
                s->d_pos[nb] = ss->d_computed + j;
                s->d_seq[nb] = ss->d_slot;
                s->d_flag[nb] = ss->d_computed + j == end - 1;
                s->d_owner[nb] = ss;
            }
        }
        if (nb == 0) break;
        double t0 = pass_clock(e);
        tk_batch b = {nb, s->d_token, s->d_pos, s->d_seq, s->d_flag};
        if (tk_engine_decode(d, &b, s->d_logits, err)) return tk_err_wrap(err, "draft model");
        double dt = pass_clock(e) - t0;
        int row = 0;
        for (int k = 0; k < nb; k++) {
            tk_sample_state *ss = s->d_owner[k];
            ss->d_computed++;
            if (!s->d_flag[k]) continue;
            int32_t t = draft_choose(e, ss, s->d_logits + (size_t)row++ * nv);
            ss->tokens[ss->n_tokens + ss->n_draft++] = t;
            /* nothing follows an end of generation */
            if (!ss->req->p.ignore_eos && e->tok && tk_tokenizer_is_eog(e->tok, t)) ss->d_want = ss->n_draft;
        }
        /* a drafting pass (one or two tokens per sequence), by sequences;
         * catch-up passes after a pause in drafting are prefill, and timing
         * them as drafting passes made c look several times too large */
        if (nb <= 2 * row) tk_spec_cost_observe(&e->cost, 1, row, dt);
    }
    return 0;
}

/* Proposes drafts for every speculating sample in the decode phase. */
static int spec_propose(tk_engine *e, tk_err *err) {
    tk_sched *s = &e->sched;
    /* measured costs for greedy requests; the fixed priors when sampling,
     * where the draft lengths steer the random stream */
    double c_meas, v_meas[TK_SPEC_MAX_DRAFT + 1], v_prior[TK_SPEC_MAX_DRAFT + 1];
    tk_spec_cost_table(&e->cost, &c_meas, v_meas, TK_SPEC_MAX_DRAFT);
    for (int k = 0; k <= TK_SPEC_MAX_DRAFT; k++) v_prior[k] = 1 + e->cost.v_prior * k;
    int n_drafting = 0;
    for (int i = 0; i < s->n_running; i++) {
        tk_request *r = s->running[i];
        for (int k = 0; k < r->n; k++) {
            tk_sample_state *ss = &r->samples[k];
            ss->n_draft = 0;
            ss->group_start = -1;
            if (ss->done || ss->slot < 0 || ss->spec_mode == TK_SPEC_OFF) continue;
            /* the draft cache holds committed tokens only */
            if (ss->d_slot >= 0 && ss->d_computed > ss->n_tokens) {
                ss->d_computed = ss->n_tokens;
                tk_kv_seq_truncate(&e->draft->kv, &e->draft->seqs[ss->d_slot], ss->d_computed);
            }
            /* decode phase, first token already out (it may fork samples) */
            if (ss->n_tokens - ss->n_computed != 1 || ss->n_generated == 0) continue;
            bool greedy = r->p.sampling.temperature == 0;
            double c = ss->spec_mode == TK_SPEC_NGRAM ? 0 : greedy ? c_meas : e->cost.c_prior;
            int want = tk_spec_rate_choose_k(&ss->rate, c, greedy ? v_meas : v_prior, ss->k_min, ss->k_max);
            want = tk_spec_rate_probe(&ss->rate, want); /* k = 0: a probe now and then */
            /* every accepted draft plus one more token must fit */
            int room = e->ctx_len - ss->n_tokens - 1;
            if (r->p.max_tokens > 0 && r->p.max_tokens - ss->n_generated - 1 < room)
                room = r->p.max_tokens - ss->n_generated - 1;
            if (want > room) want = room;
            if (want <= 0) continue;
            if (ss->spec_mode == TK_SPEC_NGRAM) {
                ss->n_draft = tk_spec_ngram_propose(ss->tokens, ss->n_tokens, TK_SPEC_NGRAM_MAX, TK_SPEC_NGRAM_MIN,
                                                    want, ss->tokens + ss->n_tokens);
            } else {
                ss->d_want = want;
                s->drafting[n_drafting++] = ss;
            }
        }
    }
    return n_drafting ? draft_run(e, n_drafting, err) : 0;
}

/* Verifies a sample's drafts against the model's rows (last token's row,
 * then one per draft), emits the accepted drafts and one token of the
 * model's own, and cuts rejected positions from both caches. */
static void spec_verify(tk_engine *e, tk_sample_state *ss, const float *rows, double now) {
    tk_sched *s = &e->sched;
    tk_request *r = ss->req;
    int nv = e->model.hp.n_vocab, k = ss->group_len - 1, base = ss->n_tokens;
    int32_t drafts[TK_SPEC_MAX_DRAFT];
    memcpy(drafts, ss->tokens + base, sizeof(int32_t) * (size_t)k);
    bool greedy = r->p.sampling.temperature == 0;
    int m = 0;
    int32_t tok = -1;
    for (int i = 0; i <= k; i++) {
        memcpy(s->row, rows + (size_t)i * nv, sizeof(float) * (size_t)nv);
        /* history: committed tokens plus the drafts before this one */
        if (i == k || greedy) {
            /* bonus token (all drafts accepted), or greedy: the model's own choice */
            tok = tk_sample(&ss->sampler, s->row, ss->tokens, base + i);
            if (i < k && tok == drafts[i]) {
                m++;
                continue;
            }
            break;
        }
        tk_sampler_dist(&ss->sampler, s->row, ss->tokens, base + i, s->dist_p);
        const float *q = ss->q ? ss->q + (size_t)i * nv : NULL;
        if (!tk_spec_accept(&ss->sampler, s->dist_p, q, drafts[i], s->resid, nv, &tok)) break;
        m++;
    }
    tk_spec_rate_update(&ss->rate, k, m);
    ss->spec_drafted += k;
    ss->spec_accepted += m;
    ss->spec_passes++;
    s->stats.spec_drafted += (uint64_t)k;
    s->stats.spec_accepted += (uint64_t)m;
    s->stats.spec_target_passes++;

    /* Valid K/V: up to the last accepted draft. */
    ss->n_computed = base + m;
    tk_kv_seq_truncate(&e->kv, &e->seqs[ss->slot], ss->n_computed);
    int full = ss->n_computed / e->kv.block_size;
    while (ss->n_hashed < full) {
        ss->last_hash = tk_kv_seq_register_block(&e->kv, &e->seqs[ss->slot], ss->n_hashed, ss->last_hash,
                                                 ss->tokens + (size_t)ss->n_hashed * e->kv.block_size);
        ss->n_hashed++;
    }
    if (ss->d_slot >= 0 && ss->d_computed > base + m) {
        ss->d_computed = base + m;
        tk_kv_seq_truncate(&e->draft->kv, &e->draft->seqs[ss->d_slot], ss->d_computed);
    }
    ss->n_draft = 0;
    ss->group_start = -1;

    int before = ss->n_generated;
    for (int j = 0; j < m && !ss->done; j++) commit_token(e, ss, drafts[j], rows + (size_t)j * nv, now);
    if (!ss->done) commit_token(e, ss, tok, rows + (size_t)m * nv, now);
    s->stats.spec_tokens += (uint64_t)(ss->n_generated - before);
}

/* After the forward pass: advance each sample, register full blocks in the
 * prefix cache, and sample where logits were produced. */
static void consume_batch(tk_engine *e, int n_batch) {
    tk_sched *s = &e->sched;
    double now = tk_clock_seconds(TK_CLOCK_WALL);
    int row = 0;
    for (int b = 0; b < n_batch; b++) {
        tk_sample_state *ss = s->b_owner[b];
        tk_request *r = ss->req;
        if (ss->group_start == b) {
            int len = ss->group_len;
            spec_verify(e, ss, s->logits + (size_t)row * e->model.hp.n_vocab, now);
            row += len;
            b += len - 1;
            continue;
        }
        ss->n_computed++;
        if (ss->n_computed <= r->p.n_prompt) s->stats.prompt_tokens++;
        int full = ss->n_computed / e->kv.block_size;
        while (ss->n_hashed < full && ss->slot >= 0) {
            ss->last_hash = tk_kv_seq_register_block(&e->kv, &e->seqs[ss->slot], ss->n_hashed, ss->last_hash,
                                                     ss->tokens + (size_t)ss->n_hashed * e->kv.block_size);
            ss->n_hashed++;
        }
        if (!s->b_logits[b]) continue;
        const float *lg = s->logits + (size_t)row++ * e->model.hp.n_vocab;
        if (ss->index == 0 && ss->n_generated == 0 && r->n > 1) {
            /* end of the shared prompt: the other samples fork from here
             * and each samples its first token from the same logits */
            fork_pending(e, r);
            for (int k = 0; k < r->n; k++) {
                tk_sample_state *t = &r->samples[k];
                if (!t->done && t->n_generated == 0 && t->slot >= 0) sample_token(e, t, lg, now);
            }
        } else if (!ss->done) {
            if (ss->spec_mode != TK_SPEC_OFF && ss->n_generated > 0) {
                /* a speculating sample's step without drafts: a pass too */
                ss->spec_passes++;
                s->stats.spec_target_passes++;
                s->stats.spec_tokens++;
            }
            sample_token(e, ss, lg, now);
        }
    }
}

/* Sliding-window release (models whose layers all slide): gives back the
 * KV blocks that lie wholly before the window of every future query of a
 * sample, i.e. before (next position - window + 1).  The next position is
 * the committed one: speculative rollback never goes below it (the target
 * cache holds only committed tokens after verification; the draft cache's
 * rollback point is at least the committed tokens).  Runs after the step's
 * blocks were registered in the prefix cache, so a released block can
 * still serve as a cached prefix (it keeps its registration and goes to
 * the LRU list once no one else holds it). */
static void release_out_of_window(tk_engine *e) {
    tk_sched *s = &e->sched;
    int wd = e->draft ? e->draft->kv_window : 0;
    if (e->kv_window <= 0 && wd <= 0) return;
    for (int i = 0; i < s->n_running; i++) {
        tk_request *r = s->running[i];
        for (int k = 0; k < r->n; k++) {
            tk_sample_state *ss = &r->samples[k];
            if (e->kv_window > 0 && ss->slot >= 0)
                tk_kv_seq_drop_before(&e->kv, &e->seqs[ss->slot], ss->n_computed - e->kv_window + 1);
            if (wd > 0 && ss->d_slot >= 0) {
                int next = ss->d_computed < ss->n_tokens ? ss->d_computed : ss->n_tokens;
                tk_kv_seq_drop_before(&e->draft->kv, &e->draft->seqs[ss->d_slot], next - wd + 1);
            }
        }
    }
}

int tk_engine_step(tk_engine *e, tk_err *err) {
    tk_sched *s = &e->sched;
    process_cancels(e);
    if (spec_propose(e, err)) return -1;
    int budget = e->ws.max_tokens, n_batch = 0;
    s->draft_rows_left = s->draft_rows;
    schedule_running(e, &budget, &n_batch);
    admit_waiting(e, &budget, &n_batch);
    if (n_batch > 0) {
        int rows = 0;
        for (int b = 0; b < n_batch; b++) rows += s->b_logits[b] != 0;
        if (rows > s->logits_rows) /* cannot happen: one row per sample plus the draft budget */
            return tk_err_set(err, "internal: %d logits rows in a step, room for %d", rows, s->logits_rows);
        tk_batch batch = {n_batch, s->b_token, s->b_pos, s->b_seq, s->b_logits};
        double t0 = pass_clock(e);
        if (tk_forward(&e->model, &e->kv, e->seq_ptrs, e->max_seqs, &batch, s->logits, &e->ws, e->pool, err))
            return -1;
        tk_spec_cost_observe(&e->cost, 0, n_batch, pass_clock(e) - t0);
        consume_batch(e, n_batch);
        release_out_of_window(e);
    }
    for (int i = s->n_running - 1; i >= 0; i--) finish_request_if_done(e, i);

    /* publish metrics */
    s->stats.requests_running = s->n_running;
    int waiting = 0;
    for (tk_request *r = s->waiting_head; r; r = r->next) waiting++;
    pthread_mutex_lock(&s->mu);
    s->stats.requests_waiting = waiting + s->n_incoming;
    s->stats.kv_blocks_total = e->kv.n_blocks;
    s->stats.kv_blocks_used = tk_kv_used(&e->kv);
    s->stats.kv_blocks_cached = e->kv.n_cached;
    s->metrics = s->stats;
    e->cost_pub = e->cost;
    int live = s->n_live;
    pthread_mutex_unlock(&s->mu);
    return live;
}
