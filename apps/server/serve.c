/* tokamak serve: the OpenAI-compatible HTTP server.  This thread owns the
 * engine loop (wait for work, step); libmicrohttpd's threads handle the
 * connections (see server.h). */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <tokamak.h>

#include "common/args.h"
#include "commands.h"
#include "server.h"

/* The only mutable global: set by the signal handler, polled by the loop. */
static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: tokamak serve -m MODEL [options]\n"
            "  -m, --model PATH         .gguf, llama2.c .bin (with --tokenizer) or Hugging Face directory\n"
            "  --tokenizer PATH         tokenizer override\n"
            "  --host ADDR              numeric address to listen on (default 127.0.0.1)\n"
            "  --port N                 port (default 8000; 0: any free port, printed at startup)\n"
            "  --api-key KEY            require 'Authorization: Bearer KEY' on /v1/* (visible to other local\n"
            "                           users in ps: prefer --api-key-file or TOKAMAK_API_KEY)\n"
            "  --api-key-file FILE      the API key is the file's first line (trimmed)\n"
            "  --allowed-host NAME      without an API key on a loopback address, also answer requests whose\n"
            "                           Host is NAME (repeatable; '*': any); others get 403\n"
            "  --model-name NAME        name served in /v1/models and checked in 'model' (default: file name)\n"
            "  --chat-template FILE|NAME  Jinja chat template overriding the model's, or a built-in preset:\n"
            "                           gemma, llama3, chatml, phi3, mistral, llama2 (without either, the\n"
            "                           model file's template, else the preset its vocabulary calls for)\n"
            "  --tool-format FORMAT     how the model writes tool calls: hermes, llama3, mistral, gemma, none\n"
            "                           (default: from the chat template's markers)\n"
            "  -t, --threads N          compute threads (default: all cores)\n"
            "  -c, --ctx-size N         context length per sequence (default: the model's)\n"
            "  --max-seqs N             sequences decoded together (default 16)\n"
            "  --max-batch-tokens N     tokens per forward pass (default 128, at least --max-seqs)\n"
            "  --kv-memory SIZE         KV cache pool, e.g. 512M, 2G (default: max-seqs full contexts)\n"
            "  --block-size N           tokens per KV block (default 64)\n"
            "  --kv-type TYPE           KV cache element type: f16 (default), f32, q8_0\n"
            "%s"
            "  --no-prefix-cache        disable automatic prefix caching\n"
            "  --no-window-release      keep KV blocks that left the sliding window (models whose layers all\n"
            "                           slide release them by default)\n"
            "  --max-queue N            waiting requests before 429 (default 256)\n"
            "  --max-connections N      concurrent HTTP connections (default 256)\n"
            "  --max-connections-per-ip N  concurrent connections from one client address (default 64; 0: no cap)\n"
            "  --header-timeout S       seconds a request's headers may take to arrive (default 10)\n"
            "  --body-timeout S         seconds a request's body may take after its headers (default 30)\n"
            "  --idle-timeout S         seconds without traffic before a connection is closed (default 60;\n"
            "                           time spent generating does not count)\n"
            "  --max-response-size SIZE  largest non-streaming answer kept, e.g. 32M (default 32M; larger: 400,\n"
            "                           streaming has no such limit)\n"
            "  --max-tokens N           tokens one completion may generate: the length of a chat request that\n"
            "                           sets no max_tokens, and a cap on those that ask for more (they end\n"
            "                           with finish_reason \"length\"; default: no cap)\n"
            "  --parse-special-in-content  parse control-token text (e.g. <|im_start|>) in chat message content\n"
            "                           as control tokens (default: plain text, only the template's are parsed)\n"
            "speculative decoding (server-wide defaults; a request may override them with\n"
            "\"speculative\": {\"mode\": \"off\"|\"ngram\"|\"draft\", \"draft_max\": N, \"draft_min\": N}):\n"
            "%s",
            tk_tp_usage, tk_spec_usage);
}

/* "512M", "2G", "65536", "1.5G" -> bytes. */
static int parse_size(const char *s, size_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v > 0)) return -1;
    double mul = 1;
    if (*end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': mul = 1024.0; break;
        case 'M': mul = 1024.0 * 1024; break;
        case 'G': mul = 1024.0 * 1024 * 1024; break;
        case 'B': mul = 1; break;
        default: return -1;
        }
        end++;
        if (toupper((unsigned char)*end) == 'I') end++;
        if (toupper((unsigned char)*end) == 'B') end++;
        if (*end) return -1;
    }
    v *= mul;
    if (v > 1e15) return -1;
    *out = (size_t)v;
    return 0;
}

static char *default_model_name(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    char *name = strndup(path + b, n - b);
    if (!name) return NULL;
    char *dot = strrchr(name, '.');
    if (dot && dot != name && (!strcmp(dot, ".gguf") || !strcmp(dot, ".bin"))) *dot = 0;
    return name;
}

/* The first line of a file, trimmed, into key[cap]; -1 after printing why. */
static int read_key_file(const char *path, char *key, size_t cap) {
    char *text;
    tk_err err;
    if (tk_read_file(path, &text, NULL, &err)) {
        fprintf(stderr, "tokamak serve: --api-key-file: %s\n", err.msg);
        return -1;
    }
    char *b = text, *e;
    while (*b == ' ' || *b == '\t') b++;
    e = b + strcspn(b, "\r\n");
    while (e > b && (e[-1] == ' ' || e[-1] == '\t')) e--;
    size_t n = (size_t)(e - b);
    int rc = -1;
    if (n == 0) fprintf(stderr, "tokamak serve: --api-key-file %s: the first line is empty\n", path);
    else if (n >= cap) fprintf(stderr, "tokamak serve: --api-key-file %s: the key is over %zu bytes\n", path, cap - 1);
    else {
        memcpy(key, b, n);
        key[n] = 0;
        rc = 0;
    }
    free(text);
    return rc;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ULL;
    return h;
}

/* One scheduler iteration; an internal error is reported, not fatal. */
static int step_once(tk_engine *e) {
    tk_err err;
    int live = tk_engine_step(e, &err);
    if (live < 0) {
        fprintf(stderr, "tokamak serve: engine step failed: %s\n", err.msg);
        usleep(10000); /* do not spin on a persistent failure */
    }
    return live;
}

static int serve(int argc, char **argv, const char *const *hosts, int n_hosts);

int tk_cmd_serve(int argc, char **argv) {
    char **rest = malloc(((size_t)argc + 1) * sizeof *rest);
    const char **hosts = malloc(((size_t)argc + 1) * sizeof *hosts);
    int n_hosts = 0, n = rest && hosts ? tk_args_take_repeated("serve", "--allowed-host", argc, argv, rest, hosts, &n_hosts) : -1;
    if (!rest || !hosts) fprintf(stderr, "tokamak serve: out of memory\n");
    int status = n < 0 ? 2 : serve(n, rest, hosts, n_hosts);
    free(rest);
    free(hosts);
    return status;
}

static int serve(int argc, char **argv, const char *const *hosts, int n_hosts) {
    tk_engine_config cfg = {.max_seqs = 16};
    tk_server_config scfg = {.host = "127.0.0.1", .port = 8000, .max_connections = 256,
                             .max_connections_per_ip = 64, .header_timeout_s = 10, .body_timeout_s = 30,
                             .idle_timeout_s = 60, .max_response_bytes = (size_t)32 << 20};
    const char *tmpl_file = NULL, *kv_mem = NULL, *max_resp = NULL, *key_file = NULL, *tool_format = NULL;
    char key[4096];
    scfg.allowed_hosts = hosts;
    scfg.n_allowed_hosts = n_hosts;
    tk_spec_args spec = {0};
    const tk_opt opts[] = {
        TK_OPT_S("-m|--model", &cfg.model_path),
        TK_OPT_S("--tokenizer", &cfg.tokenizer_path),
        TK_OPT_S("--host", &scfg.host),
        TK_OPT_I("--port", &scfg.port, 0, 65535),
        TK_OPT_S("--api-key", &scfg.api_key),
        TK_OPT_S("--api-key-file", &key_file),
        TK_OPT_S("--model-name", &scfg.model_name),
        TK_OPT_S("--chat-template", &tmpl_file),
        TK_OPT_S("--tool-format", &tool_format),
        TK_OPT_I("-t|--threads", &cfg.n_threads, 1, 1024),
        TK_OPT_I("-c|--ctx-size", &cfg.ctx_len, 1, 1 << 24),
        TK_OPT_I("--max-seqs", &cfg.max_seqs, 1, 4096),
        TK_OPT_I("--max-batch-tokens", &cfg.max_batch_tokens, 1, 1 << 20),
        TK_OPT_S("--kv-memory", &kv_mem),
        TK_OPT_I("--block-size", &cfg.kv_block_size, 1, 4096),
        TK_OPT_S("--kv-type", &cfg.kv_type),
        TK_OPT_I("--tp", &cfg.tp, 1, TK_TP_MAX),
        TK_OPT_F("--tp-timeout", &cfg.tp_timeout, 0.001, 1e6),
        TK_OPT_ON("--no-prefix-cache", &cfg.no_prefix_cache),
        TK_OPT_ON("--no-window-release", &cfg.no_window_release),
        TK_OPT_I("--max-queue", &cfg.max_waiting, 1, 1 << 20),
        TK_OPT_I("--max-connections", &scfg.max_connections, 1, 65536),
        TK_OPT_I("--max-connections-per-ip", &scfg.max_connections_per_ip, 0, 65536),
        TK_OPT_I("--header-timeout", &scfg.header_timeout_s, 1, 3600),
        TK_OPT_I("--body-timeout", &scfg.body_timeout_s, 1, 3600),
        TK_OPT_I("--idle-timeout", &scfg.idle_timeout_s, 1, 86400),
        TK_OPT_S("--max-response-size", &max_resp),
        TK_OPT_I("--max-tokens", &scfg.max_tokens, 1, 1 << 24),
        TK_OPT_ON("--parse-special-in-content", &scfg.parse_special_in_content),
    };
    const tk_cli cli = {.cmd = "serve", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts), .spec = &spec};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    if (tk_args_missing(&cli, cfg.model_path, "-m MODEL")) return 2;
    /* A step's prefill chunk delays every running stream's next token and
     * the first token of every prompt in it: 128 tokens is ~0.4 s of prefill
     * on 2 cores, where 512 would be ~1.5 s (docs/serving.md: TTFT p50 at 16
     * clients 0.81-0.88 s vs 1.11-1.20 s, same throughput). */
    if (!cfg.max_batch_tokens) cfg.max_batch_tokens = cfg.max_seqs > 128 ? cfg.max_seqs : 128;
    if (kv_mem && parse_size(kv_mem, &cfg.kv_memory)) {
        fprintf(stderr, "tokamak serve: --kv-memory expects a size like 512M or 2G, got '%s'\n", kv_mem);
        return 2;
    }
    if (max_resp && parse_size(max_resp, &scfg.max_response_bytes)) {
        fprintf(stderr, "tokamak serve: --max-response-size expects a size like 32M, got '%s'\n", max_resp);
        return 2;
    }
    if (key_file && scfg.api_key) {
        fprintf(stderr, "tokamak serve: give --api-key or --api-key-file, not both\n");
        return 2;
    }
    if (key_file) {
        if (read_key_file(key_file, key, sizeof key)) return 2;
        scfg.api_key = key;
    } else if (!scfg.api_key && getenv("TOKAMAK_API_KEY")) {
        scfg.api_key = getenv("TOKAMAK_API_KEY");
        if (!scfg.api_key[0]) {
            fprintf(stderr, "tokamak serve: TOKAMAK_API_KEY is set but empty\n");
            return 2;
        }
    }
    if (scfg.api_key && !scfg.api_key[0]) {
        fprintf(stderr, "tokamak serve: --api-key must not be empty\n");
        return 2;
    }

    tk_err err;
    /* The chat template: --chat-template (a preset name, or a file read
     * first: a bad file fails before the model loads), else the model's
     * (its file's, or the preset its vocabulary calls for), else none: chat
     * requests are then refused. */
    const char *preset = tmpl_file ? tk_chat_preset_source(tmpl_file) : NULL;
    char *tmpl_src = NULL;
    if (tmpl_file && !preset && tk_read_file(tmpl_file, &tmpl_src, NULL, &err)) {
        fprintf(stderr, "tokamak serve: --chat-template: %s (neither a file nor a preset: gemma, llama3, chatml, "
                "phi3, mistral, llama2)\n", err.msg);
        return 1;
    }
    if (tool_format && tk_tool_format_from_name(tool_format) < 0) {
        fprintf(stderr, "tokamak serve: --tool-format must be none, hermes, llama3, mistral or gemma, got '%s'\n",
                tool_format);
        free(tmpl_src);
        return 2;
    }
    /* The tool-call format: --tool-format, else the markers of the template. */
    scfg.tool_format = tool_format ? (tk_tool_format)tk_tool_format_from_name(tool_format)
                                   : tk_tool_format_detect(preset ? preset : tmpl_src);
    tk_chat_template *tmpl = NULL;
    if (tmpl_file && tk_chat_template_parse(preset ? preset : tmpl_src, &tmpl, &err)) {
        fprintf(stderr, "tokamak serve: chat template %s: %s\n", tmpl_file, err.msg);
        free(tmpl_src);
        return 1;
    }
    free(tmpl_src);

    tk_spec_args_apply(&spec, &cfg);
    cfg.require_tokenizer = true;
    tk_engine *e;
    if (tk_engine_open(&cfg, &e, &err)) {
        fprintf(stderr, "tokamak serve: %s\n", err.msg);
        tk_chat_template_free(tmpl);
        return 1;
    }
    if (tk_engine_tp_rank(e) > 0) {
        tk_chat_template_free(tmpl);
        return tk_tp_follow_cmd("serve", e);
    }
    char origin_buf[160];
    const char *tmpl_origin = origin_buf;
    if (tmpl) {
        snprintf(origin_buf, sizeof origin_buf, "%s %s", preset ? "preset" : "file", tmpl_file);
    } else {
        const char *model_tmpl = tk_engine_chat_template(e), *from = tk_engine_chat_template_origin(e);
        if (!strcmp(from, "file"))
            snprintf(origin_buf, sizeof origin_buf, "the model file");
        else if (model_tmpl)
            snprintf(origin_buf, sizeof origin_buf, "preset %s (the model file has none; chosen from its vocabulary)",
                     from);
        if (!tool_format) scfg.tool_format = tk_tool_format_detect(model_tmpl);
        if (model_tmpl && tk_chat_template_parse(model_tmpl, &tmpl, &err)) {
            fprintf(stderr, "tokamak serve: warning: the model's chat template does not parse (%s)\n", err.msg);
            tmpl = NULL;
        }
        if (!tmpl) {
            tmpl_origin = "none: chat requests are refused (the model has no usable template and its vocabulary fits "
                          "no preset; --chat-template FILE|NAME gives one)";
        }
    }
    char *name = scfg.model_name ? strdup(scfg.model_name) : default_model_name(cfg.model_path);
    tk_server *srv = calloc(1, sizeof *srv);
    if (!name || !srv) {
        fprintf(stderr, "tokamak serve: out of memory\n");
        free(name);
        free(srv);
        tk_engine_close(e);
        tk_chat_template_free(tmpl);
        return 1;
    }
    scfg.model_name = name;
    const tk_tokenizer *tok = tk_engine_tokenizer(e);
    int bos = tk_tokenizer_bos(tok), eos = tk_tokenizer_eos(tok);
    srv->bos_text = strdup(bos >= 0 ? tk_tokenizer_piece(tok, bos) : "");
    srv->eos_text = strdup(eos >= 0 ? tk_tokenizer_piece(tok, eos) : "");
    if (getrandom(&srv->id_salt, sizeof srv->id_salt, 0) != (ssize_t)sizeof srv->id_salt)
        srv->id_salt = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid();
    tk_model_summary ms;
    tk_engine_summary(e, &ms);
    uint64_t h = fnv1a(0xcbf29ce484222325ULL, name, strlen(name));
    h = fnv1a(h, &ms.n_params, sizeof ms.n_params);
    h = fnv1a(h, &ms.weight_bytes, sizeof ms.weight_bytes);
    snprintf(srv->fingerprint, sizeof srv->fingerprint, "fp_tokamak_%010llx", (unsigned long long)(h >> 24));

    /* Only this thread takes SIGINT/SIGTERM: block them while MHD creates
     * its threads (which inherit the mask), then unblock here. */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a vanished client must not kill the server */

    int status = 0;
    if (!srv->bos_text || !srv->eos_text || tk_server_start(srv, e, tmpl, &scfg, &err)) {
        fprintf(stderr, "tokamak serve: %s\n", srv->bos_text && srv->eos_text ? err.msg : "out of memory");
        status = 1;
    } else {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        fprintf(stderr, "tokamak serve: model '%s' (%s), context %d, %d KV blocks of %d tokens, chat template: %s, tool calls: %s\n",
                name, ms.format, srv->ctx_len, ms.kv_blocks, ms.kv_block_size, tmpl_origin,
                tk_tool_format_name(scfg.tool_format));
        tk_spec_info si;
        tk_engine_spec_info(e, &si);
        if (si.spec_mode == TK_SPEC_NGRAM || si.spec_mode == TK_SPEC_DRAFT || si.has_draft_model)
            fprintf(stderr, "tokamak serve: speculative decoding by default: %s; draft model: %s; draft length %d..%d\n",
                    si.spec_mode == TK_SPEC_NGRAM ? "prompt lookup" : si.spec_mode == TK_SPEC_DRAFT ? "draft model" : "off",
                    si.has_draft_model ? spec.draft_model : "none", si.draft_min, si.draft_max);
        printf("tokamak serve: listening on http://%s:%d\n", scfg.host, srv->cfg.port);
        fflush(stdout);
        while (!g_stop) {
            tk_engine_wait_for_work(e, 100);
            tk_step_jobs_drain(&srv->step_jobs);
            while (!g_stop && step_once(e) > 0) {
                tk_step_jobs_drain(&srv->step_jobs); /* embeddings between steps of a busy engine */
            }
        }
        fprintf(stderr, "tokamak serve: shutting down\n");
        tk_server_begin_stop(srv);
        /* Request threads see `stopping` within ~100 ms and cancel (streams
         * end with an error event, waiting requests are answered 503, chat
         * template renders stop); keep stepping meanwhile so cancellations
         * are processed.  5 s for clients to read their last bytes, 3 s to
         * drain the engine: the exit comes within 10 s of the signal. */
        double t0 = tk_clock_seconds(TK_CLOCK_WALL);
        while (atomic_load(&srv->active) > 0 && tk_clock_seconds(TK_CLOCK_WALL) - t0 < 5.0)
            if (step_once(e) <= 0) usleep(5000);
        tk_server_stop(srv);
        /* Deliver the final events of cancelled requests (frees them). */
        t0 = tk_clock_seconds(TK_CLOCK_WALL);
        while (step_once(e) > 0 && tk_clock_seconds(TK_CLOCK_WALL) - t0 < 3.0) {
        }
    }
    tk_engine_close(e);
    tk_chat_template_free(tmpl);
    free(srv->bos_text);
    free(srv->eos_text);
    free(srv);
    free(name);
    return status;
}
