#!/usr/bin/env bash
# Runs one libFuzzer campaign: tools/fuzz.sh TARGET SECONDS
#   TARGET: gguf hf tokenizer_json spm_model llama2c api http jinja grammar grammar_mask json_schema
#   (tests/fuzz/fuzz_TARGET.c)
#
# Builds the fuzz build (clang, -DTK_FUZZ=ON) in build-fuzz/ if needed, seeds
# build-fuzz/fuzz/TARGET/seed/ from ../shared plus tests/fuzz/seeds/TARGET and
# tests/fuzz/regressions/TARGET, and fuzzes into build-fuzz/fuzz/TARGET/corpus/
# (kept between runs).  Crash, timeout and out-of-memory inputs are kept in
# build-fuzz/fuzz/TARGET/artifacts/; the log is build-fuzz/fuzz/TARGET/log.
# Replay a kept input with build-fuzz/fuzz_TARGET FILE; once fixed, copy it to
# tests/fuzz/regressions/TARGET/ (the fuzz_TARGET ctest replays it).
#
# Environment: TK_FUZZ_BUILD (build directory), TK_SHARED_DIR (shared
# assets), TK_FUZZ_MAX_LEN (longest input, default 65536: longer seeds are
# cut), TK_FUZZ_ARGS (more libFuzzer flags; "-jobs=2 -workers=2" runs two
# long-lived fuzzers over one corpus, each logging to fuzz-N.log, which log
# collects once the worker ends, and taking up the other's new inputs as it
# goes; -runs and -max_total_time then count per worker), TK_FUZZ_SKIP
# (names of seed files to leave out, e.g. a slow regression input whose
# mutants would be slow too: the replay test still runs it).
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: tools/fuzz.sh TARGET SECONDS" >&2
    exit 2
fi
target=$1
seconds=$2
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TK_FUZZ_BUILD:-$root/build-fuzz}
shared=${TK_SHARED_DIR:-$root/../shared}
if [ ! -f "$root/tests/fuzz/fuzz_$target.c" ]; then
    echo "fuzz.sh: no target '$target' (tests/fuzz/fuzz_$target.c)" >&2
    exit 2
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
    CC=clang cmake -S "$root" -B "$build" -DTK_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug -DTK_SHARED_DIR="$shared" >/dev/null
fi
nice -n 10 cmake --build "$build" -j2 --target "fuzz_$target" >/dev/null

work=$build/fuzz/$target
seed=$work/seed
mkdir -p "$seed" "$work/corpus" "$work/artifacts"
sep=$'\n--8<--\n'
# concatenates the given files with the separator between them
join_files() {
    local first=1 f
    for f in "$@"; do
        [ $first = 1 ] || printf '%s' "$sep"
        first=0
        cat "$f"
    done
}
cp "$root/tests/fuzz/seeds/$target"/* "$seed/"
if [ -d "$root/tests/fuzz/regressions/$target" ]; then cp "$root/tests/fuzz/regressions/$target"/* "$seed/"; fi
for skipped in ${TK_FUZZ_SKIP:-}; do rm -f "$seed/$skipped"; done
tiny=$root/tests/fuzz/seeds
case $target in
gguf)
    for f in "$shared"/gguf-fixtures/*.gguf "$shared"/models/*.gguf "$shared"/tokenizer-tests/*.gguf; do
        cp "$f" "$seed/shared-$(basename "$f")"
    done ;;
hf)
    for d in "$shared"/models/code-*/; do
        n=$(basename "$d")
        head -c 32768 "$d/model.safetensors" > "$work/st.tmp"
        if [ -f "$d/generation_config.json" ]; then
            join_files "$d/config.json" "$work/st.tmp" "$d/generation_config.json" > "$seed/shared-$n"
        else
            join_files "$d/config.json" "$work/st.tmp" > "$seed/shared-$n"
        fi
        rm -f "$work/st.tmp"
    done ;;
tokenizer_json)
    # a small tokenizer.json with the real tokenizer_config.json files (the
    # real tokenizer.json files are megabytes: far past the input size)
    python3 - "$tiny/tokenizer_json" "$seed" "$shared" <<'PY'
import sys, glob, os
tiny, seed, shared = sys.argv[1:4]
sep = b"\n--8<--\n"
for t in sorted(os.listdir(tiny)):
    tok = open(os.path.join(tiny, t), "rb").read().split(sep)[0]
    for c in sorted(glob.glob(shared + "/tokenizers/*/tokenizer_config.json") + glob.glob(shared + "/models/*/tokenizer_config.json")):
        name = "shared-%s-%s" % (t, c[len(shared):].strip("/").replace("/", "_"))
        open(os.path.join(seed, name), "wb").write(tok + sep + open(c, "rb").read())
PY
    ;;
spm_model)
    for f in "$shared"/tokenizers/*/tokenizer.model "$shared"/models/*/tokenizer.model; do
        [ -f "$f" ] && cp "$f" "$seed/shared-$(echo "${f#$shared/}" | tr / _)"
    done ;;
llama2c)
    join_files "$shared/models/aidreams260K.bin" "$shared/models/aidreams260K.tok512.bin" > "$seed/shared-aidreams"
    join_files "$shared/models/stories260K.bin" "$shared/tokenizers/llama2/tokenizer.bin" > "$seed/shared-stories"
    head -c 3000 "$tiny/llama2c/tiny-unshared" > "$work/ck.tmp"
    join_files "$work/ck.tmp" "$shared/models/aidreams260K.tok512.bin" > "$seed/shared-tok512"
    rm -f "$work/ck.tmp" ;;
jinja)
    python3 - "$seed" "$shared" <<'PY'
import sys, glob, json, os
seed, shared = sys.argv[1:3]
for c in sorted(glob.glob(shared + "/tokenizers/*/tokenizer_config.json") + glob.glob(shared + "/models/*/tokenizer_config.json")):
    t = json.load(open(c)).get("chat_template")
    if isinstance(t, list):
        t = "\n".join(x.get("template", "") for x in t)
    if isinstance(t, str):
        open(os.path.join(seed, "shared-" + c[len(shared):].strip("/").replace("/", "_")), "w").write(t)
PY
    ;;
esac

echo "fuzz.sh: $target for ${seconds}s (log: $work/log)"
cd "$work"
set +e
nice -n 10 "$build/fuzz_$target" corpus seed -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len="${TK_FUZZ_MAX_LEN:-65536}" -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
    ${TK_FUZZ_ARGS:-} > log 2>&1
rc=$?
set -e
# (with -jobs=N, once per worker, each after its "Job N exited" line)
grep -E "^=+ Job|^#[0-9]+.*(DONE|INITED)|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb" log || true
grep -E "^#[0-9]+: cov" log | tail -1 || true # fork mode (-fork=N in TK_FUZZ_ARGS): the workers' executions together
ls "$work/artifacts" | sed 's/^/fuzz.sh: kept artifact: /'
exit $rc
