/* One persistent pool of worker threads.  tk_pool_run splits n_tasks over
 * the workers (the caller works too) and returns when all are done.  Workers
 * spin briefly between jobs, then sleep on a condition variable. */
#ifndef TK_THREADPOOL_H
#define TK_THREADPOOL_H

typedef struct tk_pool tk_pool;

/* fn(ctx, task, thread_index) for task in [0, n_tasks). */
typedef void (*tk_task_fn)(void *ctx, int task, int thread);

tk_pool *tk_pool_new(int n_threads);
void tk_pool_free(tk_pool *p);
int tk_pool_size(const tk_pool *p);
/* Later jobs use only the first n threads (clamped to [1, size]); the others
 * stay idle.  Not while a job runs.  Returns the count in effect.  Work
 * splits may still be planned for tk_pool_size threads. */
int tk_pool_set_active(tk_pool *p, int n);
void tk_pool_run(tk_pool *p, int n_tasks, tk_task_fn fn, void *ctx);

#endif
