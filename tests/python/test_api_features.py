"""Tool calling, /tokenize and /detokenize in `tokamak serve`, driven by the
official `openai` client (raw HTTP where the client cannot send the input).

The model (code-target, with the Qwen2.5-style test template that teaches
the Hermes <tool_call> format) writes random code, not calls: the parser is
tested on fixed outputs in tests/test_toolcall.c; here the tests check what
reaches the template (against Jinja2 + HF `tokenizers` rendering the same
conversation the way transformers' apply_chat_template does), the shape of
answers, streaming against non-streaming, the errors, and that tool_choice
"required" / a named function (constrained decoding) yields a parsed call
(arguments validated in test_structured_output.py)."""
import json
import os

import pytest

from test_server import API_KEY, MODEL_NAME, Server, assert_error, raw_post

openai = pytest.importorskip("openai", reason="the official openai package is not installed")
tokenizers = pytest.importorskip("tokenizers", reason="HF tokenizers is not installed (the tokenization oracle)")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN_TEMPLATE = os.path.join(REPO, "tests", "data", "chat_templates", "qwen25.jinja")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string",
                   "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
CONVERSATION = [
    {"role": "system", "content": "You call tools."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_abc", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
    {"role": "tool", "tool_call_id": "call_abc", "content": "{\"temp\": 21}"},
    {"role": "user", "content": "And the time?"},
]


@pytest.fixture(scope="module")
def server(tokamak_bin, model_dir):
    s = Server(tokamak_bin, model_dir, "--chat-template", QWEN_TEMPLATE, "--max-seqs", "4", api_key=API_KEY)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


@pytest.fixture(scope="module")
def hf_tok(model_dir):
    return tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))


def chat(client, messages, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 24)
    return client.chat.completions.create(model=MODEL_NAME, messages=messages, **kw)


def hf_render(messages, tools, template=QWEN_TEMPLATE):
    """apply_chat_template's rendering: ImmutableSandboxedEnvironment with
    trim/lstrip blocks, HF's tojson, raise_exception and strftime_now (at
    tokamak's fixed date), tools as `tools`, and (as vLLM does before
    rendering) tool-call arguments given as JSON text parsed into objects."""
    jinja2 = pytest.importorskip("jinja2")
    import datetime
    import jinja2.sandbox

    def tojson(x, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime(2024, 7, 26).strftime(fmt)
    msgs = json.loads(json.dumps(messages))
    for m in msgs:
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return env.from_string(open(template).read()).render(messages=msgs, tools=tools, add_generation_prompt=True,
                                                         bos_token="<s>", eos_token="</s>")


# Mistral's templates want 9-character call ids, and user/assistant turns
# alternating around the tool turns.
MISTRAL_CONVERSATION = json.loads(json.dumps(CONVERSATION).replace("call_abc", "abc123def"))
MISTRAL_CONVERSATION.insert(4, {"role": "assistant", "content": "It is 21 degrees."})


@pytest.mark.parametrize("name, conversation", [("llama31", CONVERSATION), ("mistral_nemo", MISTRAL_CONVERSATION)])
def test_tools_reach_other_family_templates_as_in_hf(tokamak_bin, model_dir, hf_tok, name, conversation):
    """The same conversation with tools through the Llama 3.1- and Mistral
    Nemo-style test templates (tools as JSON, [AVAILABLE_TOOLS] /
    [TOOL_CALLS] / [TOOL_RESULTS] blocks) gives the tokens Jinja2 + HF
    tokenizers give."""
    template = os.path.join(REPO, "tests", "data", "chat_templates", name + ".jinja")
    text = hf_render(conversation, [WEATHER, TIME], template)
    assert "get_time" in text and "Paris" in text
    if name == "mistral_nemo":
        assert "[AVAILABLE_TOOLS]" in text and "[TOOL_CALLS]" in text and "[TOOL_RESULTS]" in text
    ids = hf_tok.encode(text, add_special_tokens=False).ids
    if not text.startswith("<s>"):
        ids = [1] + ids
    s = Server(tokamak_bin, model_dir, "--chat-template", template)
    try:
        assert ("tool calls: llama3" if name == "llama31" else "tool calls: mistral") in s.stderr()
        r = raw_post(s, "/tokenize", {"messages": conversation, "tools": [WEATHER, TIME]})
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == ids
    finally:
        s.stop()


# ---------------------------------------------------------------- the template sees tools as HF passes them

def test_tools_and_tool_messages_reach_the_template_as_in_hf(server, hf_tok):
    text = hf_render(CONVERSATION, [WEATHER, TIME])
    assert "<tools>" in text and "\"get_time\"" in text and "<tool_response>" in text
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}' in text
    want = [1] + hf_tok.encode(text, add_special_tokens=False).ids  # the server prepends BOS (template has none)
    r = raw_post(server, "/tokenize", {"messages": CONVERSATION, "tools": [WEATHER, TIME]})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == want
    assert r.json()["count"] == len(want)


def test_tool_choice_none_passes_no_tools(server, client):
    with_none = chat(client, CONVERSATION, tools=[WEATHER], tool_choice="none", max_tokens=4)
    r = raw_post(server, "/tokenize", {"messages": CONVERSATION})
    assert with_none.usage.prompt_tokens == r.json()["count"]
    auto = chat(client, CONVERSATION, tools=[WEATHER], max_tokens=4)
    assert auto.usage.prompt_tokens > with_none.usage.prompt_tokens
    assert with_none.choices[0].message.tool_calls is None


# ---------------------------------------------------------------- answers

def check_calls(calls, names):
    for c in calls:
        assert c.type == "function" and c.id.startswith("call_") and len(c.id) > 10
        assert c.function.name in names
        assert isinstance(json.loads(c.function.arguments), dict)
    assert len({c.id for c in calls}) == len(calls)


def stream_collect(client, messages, **kw):
    """The streamed answer reassembled: content, calls (by index), finish."""
    content, calls, finish = "", {}, None
    for ch in chat(client, messages, stream=True, **kw):
        d = ch.choices[0].delta
        if d.content:
            content += d.content
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                # the first delta of a call: id, type, name and arguments ""
                assert tc.id and tc.type == "function" and tc.function.name and tc.function.arguments == ""
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            else:
                assert tc.id is None and tc.function.name is None
                calls[tc.index]["arguments"] += tc.function.arguments
        if ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    return content, [calls[k] for k in sorted(calls)], finish


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tools_auto_answer_stream_equals_non_stream(client, seed):
    kw = dict(tools=[WEATHER, TIME], temperature=1.0, seed=seed, max_tokens=32)
    r = chat(client, CONVERSATION, **kw)
    msg, finish = r.choices[0].message, r.choices[0].finish_reason
    calls = msg.tool_calls or []
    check_calls(calls, {"get_weather", "get_time"})
    assert finish == ("tool_calls" if calls else finish) and finish in ("stop", "length", "tool_calls")
    content, scalls, sfinish = stream_collect(client, CONVERSATION, **kw)
    assert content == (msg.content or "")
    assert [(c["name"], c["arguments"]) for c in scalls] == [(c.function.name, c.function.arguments) for c in calls]
    assert sfinish == finish


def test_tools_answer_without_calls_is_the_plain_text(server, client):
    """Output that is no call stays content, unchanged: the same tokens as a
    completion of the same prompt ids."""
    r = chat(client, CONVERSATION, tools=[WEATHER], max_tokens=16)
    ids = raw_post(server, "/tokenize", {"messages": CONVERSATION, "tools": [WEATHER]}).json()["tokens"]
    ref = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=16, temperature=0)
    if r.choices[0].message.tool_calls is None:
        assert r.choices[0].message.content == ref.choices[0].text
        assert r.choices[0].finish_reason == ref.choices[0].finish_reason


def test_tool_messages_accepted(client):
    r = chat(client, CONVERSATION, max_tokens=4)  # no tools: tool_calls / tool messages still rendered
    assert r.choices[0].message.role == "assistant"


# ---------------------------------------------------------------- constrained calls (the grammar engine)

@pytest.mark.parametrize("choice", ["required", "named"])
def test_tool_choice_forces_a_call(server, client, choice):
    tc = "required" if choice == "required" else {"type": "function", "function": {"name": "get_weather"}}
    for stream in (False, True):
        kw = dict(tools=[WEATHER, TIME], tool_choice=tc, max_tokens=96, temperature=1.0, seed=5)
        if stream:
            _, calls, finish = stream_collect(client, CONVERSATION, **kw)
            names = [c["name"] for c in calls]
            args = [json.loads(c["arguments"]) for c in calls]
        else:
            r = chat(client, CONVERSATION, **kw)
            finish = r.choices[0].finish_reason
            names = [c.function.name for c in r.choices[0].message.tool_calls or []]
            args = [json.loads(c.function.arguments) for c in r.choices[0].message.tool_calls or []]
        assert names and finish == "tool_calls", (names, finish)
        if choice == "named":
            assert set(names) == {"get_weather"} and all("city" in a for a in args)


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("body, param", [
    ({"tools": {"type": "function"}}, "tools"),
    ({"tools": [{"type": "retrieval"}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]}, "tools"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}]}, "messages[0]"),
    ({"messages": [{"role": "assistant", "tool_calls": "x"}]}, "messages[0]"),
    ({"messages": [{"role": "tool", "tool_call_id": 5, "content": "x"}]}, "messages[0]"),
])
def test_tool_errors(server, body, param):
    req = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **body}
    assert_error(raw_post(server, "/v1/chat/completions", req), 400, param)


def test_tools_on_completions_refused(server):
    assert_error(raw_post(server, "/v1/completions", {"prompt": "x", "tools": [WEATHER]}), 400, "tools")


def test_tools_without_a_format_refused(tokamak_bin, model_dir):
    s = Server(tokamak_bin, model_dir)  # the model's Llama-2 template shows no tool-call format
    try:
        assert "tool calls: none" in s.stderr()
        r = raw_post(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER]})
        assert_error(r, 400, "tools")
        r = raw_post(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER],
                                                 "tool_choice": "none", "max_tokens": 2})
        assert r.status_code == 200, r.text
    finally:
        s.stop()


def test_tool_format_option(tokamak_bin, model_dir):
    s = Server(tokamak_bin, model_dir, "--tool-format", "llama3")
    try:
        assert "tool calls: llama3" in s.stderr()
    finally:
        s.stop()


# ---------------------------------------------------------------- /tokenize and /detokenize

TEXTS = ["hello world", "def f(x):\n    return x * 2\n", "  leading spaces and ünïcödé ✓", "日本語のテキスト", "a"]


@pytest.mark.parametrize("add_special", [True, False])
def test_tokenize_matches_hf(server, hf_tok, add_special):
    for text in TEXTS:
        r = raw_post(server, "/tokenize", {"model": MODEL_NAME, "prompt": text, "add_special_tokens": add_special})
        assert r.status_code == 200, r.text
        want = hf_tok.encode(text, add_special_tokens=add_special).ids
        j = r.json()
        assert j["tokens"] == want and j["count"] == len(want) and j["max_model_len"] == 512


def test_detokenize_round_trip(server, hf_tok):
    for text in TEXTS:
        ids = raw_post(server, "/tokenize", {"prompt": text}).json()["tokens"]
        r = raw_post(server, "/detokenize", {"tokens": ids})
        assert r.status_code == 200, r.text
        assert r.json()["prompt"] == hf_tok.decode(ids, skip_special_tokens=True) == text
    assert raw_post(server, "/detokenize", {"tokens": []}).json() == {"prompt": ""}


@pytest.mark.parametrize("path, body, param", [
    ("/detokenize", {"tokens": [1, 32000]}, "tokens"),
    ("/detokenize", {"tokens": [-1]}, "tokens"),
    ("/detokenize", {"tokens": ["a"]}, "tokens"),
    ("/detokenize", {"tokens": 5}, "tokens"),
    ("/detokenize", {}, "tokens"),
    ("/tokenize", {"prompt": 5}, "prompt"),
    ("/tokenize", {"prompt": "x", "add_special_tokens": "yes"}, "prompt"),
    ("/tokenize", {}, "prompt"),
    ("/tokenize", "not json", None),
])
def test_tokenize_errors(server, path, body, param):
    assert_error(raw_post(server, path, body), 400, param)


def test_tokenize_auth_and_model(server):
    import requests
    r = requests.post(server.url + "/tokenize", json={"prompt": "x"}, timeout=30)
    assert_error(r, 401)
    assert_error(raw_post(server, "/tokenize", {"model": "other", "prompt": "x"}), 404, "model")
    r = requests.get(server.url + "/tokenize", headers=server.headers(), timeout=30)
    assert r.status_code == 405


# ---------------------------------------------------------------- /v1/embeddings

DIM = 288  # code-target's hidden size (config.json)
EMB_TEXTS = ["hello world", "def f(x):\n    return x + 1", "import numpy as np"]


def embed(client, inp, **extra):
    return client.embeddings.create(model=MODEL_NAME, input=inp, extra_body=extra or None)


@pytest.fixture(scope="module")
def hf_model(model_dir):
    torch = pytest.importorskip("torch", reason="torch is not installed (the hidden-state oracle)")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    m = transformers.AutoModel.from_pretrained(model_dir, torch_dtype=torch.float32)
    m.eval()

    def hidden(ids):
        with torch.no_grad():
            return m(torch.tensor([ids])).last_hidden_state[0].numpy().astype("float64")
    return hidden


@pytest.mark.parametrize("pooling", ["mean", "last", "cls"])
def test_embeddings_match_transformers(server, client, hf_tok, hf_model, pooling):
    """The final-norm hidden states pooled, against transformers' LlamaModel
    last_hidden_state (after the final norm) on the same token ids."""
    np = pytest.importorskip("numpy")
    r = embed(client, EMB_TEXTS, pooling=pooling)
    assert [d.index for d in r.data] == [0, 1, 2]
    n_tok = 0
    for text, d in zip(EMB_TEXTS, r.data):
        ids = hf_tok.encode(text).ids  # BOS + text, as the server tokenizes
        n_tok += len(ids)
        h = hf_model(ids)
        ref = {"mean": h.mean(0), "last": h[-1], "cls": h[0]}[pooling]
        ref /= np.linalg.norm(ref)
        got = np.array(d.embedding)
        assert got.shape == (DIM,)
        assert abs(np.linalg.norm(got) - 1) < 1e-5
        assert np.abs(got - ref).max() < 2e-4, np.abs(got - ref).max()
    assert r.usage.prompt_tokens == r.usage.total_tokens == n_tok


def test_embeddings_default_pooling_is_last_and_normalize_off(client, hf_tok, hf_model):
    np = pytest.importorskip("numpy")
    ids = hf_tok.encode(EMB_TEXTS[1]).ids
    default = np.array(embed(client, ids).data[0].embedding)
    last = np.array(embed(client, ids, pooling="last").data[0].embedding)
    assert np.array_equal(default, last)
    raw = np.array(embed(client, [ids], normalize=False, pooling="last").data[0].embedding)
    assert np.abs(raw - hf_model(ids)[-1]).max() < 2e-4 * np.abs(raw).max()


def test_embeddings_batch_equals_single(client):
    """Inputs packed together (several sequences per pass) give what each gives alone."""
    np = pytest.importorskip("numpy")
    many = [f"line {i}: " + "x = y + 1; " * (i % 7 + 1) for i in range(40)]
    together = embed(client, many, pooling="mean").data
    for i in (0, 13, 39):
        alone = embed(client, many[i], pooling="mean").data[0].embedding
        assert np.abs(np.array(alone) - np.array(together[i].embedding)).max() < 1e-5


def test_embeddings_base64_equals_float(server, client):
    np = pytest.importorskip("numpy")
    import base64
    f = embed(client, EMB_TEXTS)  # the openai client asks for base64 and decodes it itself
    r = raw_post(server, "/v1/embeddings", {"input": EMB_TEXTS, "encoding_format": "float"})
    b = raw_post(server, "/v1/embeddings", {"input": EMB_TEXTS, "encoding_format": "base64"})
    assert r.status_code == 200 and b.status_code == 200
    for i in range(len(EMB_TEXTS)):
        floats = np.array(r.json()["data"][i]["embedding"], dtype=np.float32)
        decoded = np.frombuffer(base64.b64decode(b.json()["data"][i]["embedding"]), dtype="<f4")
        assert decoded.shape == (DIM,) and np.array_equal(decoded, floats)
        assert np.allclose(np.array(f.data[i].embedding, dtype=np.float32), floats, atol=0, rtol=0)
    assert r.json()["object"] == "list" and r.json()["model"] == MODEL_NAME
    ok = raw_post(server, "/v1/embeddings", {"input": "x", "dimensions": DIM})
    assert ok.status_code == 200


@pytest.mark.parametrize("body, param", [
    ({}, "input"),
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": [[]]}, "input"),
    ({"input": 5}, "input"),
    ({"input": [1, "a"]}, "input"),
    ({"input": [[1, 2], ["a"]]}, "input"),
    ({"input": [[1, 32000]]}, "input"),
    ({"input": [[-1]]}, "input"),
    ({"input": [[1] * 513]}, "input"),
    ({"input": "word " * 600}, "input"),
    ({"input": ["a"] * 257}, "input"),
    ({"input": "x", "dimensions": 64}, "dimensions"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "x", "pooling": "max"}, "pooling"),
    ({"input": "x", "normalize": "yes"}, "normalize"),
])
def test_embeddings_errors(server, body, param):
    assert_error(raw_post(server, "/v1/embeddings", body), 400, param)


def test_embeddings_while_generating(server, client):
    """Embeddings run between the steps of a busy engine; both finish."""
    import threading
    done = {}

    def gen():
        done["chat"] = chat(client, [{"role": "user", "content": "hi"}], max_tokens=48).choices[0].finish_reason

    t = threading.Thread(target=gen)
    t.start()
    for _ in range(5):
        assert len(embed(client, EMB_TEXTS).data) == 3
    t.join(120)
    assert done.get("chat") in ("stop", "length")
    server.wait_idle()


def test_embeddings_without_a_free_slot_is_503(tokamak_bin, model_dir):
    """With every sequence slot generating, an embedding request is answered
    503 (try again), and works once the slot is free."""
    import threading
    import time
    s = Server(tokamak_bin, model_dir, "--max-seqs", "1")
    try:
        c = s.client()
        t = threading.Thread(target=lambda: c.completions.create(model=MODEL_NAME, prompt="def f():", max_tokens=500,
                                                                 temperature=0, extra_body={"ignore_eos": True}))
        t.start()
        deadline = time.time() + 30
        while s.metrics()["tokamak_requests_running"] < 1 and time.time() < deadline:
            time.sleep(0.02)
        r = raw_post(s, "/v1/embeddings", {"input": "x"})
        assert_error(r, 503)
        assert "sequence slots" in r.json()["error"]["message"]
        t.join(120)
        s.wait_idle()
        assert raw_post(s, "/v1/embeddings", {"input": "x"}).status_code == 200
    finally:
        s.stop()
