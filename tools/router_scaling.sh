#!/bin/bash
# Throughput of replicas behind `tokamak router` on the same total cores (issue 19, docs/serving.md):
# one `tokamak serve -t 2` against `tokamak router` over two `tokamak serve -t 1`, alternated ROUNDS
# times, each driven by the same `tokamak loadtest` (no shared prefix, so routing is by load alone).
# usage: tools/router_scaling.sh TOKAMAK_BIN MODEL [ROUNDS] [REQUESTS]   (ports 18301, 18310-18312)
#   env: CONCURRENCY (16), PROMPT_LEN (16), OUTPUT_LEN (32), MAX_SEQS (8: each replica's --max-seqs;
#        the single server gets twice as many, the same slots in all)
set -euo pipefail
B=$1; M=$2; R=${3:-3}; N=${4:-64}; S=${MAX_SEQS:-8}
LT=(--prompt-len "${PROMPT_LEN:-16}" --output-len "${OUTPUT_LEN:-32}" --requests "$N" --concurrency "${CONCURRENCY:-16}" --json)
pids=()
cleanup() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
start() { "$B" serve -m "$M" --port "$1" -t "$2" --max-seqs "$3" >/dev/null 2>&1 & pids+=($!); }
wait_up() { for _ in $(seq 300); do curl -sf "localhost:$1/health" >/dev/null && return; sleep 0.1; done; echo "port $1 did not come up" >&2; exit 1; }
stop_all() { kill "${pids[@]}" 2>/dev/null || true; wait "${pids[@]}" 2>/dev/null || true; pids=(); }
tput() { python3 -c "import json,sys; d=json.load(sys.stdin); assert d['failed'] == 0, d; print(f\"{d['output_throughput']:.2f}\")"; }
single=(); routed=()
for r in $(seq "$R"); do
  start 18301 2 $((2 * S)); wait_up 18301
  single+=("$("$B" loadtest --url http://127.0.0.1:18301 "${LT[@]}" | tput)"); stop_all
  start 18311 1 "$S"; start 18312 1 "$S"; wait_up 18311; wait_up 18312
  "$B" router -m "$M" --port 18310 --backend http://127.0.0.1:18311 --backend http://127.0.0.1:18312 >/dev/null 2>&1 & pids+=($!)
  wait_up 18310; sleep 1.5 # the router's first load scrape
  routed+=("$("$B" loadtest --url http://127.0.0.1:18310 "${LT[@]}" | tput)"); stop_all
  echo "round $r: one serve -t 2 ${single[-1]} tok/s, router over 2 x serve -t 1 ${routed[-1]} tok/s (load $(cut -d' ' -f1 /proc/loadavg))"
done
python3 - "${single[*]}" "${routed[*]}" <<'EOF'
import statistics, sys
s = statistics.median(map(float, sys.argv[1].split())); r = statistics.median(map(float, sys.argv[2].split()))
print(f"medians: one serve -t 2 {s:.2f} tok/s, router over 2 x serve -t 1 {r:.2f} tok/s: {r / s:.2f}x")
EOF
