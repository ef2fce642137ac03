"""Slow: DAgger at a moderate budget learns to grasp from ground-truth masks, well above an untrained net.

Measured (docs/dagger.md): with these settings the held-out success after iterations 0, 1, 2 was 31, 34, 39%.
It is NOT above the BC baseline (42-47%), and longer runs collapse (2% after 5 iterations), so this test only
checks learning at 3 iterations; it does not claim the DAgger targets."""

from __future__ import annotations

import pytest
import torch

from dagger.evaluate import EvalSimConfig, evaluate_sim
from dagger.model import ControlNet
from dagger.policy import save_checkpoint
from dagger.train import DaggerConfig, run_dagger


@pytest.mark.slow
def test_dagger_learns_to_grasp(tmp_path):
    res = run_dagger(DaggerConfig(out=tmp_path / "dagger", iterations=3, episodes_per_iter=96, eval_episodes=64,
                                  num_envs=96, train_steps=600, progress=False, seed=0))
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "untrained.pt", ControlNet(), None, iteration=-1)
    untrained = evaluate_sim(EvalSimConfig(policy=tmp_path / "untrained.pt", out=tmp_path / "ev0", episodes=64,
                                           gifs=0, progress=False))
    learned = evaluate_sim(EvalSimConfig(policy=tmp_path / "dagger" / "policy.pt", out=tmp_path / "ev1", episodes=128,
                                         gifs=0, progress=False))
    assert untrained["success_rate"] <= 0.05
    assert learned["success_rate"] >= 0.25, learned
    assert res["rows"][-1]["samples"] > res["rows"][0]["samples"]
