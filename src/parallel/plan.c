/* Sending and receiving batch plans (plan.h).  A plan is two broadcasts
 * from rank 0: a header of HEADER ints, then its payload:
 *   token[n] pos[n] seq[n] wants_logits[n] copies[2 * n_copies]
 * (the header: command, counts, whether the outputs are hidden states
 * rather than logits, payload length)
 *   per sequence in the batch: id len n_dropped n_blocks blocks[n_blocks] */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

enum { CMD_STOP = 0, CMD_FORWARD = 1 };
enum { H_CMD, H_TOKENS, H_COPIES, H_SEQS, H_HIDDEN, H_LEN, HEADER };
enum { SEQ_FIELDS = 4 };

static void record_copy(void *ctx, int src, int dst) {
    tk_tp_plan *p = ctx;
    if (p->n_copies >= p->pool_blocks) {
        p->copies_lost = true;
        return;
    }
    p->copies[2 * p->n_copies] = src;
    p->copies[2 * p->n_copies + 1] = dst;
    p->n_copies++;
}

int tk_tp_plan_init(tk_tp_plan *p, tk_tp *tp, tk_kv_pool *kv, int max_tokens, int max_seqs, int max_blocks,
                    tk_err *err) {
    memset(p, 0, sizeof *p);
    p->tp = tp;
    p->max_tokens = max_tokens;
    p->max_seqs = max_seqs;
    p->max_blocks = max_blocks;
    p->pool_blocks = kv->n_blocks;
    p->cap = HEADER + 4 * (size_t)max_tokens + 2 * (size_t)kv->n_blocks +
             (size_t)max_seqs * (SEQ_FIELDS + (size_t)max_blocks);
    if (p->cap > (size_t)INT32_MAX) return tk_err_set(err, "tensor parallelism: a batch plan would be too large");
    p->buf = malloc(sizeof(int32_t) * p->cap);
    p->listed = calloc((size_t)max_seqs, sizeof(bool));
    if (!p->buf || !p->listed) return tk_err_set(err, "out of memory for the batch plan");
    if (tk_tp_rank(tp) == 0) {
        p->copies = malloc(sizeof(int32_t) * 2 * (size_t)kv->n_blocks);
        if (!p->copies) return tk_err_set(err, "out of memory for the batch plan");
        kv->on_copy = record_copy;
        kv->on_copy_ctx = p;
        return 0;
    }
    p->flags = malloc((size_t)max_tokens);
    p->seqs = calloc((size_t)max_seqs, sizeof(tk_kv_seq));
    p->seq_ptrs = calloc((size_t)max_seqs, sizeof(tk_kv_seq *));
    p->tables = malloc(sizeof(int) * (size_t)max_seqs * (size_t)max_blocks);
    if (!p->flags || !p->seqs || !p->seq_ptrs || !p->tables)
        return tk_err_set(err, "out of memory for the batch plan");
    return 0;
}

void tk_tp_plan_free(tk_tp_plan *p, tk_kv_pool *kv) {
    if (kv->on_copy_ctx == p) {
        kv->on_copy = NULL;
        kv->on_copy_ctx = NULL;
    }
    free(p->buf);
    free(p->listed);
    free(p->copies);
    free(p->flags);
    free(p->seqs);
    free(p->seq_ptrs);
    free(p->tables);
    memset(p, 0, sizeof *p);
}

static int broadcast(tk_tp_plan *p, tk_err *err) {
    if (tk_tp_bcast(p->tp, p->buf, HEADER, true, err)) return -1;
    return p->buf[H_LEN] ? tk_tp_bcast(p->tp, p->buf + HEADER, p->buf[H_LEN], true, err) : 0;
}

int tk_tp_plan_send(tk_tp_plan *p, const tk_batch *b, tk_kv_seq *const *seqs, bool hidden_out, tk_err *err) {
    if (p->copies_lost)
        return tk_err_set(err, "tensor parallelism: more copy-on-write copies in one step than the pool has blocks");
    const int n = b->n_tokens;
    if (n <= 0 || n > p->max_tokens)
        return tk_err_set(err, "tensor parallelism: a batch of %d tokens (at most %d)", n, p->max_tokens);
    int32_t *w = p->buf + HEADER;
    memcpy(w, b->token, sizeof(int32_t) * (size_t)n);
    memcpy(w + n, b->pos, sizeof(int32_t) * (size_t)n);
    memcpy(w + 2 * n, b->seq, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) w[3 * n + i] = b->logits[i] != 0;
    w += 4 * n;
    memcpy(w, p->copies, sizeof(int32_t) * 2 * (size_t)p->n_copies);
    w += 2 * p->n_copies;
    int n_seqs = 0;
    for (int i = 0; i < n; i++) {
        int id = b->seq[i];
        if (p->listed[id]) continue;
        const tk_kv_seq *s = seqs[id];
        if (s->n_blocks > p->max_blocks) {
            memset(p->listed, 0, sizeof(bool) * (size_t)p->max_seqs);
            return tk_err_set(err, "tensor parallelism: sequence %d has %d KV blocks (at most %d)", id, s->n_blocks,
                              p->max_blocks);
        }
        p->listed[id] = true;
        n_seqs++;
        *w++ = id;
        *w++ = s->len;
        *w++ = s->n_dropped;
        *w++ = s->n_blocks;
        memcpy(w, s->blocks, sizeof(int32_t) * (size_t)s->n_blocks);
        w += s->n_blocks;
    }
    memset(p->listed, 0, sizeof(bool) * (size_t)p->max_seqs);
    p->buf[H_CMD] = CMD_FORWARD;
    p->buf[H_TOKENS] = n;
    p->buf[H_COPIES] = p->n_copies;
    p->buf[H_SEQS] = n_seqs;
    p->buf[H_HIDDEN] = hidden_out;
    p->buf[H_LEN] = (int32_t)(w - (p->buf + HEADER));
    p->n_copies = 0;
    p->steps++;
    return broadcast(p, err);
}

int tk_tp_plan_stop(tk_tp_plan *p, tk_err *err) {
    memset(p->buf, 0, sizeof(int32_t) * HEADER);
    p->buf[H_CMD] = CMD_STOP;
    return broadcast(p, err);
}

static int bad(tk_err *err, const char *what) {
    return tk_err_set(err, "tensor parallelism: rank 0 sent a batch plan with %s", what);
}

/* The sequence entries of a received payload [r, end) into p->seqs. */
static int read_seqs(tk_tp_plan *p, const int32_t *r, const int32_t *end, int n_seqs, tk_err *err) {
    for (int k = 0; k < n_seqs; k++) {
        if (end - r < SEQ_FIELDS) return bad(err, "a truncated sequence entry");
        int id = r[0], len = r[1], dropped = r[2], nb = r[3];
        r += SEQ_FIELDS;
        if (id < 0 || id >= p->max_seqs || p->listed[id]) return bad(err, "an unknown or repeated sequence");
        if (nb < 0 || nb > p->max_blocks || end - r < nb) return bad(err, "a block table out of bounds");
        if (len < 0 || dropped < 0 || dropped > nb) return bad(err, "a sequence length out of bounds");
        int *table = p->tables + (size_t)id * p->max_blocks;
        for (int i = 0; i < nb; i++) {
            if (r[i] < -1 || r[i] >= p->pool_blocks) return bad(err, "a block id out of range");
            table[i] = r[i];
        }
        r += nb;
        p->seqs[id] = (tk_kv_seq){.blocks = table, .n_blocks = nb, .cap = p->max_blocks, .len = len,
                                  .n_dropped = dropped};
        p->seq_ptrs[id] = &p->seqs[id];
        p->listed[id] = true;
    }
    return r == end ? 0 : bad(err, "trailing data");
}

int tk_tp_plan_recv(tk_tp_plan *p, tk_kv_pool *kv, tk_batch *b, tk_err *err) {
    for (int i = 0; i < p->max_seqs; i++) p->seq_ptrs[i] = NULL;
    memset(p->listed, 0, sizeof(bool) * (size_t)p->max_seqs);
    if (tk_tp_bcast(p->tp, p->buf, HEADER, false, err)) return -1; /* idle until rank 0 has work */
    const int32_t *h = p->buf;
    if (h[H_CMD] == CMD_STOP) return 0;
    const int n = h[H_TOKENS], nc = h[H_COPIES];
    if (h[H_CMD] != CMD_FORWARD) return bad(err, "an unknown command");
    p->steps++;
    p->hidden_out = h[H_HIDDEN] != 0;
    if (n <= 0 || n > p->max_tokens) return bad(err, "a token count out of bounds");
    if (nc < 0 || nc > p->pool_blocks) return bad(err, "a copy count out of bounds");
    if (h[H_SEQS] < 0 || h[H_SEQS] > p->max_seqs) return bad(err, "a sequence count out of bounds");
    if (h[H_LEN] < 4 * n + 2 * nc || (size_t)h[H_LEN] > p->cap - HEADER) return bad(err, "a length out of bounds");
    if (tk_tp_bcast(p->tp, p->buf + HEADER, h[H_LEN], true, err)) return -1;
    int32_t *r = p->buf + HEADER;
    for (int i = 0; i < n; i++) p->flags[i] = r[3 * n + i] != 0;
    *b = (tk_batch){n, r, r + n, r + 2 * n, p->flags};
    const int32_t *c = r + 4 * n;
    for (int i = 0; i < nc; i++) {
        int src = c[2 * i], dst = c[2 * i + 1];
        if (src < 0 || src >= p->pool_blocks || dst < 0 || dst >= p->pool_blocks || src == dst)
            return bad(err, "a block copy out of range");
        tk_kv_copy_block(kv, src, dst);
    }
    if (read_seqs(p, c + 2 * nc, r + h[H_LEN], h[H_SEQS], err)) return -1;
    for (int i = 0; i < n; i++)
        if (r[2 * n + i] < 0 || r[2 * n + i] >= p->max_seqs || !p->seq_ptrs[r[2 * n + i]])
            return bad(err, "a token of a sequence it does not describe");
    return 1;
}
