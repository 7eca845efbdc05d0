/* The OpenAI-compatible HTTP server (libmicrohttpd).
 *
 * Threading: MHD runs one thread per connection.  A request thread parses
 * and validates the body, tokenizes, and submits to the engine; then it
 * blocks on its own tk_event_queue (condition variable with a 100 ms timeout)
 * until events arrive, formats them (JSON or SSE chunks) and writes.  The
 * caller's thread (tk_cmd_serve's main thread) is the only one that steps
 * the engine.  Blocking per connection keeps each request's code
 * sequential; the timeouts let a blocked thread notice shutdown and a
 * client that hung up (a peek at its socket) even when no tokens flow, so
 * the request is cancelled at once and its KV blocks return to the pool.
 * A reaper thread enforces the header and body deadlines (a socket past
 * its deadline is shut down) and stops chat template renders whose client
 * left or when the server stops (docs/serving.md, "Connection limits"). */
#ifndef TK_SERVER_H
#define TK_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <tokamak.h>

#include "step_jobs.h"

typedef struct tk_server_config {
    const char *host;          /* numeric IPv4/IPv6 address */
    int port;
    const char *api_key;       /* NULL: no authentication */
    /* Without an API key on a loopback address, only requests whose Host is
     * a loopback name or address or one of these ("*": any) are answered. */
    const char *const *allowed_hosts;
    int n_allowed_hosts;
    const char *model_name;
    int max_connections;
    int max_connections_per_ip; /* 0: no per-address cap */
    int header_timeout_s;      /* a request's headers must arrive within this (from connect or the previous answer) */
    int body_timeout_s;        /* ... and its body within this after the headers */
    size_t max_response_bytes; /* a non-streaming answer's text and logprobs kept past this: 400 */
    int max_tokens;            /* tokens one completion may generate: a request's default and cap (0: none) */
    int idle_timeout_s;        /* a connection with no traffic either way is closed (generation time excepted) */
    bool parse_special_in_content; /* control-token text in chat message content stays a control token */
    tk_tool_format tool_format; /* how the model writes tool calls (--tool-format, else from the template) */
} tk_server_config;

typedef struct tk_server {
    tk_engine *engine;
    const tk_tokenizer *tok;
    const tk_chat_template *tmpl;
    char *bos_text, *eos_text;  /* for the chat template */
    tk_server_config cfg;
    int ctx_len, n_vocab;
    bool has_draft_model;      /* requests may ask for speculative mode "draft" */
    int kv_blocks_total;       /* the pool size, for /metrics before the first step */
    int kv_block_size;         /* tokens per KV block (the prefix cache's unit), for /metrics */
    bool check_host;           /* see cfg.allowed_hosts */
    size_t max_text_bytes;     /* longer prompt text cannot fit the context: refuse it untokenized */
    /* Texts that become a control token only with special-token parsing
     * (longest first), defused in chat message content; none with
     * cfg.parse_special_in_content. */
    struct tk_special_text {
        char *s;
        size_t n;
        int32_t id;
    } *special_texts;
    int n_special_texts;
    bool special_first[256];   /* first bytes of special_texts */
    time_t created;
    char fingerprint[40];
    uint64_t id_salt;
    atomic_uint_fast64_t id_counter;
    atomic_bool stopping;
    atomic_int active;         /* HTTP requests between first call and completion */
    atomic_uint_fast64_t http_requests, http_errors, rejected_queue_full, cancelled_disconnect;
    atomic_uint_fast64_t timed_out, renders_cancelled;
    /* Connections whose headers or body are due (see conn_track in http.c),
     * watched by the reaper thread. */
    pthread_mutex_t track_mu;
    struct conn_track *tracked;
    pthread_t reaper;
    bool reaper_running;
    atomic_bool reaper_quit;
    tk_step_jobs step_jobs;    /* embeddings, run by the serve loop between steps */
    int embed_dim;
    struct MHD_Daemon *mhd;
    int listen_fd;             /* after quiescing: ours to close */
} tk_server;

/* Starts listening.  The engine, tokenizer and template stay owned by the
 * caller and must outlive tk_server_stop. */
int tk_server_start(tk_server *s, tk_engine *e, const tk_chat_template *tmpl, const tk_server_config *cfg,
                    tk_err *err);
/* First phase of shutdown: refuse new work; blocked request threads
 * cancel their requests within ~100 ms. */
void tk_server_begin_stop(tk_server *s);
/* Closes every connection and joins the connection threads. */
void tk_server_stop(tk_server *s);

/* Prometheus text exposition of the engine metrics plus server counters. */
char *tk_server_metrics_text(tk_server *s);
/* The same snapshot as JSON for /stats (docs/serving.md), histograms
 * included; NULL when out of memory. */
char *tk_server_stats_json(tk_server *s);

#endif
