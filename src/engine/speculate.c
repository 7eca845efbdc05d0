/* Speculative decoding inside the step: before the batch is planned, every
 * speculating sample in the decode phase gets its drafts (prompt lookup,
 * or draft-model passes batched over all such samples); the plan then
 * carries its last token plus the drafts as one verification group; after
 * the pass the drafts are verified, the accepted ones and one token of the
 * model's own are committed, and rejected positions are cut from both KV
 * caches.  The algorithms (lookup, acceptance, cost model) are in src/spec. */
#include <string.h>

#include "engine_internal.h"

/* The clock for the cost model's pass times: with a pool of one thread,
 * the stepping thread's CPU time (on a shared machine, a pass descheduled
 * part-way would otherwise look several times dearer); with more threads,
 * the wall clock (the caller's CPU time would miss its helpers' work). */
double tk_spec_pass_clock(const tk_engine *e) {
    return tk_clock_seconds(tk_threadpool_size(e->pool) == 1 ? TK_CLOCK_THREAD_CPU : TK_CLOCK_WALL);
}

/* Draws the next draft of a drafting sample from the draft model's row:
 * the argmax (greedy) or a sample from its filtered distribution, kept as q. */
static int32_t draft_choose(tk_engine *e, tk_sample_state *ss, const float *logits) {
    float *row = e->batcher.row;
    int nv = e->model.hp.n_vocab, j = ss->seq.n_draft;
    memcpy(row, logits, sizeof(float) * (size_t)nv);
    int n_hist = ss->seq.n_tokens + j;
    if (!ss->q) return tk_sample(&ss->draft_sampler, row, ss->tokens, n_hist);
    float *q = ss->q + (size_t)j * nv;
    tk_sampler_dist(&ss->draft_sampler, row, ss->tokens, n_hist, q);
    int32_t t = tk_sampler_draw(&ss->draft_sampler, q, nv);
    return t < 0 ? tk_argmax(logits, nv) : t;
}

/* Runs the draft model for the samples in b->drafting: first the tokens
 * its cache lacks (the prompt on first use, otherwise the last one or two
 * committed tokens), then one draft per pass, all samples in shared
 * batches; each sample stops at draft_want drafts (or an end-of-generation
 * draft).  Drafts go to tokens[n_tokens ..]. */
static int draft_run(tk_engine *e, int n, tk_err *err) {
    tk_batcher *b = &e->batcher;
    tk_engine *d = e->draft;
    int nv = e->model.hp.n_vocab, cap = d->ws.max_tokens;
    for (int i = 0; i < n; i++) {
        tk_sample_state *ss = b->drafting[i];
        ss->seq.n_draft = 0;
        if (ss->draft_slot < 0) {
            ss->draft_slot = tk_engine_seq_new(d, err);
            if (ss->draft_slot < 0) return -1;
            ss->draft_computed = 0;
        }
    }
    for (;;) {
        int nb = 0;
        for (int i = 0; i < n && nb < cap; i++) {
            tk_sample_state *ss = b->drafting[i];
            int end = ss->seq.n_tokens + ss->seq.n_draft; /* feed tokens[draft_computed, end) */
            if (ss->seq.n_draft >= ss->draft_want || ss->draft_computed >= end) continue;
            int take = end - ss->draft_computed < cap - nb ? end - ss->draft_computed : cap - nb;
            for (int j = 0; j < take; j++, nb++) {
                b->draft_token[nb] = ss->tokens[ss->draft_computed + j];
                b->draft_pos[nb] = ss->draft_computed + j;
                b->draft_seq[nb] = ss->draft_slot;
                b->draft_wants_logits[nb] = ss->draft_computed + j == end - 1;
                b->draft_owner[nb] = ss;
            }
        }
        if (nb == 0) break;
        double t0 = tk_spec_pass_clock(e);
        tk_batch batch = {nb, b->draft_token, b->draft_pos, b->draft_seq, b->draft_wants_logits};
        if (tk_engine_decode(d, &batch, b->draft_logits, err)) return tk_err_wrap(err, "draft model");
        double dt = tk_spec_pass_clock(e) - t0;
        int row = 0;
        for (int k = 0; k < nb; k++) {
            tk_sample_state *ss = b->draft_owner[k];
            ss->draft_computed++;
            if (!b->draft_wants_logits[k]) continue;
            int32_t t = draft_choose(e, ss, b->draft_logits + (size_t)row++ * nv);
            ss->tokens[ss->seq.n_tokens + ss->seq.n_draft++] = t;
            /* nothing follows an end of generation */
            if (!ss->req->p.ignore_eos && e->tok && tk_tokenizer_is_eog(e->tok, t)) ss->draft_want = ss->seq.n_draft;
        }
        /* a drafting pass (one or two tokens per sequence), by sequences;
         * catch-up passes after a pause in drafting are prefill, and timing
         * them as drafting passes made c look several times too large */
        if (nb <= 2 * row) tk_spec_cost_observe(&e->cost, 1, row, dt);
    }
    return 0;
}

/* A constrained sample's drafts end before the first one its grammar
 * rejects: verification could never accept it or anything after it. */
static int grammar_cut(tk_engine *e, tk_sample_state *ss, tk_err *err) {
    tk_csample *cs = &ss->cs;
    if (!cs->cg || ss->seq.n_draft == 0) return 0;
    if (tk_gstate_copy(&cs->look, &cs->state, err)) return -1;
    bool eog = !ss->req->p.ignore_eos;
    for (int j = 0; j < ss->seq.n_draft; j++) {
        int rc = tk_csample_step(&e->constraints, cs, &cs->look, ss->tokens[ss->seq.n_tokens + j], eog, &cs->look, err);
        if (rc < 0) return -1;
        if (rc == 0) {
            ss->seq.n_draft = j;
            break;
        }
    }
    return 0;
}

int tk_spec_propose(tk_engine *e, tk_err *err) {
    tk_batcher *b = &e->batcher;
    /* measured costs for greedy requests; the fixed priors when sampling,
     * where the draft lengths steer the random stream */
    double c_meas, v_meas[TK_SPEC_MAX_DRAFT + 1], v_prior[TK_SPEC_MAX_DRAFT + 1];
    tk_spec_cost_table(&e->cost, &c_meas, v_meas, TK_SPEC_MAX_DRAFT);
    for (int k = 0; k <= TK_SPEC_MAX_DRAFT; k++) v_prior[k] = 1 + e->cost.v_prior * k;
    int n_drafting = 0;
    for (int i = 0; i < b->sched.n_running; i++) {
        tk_request *r = tk_request_of(b->sched.running[i]);
        for (int k = 0; k < r->n; k++) {
            tk_sample_state *ss = &r->samples[k];
            ss->seq.n_draft = 0;
            if (ss->seq.done || ss->seq.slot < 0 || ss->spec_mode == TK_SPEC_OFF) continue;
            /* the draft cache holds committed tokens only */
            if (ss->draft_slot >= 0 && ss->draft_computed > ss->seq.n_tokens) {
                ss->draft_computed = ss->seq.n_tokens;
                tk_kv_seq_truncate(&e->draft->kv, &e->draft->seqs[ss->draft_slot], ss->draft_computed);
            }
            /* decode phase, first token already out (it may fork samples) */
            if (ss->seq.n_tokens - ss->seq.n_computed != 1 || ss->n_generated == 0) continue;
            bool greedy = r->p.sampling.temperature == 0;
            double c = ss->spec_mode == TK_SPEC_NGRAM ? 0 : greedy ? c_meas : e->cost.c_prior;
            int want = tk_spec_rate_choose_k(&ss->rate, c, greedy ? v_meas : v_prior, ss->k_min, ss->k_max);
            want = tk_spec_rate_probe(&ss->rate, want); /* k = 0: a probe now and then */
            /* every accepted draft plus one more token must fit */
            int room = e->ctx_len - ss->seq.n_tokens - 1;
            if (r->p.max_tokens > 0 && r->p.max_tokens - ss->n_generated - 1 < room)
                room = r->p.max_tokens - ss->n_generated - 1;
            if (want > room) want = room;
            if (want <= 0) continue;
            if (ss->spec_mode == TK_SPEC_NGRAM) {
                ss->seq.n_draft = tk_spec_ngram_propose(ss->tokens, ss->seq.n_tokens, TK_SPEC_NGRAM_MAX,
                                                        TK_SPEC_NGRAM_MIN, want, ss->tokens + ss->seq.n_tokens);
                if (grammar_cut(e, ss, err)) return -1;
            } else {
                ss->draft_want = want;
                b->drafting[n_drafting++] = ss;
            }
        }
    }
    if (n_drafting && draft_run(e, n_drafting, err)) return -1;
    for (int i = 0; i < n_drafting; i++)
        if (grammar_cut(e, b->drafting[i], err)) return -1;
    return 0;
}

void tk_spec_verify(tk_engine *e, tk_sample_state *ss, int group_len, const float *rows, double now) {
    tk_batcher *b = &e->batcher;
    tk_engine_metrics *st = &b->stats;
    tk_request *r = ss->req;
    int nv = e->model.hp.n_vocab, k = group_len - 1, base = ss->seq.n_tokens;
    int32_t drafts[TK_SPEC_MAX_DRAFT];
    memcpy(drafts, ss->tokens + base, sizeof(int32_t) * (size_t)k);
    bool greedy = r->p.sampling.temperature == 0;
    /* constrained: each row is masked by the grammar state after the drafts
     * before it (cs->look, advanced as drafts are accepted); the committed
     * state moves only as tokens are committed below, so rejected drafts
     * need no rollback */
    tk_csample *cs = &ss->cs;
    tk_constraint_cache *cc = &e->constraints;
    bool eog = !r->p.ignore_eos;
    tk_err err;
    bool failed = cs->cg && tk_gstate_copy(&cs->look, &cs->state, &err);
    int m = 0;
    int32_t tok = -1;
    for (int i = 0; i <= k && !failed; i++) {
        const float *raw = rows + (size_t)i * nv;
        /* history: committed tokens plus the drafts before this one */
        if (cs->cg && tk_gstate_done(&cs->look)) {
            tok = -2; /* the accepted drafts complete the grammar: nothing follows them */
            break;
        }
        if (i == k || greedy) {
            /* bonus token (all drafts accepted), or greedy: the model's own choice */
            if (cs->cg) {
                tok = tk_constraint_sample(cc, cs, &cs->look, eog, &ss->sampler, raw, b->row, ss->tokens, base + i,
                                           &err);
                if (tok < 0) {
                    tk_output_constraint_failed(ss, tok == -2 ? err.msg : NULL);
                    tok = -1; /* no token allowed, or a matcher bound */
                    break;
                }
            } else {
                memcpy(b->row, raw, sizeof(float) * (size_t)nv);
                tok = tk_sample(&ss->sampler, b->row, ss->tokens, base + i);
            }
            if (i < k && tok == drafts[i]) {
                m++;
                failed = tk_csample_step(cc, cs, &cs->look, tok, eog, &cs->look, &err) < 0;
                continue;
            }
            break;
        }
        memcpy(b->row, raw, sizeof(float) * (size_t)nv);
        if (cs->cg) {
            int n_allowed = tk_constraint_mask(cc, cs, &cs->look, eog, &err);
            if (n_allowed <= 0) {
                tk_output_constraint_failed(ss, n_allowed < 0 ? err.msg : NULL);
                tok = -1;
                break;
            }
            tk_constraint_apply_mask(cc, b->row);
        }
        tk_sampler_dist(&ss->sampler, b->row, ss->tokens, base + i, b->dist_p);
        const float *q = ss->q ? ss->q + (size_t)i * nv : NULL;
        if (!tk_spec_accept(&ss->sampler, b->dist_p, q, drafts[i], b->resid, nv, &tok)) break;
        m++;
        failed = cs->cg && tk_csample_step(cc, cs, &cs->look, drafts[i], eog, &cs->look, &err) < 0;
    }
    if (failed) {
        tk_output_constraint_failed(ss, err.msg);
        tok = -1;
    }
    tk_spec_rate_update(&ss->rate, k, m);
    ss->spec_drafted += k;
    ss->spec_accepted += m;
    ss->spec_passes++;
    st->spec_drafted += (uint64_t)k;
    st->spec_accepted += (uint64_t)m;
    st->spec_target_passes++;

    /* Valid K/V: up to the last accepted draft. */
    tk_kv_seq *kv_seq = &e->seqs[ss->seq.slot];
    ss->seq.n_computed = base + m;
    tk_kv_seq_truncate(&e->kv, kv_seq, ss->seq.n_computed);
    tk_kv_seq_register_prefix(&e->kv, kv_seq, ss->tokens, ss->seq.n_computed);
    if (ss->draft_slot >= 0 && ss->draft_computed > base + m) {
        ss->draft_computed = base + m;
        tk_kv_seq_truncate(&e->draft->kv, &e->draft->seqs[ss->draft_slot], ss->draft_computed);
    }
    ss->seq.n_draft = 0;

    int before = ss->n_generated;
    for (int j = 0; j < m && !ss->seq.done; j++) tk_output_commit(e, ss, drafts[j], rows + (size_t)j * nv, now);
    if (!ss->seq.done && tok != -2) tk_output_commit(e, ss, tok, rows + (size_t)m * nv, now); /* -1: "error" */
    st->spec_tokens += (uint64_t)(ss->n_generated - before);
}
