/* The scheduler's logits buffer holds one row per sequence slot plus a
 * per-step budget of draft rows, not one per batch token: its size
 * follows that rule, and speculative requests that want more drafts than
 * the budget in one step (four greedy prompt-lookup requests asking for
 * 16 to 32 drafts each) get fewer drafts but exactly the tokens of plain
 * greedy decoding, with every block back at the end. */
#include <tokamak.h>

#include "../src/engine/engine_internal.h"
#include "engine_test.h"
#include "tk_test.h"

enum { N_REQ = 4, GEN = 48, MAX_GEN = 64 };

static tk_engine *open_engine(int max_seqs, int batch, int draft_max) {
    tk_engine_config cfg = {.model_path = tk_shared("models/code-target"), .n_threads = 2, .max_seqs = max_seqs,
                            .max_batch_tokens = batch, .draft_max = draft_max};
    return tk_test_open(&cfg, "code-target");
}

typedef struct result {
    int32_t tokens[MAX_GEN];
    int n, drafted, accepted;
} result;

static void on_event(void *user, const tk_event *ev) {
    result *r = user;
    if (ev->token >= 0 && r->n < MAX_GEN) r->tokens[r->n++] = ev->token;
    if (ev->done) {
        r->drafted = ev->spec_drafted;
        r->accepted = ev->spec_accepted;
    }
}

static int run_all(tk_engine *e, tk_request_params *ps, int n, result *rs) {
    return tk_test_run_requests(e, ps, n, on_event, rs, sizeof *rs, NULL, NULL, 100000);
}

static void test_sizes(void) {
    static const struct { int max_seqs, batch, draft_max, rows; } cases[] = {
        {4, 256, 0, 4 + 32},   /* 4 x 8 drafts < one request's longest draft (32) */
        {16, 512, 0, 16 + 128}, /* tokamak serve's defaults: 144 rows instead of 512 */
        {16, 512, 2, 16 + 32},
        {4, 16, 0, 16},         /* never more than a batch has tokens */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tk_engine *e = open_engine(cases[i].max_seqs, cases[i].batch, cases[i].draft_max);
        CHECK(e != NULL, "open case %zu", i);
        if (!e) continue;
        CHECK(e->batcher.logits_rows == cases[i].rows, "case %zu: %d logits rows, expected %d", i,
              e->batcher.logits_rows, cases[i].rows);
        tk_engine_close(e);
    }
}

static void test_draft_budget(void) {
    tk_engine *plain = open_engine(1, 256, 0), *spec = open_engine(N_REQ, 256, 0);
    CHECK(plain && spec, "open");
    if (!plain || !spec) goto out;
    CHECK(spec->batcher.sched.draft_rows == 32, "draft rows %d", spec->batcher.sched.draft_rows);
    char *text;
    size_t len;
    tk_err err;
    CHECK(tk_read_file(tk_shared("models/code-eval.txt"), &text, &len, &err) == 0, "code-eval.txt");
    if (!len) goto out;
    int32_t prompts[N_REQ][200];
    int lens[N_REQ];
    tk_request_params ps[N_REQ], pp[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        size_t o = len / N_REQ * (size_t)i;
        while (o > 0 && o < len && text[o - 1] != '\n') o++;
        size_t n = len - o < 400 ? len - o : 400;
        while (n > 0 && ((unsigned char)text[o + n] & 0xC0) == 0x80) n--;
        CHECK(tk_tokenize(tk_engine_tokenizer(spec), text + o, n, true, false, prompts[i], 200, &lens[i], &err) == 0,
              "tokenize");
        if (lens[i] > 160) lens[i] = 160;
        ps[i] = (tk_request_params){.prompt = prompts[i], .n_prompt = lens[i], .max_tokens = GEN, .n = 1,
                                    .top_logprobs = -1, .ignore_eos = true, .speculative = TK_SPEC_NGRAM,
                                    .draft_min = 16, .draft_max = 32};
        tk_sampling_defaults(&ps[i].sampling);
        ps[i].sampling.temperature = 0;
        pp[i] = ps[i];
        pp[i].speculative = TK_SPEC_OFF;
    }
    free(text);
    static result ref[N_REQ], got[N_REQ];
    for (int i = 0; i < N_REQ; i++) CHECK(run_all(plain, &pp[i], 1, &ref[i]) == 0, "plain %d", i);
    CHECK(run_all(spec, ps, N_REQ, got) == 0, "speculative, together");
    int drafted = 0, accepted = 0;
    for (int i = 0; i < N_REQ; i++) {
        CHECK(got[i].n == GEN && got[i].n == ref[i].n &&
                  !memcmp(got[i].tokens, ref[i].tokens, sizeof(int32_t) * (size_t)GEN),
              "request %d: tokens differ from plain greedy", i);
        drafted += got[i].drafted;
        accepted += got[i].accepted;
    }
    CHECK(drafted > 0 && accepted > 0, "drafts were verified: %d accepted of %d", accepted, drafted);
    tk_engine_metrics m;
    tk_engine_metrics_get(spec, &m);
    CHECK(m.kv_blocks_used == 0, "blocks back: %d", m.kv_blocks_used);
    printf("4 requests, 32 draft rows per step: %d of %d drafts accepted\n", accepted, drafted);
out:
    tk_engine_close(plain);
    tk_engine_close(spec);
}

int main(void) {
    test_sizes();
    test_draft_budget();
    TK_TEST_END();
}
