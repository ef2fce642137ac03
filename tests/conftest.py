"""Fixtures shared by several test files."""

import pytest
import torch


@pytest.fixture(scope="session")
def cube_vision(tmp_path_factory) -> str:
    """The shipped vision net relabelled as trained on every kind (plumbing tests only: no accuracy is read)."""
    ckpt = torch.load("vision/assets/segnet.pt", weights_only=False)
    ckpt["config"] = {**(ckpt.get("config") or {}), "sim": {"target": {"kinds": ["sphere", "cube", "cylinder"]}}}
    path = tmp_path_factory.mktemp("vision") / "segnet.pt"
    torch.save(ckpt, path)
    return str(path)
