/* Helpers for tests that drive the engine's request API. */
#ifndef TK_ENGINE_TEST_H
#define TK_ENGINE_TEST_H

#include <stdio.h>

#include "tokamak.h"

/* Sanitizer builds run several times slower: tests shorten their longest runs. */
#if defined(__SANITIZE_ADDRESS__)
#define SLOW_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLOW_BUILD 1
#endif
#endif
#ifndef SLOW_BUILD
#define SLOW_BUILD 0
#endif

/* Opens an engine, or prints why not (naming `what`) and returns NULL. */
static inline tk_engine *tk_test_open(const tk_engine_config *cfg, const char *what) {
    tk_engine *e;
    tk_err err;
    if (tk_engine_open(cfg, &e, &err)) {
        fprintf(stderr, "open %s: %s\n", what, err.msg);
        return NULL;
    }
    return e;
}

/* Called after every engine step; non-zero stops the run with -1. */
typedef int (*tk_test_step_fn)(tk_engine *e, void *ctx);

/* Submits the n requests (request i reports to cb with user pointer
 * (char *)users + i * user_size), then steps the engine until nothing is
 * live.  Returns 0, or -1 after an error (printed), a non-zero after_step or
 * max_steps steps. */
static inline int tk_test_run_requests(tk_engine *e, const tk_request_params *ps, int n, tk_event_cb cb, void *users,
                                       size_t user_size, tk_test_step_fn after_step, void *ctx, int max_steps) {
    tk_err err;
    for (int i = 0; i < n; i++)
        if (tk_engine_submit(e, &ps[i], cb, (char *)users + (size_t)i * user_size, NULL, &err)) {
            fprintf(stderr, "submit: %s\n", err.msg);
            return -1;
        }
    for (int step = 0; step < max_steps; step++) {
        int live = tk_engine_step(e, &err);
        if (live < 0) {
            fprintf(stderr, "step: %s\n", err.msg);
            return -1;
        }
        if (after_step && after_step(e, ctx)) return -1;
        if (live == 0) return 0;
    }
    return -1;
}

#endif
