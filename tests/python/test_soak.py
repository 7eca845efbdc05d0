"""A short soak of `tokamak serve` (tools/soak.sh: 8 clients for 30 s of mixed
good, disruptive and malformed traffic on 127.0.0.1, then the idle /metrics,
counter, memory and clean-shutdown checks).  About a minute; TK_SKIP_SOAK=1 skips
it.  The binary is TOKAMAK_BIN (the ASan build works too: its memory bound
then applies when TK_SOAK_ASAN=1)."""
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(os.environ.get("TK_SKIP_SOAK") == "1", reason="TK_SKIP_SOAK=1")
def test_soak_short(tokamak_bin, shared):
    model = os.path.join(shared, "models", "code-target")
    if not os.path.isdir(model):
        pytest.skip(f"{model} not found")
    args = [os.path.join(REPO, "tools", "soak.sh"), "--clients", "8", "--minutes", "0.5", "--model", model]
    if os.environ.get("TK_SOAK_ASAN") == "1":
        args.append("--asan")
    env = {**os.environ, "TOKAMAK_BIN": tokamak_bin}
    # 30 s of load + at most 120 s for the last requests + idle and shutdown checks.
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "soak passed" in out and "PASS  clean shutdown" in out, out
