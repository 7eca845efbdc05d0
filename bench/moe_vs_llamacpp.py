#!/usr/bin/env python3
"""MoE speed: tokamak vs llama.cpp on the same synthetic MoE GGUFs.

The F16 file comes from `tokamak synth --like olmoe-1b-7b --type f16`; each
quantized type is made from it by llama.cpp's own quantizer (llama-quantize
when given, else llama-cpp-python's llama_model_quantize), so both engines
read files written by llama.cpp.  Per type, R rounds alternate the engines:

  tokamak   `tokamak bench -p P -n N -b B -r 1`: ppP, tgN and B sequences
            decoded at once (each prefilled with 8 tokens, then N steps of B
            tokens: aggregate tokens/s)
  llama.cpp llama-bench -p P -n N -r 1 (ppP, tgN), and the same B-sequence
            protocol through llama-cpp-python's low-level API (llama_decode
            on one batch of B tokens, one per sequence, per step)

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


def batched_worker(a):
    """Child process: B sequences decoded at once with llama.cpp; prints one JSON line."""
    import llama_cpp as L

    L.llama_backend_init()
    model = L.llama_model_load_from_file(a.model.encode(), L.llama_model_default_params())
    if not model:
        sys.exit(f"llama.cpp cannot load {a.model}")
    cp = L.llama_context_default_params()
    per_seq = 8 + a.n + 8
    cp.n_ctx = a.b * per_seq
    cp.n_batch = cp.n_ubatch = max(a.b * 8, 64)
    cp.n_seq_max = a.b
    cp.n_threads = cp.n_threads_batch = a.t
    ctx = L.llama_init_from_model(model, cp)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    toks = lcg_tokens(a.b + 8 + a.n * 7 + a.b, n_vocab)
    batch = L.llama_batch_init(cp.n_batch, 0, a.b)

    def decode(items):
        for i, (tok, pos, seq) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, 1
        batch.n_tokens = len(items)
        if L.llama_decode(ctx, batch) != 0:
            sys.exit("llama_decode failed")

    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    decode([(toks[s + k], k, s) for s in range(a.b) for k in range(8)])
    t0 = time.perf_counter()
    for i in range(a.n):
        decode([(toks[(s + i * 7) % len(toks)], 8 + i, s) for s in range(a.b)])
    print(json.dumps({"batched": a.b * a.n / (time.perf_counter() - t0), "version": L.__version__}))


def run_llama_batched(a, model):
    cmd = [sys.executable, __file__, "--batched-worker", "--model", str(model), "-n", str(a.n), "-b", str(a.b),
           "-t", str(a.t)]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--f16", help="F16 GGUF from tokamak synth")
    ap.add_argument("--types", default="q4_0,q4_k_m")
    ap.add_argument("--llama-bin", help="directory with llama-bench and llama-quantize")
    ap.add_argument("--tokamak", default=os.environ.get("TOKAMAK_BIN", str(ROOT / "build" / "tokamak")))
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-b", type=int, default=16)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--batched-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.batched_worker:
        return batched_worker(a)
    if not a.f16 or not Path(a.f16).exists():
        sys.exit("--f16 GGUF not found (tokamak synth --like olmoe-1b-7b --type f16 -o FILE)")
    if not a.llama_bin:
        sys.exit("--llama-bin DIR (llama-bench, llama-quantize) is required for the pp/tg side")
    f16 = Path(a.f16)
    loads, table, version = [load()], [], "?"
    for qtype in a.types.split(","):
        model = f16.with_name(f16.stem.replace("-f16", "") + f"-{qtype}.gguf")
        quantize(a, f16, qtype, model)
        tk, lb, lbat = [], [], []
        for rnd in range(a.r):  # alternate which engine goes first
            order = [0, 1] if rnd % 2 == 0 else [1, 0]
            for who in order:
                if who == 0:
                    tk.append(run_tokamak(a, model))
                else:
                    lb.append(run_llama_bench(a, model))
                    res = run_llama_batched(a, model)
                    lbat.append(res["batched"])
                    version = res["version"]
                loads.append(load())
        med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
        table.append((qtype, (med(tk, 0), med(tk, 1), med(tk, 2)), (med(lb, 0), med(lb, 1), statistics.median(lbat))))
    print(f"models: {f16.parent}/*-{{{a.types}}}.gguf (quantized by llama.cpp from {f16.name})")
    print(f"threads {a.t}; pp{a.p}, tg{a.n}, {a.b} sequences x {a.n} steps; median of {a.r} alternating rounds\n")
    print(f"| type | engine | pp{a.p} t/s | tg{a.n} t/s | {a.b}-seq decode t/s |")
    print("|---|---|---:|---:|---:|")
    for qtype, t, l in table:
        print(f"| {qtype} | tokamak | {t[0]:.1f} | {t[1]:.2f} | {t[2]:.1f} |")
        print(f"| {qtype} | llama.cpp | {l[0]:.1f} | {l[1]:.2f} | {l[2]:.1f} |")
        print(f"| {qtype} | tokamak / llama.cpp | {t[0] / l[0]:.2f}x | {t[1] / l[1]:.2f}x | {t[2] / l[2]:.2f}x |")
    print(f"\n1-minute load average during the runs: {', '.join(f'{x:.2f}' for x in loads)} ({os.cpu_count()} CPUs)")
    print(f"llama.cpp {a.b}-sequence decode: llama-cpp-python {version} (llama_decode, n_seq_max={a.b})")
    print("commands:")
    print(f"  {a.tokamak} bench -m MODEL -p {a.p} -n {a.n} -b {a.b} -r 1 -t {a.t} --json --no-bandwidth")
    print(f"  {a.llama_bin}/llama-bench -m MODEL -p {a.p} -n {a.n} -r 1 -t {a.t} -o json")


if __name__ == "__main__":
    main()
