"""Tensor parallelism (`mpirun -np 2 tokamak logits|run ... --tp 2`, a build with -DTK_MPI=ON
named by TOKAMAK_MPI_BIN; docs/parallel.md) on what test_tp.c's models do not cover, against
the same binary on one rank (logits at every position, greedy text):
- mixture-of-experts models, every expert's and the shared expert's FFN columns split across
  the ranks, one all-reduce after the experts' combined output (the tiny random models of
  test_moe.py, saved by transformers);
- fewer KV heads than ranks (each rank keeps the KV head of its query heads): a 1-KV-head
  Mixtral, and Gemma 3 270M (1 KV head; tools/oracles.sh fetches it), whose Q4_K_M file is
  held to the distance its own int8 activation quantization puts between one rank and the
  float reference kernels."""
import os
import subprocess

import pytest

from test_gemma import gguf, gguf_f32  # noqa: F401 (fixtures: the fetched Gemma 3 270M and its F32 copy)
from test_moe import PROMPTS, build, np, save
from test_server import tp_launcher


def run(cmd, tp, env=None):
    launcher = [*tp_launcher(tp), cmd[0]] if tp > 1 else cmd[:1]
    extra = ["--tp", str(tp)] if tp > 1 else []
    r = subprocess.run([*launcher, *cmd[1:], "-t", "1", *extra], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stderr
    return r


def logits(bin_, model, ids, tmp_path, tp, env=None):
    out = tmp_path / f"logits{tp}.f32"
    run([bin_, "logits", "-m", str(model), "--tokens", ",".join(map(str, ids)), "-o", str(out), "--kv-type", "f32"],
        tp, env)
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1)


def assert_two_ranks_match_one(bin_, path, prompts, tmp_path, what, prompt="Once upon a time"):
    for ids in prompts:
        one, two = logits(bin_, path, ids, tmp_path, 1), logits(bin_, path, ids, tmp_path, 2)
        assert one.shape == two.shape
        worst, largest = float(np.abs(two - one).max()), float(np.abs(one).max())
        print(f"{what}, prompt of {len(ids)}: max |logit(2 ranks) - logit(1 rank)| {worst:.3g}, "
              f"largest |logit| {largest:.3g}")
        assert worst <= 1e-5 * largest, f"{what} prompt {ids[:4]}: max |diff| {worst} (largest |logit| {largest})"
        assert (two.argmax(axis=1) == one.argmax(axis=1)).all(), f"{what}: another argmax"
    greedy = [bin_, "run", "-m", str(path), "-p", prompt, "-n", "24", "--temp", "0", "--ignore-eos", "--kv-type", "f32"]
    a, b = run(greedy, 1).stdout, run(greedy, 2).stdout
    assert a.strip() and a == b, f"{what}: greedy text differs:\n{a}\n{b}"


@pytest.mark.parametrize("family,overrides", [("mixtral", {}), ("qwen2_moe", {}), ("qwen3_moe", {}),
                                              ("mixtral", {"num_key_value_heads": 1})],
                         ids=["mixtral", "qwen2_moe", "qwen3_moe", "mixtral-1-kv-head"])
def test_two_ranks_match_one(mpi_bin, shared, tmp_path, family, overrides):
    path = save(build(family, **overrides), tmp_path, shared)
    assert_two_ranks_match_one(mpi_bin, path, PROMPTS, tmp_path, f"{family} {overrides}")


GEMMA_PROMPTS = [[2, 818, 5279, 529, 7001, 236761, 506, 1156, 563]]


def test_gemma_one_kv_head(mpi_bin, gguf_f32, tmp_path):
    """Gemma 3 270M (4 query heads, 1 KV head) in float32: each rank holds the KV head and 2
    query heads."""
    assert_two_ranks_match_one(mpi_bin, gguf_f32, GEMMA_PROMPTS, tmp_path, "gemma-3-270m f32",
                               "The capital of France is")


def test_gemma_q4_k_m_within_its_quantization_noise(mpi_bin, gguf, tmp_path):
    """The Q4_K_M file: each matmul quantizes its input to int8 blocks, and an input a float
    rounding away (the ranks' sum in another order) can round to the other int8 step, so two
    ranks are not within 1e-5 of one here; they stay within the distance between one rank's
    int8 kernels and the float reference kernels (TK_REFERENCE=1), with the same argmax."""
    ids = GEMMA_PROMPTS[0]
    one, two = logits(mpi_bin, gguf, ids, tmp_path, 1), logits(mpi_bin, gguf, ids, tmp_path, 2)
    ref = logits(mpi_bin, gguf, ids, tmp_path, 1, env={**os.environ, "TK_REFERENCE": "1"})
    tp_diff, quant_noise = float(np.abs(two - one).max()), float(np.abs(one - ref).max())
    print(f"gemma-3-270m Q4_K_M: max |logit(2 ranks) - logit(1 rank)| {tp_diff:.3g}, "
          f"max |logit(1 rank) - logit(reference)| {quant_noise:.3g}, largest |logit| {float(np.abs(one).max()):.3g}")
    assert tp_diff <= quant_noise
    assert (two.argmax(axis=1) == one.argmax(axis=1)).all()


def test_moe_split_refusals(mpi_bin, shared, tmp_path):
    """What the split does not cover is refused naming it: OLMoE's q/k norm over the whole
    projection, and an expert FFN width that does not divide by the ranks."""
    path = save(build("olmoe"), tmp_path, shared)
    r = subprocess.run([*tp_launcher(2), mpi_bin, "logits", "-m", str(path), "--tokens", "1,2", "--tp", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "q/k norm over the whole projection" in r.stderr, r.stderr
    (tmp_path / "odd").mkdir()
    path = save(build("mixtral", intermediate_size=33), tmp_path / "odd", shared)
    r = subprocess.run([*tp_launcher(2), mpi_bin, "logits", "-m", str(path), "--tokens", "1,2", "--tp", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "expert FFN width 33" in r.stderr, r.stderr
