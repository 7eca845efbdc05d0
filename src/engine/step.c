/* The step loop of continuous batching.  One step:
 *   take   newly submitted requests and cancellations (under the mutex);
 *   propose  drafts for speculating samples (speculate.c);
 *   plan   a batch: decode tokens, verification groups, prefill chunks,
 *          preemption and admission (src/sched, the policy);
 *   forward  the batch through tk_engine_decode (the one way into the model);
 *   commit   tokens: verify drafts, sample, emit events (output.c),
 *          register full blocks in the prefix cache, release blocks that
 *          left a sliding window;
 *   publish  metrics.
 * Requests join and leave between any two steps. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* ---- the scheduler's view of the KV cache ---- */

static int kv_free_slots(void *ctx) {
    const tk_engine *e = ctx;
    int n = 0;
    for (int i = 0; i < e->max_seqs; i++) n += e->seq_ptrs[i] == NULL;
    return n;
}

/* Puts a sample into a fresh slot, reusing cached prefix blocks. */
static int kv_place(void *ctx, tk_sched_seq *q) {
    tk_engine *e = ctx;
    tk_sample_state *ss = tk_sample_of(q);
    tk_err err;
    int slot = tk_engine_seq_new(e, &err);
    if (slot < 0) return -1;
    q->slot = slot;
    /* at least the last token is recomputed: it produces the logits */
    int max_blocks = (q->n_tokens - 1) / e->kv.block_size;
    int got = tk_kv_seq_match_prefix(&e->kv, &e->seqs[slot], ss->tokens, max_blocks);
    q->n_computed = got * e->kv.block_size;
    if (ss->n_generated == 0) {
        ss->n_cached = q->n_computed;
        e->batcher.stats.prefix_query_tokens += (uint64_t)q->n_tokens;
        e->batcher.stats.prefix_hit_tokens += (uint64_t)q->n_computed;
    }
    return 0;
}

static void kv_release(void *ctx, tk_sched_seq *q) { tk_step_release_sample(ctx, tk_sample_of(q)); }

static int kv_blocks_needed(void *ctx, const tk_sched_seq *q, int from, int to) {
    const tk_engine *e = ctx;
    return tk_kv_seq_blocks_needed(&e->kv, &e->seqs[q->slot], from, to);
}

static int kv_available(void *ctx) { return tk_kv_available(&((const tk_engine *)ctx)->kv); }

static int kv_reserve(void *ctx, tk_sched_seq *q, int from, int to) {
    tk_engine *e = ctx;
    tk_kv_seq *seq = &e->seqs[q->slot];
    tk_err err;
    return tk_kv_seq_reserve(&e->kv, seq, to, &err) || tk_kv_seq_prepare_write(&e->kv, seq, from, to, &err) ? -1
                                                                                                            : 0;
}

const tk_sched_kv tk_step_kv_ops = {
    .free_slots = kv_free_slots, .place = kv_place, .release = kv_release,
    .blocks_needed = kv_blocks_needed, .available = kv_available, .reserve = kv_reserve,
};

void tk_step_release_sample(tk_engine *e, tk_sample_state *ss) {
    if (ss->seq.slot >= 0) tk_engine_seq_free(e, ss->seq.slot);
    if (ss->draft_slot >= 0 && e->draft) tk_engine_seq_free(e->draft, ss->draft_slot);
    ss->draft_slot = -1;
    ss->draft_computed = 0;
    ss->seq.n_draft = 0;
    ss->seq.slot = -1;
    ss->seq.n_computed = 0;
}

/* ---- take: submissions and cancellations ---- */

static void request_finished(tk_engine *e, tk_request *r) {
    tk_batcher *b = &e->batcher;
    b->stats.requests_finished++;
    pthread_mutex_lock(&b->mu);
    b->n_live--;
    pthread_mutex_unlock(&b->mu);
    tk_request_free(e, r);
}

static void finish_if_done(tk_engine *e, int running_index) {
    tk_sched *s = &e->batcher.sched;
    tk_sched_req *r = s->running[running_index];
    if (r->n_done < r->n) return;
    tk_sched_remove_running(s, running_index);
    request_finished(e, tk_request_of(r));
}

static void cancel_request(tk_engine *e, tk_request *r) {
    for (int i = 0; i < r->n; i++) tk_output_finish(e, &r->samples[i], "cancelled", false);
}

static void cancel(tk_engine *e, uint64_t id) {
    tk_sched *s = &e->batcher.sched;
    for (int i = 0; i < s->n_running; i++)
        if (tk_request_of(s->running[i])->id == id) {
            cancel_request(e, tk_request_of(s->running[i]));
            finish_if_done(e, i);
            return;
        }
    for (tk_sched_req *w = s->waiting_head; w; w = w->next)
        if (tk_request_of(w)->id == id) {
            tk_sched_remove_waiting(s, w);
            cancel_request(e, tk_request_of(w));
            request_finished(e, tk_request_of(w));
            return;
        }
}

static void take_submissions(tk_engine *e) {
    tk_batcher *b = &e->batcher;
    pthread_mutex_lock(&b->mu);
    tk_request *incoming = b->incoming_head;
    b->incoming_head = b->incoming_tail = NULL;
    b->n_incoming = 0;
    uint64_t ids[64];
    int n = b->n_cancel < 64 ? b->n_cancel : 64;
    if (n > 0) {
        memcpy(ids, b->cancel_ids, sizeof(uint64_t) * (size_t)n);
        memmove(b->cancel_ids, b->cancel_ids + n, sizeof(uint64_t) * (size_t)(b->n_cancel - n));
        b->n_cancel -= n;
    }
    pthread_mutex_unlock(&b->mu);
    for (tk_request *r = incoming, *next; r; r = next) {
        next = r->next;
        tk_sched_enqueue(&b->sched, &r->sched);
    }
    for (int c = 0; c < n; c++) cancel(e, ids[c]);
}

/* ---- forward ---- */

/* Turns the plan into a batch: every position of a chunk in order; logits
 * at every position of a verification group, else at the last position of
 * a chunk that ends at the last committed token. */
static int build_batch(tk_engine *e, int *n_rows) {
    tk_batcher *b = &e->batcher;
    int n = 0, rows = 0;
    for (int c = 0; c < b->sched.n_plan; c++) {
        const tk_sched_chunk *ch = &b->sched.plan[c];
        const tk_sample_state *ss = tk_sample_of(ch->seq);
        for (int pos = ch->from; pos < ch->to; pos++, n++) {
            b->batch_token[n] = ss->tokens[pos];
            b->batch_pos[n] = pos;
            b->batch_seq[n] = ch->seq->slot;
            b->batch_logits[n] = ch->verify || (pos == ch->to - 1 && ch->to == ch->seq->n_tokens);
            rows += b->batch_logits[n];
        }
    }
    *n_rows = rows;
    return n;
}

/* ---- commit ---- */

/* Forks the pending samples of r from sample 0 (whose prefill just ended). */
static void fork_pending(tk_engine *e, tk_request *r) {
    tk_sample_state *src = &r->samples[0];
    for (int i = 1; i < r->n; i++) {
        tk_sample_state *ss = &r->samples[i];
        if (!ss->seq.pending_fork) continue;
        ss->seq.pending_fork = false;
        tk_err err;
        int slot = tk_engine_seq_new(e, &err);
        /* slots were counted at admission, so this cannot fail */
        if (slot < 0) continue;
        ss->seq.slot = slot;
        tk_kv_seq_fork(&e->kv, &e->seqs[src->seq.slot], &e->seqs[slot], &err);
        ss->seq.n_computed = src->seq.n_computed;
        ss->n_cached = src->n_cached;
    }
}

/* After the forward pass: advance each planned sample, register its full
 * blocks in the prefix cache, and sample where logits were produced. */
static void commit_plan(tk_engine *e) {
    tk_batcher *b = &e->batcher;
    double now = tk_clock_seconds(TK_CLOCK_WALL);
    int nv = e->model.hp.n_vocab, row = 0, entry = 0;
    for (int c = 0; c < b->sched.n_plan; c++) {
        const tk_sched_chunk *ch = &b->sched.plan[c];
        tk_sample_state *ss = tk_sample_of(ch->seq);
        tk_request *r = ss->req;
        const float *lg = b->logits + (size_t)row * nv;
        entry += ch->to - ch->from;
        if (ch->verify) {
            tk_spec_verify(e, ss, ch->to - ch->from, lg, now);
            row += ch->to - ch->from;
            continue;
        }
        ss->seq.n_computed = ch->to;
        if (ch->from < r->p.n_prompt)
            b->stats.prompt_tokens += (uint64_t)((ch->to < r->p.n_prompt ? ch->to : r->p.n_prompt) - ch->from);
        if (ss->seq.slot >= 0) tk_kv_seq_register_prefix(&e->kv, &e->seqs[ss->seq.slot], ss->tokens, ch->to);
        if (!b->batch_logits[entry - 1]) continue;
        row++;
        if (ss->index == 0 && ss->n_generated == 0 && r->n > 1) {
            /* end of the shared prompt: the other samples fork from here
             * and each samples its first token from the same logits */
            fork_pending(e, r);
            for (int k = 0; k < r->n; k++) {
                tk_sample_state *t = &r->samples[k];
                if (!t->seq.done && t->n_generated == 0 && t->seq.slot >= 0) tk_output_sample(e, t, lg, now);
            }
        } else if (!ss->seq.done) {
            if (ss->spec_mode != TK_SPEC_OFF && ss->n_generated > 0) {
                /* a speculating sample's step without drafts: a pass too */
                ss->spec_passes++;
                b->stats.spec_target_passes++;
                b->stats.spec_tokens++;
            }
            tk_output_sample(e, ss, lg, now);
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
    tk_sched *s = &e->batcher.sched;
    int wd = e->draft ? e->draft->kv_window : 0;
    if (e->kv_window <= 0 && wd <= 0) return;
    for (int i = 0; i < s->n_running; i++) {
        tk_request *r = tk_request_of(s->running[i]);
        for (int k = 0; k < r->n; k++) {
            tk_sample_state *ss = &r->samples[k];
            if (e->kv_window > 0 && ss->seq.slot >= 0)
                tk_kv_seq_drop_before(&e->kv, &e->seqs[ss->seq.slot], ss->seq.n_computed - e->kv_window + 1);
            if (wd > 0 && ss->draft_slot >= 0) {
                int next = ss->draft_computed < ss->seq.n_tokens ? ss->draft_computed : ss->seq.n_tokens;
                tk_kv_seq_drop_before(&e->draft->kv, &e->draft->seqs[ss->draft_slot], next - wd + 1);
            }
        }
    }
}

/* ---- publish ---- */

static int publish(tk_engine *e) {
    tk_batcher *b = &e->batcher;
    b->stats.requests_running = b->sched.n_running;
    b->stats.preemptions = b->sched.preemptions;
    int waiting = tk_sched_n_waiting(&b->sched);
    pthread_mutex_lock(&b->mu);
    b->stats.requests_waiting = waiting + b->n_incoming;
    b->stats.kv_blocks_total = e->kv.n_blocks;
    b->stats.kv_blocks_used = tk_kv_used(&e->kv);
    b->stats.kv_blocks_cached = e->kv.n_cached;
    b->metrics = b->stats;
    e->cost_pub = e->cost;
    int live = b->n_live;
    pthread_mutex_unlock(&b->mu);
    return live;
}

int tk_engine_step(tk_engine *e, tk_err *err) {
    tk_batcher *b = &e->batcher;
    take_submissions(e);
    if (tk_spec_propose(e, err)) return -1;
    if (tk_sched_plan(&b->sched) > 0) {
        int rows, n = build_batch(e, &rows);
        if (rows > b->logits_rows) /* cannot happen: one row per sample plus the draft budget */
            return tk_err_set(err, "internal: %d logits rows in a step, room for %d", rows, b->logits_rows);
        tk_batch batch = {n, b->batch_token, b->batch_pos, b->batch_seq, b->batch_logits};
        double t0 = tk_spec_pass_clock(e);
        if (tk_engine_decode(e, &batch, b->logits, err)) return -1;
        tk_spec_cost_observe(&e->cost, 0, n, tk_spec_pass_clock(e) - t0);
        commit_plan(e);
        release_out_of_window(e);
    }
    for (int i = b->sched.n_running - 1; i >= 0; i--) finish_if_done(e, i);
    return publish(e);
}
