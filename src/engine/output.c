/* Output: a committed token becomes an event with its text (detokenized,
 * held back while it may start a stop string), logprobs and latency
 * observations; a sample ends on EOS, a stop string, max_tokens or a full
 * context. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

static void observe(const tk_engine_metrics *m, uint64_t *buckets, double *sum, uint64_t *count, double v) {
    for (int i = 0; i < m->n_buckets; i++)
        if (v <= m->bucket_bounds[i]) buckets[i]++;
    *sum += v;
    (*count)++;
}

static void emit(tk_request *r, tk_sample_state *ss, const char *text, int len, int32_t token, float logprob,
                 int n_top, const int32_t *top_ids, const float *top_lp, const char *finish) {
    if (!r->cb) return;
    tk_event ev = {
        .request = r->id, .index = ss->index, .text = text ? text : "", .text_len = len, .token = token,
        .logprob = logprob, .n_top = n_top, .top_ids = top_ids, .top_logprobs = top_lp, .done = finish != NULL,
        .finish_reason = finish, .n_prompt_tokens = r->p.n_prompt, .n_cached_tokens = ss->n_cached,
        .n_generated = ss->n_generated, .spec_drafted = ss->spec_drafted, .spec_accepted = ss->spec_accepted,
        .spec_target_passes = ss->spec_passes,
        .error = finish && !strcmp(finish, "error") && ss->error[0] ? ss->error : NULL,
    };
    r->cb(r->user, &ev);
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

void tk_output_finish(tk_engine *e, tk_sample_state *ss, const char *reason, bool flush) {
    tk_request *r = ss->req;
    if (ss->seq.done) return;
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
    ss->seq.done = true;
    r->sched.n_done++;
    tk_step_release_sample(e, ss);
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

void tk_output_commit(tk_engine *e, tk_sample_state *ss, int32_t tok, const float *logits, double now) {
    if (tok < 0) {
        /* the grammar allows no token, or failed (tk_output_choose) */
        tk_output_finish(e, ss, "error", true);
        return;
    }
    tk_engine_metrics *st = &e->batcher.stats;
    tk_request *r = ss->req;
    int nv = e->model.hp.n_vocab;
    float lp = 0;
    int32_t top_ids[TK_REQUEST_MAX_TOP_LOGPROBS];
    float top_lp[TK_REQUEST_MAX_TOP_LOGPROBS];
    int k = r->p.top_logprobs > 0 ? r->p.top_logprobs : 0;
    if (r->p.top_logprobs >= 0) lp = logprobs(logits, nv, tok, k, top_ids, top_lp);

    if (!r->first_token) {
        r->first_token = true;
        observe(st, st->ttft_buckets, &st->ttft_sum, &st->ttft_count, now - r->submit_time);
    } else if (ss->last_token_time > 0) {
        observe(st, st->itl_buckets, &st->itl_sum, &st->itl_count, now - ss->last_token_time);
    }
    ss->last_token_time = now;
    st->generation_tokens++;
    ss->n_generated++;

    if (!r->p.ignore_eos && e->tok && tk_tokenizer_is_eog(e->tok, tok)) {
        emit(r, ss, NULL, 0, tok, lp, k, top_ids, top_lp, NULL);
        tk_output_finish(e, ss, "stop", true);
        return;
    }
    tk_err err;
    if (ss->cs.cg && tk_csample_step(&e->constraints, &ss->cs, &ss->cs.state, tok, !r->p.ignore_eos,
                                     &ss->cs.state, &err) != 1) {
        /* cannot happen: tokens are chosen and drafts verified under the mask */
        emit(r, ss, NULL, 0, tok, lp, k, top_ids, top_lp, NULL);
        tk_output_finish(e, ss, "error", true);
        return;
    }
    ss->tokens[ss->seq.n_tokens++] = tok;
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
        tk_output_finish(e, ss, "stop", false);
        return;
    }
    drop_released(ss, out_len);
    if (ss->cs.cg && tk_gstate_done(&ss->cs.state)) /* nothing can follow: the output is complete */
        tk_output_finish(e, ss, "stop", true);
    else if ((r->p.max_tokens > 0 && ss->n_generated >= r->p.max_tokens) || ss->seq.n_tokens >= e->ctx_len)
        tk_output_finish(e, ss, "length", true);
}

int32_t tk_output_choose(tk_engine *e, tk_sample_state *ss, const float *logits) {
    float *row = e->batcher.row;
    int n_hist = ss->seq.n_tokens;
    if (!ss->cs.cg) {
        memcpy(row, logits, sizeof(float) * (size_t)e->model.hp.n_vocab);
        return tk_sample(&ss->sampler, row, ss->tokens, n_hist);
    }
    tk_err err;
    int32_t tok = tk_constraint_sample(&e->constraints, &ss->cs, &ss->cs.state, !ss->req->p.ignore_eos,
                                       &ss->sampler, logits, row, ss->tokens, n_hist, &err);
    if (tok < 0) tk_output_constraint_failed(ss, tok == -2 ? err.msg : NULL);
    return tok >= 0 ? tok : -1;
}

void tk_output_constraint_failed(tk_sample_state *ss, const char *why) {
    if (why && !tk_grammar_err_is_input(why)) return; /* out of memory: the engine's failure, not the request's */
    snprintf(ss->error, sizeof ss->error, "%s",
             why ? why : TK_GRAMMAR_ERR_PREFIX " no token of the vocabulary can continue the constrained output");
}

void tk_output_sample(tk_engine *e, tk_sample_state *ss, const float *logits, double now) {
    tk_output_commit(e, ss, tk_output_choose(e, ss, logits), logits, now);
}
