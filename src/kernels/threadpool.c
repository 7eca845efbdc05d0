#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

struct tk_threadpool {
    int n_threads; /* including the caller */
    atomic_int active; /* threads that take tasks (tk_threadpool_set_active) */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_cond_t done;
    /* current job */
    tk_task_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next_task;
    atomic_int busy_workers;
    atomic_uint generation; /* bumped for each job; workers wait for a change */
    atomic_int stop;
};

typedef struct worker_arg {
    tk_threadpool *pool;
    int index;
} worker_arg;

static void run_tasks(tk_threadpool *p, int thread) {
    for (;;) {
        int t = atomic_fetch_add(&p->next_task, 1);
        if (t >= p->n_tasks) break;
        p->fn(p->ctx, t, thread);
    }
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    tk_threadpool *p = wa->pool;
    int index = wa->index;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        /* Spin a little: decode steps come back to back. */
        unsigned gen = atomic_load(&p->generation);
        for (int spin = 0; gen == seen && spin < 20000; spin++) {
            sched_yield();
            gen = atomic_load(&p->generation);
        }
        if (gen == seen) {
            pthread_mutex_lock(&p->mu);
            while ((gen = atomic_load(&p->generation)) == seen && !p->stop) pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (p->stop) return NULL;
        seen = gen;
        if (index < atomic_load(&p->active)) run_tasks(p, index);
        if (atomic_fetch_sub(&p->busy_workers, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

tk_threadpool *tk_threadpool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    tk_threadpool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->active, n_threads);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!p->threads) {
        free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            p->n_threads = i;
            break;
        }
        wa->pool = p;
        wa->index = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n_threads = i;
            break;
        }
    }
    atomic_store(&p->active, p->n_threads);
    return p;
}

void tk_threadpool_free(tk_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int tk_threadpool_size(const tk_threadpool *p) { return p->n_threads; }

int tk_threadpool_set_active(tk_threadpool *p, int n) {
    if (n < 1) n = 1;
    if (n > p->n_threads) n = p->n_threads;
    atomic_store(&p->active, n);
    return n;
}

void tk_threadpool_run(tk_threadpool *p, int n_tasks, tk_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (atomic_load(&p->active) == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next_task, 0);
    atomic_store(&p->busy_workers, p->n_threads - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, 0);
    /* Wait for the workers to finish their last task. */
    for (int spin = 0; atomic_load(&p->busy_workers) > 0 && spin < 20000; spin++) sched_yield();
    if (atomic_load(&p->busy_workers) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->busy_workers) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
