"""`tokamak serve --tp 2` under `mpirun -np 2` (a build with -DTK_MPI=ON, named by
TOKAMAK_MPI_BIN; docs/parallel.md): its answers against the same binary serving on one
rank (with a draft model on rank 0 too), a rank that dies or is stuck ending the whole job
instead of hanging it (--tp-timeout), and an idle or merely slow rank not ending it.  The
general server suite runs against a TP=2 server with TOKAMAK_TP=2 (test_server.py)."""
import os
import signal
import subprocess
import time

import pytest

from test_server import MODEL_NAME, Server, tp_launcher

openai = pytest.importorskip("openai", reason="the official openai package is not installed")
requests = pytest.importorskip("requests", reason="requests is not installed")


def launcher():
    return tp_launcher(2)


# f32 KV on both: the 2-rank logits differ from one rank's by about 1e-6, and f16 rows would
# round some K/V values the other way (one f16 step, ~5e-4 relative), enough to change a
# sampled token now and then (docs/parallel.md).
@pytest.fixture(scope="module")
def servers(mpi_bin, model_dir):
    one = Server(mpi_bin, model_dir, "--max-seqs", "4", "--kv-type", "f32", threads=1)
    two = Server(mpi_bin, model_dir, "--max-seqs", "4", "--kv-type", "f32", "--tp", "2", threads=1,
                 launcher=launcher())
    yield one, two
    one.stop()
    two.stop()


MESSAGES = [{"role": "user", "content": "Write a Python function that reverses a list."}]


def chat(server, **kw):
    return server.client().chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=24, **kw)


def test_chat_greedy_same_as_one_rank(servers):
    one, two = servers
    a, b = chat(one, temperature=0), chat(two, temperature=0)
    assert a.choices[0].message.content, "empty answer"
    assert b.choices[0].message.content == a.choices[0].message.content
    assert b.usage.completion_tokens == a.usage.completion_tokens == 24


def test_stream_and_forked_samples(servers):
    """n = 2 samples fork the prompt's blocks (copy on write of the shared last block on
    every rank); seeded sampling picks the same tokens as on one rank."""
    one, two = servers
    g = chat(two, temperature=0, n=2)
    assert g.choices[0].message.content == g.choices[1].message.content == chat(one, temperature=0).choices[0].message.content
    a = chat(one, temperature=1.0, seed=7, n=2)
    b = chat(two, temperature=1.0, seed=7, n=2)
    assert [c.message.content for c in b.choices] == [c.message.content for c in a.choices]
    stream = two.client().chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=24,
                                                  temperature=0, stream=True)
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    assert text == chat(one, temperature=0).choices[0].message.content
    two.wait_idle()


def test_dead_rank_ends_the_job(mpi_bin, model_dir):
    s = Server(mpi_bin, model_dir, "--max-seqs", "2", "--tp", "2", threads=1, launcher=launcher())
    try:
        pids = s.ranks()
        assert 1 in pids, f"rank 1 not found among mpirun's children: {pids}"
        os.kill(pids[1], signal.SIGKILL)
        status = s.proc.wait(timeout=60)  # never a hang
        assert status != 0
        with pytest.raises(requests.RequestException):
            requests.get(s.url + "/health", timeout=5)
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


def test_embeddings_same_as_one_rank(servers):
    """Pooled final-norm hidden states: the plan tells the other ranks to skip the head."""
    one, two = servers
    a = one.client().embeddings.create(model=MODEL_NAME, input=["def add(a, b):", "import os"])
    b = two.client().embeddings.create(model=MODEL_NAME, input=["def add(a, b):", "import os"])
    for x, y in zip(a.data, b.data):
        assert len(x.embedding) == len(y.embedding) > 0
        assert max(abs(p - q) for p, q in zip(x.embedding, y.embedding)) < 1e-5
    # and generation still works after an embeddings batch
    assert chat(two, temperature=0).choices[0].message.content == chat(one, temperature=0).choices[0].message.content


def ended_with(s, timeout):
    """The job's exit status (within timeout: never a hang) and its stderr."""
    try:
        status = s.proc.wait(timeout=timeout)
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
    return status, s.stderr()


@pytest.mark.parametrize("stuck", [1, 0])
def test_stuck_rank_ends_the_job(mpi_bin, model_dir, monkeypatch, stuck):
    """A rank alive but stuck inside a step (the TK_TP_TEST_STALL hook: it sleeps in its first
    all-reduce) ends the job within --tp-timeout, with a message naming it, instead of hanging
    the other rank in the exchange; rank 1 stuck is found by rank 0 and the other way round."""
    monkeypatch.setenv("TK_TP_TEST_STALL", str(stuck))
    s = Server(mpi_bin, model_dir, "--max-seqs", "2", "--tp", "2", "--tp-timeout", "2", threads=1,
               launcher=launcher())
    start = time.time()
    with pytest.raises(requests.RequestException):
        requests.post(s.url + "/v1/completions", json={"prompt": "def f(", "max_tokens": 4}, timeout=60).raise_for_status()
    status, err = ended_with(s, 60)
    assert status != 0
    assert time.time() - start < 40, "the job took too long to end"
    assert f"rank {stuck} did not complete the all-reduce within 2 s" in err, err
    assert "step 1" in err, err


def test_idle_server_never_times_out(mpi_bin, model_dir):
    """The bound counts only while an exchange of a step is in progress: the other rank waiting
    for work longer than --tp-timeout is idle, not stuck."""
    s = Server(mpi_bin, model_dir, "--max-seqs", "2", "--kv-type", "f32", "--tp", "2", "--tp-timeout", "1",
               threads=1, launcher=launcher())
    try:
        time.sleep(2.5)
        r = requests.post(s.url + "/v1/completions", json={"prompt": "def f(", "max_tokens": 4}, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4, r.text
        time.sleep(1.5)
        r = requests.post(s.url + "/v1/completions", json={"prompt": "def f(", "max_tokens": 4}, timeout=60)
        assert r.status_code == 200, r.text
    finally:
        s.stop()


def test_draft_model_on_rank_0(mpi_bin, model_dir, shared, servers):
    """Speculative decoding next to a tensor-parallel target: rank 0 drafts with the whole draft
    model and verifies over both ranks (rejected drafts shorten the sequences, which the next plan
    carries); greedy output is one rank's plain output."""
    one, _ = servers
    draft = os.path.join(shared, "models", "code-draft")
    if not os.path.isdir(draft):
        pytest.skip(f"{draft} not found")
    s = Server(mpi_bin, model_dir, "--max-seqs", "4", "--kv-type", "f32", "--draft-model", draft, "--tp", "2",
               threads=1, launcher=launcher())
    try:
        got = chat(s, temperature=0, n=2)
        want = chat(one, temperature=0).choices[0].message.content
        assert [c.message.content for c in got.choices] == [want, want]
        m = s.metrics()
        assert m["tokamak_spec_draft_tokens_total"] > 0 and m["tokamak_spec_accepted_tokens_total"] > 0, m
        s.wait_idle()
    finally:
        s.stop()


def test_slow_rank_within_the_bound(mpi_bin, model_dir, monkeypatch):
    """A rank late by less than --tp-timeout (the hook's RANK:SECONDS form: 1 s late in its first
    all-reduce, bound 5 s) only delays the step."""
    monkeypatch.setenv("TK_TP_TEST_STALL", "1:1")
    s = Server(mpi_bin, model_dir, "--max-seqs", "2", "--tp", "2", "--tp-timeout", "5", threads=1,
               launcher=launcher())
    try:
        r = requests.post(s.url + "/v1/completions", json={"prompt": "def f(", "max_tokens": 4}, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4, r.text
    finally:
        s.stop()
