"""Tensor parallelism on mixture-of-experts models (`mpirun -np 2 tokamak logits|run ... --tp 2`,
a build with -DTK_MPI=ON named by TOKAMAK_MPI_BIN; docs/parallel.md): every expert's and the
shared expert's FFN columns split across the ranks, one all-reduce after the experts' combined
output.  The tiny random models of test_moe.py (transformers save_pretrained), logits at every
position against the same binary on one rank, and greedy text."""
import os
import shutil
import subprocess

import pytest

from test_moe import PROMPTS, build, np, save
from test_server import tp_launcher


@pytest.fixture(scope="module")
def mpi_bin():
    path = os.environ.get("TOKAMAK_MPI_BIN")
    if not path or not os.path.exists(path):
        pytest.skip("TOKAMAK_MPI_BIN (a tokamak built with -DTK_MPI=ON) is not set")
    if not shutil.which("mpirun"):
        pytest.skip("mpirun (Open MPI) is not installed")
    return path


def run(cmd, tp):
    launcher = [*tp_launcher(tp), cmd[0]] if tp > 1 else cmd[:1]
    extra = ["--tp", str(tp)] if tp > 1 else []
    r = subprocess.run([*launcher, *cmd[1:], "-t", "1", *extra], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def logits(bin_, model, ids, tmp_path, tp):
    out = tmp_path / f"logits{tp}.f32"
    run([bin_, "logits", "-m", str(model), "--tokens", ",".join(map(str, ids)), "-o", str(out), "--kv-type", "f32"], tp)
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1)


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe", "qwen3_moe"])
def test_moe_two_ranks_match_one(mpi_bin, shared, tmp_path, family):
    path = save(build(family), tmp_path, shared)
    for ids in PROMPTS:
        one, two = logits(mpi_bin, path, ids, tmp_path, 1), logits(mpi_bin, path, ids, tmp_path, 2)
        assert one.shape == two.shape
        worst, largest = float(np.abs(two - one).max()), float(np.abs(one).max())
        print(f"{family} prompt of {len(ids)}: max |logit(2 ranks) - logit(1 rank)| {worst:.3g}, "
              f"largest |logit| {largest:.3g}")
        assert worst <= 1e-5 * largest, f"{family} prompt {ids[:4]}: max |diff| {worst} (largest |logit| {largest})"
        assert (two.argmax(axis=1) == one.argmax(axis=1)).all(), f"{family}: another argmax"
    greedy = [mpi_bin, "run", "-m", str(path), "-p", "Once upon a time", "-n", "24", "--temp", "0", "--ignore-eos",
              "--kv-type", "f32"]
    a, b = run(greedy, 1).stdout, run(greedy, 2).stdout
    assert a.strip() and a == b, f"{family}: greedy text differs:\n{a}\n{b}"


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
