#include "sched.h"

#include <stdlib.h>
#include <string.h>

int tk_sched_init(tk_sched *s, const tk_sched_kv *kv, int max_running, int max_batch_tokens, int draft_rows,
                  tk_err *err) {
    memset(s, 0, sizeof *s);
    s->kv = *kv;
    s->max_batch_tokens = max_batch_tokens;
    s->draft_rows = draft_rows;
    s->running_cap = max_running;
    s->running = malloc((size_t)max_running * sizeof *s->running);
    /* a chunk has at least one token */
    s->plan = malloc((size_t)max_batch_tokens * sizeof *s->plan);
    if (!s->running || !s->plan) {
        tk_sched_free(s);
        return tk_err_set(err, "out of memory for the scheduler");
    }
    return 0;
}

void tk_sched_free(tk_sched *s) {
    free(s->running);
    free(s->plan);
    memset(s, 0, sizeof *s);
}

void tk_sched_enqueue(tk_sched *s, tk_sched_req *r) {
    r->next = NULL;
    if (s->waiting_tail) s->waiting_tail->next = r;
    else s->waiting_head = r;
    s->waiting_tail = r;
}

static void waiting_push_front(tk_sched *s, tk_sched_req *r) {
    r->next = s->waiting_head;
    s->waiting_head = r;
    if (!s->waiting_tail) s->waiting_tail = r;
}

void tk_sched_remove_running(tk_sched *s, int i) {
    memmove(&s->running[i], &s->running[i + 1], sizeof *s->running * (size_t)(s->n_running - i - 1));
    s->n_running--;
}

void tk_sched_remove_waiting(tk_sched *s, tk_sched_req *r) {
    tk_sched_req *prev = NULL;
    for (tk_sched_req *w = s->waiting_head; w; prev = w, w = w->next) {
        if (w != r) continue;
        if (prev) prev->next = r->next;
        else s->waiting_head = r->next;
        if (s->waiting_tail == r) s->waiting_tail = prev;
        r->next = NULL;
        return;
    }
}

int tk_sched_n_waiting(const tk_sched *s) {
    int n = 0;
    for (const tk_sched_req *r = s->waiting_head; r; r = r->next) n++;
    return n;
}

static void plan_push(tk_sched *s, tk_sched_seq *q, int from, int to, bool verify) {
    s->plan[s->n_plan++] = (tk_sched_chunk){q, from, to, verify};
    s->n_plan_tokens += to - from;
}

/* Adds up to `budget` of the sample's uncomputed tokens to the plan,
 * reserving blocks.  Returns tokens added, or -1 if the pool is short. */
static int add_tokens(tk_sched *s, tk_sched_seq *q, int budget) {
    int todo = q->n_tokens - q->n_computed;
    int chunk = todo < budget ? todo : budget;
    if (chunk <= 0) return 0;
    int from = q->n_computed, to = from + chunk;
    if (s->kv.blocks_needed(s->kv.ctx, q, from, to) > s->kv.available(s->kv.ctx)) return -1;
    if (s->kv.reserve(s->kv.ctx, q, from, to)) return -1;
    plan_push(s, q, from, to, false);
    return chunk;
}

/* Adds a decode-phase sample's last token and its drafts as one
 * verification group.  Fewer drafts if the budget or the step's draft rows
 * are short; none (a plain decode step) if the pool is, or if the drafts'
 * extra blocks would leave less than one block per running request
 * (speculation never makes the scheduler preempt). */
static int add_verify_tokens(tk_sched *s, tk_sched_seq *q, int budget) {
    int k = q->n_draft < budget - 1 ? q->n_draft : budget - 1;
    if (k > s->draft_rows_left) k = s->draft_rows_left;
    q->n_draft = 0;
    if (k <= 0) return add_tokens(s, q, budget);
    int from = q->n_computed, to = q->n_tokens + k;
    int need = s->kv.blocks_needed(s->kv.ctx, q, from, to);
    int extra = need - s->kv.blocks_needed(s->kv.ctx, q, from, from + 1);
    int avail = s->kv.available(s->kv.ctx);
    if (need > avail || (extra > 0 && avail - need < s->n_running) || s->kv.reserve(s->kv.ctx, q, from, to))
        return add_tokens(s, q, budget);
    q->n_draft = k;
    s->draft_rows_left -= k;
    plan_push(s, q, from, to, true);
    return to - from;
}

static bool in_plan(const tk_sched *s, const tk_sched_req *r) {
    for (int c = 0; c < s->n_plan; c++)
        if (s->plan[c].seq->req == r) return true;
    return false;
}

/* Frees the request's blocks and queues it for recomputation. */
static void preempt(tk_sched *s, int running_index) {
    tk_sched_req *r = s->running[running_index];
    for (int i = 0; i < r->n; i++) s->kv.release(s->kv.ctx, r->seqs[i]);
    tk_sched_remove_running(s, running_index);
    waiting_push_front(s, r);
    s->preemptions++;
}

/* Schedules the running requests' samples: pass 0 takes decode steps (one
 * token each, or a verification group), pass 1 the rest of chunked
 * prefills and recomputations.  When the pool is short, the newest running
 * request not yet in this plan is preempted; if that is the request
 * itself, it is preempted (or, if it already has tokens in the plan,
 * simply waits). */
static void schedule_running(tk_sched *s) {
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < s->n_running && s->budget > 0; i++) {
            tk_sched_req *r = s->running[i];
            for (int k = 0; k < r->n && s->budget > 0; k++) {
                tk_sched_seq *q = r->seqs[k];
                if (q->done || q->slot < 0) continue;
                int todo = q->n_tokens - q->n_computed;
                if (todo <= 0 || (pass == 0) != (todo == 1)) continue;
                int added;
                while ((added = pass == 0 && q->n_draft > 0 ? add_verify_tokens(s, q, s->budget)
                                                           : add_tokens(s, q, s->budget)) < 0) {
                    int victim = s->n_running - 1;
                    if (victim == i || in_plan(s, s->running[victim])) break;
                    preempt(s, victim);
                }
                if (added < 0) {
                    if (!in_plan(s, r)) {
                        preempt(s, i);
                        i--;
                    }
                    break;
                }
                s->budget -= added;
            }
        }
    }
}

/* Slots a request needs while resident: each unfinished sample (pending
 * forks included, so that forking never fails). */
static int slots_needed(const tk_sched_req *r) { return r->n - r->n_done; }

/* Slots free for a new request: those no one holds, less those promised to
 * the pending forks of running requests (they take theirs when sample 0's
 * prefill ends). */
static int slots_free(tk_sched *s) {
    int n = s->kv.free_slots(s->kv.ctx);
    for (int i = 0; i < s->n_running; i++)
        for (int k = 0; k < s->running[i]->n; k++) {
            const tk_sched_seq *q = s->running[i]->seqs[k];
            n -= q->pending_fork && !q->done;
        }
    return n;
}

/* Admits waiting requests in order while slots, budget and blocks allow;
 * never lets a later request overtake the head of the queue. */
static void admit_waiting(tk_sched *s) {
    while (s->waiting_head && s->budget > 0 && s->n_running < s->running_cap) {
        tk_sched_req *r = s->waiting_head;
        if (slots_needed(r) > slots_free(s)) break;
        int first_chunk = s->n_plan, first_tokens = s->n_plan_tokens, used = 0, ok = 1;
        for (int k = 0; k < r->n && ok; k++) {
            tk_sched_seq *q = r->seqs[k];
            if (q->done || q->pending_fork) continue;
            if (s->kv.place(s->kv.ctx, q)) {
                ok = 0;
            } else if (s->budget - used > 0) {
                int added = add_tokens(s, q, s->budget - used);
                if (added < 0) ok = 0;
                else used += added;
            }
        }
        if (!ok) {
            /* the pool cannot take it now: undo and wait */
            for (int k = 0; k < r->n; k++) s->kv.release(s->kv.ctx, r->seqs[k]);
            s->n_plan = first_chunk;
            s->n_plan_tokens = first_tokens;
            break;
        }
        s->budget -= used;
        s->waiting_head = r->next;
        if (!s->waiting_head) s->waiting_tail = NULL;
        r->next = NULL;
        s->running[s->n_running++] = r;
    }
}

int tk_sched_plan(tk_sched *s) {
    s->n_plan = 0;
    s->n_plan_tokens = 0;
    s->budget = s->max_batch_tokens;
    s->draft_rows_left = s->draft_rows;
    schedule_running(s);
    admit_waiting(s);
    return s->n_plan_tokens;
}
