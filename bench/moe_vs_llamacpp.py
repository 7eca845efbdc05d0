#!/usr/bin/env python3
"""MoE speed: tokamak vs llama.cpp on the same synthetic MoE GGUFs.

The F16 file comes from `tokamak synth --like olmoe-1b-7b --type f16`; each
quantized type is made from it by llama.cpp's own quantizer (llama-quantize
when given, else llama-cpp-python's llama_model_quantize), so both engines
read files written by llama.cpp.  Per type, R rounds alternate the engines:

  tokamak   `tokamak bench -p P -n N -b B -r 1`: ppP, tgN and B sequences
            decoded at once (each prefilled with 8 tokens, then N steps of B
            tokens: aggregate tokens/s)
  llama.cpp through llama-cpp-python's low-level API (its own -march=native
            build): ppP as one llama_decode of P tokens, tgN as N one-token
            decodes, and the same B-sequence protocol (one llama_decode of B
            tokens, one per sequence, per step); with --llama-bin also
            llama-bench -p P -n N -r 1 of that build

Medians over the rounds; prints a Markdown table with the commands and the
load average (the machine may be shared: say so when quoting).

    .venv/bin/python bench/moe_vs_llamacpp.py --f16 olmoe-f16.gguf --types q4_0,q4_k_m \\
        [--llama-bin DIR] [-p 128] [-n 32] [-b 16] [-r 3] [-t 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemma_vs_llamacpp import ROOT, lcg_tokens, load  # noqa: E402

FTYPES = {"q4_0": 2, "q8_0": 7, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}  # llama_ftype


def quantize(a, f16, qtype, out):
    if out.exists():
        return
    tmp = out.with_suffix(".tmp")
    if a.llama_bin:
        subprocess.run([str(Path(a.llama_bin) / "llama-quantize"), str(f16), str(tmp), qtype.upper(), str(a.t)],
                       check=True, stdout=subprocess.DEVNULL)
    else:
        import llama_cpp

        p = llama_cpp.llama_model_quantize_default_params()
        p.ftype = FTYPES[qtype]
        p.nthread = a.t
        if llama_cpp.llama_model_quantize(str(f16).encode(), str(tmp).encode(), p) != 0:
            sys.exit(f"llama_model_quantize {qtype} failed")
    tmp.rename(out)


def run_tokamak(a, model):
    cmd = [a.tokamak, "bench", "-m", str(model), "-p", str(a.p), "-n", str(a.n), "-b", str(a.b), "-r", "1",
           "-t", str(a.t), "--json", "--no-bandwidth"]
    j = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    return j["pp"]["median"], j["tg"]["median"], j["batched"]["median"]


def run_llama_bench(a, model):
    cmd = [str(Path(a.llama_bin) / "llama-bench"), "-m", str(model), "-p", str(a.p), "-n", str(a.n), "-r", "1",
           "-t", str(a.t), "-o", "json"]
    rows = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] == a.p and r["n_gen"] == 0)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] == a.n and r["n_prompt"] == 0)
    return pp, tg


def llama_worker(a):
    """Child process: ppP, tgN and B sequences at once with llama.cpp; prints one JSON line."""
    import llama_cpp as L

    L.llama_backend_init()
    model = L.llama_model_load_from_file(a.model.encode(), L.llama_model_default_params())
    if not model:
        sys.exit(f"llama.cpp cannot load {a.model}")
    cp = L.llama_context_default_params()
    per_seq = max(8 + a.n, a.p, a.n) + 8
    cp.n_ctx = a.b * per_seq
    cp.n_batch = cp.n_ubatch = max(a.b * 8, a.p, 64)
    cp.n_seq_max = a.b
    cp.n_threads = cp.n_threads_batch = a.t
    ctx = L.llama_init_from_model(model, cp)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    toks = lcg_tokens(max(a.p, a.b + 8 + a.n * 7 + a.b), n_vocab)
    batch = L.llama_batch_init(cp.n_batch, 0, a.b)

    def decode(items, last_only=False):
        for i, (tok, pos, seq) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, int(not last_only or i == len(items) - 1)
        batch.n_tokens = len(items)
        if L.llama_decode(ctx, batch) != 0:
            sys.exit("llama_decode failed")

    def clear():
        L.llama_memory_clear(L.llama_get_memory(ctx), True)

    decode([(t, i, 0) for i, t in enumerate(toks[:8])])  # warm-up
    clear()
    t0 = time.perf_counter()
    decode([(t, i, 0) for i, t in enumerate(toks[: a.p])], last_only=True)
    pp = a.p / (time.perf_counter() - t0)
    clear()
    t0 = time.perf_counter()
    for i in range(a.n):
        decode([(toks[i], i, 0)])
    tg = a.n / (time.perf_counter() - t0)
    clear()
    decode([(toks[s + k], k, s) for s in range(a.b) for k in range(8)])
    t0 = time.perf_counter()
    for i in range(a.n):
        decode([(toks[(s + i * 7) % len(toks)], 8 + i, s) for s in range(a.b)])
    bat = a.b * a.n / (time.perf_counter() - t0)
    print(json.dumps({"pp": pp, "tg": tg, "batched": bat, "version": L.__version__}))


def run_llama(a, model):
    cmd = [sys.executable, __file__, "--llama-worker", "--model", str(model), "-p", str(a.p), "-n", str(a.n),
           "-b", str(a.b), "-t", str(a.t)]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--f16", help="F16 GGUF from tokamak synth")
    ap.add_argument("--types", default="q4_0,q4_k_m")
    ap.add_argument("--llama-bin", help="directory with llama-quantize and llama-bench (else llama-cpp-python "
                    "quantizes, and no llama-bench row)")
    ap.add_argument("--tokamak", default=os.environ.get("TOKAMAK_BIN", str(ROOT / "build" / "tokamak")))
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-b", type=int, default=16)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--llama-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.llama_worker:
        return llama_worker(a)
    if not a.f16 or not Path(a.f16).exists():
        sys.exit("--f16 GGUF not found (tokamak synth --like olmoe-1b-7b --type f16 -o FILE)")
    f16 = Path(a.f16)
    loads, table, version = [load()], [], "?"
    for qtype in a.types.split(","):
        model = f16.with_name(f16.stem.replace("-f16", "") + f"-{qtype}.gguf")
        quantize(a, f16, qtype, model)
        tk, ll, lb = [], [], []
        for rnd in range(a.r):  # alternate which engine goes first
            order = [0, 1] if rnd % 2 == 0 else [1, 0]
            for who in order:
                if who == 0:
                    tk.append(run_tokamak(a, model))
                else:
                    res = run_llama(a, model)
                    ll.append((res["pp"], res["tg"], res["batched"]))
                    version = res["version"]
                    if a.llama_bin:
                        lb.append(run_llama_bench(a, model))
                loads.append(load())
        med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
        table.append((qtype, [("tokamak", [med(tk, i) for i in range(3)]),
                              (f"llama.cpp {version}", [med(ll, i) for i in range(3)])]
                      + ([("llama-bench", [med(lb, 0), med(lb, 1), None])] if lb else [])))
    print(f"models: {f16.parent}/*-{{{a.types}}}.gguf (quantized by llama.cpp from {f16.name})")
    print(f"threads {a.t}; pp{a.p}, tg{a.n}, {a.b} sequences x {a.n} steps; median of {a.r} alternating rounds\n")
    print(f"| type | engine | pp{a.p} t/s | tg{a.n} t/s | {a.b}-seq decode t/s |")
    print("|---|---|---:|---:|---:|")
    for qtype, rows in table:
        t = rows[0][1]
        for name, v in rows:
            print(f"| {qtype} | {name} | {v[0]:.1f} | {v[1]:.2f} | " + ("-" if v[2] is None else f"{v[2]:.1f}") + " |")
        for name, v in rows[1:]:
            print(f"| {qtype} | tokamak / {name} | {t[0] / v[0]:.2f}x | {t[1] / v[1]:.2f}x | "
                  + ("-" if v[2] is None else f"{t[2] / v[2]:.2f}x") + " |")
    print(f"\n1-minute load average during the runs: {', '.join(f'{x:.2f}' for x in loads)} ({os.cpu_count()} CPUs)")
    print("commands:")
    print(f"  {a.tokamak} bench -m MODEL -p {a.p} -n {a.n} -b {a.b} -r 1 -t {a.t} --json --no-bandwidth")
    print(f"  llama-cpp-python {version}: llama_decode of {a.p} tokens; {a.n} x 1 token; {a.b} sequences "
          f"(n_seq_max={a.b}) x {a.n} steps, after 8 tokens each")
    if a.llama_bin:
        print(f"  {a.llama_bin}/llama-bench -m MODEL -p {a.p} -n {a.n} -r 1 -t {a.t} -o json")


if __name__ == "__main__":
    main()
