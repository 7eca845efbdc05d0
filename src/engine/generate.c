/* Single-prompt generation: one request through the same scheduler the
 * server uses, stepped until it finishes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"

typedef struct gen_ctx {
    tk_text_cb cb;
    void *user;
    tk_gen_stats *stats;
    double t_start, t_first;
    bool done, stopped_by_cb;
    uint64_t id;
    tk_engine *e;
    char error[sizeof(((tk_err *)0)->msg)]; /* why the request failed (its constraint), "" if it did not */
} gen_ctx;

static void on_event(void *user, const tk_event *ev) {
    gen_ctx *g = user;
    if (ev->token >= 0 && g->t_first == 0) g->t_first = tk_clock_seconds(TK_CLOCK_WALL);
    if (ev->text_len > 0 && g->cb && !g->stopped_by_cb && g->cb(g->user, ev->text, ev->text_len)) {
        g->stopped_by_cb = true;
        tk_engine_cancel(g->e, g->id);
    }
    g->stats->n_generated = ev->n_generated;
    g->stats->spec_drafted = ev->spec_drafted;
    g->stats->spec_accepted = ev->spec_accepted;
    g->stats->spec_target_passes = ev->spec_target_passes;
    if (ev->done) {
        g->done = true;
        const char *r = ev->finish_reason;
        g->stats->stop_reason = !strcmp(r, "stop")     ? "eos"
                                : !strcmp(r, "length") ? "length"
                                : !strcmp(r, "error")  ? "error"
                                                       : "cancelled";
        if (ev->error) snprintf(g->error, sizeof g->error, "%s", ev->error);
    }
}

int tk_engine_generate(tk_engine *e, const char *prompt, const tk_gen_params *p, tk_text_cb cb, void *user,
                       tk_gen_stats *stats, tk_err *err) {
    memset(stats, 0, sizeof *stats);
    if (!e->tok) return tk_err_set(err, "the model has no tokenizer (give one with --tokenizer)");
    size_t len = strlen(prompt);
    int n = 0;
    if (tk_tokenize(e->tok, prompt, len, p->add_bos, true, NULL, 0, &n, err)) return tk_err_wrap(err, "prompt");
    if (n == 0) return tk_err_set(err, "the prompt is empty (and the model has no BOS token)");
    if (n >= e->ctx_len)
        return tk_err_set(err, "the prompt is %d tokens, longer than the context allows (%d tokens, one kept "
                               "for generation)", n, e->ctx_len);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n);
    if (!tokens) return tk_err_set(err, "out of memory");
    if (tk_tokenize(e->tok, prompt, len, p->add_bos, true, tokens, n, &n, err)) {
        free(tokens);
        return -1;
    }
    int max_tokens = p->max_tokens;
    if (max_tokens < 0 || n + max_tokens > e->ctx_len) max_tokens = e->ctx_len - n;
    if (max_tokens == 0) {
        free(tokens);
        stats->n_prompt = n;
        stats->stop_reason = "length";
        return 0;
    }
    tk_request_params rp = {.prompt = tokens, .n_prompt = n, .max_tokens = max_tokens, .n = 1,
                            .sampling = p->sampling, .ignore_eos = p->ignore_eos, .top_logprobs = -1,
                            .speculative = p->speculative, .draft_max = p->draft_max, .draft_min = p->draft_min,
                            .constraint = p->constraint};
    gen_ctx g = {.cb = cb, .user = user, .stats = stats, .e = e};
    g.t_start = tk_clock_seconds(TK_CLOCK_WALL);
    int rc = tk_engine_submit(e, &rp, on_event, &g, &g.id, err);
    free(tokens);
    if (rc) return -1;
    while (!g.done) {
        if (tk_engine_step(e, err) < 0) return -1;
    }
    double t_end = tk_clock_seconds(TK_CLOCK_WALL);
    if (g.t_first == 0) g.t_first = t_end;
    stats->n_prompt = n;
    stats->prompt_seconds = g.t_first - g.t_start;
    stats->gen_seconds = t_end - g.t_first;
    if (stats->n_generated == (int)(e->ctx_len - n) && !strcmp(stats->stop_reason, "length") &&
        (p->max_tokens < 0 || n + p->max_tokens > e->ctx_len))
        stats->stop_reason = "context";
    return g.error[0] ? tk_err_set(err, "%s", g.error) : 0;
}
