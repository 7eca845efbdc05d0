#!/bin/bash
# tokamak against llama.cpp side by side at one ISA level, same files, same threads (docs/benchmarks.md).
# usage: tools/bench_vs_llamacpp.sh [LLAMA_CPP_SRC_DIR]   (or LLAMA_CPP_DIR=...)
#   env: TOKAMAK_BIN (build/tokamak), ISA (avx2), THREADS (2), ROUNDS (3), TYPES ("q4_0 q8_0 q4_k_m"),
#        LIKE (tinyllama-1.1b), WORK (/tmp/tk-vs-llamacpp), TESTS ("pp128 pp512 tg32"), BUILD_ONLY=1
# Builds llama-bench and llama-quantize from the given llama.cpp source for the same ISA level
# (only avx2 is wired: AVX2+FMA+F16C, no AVX-512/AMX) into $WORK/llama-build, makes a model of the
# shape --like as F16 with `tokamak synth`, quantizes it with llama.cpp's own quantizer, then runs
# `TK_ISA=$ISA tokamak bench` and `llama-bench` alternately, ROUNDS times per file and test, and
# prints the median tokens/s of each and their ratio. Nothing of llama.cpp goes into this repo.
set -euo pipefail
SRC=${1:-${LLAMA_CPP_DIR:-}}
if [ -z "$SRC" ] || [ ! -f "$SRC/CMakeLists.txt" ]; then
  echo "usage: $0 LLAMA_CPP_SRC_DIR (a llama.cpp checkout)" >&2; exit 2
fi
TK=${TOKAMAK_BIN:-$(dirname "$0")/../build/tokamak}
ISA=${ISA:-avx2}; T=${THREADS:-2}; R=${ROUNDS:-3}
TYPES=${TYPES:-"q4_0 q8_0 q4_k_m"}; LIKE=${LIKE:-tinyllama-1.1b}; TESTS=${TESTS:-"pp128 pp512 tg32"}
WORK=${WORK:-/tmp/tk-vs-llamacpp}; LB=$WORK/llama-build
mkdir -p "$WORK"

case $ISA in
  avx2) GG="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
            -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF
            -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" ;;
  *) echo "ISA=$ISA: only avx2 is wired in this script" >&2; exit 2 ;;
esac

if [ ! -x "$LB/bin/llama-bench" ] || [ ! -x "$LB/bin/llama-quantize" ]; then
  # shellcheck disable=SC2086
  cmake -S "$SRC" -B "$LB" -DCMAKE_BUILD_TYPE=Release $GG -DGGML_OPENMP=ON -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DBUILD_SHARED_LIBS=OFF >"$WORK/llama-cmake.log" 2>&1 || { tail "$WORK/llama-cmake.log" >&2; exit 1; }
  nice cmake --build "$LB" -j"${JOBS:-2}" --target llama-bench llama-quantize >"$WORK/llama-build.log" 2>&1 ||
    { tail -30 "$WORK/llama-build.log" >&2; exit 1; }
fi
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0

# F16 model of the shape, then llama.cpp's own quantizer for each type
F16=$WORK/$LIKE-f16.gguf
[ -s "$F16" ] || "$TK" synth --like "$LIKE" --type f16 -o "$F16" >/dev/null 2>&1
for t in $TYPES; do
  f=$WORK/$LIKE-$t.gguf
  [ -s "$f" ] || nice "$LB/bin/llama-quantize" "$F16" "$f" "$(echo "$t" | tr '[:lower:]' '[:upper:]')" >"$WORK/quantize-$t.log" 2>&1 ||
    { tail "$WORK/quantize-$t.log" >&2; exit 1; }
done

# One round: each tool once per file and test, alternating; figures appended to $RES as
# "type test tool tokens/s".
RES=$WORK/results.txt; : >"$RES"
tk_run() { # type pp tg -> the pp and tg medians of one tokamak bench
  TK_ISA=$ISA "$TK" bench -m "$WORK/$LIKE-$1.gguf" -p "$2" -n "$3" -r 1 -t "$T" --no-bandwidth --json 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); [print('$1', k + str(d[k]['n']), 'tokamak', d[k]['median']) for k in ('pp','tg') if k in d and d[k]['n']]"
}
ll_run() { # type test (ppN or tgN)
  local p=0 n=0; case $2 in pp*) p=${2#pp} ;; tg*) n=${2#tg} ;; esac
  "$LB/bin/llama-bench" -m "$WORK/$LIKE-$1.gguf" -p "$p" -n "$n" -r 1 -t "$T" -o jsonl 2>/dev/null |
    python3 -c "import json,sys; [print('$1', '$2', 'llama.cpp', d['avg_ts']) for d in map(json.loads, sys.stdin) if d['n_prompt'] + d['n_gen'] > 0]"
}
for r in $(seq "$R"); do
  for t in $TYPES; do
    for test in $TESTS; do
      case $test in pp*) args="${test#pp} 0" ;; tg*) args="0 ${test#tg}" ;; esac
      # shellcheck disable=SC2086
      if [ $((r % 2)) = 1 ]; then tk_run "$t" $args >>"$RES"; ll_run "$t" "$test" >>"$RES"
      else ll_run "$t" "$test" >>"$RES"; tk_run "$t" $args >>"$RES"; fi
    done
  done
  echo "round $r of $R done" >&2
done

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); tokamak TK_ISA=$ISA, llama.cpp built for $ISA; $T threads; $R rounds; load: $(uptime | sed 's/.*load average: //')"
python3 - "$RES" "$TYPES" "$TESTS" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
print(f"| type | test | tokamak t/s | llama.cpp t/s | ratio |\n|---|---|---|---|---|")
for t in sys.argv[2].split():
    for test in sys.argv[3].split():
        v = {tool: [float(x) for ty, te, to, x in rows if ty == t and te == test and to == tool] for tool in ('tokamak', 'llama.cpp')}
        if not v['tokamak'] or not v['llama.cpp']:
            print(f"| {t} | {test} | missing | | |"); continue
        a, b = statistics.median(v['tokamak']), statistics.median(v['llama.cpp'])
        print(f"| {t} | {test} | {a:.1f} | {b:.1f} | {a / b:.2f}x |")
PY
