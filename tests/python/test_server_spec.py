"""Speculative decoding through `tokamak serve`, driven by the official
`openai` client: the server-wide options (--draft-model, --spec, --draft-max,
--draft-min), the per-request extension field

    "speculative": {"mode": "off" | "ngram" | "draft" | "default",
                    "draft_max": N, "draft_min": N}

(sent with `extra_body=`), the /metrics counters, and refusals.

Greedy speculative decoding must reproduce plain greedy decoding token for
token, with the code-target model and its trained draft code-draft (and with
prompt lookup)."""
import json
import os
import subprocess

import pytest

from test_server import Server, assert_error, raw_post

openai = pytest.importorskip("openai")
requests = pytest.importorskip("requests")

MODEL_NAME = "code-target"


def model_path(shared, name):
    path = os.path.join(shared, "models", name)
    if not os.path.isdir(path):
        pytest.skip(f"{path} not found")
    return path


@pytest.fixture(scope="module")
def target(shared):
    return model_path(shared, "code-target")


@pytest.fixture(scope="module")
def draft(shared):
    return model_path(shared, "code-draft")


@pytest.fixture(scope="module")
def prompts(shared):
    """Three pieces of the held-out code text (the ones test_spec.c uses)."""
    text = open(os.path.join(shared, "models", "code-eval.txt"), encoding="utf-8").read()
    out = []
    for i in range(3):
        o = (len(text) - 300) * i // 3
        while o > 0 and text[o - 1] != "\n":
            o += 1
        out.append(text[o:o + 300])
    return out


@pytest.fixture(scope="module")
def server(tokamak_bin, target, draft):
    """Draft model loaded, but speculation off unless a request asks for it."""
    s = Server(tokamak_bin, target, "--draft-model", draft, "--spec", "off", "--draft-max", "6")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def spec_counters(server):
    # a response can reach the client before the engine step that finished
    # it publishes its metrics: wait until no request runs
    m = server.wait_idle()
    return {k: m[f"tokamak_spec_{k}_total"] for k in ("draft_tokens", "accepted_tokens", "target_passes", "tokens")}


def complete(client, prompt, spec=None, max_tokens=48, **kw):
    kw.setdefault("temperature", 0)
    extra = {"speculative": spec} if spec is not None else None
    return client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=max_tokens, extra_body=extra,
                                     **kw)


# ---------------------------------------------------------------- identity

@pytest.mark.parametrize("spec", [
    {"mode": "draft"},                                   # adaptive draft length
    {"mode": "draft", "draft_min": 2, "draft_max": 4},   # always drafting
    {"mode": "ngram", "draft_min": 1},
    "ngram",                                             # the short form
], ids=["draft-adaptive", "draft-2..4", "ngram", "ngram-string"])
def test_greedy_speculative_equals_plain(server, client, prompts, spec):
    before = spec_counters(server)
    for p in prompts:
        plain = complete(client, p)
        fast = complete(client, p, spec)
        assert plain.usage.completion_tokens == 48
        assert fast.choices[0].text == plain.choices[0].text, (spec, p)
        assert fast.usage.completion_tokens == plain.usage.completion_tokens
        assert fast.usage.prompt_tokens == plain.usage.prompt_tokens
        assert fast.choices[0].finish_reason == plain.choices[0].finish_reason
    after = spec_counters(server)
    # every speculating decode step is a target pass; 47 of each request's
    # 48 tokens come from decode steps
    assert after["target_passes"] > before["target_passes"]
    assert after["tokens"] - before["tokens"] == 3 * 47
    if isinstance(spec, dict) and spec.get("draft_min", 0) > 0:
        assert after["draft_tokens"] > before["draft_tokens"]
        assert after["accepted_tokens"] > before["accepted_tokens"]
        # accepted drafts save passes
        assert after["target_passes"] - before["target_passes"] < 3 * 47
    assert after["accepted_tokens"] - before["accepted_tokens"] <= after["draft_tokens"] - before["draft_tokens"]


def test_off_does_not_count(server, client, prompts):
    before = spec_counters(server)
    complete(client, prompts[0], {"mode": "off"}, max_tokens=16)
    complete(client, prompts[0], max_tokens=16)          # the server's default: off
    assert spec_counters(server) == before


def test_logprobs_and_stream_with_drafts(server, client, prompts):
    """Logprobs come from each token's own row and streaming delivers the
    several tokens of one step in order."""
    spec = {"mode": "draft", "draft_min": 3, "draft_max": 3}
    plain = complete(client, prompts[1], logprobs=2, max_tokens=32)
    fast = complete(client, prompts[1], spec, logprobs=2, max_tokens=32)
    assert fast.choices[0].logprobs.tokens == plain.choices[0].logprobs.tokens
    for a, b in zip(fast.choices[0].logprobs.token_logprobs, plain.choices[0].logprobs.token_logprobs):
        assert a == pytest.approx(b, abs=1e-4)
    chunks = client.completions.create(model=MODEL_NAME, prompt=prompts[1], max_tokens=32, temperature=0,
                                       stream=True, extra_body={"speculative": spec})
    assert "".join(c.choices[0].text for c in chunks if c.choices) == plain.choices[0].text


def test_chat_with_draft(server, client):
    msgs = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
    plain = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=40, temperature=0)
    fast = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=40, temperature=0,
                                          extra_body={"speculative": {"mode": "draft", "draft_min": 1}})
    assert fast.choices[0].message.content == plain.choices[0].message.content
    assert fast.usage.completion_tokens == plain.usage.completion_tokens


def test_sampling_with_drafts(server, client, prompts):
    """Sampling with drafts: seeded requests reproduce, n samples all finish."""
    spec = {"mode": "draft", "draft_min": 2, "draft_max": 2}
    a = complete(client, prompts[2], spec, temperature=0.8, seed=7, n=3, max_tokens=24)
    b = complete(client, prompts[2], spec, temperature=0.8, seed=7, n=3, max_tokens=24)
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert a.usage.completion_tokens == 3 * 24


# ---------------------------------------------------------------- refusals

BAD_FIELDS = [
    (5, "speculative"),
    ([], "speculative"),
    ("fast", "speculative"),
    ({"mode": 3}, "speculative.mode"),
    ({"mode": "fast"}, "speculative.mode"),
    ({"mode": "DRAFT"}, "speculative.mode"),
    ({"draft_max": "4"}, "speculative.draft_max"),
    ({"draft_max": 2.5}, "speculative.draft_max"),
    ({"draft_max": True}, "speculative.draft_max"),
    ({"draft_max": 0}, "speculative.draft_max"),
    ({"draft_max": 33}, "speculative.draft_max"),
    ({"draft_max": 2 ** 63 - 1}, "speculative.draft_max"),
    ({"draft_min": -1}, "speculative.draft_min"),
    ({"draft_min": 33}, "speculative.draft_min"),
    ({"draft_min": 5, "draft_max": 2}, "speculative.draft_min"),
    ({"mode": "draft", "k": 4}, "speculative"),
]


@pytest.mark.parametrize("value,param", BAD_FIELDS, ids=[json.dumps(v) for v, _ in BAD_FIELDS])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_bad_speculative_field(server, path, value, param):
    body = {"max_tokens": 4, "speculative": value}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "def f():"
    err = assert_error(raw_post(server, path, body), 400, param)
    assert err["type"] == "invalid_request_error"


def test_bad_speculative_field_openai_client(server, client):
    with pytest.raises(openai.BadRequestError) as ei:
        complete(client, "def f():", {"mode": "draft", "draft_max": "many"}, max_tokens=4)
    assert ei.value.status_code == 400
    assert ei.value.body["param"] == "speculative.draft_max"
    # null means absent, as for the standard fields
    assert complete(client, "def f():", None, max_tokens=4).usage.completion_tokens == 4
    r = raw_post(server, "/v1/completions", {"prompt": "def f():", "max_tokens": 4, "speculative": None})
    assert r.status_code == 200, r.text


# ---------------------------------------------------------------- server-wide options

def test_server_default_ngram_without_draft_model(tokamak_bin, target, prompts):
    s = Server(tokamak_bin, target, "--spec", "ngram", "--draft-min", "1", "--draft-max", "4")
    try:
        assert "speculative decoding by default: prompt lookup" in s.stderr()
        c = s.client()
        before = spec_counters(s)
        fast = complete(c, prompts[0])                          # the server's default: prompt lookup
        mid = spec_counters(s)
        plain = complete(c, prompts[0], {"mode": "off"})
        assert fast.choices[0].text == plain.choices[0].text
        assert mid["target_passes"] > before["target_passes"] and mid["draft_tokens"] > before["draft_tokens"]
        assert spec_counters(s) == mid
        # no draft model here: asking for one is the client's error
        err = assert_error(raw_post(s, "/v1/completions", {"prompt": "x", "max_tokens": 2,
                                                           "speculative": {"mode": "draft"}}), 400,
                           "speculative.mode")
        assert "draft model" in err["message"]
        m = s.metrics()
        assert m["tokamak_spec_acceptance_ratio"] == pytest.approx(
            m["tokamak_spec_accepted_tokens_total"] / m["tokamak_spec_draft_tokens_total"])
    finally:
        s.stop()


@pytest.mark.parametrize("args,msg", [
    (["--spec", "fast"], "--spec expects ngram, draft or off"),
    (["--draft-max", "0"], "--draft-max expects an integer"),
    (["--draft-min", "x"], "--draft-min expects an integer"),
    (["--draft-model"], "needs a value"),
])
def test_serve_bad_spec_options(tokamak_bin, target, args, msg):
    p = subprocess.run([tokamak_bin, "serve", "-m", target, "--port", "0", *args], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and msg in p.stderr, p.stderr


def test_serve_spec_draft_without_model(tokamak_bin, target):
    p = subprocess.run([tokamak_bin, "serve", "-m", target, "--port", "0", "--spec", "draft"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and "draft model" in p.stderr, p.stderr


def test_zz_blocks_returned(server):
    server.wait_idle()
