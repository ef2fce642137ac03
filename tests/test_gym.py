"""Gymnasium registration, env checker, and vector-env autoreset semantics."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import graspsim  # noqa: F401  (registers graspsim/WristGrasp-v0)
from graspsim import SimConfig
from graspsim.gym_env import WristGraspVectorEnv


def test_check_env_passes():
    env = gym.make("graspsim/WristGrasp-v0")
    check_env(env.unwrapped, skip_render_check=False)


def test_single_env_seeded_reset_is_deterministic_and_validates_actions():
    env = gym.make("graspsim/WristGrasp-v0").unwrapped
    o1, _ = env.reset(seed=3)
    o2, _ = env.reset(seed=3)
    assert all(np.array_equal(o1[k], o2[k]) for k in o1)
    with pytest.raises(ValueError, match="NaN"):
        env.step(np.array([np.nan, 0, 0, 0], np.float32))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(3, np.float32))


def test_vector_env_next_step_autoreset():
    cfg = SimConfig(max_steps=3)
    venv = WristGraspVectorEnv(num_envs=4, cfg=cfg)
    obs, _ = venv.reset(seed=0)
    assert obs["rgb"].shape == (4, 64, 64, 3) and obs["mask"].dtype == np.uint8
    a = np.zeros((4, 4), np.float32)
    for _ in range(2):
        _, _, term, trunc, _ = venv.step(a)
        assert not trunc.any()
    _, _, term, trunc, _ = venv.step(a)
    assert trunc.all() and not term.any()
    obs, rew, term, trunc, _ = venv.step(a)  # this step resets every sub-env
    assert not trunc.any() and not term.any() and (rew == 0).all()
    assert (venv._env.state.steps == 0).all()
    assert venv.observation_space.contains(obs)


def test_make_vec_uses_batched_env():
    venv = gym.make_vec("graspsim/WristGrasp-v0", num_envs=3, vectorization_mode="vector_entry_point")
    obs, _ = venv.reset(seed=1)
    assert obs["gripper"].shape == (3, 3)
