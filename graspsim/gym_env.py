"""Gymnasium interfaces: ``graspsim/WristGrasp-v0`` (one scene) and a vector env with autoreset.

Both wrap the batched torch simulator and return numpy arrays in gymnasium's conventions:
observation ``{"rgb": H,W,3 uint8, "mask": H,W uint8 (0/1), "gripper": 3 float32}``, action
``(vx, vy, vz, grip)`` float32 with velocities in m/s (clipped to ``max_speed``) and grip > 0 closing.
With a target mix beyond spheres (``SimConfig.wrist``) the action is ``(vx, vy, vz, wz, grip)``, ``wz`` the
wrist yaw rate in rad/s (clipped to ``max_yaw_rate``), and ``gripper`` has 5 entries (sin and cos of the
wrist angle appended, in [-1, 1]).
``terminated`` = the sphere is held and lifted; ``truncated`` = the step limit was reached.

The vector env follows gymnasium's default NEXT_STEP autoreset: the step after an episode ends resets
that sub-environment (its action is ignored) and returns its first observation with reward 0.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

from . import GYM_ENV_ID, physics
from .config import SimConfig
from .env import FINGERTIP_SCALE, GraspEnv
from .keys import GRIPPER, MASK, RGB

ENV_ID = GYM_ENV_ID


def _spaces(cfg: SimConfig) -> tuple[spaces.Dict, spaces.Box]:
    s = cfg.image_size
    obs = spaces.Dict(
        {
            RGB: spaces.Box(0, 255, (s, s, 3), np.uint8),
            MASK: spaces.Box(0, 1, (s, s), np.uint8),
            GRIPPER: spaces.Box(*_gripper_bounds(cfg), dtype=np.float32),
        }
    )
    v = cfg.max_speed
    if cfg.wrist:
        w = cfg.max_yaw_rate
        act = spaces.Box(np.array([-v, -v, -v, -w, -1.0], np.float32), np.array([v, v, v, w, 1.0], np.float32),
                         dtype=np.float32)
    else:
        act = spaces.Box(np.array([-v, -v, -v, -1.0], np.float32), np.array([v, v, v, 1.0], np.float32), dtype=np.float32)
    return obs, act


def _gripper_bounds(cfg: SimConfig) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of ``obs["gripper"]``: [0, 1] for the gap, command and contact; [-1, 1] for the wrist's sin and cos;
    [-20, 20] for the fingertip senses (points up to half a frame outside it; the image's edges read +/-10)."""
    low = [0.0, 0.0, 0.0] + [-1.0, -1.0] * cfg.wrist
    low += [-2 * FINGERTIP_SCALE] * (cfg.gripper_dim - len(low))
    high = [1.0] * 5 + [2 * FINGERTIP_SCALE] * (cfg.gripper_dim - 5)
    return np.array(low, np.float32), np.array(high[:cfg.gripper_dim], np.float32)


def _to_numpy(obs: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    g = obs[GRIPPER]
    if g.shape[1] == 3:
        g = g.clamp(0.0, 1.0)
    else:  # with the wrist: sin and cos lie in [-1, 1]
        g = torch.cat([g[:, :3].clamp(0.0, 1.0), g[:, 3:].clamp(-1.0, 1.0)], 1)
    return {
        RGB: obs[RGB].permute(0, 2, 3, 1).cpu().numpy(),
        MASK: obs[MASK].to(torch.uint8).cpu().numpy(),
        GRIPPER: g.cpu().numpy().astype(np.float32),
    }


def _action_tensor(action: Any, n: int, device: torch.device, dim: int = 4) -> torch.Tensor:
    """The action as an n,``dim`` tensor (``dim`` = ``SimConfig.action_dim``)."""
    a = np.asarray(action, dtype=np.float32)
    if a.shape == (dim,) and n == 1:
        a = a[None]
    if a.shape != (n, dim):
        raise ValueError(f"action must have shape ({n}, {dim}){f' or ({dim},)' if n == 1 else ''}; got {a.shape}")
    return torch.as_tensor(a, device=device)


class WristGraspEnv(gym.Env):
    """One randomized scene (``gymnasium.make("graspsim/WristGrasp-v0")``)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, cfg: SimConfig | None = None, device: str = "cpu", render_mode: str | None = None):
        self.cfg = cfg or SimConfig()
        self.observation_space, self.action_space = _spaces(self.cfg)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array'; got {render_mode!r}")
        self.render_mode = render_mode
        self._env = GraspEnv(self.cfg, num_envs=1, device=device, seed=0)
        self._last: dict[str, np.ndarray] | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(0, 2**31 - 1))
        obs = _to_numpy(self._env.reset(seed=seed))
        self._last = {k: v[0] for k, v in obs.items()}
        return self._last, {}

    def step(self, action):
        obs, reward, done, info = self._env.step(_action_tensor(action, 1, self._env.device, self.cfg.action_dim))
        o = _to_numpy(obs)
        self._last = {k: v[0] for k, v in o.items()}
        success = bool(info["success"][0])
        truncated = bool(done[0]) and not success
        return self._last, float(reward[0]), success, truncated, {"failure": physics.FAILURE_NAMES[int(info["failure"][0])]}

    def render(self):
        if self._last is None:
            return None
        return self._last[RGB]

    @property
    def privileged(self) -> dict[str, np.ndarray]:
        return {k: v[0].cpu().numpy() for k, v in self._env.privileged().items()}


class WristGraspVectorEnv(VectorEnv):
    """``num_envs`` scenes stepped in one batched call, with NEXT_STEP autoreset."""

    metadata = {"render_modes": ["rgb_array"], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 8, cfg: SimConfig | None = None, device: str = "cpu", render_mode: str | None = None):
        self.cfg = cfg or SimConfig()
        self.num_envs = num_envs
        self.render_mode = render_mode
        self.single_observation_space, self.single_action_space = _spaces(self.cfg)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self._env = GraspEnv(self.cfg, num_envs=num_envs, device=device, seed=0)
        self._autoreset = torch.zeros(num_envs, dtype=torch.bool, device=self._env.device)

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        if isinstance(seed, (list, tuple)):
            seed = seed[0]
        obs = self._env.reset(seed=seed)
        self._autoreset.zero_()
        return _to_numpy(obs), {}

    def step(self, actions):
        env = self._env
        a = _action_tensor(actions, self.num_envs, env.device, self.cfg.action_dim)
        ids = torch.nonzero(self._autoreset).flatten()
        before_success = env.state.success & ~self._autoreset
        with env.rendering(False):  # one render below, after the autoresets
            env.step(a)  # slots in self._autoreset take a step that their reset then discards
            env.reset(ids)
        stepped = env.state
        obs = env.observe()
        success = stepped.success
        reward = (success & ~before_success & ~self._autoreset).float()
        terminated = success & ~self._autoreset
        truncated = stepped.done & ~success & ~self._autoreset
        self._autoreset = terminated | truncated
        info = {"failure": physics.failure_cause(stepped).cpu().numpy()}
        return (
            _to_numpy(obs),
            reward.cpu().numpy(),
            terminated.cpu().numpy(),
            truncated.cpu().numpy(),
            info,
        )

    def render(self):
        return self._env.render().rgb.permute(0, 2, 3, 1).cpu().numpy()


def register() -> None:
    """Register ``graspsim/WristGrasp-v0`` (idempotent; ``import graspsim`` has done it already)."""
    from . import _register_gym

    _register_gym()
