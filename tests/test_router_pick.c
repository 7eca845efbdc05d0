/* The router's replica choice (apps/router/pick.c) and metrics parsing
 * (apps/router/backends.c), checked against their defining properties:
 * the key depends on the first blocks only; rendezvous hashing moves only
 * the keys of a replica that goes away; the load rule; hostile /metrics. */
#include <stdatomic.h>

#include "router/router.h"
#include "tk_test.h"

static void setup(tk_router *r, int n) {
    memset(r, 0, sizeof *r);
    r->n_backends = n;
    r->load_threshold = 4;
    for (int i = 0; i < n; i++) {
        char url[32];
        snprintf(url, sizeof url, "http://10.0.0.%d:8000", i + 1);
        r->backends[i].id_hash = tk_router_hash(TK_ROUTER_HASH_SEED, url, strlen(url));
        atomic_store(&r->backends[i].healthy, true);
    }
}

static int top(tk_router *r, uint64_t key, bool *diverted) {
    int order[TK_ROUTER_MAX_BACKENDS];
    int n = tk_router_order(r, key, order, diverted);
    return n > 0 ? order[0] : -1;
}

static void test_prefix_key(void) {
    int a[100], b[100];
    for (int i = 0; i < 100; i++) a[i] = b[i] = 1000 + i * 7;
    b[70] = 5; /* differs after 4 blocks of 16 */
    CHECK(tk_router_prefix_key(a, 100, 16, 4) == tk_router_prefix_key(b, 100, 16, 4), "tail changed the key");
    CHECK(tk_router_prefix_key(a, 100, 16, 4) == tk_router_prefix_key(a, 64, 16, 4), "length past 4 blocks counts");
    b[3] = 6;
    CHECK(tk_router_prefix_key(a, 100, 16, 4) != tk_router_prefix_key(b, 100, 16, 4), "first block ignored");
    /* only full blocks: 40 tokens = 2 blocks, so token 35 does not count */
    memcpy(b, a, sizeof a);
    b[35] = 9;
    CHECK(tk_router_prefix_key(a, 40, 16, 4) == tk_router_prefix_key(b, 40, 16, 4), "partial block counted");
    /* shorter than a block: all of it */
    CHECK(tk_router_prefix_key(a, 10, 16, 4) != tk_router_prefix_key(b, 10, 16, 4) ||
              memcmp(a, b, 10 * sizeof *a) == 0, "short prompt");
    b[5] = 1;
    CHECK(tk_router_prefix_key(a, 10, 16, 4) != tk_router_prefix_key(b, 10, 16, 4), "short prompt not hashed whole");
}

static void test_rendezvous(void) {
    tk_router r;
    setup(&r, 3);
    int count[3] = {0}, before[1000];
    bool d;
    for (int k = 0; k < 1000; k++) {
        before[k] = top(&r, (uint64_t)k * 0x9e3779b97f4a7c15ULL, &d);
        CHECK(before[k] >= 0 && before[k] < 3 && !d, "key %d", k);
        if (before[k] >= 0) count[before[k]]++;
    }
    for (int i = 0; i < 3; i++) CHECK(count[i] > 250 && count[i] < 420, "replica %d tops %d of 1000 keys", i, count[i]);
    atomic_store(&r.backends[1].healthy, false);
    int moved = 0;
    for (int k = 0; k < 1000; k++) {
        int now = top(&r, (uint64_t)k * 0x9e3779b97f4a7c15ULL, &d);
        CHECK(now != 1, "an unhealthy replica chosen");
        if (before[k] != 1) CHECK(now == before[k], "key %d moved off a live replica", k);
        moved += now != before[k];
    }
    CHECK(moved == count[1], "%d keys moved, %d were on the lost replica", moved, count[1]);
    for (int i = 0; i < 3; i++) atomic_store(&r.backends[i].healthy, false);
    int order[TK_ROUTER_MAX_BACKENDS];
    CHECK(tk_router_order(&r, 1, order, &d) == 3, "none healthy: all are tried");
}

static void test_load_rule(void) {
    tk_router r;
    setup(&r, 3);
    bool d;
    int order[TK_ROUTER_MAX_BACKENDS];
    uint64_t key = 12345;
    tk_router_order(&r, key, order, &d);
    int first = order[0], second = order[1], third = order[2];
    atomic_store(&r.backends[first].load, 4); /* within the threshold of 0 */
    CHECK(top(&r, key, &d) == first && !d, "diverted at the threshold");
    atomic_store(&r.backends[first].load, 5);
    CHECK(top(&r, key, &d) == second && d, "not diverted past the threshold");
    atomic_store(&r.backends[second].load, 9);
    CHECK(top(&r, key, &d) == third && d, "the next within the threshold");
    tk_router_order(&r, key, order, &d);
    CHECK(order[1] == first && order[2] == second, "retry order is not the rank order");
    atomic_store(&r.backends[first].load, 0);
    atomic_store(&r.backends[first].inflight, 7); /* the router's own requests since the scrape */
    CHECK(top(&r, key, &d) != first && d, "in-flight requests ignored");
    atomic_store(&r.backends[first].inflight, 0);
    atomic_store(&r.backends[first].kv_permille, 960);
    CHECK(top(&r, key, &d) != first, "a nearly full KV cache kept its requests");
    r.policy = TK_POLICY_ROUND_ROBIN;
    int a = top(&r, key, &d), b = top(&r, key, &d), c = top(&r, key, &d), e = top(&r, key, &d);
    CHECK(a != b && b != c && a != c && e == a, "round robin %d %d %d %d", a, b, c, e);
}

static void test_parse_metrics(void) {
    int load, kv, bs;
    const char *ok = "# HELP vllm:num_requests_waiting x\n# TYPE vllm:num_requests_waiting gauge\n"
                     "vllm:num_requests_waiting 3\nvllm:num_requests_running 5\nvllm:kv_cache_usage_perc 0.25\n"
                     "vllm:cache_config_info{block_size=\"32\",num_gpu_blocks=\"100\"} 1\n";
    tk_router_parse_metrics(ok, &load, &kv, &bs);
    CHECK(load == 8 && kv == 250 && bs == 32, "load %d kv %d bs %d", load, kv, bs);
    tk_router_parse_metrics("vllm:cache_config_info{block_size=\"16\"} 1\nvllm:num_requests_waiting{m=\"x\"} 2\n"
                            "vllm:num_requests_running 0\n", &load, &kv, &bs);
    CHECK(load == 2 && kv == -1 && bs == 16, "first line / labels: load %d kv %d bs %d", load, kv, bs);
    const char *bad[] = {"", "vllm:num_requests_waiting\n", "vllm:num_requests_waiting -3\nvllm:num_requests_running 1\n",
                         "vllm:num_requests_waitingX 3\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 7\n",
                         "vllm:cache_config_info{block_size=\"0\"} 1\n",
                         "vllm:cache_config_info{num_gpu_blocks=\"1\"} 1\nx{block_size=\"16\"} 1\n",
                         "vllm:num_requests_waiting{a=\"1\" 3\nvllm:num_requests_running 1\n",
                         "vllm:num_requests_waiting 1e300\nvllm:num_requests_running 1\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tk_router_parse_metrics(bad[i], &load, &kv, &bs);
        CHECK(load == -1 && kv == -1 && bs == -1, "hostile text %zu: load %d kv %d bs %d", i, load, kv, bs);
    }
}

int main(void) {
    test_prefix_key();
    test_rendezvous();
    test_load_rule();
    test_parse_metrics();
    TK_TEST_END();
}
