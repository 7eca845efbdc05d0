/* The router's HTTP side: reads a request (bounded), keys it by its prompt's
 * first KV blocks, and forwards it to the replicas in tk_router_order's
 * order.  A replica that fails before the first byte of its response is
 * retried on the next; non-streaming responses are buffered whole, so any
 * failure before the answer is retried; a stream that loses its replica
 * after it started ends with an SSE error event and [DONE]. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/strbuf.h"
#include "router.h"

#define MAX_PATH 1024

typedef struct rreq {
    tk_router *r;
    tk_strbuf body;
    bool too_large;
} rreq;

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *ctype, const char *body,
                             size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    enum MHD_Result rc = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *code, const char *msg) {
    json_t *o = json_pack("{s:{s:s,s:s,s:s}}", "error", "message", msg, "type",
                          status >= 500 ? "server_error" : "invalid_request_error", "code", code);
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    enum MHD_Result rc = t ? reply(c, status, "application/json", t, strlen(t)) : MHD_NO;
    free(t);
    return rc;
}

/* ---- the affinity key ---- */

static uint64_t key_of_text(const tk_router *r, const char *text, size_t len, bool add_bos) {
    int cap = 4096, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    tk_err err;
    uint64_t key = 0;
    /* Only the first blocks matter: a prefix of the text is enough when it is long. */
    int bs = atomic_load(&r->block_size);
    size_t want = (size_t)(bs > 0 ? bs : 64) * (size_t)r->affinity_blocks * 16 + 64;
    if (len > want) len = want; /* a cut mid-token changes only the last block's last token */
    if (ids && !tk_tokenize(r->tok, text, len, add_bos && tk_tokenizer_add_bos(r->tok), true, ids, cap, &n, &err))
        key = tk_router_prefix_key(ids, n < cap ? n : cap, bs > 0 ? bs : 64, r->affinity_blocks);
    free(ids);
    return key;
}

/* The chat prompt as serve renders it (the model's template), else the
 * message texts one after another. */
static uint64_t key_of_chat(const tk_router *r, json_t *msgs) {
    size_t n = json_array_size(msgs);
    if (n == 0 || n > 4096) return 0;
    tk_chat_msg *m = calloc(n, sizeof *m);
    if (!m) return 0;
    tk_strbuf joined = {0};
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(e, "role"));
        const char *content = json_string_value(json_object_get(e, "content"));
        m[i] = (tk_chat_msg){role ? role : "user", content ? content : ""};
        tk_strbuf_printf(&joined, "%s\n%s\n", m[i].role, m[i].content);
    }
    char *text = NULL;
    tk_err err;
    uint64_t key;
    if (r->tmpl && !tk_chat_template_render(r->tmpl, m, (int)n, true, r->bos_text, r->eos_text, &text, &err))
        key = key_of_text(r, text, strlen(text), false);
    else
        key = joined.data ? key_of_text(r, joined.data, joined.len, true) : 0;
    free(text);
    free(m);
    tk_strbuf_free(&joined);
    return key;
}

static uint64_t request_key(const tk_router *r, json_t *req, bool chat) {
    if (chat) return key_of_chat(r, json_object_get(req, "messages"));
    json_t *p = json_object_get(req, "prompt");
    if (json_is_array(p) && json_array_size(p) > 0 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_string(p)) return key_of_text(r, json_string_value(p), json_string_length(p), true);
    if (json_is_array(p)) { /* token ids */
        int ids[4096], n = 0;
        for (size_t i = 0; i < json_array_size(p) && n < 4096; i++)
            ids[n++] = (int)json_integer_value(json_array_get(p, i));
        int bs = atomic_load(&r->block_size);
        return tk_router_prefix_key(ids, n, bs > 0 ? bs : 64, r->affinity_blocks);
    }
    return 0;
}

/* ---- forwarding ---- */

typedef struct forward {
    tk_router *r;
    char path[MAX_PATH];
    char *body;
    size_t body_len;
    char *api_key;
    int order[TK_ROUTER_MAX_BACKENDS], n_order;
    /* the stream's hand-off between the backend thread and MHD's reader */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tk_strbuf out;
    size_t out_off;
    bool started, done, client_gone;
    bool overflow; /* a buffered response over max_response_bytes */
    int backend_status; /* written by tk_http_request before the first body byte */
    int status, refs;
} forward;

static void forward_unref(forward *f) {
    pthread_mutex_lock(&f->mu);
    bool last = --f->refs == 0;
    pthread_mutex_unlock(&f->mu);
    if (!last) return;
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    tk_strbuf_free(&f->out);
    free(f->body);
    free(f->api_key);
    free(f);
}

static int take_buffered(void *user, const char *data, size_t n) {
    forward *f = user;
    if (f->out.len + n > f->r->max_response_bytes) {
        f->overflow = true;
        return 1;
    }
    tk_strbuf_add(&f->out, data, n);
    return f->out.failed;
}

/* One try of the request on the k-th replica of f's order (k > 0: a
 * retry), counted in the replica's metrics; the answer goes to take. */
static int attempt(forward *f, int k, const char *method, int *status, tk_http_body_cb take) {
    tk_router *r = f->r;
    tk_backend *b = &r->backends[f->order[k]];
    if (k > 0) atomic_fetch_add(&r->retries, 1);
    atomic_fetch_add(&b->requests, 1);
    char path[sizeof b->u.path + sizeof f->path];
    snprintf(path, sizeof path, "%s%s", b->u.path, f->path);
    tk_err err;
    atomic_fetch_add(&b->inflight, 1);
    int rc = tk_http_request(&b->u, method, path, f->api_key, f->body, f->body ? f->body_len : 0,
                             r->backend_timeout_s, status, take, f, &err);
    atomic_fetch_sub(&b->inflight, 1);
    return rc;
}

/* Non-streaming: each replica in turn until one answers (a 503 counts as
 * not answering: that replica is full or stopping; the last one's 503 is
 * passed on when no replica answered). */
static enum MHD_Result forward_buffered(struct MHD_Connection *c, forward *f, const char *method) {
    tk_router *r = f->r;
    int status = 0, rc = -1;
    for (int k = 0; k < f->n_order; k++) {
        tk_backend *b = &r->backends[f->order[k]];
        f->out.len = 0;
        f->overflow = false;
        rc = attempt(f, k, method, &status, take_buffered);
        if (rc == 0 && f->overflow) {
            atomic_fetch_add(&r->failures, 1);
            return reply_error(c, 502, "response_too_large", "the replica's response is over the router's limit");
        }
        if (rc == 0 && status != 503 && !f->out.failed)
            return reply(c, (unsigned)status, "application/json", f->out.data ? f->out.data : "", f->out.len);
        atomic_fetch_add(&b->failures, 1);
        if (rc) atomic_store(&b->healthy, false); /* until its next health check says otherwise */
    }
    atomic_fetch_add(&r->failures, 1);
    if (rc == 0 && status == 503 && !f->out.failed)
        return reply(c, 503, "application/json", f->out.data ? f->out.data : "", f->out.len);
    return reply_error(c, 502, "no_backend", "no replica answered the request");
}

static int take_stream(void *user, const char *data, size_t n) {
    forward *f = user;
    pthread_mutex_lock(&f->mu);
    /* A slow client: hold the replica back rather than buffer without bound. */
    while (!f->client_gone && f->out.len - f->out_off > f->r->max_response_bytes) {
        struct timespec ts = tk_clock_deadline(200);
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    if (f->out_off == f->out.len) f->out.len = f->out_off = 0;
    tk_strbuf_add(&f->out, data, n);
    f->started = true;
    f->status = f->backend_status;
    bool stop = f->client_gone || f->out.failed;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return stop;
}

static void *stream_thread(void *arg) {
    forward *f = arg;
    tk_router *r = f->r;
    int status = 0, rc = -1;
    for (int k = 0; k < f->n_order; k++) {
        tk_backend *b = &r->backends[f->order[k]];
        rc = attempt(f, k, "POST", &f->backend_status, take_stream);
        pthread_mutex_lock(&f->mu);
        bool started = f->started, gone = f->client_gone;
        status = f->backend_status;
        if (rc == 0 && !started) f->status = status; /* an answer without a body */
        pthread_mutex_unlock(&f->mu);
        if (rc == 0 && status == 503 && !started) rc = -1;
        if (rc == 0 || gone) break;
        atomic_fetch_add(&b->failures, 1);
        atomic_store(&b->healthy, false);
        if (started) break; /* bytes went out: too late to retry */
    }
    pthread_mutex_lock(&f->mu);
    if (rc && f->started && !f->client_gone) {
        atomic_fetch_add(&r->stream_errors, 1);
        tk_strbuf_adds(&f->out, "data: {\"error\":{\"message\":\"the replica serving this stream failed\","
                                "\"type\":\"server_error\",\"code\":\"backend_failed\"}}\n\ndata: [DONE]\n\n");
    } else if (rc && !f->started) {
        atomic_fetch_add(&r->failures, 1);
    }
    f->done = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    forward_unref(f);
    return NULL;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    forward *f = cls;
    pthread_mutex_lock(&f->mu);
    while (f->out_off == f->out.len && !f->done) {
        struct timespec ts = tk_clock_deadline(1000);
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    ssize_t n = MHD_CONTENT_READER_END_OF_STREAM;
    if (f->out_off < f->out.len) {
        size_t k = f->out.len - f->out_off < max ? f->out.len - f->out_off : max;
        memcpy(buf, f->out.data + f->out_off, k);
        f->out_off += k;
        n = (ssize_t)k;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return n;
}

static void stream_free(void *cls) {
    forward *f = cls;
    pthread_mutex_lock(&f->mu);
    f->client_gone = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    forward_unref(f);
}

static enum MHD_Result forward_stream(struct MHD_Connection *c, forward *f) {
    f->refs = 2; /* this thread (then MHD's reader) and the backend thread */
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    bool ok = !pthread_create(&t, &a, stream_thread, f);
    pthread_attr_destroy(&a);
    if (!ok) {
        f->refs = 1;
        forward_unref(f);
        return reply_error(c, 503, "overloaded", "cannot start a thread for the stream");
    }
    pthread_mutex_lock(&f->mu);
    while (!f->started && !f->done) pthread_cond_wait(&f->cv, &f->mu);
    bool failed = !f->started && f->done && f->status == 0;
    int status = f->status ? f->status : 200;
    pthread_mutex_unlock(&f->mu);
    if (failed) {
        forward_unref(f);
        return reply_error(c, 502, "no_backend", "no replica answered the request");
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, f, stream_free);
    if (!resp) {
        stream_free(f);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, status == 200 ? "text/event-stream" : "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static forward *forward_new(tk_router *r, const char *url, struct MHD_Connection *c, rreq *q) {
    forward *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->r = r;
    f->refs = 1;
    pthread_mutex_init(&f->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(f->path, sizeof f->path, "%s", url);
    if (q->body.len) {
        f->body = q->body.data;
        f->body_len = q->body.len;
        q->body = (tk_strbuf){0};
    }
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth && !strncmp(auth, "Bearer ", 7) && strlen(auth) < 4096) f->api_key = strdup(auth + 7);
    return f;
}

/* ---- the router's own endpoints ---- */

static char *metrics_text(tk_router *r) {
    tk_strbuf b = {0};
    struct {
        const char *name, *help;
        atomic_ullong *v;
    } totals[] = {
        {"tokamak_router_requests_total", "Requests received.", &r->requests},
        {"tokamak_router_retries_total", "Attempts on a further replica after one failed.", &r->retries},
        {"tokamak_router_failures_total", "Requests no replica answered (502).", &r->failures},
        {"tokamak_router_affinity_top_total", "Requests sent to their prefix's top-ranked replica.",
         &r->affinity_top},
        {"tokamak_router_affinity_diverted_total", "Requests the load rule moved off the top-ranked replica.",
         &r->affinity_diverted},
        {"tokamak_router_stream_errors_total", "Streams cut by a replica failure after they started.",
         &r->stream_errors},
        {"tokamak_router_rejected_total", "Requests refused by the router (size, method, route).", &r->rejected},
    };
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++)
        tk_strbuf_printf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", totals[i].name, totals[i].help,
                         totals[i].name, totals[i].name, (unsigned long long)atomic_load(totals[i].v));
    struct {
        const char *name, *type, *help;
    } per[] = {
        {"tokamak_router_backend_requests_total", "counter", "Attempts sent to each replica."},
        {"tokamak_router_backend_failures_total", "counter", "Failed attempts on each replica."},
        {"tokamak_router_backend_healthy", "gauge", "1 if the replica passed its last health check."},
        {"tokamak_router_backend_load", "gauge", "The replica's waiting + running requests at the last scrape."},
        {"tokamak_router_backend_kv_usage", "gauge", "The replica's KV cache use at the last scrape."},
    };
    for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
        tk_strbuf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", per[k].name, per[k].help, per[k].name, per[k].type);
        for (int i = 0; i < r->n_backends; i++) {
            tk_backend *be = &r->backends[i];
            double v = k == 0   ? (double)atomic_load(&be->requests)
                       : k == 1 ? (double)atomic_load(&be->failures)
                       : k == 2 ? (double)atomic_load(&be->healthy)
                       : k == 3 ? (double)atomic_load(&be->load)
                                : atomic_load(&be->kv_permille) / 1000.0;
            tk_strbuf_printf(&b, "%s{backend=\"%s\"} %.17g\n", per[k].name, be->url, v);
        }
    }
    if (b.failed) {
        tk_strbuf_free(&b);
        return NULL;
    }
    return b.data;
}

static bool any_healthy(tk_router *r) {
    for (int i = 0; i < r->n_backends; i++)
        if (atomic_load(&r->backends[i].healthy)) return true;
    return false;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    (void)version;
    tk_router *r = cls;
    rreq *q = *con_cls;
    if (!q) {
        q = calloc(1, sizeof *q);
        if (!q) return MHD_NO;
        q->r = r;
        *con_cls = q;
        atomic_fetch_add(&r->requests, 1);
        return MHD_YES;
    }
    if (*upload_size) {
        if (q->body.len + *upload_size > r->max_body_bytes) q->too_large = true;
        else tk_strbuf_add(&q->body, upload_data, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    bool is_get = !strcmp(method, "GET"), is_post = !strcmp(method, "POST");
    bool gen = !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions");
    if (q->too_large || q->body.failed) {
        atomic_fetch_add(&r->rejected, 1);
        return reply_error(c, 413, "request_too_large", "request body over the router's --max-body");
    }
    if (is_get && !strcmp(url, "/health")) {
        bool ok = any_healthy(r);
        const char *t = ok ? "{\"status\":\"ok\"}" : "{\"status\":\"no healthy replica\"}";
        return reply(c, ok ? 200 : 503, "application/json", t, strlen(t));
    }
    if (is_get && !strcmp(url, "/metrics")) {
        char *t = metrics_text(r);
        enum MHD_Result rc = t ? reply(c, 200, "text/plain; version=0.0.4", t, strlen(t)) : MHD_NO;
        free(t);
        return rc;
    }
    bool models = !strncmp(url, "/v1/models", 10) && (url[10] == 0 || url[10] == '/');
    if (!(gen && is_post) && !(models && is_get)) {
        atomic_fetch_add(&r->rejected, 1);
        return gen || models ? reply_error(c, 405, "method_not_allowed", "method not allowed")
                             : reply_error(c, 404, "not_found", "not found");
    }
    if (strlen(url) >= MAX_PATH) return reply_error(c, 414, "uri_too_long", "URL too long");
    uint64_t key = 0;
    bool stream = false;
    if (gen) {
        json_error_t je;
        json_t *req = json_loadb(q->body.data ? q->body.data : "", q->body.len, 0, &je);
        if (!json_is_object(req)) {
            json_decref(req);
            atomic_fetch_add(&r->rejected, 1);
            return reply_error(c, 400, "invalid_json", "the body is not a JSON object");
        }
        stream = json_is_true(json_object_get(req, "stream"));
        key = request_key(r, req, !strcmp(url, "/v1/chat/completions"));
        json_decref(req);
    }
    forward *f = forward_new(r, url, c, q);
    if (!f) return MHD_NO;
    bool diverted;
    f->n_order = tk_router_order(r, key, f->order, &diverted);
    if (gen && r->policy == TK_POLICY_AFFINITY) atomic_fetch_add(diverted ? &r->affinity_diverted : &r->affinity_top, 1);
    if (stream) return forward_stream(c, f);
    enum MHD_Result rc = forward_buffered(c, f, gen ? "POST" : "GET");
    forward_unref(f);
    return rc;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t) {
    (void)cls, (void)c, (void)t;
    rreq *q = *con_cls;
    if (!q) return;
    tk_strbuf_free(&q->body);
    free(q);
    *con_cls = NULL;
}

int tk_router_serve(tk_router *r, const char *host, int port, int max_connections, const sigset_t *stop_signals,
                    tk_err *err) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) return tk_err_set(err, "--host must be an IPv4 address, got '%s'", host);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, r, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, r, MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)60, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)256 * 1024, MHD_OPTION_LISTENING_ADDRESS_REUSE,
        (unsigned)1, MHD_OPTION_END);
    if (!d) return tk_err_set(err, "cannot listen on %s:%d", host, port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    if (di && di->port) port = di->port; /* --port 0: the one the system chose */
    printf("tokamak router: listening on http://%s:%d over %d replicas (%s)\n", host, port, r->n_backends,
           r->policy == TK_POLICY_ROUND_ROBIN ? "round-robin" : "prefix affinity");
    fflush(stdout);
    int sig;
    sigwait(stop_signals, &sig); /* the caller blocked them in every thread */
    MHD_stop_daemon(d);
    return 0;
}
