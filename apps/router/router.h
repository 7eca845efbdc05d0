/* tokamak router: an OpenAI-compatible proxy in front of several `tokamak
 * serve` replicas that sends requests sharing a prompt prefix to the same
 * replica (so its prefix cache hits), balanced against the replicas' load
 * scraped from their /metrics.  docs/serving.md describes the rule. */
#ifndef TK_ROUTER_H
#define TK_ROUTER_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tokamak.h>

#include "loadtest/http_client.h"

#define TK_ROUTER_MAX_BACKENDS 64

typedef enum tk_route_policy { TK_POLICY_AFFINITY = 0, TK_POLICY_ROUND_ROBIN = 1 } tk_route_policy;

typedef struct tk_backend {
    const char *url; /* as given, for labels and messages */
    tk_url u;
    uint64_t id_hash; /* the replica's rendezvous identity (hash of its URL) */
    atomic_bool healthy;
    atomic_int load;        /* waiting + running requests, from its /metrics */
    atomic_int inflight;    /* this router's requests on it now (fresher than the last scrape) */
    atomic_int kv_permille; /* KV cache use, 0..1000 */
    atomic_ullong requests, failures;
} tk_backend;

typedef struct tk_router {
    tk_backend backends[TK_ROUTER_MAX_BACKENDS];
    int n_backends;
    tk_route_policy policy;
    int affinity_blocks;     /* prompt blocks hashed into the affinity key */
    atomic_int block_size;   /* tokens per block: --block-size, else the replicas' cache_config_info */
    int load_threshold;      /* leave the top replica when its load exceeds the least's by more */
    double health_interval_s, backend_timeout_s;
    size_t max_body_bytes, max_response_bytes;
    tk_tokenizer *tok;
    tk_chat_template *tmpl; /* NULL: chat prompts keyed by their message texts */
    char *bos_text, *eos_text;
    atomic_uint rr_next;
    atomic_ullong requests, retries, failures, affinity_top, affinity_diverted, stream_errors, rejected;
    atomic_bool stop;
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;
} tk_router;

/* ---- pick.c: which replica serves a request ---- */

#define TK_ROUTER_HASH_SEED 0xcbf29ce484222325ULL
/* FNV-1a of n bytes continuing from h (TK_ROUTER_HASH_SEED to start). */
uint64_t tk_router_hash(uint64_t h, const void *p, size_t n);

/* The affinity key of a tokenized prompt: a hash of its first
 * affinity_blocks full blocks (all of it when shorter than one block). */
uint64_t tk_router_prefix_key(const int *ids, int n, int block_size, int affinity_blocks);

/* Fills order[] with the healthy replicas (all of them when none is
 * healthy) in the order to try them; returns the count.  *diverted says
 * whether the load rule moved the first choice off the top-ranked one. */
int tk_router_order(tk_router *r, uint64_t key, int *order, bool *diverted);

/* ---- backends.c: health checks and load scraping ---- */

/* Parses the replica's /metrics text into load / KV use / block size
 * (-1 where absent). */
void tk_router_parse_metrics(const char *text, int *load, int *kv_permille, int *block_size);
/* One round of GET /health and GET /metrics on every replica. */
void tk_router_poll_backends(tk_router *r);
/* Polls every health_interval_s until r->stop. */
void *tk_router_poll_thread(void *arg);

/* ---- proxy.c: the HTTP side ---- */
/* Serves until one of stop_signals (blocked in every thread) arrives. */
int tk_router_serve(tk_router *r, const char *host, int port, int max_connections, const sigset_t *stop_signals,
                    tk_err *err);

#endif
