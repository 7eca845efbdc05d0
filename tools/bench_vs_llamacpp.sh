#!/bin/bash
# tokamak against llama.cpp side by side at one ISA level, same files, same threads (docs/benchmarks.md).
# usage: tools/bench_vs_llamacpp.sh [LLAMA_CPP_SRC_DIR]   (or LLAMA_CPP_DIR=...)
#   env: TOKAMAK_BIN (build/tokamak), ISA (avx2, avxvnni or avx512), THREADS (2), ROUNDS (3), TYPES ("q4_0 q8_0 q4_k_m"),
#        LIKE (tinyllama-1.1b), WORK (/tmp/tk-vs-llamacpp), TESTS ("pp128 pp512 tg32"), BUILD_ONLY=1,
#        GEMMA (the Gemma 3 270M Q4_K_M GGUF: .cache/models/gemma-3-270m-q4_k_m.gguf from tools/oracles.sh,
#        else ../shared/models/), SERVE_REQUESTS (64), SERVE_CTX (256 tokens per sequence), PORT (18480, and
#        PORT+1 for llama-server)
# Builds llama-bench and llama-quantize (and, when TESTS needs them, llama-batched-bench and
# llama-server, without its web UI) from the given llama.cpp source for the same ISA level (avx2:
# AVX2+FMA+F16C, no AVX-VNNI/AVX-512/AMX, into $WORK/llama-build, tokamak with TK_AVXVNNI=0;
# avxvnni: the same plus AVX-VNNI, into $WORK/llama-build-avxvnni, tokamak at TK_ISA=avx2 with its
# AVX-VNNI kernels; avx512: AVX-512 with VNNI, VBMI and BF16, no AMX, into
# $WORK/llama-build-avx512), makes a model of the shape
# --like as F16 with `tokamak synth`, quantizes it with llama.cpp's own quantizer, then runs
# `TK_ISA=$ISA tokamak` (avxvnni: avx2) and llama.cpp alternately, ROUNDS times per file and test, and prints the
# median of each and their ratio. Nothing of llama.cpp goes into this repo.
#
# TESTS (each optional; every test runs on every file of TYPES, except gemma):
#   ppN      prefill of N tokens from an empty cache: `tokamak bench -p N -n 0` vs `llama-bench -p N`
#            (both in micro-batches of 512 tokens, F16 KV; pp4096 is the 4K-prompt prefill)
#   tgN      N tokens decoded one at a time from an empty cache: `tokamak bench -n N` vs
#            `llama-bench -n N`; tokamak's run also measures the read bandwidth and prints tgN as a
#            percentage of the roofline it implies (bandwidth / bytes of weights read per token)
#   b16      16 sequences decoding together, aggregate generated tokens/s: `tokamak bench -b 16 -n 32`
#            (16 sequences, each prefilled with 8 tokens untimed, then 32 steps of one token of each)
#            vs llama-batched-bench's S_TG (speed_tg) of `-npp 8 -ntg 32 -npl 16`: 16 separate 8-token
#            prompts (timed apart, as T_PP), then 32 steps of one token of each; speed_tg =
#            16 * 32 / the time of those steps, which is what tokamak's figure measures
#   ctxN     decode after N tokens of context, tokens/s: `tokamak bench -p 0 -n 16 --context N,...`
#            (every context prefilled, then 16 tokens of each decoded in turns; 1000 / the median
#            ms per token) vs `llama-batched-bench -npp N,... -ntg 16 -npl 1` (16 tokens after an
#            N-token prompt; speed_tg = 16 / their total time, i.e. the mean); F16 KV both,
#            llama.cpp's default flash attention (auto: on for the CPU). All ctxN of TESTS share one
#            run of each tool per round; the summary adds each context's rate as % of the smallest's
#   gemma    the ppN/tgN tests of TESTS (pp128 pp512 tg32 when there are none) on $GEMMA
#   serve16  `tokamak serve --max-seqs 16` vs `llama-server -np 16 -cb` (same file, threads and
#            SERVE_CTX tokens per sequence: llama-server's -c is shared by its 16 slots), each driven
#            by `tokamak loadtest --concurrency 16 --prompt-len 16 --output-len 32 --requests
#            SERVE_REQUESTS` (streaming /v1/completions, ignore_eos): output tokens/s and TTFT p50
#            (the TTFT row's ratio is tokamak / llama.cpp: lower is better there)
set -euo pipefail
SRC=${1:-${LLAMA_CPP_DIR:-}}
if [ -z "$SRC" ] || [ ! -f "$SRC/CMakeLists.txt" ]; then
  echo "usage: $0 LLAMA_CPP_SRC_DIR (a llama.cpp checkout)" >&2; exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TK=${TOKAMAK_BIN:-$ROOT/build/tokamak}
ISA=${ISA:-avx2}; T=${THREADS:-2}; R=${ROUNDS:-3}
TYPES=${TYPES:-"q4_0 q8_0 q4_k_m"}; LIKE=${LIKE:-tinyllama-1.1b}; TESTS=${TESTS:-"pp128 pp512 tg32"}
WORK=${WORK:-/tmp/tk-vs-llamacpp}
# one llama.cpp build per level (the avx2 one keeps its old directory name)
if [ "$ISA" = avx2 ]; then LB=$WORK/llama-build; else LB=$WORK/llama-build-$ISA; fi
SERVE_REQUESTS=${SERVE_REQUESTS:-64}; SERVE_CTX=${SERVE_CTX:-256}; PORT=${PORT:-18480}
mkdir -p "$WORK"

has_test() { case " $TESTS " in *" $1 "*) return 0 ;; esac; return 1; }
CTXS=""; PT=""
for test in $TESTS; do
  case $test in
    ctx[0-9]*) CTXS="$CTXS ${test#ctx}" ;;
    pp[0-9]* | tg[0-9]*) PT="$PT $test" ;;
    b16 | gemma | serve16) ;;
    *) echo "unknown test '$test' (ppN tgN b16 ctxN gemma serve16)" >&2; exit 2 ;;
  esac
done
CTXS=$(echo "$CTXS" | tr ' ' '\n' | sed '/^$/d' | sort -n -u | tr '\n' ' ')

GEMMA=${GEMMA:-$ROOT/.cache/models/gemma-3-270m-q4_k_m.gguf}
if has_test gemma && [ ! -s "$GEMMA" ]; then
  [ -s "$ROOT/../shared/models/gemma-3-270m-q4_k_m.gguf" ] && GEMMA=$ROOT/../shared/models/gemma-3-270m-q4_k_m.gguf
  [ -s "$GEMMA" ] || { echo "gemma: no Gemma 3 270M GGUF at $GEMMA (tools/oracles.sh --model-only, or GEMMA=...)" >&2; exit 2; }
fi

case $ISA in
  avx2) GG="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
            -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF
            -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" ;;
  avx512) GG="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
            -DGGML_AVX_VNNI=OFF -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON
            -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    grep -q avx512_vnni /proc/cpuinfo && grep -q avx512_bf16 /proc/cpuinfo && grep -q avx512vbmi /proc/cpuinfo ||
      { echo "ISA=avx512: this CPU lacks AVX-512 VNNI/BF16/VBMI" >&2; exit 2; } ;;
  avxvnni) GG="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
            -DGGML_AVX_VNNI=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF
            -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    grep -q avx_vnni /proc/cpuinfo || { echo "ISA=avxvnni: this CPU lacks AVX-VNNI" >&2; exit 2; } ;;
  *) echo "ISA=$ISA: only avx2, avxvnni and avx512 are wired in this script" >&2; exit 2 ;;
esac
# tokamak's level: AVX-VNNI is a form of its AVX2 kernels (same bits), on unless TK_AVXVNNI=0;
# the avx2 rows leave it out, as the llama.cpp build beside them does
TKISA=$ISA
case $ISA in
  avx2) export TK_AVXVNNI=0 ;;
  avxvnni) TKISA=avx2; export TK_AVXVNNI=1 ;;
esac

targets="llama-bench llama-quantize"
{ has_test b16 || [ -n "$CTXS" ]; } && targets="$targets llama-batched-bench"
has_test serve16 && targets="$targets llama-server"
missing=0
for tgt in $targets; do [ -x "$LB/bin/$tgt" ] || missing=1; done
if [ $missing = 1 ]; then
  # The server is configured without its web UI (no npm, no download): the API alone.
  # shellcheck disable=SC2086
  cmake -S "$SRC" -B "$LB" -DCMAKE_BUILD_TYPE=Release $GG -DGGML_OPENMP=ON -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DBUILD_SHARED_LIBS=OFF >"$WORK/llama-cmake.log" 2>&1 || { tail "$WORK/llama-cmake.log" >&2; exit 1; }
  # shellcheck disable=SC2086
  nice cmake --build "$LB" -j"${JOBS:-2}" --target $targets >"$WORK/llama-build.log" 2>&1 ||
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
# "label test tool value".
RES=$WORK/results.txt; : >"$RES"
model_of() { if [ "$1" = gemma ]; then echo "$GEMMA"; else echo "$WORK/$LIKE-$1.gguf"; fi; }
tk_run() { # label test (ppN or tgN); tgN also measures the bandwidth: its roofline percentage
  local p=0 n=0 bw=--no-bandwidth; case $2 in pp*) p=${2#pp} ;; tg*) n=${2#tg}; bw= ;; esac
  # shellcheck disable=SC2086
  TK_ISA=$TKISA "$TK" bench -m "$(model_of "$1")" -p "$p" -n "$n" -r 1 -t "$T" $bw --json 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); k='$2'[:2]
print('$1', '$2', 'tokamak', d[k]['median'])
if 'roofline_pct' in d: print('$1', '$2', 'roofline%', d['roofline_pct'])"
}
ll_run() { # label test (ppN or tgN)
  local p=0 n=0; case $2 in pp*) p=${2#pp} ;; tg*) n=${2#tg} ;; esac
  "$LB/bin/llama-bench" -m "$(model_of "$1")" -p "$p" -n "$n" -r 1 -t "$T" -o jsonl 2>/dev/null |
    python3 -c "import json,sys; [print('$1', '$2', 'llama.cpp', d['avg_ts']) for d in map(json.loads, sys.stdin) if d['n_prompt'] + d['n_gen'] > 0]"
}
# llama-batched-bench's JSONL lines (it prints them on stdout; the rest of its log is on stderr)
llb_jsonl() { "$LB/bin/llama-batched-bench" -t "$T" --output-format jsonl "$@" 2>/dev/null | grep '^{' || true; }
tk_b16() {
  TK_ISA=$TKISA "$TK" bench -m "$(model_of "$1")" -p 0 -n 32 -b 16 -r 1 -t "$T" --no-bandwidth --json 2>/dev/null |
    python3 -c "import json,sys; print('$1', 'b16', 'tokamak', json.load(sys.stdin)['batched']['median'])"
}
ll_b16() {
  llb_jsonl -m "$(model_of "$1")" -c 2048 -npp 8 -ntg 32 -npl 16 |
    python3 -c "import json,sys; [print('$1', 'b16', 'llama.cpp', d['speed_tg']) for d in map(json.loads, sys.stdin)]"
}
tk_ctx() {
  # shellcheck disable=SC2086
  TK_ISA=$TKISA "$TK" bench -m "$(model_of "$1")" -p 0 -n 16 -r 1 -t "$T" --kv-type f16 --no-bandwidth \
    --context "$(echo $CTXS | tr ' ' ',')" --json 2>/dev/null |
    python3 -c "import json,sys; [print('$1', 'ctx%d' % c['context'], 'tokamak', 1e3 / c['decode_ms_per_token']) for c in json.load(sys.stdin)['contexts']]"
}
ll_ctx() {
  local most; most=$(echo "$CTXS" | tr ' ' '\n' | sed '/^$/d' | tail -1)
  # shellcheck disable=SC2086
  llb_jsonl -m "$(model_of "$1")" -c $((most + 16)) -ctk f16 -ctv f16 -npp "$(echo $CTXS | tr ' ' ',')" -ntg 16 -npl 1 |
    python3 -c "import json,sys; [print('$1', 'ctx%d' % d['pp'], 'llama.cpp', d['speed_tg']) for d in map(json.loads, sys.stdin)]"
}
SERVER_PID=
stop_server() { if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=; fi; }
trap stop_server EXIT
serve_run() { # label tool: start the server, wait for /health, load it, stop it
  # each tool its own port: the other's last connections may still hold its port
  local log=$WORK/serve-$2.log port=$PORT
  if [ "$2" = tokamak ]; then
    TK_ISA=$TKISA "$TK" serve -m "$(model_of "$1")" -t "$T" --max-seqs 16 -c "$SERVE_CTX" --port "$port" >"$log" 2>&1 &
  else
    port=$((PORT + 1))
    "$LB/bin/llama-server" -m "$(model_of "$1")" -t "$T" -np 16 -cb -c $((16 * SERVE_CTX)) --port "$port" \
      --no-webui >"$log" 2>&1 &
  fi
  local url=http://127.0.0.1:$port
  SERVER_PID=$!
  local i=0
  until curl -sf "$url/health" >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -gt 600 ] || ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "serve16: $2 server did not come up (see $log)" >&2; stop_server; return 0
    fi
    sleep 0.5
  done
  "$TK" loadtest --url "$url" --concurrency 16 --prompt-len 16 --output-len 32 --requests "$SERVE_REQUESTS" \
    --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin)
if d['completed'] == d['requests']:
    print('$1', 'serve16', '$2', d['output_throughput']); print('$1', 'serve16-ttft-p50-ms', '$2', d['ttft_ms']['p50'])
else: print('serve16: $2: %d of %d requests failed: %s' % (d['failed'], d['requests'], d['first_error']), file=sys.stderr)" || true
  stop_server
}
# one test of one file, both tools, in the round's order
pair() { # round label test
  local first second
  if [ $(($1 % 2)) = 1 ]; then first=tk; second=ll; else first=ll; second=tk; fi
  case $3 in
    pp* | tg*) "${first}_run" "$2" "$3" >>"$RES"; "${second}_run" "$2" "$3" >>"$RES" ;;
    b16) "${first}_b16" "$2" >>"$RES"; "${second}_b16" "$2" >>"$RES" ;;
    ctx) "${first}_ctx" "$2" >>"$RES"; "${second}_ctx" "$2" >>"$RES" ;;
    serve16)
      if [ "$first" = tk ]; then serve_run "$2" tokamak >>"$RES"; serve_run "$2" llama.cpp >>"$RES"
      else serve_run "$2" llama.cpp >>"$RES"; serve_run "$2" tokamak >>"$RES"; fi ;;
  esac
}
for r in $(seq "$R"); do
  for t in $TYPES; do
    for test in $PT; do pair "$r" "$t" "$test"; done
    has_test b16 && pair "$r" "$t" b16
    [ -n "$CTXS" ] && pair "$r" "$t" ctx
    has_test serve16 && pair "$r" "$t" serve16
  done
  if has_test gemma; then for test in ${PT:-pp128 pp512 tg32}; do pair "$r" gemma "$test"; done; fi
  echo "round $r of $R done" >&2
done

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); tokamak TK_ISA=$TKISA${TK_AVXVNNI:+ TK_AVXVNNI=$TK_AVXVNNI}, llama.cpp built for $ISA; $T threads; $R rounds; load: $(uptime | sed 's/.*load average: //')"
tests="$PT"
has_test b16 && tests="$tests b16"
for c in $CTXS; do tests="$tests ctx$c"; done
has_test serve16 && tests="$tests serve16 serve16-ttft-p50-ms"
gemma_tests=; has_test gemma && gemma_tests=${PT:-pp128 pp512 tg32}
python3 - "$RES" "$TYPES" "$tests" "$gemma_tests" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
files = [(t, sys.argv[3].split()) for t in sys.argv[2].split()] + ([('gemma', sys.argv[4].split())] if sys.argv[4] else [])
def med(label, test, tool):
    v = [float(x) for la, te, to, x in rows if la == label and te == test and to == tool]
    return statistics.median(v) if v else None
print("| file | test | tokamak | llama.cpp | ratio | tokamak % of roofline |\n|---|---|---|---|---|---|")
for label, tests in files:
    for test in tests:
        a, b, roof = med(label, test, 'tokamak'), med(label, test, 'llama.cpp'), med(label, test, 'roofline%')
        unit = 'ms' if test.endswith('-ms') else 't/s'
        if a is None or b is None:
            print(f"| {label} | {test} | {'missing' if a is None else f'{a:.1f} {unit}'} | {'missing' if b is None else f'{b:.1f} {unit}'} | | |")
            continue
        print(f"| {label} | {test} | {a:.1f} {unit} | {b:.1f} {unit} | {a / b:.2f}x | {'' if roof is None else f'{roof:.0f} %'} |")
# each context's decode rate as a share of the smallest context's, per tool (medians)
for label, tests in files:
    ctxs = sorted(int(t[3:]) for t in tests if t.startswith('ctx'))
    for tool in ('tokamak', 'llama.cpp'):
        base = med(label, f'ctx{ctxs[0]}', tool) if len(ctxs) > 1 else None
        if base is None: continue
        parts = [f"{c}: {100 * v / base:.0f} %" for c in ctxs[1:] if (v := med(label, f'ctx{c}', tool)) is not None]
        print(f"{label} {tool}: decode rate vs context {ctxs[0]}: " + ", ".join(parts))
PY

