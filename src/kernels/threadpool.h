/* One persistent pool of worker threads.  tk_threadpool_run splits n_tasks over
 * the workers (the caller works too) and returns when all are done.  Workers
 * spin briefly between jobs, then sleep on a condition variable. */
#ifndef TK_THREADPOOL_H
#define TK_THREADPOOL_H

typedef struct tk_threadpool tk_threadpool;

/* fn(ctx, task, thread_index) for task in [0, n_tasks). */
typedef void (*tk_task_fn)(void *ctx, int task, int thread);

tk_threadpool *tk_threadpool_new(int n_threads);
void tk_threadpool_free(tk_threadpool *p);
int tk_threadpool_size(const tk_threadpool *p);
/* Later jobs use only the first n threads (clamped to [1, size]); the others
 * stay idle.  Not while a job runs.  Returns the count in effect.  Work
 * splits may still be planned for tk_threadpool_size threads. */
int tk_threadpool_set_active(tk_threadpool *p, int n);
void tk_threadpool_run(tk_threadpool *p, int n_tasks, tk_task_fn fn, void *ctx);

#endif
