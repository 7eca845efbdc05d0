#!/bin/bash
# Cached-token share of `tokamak loadtest --shared-prefix --prefix-groups` against one serve,
# against `tokamak router` over 3 replicas, and against `--policy round-robin` over 3 (docs/serving.md).
# usage: tools/router_prefix_share.sh TOKAMAK_BIN MODEL [GROUPS] [REQUESTS]   (ports 18201, 18210-18213)
B=$1; M=$2; G=${3:-16}; N=${4:-96}
LT="--shared-prefix 80 --prefix-groups $G --prompt-len 12 --output-len 4 --requests $N --concurrency 4 --json"
pids=()
cleanup() { kill "${pids[@]}" $rp 2>/dev/null; }
trap cleanup EXIT
start() { $B serve -m $M --port $1 -t 1 --block-size 16 --max-seqs 8 >/dev/null 2>&1 & pids+=($!); }
wait_up() { for i in $(seq 100); do curl -sf localhost:$1/health >/dev/null && return; sleep 0.1; done; }
share() { python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"{d['total_cached_tokens']} of {d['total_input_tokens']} input tokens cached = {d['total_cached_tokens']/d['total_input_tokens']:.3f}, failed {d['failed']}\")"; }
hits() { for p in "$@"; do curl -s localhost:$p/metrics | awk '/^tokamak_prefix_cache_hits_total/{h=$2} /^tokamak_prefix_cache_queries_total/{q=$2} END{printf "%s/%s ", h, q}'; done; echo; }
start 18201; wait_up 18201
echo -n "single server: "; $B loadtest --url http://127.0.0.1:18201 $LT | share; echo -n "  replica hits/queries: "; hits 18201
kill ${pids[0]}; wait ${pids[0]} 2>/dev/null; pids=()
for pol in affinity round-robin; do
  for p in 18211 18212 18213; do start $p; done; for p in 18211 18212 18213; do wait_up $p; done
  $B router -m $M --port 18210 --policy $pol --backend http://127.0.0.1:18211 --backend http://127.0.0.1:18212 --backend http://127.0.0.1:18213 >/dev/null 2>&1 & rp=$!
  wait_up 18210; sleep 0.5
  echo -n "router $pol over 3: "; $B loadtest --url http://127.0.0.1:18210 $LT | share; echo -n "  replica hits/queries: "; hits 18211 18212 18213
  kill $rp; wait $rp 2>/dev/null; kill ${pids[@]}; wait ${pids[@]} 2>/dev/null; pids=()
done
