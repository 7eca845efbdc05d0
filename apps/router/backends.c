/* Health checks (GET /health) and load scraping (GET /metrics, the model
 * server metrics a gateway reads: vllm:num_requests_waiting + _running,
 * vllm:kv_cache_usage_perc, vllm:cache_config_info's block_size). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "router.h"

#define MAX_METRICS_BYTES (1 << 20)

typedef struct capped {
    tk_strbuf b;
    size_t cap;
} capped;

static int take_capped(void *user, const char *data, size_t n) {
    capped *c = user;
    if (c->b.len + n > c->cap) return 1; /* too much: stop reading */
    tk_strbuf_add(&c->b, data, n);
    return c->b.failed;
}

/* The first line starting with name followed by ' ' or '{'; NULL if none. */
static const char *sample_line(const char *text, const char *name) {
    size_t nl = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, name, nl) && (p[nl] == ' ' || p[nl] == '{')) return p;
    return NULL;
}

/* The value of a sample "NAME[{labels}] VALUE"; -1 if absent or negative. */
static double sample(const char *text, const char *name) {
    const char *p = sample_line(text, name);
    if (!p) return -1;
    p += strlen(name);
    if (*p == '{') {
        const char *close = strpbrk(p, "}\n");
        if (!close || *close != '}') return -1;
        p = close + 1;
    }
    char *end;
    double d = strtod(p, &end);
    return end == p || d < 0 ? -1 : d;
}

void tk_router_parse_metrics(const char *text, int *load, int *kv_permille, int *block_size) {
    double w = sample(text, "vllm:num_requests_waiting"), r = sample(text, "vllm:num_requests_running");
    double kv = sample(text, "vllm:kv_cache_usage_perc");
    *load = w >= 0 && r >= 0 && w + r < 1e9 ? (int)(w + r) : -1;
    *kv_permille = kv >= 0 && kv <= 1 ? (int)(kv * 1000 + 0.5) : -1;
    *block_size = -1;
    const char *c = sample_line(text, "vllm:cache_config_info");
    const char *bs = c ? strstr(c, "block_size=\"") : NULL;
    const char *eol = c ? strchr(c, '\n') : NULL;
    if (bs && (!eol || bs < eol)) {
        long v = strtol(bs + 12, NULL, 10);
        if (v >= 1 && v <= 1 << 20) *block_size = (int)v;
    }
}

static void poll_one(tk_router *r, tk_backend *b) {
    tk_err err;
    int status = 0;
    double t = r->health_interval_s < 2 ? 2 : r->health_interval_s;
    bool ok = !tk_http_request(&b->u, "GET", "/health", NULL, NULL, 0, t, &status, NULL, NULL, &err) &&
              status == 200;
    if (ok) {
        capped c = {.cap = MAX_METRICS_BYTES};
        char path[sizeof b->u.path + 16];
        snprintf(path, sizeof path, "%s/metrics", b->u.path);
        if (!tk_http_request(&b->u, "GET", path, NULL, NULL, 0, t, &status, take_capped, &c, &err) &&
            status == 200 && c.b.data && !c.b.failed) {
            int load, kv, bs;
            tk_router_parse_metrics(c.b.data, &load, &kv, &bs);
            if (load >= 0) atomic_store(&b->load, load);
            if (kv >= 0) atomic_store(&b->kv_permille, kv);
            int none = 0;
            if (bs > 0) atomic_compare_exchange_strong(&r->block_size, &none, bs);
        }
        tk_strbuf_free(&c.b);
    }
    atomic_store(&b->healthy, ok);
}

void tk_router_poll_backends(tk_router *r) {
    for (int i = 0; i < r->n_backends && !atomic_load(&r->stop); i++) poll_one(r, &r->backends[i]);
}

void *tk_router_poll_thread(void *arg) {
    tk_router *r = arg;
    pthread_mutex_lock(&r->stop_mu);
    while (!atomic_load(&r->stop)) {
        pthread_mutex_unlock(&r->stop_mu);
        tk_router_poll_backends(r);
        pthread_mutex_lock(&r->stop_mu);
        struct timespec ts = tk_clock_deadline((int)(r->health_interval_s * 1000));
        if (!atomic_load(&r->stop)) pthread_cond_timedwait(&r->stop_cv, &r->stop_mu, &ts);
    }
    pthread_mutex_unlock(&r->stop_mu);
    return NULL;
}
