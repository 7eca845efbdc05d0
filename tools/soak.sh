#!/usr/bin/env bash
# Soak test of `tokamak serve` (docs/serving.md, "Soak test"):
#
#   tools/soak.sh [--clients 64] [--minutes 10] [--model PATH] [--asan] [--seed N] [--threads N]
#
# Starts the server on 127.0.0.1 (a free port), runs tools/soak.py against it
# (N clients looping over a random mix of good, disruptive and malformed
# requests until the time is up, then the idle /metrics, counter and memory
# checks), then stops it with SIGTERM and checks that it exits 0 within 30 s
# without a sanitizer report.  The server is killed on any exit (trap).
# Binary: build/tokamak, build-asan/tokamak with --asan, or $TOKAMAK_BIN.
# Exit status 0 when every check passed.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
clients=64 minutes=10 asan=0 seed=1 threads=2
model=${TK_SHARED_DIR:-$(dirname "$repo")/shared}/models/code-target
while [ $# -gt 0 ]; do
  case $1 in
    --clients) clients=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --asan) asan=1; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ "$asan" = 1 ]; then bin=${TOKAMAK_BIN:-$repo/build-asan/tokamak}; else bin=${TOKAMAK_BIN:-$repo/build/tokamak}; fi
[ -x "$bin" ] || { echo "soak.sh: no tokamak binary at $bin (build it first)" >&2; exit 2; }
[ -e "$model" ] || { echo "soak.sh: model $model not found" >&2; exit 2; }
py=$repo/.venv/bin/python
[ -x "$py" ] || py=python3

work=$(mktemp -d /tmp/tk-soak.XXXXXX)
pid= cpid=
cleanup() {
  if [ -n "$cpid" ] && kill -0 "$cpid" 2>/dev/null; then kill -TERM "$cpid" 2>/dev/null; fi
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A small queue (48 requests running or waiting) and KV pool (4 MiB: 28 blocks of 64
# tokens for code-target) so that 64 clients meet 429s and preemption; 16
# sequences per step.  ASan: check leaks at exit.
: >"$work/server.out"   # exists before the first poll below
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
"$bin" serve -m "$model" --host 127.0.0.1 --port 0 -t "$threads" --max-seqs 16 --max-queue 32 --kv-memory 4M \
  >"$work/server.out" 2>"$work/server.err" &
pid=$!
port=
for _ in $(seq 600); do   # 60 s to load the model
  port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$work/server.out")
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "soak.sh: the server did not start; its stderr ($work/server.err):" >&2
  tail -20 "$work/server.err" >&2
  exit 1
fi
echo "soak.sh: $bin serve -m $model on port $port (pid $pid); logs in $work"

name=$(basename "${model%/}"); name=${name%.gguf}; name=${name%.bin}
asan_flag=; [ "$asan" = 1 ] && asan_flag=--asan
"$py" "$repo/tools/soak.py" --port "$port" --pid "$pid" --clients "$clients" --minutes "$minutes" \
  --model-name "$name" --seed "$seed" $asan_flag &
cpid=$!   # in the background, so that a signal to this script runs the traps at once
wait "$cpid"
status=$?
cpid=

# Shutdown: SIGTERM, a clean exit within 30 s, nothing from the sanitizers.
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid"
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAIL  clean shutdown: still running 30 s after SIGTERM"; status=1
  else
    wait "$pid"; rc=$?
    if [ "$rc" = 0 ]; then echo "PASS  clean shutdown: exit status 0"; else echo "FAIL  clean shutdown: exit status $rc"; status=1; fi
  fi
else
  echo "FAIL  server alive at the end: it is gone"; status=1
fi
pid=
if grep -qE 'AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:' "$work/server.err"; then
  echo "FAIL  no sanitizer report: see $work/server.err"; grep -m5 -E 'ERROR|runtime error' "$work/server.err"; status=1
elif [ "$asan" = 1 ]; then
  echo "PASS  no sanitizer report (ASan + UBSan + LeakSanitizer at exit)"
fi
if [ "$status" = 0 ]; then rm -rf "$work"; echo "soak.sh: all checks passed"; else echo "soak.sh: FAILED (logs in $work)"; fi
exit "$status"
