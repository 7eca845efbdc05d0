/* Constrained decoding in the engine (constraint.h): the compile cache,
 * the vocabulary, per-sample grammar states, masks and masked sampling. */
#include "constraint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tk_constraint_cache_init(tk_constraint_cache *c, int n_vocab, tk_err *err) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->n_vocab = n_vocab;
    c->mask = calloc((size_t)(n_vocab + 31) / 32, sizeof(uint32_t));
    if (!c->mask) {
        pthread_mutex_destroy(&c->mu);
        return tk_err_set(err, "out of memory");
    }
    return 0;
}

static void cgrammar_free(tk_cgrammar *g) {
    tk_gtable_free(g->table); /* points into g->g */
    tk_grammar_free(&g->g);
    free(g->text);
    free(g->begin);
    free(g->end);
    free(g);
}

/* Drops a reference; the caller holds c->mu. */
static void unref_locked(tk_cgrammar *g) {
    if (--g->refs == 0) cgrammar_free(g);
}

void tk_constraint_cache_free(tk_constraint_cache *c) {
    if (!c->mask) return; /* never initialized */
    for (int i = 0; i < c->n; i++) unref_locked(c->entries[i]);
    if (c->have_vocab) tk_gvocab_free(&c->vocab);
    tk_gmasker_free(&c->masker);
    free(c->mask);
    pthread_mutex_destroy(&c->mu);
    memset(c, 0, sizeof *c);
}

static const char *or_empty(const char *s) { return s ? s : ""; }

static bool same_key(const tk_cgrammar *g, const tk_constraint *k) {
    return g->kind == k->kind && !strcmp(g->text, or_empty(k->text)) && !strcmp(g->begin, or_empty(k->begin)) &&
           !strcmp(g->end, or_empty(k->end));
}

static int compile(const tk_constraint *k, tk_grammar *g, tk_err *err) {
    const char *text = or_empty(k->text);
    int rc;
    switch (k->kind) {
    case TK_CONSTRAINT_JSON: rc = tk_grammar_json_object(g, err); break;
    case TK_CONSTRAINT_JSON_SCHEMA: rc = tk_grammar_from_json_schema(g, text, strlen(text), err); break;
    case TK_CONSTRAINT_REGEX: rc = tk_grammar_from_regex(g, text, err); break;
    case TK_CONSTRAINT_GRAMMAR: rc = tk_grammar_from_gbnf(g, text, err); break;
    default: return tk_err_set(err, "unknown constraint kind %d", (int)k->kind);
    }
    if (rc) return -1;
    if ((k->begin && *k->begin) || (k->end && *k->end)) {
        if (tk_grammar_wrap(g, k->begin, k->end, err)) {
            tk_grammar_free(g);
            return -1;
        }
    }
    return 0;
}

static int check(const tk_constraint *k, tk_err *err) {
    if (k->kind < TK_CONSTRAINT_JSON || k->kind > TK_CONSTRAINT_GRAMMAR)
        return tk_err_set(err, "unknown constraint kind %d", (int)k->kind);
    if (k->kind != TK_CONSTRAINT_JSON && !k->text) return tk_err_set(err, "the constraint has no text");
    if (k->text && strlen(k->text) > TK_CONSTRAINT_MAX_TEXT)
        return tk_err_set(err, "the constraint's text is longer than %d bytes", TK_CONSTRAINT_MAX_TEXT);
    if (strlen(or_empty(k->begin)) > TK_CONSTRAINT_MAX_LITERAL || strlen(or_empty(k->end)) > TK_CONSTRAINT_MAX_LITERAL)
        return tk_err_set(err, "the constraint's begin/end literals are limited to %d bytes",
                          TK_CONSTRAINT_MAX_LITERAL);
    return 0;
}

/* The cached entry for k with a new reference, or NULL; c->mu held. */
static tk_cgrammar *lookup_locked(tk_constraint_cache *c, const tk_constraint *k) {
    for (int i = 0; i < c->n; i++)
        if (same_key(c->entries[i], k)) {
            c->entries[i]->refs++;
            c->entries[i]->last_use = ++c->tick;
            return c->entries[i];
        }
    return NULL;
}

/* Inserts g (the cache takes a reference), evicting the least recently
 * used entry when full; c->mu held. */
static void insert_locked(tk_constraint_cache *c, tk_cgrammar *g) {
    if (c->n == TK_CONSTRAINT_CACHE_SIZE) {
        int lru = 0;
        for (int i = 1; i < c->n; i++)
            if (c->entries[i]->last_use < c->entries[lru]->last_use) lru = i;
        unref_locked(c->entries[lru]);
        c->entries[lru] = c->entries[--c->n];
    }
    g->refs++;
    g->last_use = ++c->tick;
    c->entries[c->n++] = g;
}

tk_cgrammar *tk_constraint_acquire(tk_constraint_cache *c, const tk_tokenizer *tok, const tk_constraint *k,
                                   tk_err *err) {
    if (check(k, err)) return NULL;
    if (!tok) {
        tk_err_set(err, "constrained decoding needs the model's tokenizer");
        return NULL;
    }
    pthread_mutex_lock(&c->mu);
    int rc = c->have_vocab ? 0 : tk_gvocab_init(&c->vocab, tok, err);
    if (!rc) c->have_vocab = true;
    tk_cgrammar *g = rc ? NULL : lookup_locked(c, k);
    if (g && g->failed[0]) {
        tk_err_set(err, "%s (the constraint failed an earlier request)", g->failed);
        unref_locked(g);
        g = NULL;
        rc = -1;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc || g) return g;

    /* compile outside the lock: other requests need not wait for it */
    g = calloc(1, sizeof *g);
    if (!g) {
        tk_err_set(err, "out of memory");
        return NULL;
    }
    g->kind = k->kind;
    g->text = strdup(or_empty(k->text));
    g->begin = strdup(or_empty(k->begin));
    g->end = strdup(or_empty(k->end));
    if (!g->text || !g->begin || !g->end) {
        cgrammar_free(g);
        tk_err_set(err, "out of memory");
        return NULL;
    }
    if (compile(k, &g->g, err)) {
        cgrammar_free(g);
        return NULL;
    }
    /* The table costs about one plain mask walk to build and makes every
     * later mask a few microseconds: built once per compiled grammar, here
     * rather than on the stepping thread.  Over its budget, or stopped by a
     * matcher bound while walking a context alone, the plain walk is kept
     * (it reports the bound itself if a real path reaches it). */
    tk_err build_err;
    tk_gtable_build(&g->table, &g->g, &c->vocab, &build_err); /* g->table stays NULL unless built */
    g->refs = 1;
    pthread_mutex_lock(&c->mu);
    tk_cgrammar *raced = lookup_locked(c, k); /* compiled meanwhile by another submitter */
    if (raced) {
        unref_locked(g);
        g = raced;
    } else {
        insert_locked(c, g);
    }
    pthread_mutex_unlock(&c->mu);
    return g;
}

void tk_constraint_release(tk_constraint_cache *c, tk_cgrammar *g) {
    if (!g) return;
    pthread_mutex_lock(&c->mu);
    unref_locked(g);
    pthread_mutex_unlock(&c->mu);
}

int tk_csample_init(tk_csample *s, tk_cgrammar *cg, tk_err *err) {
    memset(s, 0, sizeof *s);
    if (!cg) return 0;
    if (tk_gstate_init(&s->state, &cg->g, err)) return -1;
    s->cg = cg;
    return 0;
}

void tk_csample_free(tk_csample *s) {
    tk_gstate_free(&s->state);
    tk_gstate_free(&s->look);
    tk_gstate_free(&s->s1);
    tk_gstate_free(&s->s2);
    memset(s, 0, sizeof *s);
}

static bool is_eog(const tk_gvocab *v, int32_t tok) {
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == tok) return true;
    return false;
}

static void swap_states(tk_gstate *a, tk_gstate *b) {
    tk_gstate t = *a;
    *a = *b;
    *b = t;
}

/* Marks s's grammar failed with err's message when the grammar caused it
 * (a bound; not out of memory, which may pass): the other samples
 * using it stop at their next token instead of each paying the bound
 * again, and later requests are refused at submit.  Returns -1. */
static int grammar_failed(tk_constraint_cache *c, const tk_csample *s, const tk_err *err) {
    if (!tk_grammar_err_is_input(err->msg)) return -1;
    pthread_mutex_lock(&c->mu);
    if (!s->cg->failed[0]) snprintf(s->cg->failed, sizeof s->cg->failed, "%s", err->msg);
    pthread_mutex_unlock(&c->mu);
    return -1;
}

/* The stepping thread is the only writer of failed, so it reads it unlocked. */
static int refuse_failed(const tk_csample *s, tk_err *err) {
    return s->cg && s->cg->failed[0] ? tk_err_set(err, "%s", s->cg->failed) : 0;
}

int tk_csample_step(tk_constraint_cache *c, tk_csample *s, const tk_gstate *st, int32_t tok, bool allow_eog,
                    tk_gstate *into, tk_err *err) {
    const tk_gvocab *v = &c->vocab;
    if (refuse_failed(s, err)) return -1;
    if (tok < 0 || tok >= v->n_vocab) return 0;
    if (is_eog(v, tok)) {
        /* generation ends here: the state does not move */
        if (!(allow_eog && st->accepting)) return 0;
        return into && into != st ? (tk_gstate_copy(into, st, err) ? -1 : 1) : 1;
    }
    int len = v->len[tok];
    if (len == 0) return 0; /* control, unknown, unused or empty: never allowed */
    const uint8_t *b = v->blob + v->off[tok];
    tk_gstate *last = NULL; /* s1 and s2 in turn */
    for (int i = 0; i < len; i++) {
        tk_gstate *to = last == &s->s1 ? &s->s2 : &s->s1;
        int rc = tk_gstate_step(last ? last : st, b[i], to, err);
        if (rc < 0) return grammar_failed(c, s, err);
        if (rc == 0) return 0;
        last = to;
    }
    if (into) swap_states(into, last);
    return 1;
}

int tk_constraint_mask(tk_constraint_cache *c, tk_csample *s, const tk_gstate *st, bool allow_eog, tk_err *err) {
    if (refuse_failed(s, err)) return -1;
    c->masker.table = s->cg->table;
    int words = (c->n_vocab + 31) / 32;
    memset(c->mask, 0, sizeof(uint32_t) * (size_t)words);
    uint64_t before = c->masker.steps;
    int n = tk_gmask_compute(&c->masker, &c->vocab, st, c->mask, err);
    if (n < 0) return grammar_failed(c, s, err);
    s->mask_steps += c->masker.steps - before;
    s->n_masks++;
    uint64_t per_mask = (uint64_t)TK_CONSTRAINT_MEAN_STEPS_PER_TOKEN * tk_gvocab_bound_tokens(&c->vocab);
    if (s->mask_steps > per_mask * (uint64_t)(s->n_masks + TK_CONSTRAINT_MASK_SLACK)) {
        tk_err_set(err, "grammar: %d token masks took %llu matcher steps, over %d per vocabulary token and mask "
                   "(the grammar's repeats or alternatives are too costly to match)", s->n_masks,
                   (unsigned long long)s->mask_steps, TK_CONSTRAINT_MEAN_STEPS_PER_TOKEN);
        return grammar_failed(c, s, err);
    }
    if (allow_eog || !st->accepting) return n;
    for (int i = 0; i < c->vocab.n_eog; i++) {
        int32_t id = c->vocab.eog[i];
        if (c->mask[id >> 5] & (1u << (id & 31))) n--;
        c->mask[id >> 5] &= ~(1u << (id & 31));
    }
    return n;
}

void tk_constraint_apply_mask(const tk_constraint_cache *c, float *logits) {
    for (int i = 0; i < c->n_vocab; i++)
        if (!(c->mask[i >> 5] & (1u << (i & 31)))) logits[i] = -INFINITY;
}

static bool mask_has(const tk_constraint_cache *c, int32_t id) {
    return id >= 0 && id < c->n_vocab && (c->mask[id >> 5] & (1u << (id & 31)));
}

int32_t tk_constraint_sample(tk_constraint_cache *c, tk_csample *s, const tk_gstate *st, bool allow_eog,
                             tk_sampler *sampler, const float *logits, float *row, const int32_t *history,
                             int n_history, tk_err *err) {
    size_t bytes = sizeof(float) * (size_t)c->n_vocab;
    if (sampler->params.temperature == 0) {
        /* greedy: the argmax stands if the grammar allows it (masking only
         * lowers the others) */
        memcpy(row, logits, bytes);
        int32_t tok = tk_sample(sampler, row, history, n_history);
        int rc = tk_csample_step(c, s, st, tok, allow_eog, NULL, err);
        if (rc < 0) return -2;
        if (rc == 1) return tok;
    }
    int n = tk_constraint_mask(c, s, st, allow_eog, err);
    if (n < 0) return -2;
    if (n == 0) return -1;
    memcpy(row, logits, bytes);
    tk_constraint_apply_mask(c, row);
    int32_t tok = tk_sample(sampler, row, history, n_history);
    if (mask_has(c, tok)) return tok;
    /* every allowed logit is -inf or NaN: the sampler fell back to id 0;
     * the lowest allowed id instead */
    for (int32_t i = 0; i < c->n_vocab; i++)
        if (mask_has(c, i)) return i;
    return -1;
}
