/* Continuous batching: concurrent requests give the same tokens as each run
 * alone; preemption under a tiny KV pool loses nothing; the prefix cache
 * reuses blocks; n > 1 samples fork from one prompt (copy on write); stop
 * strings, cancellation; every block returns to the pool. */
#include <tokamak.h>

#include "engine_test.h"
#include "tk_test.h"

#define MAX_REQ 16
#define MAX_TOK 64

typedef struct result {
    int32_t tokens[4][MAX_TOK];
    int n[4];
    char text[4][1024];
    int text_len[4];
    const char *finish[4];
    int done;
    int n_cached;
} result;

static void on_event(void *user, const tk_event *ev) {
    result *r = user;
    int i = ev->index;
    if (ev->token >= 0 && r->n[i] < MAX_TOK) r->tokens[i][r->n[i]++] = ev->token;
    if (ev->text_len > 0 && r->text_len[i] + ev->text_len < 1024) {
        memcpy(r->text[i] + r->text_len[i], ev->text, (size_t)ev->text_len);
        r->text_len[i] += ev->text_len;
    }
    if (ev->done) {
        r->finish[i] = ev->finish_reason;
        r->done++;
        r->n_cached = ev->n_cached_tokens;
    }
}

static tk_engine *open_engine(const char *model, const char *tok, int max_seqs, size_t kv_memory, int batch) {
    tk_engine_config cfg = {.model_path = tk_shared(model), .tokenizer_path = tok ? tk_shared(tok) : NULL,
                            .n_threads = 2, .max_seqs = max_seqs, .kv_memory = kv_memory,
                            .max_batch_tokens = batch, .kv_block_size = 8};
    return tk_test_open(&cfg, model);
}

static void prompt_for(int i, int32_t *p, int *n) {
    *n = 5 + (i * 7) % 23;
    p[0] = 1;
    for (int k = 1; k < *n; k++) p[k] = 3 + (i * 31 + k * 17) % 500;
}

static int run_all(tk_engine *e, tk_request_params *ps, int n, result *rs) {
    return tk_test_run_requests(e, ps, n, on_event, rs, sizeof *rs, NULL, NULL, 100000);
}

static void test_concurrent_equals_alone(void) {
    int32_t prompts[MAX_REQ][32];
    tk_request_params ps[MAX_REQ];
    static result alone[MAX_REQ], together[MAX_REQ], tight[MAX_REQ];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    memset(tight, 0, sizeof tight);
    for (int i = 0; i < MAX_REQ; i++) {
        int n;
        prompt_for(i, prompts[i], &n);
        ps[i] = (tk_request_params){.prompt = prompts[i], .n_prompt = n, .max_tokens = 24, .n = 1,
                                    .top_logprobs = -1};
        ps[i].sampling.temperature = 0;
        ps[i].sampling.repeat_penalty = 1;
        ps[i].sampling.top_p = 1;
    }
    tk_engine *e = open_engine("models/stories260K.bin", NULL, 1, 0, 64);
    for (int i = 0; i < MAX_REQ && e; i++) CHECK(run_all(e, &ps[i], 1, &alone[i]) == 0, "alone %d", i);
    tk_engine_close(e);

    e = open_engine("models/stories260K.bin", NULL, MAX_REQ, 0, 64);
    CHECK(run_all(e, ps, MAX_REQ, together) == 0, "together");
    tk_engine_metrics m;
    tk_engine_metrics_get(e, &m);
    CHECK(m.kv_blocks_used == 0 && m.requests_running == 0 && m.requests_waiting == 0,
          "all blocks back: used %d", m.kv_blocks_used);
    CHECK(m.requests_finished == MAX_REQ, "finished %llu", (unsigned long long)m.requests_finished);
    tk_engine_close(e);

    /* A pool far too small for 16 running requests forces preemption. */
    size_t block_bytes = 2 * sizeof(float) * 5 * 4 * 8 * 8; /* layers x kv heads x head dim x block */
    e = open_engine("models/stories260K.bin", NULL, MAX_REQ, block_bytes * 24, 64);
    CHECK(run_all(e, ps, MAX_REQ, tight) == 0, "tight pool");
    tk_engine_metrics_get(e, &m);
    CHECK(m.preemptions > 0, "preemptions happened: %llu", (unsigned long long)m.preemptions);
    CHECK(m.kv_blocks_used == 0, "tight pool: blocks back, used %d", m.kv_blocks_used);
    printf("tight pool: %d blocks, %llu preemptions\n", m.kv_blocks_total, (unsigned long long)m.preemptions);
    tk_engine_close(e);

    for (int i = 0; i < MAX_REQ; i++) {
        CHECK(alone[i].n[0] == 24 && !strcmp(alone[i].finish[0], "length"), "alone %d: %d tokens", i, alone[i].n[0]);
        CHECK(together[i].n[0] == alone[i].n[0] && !memcmp(together[i].tokens[0], alone[i].tokens[0],
                                                           sizeof(int32_t) * (size_t)alone[i].n[0]),
              "request %d: batched output differs from alone", i);
        CHECK(tight[i].n[0] == alone[i].n[0] &&
                  !memcmp(tight[i].tokens[0], alone[i].tokens[0], sizeof(int32_t) * (size_t)alone[i].n[0]),
              "request %d: output with preemption differs", i);
    }
}

static void test_prefix_cache_and_n(void) {
    tk_engine *e = open_engine("models/stories260K.bin", NULL, 8, 0, 64);
    if (!e) return;
    int32_t p[40];
    for (int k = 0; k < 40; k++) p[k] = k == 0 ? 1 : 10 + k * 3;
    tk_request_params rp = {.prompt = p, .n_prompt = 40, .max_tokens = 10, .n = 1, .top_logprobs = 2};
    tk_sampling_defaults(&rp.sampling);
    rp.sampling.temperature = 0.9f;
    rp.sampling.seed = 42;
    result a = {0}, b = {0};
    CHECK(run_all(e, &rp, 1, &a) == 0, "first");
    CHECK(run_all(e, &rp, 1, &b) == 0, "second");
    CHECK(a.n_cached == 0 && b.n_cached == 32, "second request reuses 4 cached blocks: %d", b.n_cached);
    CHECK(a.n[0] == 10 && !memcmp(a.tokens[0], b.tokens[0], sizeof(int32_t) * 10), "same seed, same tokens");
    tk_engine_metrics m;
    tk_engine_metrics_get(e, &m);
    CHECK(m.prefix_hit_tokens == 32 && m.prefix_query_tokens == 80, "hits %llu of %llu",
          (unsigned long long)m.prefix_hit_tokens, (unsigned long long)m.prefix_query_tokens);
    CHECK(m.kv_blocks_used == 0 && m.kv_blocks_cached > 0, "used %d cached %d", m.kv_blocks_used,
          m.kv_blocks_cached);

    /* n = 3: sample i equals a single request with seed + i. */
    result many = {0}, one[3];
    memset(one, 0, sizeof one);
    rp.n = 3;
    CHECK(run_all(e, &rp, 1, &many) == 0, "n=3");
    rp.n = 1;
    for (int i = 0; i < 3; i++) {
        tk_request_params q = rp;
        q.sampling.seed = rp.sampling.seed + (uint64_t)i;
        CHECK(run_all(e, &q, 1, &one[i]) == 0, "single %d", i);
        CHECK(many.n[i] == 10 && !memcmp(many.tokens[i], one[i].tokens[0], sizeof(int32_t) * 10),
              "n=3 sample %d differs from a single request with seed+%d", i, i);
    }
    CHECK(memcmp(many.tokens[0], many.tokens[1], sizeof(int32_t) * 10) != 0, "different seeds differ");
    tk_engine_metrics_get(e, &m);
    CHECK(m.kv_blocks_used == 0, "blocks back after n=3: %d", m.kv_blocks_used);

    /* Cancel: the request ends with "cancelled" and frees its blocks. */
    result c = {0};
    rp.max_tokens = 60;
    uint64_t id;
    tk_err err;
    CHECK(tk_engine_submit(e, &rp, on_event, &c, &id, &err) == 0, "submit");
    for (int i = 0; i < 5; i++) tk_engine_step(e, &err);
    tk_engine_cancel(e, id);
    CHECK(tk_engine_step(e, &err) == 0, "nothing live after cancel");
    CHECK(c.done == 1 && c.finish[0] && !strcmp(c.finish[0], "cancelled"), "cancelled");
    tk_engine_metrics_get(e, &m);
    CHECK(m.kv_blocks_used == 0, "blocks back after cancel: %d", m.kv_blocks_used);

    /* Submission limits. */
    rp.max_tokens = 600;
    CHECK(tk_engine_submit(e, &rp, on_event, &c, &id, &err) != 0 && strstr(err.msg, "context"), "too long: %s",
          err.msg);
    tk_engine_close(e);
}

static void test_stop_strings(void) {
    tk_engine *e = open_engine("models/aidreams260K.bin", "models/aidreams260K.tok512.bin", 2, 0, 64);
    if (!e) return;
    int32_t p[] = {1, 303, 281, 269, 435, 447, 328}; /* "I dreamed" */
    const char *stop[] = {"gentle"};
    tk_request_params rp = {.prompt = p, .n_prompt = 7, .max_tokens = 34, .n = 1, .top_logprobs = -1,
                            .stop = stop, .n_stop = 1};
    rp.sampling.temperature = 0;
    rp.sampling.top_p = 1;
    rp.sampling.repeat_penalty = 1;
    result r = {0};
    CHECK(run_all(e, &rp, 1, &r) == 0, "run");
    r.text[0][r.text_len[0]] = 0;
    CHECK(!strcmp(r.text[0], ", as I sense the nodes, a ") && !strcmp(r.finish[0], "stop"), "stop string: '%s' %s",
          r.text[0], r.finish[0]);
    result full = {0};
    rp.n_stop = 0;
    CHECK(run_all(e, &rp, 1, &full) == 0, "run");
    full.text[0][full.text_len[0]] = 0;
    CHECK(!strcmp(full.text[0], ", as I sense the nodes, a gentle hum of probability. Contrast emerge, a"),
          "full text '%s'", full.text[0]);
    tk_engine_close(e);
}

/* Two n = 2 requests on three sequence slots: the first one's pending fork
 * holds a slot in reserve, so the second waits instead of taking it (and
 * then never getting its own fork's slot: it used to hang). */
static void test_fork_slots(void) {
    tk_engine *e = open_engine("models/stories260K.bin", NULL, 3, 0, 64);
    if (!e) return;
    int32_t p[12];
    for (int k = 0; k < 12; k++) p[k] = k == 0 ? 1 : 20 + k * 5;
    tk_request_params ps[2];
    for (int i = 0; i < 2; i++) {
        ps[i] = (tk_request_params){.prompt = p, .n_prompt = 12, .max_tokens = 6, .n = 2, .top_logprobs = -1};
        tk_sampling_defaults(&ps[i].sampling);
        ps[i].sampling.temperature = 0.8f;
        ps[i].sampling.seed = 5 + (uint64_t)i;
    }
    result rs[2];
    memset(rs, 0, sizeof rs);
    CHECK(tk_test_run_requests(e, ps, 2, on_event, rs, sizeof rs[0], NULL, NULL, 200) == 0, "both finish");
    CHECK(rs[0].n[0] == 6 && rs[0].n[1] == 6 && rs[1].n[0] == 6 && rs[1].n[1] == 6, "all four samples: %d %d %d %d",
          rs[0].n[0], rs[0].n[1], rs[1].n[0], rs[1].n[1]);
    tk_engine_close(e);
}

int main(void) {
    test_fork_slots();
    test_concurrent_equals_alone();
    test_prefix_cache_and_n();
    test_stop_strings();
    TK_TEST_END();
}
