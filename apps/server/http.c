/* HTTP side of the server: routing, authentication, body collection,
 * submission to the engine, and response/SSE formatting. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>
#include <tokamak.h>

#include "api.h"
#include "event_queue.h"
#include "common/strbuf.h"
#include "server.h"
#include "web.h"

enum route { R_NONE, R_COMPLETIONS, R_CHAT, R_MODELS, R_MODEL, R_HEALTH, R_METRICS, R_STATS, R_WEB, R_TOKENIZE,
             R_DETOKENIZE, R_EMBEDDINGS };

static bool is_post_route(int route) {
    return route == R_COMPLETIONS || route == R_CHAT || route == R_TOKENIZE || route == R_DETOKENIZE ||
           route == R_EMBEDDINGS;
}

/* Non-streaming logprobs are kept serialized, as the comma-separated
 * elements of each array of the logprobs object (chat: content;
 * completions: tokens, token_logprobs, top_logprobs, text_offset): a few
 * bytes per value where jansson objects would take ~20x that. */
#define LP_ARRAYS 4

typedef struct choice_st {
    tk_strbuf text;        /* non-streaming: the whole text */
    tk_strbuf lp[LP_ARRAYS]; /* non-streaming logprobs, see above */
    int32_t prev;        /* previous token, for detokenizing alternatives */
    size_t text_off;     /* bytes of text so far (completions text_offset) */
    int n_generated;
    char finish[16];
    bool done;
    tk_strbuf acc;       /* streaming with tools: the whole text, of which `sent` bytes went out as content */
    size_t sent;
} choice_st;

typedef struct http_req {
    tk_server *srv;
    struct MHD_Connection *conn;
    atomic_int refs;      /* the connection + the streaming response */
    int route;
    bool responded;       /* a response is queued */
    bool too_large;
    bool early_413;       /* answered 413 before the whole body arrived: drain the rest at the end */
    char *body;
    size_t body_len, body_cap;
    tk_api_req api;
    bool have_api;
    tk_event_queue *events;
    uint64_t req_id;
    bool finished;        /* every sample's final event has been taken */
    bool failed;          /* an engine error or lost event */
    char error[256];      /* the engine's reason, when the request caused the failure (its constraint) */
    int n_prompt, n_cached;
    char id[64];
    time_t created;
    choice_st *ch;
    int n_ch;
    tk_event_batch batch;
    tk_strbuf out;          /* streaming: formatted bytes not yet handed to MHD */
    size_t held;          /* non-streaming: bytes of text and logprobs kept for the answer */
    bool stream_end;      /* streaming: [DONE] is in `out` */
    double last_peek;
    double last_probe;    /* when the peer's end of the connection was last written to, to tell a half-close */
    bool http10;          /* an HTTP/1.0 request: no interim responses */
    char *tool_schema;    /* tool_choice required / named: the call's JSON Schema */
} http_req;

static void req_free(http_req *r) {
    tk_event_queue_unref(r->events);
    free(r->body);
    free(r->tool_schema);
    if (r->have_api) tk_api_req_free(&r->api);
    for (int i = 0; i < r->n_ch; i++) {
        tk_strbuf_free(&r->ch[i].text);
        tk_strbuf_free(&r->ch[i].acc);
        for (int k = 0; k < LP_ARRAYS; k++) tk_strbuf_free(&r->ch[i].lp[k]);
    }
    free(r->ch);
    tk_event_batch_free(&r->batch);
    tk_strbuf_free(&r->out);
    free(r);
}

static void req_unref(http_req *r) {
    if (atomic_fetch_sub(&r->refs, 1) == 1) req_free(r);
}

/* Cancels the engine request unless it already finished; the engine then
 * frees its KV blocks at its next step. */
static void req_cancel(http_req *r) {
    if (r->events && !r->finished) {
        tk_engine_cancel(r->srv->engine, r->req_id);
        r->finished = true; /* nothing more will be read */
    }
}

typedef enum peer_state { PEER_OPEN, PEER_GONE, PEER_PROBE } peer_state;

/* Did the client hang up?  A non-blocking peek, so a blocked request
 * notices even while no token is being written: an error means the
 * connection is gone.  0 bytes (end of file) is a client that closed, or
 * one that only shut down its sending side and still waits for the answer:
 * PEER_PROBE (about once a second) asks the caller to write something
 * harmless, which a closed client answers with a reset that the next peek
 * sees as an error. */
static peer_state client_state(http_req *r) {
    double now = tk_clock_seconds(TK_CLOCK_WALL);
    if (now - r->last_peek < 0.1) return PEER_OPEN;
    r->last_peek = now;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return PEER_OPEN;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return PEER_GONE;
    if (n != 0 || now - r->last_probe < 1.0) return PEER_OPEN;
    r->last_probe = now;
    return PEER_PROBE;
}

/* Before the response: the probe is an interim "100 Continue", which
 * HTTP/1.1 clients skip (not allowed towards HTTP/1.0 ones: those get
 * their answer, or a failed write, at the end). */
static bool client_gone_waiting(http_req *r) {
    peer_state st = client_state(r);
    if (st == PEER_PROBE && !r->http10) {
        static const char interim[] = "HTTP/1.1 100 Continue\r\n\r\n";
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci && send(ci->connect_fd, interim, sizeof interim - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
            errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return true;
    }
    return st == PEER_GONE;
}

/* ---- connection deadlines ----
 *
 * libmicrohttpd's own timeout only closes a connection that is silent, so a
 * client trickling a header byte now and then would hold its slot (and
 * thread) forever.  Every connection is tracked from its start: its headers
 * are due header_timeout_s after it opened (or after the previous answer on
 * a kept-alive connection), its body body_timeout_s after the headers.  The
 * reaper thread shuts down the socket of a connection past its deadline;
 * libmicrohttpd's thread then sees the end of the stream and closes it. */
typedef struct conn_track {
    struct conn_track *prev, *next;
    int fd;
    double deadline;     /* 0: none (the request is being answered) */
    double render_start; /* 0: no chat template render running */
    atomic_bool cancel;  /* stops the render: the client left or the server stops */
} conn_track;

/* A render running this long is checked for a client that left (at the
 * reaper's next tick, every 0.1 s; one recv peek per rendering connection
 * and tick).  0.5 s let a render that ends at its work limit in 0.6 s on a
 * fast CPU (session 35's Zen 5) run to its end after the client had gone. */
#define RENDER_WATCH_S 0.1

static conn_track *track_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void track_set_deadline(tk_server *s, struct MHD_Connection *c, int timeout_s) {
    conn_track *t = track_of(c);
    if (!t) return;
    pthread_mutex_lock(&s->track_mu);
    t->deadline = timeout_s > 0 ? tk_clock_seconds(TK_CLOCK_WALL) + timeout_s : 0;
    pthread_mutex_unlock(&s->track_mu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    tk_server *s = cls;
    conn_track *t = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        t = ci ? calloc(1, sizeof *t) : NULL;
        if (!t) return; /* untracked: libmicrohttpd's idle timeout still applies */
        t->fd = ci->connect_fd;
        pthread_mutex_lock(&s->track_mu);
        t->deadline = s->cfg.header_timeout_s > 0 ? tk_clock_seconds(TK_CLOCK_WALL) + s->cfg.header_timeout_s : 0;
        t->next = s->tracked;
        if (s->tracked) s->tracked->prev = t;
        s->tracked = t;
        pthread_mutex_unlock(&s->track_mu);
        *socket_context = t;
    } else if (t) {
        pthread_mutex_lock(&s->track_mu); /* the socket is closed after this returns: the reaper must be done with it */
        if (t->prev) t->prev->next = t->next;
        else s->tracked = t->next;
        if (t->next) t->next->prev = t->prev;
        pthread_mutex_unlock(&s->track_mu);
        free(t);
        *socket_context = NULL;
    }
}

static void *reaper_main(void *arg) {
    tk_server *s = arg;
    while (!atomic_load(&s->reaper_quit)) {
        usleep(100000);
        double now = tk_clock_seconds(TK_CLOCK_WALL);
        pthread_mutex_lock(&s->track_mu);
        bool stopping = atomic_load(&s->stopping);
        for (conn_track *t = s->tracked; t; t = t->next) {
            if (t->deadline > 0 && now > t->deadline) {
                t->deadline = 0;
                shutdown(t->fd, SHUT_RDWR);
                atomic_fetch_add(&s->timed_out, 1);
            }
            if (stopping) atomic_store(&t->cancel, true);
            /* A long render's client is peeked at here (its own thread is busy
             * rendering): an end of stream or an error stops the render.  A
             * client that only half-closed is taken for gone too. */
            char b;
            if (t->render_start > 0 && now - t->render_start > RENDER_WATCH_S && !atomic_load(&t->cancel)) {
                ssize_t n = recv(t->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                    atomic_store(&t->cancel, true);
            }
        }
        pthread_mutex_unlock(&s->track_mu);
    }
    return NULL;
}

/* ---- plain responses ---- */

/* Takes ownership of the malloc'd body (libmicrohttpd frees it: no copy). */
static enum MHD_Result send_body(http_req *r, unsigned status, const char *ctype, char *body, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == 405) {
        const char *allow = is_post_route(r->route) ? "POST" : "GET, HEAD";
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    }
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result rc = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->responded = true;
    if (status >= 400) atomic_fetch_add(&r->srv->http_errors, 1);
    return rc;
}

static enum MHD_Result send_json(http_req *r, unsigned status, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (!s) return MHD_NO;
    return send_body(r, status, "application/json", s, strlen(s));
}

static enum MHD_Result send_error(http_req *r, const tk_api_error *e) {
    char *s = tk_api_error_json(e);
    if (!s) return MHD_NO;
    return send_body(r, (unsigned)e->status, "application/json", s, strlen(s));
}

static enum MHD_Result send_err(http_req *r, int status, const char *type, const char *code, const char *param,
                                const char *msg) {
    tk_api_error e;
    tk_api_error_set(&e, status, type, code, param, "%s", msg);
    return send_error(r, &e);
}

/* ---- token text for logprobs ---- */

/* The bytes token `id` adds after `prev` (what the detokenizer emits). */
static int token_bytes(const tk_server *s, int32_t prev, int32_t id, char *buf, int cap, char **heap) {
    *heap = NULL;
    int n = tk_token_to_bytes(s->tok, prev, id, false, buf, cap);
    if (n >= 0) return n;
    int need = -n;
    char *h = malloc((size_t)need);
    if (!h) return 0;
    n = tk_token_to_bytes(s->tok, prev, id, false, h, need);
    if (n < 0) n = 0;
    *heap = h;
    return n;
}

static json_t *json_logprob(float lp) {
    /* JSON has no -Infinity; OpenAI reports impossible tokens as -9999. */
    return json_real(isfinite(lp) ? (double)lp : -9999.0);
}

static json_t *bytes_array(const char *p, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

/* One chat logprob entry {token, logprob, bytes[, top_logprobs]}. */
static json_t *chat_lp_entry(const tk_server *s, int32_t prev, int32_t id, float lp) {
    char buf[128], *heap;
    int n = token_bytes(s, prev, id, buf, sizeof buf, &heap);
    const char *p = heap ? heap : buf;
    json_t *o = json_object();
    if (o) {
        json_object_set_new(o, "token", tk_json_lossy_string(p, (size_t)n));
        json_object_set_new(o, "logprob", json_logprob(lp));
        json_object_set_new(o, "bytes", bytes_array(p, n));
    }
    free(heap);
    return o;
}

/* Appends one token's logprobs to `lp`: the completions object
 * {tokens, token_logprobs, top_logprobs, text_offset} or the chat
 * {content: [...]} object. */
static void add_logprobs(http_req *r, json_t *lp, const choice_st *c, const tk_queued_event *ev, size_t text_off) {
    const tk_server *s = r->srv;
    if (r->api.kind == TK_API_CHAT) {
        json_t *e = chat_lp_entry(s, c->prev, ev->token, ev->logprob);
        json_t *top = json_array();
        for (int k = 0; top && k < ev->n_top; k++)
            json_array_append_new(top, chat_lp_entry(s, c->prev, ev->top_ids[k], ev->top_lp[k]));
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(json_object_get(lp, "content"), e);
        return;
    }
    char buf[128], *heap;
    int n = token_bytes(s, c->prev, ev->token, buf, sizeof buf, &heap);
    json_array_append_new(json_object_get(lp, "tokens"), tk_json_lossy_string(heap ? heap : buf, (size_t)n));
    free(heap);
    json_array_append_new(json_object_get(lp, "token_logprobs"), json_logprob(ev->logprob));
    json_t *top = json_object();
    for (int k = 0; top && k < ev->n_top; k++) {
        n = token_bytes(s, c->prev, ev->top_ids[k], buf, sizeof buf, &heap);
        json_t *key = tk_json_lossy_string(heap ? heap : buf, (size_t)n);
        free(heap);
        if (key) json_object_set_new(top, json_string_value(key), json_logprob(ev->top_lp[k]));
        json_decref(key);
    }
    /* Like vLLM, the sampled token is always among its top_logprobs. */
    n = token_bytes(s, c->prev, ev->token, buf, sizeof buf, &heap);
    json_t *key = tk_json_lossy_string(heap ? heap : buf, (size_t)n);
    free(heap);
    if (top && key) json_object_set_new(top, json_string_value(key), json_logprob(ev->logprob));
    json_decref(key);
    json_array_append_new(json_object_get(lp, "top_logprobs"), top);
    json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)text_off));
}

static json_t *new_logprobs(tk_api_kind kind) {
    if (kind == TK_API_CHAT) return json_pack("{s:[],s:n}", "content", "refusal");
    return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

/* ---- response objects ---- */

static json_t *response_head(http_req *r, const char *object) {
    return json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", r->id, "object", object, "created", (json_int_t)r->created,
                     "model", r->srv->cfg.model_name, "system_fingerprint", r->srv->fingerprint);
}

static json_t *usage_json(http_req *r) {
    int gen = 0;
    for (int i = 0; i < r->n_ch; i++) gen += r->ch[i].n_generated;
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", r->n_prompt, "completion_tokens", gen,
                     "total_tokens", r->n_prompt + gen, "prompt_tokens_details", "cached_tokens", r->n_cached);
}

/* Appends one SSE event, "data: {o}\n\n" (o is consumed); false (and the
 * buffer marked failed) if it cannot be serialized. */
static bool sse_event(http_req *r, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!s) {
        r->out.failed = true;
        return false;
    }
    tk_strbuf_printf(&r->out, "data: %s\n\n", s);
    free(s);
    return true;
}

/* ---- tool calls ---- */

/* Whether the output is parsed for tool calls: tools given and not
 * tool_choice "none". */
static bool tools_active(const http_req *r) {
    return r->api.kind == TK_API_CHAT && r->api.tool_choice != TK_TOOL_CHOICE_NONE;
}

/* "call_" and 24 hex digits, distinct per request and call. */
static void tool_call_id(const http_req *r, int choice, int k, char *out, size_t cap) {
    uint64_t x = r->srv->id_salt ^ (r->req_id * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)choice << 40) ^ (uint64_t)k;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 29;
    snprintf(out, cap, "call_%016llx%08x", (unsigned long long)x, (unsigned)(r->req_id * 2654435761u + (unsigned)k));
}

/* The calls found in a choice's text; *n_calls 0: none (or out of memory:
 * then the text stays content). parallel_tool_calls false keeps the first. */
static void parse_calls(const http_req *r, const char *text, size_t len, tk_tool_parse *p) {
    tk_err err;
    if (tk_tool_calls_parse(r->srv->cfg.tool_format, text, len, p, &err)) memset(p, 0, sizeof *p);
    if (!p->calls) p->content_len = len;
    for (; p->n_calls > 1 && !r->api.parallel_tool_calls; p->n_calls--) {
        free(p->calls[p->n_calls - 1].name);
        free(p->calls[p->n_calls - 1].arguments);
    }
}

/* message.tool_calls (full arguments), or one streamed call's first delta
 * (arguments "") / argument delta. */
static json_t *tool_call_json(const http_req *r, int choice, int k, const tk_tool_call *c, int part) {
    char id[48];
    tool_call_id(r, choice, k, id, sizeof id);
    if (part == 2) return json_pack("{s:i,s:{s:s}}", "index", k, "function", "arguments", c->arguments);
    json_t *o = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function", "name", c->name,
                          "arguments", part == 1 ? "" : c->arguments);
    if (o && part == 1) json_object_set_new(o, "index", json_integer(k));
    return o;
}

/* Appends "data: {chunk}\n\n" for one choice: text and/or logprobs, or
 * the final chunk when finish is set. */
static void emit_chunk(http_req *r, int index, const char *text, size_t len, json_t *lp, const char *finish) {
    bool chat = r->api.kind == TK_API_CHAT;
    json_t *o = response_head(r, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(index));
    if (chat) {
        json_t *delta = json_object();
        if (!finish) json_object_set_new(delta, "content", tk_json_lossy_string(text, len));
        json_object_set_new(choice, "delta", delta);
    } else {
        json_object_set_new(choice, "text", tk_json_lossy_string(text, len));
    }
    json_object_set_new(choice, "logprobs", lp ? lp : json_null());
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    if (r->api.include_usage) json_object_set_new(o, "usage", json_null());
    sse_event(r, o);
}

static void emit_delta(http_req *r, int index, json_t *delta) {
    json_t *o = response_head(r, "chat.completion.chunk");
    json_object_set_new(o, "choices", json_pack("[{s:i,s:o,s:n,s:n}]", "index", index, "delta", delta, "logprobs",
                                                "finish_reason"));
    if (r->api.include_usage) json_object_set_new(o, "usage", json_null());
    sse_event(r, o);
}

/* Streaming with tools: content goes out as soon as it cannot be the start
 * of a call; at the end, the held text is parsed: calls go out as OpenAI
 * sends them (a first delta with index, id, type, name and arguments "",
 * then the arguments), anything else as content.  Returns the finish
 * reason to send. */
static const char *stream_tool_text(http_req *r, int index, choice_st *c, const char *text, size_t len, bool done) {
    tk_strbuf_add(&c->acc, text, len);
    if (!done) {
        size_t safe = tk_tool_stream_safe(r->srv->cfg.tool_format, c->acc.data, c->acc.len);
        if (safe > c->sent) emit_chunk(r, index, c->acc.data + c->sent, safe - c->sent, NULL, NULL);
        if (safe > c->sent) c->sent = safe;
        return NULL;
    }
    tk_tool_parse p;
    parse_calls(r, c->acc.data ? c->acc.data : "", c->acc.len, &p);
    const char *finish = c->finish;
    if (p.n_calls == 0) {
        if (c->acc.len > c->sent) emit_chunk(r, index, c->acc.data + c->sent, c->acc.len - c->sent, NULL, NULL);
    } else {
        size_t end = p.content_off + p.content_len; /* content before the calls not yet sent */
        if (end > c->sent) emit_chunk(r, index, c->acc.data + c->sent, end - c->sent, NULL, NULL);
        for (int k = 0; k < p.n_calls; k++) {
            for (int part = 1; part <= 2; part++) {
                json_t *tc = tool_call_json(r, index, k, &p.calls[k], part);
                emit_delta(r, index, json_pack("{s:[o]}", "tool_calls", tc));
            }
        }
        if (!strcmp(finish, "stop")) finish = "tool_calls";
    }
    tk_tool_parse_free(&p);
    c->sent = c->acc.len;
    return finish;
}

static void emit_role_chunks(http_req *r) {
    for (int i = 0; i < r->n_ch; i++) {
        json_t *o = response_head(r, "chat.completion.chunk");
        json_t *choice = json_pack("{s:i,s:{s:s,s:s},s:n,s:n}", "index", i, "delta", "role", "assistant", "content",
                                   "", "logprobs", "finish_reason");
        json_object_set_new(o, "choices", json_pack("[o]", choice));
        if (r->api.include_usage) json_object_set_new(o, "usage", json_null());
        if (!sse_event(r, o)) return;
    }
}

/* A failed generation: the request's own constraint (400, naming its field
 * and the engine's reason) or the engine (500). */
static void failure_error(const http_req *r, tk_api_error *e) {
    if (r->error[0])
        tk_api_error_set(e, 400, "invalid_request_error", NULL,
                         r->api.constraint_param[0] ? r->api.constraint_param : NULL, "%s", r->error);
    else
        tk_api_error_set(e, 500, "server_error", NULL, NULL, "generation failed inside the engine");
}

static void emit_end(http_req *r) {
    if (r->failed) {
        tk_api_error e;
        failure_error(r, &e);
        char *s = tk_api_error_json(&e);
        if (s) tk_strbuf_printf(&r->out, "data: %s\n\n", s);
        free(s);
    }
    if (r->api.include_usage) {
        json_t *o = response_head(r, r->api.kind == TK_API_CHAT ? "chat.completion.chunk" : "text_completion");
        json_object_set_new(o, "choices", json_array());
        json_object_set_new(o, "usage", usage_json(r));
        sse_event(r, o);
    }
    tk_strbuf_adds(&r->out, "data: [DONE]\n\n");
    r->stream_end = true;
}

/* One token's logprobs appended, serialized, to the choice's arrays. */
static void keep_logprobs(http_req *r, choice_st *c, const tk_queued_event *ev) {
    static const char *const keys[2][LP_ARRAYS] = {{"tokens", "token_logprobs", "top_logprobs", "text_offset"},
                                                   {"content"}};
    bool chat = r->api.kind == TK_API_CHAT;
    json_t *lp = new_logprobs(r->api.kind);
    if (!lp) {
        c->text.failed = true;
        return;
    }
    add_logprobs(r, lp, c, ev, c->text_off);
    for (int k = 0; k < LP_ARRAYS && keys[chat][k]; k++) {
        json_t *v = json_array_get(json_object_get(lp, keys[chat][k]), 0);
        char *t = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(9)) : NULL;
        if (!t) c->text.failed = true;
        if (c->lp[k].len) tk_strbuf_adds(&c->lp[k], ",");
        if (t) tk_strbuf_adds(&c->lp[k], t);
        r->held += (t ? strlen(t) : 0) + 1;
        free(t);
    }
    json_decref(lp);
}

/* Folds taken events into the per-choice state; streaming formats them. */
static void consume_events(http_req *r) {
    for (size_t i = 0; i < r->batch.n; i++) {
        tk_queued_event *ev = &r->batch.ev[i];
        if (ev->index < 0 || ev->index >= r->n_ch) continue;
        choice_st *c = &r->ch[ev->index];
        if (ev->n_cached > r->n_cached) r->n_cached = ev->n_cached;
        if (ev->n_generated > c->n_generated) c->n_generated = ev->n_generated;
        bool want_lp = r->api.logprobs >= 0 && ev->token >= 0;
        if (ev->text_len > 0 || want_lp) {
            if (r->api.stream) {
                json_t *lp = NULL;
                if (want_lp) {
                    lp = new_logprobs(r->api.kind);
                    if (lp) add_logprobs(r, lp, c, ev, c->text_off);
                }
                if (tools_active(r) && !lp)
                    stream_tool_text(r, ev->index, c, ev->text, (size_t)ev->text_len, false);
                else
                    emit_chunk(r, ev->index, ev->text, (size_t)ev->text_len, lp, NULL);
            } else {
                if (want_lp) keep_logprobs(r, c, ev);
                tk_strbuf_add(&c->text, ev->text, (size_t)ev->text_len);
                r->held += (size_t)ev->text_len;
            }
        }
        c->text_off += (size_t)ev->text_len;
        if (ev->token >= 0) c->prev = ev->token;
        if (ev->done && !c->done) {
            c->done = true;
            memcpy(c->finish, ev->finish, sizeof c->finish);
            if (!strcmp(c->finish, "error")) {
                r->failed = true;
                if (ev->error && !r->error[0]) snprintf(r->error, sizeof r->error, "%s", ev->error);
            }
            if (r->api.stream) {
                const char *finish = tools_active(r) ? stream_tool_text(r, ev->index, c, "", 0, true) : c->finish;
                emit_chunk(r, ev->index, "", 0, NULL, finish);
            }
        }
    }
}

/* Appends the JSON text of j (consumed) without its closing brace. */
static void add_open_object(tk_strbuf *b, json_t *j) {
    char *t = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (!t) {
        b->failed = true;
        return;
    }
    tk_strbuf_add(b, t, strlen(t) - 1);
    free(t);
}

/* The non-streaming answer as text, built in one buffer from the kept text
 * and serialized logprobs (NULL if out of memory); *len its length. */
static char *final_response(http_req *r, size_t *len) {
    bool chat = r->api.kind == TK_API_CHAT;
    tk_strbuf b = {0};
    add_open_object(&b, response_head(r, chat ? "chat.completion" : "text_completion"));
    tk_strbuf_adds(&b, ",\"choices\":[");
    for (int i = 0; i < r->n_ch; i++) {
        choice_st *c = &r->ch[i];
        if (c->text.failed) b.failed = true;
        tk_tool_parse p = {.content_len = c->text.len};
        if (tools_active(r)) parse_calls(r, c->text.data ? c->text.data : "", c->text.len, &p);
        json_t *text = p.n_calls && !p.content_len ? json_null()
                                                   : tk_json_lossy_string(c->text.data ? c->text.data + p.content_off : "",
                                                                          p.content_len);
        tk_strbuf_free(&c->text); /* no second copy of the text */
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(i));
        const char *finish = c->finish[0] ? c->finish : "stop";
        if (chat) {
            json_t *msg = json_pack("{s:s,s:o,s:n}", "role", "assistant", "content", text, "refusal");
            if (p.n_calls) {
                json_t *calls = json_array();
                for (int k = 0; k < p.n_calls; k++) json_array_append_new(calls, tool_call_json(r, i, k, &p.calls[k], 0));
                json_object_set_new(msg, "tool_calls", calls);
                if (!strcmp(finish, "stop")) finish = "tool_calls";
            }
            json_object_set_new(ch, "message", msg);
        } else {
            json_object_set_new(ch, "text", text);
        }
        tk_tool_parse_free(&p);
        json_object_set_new(ch, "finish_reason", json_string(finish));
        if (i) tk_strbuf_adds(&b, ",");
        add_open_object(&b, ch);
        tk_strbuf_adds(&b, ",\"logprobs\":");
        if (r->api.logprobs < 0) {
            tk_strbuf_adds(&b, "null}");
            continue;
        }
        static const char *const open[2][LP_ARRAYS] = {
            {"{\"tokens\":[", "],\"token_logprobs\":[", "],\"top_logprobs\":[", "],\"text_offset\":["},
            {"{\"content\":["}};
        for (int k = 0; k < LP_ARRAYS && open[chat][k]; k++) {
            if (c->lp[k].failed) b.failed = true;
            tk_strbuf_adds(&b, open[chat][k]);
            tk_strbuf_add(&b, c->lp[k].data, c->lp[k].len);
            tk_strbuf_free(&c->lp[k]);
        }
        tk_strbuf_adds(&b, chat ? "],\"refusal\":null}}" : "]}}");
    }
    tk_strbuf_adds(&b, "],\"usage\":");
    json_t *usage = usage_json(r);
    char *u = usage ? json_dumps(usage, JSON_COMPACT) : NULL;
    json_decref(usage);
    if (!u) b.failed = true;
    else tk_strbuf_adds(&b, u);
    free(u);
    tk_strbuf_adds(&b, "}");
    if (b.failed) {
        tk_strbuf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.data;
}

/* ---- streaming ---- */

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    http_req *r = cls;
    for (;;) {
        if (r->out.failed) {
            req_cancel(r);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (r->out.len > 0) {
            size_t n = r->out.len < max ? r->out.len : max;
            memcpy(buf, r->out.data, n);
            tk_strbuf_consume(&r->out, n);
            return (ssize_t)n;
        }
        if (r->stream_end) return MHD_CONTENT_READER_END_OF_STREAM;
        bool all_done = false, lost = false;
        size_t got = tk_event_queue_take(r->events, 100, &r->batch, &all_done, &lost);
        if (got) consume_events(r);
        if (all_done) {
            r->finished = true;
            if (lost) r->failed = true;
            emit_end(r);
            continue;
        }
        if (atomic_load(&r->srv->stopping)) {
            /* End the stream with an error event the client can read. */
            req_cancel(r);
            tk_api_error e;
            tk_api_error_set(&e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
            char *s = tk_api_error_json(&e);
            if (!s) return MHD_CONTENT_READER_END_WITH_ERROR;
            tk_strbuf_printf(&r->out, "data: %s\n\n", s);
            free(s);
            r->stream_end = true;
            continue;
        }
        peer_state st = client_state(r);
        if (st == PEER_GONE) {
            atomic_fetch_add(&r->srv->cancelled_disconnect, 1);
            req_cancel(r);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        static const char ping[] = ": ping\n\n"; /* the probe: an SSE comment, which clients skip */
        if (st == PEER_PROBE && max >= sizeof ping - 1) {
            memcpy(buf, ping, sizeof ping - 1);
            return (ssize_t)(sizeof ping - 1);
        }
    }
}

static void stream_free(void *cls) { req_unref(cls); }

/* ---- generation requests ---- */

static int tokenize_with(const tk_tokenizer *tok, const char *text, size_t len, bool add_bos, bool parse_special,
                         int32_t **out, int *n, tk_err *err) {
    int cap = (int)(len < (1u << 24) ? len : (1u << 24)) + 8;
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        if (!ids) return tk_err_set(err, "out of memory");
        int got = 0;
        if (tk_tokenize(tok, text, len, add_bos, parse_special, ids, cap, &got, err)) {
            free(ids);
            return -1;
        }
        if (got <= cap) {
            *out = ids;
            *n = got;
            return 0;
        }
        free(ids);
        cap = got;
    }
    return tk_err_set(err, "tokenizer returned an inconsistent length");
}

static int tokenize_all(const tk_tokenizer *tok, const char *text, size_t len, bool add_bos, int32_t **out, int *n,
                        tk_err *err) {
    return tokenize_with(tok, text, len, add_bos, true, out, n, err);
}

static int tokenize_plain(const tk_tokenizer *tok, const char *text, size_t len, int32_t **out, int *n, tk_err *err) {
    return tokenize_with(tok, text, len, false, false, out, n, err);
}

/* Special-token text in chat message content is plain text.  The contents
 * the template sees carry a 0xFF byte (never in JSON's UTF-8) after the
 * first character of every control-token text, so it no longer spells the
 * token; tokenize_chat then parses only the control tokens left whole (the
 * template's) and tokenizes the text between them, marks dropped, without
 * special-token parsing.  A control token a filter took apart cannot
 * re-form: it stays odd text, never a token. */
#define DEFUSE_MARK '\xff'

static size_t utf8_char_len(unsigned char c) { return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

/* The longest control-token text at text[i] (index into special_texts), or -1. */
static int special_at(const tk_server *s, const char *text, size_t len, size_t i) {
    if (!s->special_first[(unsigned char)text[i]]) return -1;
    for (int k = 0; k < s->n_special_texts; k++) /* longest first */
        if (s->special_texts[k].n <= len - i && memcmp(text + i, s->special_texts[k].s, s->special_texts[k].n) == 0)
            return k;
    return -1;
}

/* A malloc'd copy of text with the marks, or NULL when it holds no
 * control-token text (or, with *oom set, out of memory).  A one-character
 * control token cannot be split and is left as it is. */
static char *defuse_specials(const tk_server *s, const char *text, bool *oom) {
    size_t len = strlen(text), marks = 0;
    char *out = NULL;
    for (int pass = 0; pass < 2; pass++) {
        size_t o = 0;
        for (size_t i = 0; i < len;) {
            size_t step = utf8_char_len((unsigned char)text[i]);
            if (step > len - i) step = len - i;
            int k = special_at(s, text, len, i);
            bool hit = k >= 0 && s->special_texts[k].n > step;
            if (out) memcpy(out + o, text + i, step);
            o += step;
            i += step; /* a mark at every start, so overlapping texts are split too */
            if (hit) {
                if (out) out[o] = DEFUSE_MARK;
                o++;
                marks++;
            }
        }
        if (!marks) return NULL;
        if (out) {
            out[o] = 0;
            return out;
        }
        if (!(out = malloc(o + 1))) {
            *oom = true;
            return NULL;
        }
    }
    return out;
}

static int append_ids(int32_t **ids, int *n, const int32_t *more, int n_more) {
    int32_t *p = realloc(*ids, ((size_t)*n + (size_t)n_more + 1) * sizeof *p);
    if (!p) return -1;
    memcpy(p + *n, more, (size_t)n_more * sizeof *more);
    *ids = p;
    *n += n_more;
    return 0;
}

/* Tokenizes a rendered chat (text is modified): without marks, as one text
 * with special-token parsing; with them, as above.  The text between control
 * tokens is then tokenized as a text of its own, which differs only for
 * tokenizers whose pre-tokenizer prepends a space to the first word alone,
 * or whose control tokens strip the spaces around them. */
static int tokenize_chat(const tk_server *s, char *text, int32_t **ids, int *n, tk_err *err) {
    size_t len = strlen(text);
    if (!memchr(text, DEFUSE_MARK, len)) return tokenize_all(s->tok, text, len, false, ids, n, err);
    *ids = NULL;
    *n = 0;
    size_t seg = 0, w = 0; /* the pending plain text is text[seg..w), compacted in place */
    for (size_t i = 0;;) {
        int k = i < len ? special_at(s, text, len, i) : -1;
        if (i < len && k < 0) {
            if (text[i] != DEFUSE_MARK) text[w++] = text[i];
            i++;
            continue;
        }
        if (w > seg) {
            int32_t *part;
            int got;
            int rc = tokenize_plain(s->tok, text + seg, w - seg, &part, &got, err);
            if (!rc) {
                if (append_ids(ids, n, part, got)) rc = tk_err_set(err, "out of memory");
                free(part);
            }
            if (rc) {
                free(*ids);
                return -1;
            }
        }
        if (i == len) return 0;
        if (append_ids(ids, n, &s->special_texts[k].id, 1)) {
            free(*ids);
            return tk_err_set(err, "out of memory");
        }
        i += s->special_texts[k].n;
        seg = w = i; /* the pending text starts again after the control token */
    }
}

/* The JSON path's stand-in for DEFUSE_MARK: jansson strings must be UTF-8,
 * so the mark travels as U+FDD0 (a noncharacter, for internal use) and
 * becomes the byte again after the render.  A client's own U+FDD0 is then
 * dropped like a mark: the price of a JSON conversation. */
static const char JSON_MARK[] = "\xEF\xB7\x90";

static char *json_marked(const char *defused) {
    size_t n = strlen(defused), marks = 0;
    for (size_t i = 0; i < n; i++) marks += defused[i] == DEFUSE_MARK;
    char *o = malloc(n + marks * 2 + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (defused[i] == DEFUSE_MARK) {
            memcpy(o + k, JSON_MARK, 3);
            k += 3;
        } else {
            o[k++] = defused[i];
        }
    }
    o[k] = 0;
    return o;
}

/* Marks back to DEFUSE_MARK in place (the text only shrinks). */
static void json_unmark(char *text) {
    size_t w = 0, n = strlen(text);
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(text + i, JSON_MARK, 3)) {
            text[w++] = DEFUSE_MARK;
            i += 3;
        } else {
            text[w++] = text[i++];
        }
    }
    text[w] = 0;
}

/* Messages as the template sees them with tools: the request's objects with
 * each content replaced by its (defused, joined) text, and the tools unless
 * tool_choice is "none" (then the model is not told of them, as vLLM does by
 * default).  Tool descriptions are not defused: they come from the
 * application, not from the conversation. */
static int render_chat_json(http_req *r, const tk_chat_msg *msgs, const atomic_bool *cancel, char **text,
                            tk_err *err) {
    tk_server *s = r->srv;
    json_t *m = json_array();
    int rc = m ? 0 : tk_err_set(err, "out of memory");
    for (int i = 0; !rc && i < r->api.n_msgs; i++) {
        json_t *orig = json_array_get(r->api.messages, (size_t)i);
        json_t *copy = json_copy(orig);
        json_t *c = json_object_get(orig, "content");
        if (copy && c && !json_is_null(c)) {
            char *marked = json_marked(msgs[i].content);
            json_t *str = marked ? json_string(marked) : NULL;
            free(marked);
            if (!str || json_object_set_new(copy, "content", str)) rc = tk_err_set(err, "out of memory");
        }
        if (!copy || json_array_append_new(m, copy)) rc = tk_err_set(err, "out of memory");
    }
    char *mj = rc ? NULL : json_dumps(m, JSON_COMPACT);
    char *tj = !rc && tools_active(r) ? json_dumps(r->api.tools, JSON_COMPACT) : NULL;
    json_decref(m);
    if (!rc && (!mj || (tools_active(r) && !tj))) rc = tk_err_set(err, "out of memory");
    tk_err terr;
    if (!rc && tk_chat_template_render_json(s->tmpl, mj, tj, true, s->bos_text, s->eos_text, cancel, text, &terr))
        rc = tk_err_set(err, "chat template: %s", terr.msg);
    if (!rc) json_unmark(*text);
    free(mj);
    free(tj);
    return rc;
}

/* The template's rendering of the request's messages, contents defused
 * unless the server parses special tokens in content. */
static int render_chat(http_req *r, char **text, tk_err *err) {
    tk_server *s = r->srv;
    int nm = r->api.n_msgs;
    tk_chat_msg *msgs = malloc(((size_t)nm + 1) * sizeof *msgs);
    char **own = calloc((size_t)nm + 1, sizeof *own);
    int rc = msgs && own ? 0 : tk_err_set(err, "out of memory");
    for (int i = 0; !rc && i < nm; i++) {
        bool oom = false;
        msgs[i] = r->api.msgs[i];
        if (msgs[i].content && s->n_special_texts) own[i] = defuse_specials(s, msgs[i].content, &oom);
        if (oom) rc = tk_err_set(err, "out of memory");
        if (own[i]) msgs[i].content = own[i];
    }
    tk_err terr;
    conn_track *t = track_of(r->conn);
    if (t) {
        pthread_mutex_lock(&s->track_mu);
        t->render_start = tk_clock_seconds(TK_CLOCK_WALL);
        pthread_mutex_unlock(&s->track_mu);
    }
    const atomic_bool *cancel = t ? &t->cancel : &s->stopping;
    if (!rc && !s->tmpl) {
        rc = tk_err_set(err, "this model has no chat template (none in its file, and its vocabulary fits none of the "
                             "built-in presets): use /v1/completions, or start the server with --chat-template");
    } else if (!rc && (tools_active(r) || r->api.messages_have_tools)) {
        rc = render_chat_json(r, msgs, cancel, text, err);
        if (rc && atomic_load(cancel)) atomic_fetch_add(&s->renders_cancelled, 1);
    } else if (!rc && tk_chat_template_render_cancellable(s->tmpl, msgs, nm, true, s->bos_text, s->eos_text, cancel,
                                                           text, &terr)) {
        rc = tk_err_set(err, "chat template: %s", terr.msg);
        if (atomic_load(cancel)) atomic_fetch_add(&s->renders_cancelled, 1);
    }
    if (t) {
        pthread_mutex_lock(&s->track_mu);
        t->render_start = 0;
        pthread_mutex_unlock(&s->track_mu);
    }
    for (int i = 0; own && i < nm; i++) free(own[i]);
    free(own);
    free(msgs);
    return rc;
}

/* tool_choice "required" or a named function: the output is one call,
 * enforced by a JSON Schema of the format's call object between its tags
 * (the engine's constrained decoding).  *schema is malloc'd. */
static int tool_constraint(http_req *r, tk_constraint *c, char **schema) {
    *schema = NULL; /* c is left alone otherwise (response_format may have set it) */
    if (r->api.tool_choice != TK_TOOL_CHOICE_REQUIRED && r->api.tool_choice != TK_TOOL_CHOICE_NAMED) return 0;
    tk_tool_format f = r->srv->cfg.tool_format;
    const char *args_key = f == TK_TOOL_FORMAT_LLAMA3 || f == TK_TOOL_FORMAT_GEMMA ? "parameters" : "arguments";
    json_t *any = json_array();
    size_t i;
    json_t *tool;
    json_array_foreach(r->api.tools, i, tool) {
        json_t *fn = json_object_get(tool, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (r->api.tool_choice == TK_TOOL_CHOICE_NAMED && strcmp(name, r->api.tool_name)) continue;
        json_t *params = json_object_get(fn, "parameters");
        params = params ? json_incref(params) : json_pack("{s:s}", "type", "object");
        json_array_append_new(any, json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s]}", "type", "object", "properties", "name",
                                             "const", name, args_key, params, "required", "name", args_key));
    }
    json_t *one = json_array_size(any) == 1 ? json_incref(json_array_get(any, 0)) : json_pack("{s:O}", "anyOf", any);
    json_decref(any);
    if (f == TK_TOOL_FORMAT_MISTRAL) one = json_pack("{s:s,s:o,s:i}", "type", "array", "items", one, "minItems", 1);
    *schema = one ? json_dumps(one, JSON_COMPACT) : NULL;
    json_decref(one);
    if (!*schema) return -1;
    c->kind = TK_CONSTRAINT_JSON_SCHEMA;
    c->text = *schema;
    c->begin = f == TK_TOOL_FORMAT_HERMES ? "<tool_call>\n" : f == TK_TOOL_FORMAT_MISTRAL ? "[TOOL_CALLS]" : NULL;
    c->end = f == TK_TOOL_FORMAT_HERMES ? "\n</tool_call>" : NULL;
    return 0;
}

static int build_prompt(http_req *r, int32_t **ids, int *n, tk_api_error *e) {
    tk_server *s = r->srv;
    tk_err err;
    *ids = NULL;
    *n = 0;
    size_t text_len = r->api.prompt_text ? r->api.prompt_len : 0;
    for (int i = 0; i < r->api.n_msgs; i++) text_len += strlen(r->api.msgs[i].content);
    if (text_len > s->max_text_bytes) {
        tk_api_error_set(e, 400, "invalid_request_error", "context_length_exceeded",
                         r->api.kind == TK_API_CHAT ? "messages" : "prompt",
                         "This model's maximum context length is %d tokens; the prompt (%zu bytes) is far longer.",
                         s->ctx_len, text_len);
        return -1;
    }
    if (r->api.kind == TK_API_CHAT) {
        char *text = NULL;
        if (render_chat(r, &text, &err)) {
            tk_api_error_set(e, 400, "invalid_request_error", NULL, "messages", "%s", err.msg);
            return -1;
        }
        /* The template writes special tokens (e.g. <s>) as text: parse them. */
        int rc = tokenize_chat(s, text, ids, n, &err);
        free(text);
        if (rc) {
            tk_api_error_set(e, 400, "invalid_request_error", NULL, "messages", "%s", err.msg);
            return -1;
        }
        /* A template without BOS for a model that wants one (e.g. the ChatML
         * fallback on a Llama model): prepend it, as llama.cpp does. */
        int bos = tk_tokenizer_bos(s->tok);
        if (tk_tokenizer_add_bos(s->tok) && bos >= 0 && (*n == 0 || (*ids)[0] != bos)) {
            int32_t *p = realloc(*ids, ((size_t)*n + 1) * sizeof *p);
            if (!p) {
                tk_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
                return -1;
            }
            memmove(p + 1, p, (size_t)*n * sizeof *p);
            p[0] = bos;
            *ids = p;
            ++*n;
        }
    } else if (r->api.prompt_ids) {
        *ids = malloc((size_t)r->api.n_prompt_ids * sizeof **ids);
        if (!*ids) {
            tk_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
        memcpy(*ids, r->api.prompt_ids, (size_t)r->api.n_prompt_ids * sizeof **ids);
        *n = r->api.n_prompt_ids;
    } else {
        if (tokenize_all(s->tok, r->api.prompt_text, r->api.prompt_len, tk_tokenizer_add_bos(s->tok), ids, n,
                         &err)) {
            tk_api_error_set(e, 400, "invalid_request_error", NULL, "prompt", "%s", err.msg);
            return -1;
        }
    }
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        tk_api_error_set(e, 400, "invalid_request_error", NULL, r->api.kind == TK_API_CHAT ? "messages" : "prompt",
                         "the prompt is empty");
        return -1;
    }
    return 0;
}

static enum MHD_Result handle_generate(http_req *r) {
    tk_server *s = r->srv;
    tk_api_error e;
    tk_api_kind kind = r->route == R_CHAT ? TK_API_CHAT : TK_API_COMPLETIONS;
    if (tk_api_parse(kind, r->body, r->body_len, s->cfg.model_name, s->n_vocab, &r->api, &e)) return send_error(r, &e);
    r->have_api = true;
    free(r->body);
    r->body = NULL;

    if (r->api.spec_mode == TK_SPEC_DRAFT && !s->has_draft_model) {
        tk_api_error_set(&e, 400, "invalid_request_error", NULL, "speculative.mode",
                         "speculative mode \"draft\" needs a draft model: start the server with --draft-model");
        return send_error(r, &e);
    }
    if (tools_active(r) && s->cfg.tool_format == TK_TOOL_FORMAT_NONE) {
        tk_api_error_set(&e, 400, "invalid_request_error", NULL, "tools",
                         "this model's chat template shows no tool-call format: start the server with --tool-format "
                         "hermes|llama3|mistral|gemma");
        return send_error(r, &e);
    }
    /* the output constraint, compiled now (the engine caches it for the
     * submit) so that a bad schema, regex or grammar names its field */
    tk_constraint con = {.kind = r->api.constraint, .text = r->api.constraint_text};
    if (tool_constraint(r, &con, &r->tool_schema))
        return send_err(r, 500, "server_error", NULL, NULL, "out of memory");
    tk_err cerr;
    if (con.kind != TK_CONSTRAINT_NONE && tk_engine_constraint_check(s->engine, &con, &cerr)) {
        tk_api_error_set(&e, 400, "invalid_request_error", NULL, r->tool_schema ? "tools" : r->api.constraint_param,
                         "%s", cerr.msg);
        return send_error(r, &e);
    }
    int32_t *ids;
    int n;
    if (build_prompt(r, &ids, &n, &e)) {
        if (atomic_load(&s->stopping)) /* a render cut short by the shutdown */
            return send_err(r, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        return send_error(r, &e);
    }
    const char *pparam = kind == TK_API_CHAT ? "messages" : "prompt";
    /* --max-tokens caps every request and is the length of one that sets none
     * (chat), which still ends where the context does */
    int max_tokens = r->api.max_tokens;
    if (s->cfg.max_tokens > 0 && (max_tokens == 0 || max_tokens > s->cfg.max_tokens)) max_tokens = s->cfg.max_tokens;
    if (r->api.max_tokens == 0 && n < s->ctx_len && max_tokens > s->ctx_len - n) max_tokens = s->ctx_len - n;
    if (n >= s->ctx_len || (long long)n + max_tokens > s->ctx_len) {
        free(ids);
        if (n < s->ctx_len)
            tk_api_error_set(&e, 400, "invalid_request_error", "context_length_exceeded", pparam,
                             "This model's maximum context length is %d tokens. However, you requested %lld tokens "
                             "(%d in the prompt, %d for the completion).",
                             s->ctx_len, (long long)n + max_tokens, n, max_tokens);
        else
            tk_api_error_set(&e, 400, "invalid_request_error", "context_length_exceeded", pparam,
                             "This model's maximum context length is %d tokens. However, the prompt has %d tokens.",
                             s->ctx_len, n);
        return send_error(r, &e);
    }
    r->n_prompt = n;

    tk_request_params p = {.prompt = ids, .n_prompt = n, .max_tokens = max_tokens, .n = r->api.n,
                           .sampling = r->api.sampling, .ignore_eos = r->api.ignore_eos, .stop = r->api.stop,
                           .n_stop = r->api.n_stop, .top_logprobs = r->api.logprobs,
                           .speculative = r->api.spec_mode, .draft_max = r->api.draft_max,
                           .draft_min = r->api.draft_min, .constraint = con};
    uint64_t seq = atomic_fetch_add(&s->id_counter, 1);
    if (!r->api.seed_given) {
        /* Unseeded requests should differ from each other. */
        uint64_t x = s->id_salt ^ (seq * 0x9e3779b97f4a7c15ULL) ^ (uint64_t)(tk_clock_seconds(TK_CLOCK_WALL) * 1e9);
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ULL;
        p.sampling.seed = x ^ (x >> 29);
    }
    r->n_ch = r->api.n;
    r->ch = calloc((size_t)r->n_ch, sizeof *r->ch);
    r->events = tk_event_queue_new(r->api.n);
    if (!r->ch || !r->events) {
        free(ids);
        return send_err(r, 500, "server_error", NULL, NULL, "out of memory");
    }
    for (int i = 0; i < r->n_ch; i++) r->ch[i].prev = ids[n - 1];
    snprintf(r->id, sizeof r->id, "%s-%016llx%08llx", kind == TK_API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)(s->id_salt ^ seq), (unsigned long long)(seq & 0xffffffffu));
    r->created = time(NULL);

    tk_err err;
    tk_event_queue_ref(r->events); /* the engine's reference, dropped after the last final event */
    int rc = tk_engine_submit(s->engine, &p, tk_event_queue_on_event, r->events, &r->req_id, &err);
    free(ids);
    /* The engine copied what it needs: the parsed body (~20x its size, unknown
     * fields included) must not live as long as the answer. */
    tk_api_req_drop_inputs(&r->api);
    if (rc) {
        tk_event_queue_unref(r->events);
        tk_event_queue_unref(r->events);
        r->events = NULL;
        if (!strncmp(err.msg, "queue full", 10)) {
            atomic_fetch_add(&s->rejected_queue_full, 1);
            return send_err(r, 429, "rate_limit_error", "rate_limit_exceeded", NULL, err.msg);
        }
        return send_err(r, 400, "invalid_request_error", NULL, NULL, err.msg);
    }

    if (r->api.stream) {
        if (kind == TK_API_CHAT) emit_role_chunks(r);
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, r, stream_free);
        if (!resp) {
            req_cancel(r);
            return MHD_NO;
        }
        atomic_fetch_add(&r->refs, 1); /* the response's reference */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result q = MHD_queue_response(r->conn, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        r->responded = true;
        return q;
    }

    /* Non-streaming: wait here (this connection's own thread). */
    bool lost = false;
    for (;;) {
        bool all_done = false;
        size_t got = tk_event_queue_take(r->events, 100, &r->batch, &all_done, &lost);
        if (got) consume_events(r);
        if (r->held > s->cfg.max_response_bytes) {
            req_cancel(r);
            tk_api_error_set(&e, 400, "invalid_request_error", "response_too_large", NULL,
                             "the response would exceed the server's limit of %zu bytes (--max-response-size); "
                             "ask for fewer choices (n), tokens (max_tokens) or top_logprobs, or use \"stream\": true",
                             s->cfg.max_response_bytes);
            return send_error(r, &e);
        }
        if (all_done) {
            r->finished = true;
            break;
        }
        if (atomic_load(&s->stopping)) {
            req_cancel(r);
            return send_err(r, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        }
        if (client_gone_waiting(r)) {
            atomic_fetch_add(&s->cancelled_disconnect, 1);
            req_cancel(r);
            return MHD_NO;
        }
    }
    if (lost || r->failed) {
        tk_api_error e;
        if (lost) tk_api_error_set(&e, 500, "server_error", NULL, NULL, "generation failed inside the engine");
        else failure_error(r, &e);
        return send_error(r, &e);
    }
    size_t len;
    char *text = final_response(r, &len);
    if (!text) return send_err(r, 500, "server_error", NULL, NULL, "out of memory");
    return send_body(r, 200, "application/json", text, len);
}

/* ---- /tokenize and /detokenize (as vLLM serves them) ---- */

/* The body as a JSON object and its "model" checked; NULL: answered. */
static json_t *load_body(http_req *r, enum MHD_Result *answered) {
    json_error_t je;
    json_t *root = json_loadb(r->body ? r->body : "", r->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        *answered = send_err(r, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
        return NULL;
    }
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model) &&
        (!json_is_string(model) || strcmp(json_string_value(model), r->srv->cfg.model_name))) {
        json_decref(root);
        *answered = send_err(r, 404, "invalid_request_error", "model_not_found", "model",
                             "this server serves only its own model");
        return NULL;
    }
    return root;
}

/* {"prompt": text, "add_special_tokens": bool (default true)} or
 * {"messages": [...] (and tools), rendered as a chat request is} ->
 * {"tokens", "count", "max_model_len"}. */
static enum MHD_Result handle_tokenize(http_req *r) {
    tk_server *s = r->srv;
    enum MHD_Result q;
    json_t *root = load_body(r, &q);
    if (!root) return q;
    int32_t *ids = NULL;
    int n = 0;
    tk_api_error e;
    if (json_object_get(root, "messages")) {
        json_decref(root);
        if (tk_api_parse(TK_API_CHAT, r->body, r->body_len, s->cfg.model_name, s->n_vocab, &r->api, &e))
            return send_error(r, &e);
        r->have_api = true;
        if (build_prompt(r, &ids, &n, &e)) return send_error(r, &e);
    } else {
        json_t *p = json_object_get(root, "prompt"), *ast = json_object_get(root, "add_special_tokens");
        if (!json_is_string(p) || (ast && !json_is_boolean(ast))) {
            json_decref(root);
            return send_err(r, 400, "invalid_request_error", NULL, "prompt",
                            "give 'prompt' (a string; 'add_special_tokens' a boolean) or 'messages'");
        }
        bool add = !ast || json_is_true(ast);
        tk_err err;
        if (json_string_length(p) > s->max_text_bytes) {
            json_decref(root);
            return send_err(r, 400, "invalid_request_error", "context_length_exceeded", "prompt",
                            "the prompt is far longer than the context");
        }
        int rc = tokenize_all(s->tok, json_string_value(p), json_string_length(p), add && tk_tokenizer_add_bos(s->tok),
                              &ids, &n, &err);
        json_decref(root);
        if (rc) return send_err(r, 400, "invalid_request_error", NULL, "prompt", err.msg);
    }
    json_t *toks = json_array();
    for (int i = 0; toks && i < n; i++) json_array_append_new(toks, json_integer(ids[i]));
    free(ids);
    return send_json(r, 200, json_pack("{s:o,s:i,s:i}", "tokens", toks, "count", n, "max_model_len", s->ctx_len));
}

/* Token ids from a JSON array, each in the vocabulary; -1: answered. */
static int ids_of(http_req *r, json_t *a, const char *param, int32_t **ids, int *n, enum MHD_Result *q) {
    size_t m = json_is_array(a) ? json_array_size(a) : 0;
    if (!json_is_array(a) || m > TK_API_MAX_BODY / 2) {
        *q = send_err(r, 400, "invalid_request_error", NULL, param, "'tokens' must be an array of token ids");
        return -1;
    }
    *ids = malloc((m + 1) * sizeof **ids);
    if (!*ids) {
        *q = send_err(r, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < m; i++) {
        json_t *t = json_array_get(a, i);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (id < 0 || id >= r->srv->n_vocab) {
            free(*ids);
            tk_api_error e;
            tk_api_error_set(&e, 400, "invalid_request_error", NULL, param,
                             "token %zu is not an id in the vocabulary [0, %d)", i, r->srv->n_vocab);
            *q = send_error(r, &e);
            return -1;
        }
        (*ids)[i] = (int32_t)id;
    }
    *n = (int)m;
    return 0;
}

/* {"tokens": [...]} -> {"prompt": text} (control tokens render as nothing,
 * as in generated text). */
static enum MHD_Result handle_detokenize(http_req *r) {
    enum MHD_Result q;
    json_t *root = load_body(r, &q);
    if (!root) return q;
    int32_t *ids;
    int n;
    int rc = ids_of(r, json_object_get(root, "tokens"), "tokens", &ids, &n, &q);
    json_decref(root);
    if (rc) return q;
    tk_strbuf text = {0};
    tk_detok d;
    tk_detok_init(&d, r->srv->tok, -1);
    char buf[256];
    for (int i = 0; i <= n; i++) {
        int got = i < n ? tk_detok_push(&d, ids[i], buf, sizeof buf) : tk_detok_flush(&d, buf, sizeof buf);
        if (got < 0) { /* a piece longer than buf: cannot happen for real vocabularies, refuse rather than cut */
            free(ids);
            tk_strbuf_free(&text);
            return send_err(r, 400, "invalid_request_error", NULL, "tokens", "a token's text is too long");
        }
        tk_strbuf_add(&text, buf, (size_t)got);
    }
    free(ids);
    json_t *o = text.failed ? NULL : json_pack("{s:o}", "prompt", tk_json_lossy_string(text.data ? text.data : "", text.len));
    tk_strbuf_free(&text);
    if (!o) return send_err(r, 500, "server_error", NULL, NULL, "out of memory");
    return send_json(r, 200, o);
}

/* ---- /v1/embeddings ---- */

#define EMBED_MAX_INPUTS 256
#define EMBED_MAX_TOKENS (1 << 18) /* over all inputs of a request */

typedef struct embed_req {
    tk_engine *engine;
    int32_t **ids;
    int *n;
    int n_inputs;
    tk_pooling pooling;
    bool normalize;
    float *out;
    int rc;
    tk_err err;
} embed_req;

static void embed_run(void *arg) {
    embed_req *q = arg;
    q->rc = tk_engine_embed(q->engine, (const int32_t *const *)q->ids, q->n, q->n_inputs, q->pooling, q->normalize,
                            q->out, &q->err);
}

static void embed_req_free(embed_req *q) {
    for (int i = 0; q->ids && i < q->n_inputs; i++) free(q->ids[i]);
    free(q->ids);
    free(q->n);
    free(q->out);
}

/* "input": a string, an array of strings, an array of token ids or an
 * array of such arrays -> q->ids (strings tokenized with the model's BOS
 * rule, as vLLM's add_special_tokens); -1 with *e filled. */
static int embed_inputs(http_req *r, json_t *in, embed_req *q, tk_api_error *e) {
    tk_server *s = r->srv;
    const char *bad_form = "'input' must be a string, an array of strings, an array of token ids or an array of "
                           "arrays of token ids";
    if (!in) return tk_api_error_set(e, 400, "invalid_request_error", NULL, "input", "'input' is required"), -1;
    json_t *one = json_is_string(in) || (json_is_array(in) && json_is_integer(json_array_get(in, 0))) ? in : NULL;
    size_t n = one ? 1 : json_is_array(in) ? json_array_size(in) : 0;
    if (n == 0) return tk_api_error_set(e, 400, "invalid_request_error", NULL, "input", "%s (and not empty)", bad_form), -1;
    if (n > EMBED_MAX_INPUTS)
        return tk_api_error_set(e, 400, "invalid_request_error", NULL, "input", "at most %d inputs", EMBED_MAX_INPUTS), -1;
    q->ids = calloc(n, sizeof *q->ids);
    q->n = calloc(n, sizeof *q->n);
    if (!q->ids || !q->n) return tk_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    q->n_inputs = (int)n;
    long long total = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *v = one ? one : json_array_get(in, i);
        tk_err err;
        if (json_is_string(v)) {
            if (json_string_length(v) > s->max_text_bytes || json_string_length(v) == 0) {
                tk_api_error_set(e, 400, "invalid_request_error", json_string_length(v) ? "context_length_exceeded" : NULL,
                                 "input", "input %zu is %s", i, json_string_length(v) ? "far longer than the context"
                                                                                      : "empty");
                return -1;
            }
            if (tokenize_all(s->tok, json_string_value(v), json_string_length(v), tk_tokenizer_add_bos(s->tok),
                             &q->ids[i], &q->n[i], &err)) {
                tk_api_error_set(e, 400, "invalid_request_error", NULL, "input", "input %zu: %s", i, err.msg);
                return -1;
            }
        } else if (json_is_array(v) && json_array_size(v) > 0 && json_array_size(v) <= (size_t)s->ctx_len) {
            q->ids[i] = malloc(json_array_size(v) * sizeof **q->ids);
            if (!q->ids[i]) return tk_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
            for (size_t k = 0; k < json_array_size(v); k++) {
                json_t *t = json_array_get(v, k);
                json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
                if (id < 0 || id >= s->n_vocab) {
                    tk_api_error_set(e, 400, "invalid_request_error", NULL, "input",
                                     "input %zu token %zu is not an id in the vocabulary [0, %d)", i, k, s->n_vocab);
                    return -1;
                }
                q->ids[i][k] = (int32_t)id;
            }
            q->n[i] = (int)json_array_size(v);
        } else if (json_is_array(v) && json_array_size(v) > (size_t)s->ctx_len) {
            q->n[i] = (int)json_array_size(v);
        } else {
            tk_api_error_set(e, 400, "invalid_request_error", NULL, "input", "%s (and not empty)", bad_form);
            return -1;
        }
        if (q->n[i] == 0 || q->n[i] > s->ctx_len) {
            tk_api_error_set(e, 400, "invalid_request_error", "context_length_exceeded", "input",
                             "input %zu has %d tokens; this model's maximum context length is %d tokens", i, q->n[i],
                             s->ctx_len);
            return -1;
        }
        total += q->n[i];
        if (total > EMBED_MAX_TOKENS) {
            tk_api_error_set(e, 400, "invalid_request_error", NULL, "input",
                             "the inputs hold more than %d tokens together", EMBED_MAX_TOKENS);
            return -1;
        }
    }
    return 0;
}

/* base64 of the float32 values, little-endian (what the OpenAI client
 * decodes with numpy.frombuffer(..., dtype=float32)). */
static json_t *base64_floats(const float *v, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t nb = n * 4;
    unsigned char *b = malloc(nb ? nb : 1);
    char *o = malloc((nb + 2) / 3 * 4 + 1);
    json_t *j = NULL;
    if (b && o) {
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++) b[i * 4 + (size_t)k] = (unsigned char)(u >> (8 * k));
        }
        size_t w = 0;
        for (size_t i = 0; i < nb; i += 3) {
            uint32_t x = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < nb ? b[i + 2] : 0);
            o[w++] = tab[x >> 18 & 63];
            o[w++] = tab[x >> 12 & 63];
            o[w++] = i + 1 < nb ? tab[x >> 6 & 63] : '=';
            o[w++] = i + 2 < nb ? tab[x & 63] : '=';
        }
        j = json_stringn(o, w);
    }
    free(b);
    free(o);
    return j;
}

/* {"input", "model"?, "encoding_format": "float" | "base64", "dimensions"
 * (only the model's), extensions "pooling": "mean" | "last" | "cls"
 * (default last: a causal model's only state that saw the whole input) and
 * "normalize" (default true)} -> the OpenAI list of embeddings. */
static enum MHD_Result handle_embeddings(http_req *r) {
    tk_server *s = r->srv;
    enum MHD_Result q;
    json_t *root = load_body(r, &q);
    if (!root) return q;
    embed_req job = {.engine = s->engine, .pooling = TK_POOLING_LAST, .normalize = true};
    tk_api_error e;
    e.status = 0;
    bool b64 = false;
    json_t *v;
    if ((v = json_object_get(root, "encoding_format")) && !json_is_null(v)) {
        const char *f = json_is_string(v) ? json_string_value(v) : "";
        if (!strcmp(f, "base64")) b64 = true;
        else if (strcmp(f, "float"))
            tk_api_error_set(&e, 400, "invalid_request_error", NULL, "encoding_format",
                             "'encoding_format' must be \"float\" or \"base64\"");
    }
    if (!e.status && (v = json_object_get(root, "dimensions")) && !json_is_null(v) &&
        !(json_is_integer(v) && json_integer_value(v) == s->embed_dim))
        tk_api_error_set(&e, 400, "invalid_request_error", NULL, "dimensions",
                         "'dimensions' can only be this model's embedding size, %d", s->embed_dim);
    if (!e.status && (v = json_object_get(root, "pooling")) && !json_is_null(v)) {
        const char *p = json_is_string(v) ? json_string_value(v) : "";
        if (!strcmp(p, "mean")) job.pooling = TK_POOLING_MEAN;
        else if (!strcmp(p, "last")) job.pooling = TK_POOLING_LAST;
        else if (!strcmp(p, "cls")) job.pooling = TK_POOLING_CLS;
        else tk_api_error_set(&e, 400, "invalid_request_error", NULL, "pooling", "'pooling' must be \"mean\", \"last\" or \"cls\"");
    }
    if (!e.status && (v = json_object_get(root, "normalize")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) tk_api_error_set(&e, 400, "invalid_request_error", NULL, "normalize", "'normalize' must be a boolean");
        else job.normalize = json_is_true(v);
    }
    if (!e.status) embed_inputs(r, json_object_get(root, "input"), &job, &e);
    json_decref(root);
    if (e.status) {
        embed_req_free(&job);
        return send_error(r, &e);
    }
    size_t D = (size_t)s->embed_dim;
    job.out = malloc((size_t)job.n_inputs * D * sizeof *job.out);
    if (!job.out) {
        embed_req_free(&job);
        return send_err(r, 500, "server_error", NULL, NULL, "out of memory");
    }
    tk_step_job sj = {.run = embed_run, .arg = &job};
    if (tk_step_jobs_run(&s->step_jobs, &sj, &s->stopping)) {
        embed_req_free(&job);
        return send_err(r, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
    }
    if (job.rc) {
        embed_req_free(&job);
        return send_err(r, 503, "server_error", NULL, NULL, job.err.msg); /* no free sequence or KV: try again */
    }
    json_t *data = json_array();
    long long total = 0;
    for (int i = 0; data && i < job.n_inputs; i++) {
        total += job.n[i];
        const float *x = job.out + (size_t)i * D;
        json_t *emb = b64 ? base64_floats(x, D) : json_array();
        for (size_t d = 0; !b64 && emb && d < D; d++) json_array_append_new(emb, json_real(x[d]));
        json_array_append_new(data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding", emb));
    }
    embed_req_free(&job);
    return send_json(r, 200, json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model",
                                       s->cfg.model_name, "usage", "prompt_tokens", (json_int_t)total, "total_tokens",
                                       (json_int_t)total));
}

/* ---- simple endpoints ---- */

static json_t *model_json(tk_server *s) {
    return json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", s->cfg.model_name, "object", "model", "created",
                     (json_int_t)s->created, "owned_by", "tokamak", "max_model_len", s->ctx_len);
}

static enum MHD_Result handle_get(http_req *r, const char *url) {
    tk_server *s = r->srv;
    switch (r->route) {
    case R_HEALTH:
        if (atomic_load(&s->stopping))
            return send_err(r, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        return send_json(r, 200, json_pack("{s:s}", "status", "ok"));
    case R_METRICS: {
        char *t = tk_server_metrics_text(s);
        if (!t) return MHD_NO;
        return send_body(r, 200, "text/plain; version=0.0.4; charset=utf-8", t, strlen(t));
    }
    case R_STATS: {
        char *t = tk_server_stats_json(s);
        if (!t) return MHD_NO;
        return send_body(r, 200, "application/json", t, strlen(t));
    }
    case R_WEB:
        r->responded = true;
        return tk_web_send(r->conn, tk_web_find(url));
    case R_MODELS:
        return send_json(r, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_json(s)));
    case R_MODEL: {
        const char *name = url + strlen("/v1/models/");
        if (strcmp(name, s->cfg.model_name))
            return send_err(r, 404, "invalid_request_error", "model_not_found", "model", "The model does not exist");
        return send_json(r, 200, model_json(s));
    }
    default:
        return send_err(r, 404, "invalid_request_error", "not_found", NULL, "not found");
    }
}

static int match_route(const char *url) {
    if (!strcmp(url, "/v1/completions")) return R_COMPLETIONS;
    if (!strcmp(url, "/v1/chat/completions")) return R_CHAT;
    if (!strcmp(url, "/v1/models")) return R_MODELS;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) return R_MODEL;
    if (!strcmp(url, "/health")) return R_HEALTH;
    if (!strcmp(url, "/tokenize")) return R_TOKENIZE;
    if (!strcmp(url, "/detokenize")) return R_DETOKENIZE;
    if (!strcmp(url, "/v1/embeddings")) return R_EMBEDDINGS;
    if (!strcmp(url, "/metrics")) return R_METRICS;
    if (!strcmp(url, "/stats")) return R_STATS;
    if (tk_web_find(url)) return R_WEB;
    return R_NONE;
}

/* ---- DNS rebinding guard ---- */

static bool is_loopback_addr(const char *host) {
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

/* Is a Host header ("name", "name:port", "[v6]", "[v6]:port") one this
 * server answers?  A web page that rebinds its own name to 127.0.0.1 still
 * sends that name: refusing it keeps key-less local servers private. */
static bool host_allowed(const tk_server *s, const char *h) {
    if (!s->check_host || !h) return true; /* no Host: not a browser (HTTP/1.0) */
    char name[256];
    size_t n;
    const char *end;
    if (h[0] == '[') {
        h++;
        end = strchr(h, ']');
        if (!end || (end[1] && end[1] != ':')) return false;
    } else {
        end = strrchr(h, ':');
        if (!end) end = h + strlen(h);
    }
    n = (size_t)(end - h);
    if (n == 0 || n >= sizeof name) return false;
    memcpy(name, h, n);
    name[n] = 0;
    if (!strcasecmp(name, "localhost") || is_loopback_addr(name)) return true;
    for (int i = 0; i < s->cfg.n_allowed_hosts; i++)
        if (!strcmp(s->cfg.allowed_hosts[i], "*") || !strcasecmp(s->cfg.allowed_hosts[i], name)) return true;
    return false;
}

/* Constant-time comparison of the bearer token against the key. */
static bool auth_ok(tk_server *s, struct MHD_Connection *c) {
    if (!s->cfg.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    size_t a = strlen(h), b = strlen(s->cfg.api_key);
    unsigned char diff = a != b;
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)(h[i] ^ s->cfg.api_key[i % (b ? b : 1)]);
    return diff == 0;
}

/* An oversized body announced as longer than this is answered at once. */
#define DISCARD_LIMIT (16 * (unsigned long long)TK_API_MAX_BODY)

/* early: the client may still be sending (see drain_request). */
static enum MHD_Result send_413(http_req *r, bool early) {
    r->early_413 = early;
    return send_err(r, 413, "invalid_request_error", "request_too_large", NULL, "request body too large (limit 1 MiB)");
}

/* A 413 sent before the whole body arrived: MHD has written it and is
 * closing.  Closing with unread bytes would reset the connection, and a
 * reset makes the client's system drop the 413 it has not read yet (the
 * client sees a broken pipe instead).  So read and drop what the client
 * still sends until it stops (1 s quiet) or closes, for up to 10 s or
 * until shutdown: a lingering close.  This runs on the connection's own
 * thread. */
static void drain_request(tk_server *s, struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return;
    shutdown(ci->connect_fd, SHUT_WR); /* the answer is complete: the client may read to its end */
    double start = tk_clock_seconds(TK_CLOCK_WALL), heard = start;
    char buf[16384];
    for (;;) {
        double now = tk_clock_seconds(TK_CLOCK_WALL);
        if (now - start > 10.0 || now - heard > 1.0 || atomic_load(&s->stopping)) return;
        ssize_t n = recv(ci->connect_fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return;
        if (n > 0) heard = now;
        else usleep(10000);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    tk_server *s = cls;
    http_req *r = *con_cls;
    if (!r) {
        /* First call: headers only. */
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->srv = s;
        r->conn = c;
        r->http10 = !strcmp(version, MHD_HTTP_VERSION_1_0);
        atomic_init(&r->refs, 1);
        r->route = match_route(url);
        *con_cls = r;
        atomic_fetch_add(&s->active, 1);
        atomic_fetch_add(&s->http_requests, 1);
        bool post_route = is_post_route(r->route);
        bool is_post = !strcmp(method, "POST"), is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        if (!host_allowed(s, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST))) {
            tk_api_error e;
            tk_api_error_set(&e, 403, "invalid_request_error", "host_not_allowed", NULL,
                             "Host '%.200s' is not allowed: a server without --api-key on a loopback address answers "
                             "only requests for localhost, 127.x.x.x or [::1] (a guard against DNS rebinding); "
                             "start it with --allowed-host NAME or --api-key",
                             MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST));
            return send_error(r, &e);
        }
        if (r->route == R_NONE) return send_err(r, 404, "invalid_request_error", "not_found", NULL, "not found");
        if (post_route ? !is_post : !is_get)
            return send_err(r, 405, "invalid_request_error", "method_not_allowed", NULL, "method not allowed");
        if ((!strncmp(url, "/v1/", 4) || post_route) && !auth_ok(s, c))
            return send_err(r, 401, "invalid_request_error", "invalid_api_key", NULL,
                            "Incorrect or missing API key (use 'Authorization: Bearer KEY')");
        if (atomic_load(&s->stopping))
            return send_err(r, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            if (errno || end == cl || v > TK_API_MAX_BODY) r->too_large = true;
            /* A moderately oversized body is read and discarded, then
             * answered; a huge one is answered at once, and what the client
             * still sends is drained when the request ends (on_completed). */
            if (r->too_large && (errno || end == cl || v > DISCARD_LIMIT)) return send_413(r, true);
        }
        if (!post_route) return handle_get(r, url);
        track_set_deadline(s, c, s->cfg.body_timeout_s);
        return MHD_YES;
    }
    if (*upload_size) {
        /* Body bytes: collect up to the limit, then only discard. */
        if (!r->responded && !r->too_large) {
            size_t n = *upload_size;
            if (n > TK_API_MAX_BODY - r->body_len) {
                r->too_large = true;
                free(r->body);
                r->body = NULL;
                r->body_len = r->body_cap = 0;
            } else {
                if (r->body_len + n > r->body_cap) {
                    size_t cap = r->body_cap ? r->body_cap : 4096;
                    while (cap < r->body_len + n) cap *= 2;
                    if (cap > TK_API_MAX_BODY) cap = TK_API_MAX_BODY;
                    char *b = realloc(r->body, cap);
                    if (!b) return MHD_NO;
                    r->body = b;
                    r->body_cap = cap;
                }
                memcpy(r->body + r->body_len, upload_data, n);
                r->body_len += n;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    track_set_deadline(s, c, 0); /* the whole request arrived */
    if (r->responded) return MHD_YES;
    if (r->too_large) return send_413(r, false);
    if (r->route == R_TOKENIZE) return handle_tokenize(r);
    if (r->route == R_DETOKENIZE) return handle_detokenize(r);
    if (r->route == R_EMBEDDINGS) return handle_embeddings(r);
    return handle_generate(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    tk_server *s = cls;
    http_req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    if (r->early_413 && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        track_set_deadline(s, c, 0); /* the drain has limits of its own */
        drain_request(s, c);
    }
    track_set_deadline(s, c, s->cfg.header_timeout_s); /* a kept-alive connection's next request */
    /* A failed write, a closed connection or shutdown: stop generating now. */
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && r->events && !r->finished)
        atomic_fetch_add(&s->cancelled_disconnect, 1);
    req_cancel(r);
    atomic_fetch_sub(&s->active, 1);
    req_unref(r);
}

/* True when text is token id with special-token parsing and not without. */
static bool special_only(const tk_tokenizer *tok, const char *text, int id) {
    int32_t a[2], b[2];
    int na = 0, nb = 0;
    tk_err e;
    size_t len = strlen(text);
    if (tk_tokenize(tok, text, len, false, true, a, 2, &na, &e) || na != 1 || a[0] != id) return false;
    return tk_tokenize(tok, text, len, false, false, b, 2, &nb, &e) == 0 && !(nb == 1 && b[0] == id);
}

static int cmp_longer_first(const void *a, const void *b) {
    size_t x = ((const struct tk_special_text *)a)->n, y = ((const struct tk_special_text *)b)->n;
    return x > y ? -1 : x < y;
}

static void free_special_texts(tk_server *s) {
    for (int i = 0; i < s->n_special_texts; i++) free(s->special_texts[i].s);
    free(s->special_texts);
    s->special_texts = NULL;
    s->n_special_texts = 0;
}

/* The control-token texts to defuse in chat content (see defuse_specials). */
static int collect_special_texts(tk_server *s, tk_err *err) {
    int nv = tk_tokenizer_n_vocab(s->tok);
    for (int id = 0; id < nv; id++) {
        int ty = tk_tokenizer_token_type(s->tok, id);
        const char *p = tk_tokenizer_piece(s->tok, id);
        if (ty == TK_TOKEN_NORMAL || ty == TK_TOKEN_BYTE || !p || !p[0] || !special_only(s->tok, p, id)) continue;
        struct tk_special_text *more = realloc(s->special_texts, ((size_t)s->n_special_texts + 1) * sizeof *more);
        char *copy = strdup(p);
        if (more) s->special_texts = more;
        if (!more || !copy) {
            free(copy);
            free_special_texts(s);
            return tk_err_set(err, "out of memory");
        }
        s->special_texts[s->n_special_texts++] = (struct tk_special_text){copy, strlen(copy), id};
        s->special_first[(unsigned char)p[0]] = true;
    }
    if (s->n_special_texts > 1) /* the tokenizer matches the longest text */
        qsort(s->special_texts, (size_t)s->n_special_texts, sizeof *s->special_texts, cmp_longer_first);
    return 0;
}

int tk_server_start(tk_server *s, tk_engine *e, const tk_chat_template *tmpl, const tk_server_config *cfg,
                    tk_err *err) {
    s->engine = e;
    s->tok = tk_engine_tokenizer(e);
    s->tmpl = tmpl;
    s->cfg = *cfg;
    s->ctx_len = tk_engine_ctx_len(e);
    s->n_vocab = tk_engine_n_vocab(e);
    s->created = time(NULL);
    s->listen_fd = -1;
    s->check_host = !cfg->api_key && is_loopback_addr(cfg->host);
    tk_model_summary ms;
    tk_engine_summary(e, &ms);
    s->kv_blocks_total = ms.kv_blocks;
    s->kv_block_size = ms.kv_block_size;
    tk_spec_info si;
    tk_engine_spec_info(e, &si);
    s->has_draft_model = si.has_draft_model;
    /* No token stands for more text than 4x its longest stored piece (pieces
     * spell spaces as 3-byte U+2581, bytes as <0xNN>), so text beyond that
     * bound times the context is over the context for sure; refusing it
     * before tokenizing keeps a 1 MiB prompt from costing a second of CPU. */
    size_t longest = 1;
    if (s->tok) {
        for (int i = 0; i < tk_tokenizer_n_vocab(s->tok); i++) {
            const char *p = tk_tokenizer_piece(s->tok, i);
            size_t n = p ? strlen(p) : 0;
            if (n > longest) longest = n;
        }
    }
    s->max_text_bytes = (size_t)s->ctx_len * longest * 4 + 1024;
    if (!s->tok) return tk_err_set(err, "the model has no tokenizer");
    if (!cfg->parse_special_in_content && collect_special_texts(s, err)) return -1;

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    /* poll(), not select(): select cannot watch descriptors past 1023. */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC;
    socklen_t sl;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, cfg->host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)cfg->port);
        sl = sizeof *a4;
    } else if (inet_pton(AF_INET6, cfg->host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)cfg->port);
        sl = sizeof *a6;
        flags |= MHD_USE_IPv6;
    } else {
        return tk_err_set(err, "--host must be a numeric IPv4 or IPv6 address, got '%s'", cfg->host);
    }
    (void)sl;
    if (tk_step_jobs_init(&s->step_jobs)) {
        free_special_texts(s);
        return tk_err_set(err, "cannot set up the step-job queue");
    }
    s->embed_dim = ms.dim;
    pthread_mutex_init(&s->track_mu, NULL);
    s->mhd = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, &ss,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
                              on_connection, s, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)(cfg->max_connections > 0 ? cfg->max_connections : 256),
                              MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_connections_per_ip,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->idle_timeout_s,
                              MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
    if (!s->mhd) {
        free_special_texts(s);
        pthread_mutex_destroy(&s->track_mu);
        tk_step_jobs_destroy(&s->step_jobs);
        return tk_err_set(err, "cannot listen on %s port %d", cfg->host, cfg->port);
    }
    if (pthread_create(&s->reaper, NULL, reaper_main, s)) {
        tk_server_stop(s);
        return tk_err_set(err, "cannot start the connection reaper thread");
    }
    s->reaper_running = true;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    if (di) s->cfg.port = di->port;
    return 0;
}

void tk_server_begin_stop(tk_server *s) {
    atomic_store(&s->stopping, true);
    /* Stop accepting; MHD hands the listening socket back to us, to be
     * closed only after MHD_stop_daemon. */
    if (s->mhd && s->listen_fd < 0) s->listen_fd = MHD_quiesce_daemon(s->mhd);
}

void tk_server_stop(tk_server *s) {
    if (s->reaper_running) {
        atomic_store(&s->reaper_quit, true);
        pthread_join(s->reaper, NULL);
        s->reaper_running = false;
    }
    if (s->mhd) {
        MHD_stop_daemon(s->mhd);
        pthread_mutex_destroy(&s->track_mu);
        tk_step_jobs_destroy(&s->step_jobs);
    }
    s->mhd = NULL;
    if (s->listen_fd >= 0) close(s->listen_fd);
    s->listen_fd = -1;
    free_special_texts(s);
}
