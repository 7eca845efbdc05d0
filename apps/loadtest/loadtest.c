/* tokamak loadtest: a benchmark client for any OpenAI-compatible server
 * (in the spirit of vLLM's benchmark_serving).  It sends streaming
 * /v1/completions requests with synthetic word prompts, either at a
 * Poisson rate or with a fixed number in flight, and measures request and
 * token throughput, time to first token (TTFT), time per output token
 * (TPOT) and inter-token latency (ITL).  Bounded: a request count, a
 * per-request timeout and an overall duration. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/args.h"
#include "commands.h"
#include "http_client.h"
#include "common/strbuf.h"

#define LT_MAX_REQUESTS 100000
#define LT_MAX_INFLIGHT 1024
#define LT_MAX_LEN 1000000
#define LT_MAX_PREFIX_GROUPS 1024
#define LT_MAX_EVENT_BYTES (1 << 20)

static const char *const WORDS[] = {
    "the",    "of",     "and",   "to",     "in",     "is",    "that",   "for",    "it",     "as",    "was",
    "with",   "be",     "by",    "on",     "not",    "he",    "this",   "are",    "or",     "his",   "from",
    "at",     "which",  "but",   "have",   "an",     "had",   "they",   "you",    "were",   "their", "one",
    "all",    "we",     "can",   "her",    "has",    "there", "been",   "if",     "more",   "when",  "will",
    "would",  "who",    "so",    "no",     "time",   "people", "water", "number", "way",    "could", "day",
    "first",  "after",  "many",  "some",   "these",  "two",   "may",    "then",   "do",     "any",   "like",
    "other",  "into",   "only",  "new",    "about",  "over",  "such",   "our",    "most",   "man",   "also",
    "world",  "year",   "work",  "house",  "light",  "river", "music",  "city",   "table",  "green", "small",
    "system", "value",  "state", "place",  "north",  "paper", "number", "market", "letter", "voice", "window",
    "garden", "engine", "stone", "bridge", "summer", "animal", "energy", "signal", "memory", "circle"};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

/* ---- options ---- */

typedef struct lt_dist {
    int kind; /* 0 fixed, 1 uniform, 2 normal */
    double a, b;
} lt_dist;

static int parse_dist(const char *s, lt_dist *d) {
    char *end;
    if (!strncmp(s, "normal:", 7)) {
        d->kind = 2;
        d->a = strtod(s + 7, &end);
        if (*end != ':') return -1;
        d->b = strtod(end + 1, &end);
        if (*end || !(d->a >= 1) || !(d->b >= 0) || d->a > LT_MAX_LEN) return -1;
        return 0;
    }
    d->a = strtod(s, &end);
    if (*end == ':') {
        d->kind = 1;
        d->b = strtod(end + 1, &end);
        if (*end || !(d->a >= 1) || !(d->b >= d->a) || d->b > LT_MAX_LEN) return -1;
        return 0;
    }
    d->kind = 0;
    if (*end || !(d->a >= 1) || d->a > LT_MAX_LEN || d->a != floor(d->a)) return -1;
    return 0;
}

/* xoshiro-style splitmix64 stream: deterministic per (seed, request). */
static uint64_t rng_next(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *x) { return (double)(rng_next(x) >> 11) * 0x1.0p-53; }

static int dist_sample(const lt_dist *d, uint64_t *x) {
    double v;
    if (d->kind == 0) {
        v = d->a;
    } else if (d->kind == 1) {
        v = d->a + floor(rng_unit(x) * (d->b - d->a + 1));
    } else {
        double u1 = rng_unit(x), u2 = rng_unit(x);
        if (u1 < 1e-300) u1 = 1e-300;
        v = round(d->a + d->b * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
    }
    if (v < 1) v = 1;
    if (v > LT_MAX_LEN) v = LT_MAX_LEN;
    return (int)v;
}

/* ---- one request ---- */

typedef struct lt_result {
    bool sent, ok;
    int status;
    char err[200];
    double start;           /* seconds since the benchmark started */
    double ttft, latency;   /* seconds */
    int prompt_words, prompt_tokens, output_tokens, chunks;
    int cached_tokens;      /* usage.prompt_tokens_details.cached_tokens (prefix cache); -1: not reported */
    double *itl;            /* gaps between content chunks (seconds) */
    int n_itl, cap_itl;
} lt_result;

typedef struct lt_bench {
    tk_url url;
    char path[1100];
    const char *model, *api_key;
    int n_requests;
    double rate;            /* 0: no arrival process */
    int concurrency;        /* 0: unbounded (rate mode) */
    lt_dist prompt_len, output_len;
    int shared_prefix;
    int prefix_groups;      /* request i starts with prefix i % prefix_groups */
    float temperature;      /* 0: greedy; the API's other sampling settings are left at their defaults */
    uint64_t seed;
    double timeout, duration;
    double t0, deadline;    /* monotonic */
    char **prefixes;        /* the shared prefix texts, one per group */
    lt_result *res;
    atomic_int next;        /* concurrency mode: next request index */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int inflight;
} lt_bench;

typedef struct lt_stream {
    lt_result *r;
    double t_send, t_last;
    tk_strbuf buf;            /* SSE bytes not yet split into events */
    bool done, failed;
} lt_stream;

static void on_sse_data(lt_stream *s, const char *data, size_t n) {
    lt_result *r = s->r;
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        s->done = true;
        return;
    }
    json_error_t je;
    json_t *o = json_loadb(data, n, 0, &je);
    if (!o) return; /* tolerate non-JSON events */
    json_t *e = json_object_get(o, "error");
    if (e) {
        json_t *m = json_object_get(e, "message");
        snprintf(r->err, sizeof r->err, "stream error: %s", json_is_string(m) ? json_string_value(m) : "?");
        s->failed = true;
    }
    json_t *ch = json_object_get(o, "choices");
    json_t *c0 = json_is_array(ch) ? json_array_get(ch, 0) : NULL;
    json_t *text = c0 ? json_object_get(c0, "text") : NULL;
    if (json_is_string(text) && json_string_length(text) > 0) {
        double t = tk_clock_seconds(TK_CLOCK_WALL);
        if (r->chunks == 0) {
            r->ttft = t - s->t_send;
        } else {
            if (r->n_itl == r->cap_itl) {
                int cap = r->cap_itl ? r->cap_itl * 2 : 64;
                double *p = realloc(r->itl, (size_t)cap * sizeof *p);
                if (p) {
                    r->itl = p;
                    r->cap_itl = cap;
                }
            }
            if (r->n_itl < r->cap_itl) r->itl[r->n_itl++] = t - s->t_last;
        }
        s->t_last = t;
        r->chunks++;
    }
    json_t *u = json_object_get(o, "usage");
    if (json_is_object(u)) {
        json_t *pt = json_object_get(u, "prompt_tokens"), *ct = json_object_get(u, "completion_tokens");
        if (json_is_integer(pt)) r->prompt_tokens = (int)json_integer_value(pt);
        if (json_is_integer(ct)) r->output_tokens = (int)json_integer_value(ct);
        json_t *d = json_object_get(u, "prompt_tokens_details");
        json_t *cached = json_is_object(d) ? json_object_get(d, "cached_tokens") : NULL;
        if (json_is_integer(cached) && json_integer_value(cached) >= 0 && json_integer_value(cached) <= INT_MAX)
            r->cached_tokens = (int)json_integer_value(cached);
    }
    json_decref(o);
}

/* Splits the SSE stream into events (blank-line separated) and hands each
 * "data:" payload on. */
static int on_body(void *user, const char *data, size_t n) {
    lt_stream *s = user;
    if (s->r->status != 200) {
        /* An error body: keep its start for the message. */
        if (s->buf.len < 4096) tk_strbuf_add(&s->buf, data, n);
        return 0;
    }
    tk_strbuf_add(&s->buf, data, n);
    if (s->buf.failed || s->buf.len > LT_MAX_EVENT_BYTES) {
        snprintf(s->r->err, sizeof s->r->err, "SSE event too large or out of memory");
        s->failed = true;
        return 1;
    }
    for (;;) {
        char *sep = s->buf.len ? strstr(s->buf.data, "\n\n") : NULL;
        char *sep2 = s->buf.len ? strstr(s->buf.data, "\r\n\r\n") : NULL;
        size_t skip = 2;
        if (sep2 && (!sep || sep2 < sep)) {
            sep = sep2;
            skip = 4;
        }
        if (!sep) break;
        *sep = 0;
        for (char *line = s->buf.data; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            size_t ll = strlen(line);
            if (ll && line[ll - 1] == '\r') line[--ll] = 0;
            if (!strncmp(line, "data:", 5)) {
                char *p = line + 5;
                if (*p == ' ') p++;
                on_sse_data(s, p, strlen(p));
            }
            line = nl ? nl + 1 : NULL;
        }
        tk_strbuf_consume(&s->buf, (size_t)(sep - s->buf.data) + skip);
        if (s->done || s->failed) return 1;
    }
    return 0;
}

static char *make_prompt(lt_bench *b, int idx, int *n_words) {
    uint64_t x = b->seed * 0x9e3779b97f4a7c15ULL + (uint64_t)idx * 0xd1b54a32d192ed03ULL + 1;
    int n = dist_sample(&b->prompt_len, &x);
    tk_strbuf s = {0};
    if (b->prefixes) tk_strbuf_adds(&s, b->prefixes[idx % b->prefix_groups]);
    for (int i = 0; i < n; i++) {
        if (s.len) tk_strbuf_adds(&s, " ");
        tk_strbuf_adds(&s, WORDS[rng_next(&x) % N_WORDS]);
    }
    *n_words = b->shared_prefix + n;
    if (s.failed) {
        tk_strbuf_free(&s);
        return NULL;
    }
    return s.data;
}

static void run_one(lt_bench *b, int idx) {
    lt_result *r = &b->res[idx];
    r->sent = true;
    double t = tk_clock_seconds(TK_CLOCK_WALL);
    r->start = t - b->t0;
    if (t >= b->deadline) {
        snprintf(r->err, sizeof r->err, "benchmark duration exceeded before sending");
        return;
    }
    uint64_t x = b->seed * 0x2545f4914f6cdd1dULL + (uint64_t)idx * 0x9e3779b97f4a7c15ULL + 7;
    int max_tokens = dist_sample(&b->output_len, &x);
    char *prompt = make_prompt(b, idx, &r->prompt_words);
    json_t *req = prompt ? json_pack("{s:s,s:s,s:i,s:b,s:b,s:{s:b},s:f}", "model", b->model, "prompt", prompt,
                                     "max_tokens", max_tokens, "ignore_eos", 1, "stream", 1, "stream_options",
                                     "include_usage", 1, "temperature", (double)b->temperature)
                         : NULL;
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    free(prompt);
    if (!body) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return;
    }
    lt_stream s = {.r = r};
    double left = b->deadline - tk_clock_seconds(TK_CLOCK_WALL);
    double timeout = b->timeout < left ? b->timeout : left;
    tk_err err;
    s.t_send = tk_clock_seconds(TK_CLOCK_WALL);
    int rc = tk_http_request(&b->url, "POST", b->path, b->api_key, body, strlen(body), timeout, &r->status, on_body,
                             &s, &err);
    r->latency = tk_clock_seconds(TK_CLOCK_WALL) - s.t_send;
    free(body);
    if (rc) {
        snprintf(r->err, sizeof r->err, "%.180s", err.msg);
    } else if (r->status != 200) {
        snprintf(r->err, sizeof r->err, "HTTP %d: %.*s", r->status, (int)(s.buf.len < 150 ? s.buf.len : 150),
                 s.buf.data ? s.buf.data : "");
    } else if (s.failed) {
        /* message already set */
    } else if (!s.done) {
        snprintf(r->err, sizeof r->err, "stream ended without [DONE]");
    } else if (r->chunks == 0) {
        snprintf(r->err, sizeof r->err, "no tokens received");
    } else {
        r->ok = true;
        if (r->output_tokens <= 0) r->output_tokens = r->chunks; /* server sent no usage */
    }
    tk_strbuf_free(&s.buf);
}

static void *worker_pool(void *arg) {
    lt_bench *b = arg;
    for (;;) {
        int i = atomic_fetch_add(&b->next, 1);
        if (i >= b->n_requests || tk_clock_seconds(TK_CLOCK_WALL) >= b->deadline) break;
        run_one(b, i);
    }
    return NULL;
}

typedef struct lt_job {
    lt_bench *b;
    int idx;
} lt_job;

static void *worker_one(void *arg) {
    lt_job *j = arg;
    run_one(j->b, j->idx);
    pthread_mutex_lock(&j->b->mu);
    j->b->inflight--;
    pthread_cond_broadcast(&j->b->cv);
    pthread_mutex_unlock(&j->b->mu);
    return NULL;
}

/* ---- statistics ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct lt_stat {
    int n;
    double mean, p50, p90, p99, max;
} lt_stat;

static double pct(const double *v, int n, double p) {
    if (n == 0) return 0;
    double pos = p / 100.0 * (n - 1);
    int lo = (int)floor(pos), hi = (int)ceil(pos);
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

static lt_stat stat_of(double *v, int n) {
    lt_stat s = {.n = n};
    if (n == 0) return s;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    s.mean = sum / n;
    s.p50 = pct(v, n, 50);
    s.p90 = pct(v, n, 90);
    s.p99 = pct(v, n, 99);
    s.max = v[n - 1];
    return s;
}

static json_t *stat_json(lt_stat s) {
    return json_pack("{s:i,s:f,s:f,s:f,s:f,s:f}", "count", s.n, "mean", s.mean * 1e3, "p50", s.p50 * 1e3, "p90",
                     s.p90 * 1e3, "p99", s.p99 * 1e3, "max", s.max * 1e3);
}

/* ---- SVG: per-request TTFT and end-to-end latency against send time ---- */

static int write_svg(const char *path, const lt_bench *b, double duration) {
    const double W = 900, H = 480, L = 70, R = 20, T = 40, B = 50;
    double xmax = duration > 0 ? duration : 1, ymax = 0;
    for (int i = 0; i < b->n_requests; i++)
        if (b->res[i].ok && b->res[i].latency > ymax) ymax = b->res[i].latency;
    ymax = ymax > 0 ? ymax * 1.1e3 : 1; /* ms */
    tk_strbuf s = {0};
    tk_strbuf_printf(&s,
                   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                   "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                   W, H);
    tk_strbuf_printf(&s, "<text x=\"%.0f\" y=\"22\" font-size=\"15\">Latency over time (%d requests)</text>\n", L,
                   b->n_requests);
    double pw = W - L - R, ph = H - T - B;
    for (int k = 0; k <= 5; k++) {
        double y = T + ph - ph * k / 5, x = L + pw * k / 5;
        tk_strbuf_printf(&s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, y, L + pw, y);
        tk_strbuf_printf(&s, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n", L - 6, y + 4, ymax * k / 5);
        tk_strbuf_printf(&s, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.1f</text>\n", x, T + ph + 18,
                       xmax * k / 5);
    }
    tk_strbuf_printf(&s, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n", L,
                   (double)T, pw, ph);
    tk_strbuf_printf(&s, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">request sent at (s)</text>\n", L + pw / 2,
                   H - 12);
    tk_strbuf_printf(&s, "<text transform=\"translate(16,%.1f) rotate(-90)\" text-anchor=\"middle\">latency (ms)</text>\n",
                   T + ph / 2);
    for (int i = 0; i < b->n_requests; i++) {
        const lt_result *r = &b->res[i];
        if (!r->ok) continue;
        double x = L + pw * (r->start / xmax);
        tk_strbuf_printf(&s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#d62728\" fill-opacity=\"0.7\"/>\n", x,
                       T + ph - ph * (r->latency * 1e3 / ymax));
        tk_strbuf_printf(&s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#1f77b4\" fill-opacity=\"0.7\"/>\n", x,
                       T + ph - ph * (r->ttft * 1e3 / ymax));
    }
    tk_strbuf_printf(&s,
                   "<circle cx=\"%.1f\" cy=\"30\" r=\"4\" fill=\"#1f77b4\"/><text x=\"%.1f\" y=\"34\">TTFT</text>\n"
                   "<circle cx=\"%.1f\" cy=\"30\" r=\"4\" fill=\"#d62728\"/><text x=\"%.1f\" y=\"34\">end-to-end</text>\n",
                   W - 220, W - 212, W - 150, W - 142);
    tk_strbuf_adds(&s, "</svg>\n");
    int rc = -1;
    FILE *f = s.failed ? NULL : fopen(path, "w");
    if (f) {
        rc = fwrite(s.data, 1, s.len, f) == s.len ? 0 : -1;
        if (fclose(f)) rc = -1;
    }
    tk_strbuf_free(&s);
    return rc;
}

/* ---- the model name: ask the server when not given ---- */

static int collect(void *user, const char *data, size_t n) {
    tk_strbuf *s = user;
    if (s->len + n > (1 << 20)) return 1;
    tk_strbuf_add(s, data, n);
    return 0;
}

static char *discover_model(const lt_bench *b, const char *base_path, tk_err *err) {
    char path[1200];
    snprintf(path, sizeof path, "%s/models", base_path);
    tk_strbuf s = {0};
    int status;
    if (tk_http_request(&b->url, "GET", path, b->api_key, NULL, 0, 30, &status, collect, &s, err)) {
        tk_strbuf_free(&s);
        return NULL;
    }
    char *name = NULL;
    json_error_t je;
    json_t *o = status == 200 && s.len ? json_loadb(s.data, s.len, 0, &je) : NULL;
    json_t *id = json_object_get(json_array_get(json_object_get(o, "data"), 0), "id");
    if (json_is_string(id)) name = strdup(json_string_value(id));
    else tk_err_set(err, "GET %s gave HTTP %d without a model id; pass --model", path, status);
    json_decref(o);
    tk_strbuf_free(&s);
    return name;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: tokamak loadtest --url URL [options]\n"
            "  --url URL              server, e.g. http://127.0.0.1:8000 (or .../v1)\n"
            "  --requests N           requests to send (default 100)\n"
            "  --rate R               Poisson arrivals at R requests/s\n"
            "  --concurrency C        at most C requests in flight (default 4 without --rate)\n"
            "  --prompt-len DIST      words per prompt after the shared prefix (default 128)\n"
            "  --output-len DIST      max_tokens with ignore_eos (default 128)\n"
            "                         DIST: N | LO:HI (uniform) | normal:MEAN:STDDEV\n"
            "  --shared-prefix LEN    every prompt starts with the same LEN words\n"
            "  --prefix-groups N      N different shared prefixes, request i taking prefix i mod N (default 1)\n"
            "  --temperature T        sampling temperature sent with each request (default 0: greedy)\n"
            "  --model NAME           model name (default: the first of GET /v1/models)\n"
            "  --api-key KEY          sent as 'Authorization: Bearer KEY'\n"
            "  --seed S               prompt/length randomness (default 0)\n"
            "  --timeout SEC          per-request limit (default 300)\n"
            "  --duration SEC         overall limit; later requests are not sent (default 1800)\n"
            "  --json                 print the results as JSON\n"
            "  --per-request          also list each request: send time, TTFT, latency, prompt and cached tokens\n"
            "  --svg FILE             write a latency-over-time chart\n");
}

int tk_cmd_loadtest(int argc, char **argv) {
    const char *url = NULL, *pl = "128", *ol = "128", *svg = NULL;
    lt_bench b;
    memset(&b, 0, sizeof b);
    b.n_requests = 100;
    b.prefix_groups = 1;
    b.timeout = 300;
    b.duration = 1800;
    bool json_out = false, per_request = false;
    float rate = 0, timeout = 300, duration = 1800;
    const tk_opt opts[] = {
        TK_OPT_S("--url", &url),
        TK_OPT_I("--requests", &b.n_requests, 1, LT_MAX_REQUESTS),
        TK_OPT_F("--rate", &rate, 1e-3, 1e6),
        TK_OPT_I("--concurrency", &b.concurrency, 1, LT_MAX_INFLIGHT),
        TK_OPT_S("--prompt-len", &pl),
        TK_OPT_S("--output-len", &ol),
        TK_OPT_I("--shared-prefix", &b.shared_prefix, 0, LT_MAX_LEN),
        TK_OPT_I("--prefix-groups", &b.prefix_groups, 1, LT_MAX_PREFIX_GROUPS),
        TK_OPT_F("--temperature", &b.temperature, 0, 2),
        TK_OPT_S("--model", &b.model),
        TK_OPT_S("--api-key", &b.api_key),
        TK_OPT_U("--seed", &b.seed),
        TK_OPT_F("--timeout", &timeout, 0.1, 86400),
        TK_OPT_F("--duration", &duration, 0.1, 86400),
        TK_OPT_ON("--json", &json_out),
        TK_OPT_ON("--per-request", &per_request),
        TK_OPT_S("--svg", &svg),
    };
    const tk_cli cli = {.cmd = "loadtest", .usage = usage, .opts = opts, .n_opts = TK_NOPTS(opts)};
    int prc = tk_args_parse(&cli, argc, argv);
    if (prc) return prc == TK_ARGS_HELP ? 0 : 2;
    if (tk_args_missing(&cli, url, "--url URL")) return 2;
    if (parse_dist(pl, &b.prompt_len) || parse_dist(ol, &b.output_len)) {
        fprintf(stderr, "tokamak loadtest: a length is N, LO:HI or normal:MEAN:STDDEV (got '%s' / '%s')\n", pl, ol);
        return 2;
    }
    b.rate = rate;
    b.timeout = timeout;
    b.duration = duration;
    if (!b.rate && !b.concurrency) b.concurrency = 4;
    tk_err err;
    if (tk_url_parse(url, &b.url, &err)) {
        fprintf(stderr, "tokamak loadtest: %s\n", err.msg);
        return 2;
    }
    /* Accept the server root, .../v1, or the full completions URL. */
    char base[1100];
    size_t plen = strlen(b.url.path);
    if (plen >= 15 && !strcmp(b.url.path + plen - 15, "/v1/completions")) {
        snprintf(b.path, sizeof b.path, "%s", b.url.path);
        snprintf(base, sizeof base, "%.*s", (int)(plen - 12), b.url.path);
    } else if (plen >= 3 && !strcmp(b.url.path + plen - 3, "/v1")) {
        snprintf(b.path, sizeof b.path, "%s/completions", b.url.path);
        snprintf(base, sizeof base, "%s", b.url.path);
    } else {
        snprintf(b.path, sizeof b.path, "%s/v1/completions", b.url.path);
        snprintf(base, sizeof base, "%s/v1", b.url.path);
    }
    char *model_owned = NULL;
    if (!b.model) {
        model_owned = discover_model(&b, base, &err);
        if (!model_owned) {
            fprintf(stderr, "tokamak loadtest: %s\n", err.msg);
            return 1;
        }
        b.model = model_owned;
    }
    int status = 1;
    pthread_t *threads = NULL;
    lt_job *jobs = NULL;
    b.res = calloc((size_t)b.n_requests, sizeof *b.res);
    if (!b.res) goto out;
    for (int i = 0; i < b.n_requests; i++) b.res[i].cached_tokens = -1;
    if (b.shared_prefix > 0) {
        b.prefixes = calloc((size_t)b.prefix_groups, sizeof *b.prefixes);
        if (!b.prefixes) goto out;
        for (int g = 0; g < b.prefix_groups; g++) {
            tk_strbuf s = {0};
            uint64_t x = (b.seed ^ 0x5eedULL) + (uint64_t)g * 0x9e3779b97f4a7c15ULL; /* group 0: as before */
            for (int i = 0; i < b.shared_prefix; i++) {
                if (s.len) tk_strbuf_adds(&s, " ");
                tk_strbuf_adds(&s, WORDS[rng_next(&x) % N_WORDS]);
            }
            if (s.failed) goto out;
            b.prefixes[g] = s.data;
        }
    }
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    atomic_init(&b.next, 0);
    b.t0 = tk_clock_seconds(TK_CLOCK_WALL);
    b.deadline = b.t0 + b.duration;
    if (!b.rate) {
        int nt = b.concurrency < b.n_requests ? b.concurrency : b.n_requests;
        threads = calloc((size_t)nt, sizeof *threads);
        if (!threads) goto out;
        int started = 0;
        for (; started < nt; started++)
            if (pthread_create(&threads[started], NULL, worker_pool, &b)) break;
        for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
        if (started == 0) goto out;
    } else {
        /* Poisson arrivals; --concurrency (if given) caps requests in flight. */
        int cap = b.concurrency ? b.concurrency : LT_MAX_INFLIGHT;
        threads = calloc((size_t)b.n_requests, sizeof *threads);
        jobs = calloc((size_t)b.n_requests, sizeof *jobs);
        bool *started = calloc((size_t)b.n_requests, sizeof *started);
        if (!threads || !jobs || !started) {
            free(started);
            goto out;
        }
        uint64_t x = b.seed ^ 0xa77a1ULL;
        double next = b.t0;
        for (int i = 0; i < b.n_requests; i++) {
            double now = tk_clock_seconds(TK_CLOCK_WALL);
            if (next > now) {
                struct timespec ts = {.tv_sec = (time_t)(next - now), .tv_nsec = (long)(fmod(next - now, 1.0) * 1e9)};
                while (nanosleep(&ts, &ts) && errno == EINTR) {
                }
            }
            next += -log(1.0 - rng_unit(&x)) / b.rate;
            if (tk_clock_seconds(TK_CLOCK_WALL) >= b.deadline) break;
            pthread_mutex_lock(&b.mu);
            while (b.inflight >= cap) pthread_cond_wait(&b.cv, &b.mu);
            b.inflight++;
            pthread_mutex_unlock(&b.mu);
            jobs[i] = (lt_job){.b = &b, .idx = i};
            if (pthread_create(&threads[i], NULL, worker_one, &jobs[i])) {
                pthread_mutex_lock(&b.mu);
                b.inflight--;
                pthread_mutex_unlock(&b.mu);
                snprintf(b.res[i].err, sizeof b.res[i].err, "cannot start a thread");
                b.res[i].sent = true;
                continue;
            }
            started[i] = true;
        }
        for (int i = 0; i < b.n_requests; i++)
            if (started[i]) pthread_join(threads[i], NULL);
        free(started);
    }
    double duration_s = tk_clock_seconds(TK_CLOCK_WALL) - b.t0;

    /* Aggregate. */
    int n_ok = 0, n_fail = 0, n_unsent = 0;
    long long in_tok = 0, out_tok = 0, cached_tok = 0;
    bool cached_known = false;
    double *ttft = calloc((size_t)b.n_requests + 1, sizeof *ttft);
    double *tpot = calloc((size_t)b.n_requests + 1, sizeof *tpot);
    double *e2e = calloc((size_t)b.n_requests + 1, sizeof *e2e);
    size_t n_itl_total = 0;
    for (int i = 0; i < b.n_requests; i++) n_itl_total += (size_t)b.res[i].n_itl;
    double *itl = calloc(n_itl_total + 1, sizeof *itl);
    if (!ttft || !tpot || !e2e || !itl) {
        free(ttft);
        free(tpot);
        free(e2e);
        free(itl);
        goto out;
    }
    int n_tpot = 0;
    size_t k = 0;
    const char *first_err = NULL;
    for (int i = 0; i < b.n_requests; i++) {
        lt_result *r = &b.res[i];
        if (!r->sent) {
            n_unsent++;
            continue;
        }
        if (!r->ok) {
            n_fail++;
            if (!first_err) first_err = r->err;
            continue;
        }
        ttft[n_ok] = r->ttft;
        e2e[n_ok] = r->latency;
        n_ok++;
        in_tok += r->prompt_tokens;
        out_tok += r->output_tokens;
        if (r->cached_tokens >= 0) {
            cached_tok += r->cached_tokens;
            cached_known = true;
        }
        if (r->output_tokens > 1) tpot[n_tpot++] = (r->latency - r->ttft) / (r->output_tokens - 1);
        for (int j = 0; j < r->n_itl; j++) itl[k++] = r->itl[j];
    }
    lt_stat s_ttft = stat_of(ttft, n_ok), s_tpot = stat_of(tpot, n_tpot), s_itl = stat_of(itl, (int)k),
            s_e2e = stat_of(e2e, n_ok);
    double rps = duration_s > 0 ? n_ok / duration_s : 0, tps = duration_s > 0 ? out_tok / duration_s : 0;
    if (json_out) {
        json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:I,s:I,s:o,s:o,s:o,s:o}", "url", url, "model",
                              b.model, "requests", b.n_requests, "completed", n_ok, "failed", n_fail, "not_sent",
                              n_unsent, "duration_s", duration_s, "request_throughput", rps, "output_throughput", tps,
                              "total_token_throughput", duration_s > 0 ? (in_tok + out_tok) / duration_s : 0.0,
                              "total_input_tokens", (json_int_t)in_tok, "total_output_tokens", (json_int_t)out_tok,
                              "ttft_ms", stat_json(s_ttft), "tpot_ms", stat_json(s_tpot), "itl_ms", stat_json(s_itl),
                              "e2e_latency_ms", stat_json(s_e2e));
        if (o) {
            if (b.rate) json_object_set_new(o, "rate", json_real(b.rate));
            json_object_set_new(o, "concurrency", b.concurrency ? json_integer(b.concurrency) : json_null());
            json_object_set_new(o, "shared_prefix", json_integer(b.shared_prefix));
            json_object_set_new(o, "prefix_groups", json_integer(b.prefix_groups));
            json_object_set_new(o, "first_error", first_err ? json_string(first_err) : json_null());
            json_object_set_new(o, "total_cached_tokens", cached_known ? json_integer(cached_tok) : json_null());
            json_t *list = per_request ? json_array() : NULL;
            for (int i = 0; list && i < b.n_requests; i++) {
                const lt_result *r = &b.res[i];
                if (!r->sent) continue;
                json_array_append_new(
                    list, json_pack("{s:i,s:b,s:f,s:f,s:f,s:i,s:i,s:o}", "index", i, "ok", r->ok, "start_s", r->start,
                                    "ttft_ms", r->ttft * 1e3, "e2e_latency_ms", r->latency * 1e3, "prompt_tokens",
                                    r->prompt_tokens, "output_tokens", r->output_tokens, "cached_tokens",
                                    r->cached_tokens >= 0 ? json_integer(r->cached_tokens) : json_null()));
            }
            if (list) json_object_set_new(o, "per_request", list);
            char *txt = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
            if (txt) puts(txt);
            free(txt);
            json_decref(o);
        }
    } else {
        printf("requests:        %d sent, %d completed, %d failed, %d not sent (duration limit)\n",
               b.n_requests - n_unsent, n_ok, n_fail, n_unsent);
        printf("duration:        %.2f s\n", duration_s);
        printf("throughput:      %.2f requests/s, %.1f output tokens/s, %.1f total tokens/s\n", rps, tps,
               duration_s > 0 ? (in_tok + out_tok) / duration_s : 0.0);
        printf("tokens:          %lld input, %lld output", in_tok, out_tok);
        if (cached_known) printf(", %lld input from the prefix cache", cached_tok);
        printf("\n");
        printf("%-16s %10s %10s %10s %10s\n", "latency (ms)", "mean", "p50", "p90", "p99");
        const lt_stat *st[] = {&s_ttft, &s_tpot, &s_itl, &s_e2e};
        const char *nm[] = {"TTFT", "TPOT", "ITL", "end-to-end"};
        for (int i = 0; i < 4; i++)
            printf("%-16s %10.2f %10.2f %10.2f %10.2f\n", nm[i], st[i]->mean * 1e3, st[i]->p50 * 1e3,
                   st[i]->p90 * 1e3, st[i]->p99 * 1e3);
        if (first_err) printf("first error:     %s\n", first_err);
        if (per_request) {
            printf("%5s %10s %10s %12s %8s %8s\n", "req", "start s", "TTFT ms", "latency ms", "prompt", "cached");
            for (int i = 0; i < b.n_requests; i++) {
                const lt_result *r = &b.res[i];
                if (!r->sent) continue;
                if (!r->ok) {
                    printf("%5d %10.3f  failed: %s\n", i, r->start, r->err);
                    continue;
                }
                printf("%5d %10.3f %10.2f %12.2f %8d %8d\n", i, r->start, r->ttft * 1e3, r->latency * 1e3,
                       r->prompt_tokens, r->cached_tokens);
            }
        }
    }
    free(ttft);
    free(tpot);
    free(e2e);
    free(itl);
    status = n_ok > 0 ? 0 : 1;
    if (svg && write_svg(svg, &b, duration_s)) {
        fprintf(stderr, "tokamak loadtest: cannot write %s\n", svg);
        status = 1;
    }
out:
    if (status && !b.res) fprintf(stderr, "tokamak loadtest: out of memory\n");
    if (b.res)
        for (int i = 0; i < b.n_requests; i++) free(b.res[i].itl);
    free(b.res);
    for (int g = 0; b.prefixes && g < b.prefix_groups; g++) free(b.prefixes[g]);
    free(b.prefixes);
    free(threads);
    free(jobs);
    free(model_owned);
    return status;
}
