#!/usr/bin/env bash
# Reproduces the table of docs/quantization.md: quantizes code-target every
# way, then measures perplexity (all positions and second half, context 256)
# and KL divergence / top-1 agreement against the F32 model on code-eval.txt.
#
#   tools/quant_results.sh OUTDIR [NAME...]     (default: every row)
#
# Needs build/tokamak (Release; or $TOKAMAK_BIN) and the shared assets; -t from $THREADS.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/quant_results.sh OUTDIR [NAME...]}
shift
mkdir -p "$out"
bin=${TOKAMAK_BIN:-build/tokamak}
shared=${TK_SHARED_DIR:-../shared}
model=$shared/models/code-target
calib=$shared/models/code-calib.txt
eval=$shared/models/code-eval.txt
t=${THREADS:-2}

# name | quantize arguments (empty: the F32 conversion)
rows=(
  "f32|"
  "q8_0|--type q8_0"
  "q4_0|--type q4_0"
  "q4_0-g128|--type q4_0 --group 128"
  "q4_1|--type q4_1"
  "q4_k_m|--type q4_k_m"
  "nf4|--type nf4"
  "nf4_dq|--type nf4 --nf4-double-quant"
  "gptq-g128|--type q4_0 --method gptq --group 128 --calib $calib"
  "gptq-g32|--type q4_0 --method gptq --group 32 --calib $calib"
  "awq-g128|--type q4_0 --method awq --group 128 --calib $calib"
  "awq-g32|--type q4_0 --method awq --group 32 --calib $calib"
  "gptq-g32-act|--type q4_0 --method gptq --group 32 --act-order --calib $calib"
  "gptq-q4_1-g32|--type q4_1 --method gptq --group 32 --calib $calib"
)
want=" $* "
for row in "${rows[@]}"; do
  name=${row%%|*}
  args=${row#*|}
  [ $# -gt 0 ] && [[ $want != *" $name "* ]] && continue
  gguf=$out/ct-$name.gguf
  # finished steps are kept (delete a file to redo its step)
  if [ ! -f "$gguf" ]; then
    if [ "$name" = f32 ]; then
      $bin convert "$model" "$gguf.tmp" --type f32 2>"$out/$name.quantize.log"
    else
      # shellcheck disable=SC2086
      $bin quantize "$model" "$gguf.tmp" $args -t "$t" 2>"$out/$name.quantize.log"
    fi
    mv "$gguf.tmp" "$gguf"
  fi
  [ -f "$out/$name.ppl.txt" ] && continue
  if [ "$name" = f32 ]; then
    $bin perplexity -m "$gguf" -f "$eval" --ctx 256 -t "$t" >"$out/$name.ppl.tmp" 2>/dev/null
  else
    # exact KL: the F32 model runs alongside
    $bin perplexity -m "$gguf" -f "$eval" --ctx 256 -t "$t" --kl-base-model "$out/ct-f32.gguf" \
      >"$out/$name.ppl.tmp" 2>/dev/null
  fi
  mv "$out/$name.ppl.tmp" "$out/$name.ppl.txt"
  echo "done $name"
done
# summary (KL: exact, over the full vocabulary)
printf "| model | size (bytes) | bits/weight | PPL all | PPL 2nd half | KL all | KL 2nd half | same top-1 all | same top-1 2nd half |\n"
printf "|---|---|---|---|---|---|---|---|---|\n"
for row in "${rows[@]}"; do
  name=${row%%|*}
  f=$out/$name.ppl.txt
  [ -f "$f" ] || continue
  size=$(stat -c %s "$out/ct-$name.gguf")
  bpw=$($bin info "$out/ct-$name.gguf" | sed -n 's/.*, \([0-9.]*\) bits per weight/\1/p')
  pa=$(sed -n 's/^\[all positions\] perplexity: \([0-9.]* +\/- [0-9.]*\).*/\1/p' "$f")
  ps=$(sed -n 's/^\[second half\] perplexity: \([0-9.]* +\/- [0-9.]*\).*/\1/p' "$f")
  ka=$(sed -n 's/^\[all positions\] KL(base || this): mean \([0-9.]*\).*/\1/p' "$f")
  ks=$(sed -n 's/^\[second half\] KL(base || this): mean \([0-9.]*\).*/\1/p' "$f")
  ta=$(sed -n 's/^\[all positions\] same top-1 as base (top-1 agreement): \([0-9.]*\) %.*/\1 %/p' "$f")
  ts=$(sed -n 's/^\[second half\] same top-1 as base (top-1 agreement): \([0-9.]*\) %.*/\1 %/p' "$f")
  printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n" "$name" "$size" "$bpw" "$pa" "$ps" "${ka:-0}" "${ks:-0}" \
    "${ta:-100 %}" "${ts:-100 %}"
done
