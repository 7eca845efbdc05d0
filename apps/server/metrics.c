/* The engine's metrics as Prometheus text exposition (format 0.0.4) for
 * /metrics and as JSON for /stats (the dashboard). */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include <jansson.h>

#include "common/strbuf.h"
#include "server.h"

static void gauge(tk_strbuf *b, const char *name, const char *help, double v) {
    tk_strbuf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

static void counter(tk_strbuf *b, const char *name, const char *help, unsigned long long v) {
    tk_strbuf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, v);
}

static void histogram(tk_strbuf *b, const char *name, const char *help, int n, const double *bounds,
                      const uint64_t *buckets, double sum, uint64_t count) {
    tk_strbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    bool have_inf = false;
    for (int i = 0; i < n; i++) {
        if (isinf(bounds[i])) {
            tk_strbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)buckets[i]);
            have_inf = true;
        } else {
            tk_strbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)buckets[i]);
        }
    }
    /* Prometheus requires a +Inf bucket equal to the count. */
    if (!have_inf) tk_strbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)count);
    tk_strbuf_printf(b, "%s_sum %.17g\n%s_count %llu\n", name, sum, name, (unsigned long long)count);
}

static void snapshot(tk_server *s, tk_engine_metrics *m) {
    tk_engine_metrics_get(s->engine, m);
    if (m->kv_blocks_total == 0) m->kv_blocks_total = s->kv_blocks_total; /* no step has run yet */
    if (m->n_buckets < 0 || !m->bucket_bounds) m->n_buckets = 0;
    if (m->n_buckets > 24) m->n_buckets = 24;
}

/* The model-server metrics an inference gateway's endpoint picker scrapes
 * (Gateway API Inference Extension, "model server protocol"), under vLLM's
 * names, which the reference picker reads by default: queue length, running
 * requests, KV-cache use as a fraction in [0, 1], the LoRA info gauge (no
 * adapters here: empty lists, value the scrape time as the protocol asks),
 * and the cache configuration whose block_size lets a picker predict
 * prefix-cache hits from the prompt's token blocks. */
static void gateway_metrics(tk_strbuf *b, const tk_server *s, const tk_engine_metrics *m, double kv_usage) {
    gauge(b, "vllm:num_requests_waiting", "Requests waiting to be scheduled (as tokamak_requests_waiting).",
          m->requests_waiting);
    gauge(b, "vllm:num_requests_running", "Requests being generated (as tokamak_requests_running).",
          m->requests_running);
    gauge(b, "vllm:kv_cache_usage_perc", "KV cache usage, 1 = full (as tokamak_kv_usage_ratio).", kv_usage);
    gauge(b, "vllm:gpu_cache_usage_perc", "The older name of vllm:kv_cache_usage_perc.", kv_usage);
    tk_strbuf_printf(b,
                     "# HELP vllm:lora_requests_info LoRA adapters loaded and waiting (none: tokamak serves no "
                     "adapters); the value is the time of this report.\n# TYPE vllm:lora_requests_info gauge\n"
                     "vllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} "
                     "%.17g\n",
                     (double)time(NULL));
    tk_strbuf_printf(b,
                     "# HELP vllm:cache_config_info The KV cache's configuration: block_size tokens per block, the "
                     "prefix cache's unit.\n# TYPE vllm:cache_config_info gauge\n"
                     "vllm:cache_config_info{block_size=\"%d\",num_gpu_blocks=\"%d\"} 1\n",
                     s->kv_block_size, m->kv_blocks_total);
}

char *tk_server_metrics_text(tk_server *s) {
    tk_engine_metrics m;
    snapshot(s, &m);
    tk_strbuf b = {0};
    double kv_usage = m.kv_blocks_total > 0 ? (double)m.kv_blocks_used / m.kv_blocks_total : 0.0;
    gauge(&b, "tokamak_requests_running", "Requests currently being generated.", m.requests_running);
    gauge(&b, "tokamak_requests_waiting", "Requests waiting to be scheduled.", m.requests_waiting);
    gauge(&b, "tokamak_kv_blocks_total", "KV cache blocks in the pool.", m.kv_blocks_total);
    gauge(&b, "tokamak_kv_blocks_used", "KV cache blocks held by live sequences.", m.kv_blocks_used);
    gauge(&b, "tokamak_kv_blocks_cached", "Free KV blocks kept for prefix reuse.", m.kv_blocks_cached);
    gauge(&b, "tokamak_kv_usage_ratio", "Fraction of KV blocks held by live sequences.", kv_usage);
    counter(&b, "tokamak_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            (unsigned long long)m.prefix_query_tokens);
    counter(&b, "tokamak_prefix_cache_hits_total", "Prompt tokens served from the prefix cache.",
            (unsigned long long)m.prefix_hit_tokens);
    gauge(&b, "tokamak_prefix_cache_hit_rate", "Prefix cache hits / queries (tokens), since start.",
          m.prefix_query_tokens ? (double)m.prefix_hit_tokens / (double)m.prefix_query_tokens : 0.0);
    counter(&b, "tokamak_preemptions_total", "Sequences preempted to free KV blocks.",
            (unsigned long long)m.preemptions);
    counter(&b, "tokamak_prompt_tokens_total", "Prompt tokens processed.", (unsigned long long)m.prompt_tokens);
    counter(&b, "tokamak_generation_tokens_total", "Tokens generated.", (unsigned long long)m.generation_tokens);
    counter(&b, "tokamak_requests_finished_total", "Requests finished by the engine.",
            (unsigned long long)m.requests_finished);
    counter(&b, "tokamak_spec_draft_tokens_total", "Speculative decoding: draft tokens proposed.",
            (unsigned long long)m.spec_drafted);
    counter(&b, "tokamak_spec_accepted_tokens_total", "Speculative decoding: draft tokens accepted.",
            (unsigned long long)m.spec_accepted);
    counter(&b, "tokamak_spec_target_passes_total",
            "Speculative decoding: decode passes of speculating sequences (one per sequence per step).",
            (unsigned long long)m.spec_target_passes);
    counter(&b, "tokamak_spec_tokens_total", "Speculative decoding: tokens produced by those passes.",
            (unsigned long long)m.spec_tokens);
    gauge(&b, "tokamak_spec_acceptance_ratio", "Accepted / proposed draft tokens, since start.",
          m.spec_drafted ? (double)m.spec_accepted / (double)m.spec_drafted : 0.0);
    counter(&b, "tokamak_http_requests_total", "HTTP requests received.",
            (unsigned long long)atomic_load(&s->http_requests));
    counter(&b, "tokamak_http_errors_total", "HTTP requests answered with an error status.",
            (unsigned long long)atomic_load(&s->http_errors));
    counter(&b, "tokamak_requests_rejected_queue_full_total", "Requests refused because the queue was full.",
            (unsigned long long)atomic_load(&s->rejected_queue_full));
    counter(&b, "tokamak_http_connections_timed_out_total",
            "Connections closed because their headers or body did not arrive in time.",
            (unsigned long long)atomic_load(&s->timed_out));
    counter(&b, "tokamak_chat_renders_cancelled_total",
            "Chat template renders stopped because the client left or the server stopped.",
            (unsigned long long)atomic_load(&s->renders_cancelled));
    counter(&b, "tokamak_requests_cancelled_disconnect_total", "Requests cancelled because the client went away.",
            (unsigned long long)atomic_load(&s->cancelled_disconnect));
    gateway_metrics(&b, s, &m, kv_usage);
    int n = m.n_buckets;
    if (n > 0) {
        histogram(&b, "tokamak_time_to_first_token_seconds", "Time from submission to the first token.", n,
                  m.bucket_bounds, m.ttft_buckets, m.ttft_sum, m.ttft_count);
        histogram(&b, "tokamak_inter_token_latency_seconds", "Time between consecutive tokens of a sequence.", n,
                  m.bucket_bounds, m.itl_buckets, m.itl_sum, m.itl_count);
    }
    if (b.failed) {
        tk_strbuf_free(&b);
        return NULL;
    }
    if (!b.data) return calloc(1, 1);
    return b.data;
}

/* {"buckets": [cumulative counts], "sum", "count"} */
static json_t *histogram_json(int n, const uint64_t *buckets, double sum, uint64_t count) {
    json_t *b = json_array();
    for (int i = 0; b && i < n; i++) json_array_append_new(b, json_integer((json_int_t)buckets[i]));
    return json_pack("{s:o,s:f,s:I}", "buckets", b, "sum", sum, "count", (json_int_t)count);
}

char *tk_server_stats_json(tk_server *s) {
    tk_engine_metrics m;
    snapshot(s, &m);
    json_t *bounds = json_array(); /* JSON has no infinity: the +Inf bound is null */
    for (int i = 0; bounds && i < m.n_buckets; i++)
        json_array_append_new(bounds, isinf(m.bucket_bounds[i]) ? json_null() : json_real(m.bucket_bounds[i]));
    json_t *o = json_pack(
        "{s:s,s:f,s:{s:i,s:i,s:I},s:{s:i,s:i,s:i,s:i},s:{s:I,s:I},s:I,s:{s:I,s:I},s:{s:I,s:I,s:I,s:I},"
        "s:{s:I,s:I,s:I,s:I},s:{s:o,s:o,s:o}}",
        "model", s->cfg.model_name, "clock_s", tk_clock_seconds(TK_CLOCK_WALL),
        "requests", "running", m.requests_running, "waiting", m.requests_waiting, "finished",
        (json_int_t)m.requests_finished,
        "kv_blocks", "total", m.kv_blocks_total, "used", m.kv_blocks_used, "cached", m.kv_blocks_cached, "free",
        m.kv_blocks_total - m.kv_blocks_used - m.kv_blocks_cached,
        "prefix_cache", "query_tokens", (json_int_t)m.prefix_query_tokens, "hit_tokens",
        (json_int_t)m.prefix_hit_tokens,
        "preemptions", (json_int_t)m.preemptions,
        "tokens", "prompt", (json_int_t)m.prompt_tokens, "generation", (json_int_t)m.generation_tokens,
        "speculative", "draft_tokens", (json_int_t)m.spec_drafted, "accepted_tokens", (json_int_t)m.spec_accepted,
        "target_passes", (json_int_t)m.spec_target_passes, "tokens", (json_int_t)m.spec_tokens,
        "http", "requests", (json_int_t)atomic_load(&s->http_requests), "errors",
        (json_int_t)atomic_load(&s->http_errors), "rejected_queue_full",
        (json_int_t)atomic_load(&s->rejected_queue_full), "cancelled_disconnect",
        (json_int_t)atomic_load(&s->cancelled_disconnect),
        "histograms", "bounds_s", bounds, "ttft",
        histogram_json(m.n_buckets, m.ttft_buckets, m.ttft_sum, m.ttft_count), "itl",
        histogram_json(m.n_buckets, m.itl_buckets, m.itl_sum, m.itl_count));
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    return text;
}
