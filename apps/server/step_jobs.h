/* Work that must run on the engine's stepping thread (the low-level engine
 * API is not for other threads while it steps): a request thread posts a
 * job and waits; the serve loop runs the posted jobs between steps. */
#ifndef TK_SERVER_STEP_JOBS_H
#define TK_SERVER_STEP_JOBS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct tk_step_job {
    void (*run)(void *arg);
    void *arg;
    bool taken, done;
    struct tk_step_job *next;
} tk_step_job;

typedef struct tk_step_jobs {
    pthread_mutex_t mu;
    pthread_cond_t done_cv; /* CLOCK_MONOTONIC */
    tk_step_job *head, *tail;
} tk_step_jobs;

int tk_step_jobs_init(tk_step_jobs *q);
void tk_step_jobs_destroy(tk_step_jobs *q);
/* Posts j and waits until it ran (0), or until *stopping is set while it
 * still waits to be taken (-1: withdrawn, it never runs). */
int tk_step_jobs_run(tk_step_jobs *q, tk_step_job *j, const atomic_bool *stopping);
/* Runs the jobs posted so far (the stepping thread). */
void tk_step_jobs_drain(tk_step_jobs *q);

#endif
