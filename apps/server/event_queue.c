#include "event_queue.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

tk_event_queue *tk_event_queue_new(int n_samples) {
    tk_event_queue *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    if (pthread_mutex_init(&l->mu, NULL)) {
        free(l);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc) {
        pthread_mutex_destroy(&l->mu);
        free(l);
        return NULL;
    }
    l->refs = 1;
    l->n_samples = n_samples < 1 ? 1 : n_samples;
    return l;
}

static void ev_clear(tk_queued_event *e) {
    free(e->text);
    free(e->top_ids);
    free(e->error);
}

void tk_event_queue_ref(tk_event_queue *l) {
    pthread_mutex_lock(&l->mu);
    l->refs++;
    pthread_mutex_unlock(&l->mu);
}

void tk_event_queue_unref(tk_event_queue *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    int left = --l->refs;
    pthread_mutex_unlock(&l->mu);
    if (left > 0) return;
    for (size_t i = 0; i < l->len; i++) ev_clear(&l->q[i]);
    free(l->q);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* Runs on the engine thread: copy, queue, signal; never blocks for long. */
void tk_event_queue_on_event(void *user, const tk_event *ev) {
    tk_event_queue *l = user;
    tk_queued_event c = {.index = ev->index, .token = ev->token, .logprob = ev->logprob, .done = ev->done,
                    .n_prompt = ev->n_prompt_tokens, .n_cached = ev->n_cached_tokens,
                    .n_generated = ev->n_generated};
    bool ok = true;
    if (ev->text_len > 0 && ev->text) {
        c.text = malloc((size_t)ev->text_len);
        if (c.text) {
            memcpy(c.text, ev->text, (size_t)ev->text_len);
            c.text_len = ev->text_len;
        } else {
            ok = false;
        }
    }
    if (ev->n_top > 0 && ev->top_ids && ev->top_logprobs) {
        int n = ev->n_top > 64 ? 64 : ev->n_top;
        void *blk = malloc((size_t)n * (sizeof(int32_t) + sizeof(float)));
        if (blk) {
            c.top_ids = blk;
            c.top_lp = (float *)(c.top_ids + n);
            memcpy(c.top_ids, ev->top_ids, (size_t)n * sizeof(int32_t));
            memcpy(c.top_lp, ev->top_logprobs, (size_t)n * sizeof(float));
            c.n_top = n;
        } else {
            ok = false;
        }
    }
    if (ev->done) {
        const char *f = ev->finish_reason ? ev->finish_reason : "stop";
        size_t n = strlen(f);
        if (n >= sizeof c.finish) n = sizeof c.finish - 1;
        memcpy(c.finish, f, n);
        c.finish[n] = 0;
        if (ev->error && !(c.error = strdup(ev->error))) ok = false;
    }
    pthread_mutex_lock(&l->mu);
    if (l->len == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        tk_queued_event *q = realloc(l->q, cap * sizeof *q);
        if (q) {
            l->q = q;
            l->cap = cap;
        }
    }
    if (l->len < l->cap) {
        l->q[l->len++] = c;
    } else {
        /* Out of memory: drop the event; n_done below still counts a final
         * one, and the consumer reports the request as failed. */
        ev_clear(&c);
        ok = false;
    }
    if (!ok) l->lost = true;
    bool release = false;
    if (ev->done) {
        l->n_done++;
        release = l->n_done >= l->n_samples;
    }
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (release) tk_event_queue_unref(l); /* the engine's reference */
}

size_t tk_event_queue_take(tk_event_queue *l, int timeout_ms, tk_event_batch *b, bool *all_done, bool *lost) {
    for (size_t i = 0; i < b->n; i++) ev_clear(&b->ev[i]);
    b->n = 0;
    pthread_mutex_lock(&l->mu);
    if (l->len == 0 && l->n_done < l->n_samples && timeout_ms > 0) {
        struct timespec ts = tk_clock_deadline(timeout_ms);
        while (l->len == 0 && l->n_done < l->n_samples)
            if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) == ETIMEDOUT) break;
    }
    /* Swap arrays: the consumer gets the queue, the producer the empty one. */
    tk_queued_event *q = l->q;
    size_t len = l->len, cap = l->cap;
    l->q = b->ev;
    l->cap = b->cap;
    l->len = 0;
    b->ev = q;
    b->n = len;
    b->cap = cap;
    *all_done = l->n_done >= l->n_samples;
    *lost = l->lost;
    pthread_mutex_unlock(&l->mu);
    return b->n;
}

void tk_event_batch_free(tk_event_batch *b) {
    for (size_t i = 0; i < b->n; i++) ev_clear(&b->ev[i]);
    free(b->ev);
    memset(b, 0, sizeof *b);
}
