"""Fixtures shared by several test files."""

import os
import sys

import pytest
import torch

# MuJoCo picks its OpenGL backend once, when it is imported; test modules import it at collection, before any env
# could choose, so without a display the suite asks for headless EGL here (an explicit MUJOCO_GL wins)
if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")

# Under pytest-xdist (pyproject.toml's addopts `-n 2`) each worker is one of several torch processes on the machine: each gets
# one thread, and so does every process a test starts (OMP_NUM_THREADS), else two workers' thread pools fight for
# the cores. A test module's own torch.set_num_threads at import is overridden once collection is over.
_XDIST_WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))
if _XDIST_WORKER:
    os.environ["OMP_NUM_THREADS"] = "1"


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread_per_xdist_worker():
    if _XDIST_WORKER:
        torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def cube_vision(tmp_path_factory) -> str:
    """The shipped vision net relabelled as trained on every kind (plumbing tests only: no accuracy is read)."""
    ckpt = torch.load("vision/assets/segnet.pt", weights_only=False)
    ckpt["config"] = {**(ckpt.get("config") or {}), "sim": {"target": {"kinds": ["sphere", "cube", "cylinder"]}}}
    path = tmp_path_factory.mktemp("vision") / "segnet.pt"
    torch.save(ckpt, path)
    return str(path)
