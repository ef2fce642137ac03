"""Fixtures shared by several test files."""

import os
import sys

import pytest
import torch

# MuJoCo picks its OpenGL backend once, when it is imported; test modules import it at collection, before any env
# could choose, so without a display the suite asks for headless EGL here (an explicit MUJOCO_GL wins)
if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")


@pytest.fixture(scope="session")
def cube_vision(tmp_path_factory) -> str:
    """The shipped vision net relabelled as trained on every kind (plumbing tests only: no accuracy is read)."""
    ckpt = torch.load("vision/assets/segnet.pt", weights_only=False)
    ckpt["config"] = {**(ckpt.get("config") or {}), "sim": {"target": {"kinds": ["sphere", "cube", "cylinder"]}}}
    path = tmp_path_factory.mktemp("vision") / "segnet.pt"
    torch.save(ckpt, path)
    return str(path)
