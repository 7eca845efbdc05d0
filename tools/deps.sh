#!/usr/bin/env bash
# Installs what tokamak needs to build and test, when missing:
# Debian packages (C compiler, CMake, PCRE2, jansson, libmicrohttpd; g++ for
# the llama.cpp oracle) and a project-local Python venv (.venv) with the test
# oracles from PyPI.
# --browser (test setup, tools/test.sh) also installs Debian's chromium and
# chromium-driver for the web page tests (tests/python/test_web.py).
# --arm64 (test setup too) installs the arm64 cross compiler and qemu-user
# for the emulated NEON kernel tests (tools/test_arm64.sh).
# --mpi (test setup too) installs Open MPI for the tensor-parallel build and
# its tests (cmake -DTK_MPI=ON; docs/parallel.md).
# Safe to run repeatedly; without network the oracle and browser tests are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
browser=0
arm64=0
mpi=0
for arg in "$@"; do
  case "$arg" in
    --browser) browser=1 ;;
    --arm64) arm64=1 ;;
    --mpi) mpi=1 ;;
  esac
done

need_pkgs=()
command -v cc >/dev/null || need_pkgs+=(gcc)
# C++ only for the oracles: llama-cpp-python compiles llama.cpp (tools/oracles.sh).
command -v c++ >/dev/null || command -v g++ >/dev/null || need_pkgs+=(g++)
command -v cmake >/dev/null || need_pkgs+=(cmake)
command -v make >/dev/null || need_pkgs+=(make)
command -v pkg-config >/dev/null || need_pkgs+=(pkg-config)
for pc in libpcre2-8:libpcre2-dev jansson:libjansson-dev libutf8proc:libutf8proc-dev libmicrohttpd:libmicrohttpd-dev; do
  pkg-config --exists "${pc%%:*}" 2>/dev/null || need_pkgs+=("${pc##*:}")
done
python3 -c 'import venv, ensurepip' 2>/dev/null || need_pkgs+=(python3-venv)
command -v python3 >/dev/null || need_pkgs+=(python3)

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "deps: installing ${need_pkgs[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
if [ $browser -eq 1 ] && ! { command -v chromium >/dev/null && command -v chromedriver >/dev/null; }; then
  echo "deps: installing chromium chromium-driver (browser tests)"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver \
      >/dev/null; } || echo "deps: cannot install chromium; the browser tests will be skipped"
fi

if [ $arm64 -eq 1 ] && ! { command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; }; then
  echo "deps: installing qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross (arm64 kernel tests)"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq qemu-user \
      gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null; } || echo "deps: cannot install them; the arm64 kernel tests will be skipped"
fi

if [ $mpi -eq 1 ] && ! command -v mpicc >/dev/null; then
  echo "deps: installing openmpi-bin libopenmpi-dev (tensor-parallel tests)"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openmpi-bin \
      libopenmpi-dev >/dev/null; } || echo "deps: cannot install Open MPI; the tensor-parallel tests will be skipped"
fi

# Python oracles for the differential tests (never used by the engine).
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv || echo "deps: cannot create .venv; Python oracle tests will be skipped"
fi
if [ -x .venv/bin/python ] && ! .venv/bin/python -c 'import tokenizers, gguf, numpy, pytest, jinja2, openai, requests, pexpect, selenium, jsonschema, llguidance' 2>/dev/null; then
  .venv/bin/python -m pip install -q --disable-pip-version-check tokenizers gguf numpy pytest jinja2 openai requests pexpect selenium \
    jsonschema llguidance \
    || echo "deps: pip install failed (its error is above); Python oracle tests will be skipped"
fi
exit 0
