#!/usr/bin/env python3
"""Gemma 3 270M: tokamak vs llama.cpp (llama-cpp-python), side by side in one run.

Both engines load the same GGUF and use the same thread count; both measure
prefill of P tokens (one sequence, from an empty context) and decode of N
tokens one at a time from an empty context (llama-bench's ppP / tgN), with
the same pseudo-random token ids as `tokamak bench`.  Medians of R runs
after a warm-up.  Prints a Markdown table, the commands and the load.

llama.cpp runs in a child process.  If it crashes with its default CPU
buffer types (a default llama-cpp-python build on an AMX CPU crashed in
ggml_backend_amx_mul_mat on this project's VMs), it is rerun with
use_extra_bufts=False (plain row-major weights, no AMX / repacking) and the
table says so.  --llama-path adds another llama-cpp-python build (e.g. one
compiled without AMX, which keeps the repacked x86 kernels).

    .venv/bin/python bench/gemma_vs_llamacpp.py [--model GGUF] [-p 128] [-n 32] [-r 3] [-t 2]
        [--llama-path DIR:LABEL ...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lcg_tokens(n, n_vocab):
    """The token ids `tokamak bench` uses (cmd_bench.c)."""
    x, out = 12345, []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        out.append((x >> 33) % n_vocab)
    return out


def load():
    return os.getloadavg()[0]


def bench_tokamak(binary, model, pp, tg, reps, threads):
    cmd = [binary, "bench", "-m", model, "-p", str(pp), "-n", str(tg), "-r", str(reps), "-t", str(threads),
           "--json", "--no-bandwidth"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    j = json.loads(proc.stdout.strip().splitlines()[-1])
    return j["pp"]["median"], j["tg"]["median"]


def llama_worker(a):
    """Child process: measures llama.cpp, prints one JSON line."""
    import llama_cpp
    import llama_cpp.llama

    if a.plain_buffers:
        orig = llama_cpp.llama_cpp.llama_model_default_params

        def params():
            p = orig()
            p.use_extra_bufts = False
            return p

        llama_cpp.llama_cpp.llama_model_default_params = params
        llama_cpp.llama.llama_cpp.llama_model_default_params = params
    ctx = max(64, a.p + a.n + 8)
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=ctx, n_batch=max(a.p, 1), n_ubatch=max(a.p, 1),
                          n_threads=a.t, n_threads_batch=a.t, logits_all=False, verbose=False)
    toks = lcg_tokens(ctx, llm.n_vocab())
    llm.reset()
    llm.eval(toks[:4])  # warm-up: touch the weights
    pps, tgs = [], []
    for _ in range(a.r):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(toks[:a.p])
        pps.append(a.p / (time.perf_counter() - t0))
        llm.reset()
        t0 = time.perf_counter()
        for i in range(a.n):
            llm.eval([toks[i]])
        tgs.append(a.n / (time.perf_counter() - t0))
    print(json.dumps({"pp": statistics.median(pps), "tg": statistics.median(tgs), "version": llama_cpp.__version__,
                      "system": llama_cpp.llama_print_system_info().decode()}))


def bench_llama(a, pythonpath=None, plain=False, passive=False):
    cmd = [sys.executable, __file__, "--llama-worker", "--model", a.model, "-p", str(a.p), "-n", str(a.n),
           "-r", str(a.r), "-t", str(a.t)] + (["--plain-buffers"] if plain else [])
    env = dict(os.environ)
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return None, proc.returncode
    return json.loads(proc.stdout.strip().splitlines()[-1]), 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / ".cache" / "models" / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--tokamak", default=os.environ.get("TOKAMAK_BIN", str(ROOT / "build" / "tokamak")))
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--llama-path", action="append", default=[],
                    help="DIR:LABEL, another llama-cpp-python build (put first on PYTHONPATH)")
    ap.add_argument("--omp-passive", action="store_true",
                    help="also run llama.cpp with OMP_WAIT_POLICY=PASSIVE (its OpenMP workers otherwise spin at "
                         "barriers, which costs a lot on a loaded machine)")
    ap.add_argument("--llama-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--plain-buffers", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.llama_worker:
        return llama_worker(a)
    if not Path(a.model).exists():
        sys.exit(f"{a.model} not found: run tools/oracles.sh first")

    rows, loads = [], [load()]
    tk_pp, tk_tg = bench_tokamak(a.tokamak, a.model, a.p, a.n, a.r, a.t)
    rows.append(("tokamak", tk_pp, tk_tg))
    loads.append(load())
    builds = [(None, "installed")] + [tuple(x.split(":", 1)) if ":" in x else (x, x) for x in a.llama_path]
    notes = []
    for path, label in builds:
        plain = False
        for passive in [False, True] if a.omp_passive else [False]:
            res, rc = bench_llama(a, path, plain, passive)
            if res is None and not plain:
                notes.append(f"llama.cpp ({label}) crashed with its default CPU buffers (exit {rc}); "
                             "rerun with use_extra_bufts=False")
                plain = True
                res, rc = bench_llama(a, path, plain, passive)
            if res is None:
                notes.append(f"llama.cpp ({label}) failed again (exit {rc})")
                break
            what = f"llama.cpp {res['version']} ({label}" + (", use_extra_bufts=False" if plain else "") + \
                (", OMP_WAIT_POLICY=PASSIVE" if passive else "") + ")"
            rows.append((what, res["pp"], res["tg"]))
            loads.append(load())

    print(f"model: {a.model}\nthreads: {a.t}, prefill {a.p} tokens, decode {a.n} tokens, median of {a.r}\n")
    print(f"| engine | pp{a.p} t/s | tg{a.n} t/s | tokamak / this (pp, tg) |")
    print("|---|---:|---:|---:|")
    for name, pp, tg in rows:
        ratio = "" if name == "tokamak" else f"{tk_pp / pp:.2f}x, {tk_tg / tg:.2f}x"
        print(f"| {name} | {pp:.1f} | {tg:.1f} | {ratio} |")
    print("\n" + "\n".join(f"note: {n}" for n in notes))
    print(f"1-minute load average during the runs: {', '.join(f'{x:.2f}' for x in loads)} "
          f"({os.cpu_count()} CPUs)")
    print("\ncommands:")
    print(f"  {a.tokamak} bench -m {a.model} -p {a.p} -n {a.n} -r {a.r} -t {a.t} --json --no-bandwidth")
    print(f"  llama_cpp.Llama(model_path, n_ctx={max(64, a.p + a.n + 8)}, n_batch={a.p}, n_ubatch={a.p}, "
          f"n_threads={a.t}, n_threads_batch={a.t}); eval(first {a.p} tokens) / eval([token]) x {a.n}")


if __name__ == "__main__":
    main()
