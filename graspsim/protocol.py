"""The env protocol, as code: what every batched grasping env offers the one rollout driver
(:func:`graspsim.rollout.run_episodes`), the expert, the collectors and the benchmarks.

Four classes implement it: the torch simulator (:class:`graspsim.env.GraspEnv`), the pybullet backend
(:class:`graspsim.bullet.env.BulletGraspEnv`), the MuJoCo backend (``graspsim.mujoco.env.MujocoGraspEnv``) and the robot
as an env of batch 1 that deploy runs (:class:`graspsim.robot.loop.RobotEnv`). ``tests/test_protocol.py`` checks each
against :class:`GraspEnvProtocol`, names and signatures both.

Shapes use ``B = num_envs``; ``H = W = cfg.image_size``; ``G = cfg.gripper_dim`` (3, 5 with the wrist, 9 with the
fingertip senses). An env may return fewer keys than the simulators (the robot env returns no images: its frames come
from the camera, not from the env).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor


@runtime_checkable
class GraspEnvProtocol(Protocol):
    """A batch of ``num_envs`` grasping scenes, each running its own episode.

    ``runtime_checkable`` checks that the members exist; ``tests/test_protocol.py`` also compares their
    signatures with the ones below.
    """

    num_envs: int
    """B, the number of scenes stepped together."""
    cfg: Any
    """The :class:`graspsim.SimConfig` the scenes are built from (the robot env: the one its nets were trained in)."""
    device: torch.device
    """Where the returned tensors live."""

    def reset(self, env_ids: Tensor | Sequence[int] | None = None,
              seeds: Sequence[int] | None = None) -> dict[str, Tensor]:
        """Start new episodes in the scenes ``env_ids`` (default all), built from their episode ``seeds`` (one per
        id, :mod:`graspsim.seeds`) or, without seeds, drawn from the env's generator. Scenes not named keep their
        episode. Returns the observation of every scene (as :meth:`observe`, unless rendering is off)."""
        ...

    def step(self, action: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, dict[str, Tensor]]:
        """Advance every scene one control step with ``action`` B,4 ``(vx, vy, vz m/s, grip)`` or B,5
        ``(vx, vy, vz m/s, wz rad/s, grip)``. Returns ``(obs, reward B float32, done B bool, info)``; ``info`` holds
        at least ``success`` (B bool) and ``failure`` (B int64 codes of :data:`graspsim.physics.FAILURE_NAMES`).
        Finished scenes are not reset (the caller resets them by index)."""
        ...

    def observe(self) -> dict[str, Tensor]:
        """The observation of every scene now: ``rgb`` B,3,H,W uint8, ``mask`` B,H,W bool (the exact target mask),
        ``gripper`` B,G float32 (the gripper's own senses; nothing about the target)."""
        ...

    def privileged(self) -> dict[str, Tensor]:
        """True state for the expert only (keys of :data:`graspsim.keys.PRIVILEGED_KEYS`, each with B leading)."""
        ...

    def rendering(self, on: bool) -> AbstractContextManager:
        """A context within which ``step`` and ``reset`` render (``on``) or skip the images; :meth:`observe` always
        renders. The previous setting comes back on exit."""
        ...

    def close(self) -> None:
        """Release what the env holds (clients, worker processes); idempotent."""
        ...


PROTOCOL_MEMBERS = ("num_envs", "cfg", "device", "reset", "step", "observe", "privileged", "rendering", "close")
"""Every member of :class:`GraspEnvProtocol`, attributes first."""

__all__ = ["GraspEnvProtocol", "PROTOCOL_MEMBERS"]
