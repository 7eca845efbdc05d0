/* A submitted request as seen from the HTTP side: the engine's events are
 * copied (on the engine thread) into a queue under a mutex, and the
 * connection thread takes them out.  Reference counted: the connection
 * holds one reference, the engine another until every sample has had its
 * final (done) event, so either side may go away first. */
#ifndef TK_SERVER_EVENT_QUEUE_H
#define TK_SERVER_EVENT_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tokamak.h>

typedef struct tk_queued_event {
    int index;
    int32_t token;          /* -1: none */
    float logprob;
    int n_top;
    int32_t *top_ids;       /* malloc'd (n_top), with top_lp in the same block */
    float *top_lp;
    char *text;             /* malloc'd, not NUL-terminated; NULL if text_len == 0 */
    int text_len;
    bool done;
    char finish[16];
    char *error;            /* malloc'd: the engine's reason for an "error" finish, or NULL */
    int n_prompt, n_cached, n_generated;
} tk_queued_event;

/* Events handed to the consumer; reused between takes. */
typedef struct tk_event_batch {
    tk_queued_event *ev;
    size_t n, cap;
} tk_event_batch;

typedef struct tk_event_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    int n_samples, n_done;
    bool lost;              /* an event could not be stored (out of memory) */
    tk_queued_event *q;
    size_t len, cap;
} tk_event_queue;

tk_event_queue *tk_event_queue_new(int n_samples); /* one reference */
void tk_event_queue_ref(tk_event_queue *l);
void tk_event_queue_unref(tk_event_queue *l);
/* The engine callback (tk_event_cb); `user` is the tk_event_queue. */
void tk_event_queue_on_event(void *user, const tk_event *ev);
/* Waits up to timeout_ms for events and moves all queued ones into b
 * (freeing what b held before).  *all_done: every sample has finished and
 * b holds the last events.  Returns the number of events taken. */
size_t tk_event_queue_take(tk_event_queue *l, int timeout_ms, tk_event_batch *b, bool *all_done, bool *lost);
void tk_event_batch_free(tk_event_batch *b);

#endif
