import os
import shutil

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("TK_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared"))


@pytest.fixture(scope="session")
def tokamak_bin():
    path = os.environ.get("TOKAMAK_BIN") or os.path.join(REPO, "build", "tokamak")
    if not os.path.exists(path):
        pytest.skip(f"tokamak binary not found at {path} (set TOKAMAK_BIN)")
    return path


@pytest.fixture(scope="session")
def shared():
    if not os.path.isdir(SHARED):
        pytest.skip(f"shared assets not found at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def model_dir(shared):
    """code-target: the HF Llama model (with a chat template) the server tests run on."""
    path = os.path.join(shared, "models", "code-target")
    if not os.path.isdir(path):
        pytest.skip(f"{path} not found")
    return path


@pytest.fixture(scope="session")
def mpi_bin():
    """A tokamak built with -DTK_MPI=ON (TOKAMAK_MPI_BIN) and Open MPI's mpirun: the tensor-parallel tests."""
    path = os.environ.get("TOKAMAK_MPI_BIN")
    if not path or not os.path.exists(path):
        pytest.skip("TOKAMAK_MPI_BIN (a tokamak built with -DTK_MPI=ON) is not set")
    if not shutil.which("mpirun"):
        pytest.skip("mpirun (Open MPI) is not installed")
    return path
