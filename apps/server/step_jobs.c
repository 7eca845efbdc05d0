#include "step_jobs.h"

#include <time.h>

#include <tokamak.h>

int tk_step_jobs_init(tk_step_jobs *q) {
    q->head = q->tail = NULL;
    pthread_condattr_t a;
    if (pthread_condattr_init(&a)) return -1;
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&q->done_cv, &a);
    pthread_condattr_destroy(&a);
    if (rc) return -1;
    if (pthread_mutex_init(&q->mu, NULL)) {
        pthread_cond_destroy(&q->done_cv);
        return -1;
    }
    return 0;
}

void tk_step_jobs_destroy(tk_step_jobs *q) {
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->done_cv);
}

int tk_step_jobs_run(tk_step_jobs *q, tk_step_job *j, const atomic_bool *stopping) {
    j->taken = j->done = false;
    j->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->tail) q->tail->next = j;
    else q->head = j;
    q->tail = j;
    int rc = 0;
    while (!j->done) {
        if (!j->taken && atomic_load(stopping)) { /* withdraw it: the loop no longer drains */
            tk_step_job **p = &q->head, *prev = NULL;
            while (*p != j) prev = *p, p = &(*p)->next;
            *p = j->next;
            if (q->tail == j) q->tail = prev;
            rc = -1;
            break;
        }
        struct timespec ts = tk_clock_deadline(100);
        pthread_cond_timedwait(&q->done_cv, &q->mu, &ts);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void tk_step_jobs_drain(tk_step_jobs *q) {
    pthread_mutex_lock(&q->mu);
    tk_step_job *list = q->head;
    q->head = q->tail = NULL;
    for (tk_step_job *j = list; j; j = j->next) j->taken = true;
    pthread_mutex_unlock(&q->mu);
    while (list) {
        tk_step_job *next = list->next; /* read before done: the waiter may free j then */
        list->run(list->arg);
        pthread_mutex_lock(&q->mu);
        list->done = true;
        pthread_cond_broadcast(&q->done_cv);
        pthread_mutex_unlock(&q->mu);
        list = next;
    }
}
