"""What the contact-physics backends share (pybullet's Panda, MuJoCo's SO-101): episode starts from seeds, the
rendering switch, the velocity command turned into a TCP target, and the moving target's drift.

Each backend keeps a :class:`graspsim.State` of its scenes (measured from its own physics after every step) and
implements ``_build(ids)`` (lay out the scenes ``ids`` from ``self.state``) and ``_obs()``; this base gives them the
same ``reset`` and ``rendering`` as the torch simulator and the same command rules (:mod:`graspsim.physics`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import torch
from torch import Tensor

from .env import fresh_scenes
from .physics import command, move_toward
from .state import State

MAX_LAG = 0.02
"""The integrated TCP target never runs further than this ahead of the measured TCP (m): when the arm is blocked (the
table, an object) the target waits for it instead of winding up."""
PUSH_MOVE = 1e-3
"""Target displacement in one step (m) that counts as a push when a finger or pad touches it."""
HOLD_SLACK = 3e-3
"""A held target keeps the pad gap within this of its width (m): pad contacts are soft."""
MISS_GAP = 2e-3
"""A close that ends below this pad gap (m) without a hold is a missed grasp."""


def grasp_events(s: State, sphere: Tensor, touch: Tensor, between: Tensor, close: Tensor, width: Tensor, hz: Tensor,
                 lift_height: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The episode bookkeeping both contact backends derive from their measurements, as the torch simulator's codes
    mean it: ``(held, pushed, dropped, missed, steps, success)`` for the step that led from state ``s`` to the target
    centre ``sphere`` (B,3), with ``touch`` (B,2 bool: each pad touches the target), ``between`` (B bool: the target
    lies between the pads), ``close`` (B bool: the close command), the pad gap ``width`` and the target's half
    height ``hz`` (B, m)."""
    held = touch.all(dim=1) & between & close
    moved = (sphere[:, :2] - s.sphere_pos[:, :2]).norm(dim=1) > PUSH_MOVE
    pushed = s.pushed | (~held & ~s.held & touch.any(dim=1) & moved)
    dropped = s.dropped | (s.held & ~held & close)
    missed = s.missed + (close & ~held & (width < MISS_GAP) & (s.finger_width >= MISS_GAP)).long()
    steps = s.steps + 1
    success = s.success | (held & ((sphere[:, 2] - hz) >= lift_height))
    return held, pushed, dropped, missed, steps, success


class ContactBackend:
    """Base of :class:`graspsim.bullet.BulletGraspEnv` and :class:`graspsim.mujoco.MujocoGraspEnv`. Expects ``cfg``,
    ``state``, ``generator``, ``num_envs``, ``device``, ``render_obs``, ``_target`` and ``_cmd_vel`` (both B,3)."""

    def _build(self, ids: Tensor) -> None:
        raise NotImplementedError

    def _obs(self) -> dict[str, Tensor]:
        raise NotImplementedError

    def reset(self, env_ids: Tensor | Sequence[int] | None = None, seeds: Sequence[int] | None = None,
              seed: int | None = None) -> dict[str, Tensor]:
        """Start new episodes in the scenes ``env_ids`` (default all): rebuild them from their episode ``seeds`` (one
        per id) or, without seeds, from scenes drawn from the env's generator (``seed`` re-seeds it first). Same rule
        as :meth:`graspsim.GraspEnv.reset`; returns the observation."""
        if seed is not None:
            self.generator.manual_seed(int(seed))
        self.state, ids = fresh_scenes(self.state, env_ids, seeds, self.cfg, self.generator, self.num_envs, self.device)
        if ids.numel():
            self._build(ids.cpu())
        return self._obs()

    @contextmanager
    def rendering(self, on: bool):
        """Within the block, ``step`` and ``reset`` render (``on``) or skip it and return only ``gripper``;
        ``observe`` renders on demand. The previous setting comes back on exit."""
        saved, self.render_obs = self.render_obs, bool(on)
        try:
            yield self
        finally:
            self.render_obs = saved

    def _command_targets(self, action: Tensor) -> tuple[Tensor, Tensor]:
        """Integrate the commanded velocities ``action`` (B,4) into TCP targets ``B,3`` (the rules of
        :func:`graspsim.physics.step`: latency, gain, noise, speed and acceleration limits, workspace clamp; at most
        :data:`MAX_LAG` ahead of the measured TCP) and return them with the executed close command ``B`` bool."""
        s, cfg = self.state, self.cfg
        executed, v_cmd = command(s, action, cfg)
        target = move_toward(self._target, self._cmd_vel, v_cmd, cfg)
        target = s.tcp_pos + (target - s.tcp_pos).clamp(-MAX_LAG, MAX_LAG)
        self._cmd_vel = (target - self._target) / cfg.dt
        self._target = target
        return target, executed[:, 3] > 0

    def _drift(self) -> Tensor:
        """Moving-target mode: the drift velocity ``B,2`` for this step, reversed (as in the torch simulator) where
        the free target would leave the workspace; stored back into ``state.sphere_vel``."""
        s, ws = self.state, self.cfg.workspace
        ahead = s.sphere_pos[:, :2] + s.sphere_vel * self.cfg.dt
        flip = (ahead.abs() > ws - 0.02) & ~s.held[:, None]
        vel = torch.where(flip, -s.sphere_vel, s.sphere_vel)
        self.state = s.replace(sphere_vel=vel)
        return vel
