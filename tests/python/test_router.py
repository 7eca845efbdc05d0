"""End-to-end tests of `tokamak router` over three `tokamak serve` replicas
of code-target: proxying (openai client, streaming and not; the router's
answers equal a replica's own), prefix affinity (requests sharing a prefix
land on one replica, whose prefix-cache hit counter shows it), a replica
killed under load (no non-streaming request lost: retried), and a stream
cut mid-way (it ends with an SSE error event, then [DONE])."""
import concurrent.futures as cf
import json
import re
import subprocess
import tempfile
import time

import pytest

from test_server import SANITIZER_MARKERS, Server

openai = pytest.importorskip("openai", reason="the official openai package is not installed")
requests = pytest.importorskip("requests", reason="requests is not installed")

BLOCK = 16  # the replicas' --block-size; the router learns it from their vllm:cache_config_info


class Router:
    def __init__(self, binary, model, backends, *extra):
        self.out = tempfile.NamedTemporaryFile("w+", prefix="tk-router-out-", delete=False)
        self.err = tempfile.NamedTemporaryFile("w+", prefix="tk-router-err-", delete=False)
        args = [binary, "router", "-m", model, "--port", "0", "--health-interval", "0.2", *extra]
        for b in backends:
            args += ["--backend", b.url]
        self.proc = subprocess.Popen(args, stdout=self.out, stderr=self.err)
        deadline = time.time() + 30
        self.port = None
        while time.time() < deadline and not self.port:
            assert self.proc.poll() is None, open(self.err.name).read()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(self.out.name).read())
            self.port = int(m.group(1)) if m else None
            time.sleep(0.05)
        assert self.port, "router did not start"

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def client(self):
        return openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=600)

    def metrics(self):
        out = {}
        for line in requests.get(self.url + "/metrics", timeout=10).text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        err = open(self.err.name).read()
        assert not any(m in err for m in SANITIZER_MARKERS), err
        assert self.proc.returncode == 0, err


def start_replicas(tokamak_bin, model_dir, n=3):
    return [Server(tokamak_bin, model_dir, "--block-size", str(BLOCK), "--max-seqs", "8", threads=1)
            for _ in range(n)]


@pytest.fixture(scope="module")
def cluster(tokamak_bin, model_dir):
    replicas = start_replicas(tokamak_bin, model_dir)
    router = Router(tokamak_bin, model_dir, replicas)
    yield router, replicas
    router.stop()
    for r in replicas:
        r.stop()


WORDS = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river stone cloud "
         "forest candle mirror window garden engine signal planet harbor").split()


def prefix_text(group, n_words=60):
    return " ".join(WORDS[(group * 7 + i * 3) % len(WORDS)] for i in range(n_words))


def finished(replica):
    return replica.metrics()["tokamak_requests_finished_total"]


def finished_since(replicas, before, total, timeout=10.0):
    """Each replica's finished requests since `before`, once they add up to
    `total`: the engine counts a request when its step loop frees it, which
    can be just after the client has its answer."""
    deadline = time.monotonic() + timeout
    while True:
        delta = [finished(r) - b for r, b in zip(replicas, before)]
        if sum(delta) >= total or time.monotonic() > deadline:
            return delta
        time.sleep(0.05)


def test_router_metrics_and_gateway_metrics(cluster):
    router, replicas = cluster
    m = replicas[0].metrics()
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
        assert name in m
    text = requests.get(replicas[0].url + "/metrics", timeout=10).text
    assert "# TYPE vllm:num_requests_waiting gauge" in text
    assert f'vllm:cache_config_info{{block_size="{BLOCK}"' in text
    assert re.search(r'vllm:lora_requests_info\{max_lora="0",running_lora_adapters="",waiting_lora_adapters=""\} '
                     r'(\d+)', text)
    rm = router.metrics()
    assert all(rm[f'tokamak_router_backend_healthy{{backend="{r.url}"}}'] == 1 for r in replicas)
    assert requests.get(router.url + "/health", timeout=5).status_code == 200
    assert requests.get(router.url + "/nope", timeout=5).status_code == 404


def test_proxy_matches_replica(cluster):
    router, replicas = cluster
    direct, routed = replicas[0].client(), router.client()
    kw = dict(model="code-target", max_tokens=12, temperature=0)
    want = direct.completions.create(prompt="def main():", **kw).choices[0].text
    assert routed.completions.create(prompt="def main():", **kw).choices[0].text == want
    streamed = "".join(c.choices[0].text for c in routed.completions.create(prompt="def main():", stream=True, **kw)
                       if c.choices)
    assert streamed == want
    msgs = [{"role": "user", "content": "Write a function that adds two numbers."}]
    want = direct.chat.completions.create(messages=msgs, **kw).choices[0].message.content
    assert routed.chat.completions.create(messages=msgs, **kw).choices[0].message.content == want
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       routed.chat.completions.create(messages=msgs, stream=True, **kw) if c.choices)
    assert streamed == want
    assert [m.id for m in routed.models.list().data] == [m.id for m in direct.models.list().data]


def test_prefix_affinity(cluster):
    router, replicas = cluster
    client = router.client()
    used = []
    for g in range(4):
        before = [finished(r) for r in replicas]
        hits_before = sum(r.metrics()["tokamak_prefix_cache_hits_total"] for r in replicas)
        for i in range(4):
            client.completions.create(model="code-target", prompt=f"{prefix_text(g)} request {i} {WORDS[i]}",
                                      max_tokens=2, temperature=0)
        delta = finished_since(replicas, before, 4)
        assert sorted(delta) == [0, 0, 4], f"group {g} spread over replicas: {delta}"
        used.append(delta.index(4))
        hits = sum(r.metrics()["tokamak_prefix_cache_hits_total"] for r in replicas) - hits_before
        # the 3 requests after the first reuse at least the shared prefix's 4 full blocks
        assert hits >= 3 * 4 * BLOCK, f"group {g}: only {hits} prompt tokens from the prefix cache"
    assert len(set(used)) > 1, f"every group went to replica {used[0]}: no spreading"
    assert router.metrics()["tokamak_router_affinity_top_total"] >= 16


def test_round_robin_spreads(tokamak_bin, model_dir, cluster):
    _, replicas = cluster
    rr = Router(tokamak_bin, model_dir, replicas, "--policy", "round-robin")
    try:
        before = [finished(r) for r in replicas]
        for i in range(6):
            rr.client().completions.create(model="code-target", prompt=prefix_text(0) + f" rr {i}", max_tokens=2)
        assert finished_since(replicas, before, 6) == [2, 2, 2]
    finally:
        rr.stop()


def test_bad_backend_url_is_startup_error(tokamak_bin, model_dir):
    for bad in ("localhost:8000", "http://", "http://host:99999", "ftp://x", 'http://h:1/a"b', "http://h:1/a\x01"):
        p = subprocess.run([tokamak_bin, "router", "-m", model_dir, "--backend", bad], capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 2 and "--backend" in p.stderr, (bad, p.stderr)
    p = subprocess.run([tokamak_bin, "router", "-m", model_dir], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--backend" in p.stderr


def test_replica_killed_under_load(tokamak_bin, model_dir):
    replicas = start_replicas(tokamak_bin, model_dir)
    router = Router(tokamak_bin, model_dir, replicas)
    try:
        client = router.client()

        def one(i):
            r = client.completions.create(model="code-target", prompt=f"item {i}: {prefix_text(i)}", max_tokens=160,
                                          temperature=0, extra_body={"ignore_eos": True})
            return r.usage.completion_tokens

        with cf.ThreadPoolExecutor(12) as pool:
            futs = [pool.submit(one, i) for i in range(12)]
            # the busiest replica dies with requests in flight
            deadline = time.time() + 60
            while True:
                running = [r.metrics()["tokamak_requests_running"] for r in replicas]
                if max(running) >= 1 or time.time() > deadline:
                    break
                time.sleep(0.05)
            victim = replicas[running.index(max(running))]
            assert max(running) >= 1
            victim.kill()
            results = [f.result() for f in futs]
        assert results == [160] * 12
        m = router.metrics()
        assert m["tokamak_router_failures_total"] == 0
        assert m["tokamak_router_retries_total"] >= 1, m
        assert m[f'tokamak_router_backend_failures_total{{backend="{victim.url}"}}'] >= 1
        time.sleep(0.6)  # the health check notices
        assert router.metrics()[f'tokamak_router_backend_healthy{{backend="{victim.url}"}}'] == 0
    finally:
        router.stop()
        for r in replicas:
            if r.proc.poll() is None:
                r.stop()


def test_stream_cut_ends_with_error_event(tokamak_bin, model_dir):
    replicas = start_replicas(tokamak_bin, model_dir)
    router = Router(tokamak_bin, model_dir, replicas)
    try:
        body = {"model": "code-target", "prompt": "def main():", "max_tokens": 400, "temperature": 0,
                "ignore_eos": True, "stream": True}
        resp = requests.post(router.url + "/v1/completions", json=body, stream=True, timeout=120)
        assert resp.status_code == 200
        lines = resp.iter_lines(decode_unicode=True)
        first = next(l for l in lines if l.startswith("data: "))
        assert "choices" in json.loads(first[6:])
        serving = [r for r in replicas if r.metrics()["tokamak_requests_running"] == 1]
        assert len(serving) == 1
        serving[0].kill()
        events = [l[6:] for l in lines if l.startswith("data: ")]
        assert events[-1] == "[DONE]"
        err = json.loads(events[-2])
        assert err["error"]["code"] == "backend_failed"
        assert router.metrics()["tokamak_router_stream_errors_total"] == 1
        serving[0].proc.wait()
    finally:
        router.stop()
        for r in replicas:
            if r.proc.poll() is None:
                r.stop()


def test_hostile_requests(cluster):
    router, _ = cluster
    url = router.url + "/v1/completions"
    assert requests.post(url, data=b"{not json", timeout=10).status_code == 400
    assert requests.post(url, data=b"[1,2]", timeout=10).status_code == 400
    assert requests.get(url, timeout=10).status_code == 405
    r = requests.post(url, data=b"x" * (9 << 20), timeout=60)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = requests.get(router.url + "/v1/models", headers={"X-Big": "a" * (300 << 10)}, timeout=10)
    assert r.status_code >= 400  # headers over the router's per-connection memory limit
    # a prompt of token ids (any size) is keyed and forwarded
    r = requests.post(url, json={"model": "code-target", "prompt": [1, 822, 1667, 7295], "max_tokens": 2}, timeout=60)
    assert r.status_code == 200, r.text
    assert router.metrics()["tokamak_router_rejected_total"] >= 4


def test_kubernetes_manifests_are_consistent():
    """The manifests were not applied to a cluster; this checks they parse and agree with each other."""
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "kubernetes",
                        "tokamak-inference-gateway.yaml")
    docs = {d["kind"]: d for d in yaml.safe_load_all(open(path))}
    assert set(docs) == {"Deployment", "Service", "InferencePool", "InferenceObjective", "HTTPRoute"}
    pod = docs["Deployment"]["spec"]["template"]
    pool = docs["InferencePool"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert pool["spec"]["targetPorts"][0]["number"] == port
    args = pod["spec"]["containers"][0]["args"]
    assert args[0] == "serve" and args[args.index("--port") + 1] == str(port)
    assert docs["InferenceObjective"]["spec"]["poolRef"]["name"] == pool["metadata"]["name"]
    ref = docs["HTTPRoute"]["spec"]["rules"][0]["backendRefs"][0]
    assert (ref["kind"], ref["name"]) == ("InferencePool", pool["metadata"]["name"])
    assert ref["group"] == pool["apiVersion"].split("/")[0]


def test_chat_affinity(cluster):
    """Chat requests are keyed by the prompt the model's template renders: conversations sharing a
    long system message land on one replica and reuse its blocks."""
    router, replicas = cluster
    client = router.client()
    for g in range(2):
        before = [finished(r) for r in replicas]
        hits_before = sum(r.metrics()["tokamak_prefix_cache_hits_total"] for r in replicas)
        for i in range(3):
            msgs = [{"role": "system", "content": prefix_text(g + 10)},
                    {"role": "user", "content": f"question {i}: {WORDS[i]}"}]
            client.chat.completions.create(model="code-target", messages=msgs, max_tokens=2, temperature=0)
        delta = [finished(r) - b for r, b in zip(replicas, before)]
        assert sorted(delta) == [0, 0, 3], f"chat group {g} spread over replicas: {delta}"
        hits = sum(r.metrics()["tokamak_prefix_cache_hits_total"] for r in replicas) - hits_before
        assert hits >= 2 * 4 * BLOCK, f"chat group {g}: only {hits} prompt tokens from the prefix cache"
