/* The scheduling policy alone (src/sched), without a model: a fake table of
 * sequence slots and a fake block pool stand in for the engine's KV cache.
 * Checks the order of a plan (decode steps before prefill chunks, oldest
 * first, first come first served), the token budget, chunked prefill,
 * preemption of the newest request and its recomputation, no overtaking at
 * the head of the queue, slots for n > 1, verification groups and their
 * limits, and that every block and slot comes back. */
#include "../src/sched/sched.h"
#include "tk_test.h"

#define BS 4        /* tokens per block */
#define MAX_SLOTS 8

typedef struct fake_kv {
    int n_slots;
    bool slot_used[MAX_SLOTS];
    int held[MAX_SLOTS];   /* blocks each slot holds */
    int n_blocks, n_free;
    int prefix_hit;        /* tokens place() reports as cached (a multiple of BS) */
} fake_kv;

static int fk_free_slots(void *ctx) {
    fake_kv *k = ctx;
    int n = 0;
    for (int i = 0; i < k->n_slots; i++) n += !k->slot_used[i];
    return n;
}

static int fk_place(void *ctx, tk_sched_seq *q) {
    fake_kv *k = ctx;
    for (int i = 0; i < k->n_slots; i++)
        if (!k->slot_used[i]) {
            k->slot_used[i] = true;
            k->held[i] = 0;
            q->slot = i;
            int hit = k->prefix_hit < q->n_tokens - 1 ? k->prefix_hit : 0;
            q->n_computed = hit;
            /* cached blocks are held too (taken from the pool here) */
            k->held[i] = hit / BS;
            k->n_free -= hit / BS;
            return 0;
        }
    return -1;
}

static void fk_release(void *ctx, tk_sched_seq *q) {
    fake_kv *k = ctx;
    if (q->slot < 0) return;
    k->n_free += k->held[q->slot];
    k->held[q->slot] = 0;
    k->slot_used[q->slot] = false;
    q->slot = -1;
    q->n_computed = 0;
    q->n_draft = 0;
}

static int fk_blocks_needed(void *ctx, const tk_sched_seq *q, int from, int to) {
    (void)from;
    fake_kv *k = ctx;
    int need = (to + BS - 1) / BS - k->held[q->slot];
    return need > 0 ? need : 0;
}

static int fk_available(void *ctx) { return ((fake_kv *)ctx)->n_free; }

static int fk_reserve(void *ctx, tk_sched_seq *q, int from, int to) {
    fake_kv *k = ctx;
    int need = fk_blocks_needed(ctx, q, from, to);
    if (need > k->n_free) return -1;
    k->n_free -= need;
    k->held[q->slot] += need;
    return 0;
}

typedef struct fixture {
    fake_kv kv;
    tk_sched s;
    tk_sched_req req[8];
    tk_sched_seq seq[8][4];
    tk_sched_seq *ptr[8][4];
} fixture;

static void setup(fixture *f, int n_slots, int n_blocks, int batch, int draft_rows) {
    memset(f, 0, sizeof *f);
    f->kv.n_slots = n_slots;
    f->kv.n_blocks = f->kv.n_free = n_blocks;
    tk_sched_kv ops = {&f->kv, fk_free_slots, fk_place, fk_release, fk_blocks_needed, fk_available, fk_reserve};
    tk_err err;
    if (tk_sched_init(&f->s, &ops, n_slots, batch, draft_rows, &err)) {
        fprintf(stderr, "init: %s\n", err.msg);
        exit(1);
    }
}

/* Request i with n samples and a prompt of len tokens, queued. */
static tk_sched_req *add_request(fixture *f, int i, int n, int len) {
    tk_sched_req *r = &f->req[i];
    r->n = n;
    r->seqs = f->ptr[i];
    for (int k = 0; k < n; k++) {
        f->seq[i][k] = (tk_sched_seq){.req = r, .slot = -1, .n_tokens = len, .pending_fork = k > 0};
        f->ptr[i][k] = &f->seq[i][k];
    }
    tk_sched_enqueue(&f->s, r);
    return r;
}

/* What the engine does after the pass: the planned positions are computed,
 * and a chunk that reached the last token yields one new token (drafts of a
 * verification group: all accepted, plus one). */
static void run_plan(fixture *f) {
    for (int c = 0; c < f->s.n_plan; c++) {
        tk_sched_chunk *ch = &f->s.plan[c];
        tk_sched_seq *q = ch->seq;
        q->n_computed = ch->to;
        if (ch->verify) q->n_tokens += q->n_draft;
        if (ch->to >= q->n_tokens) q->n_tokens++;
        q->n_draft = 0;
    }
}

static const tk_sched_chunk *chunk_of(const fixture *f, const tk_sched_seq *q) {
    for (int c = 0; c < f->s.n_plan; c++)
        if (f->s.plan[c].seq == q) return &f->s.plan[c];
    return NULL;
}

/* Finishes a request when each sample has `len` tokens. */
static void finish_at(fixture *f, tk_sched_req *r, int len) {
    for (int k = 0; k < r->n; k++)
        if (!r->seqs[k]->done && r->seqs[k]->n_tokens >= len) {
            fk_release(&f->kv, r->seqs[k]);
            r->seqs[k]->done = true;
            r->n_done++;
        }
    for (int i = 0; i < f->s.n_running; i++)
        if (f->s.running[i] == r && r->n_done == r->n) tk_sched_remove_running(&f->s, i);
}

static void test_order_and_budget(void) {
    fixture f;
    setup(&f, 4, 64, 16, 0);
    tk_sched_req *a = add_request(&f, 0, 1, 10), *b = add_request(&f, 1, 1, 10), *c = add_request(&f, 2, 1, 10);
    /* first come first served under the 16-token budget: A whole, B chunked */
    CHECK(tk_sched_plan(&f.s) == 16, "tokens %d", f.s.n_plan_tokens);
    CHECK(f.s.n_plan == 2 && f.s.plan[0].seq == a->seqs[0] && f.s.plan[0].from == 0 && f.s.plan[0].to == 10,
          "A's prompt first");
    CHECK(f.s.plan[1].seq == b->seqs[0] && f.s.plan[1].from == 0 && f.s.plan[1].to == 6, "B chunked to 6");
    CHECK(f.s.n_running == 2 && f.s.waiting_head == c, "C waits (no budget left)");
    run_plan(&f);
    /* next: A's decode step first, then B's rest, then C */
    CHECK(tk_sched_plan(&f.s) == 15, "tokens %d", f.s.n_plan_tokens);
    CHECK(f.s.plan[0].seq == a->seqs[0] && f.s.plan[0].from == 10 && f.s.plan[0].to == 11, "A decodes first");
    CHECK(f.s.plan[1].seq == b->seqs[0] && f.s.plan[1].from == 6 && f.s.plan[1].to == 10, "B's prefill rest");
    CHECK(f.s.n_plan == 3 && f.s.plan[2].seq == c->seqs[0] && f.s.plan[2].from == 0 && f.s.plan[2].to == 10,
          "C admitted with its whole prompt (11 tokens left)");
    CHECK(f.s.n_running == 3 && !f.s.waiting_head, "all running");
    /* decode steps never wait behind prefills: with one decode token left
     * to each of A and B, both are planned before C's remaining prompt */
    run_plan(&f);
    tk_sched_plan(&f.s);
    CHECK(f.s.plan[0].seq == a->seqs[0] && f.s.plan[1].seq == b->seqs[0] && f.s.plan[0].to - f.s.plan[0].from == 1 &&
              f.s.plan[1].to - f.s.plan[1].from == 1,
          "decode steps of A and B first");
    for (int step = 0; step < 40 && f.s.n_running; step++) {
        run_plan(&f);
        finish_at(&f, a, 14);
        finish_at(&f, b, 14);
        finish_at(&f, c, 14);
        tk_sched_plan(&f.s);
    }
    CHECK(f.s.n_running == 0 && !f.s.waiting_head, "all finished");
    CHECK(f.kv.n_free == f.kv.n_blocks && fk_free_slots(&f.kv) == 4, "blocks %d/%d and slots back", f.kv.n_free,
          f.kv.n_blocks);
    CHECK(f.s.preemptions == 0, "no preemption with room");
    tk_sched_free(&f.s);
}

static void test_preemption(void) {
    fixture f;
    /* 6 blocks of 4 tokens: two prompts of 8 fit (2 blocks each), then
     * decoding needs a third block each and only two are left */
    setup(&f, 4, 6, 64, 0);
    tk_sched_req *a = add_request(&f, 0, 1, 8), *b = add_request(&f, 1, 1, 8);
    tk_sched_plan(&f.s);
    CHECK(f.s.n_running == 2 && f.kv.n_free == 2, "both admitted, %d blocks free", f.kv.n_free);
    run_plan(&f); /* each has 9 tokens now */
    tk_sched_plan(&f.s);
    CHECK(f.s.n_plan == 2 && f.kv.n_free == 0, "both decode into the last two blocks");
    run_plan(&f); /* 10 tokens each: blocks hold 12 */
    for (int i = 0; i < 2; i++) {
        tk_sched_plan(&f.s);
        run_plan(&f);
    }
    tk_sched_plan(&f.s);
    run_plan(&f);
    /* 13 tokens each: the next decode needs a block each, none is free */
    tk_sched_plan(&f.s);
    CHECK(f.s.preemptions == 1, "preemptions %llu", (unsigned long long)f.s.preemptions);
    CHECK(f.s.n_running == 1 && f.s.running[0] == a, "the newest (B) was preempted");
    CHECK(f.s.waiting_head == b && b->seqs[0]->slot < 0 && b->seqs[0]->n_computed == 0 &&
              b->seqs[0]->n_tokens == 13,
          "B waits at the front, blocks freed, tokens kept");
    CHECK(chunk_of(&f, a->seqs[0]) != NULL, "A goes on");
    run_plan(&f);
    finish_at(&f, a, 14);
    /* B comes back and recomputes its 13 tokens from the start */
    tk_sched_plan(&f.s);
    const tk_sched_chunk *ch = chunk_of(&f, b->seqs[0]);
    CHECK(ch && ch->from == 0 && ch->to == 13 && f.s.n_running == 1, "B recomputed from 0");
    run_plan(&f);
    finish_at(&f, b, 14);
    CHECK(f.kv.n_free == f.kv.n_blocks && fk_free_slots(&f.kv) == 4, "blocks and slots back");
    tk_sched_free(&f.s);
}

static void test_head_of_queue(void) {
    fixture f;
    setup(&f, 4, 8, 64, 0);
    tk_sched_req *a = add_request(&f, 0, 1, 20); /* 5 blocks */
    tk_sched_plan(&f.s);
    run_plan(&f);
    tk_sched_req *big = add_request(&f, 1, 1, 16), *small = add_request(&f, 2, 1, 2);
    tk_sched_plan(&f.s);
    /* A decodes into its 6th block: 2 free, big needs 4: it waits, and the
     * small one behind it may not overtake */
    CHECK(f.s.n_running == 1 && f.s.waiting_head == big && big->next == small, "big waits, small behind it");
    CHECK(f.kv.n_free == 2 && fk_free_slots(&f.kv) == 3, "big's failed admission was undone (%d free)",
          f.kv.n_free);
    run_plan(&f);
    finish_at(&f, a, 21);
    tk_sched_plan(&f.s);
    CHECK(f.s.n_running == 2 && f.s.running[0] == big && f.s.running[1] == small, "then both, in order");
    tk_sched_free(&f.s);
    (void)a;
}

static void test_samples(void) {
    fixture f;
    setup(&f, 3, 32, 64, 0);
    tk_sched_req *a = add_request(&f, 0, 2, 6), *b = add_request(&f, 1, 2, 6);
    tk_sched_plan(&f.s);
    /* A's two samples need two of the three slots; only sample 0 prefills
     * (the other forks from it later); B needs two more: it waits */
    CHECK(f.s.n_running == 1 && f.s.n_plan == 1 && f.s.plan[0].seq == a->seqs[0], "A alone, sample 0 prefills");
    CHECK(f.s.waiting_head == b, "B waits for slots");
    tk_sched_free(&f.s);
}

static void test_verify_groups(void) {
    fixture f;
    setup(&f, 4, 64, 16, 6);
    tk_sched_req *a = add_request(&f, 0, 1, 5), *b = add_request(&f, 1, 1, 5);
    tk_sched_plan(&f.s);
    run_plan(&f); /* both in the decode phase */
    a->seqs[0]->n_draft = 4;
    b->seqs[0]->n_draft = 4;
    tk_sched_plan(&f.s);
    const tk_sched_chunk *ca = chunk_of(&f, a->seqs[0]), *cb = chunk_of(&f, b->seqs[0]);
    CHECK(ca && ca->verify && ca->from == 5 && ca->to == 10 && a->seqs[0]->n_draft == 4,
          "A: last token + 4 drafts");
    /* 6 draft rows per step: B gets the 2 that are left */
    CHECK(cb && cb->verify && cb->to - cb->from == 3 && b->seqs[0]->n_draft == 2, "B: 2 drafts (rows)");
    tk_sched_free(&f.s);

    /* the budget bounds a group: 8 tokens, so the last token + 7 drafts */
    setup(&f, 4, 64, 8, 32);
    a = add_request(&f, 0, 1, 5);
    tk_sched_plan(&f.s);
    run_plan(&f);
    a->seqs[0]->n_draft = 12;
    tk_sched_plan(&f.s);
    ca = chunk_of(&f, a->seqs[0]);
    CHECK(ca && ca->verify && ca->to - ca->from == 8 && a->seqs[0]->n_draft == 7, "7 drafts fit the budget");
    tk_sched_free(&f.s);

    /* drafts never make the scheduler preempt: their extra blocks must
     * leave one block per running request */
    setup(&f, 4, 6, 64, 32);
    a = add_request(&f, 0, 1, 4);
    b = add_request(&f, 1, 1, 4);
    tk_sched_plan(&f.s); /* one block each, four free */
    run_plan(&f);        /* 5 tokens: the next position opens a second block each */
    a->seqs[0]->n_draft = 8;
    tk_sched_plan(&f.s);
    ca = chunk_of(&f, a->seqs[0]);
    CHECK(ca && !ca->verify && ca->to - ca->from == 1 && a->seqs[0]->n_draft == 0,
          "A decodes without drafts (the drafts' blocks would starve B)");
    CHECK(f.s.preemptions == 0, "no preemption");
    tk_sched_free(&f.s);
}

int main(void) {
    test_order_and_budget();
    test_preemption();
    test_head_of_queue();
    test_samples();
    test_verify_groups();
    TK_TEST_END();
}
