#!/usr/bin/env bash
# Builds tokamak and runs the demo: greedy generation on the bundled tiny model.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target tokamak
MODEL=../shared/models/aidreams260K.gguf
build/tokamak info "$MODEL"
echo
build/tokamak run -m "$MODEL" -p "I dreamed" -n 24 --temp 0
