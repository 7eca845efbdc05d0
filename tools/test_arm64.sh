#!/usr/bin/env bash
# The arm64 kernel tests: a cross build (tools/cmake/aarch64-linux-gnu.cmake,
# TK_KERNELS_ONLY) of the kernels and test_qgemm, test_attention, test_glu
# and test_exp_row, run under qemu-aarch64: test_qgemm on an emulated CPU
# with the dot-product instructions (-cpu max: the dotprod kernels) and on
# one without (cortex-a53: plain NEON), the others on the cortex-a53.
# Needs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user
# (tools/deps.sh --arm64); exits 0 with a SKIP line when they are missing.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  echo "SKIP: arm64 kernel tests need aarch64-linux-gnu-gcc and qemu-aarch64 (tools/deps.sh --arm64)"
  exit 0
fi
jobs=$(nproc)
cmake -S . -B build-arm64 -DCMAKE_BUILD_TYPE=Release -DTK_NATIVE=OFF -DTK_KERNELS_ONLY=ON \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/tools/cmake/aarch64-linux-gnu.cmake" >/dev/null || exit 1
cmake --build build-arm64 -j"$jobs" || exit 1
(cd build-arm64 && ctest --output-on-failure -j"$jobs")
