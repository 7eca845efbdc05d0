/* tokamak router: options, replica list, tokenizer and chat template. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common/args.h"
#include "router.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tokamak router --backend URL [--backend URL ...] (-m MODEL | --tokenizer PATH) [options]\n\n"
            "An OpenAI-compatible proxy over `tokamak serve` replicas: requests whose prompts share their first\n"
            "KV blocks go to the same replica (rendezvous hashing), unless it is much busier than the others.\n\n"
            "  --backend URL            a replica, http://host:port (repeatable, at most %d)\n"
            "  -m, --model PATH         the replicas' model: its tokenizer and chat template key the prompts\n"
            "  --tokenizer PATH         a tokenizer override (tokenizer.json, .gguf, tokenizer.bin)\n"
            "  --chat-template FILE     a Jinja chat template file or preset name (as serve's option)\n"
            "  --host ADDR              IPv4 address to listen on (default 127.0.0.1)\n"
            "  --port N                 port (default 8080)\n"
            "  --policy P               affinity (default) or round-robin (for comparison)\n"
            "  --affinity-blocks N      prompt blocks in the affinity key (default 4)\n"
            "  --block-size N           tokens per block (default: the replicas' vllm:cache_config_info)\n"
            "  --load-threshold N       leave the top replica when its waiting+running requests exceed the\n"
            "                           least loaded replica's by more than N (default 4)\n"
            "  --health-interval S      seconds between health checks / load scrapes (default 1)\n"
            "  --backend-timeout S      seconds a replica may take for one response (default 600)\n"
            "  --max-body BYTES         largest request body (default 8388608)\n"
            "  --max-connections N      concurrent client connections (default 256)\n",
            TK_ROUTER_MAX_BACKENDS);
}

/* The template serve would use: --chat-template (a preset name or a file),
 * else the model's (its file's, else the preset its vocabulary calls for);
 * NULL (message texts key the prompt) when there is none or only
 * --tokenizer was given. */
static int load_template(tk_router *r, const char *model, const char *tmpl_file, tk_err *err) {
    const char *src = tmpl_file ? tk_chat_preset_source(tmpl_file) : NULL, *origin;
    char *text = NULL;
    size_t len;
    if (tmpl_file && !src) {
        if (tk_read_file(tmpl_file, &text, &len, err)) return -1;
    } else if (!src && model) {
        if (tk_model_chat_template(model, r->tok, &text, &origin, err)) return -1;
    } else if (!src) {
        const char *preset = tk_chat_preset_detect(r->tok);
        src = preset ? tk_chat_preset_source(preset) : NULL;
    }
    if (text) src = text;
    int rc = src ? tk_chat_template_parse(src, &r->tmpl, err) : 0;
    free(text);
    return rc;
}

/* A URL becomes a /metrics label value and part of a request line. */
static bool plain_url(const char *u) {
    for (const unsigned char *p = (const unsigned char *)u; *p; p++)
        if (*p <= ' ' || *p == 0x7f || *p == '"' || *p == '\\') return false;
    return true;
}

static int run_router(tk_router *r, int argc, char **argv, const char **urls, int n_urls) {
    const char *model = NULL, *tokenizer = NULL, *tmpl_file = NULL, *host = "127.0.0.1", *policy = "affinity";
    int port = 8080, block_size = 0, max_conn = 256, max_body = 8 << 20;
    float health = 1, timeout = 600;
    r->affinity_blocks = 4;
    r->load_threshold = 4;
    const tk_opt opts[] = {
        TK_OPT_S("-m|--model", &model),
        TK_OPT_S("--tokenizer", &tokenizer),
        TK_OPT_S("--chat-template", &tmpl_file),
        TK_OPT_S("--host", &host),
        TK_OPT_I("--port", &port, 0, 65535),
        TK_OPT_S("--policy", &policy),
        TK_OPT_I("--affinity-blocks", &r->affinity_blocks, 1, 64),
        TK_OPT_I("--block-size", &block_size, 1, 4096),
        TK_OPT_I("--load-threshold", &r->load_threshold, 0, 1 << 20),
        TK_OPT_F("--health-interval", &health, 0.05, 3600),
        TK_OPT_F("--backend-timeout", &timeout, 1, 86400),
        TK_OPT_I("--max-body", &max_body, 1024, 1 << 30),
        TK_OPT_I("--max-connections", &max_conn, 1, 65536),
    };
    const tk_cli cli = {.cmd = "router", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts)};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    if (n_urls == 0) {
        fprintf(stderr, "tokamak router: give at least one --backend URL\n");
        return 2;
    }
    if (n_urls > TK_ROUTER_MAX_BACKENDS) {
        fprintf(stderr, "tokamak router: at most %d --backend replicas (got %d)\n", TK_ROUTER_MAX_BACKENDS, n_urls);
        return 2;
    }
    if (!model && !tokenizer) {
        fprintf(stderr, "tokamak router: give -m MODEL or --tokenizer PATH (the prompts are keyed by tokens)\n");
        return 2;
    }
    if (strcmp(policy, "affinity") && strcmp(policy, "round-robin")) {
        fprintf(stderr, "tokamak router: --policy is affinity or round-robin, not '%s'\n", policy);
        return 2;
    }
    r->policy = strcmp(policy, "round-robin") ? TK_POLICY_AFFINITY : TK_POLICY_ROUND_ROBIN;
    tk_err err;
    for (int i = 0; i < n_urls; i++) {
        tk_backend *b = &r->backends[i];
        if (tk_url_parse(urls[i], &b->u, &err)) {
            fprintf(stderr, "tokamak router: --backend %s: %s\n", urls[i], err.msg);
            return 2;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(urls[j], urls[i])) {
                fprintf(stderr, "tokamak router: --backend %s given twice\n", urls[i]);
                return 2;
            }
        if (!plain_url(urls[i])) {
            fprintf(stderr, "tokamak router: --backend %s: quotes, backslashes, spaces and control characters are "
                            "not allowed\n", urls[i]);
            return 2;
        }
        b->url = urls[i];
        b->id_hash = tk_router_hash(TK_ROUTER_HASH_SEED, urls[i], strlen(urls[i]));
    }
    r->n_backends = n_urls;
    atomic_store(&r->block_size, block_size);
    r->health_interval_s = health;
    r->backend_timeout_s = timeout;
    r->max_body_bytes = (size_t)max_body;
    r->max_response_bytes = (size_t)32 << 20;
    if (tk_tokenizer_open(model ? model : tokenizer, model ? tokenizer : NULL, &r->tok, &err) ||
        load_template(r, model, tmpl_file, &err)) {
        fprintf(stderr, "tokamak router: %s\n", err.msg);
        return 1;
    }
    int bos = tk_tokenizer_bos(r->tok), eos = tk_tokenizer_eos(r->tok);
    r->bos_text = strdup(bos >= 0 ? tk_tokenizer_piece(r->tok, bos) : "");
    r->eos_text = strdup(eos >= 0 ? tk_tokenizer_piece(r->tok, eos) : "");
    if (!r->bos_text || !r->eos_text) return 1;

    /* SIGINT/SIGTERM go to tk_router_serve's sigwait: block them before any thread starts. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    pthread_mutex_init(&r->stop_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    tk_router_poll_backends(r); /* know who is up before the first request */
    pthread_t poller;
    if (pthread_create(&poller, NULL, tk_router_poll_thread, r)) {
        fprintf(stderr, "tokamak router: cannot start the health-check thread\n");
        return 1;
    }
    int rc = tk_router_serve(r, host, port, max_conn, &stop, &err);
    if (rc) fprintf(stderr, "tokamak router: %s\n", err.msg);
    pthread_mutex_lock(&r->stop_mu);
    atomic_store(&r->stop, true);
    pthread_cond_broadcast(&r->stop_cv);
    pthread_mutex_unlock(&r->stop_mu);
    pthread_join(poller, NULL);
    pthread_cond_destroy(&r->stop_cv);
    pthread_mutex_destroy(&r->stop_mu);
    return rc ? 1 : 0;
}

int tk_cmd_router(int argc, char **argv) {
    char **rest = malloc(((size_t)argc + 1) * sizeof *rest);
    const char **urls = malloc(((size_t)argc + 1) * sizeof *urls);
    tk_router *r = calloc(1, sizeof *r);
    int n_urls = 0, status = 2;
    if (!rest || !urls || !r) {
        fprintf(stderr, "tokamak router: out of memory\n");
    } else {
        int n = tk_args_take_repeated("router", "--backend", argc, argv, rest, urls, &n_urls);
        if (n >= 0) status = run_router(r, n, rest, urls, n_urls);
        tk_chat_template_free(r->tmpl);
        tk_tokenizer_free(r->tok);
        free(r->bos_text);
        free(r->eos_text);
    }
    free(r);
    free(rest);
    free(urls);
    return status;
}
