"""The one rollout driver: run exactly one episode per episode seed, ``env.num_envs`` at a time.

>>> out = run_episodes(env, episode_seeds(0, "test", 0, 1000), hooks)
>>> out.success.mean()

Every loop over episodes (``collect``, DAgger rounds, ``eval-sim``, ``bench`` and the benchmarks) is
this loop with different :class:`Hooks`:

1. the first ``num_envs`` seeds start in slots 0..; ``hooks.on_start(slots, episodes)``;
2. each step: ``obs = env.observe()`` (one render of the whole batch, after resets), then
   ``action = hooks.act(obs, active)``, ``hooks.record(obs, action, active, slot_episode)`` and
   ``env.step(action)``, with the env's own rendering off inside the loop (the render-on/off context);
3. slots whose episode ended get ``hooks.on_end(Finished)`` (in ascending slot order) and are refilled
   with the next seeds by ``env.reset(slots, seeds)``; when the seeds run out their slots idle until the
   last episode ends, so every seed contributes exactly one episode (no bias towards short episodes).

Outcomes come back in seed order. ``env`` is anything with the env protocol,
:class:`graspsim.protocol.GraspEnvProtocol` (the torch simulator, :class:`graspsim.bullet.BulletGraspEnv`, the robot
env of deploy).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from . import interrupts
from .physics import FAILURE_NAMES


@dataclass
class Finished:
    """The episodes that ended on one step (numpy arrays of length n, in ascending slot order)."""

    slots: Tensor
    """n int64 (CPU): env slots of the ended episodes."""
    episodes: np.ndarray
    """n int64: index of each episode in the driver's seed list."""
    seeds: list[int]
    success: np.ndarray
    """n bool."""
    failure: np.ndarray
    """n int64 codes of :data:`graspsim.FAILURE_NAMES`."""
    steps: np.ndarray
    """n int64: control steps the episode took."""


class Hooks:
    """What a rollout does besides stepping: override :meth:`act` and any of the others."""

    def on_start(self, slots: Tensor, episodes: Tensor) -> None:
        """Slots ``slots`` (n int64, env device) just started episodes ``episodes`` (n int64, CPU)."""

    def act(self, obs: dict[str, Tensor], active: Tensor) -> Tensor:
        """The action B,4 to execute for observation ``obs``; ``active`` (B bool) marks slots running an episode."""
        raise NotImplementedError

    def record(self, obs: dict[str, Tensor], action: Tensor, active: Tensor, slot_episode: Tensor) -> None:
        """Called after :meth:`act`, before the step; ``slot_episode`` (B int64, CPU) is each slot's
        episode index (-1 = idle)."""

    def on_end(self, fin: Finished) -> None:
        """Episodes ended (see :class:`Finished`); their slots are refilled after this call."""


@dataclass
class Outcomes:
    """Per-episode outcomes in seed order (numpy arrays of length N)."""

    seeds: list[int]
    success: np.ndarray
    failure: np.ndarray
    steps: np.ndarray
    scene_steps: int
    """Scene steps simulated for active episodes."""
    seconds: float

    def failure_counts(self) -> dict[str, int]:
        return {name: int((self.failure == i).sum()) for i, name in enumerate(FAILURE_NAMES)}


class ExpertHooks(Hooks):
    """Hooks that execute a privileged-state policy (e.g. the FSM expert): ``act`` calls
    ``policy(env.privileged())``; ``reset(slots)`` (if the policy has it) runs at each episode start."""

    def __init__(self, env, policy):
        self.env, self.policy = env, policy

    def on_start(self, slots: Tensor, episodes: Tensor) -> None:
        if hasattr(self.policy, "reset"):
            self.policy.reset(slots)

    def act(self, obs: dict[str, Tensor], active: Tensor) -> Tensor:
        return self.policy.act(self.env.privileged())


def run_episodes(env, seeds: Sequence[int], hooks: Hooks, *,
                 progress: Callable[[int], None] | None = None) -> Outcomes:
    """Run one episode per seed (see the module docstring); returns the outcomes in seed order.

    ``progress`` is called with the number of finished episodes after each step where some end.
    """
    seeds = [int(s) for s in seeds]
    N, B = len(seeds), env.num_envs
    if N == 0:
        raise ValueError("run_episodes: no seeds given")
    dev = env.device
    t0 = time.perf_counter()
    success = np.zeros(N, bool)
    failure = np.zeros(N, np.int64)
    steps = np.zeros(N, np.int64)

    n0 = min(B, N)
    slot_episode = torch.full((B,), -1, dtype=torch.long)  # episode index per slot (-1: idle)
    slot_episode[:n0] = torch.arange(n0)
    active = torch.zeros(B, dtype=torch.bool, device=dev)
    active[:n0] = True
    next_k, finished, scene_steps = n0, 0, 0
    with env.rendering(False):  # the loop renders once per step, after the resets
        ids0 = torch.arange(n0, device=dev)
        env.reset(ids0, seeds[:n0])
        hooks.on_start(ids0, torch.arange(n0))
        while bool(active.any()):
            interrupts.check()  # a stop signal whose exception Python discarded still ends the run at this step
            obs = env.observe()
            action = hooks.act(obs, active)
            hooks.record(obs, action, active, slot_episode)
            _, _, done, info = env.step(action)
            scene_steps += int(active.sum())
            fin = done & active
            if not bool(fin.any()):
                continue
            ids = torch.nonzero(fin).flatten()
            ids_cpu = ids.cpu()
            eps = slot_episode[ids_cpu].numpy()
            ended = Finished(
                slots=ids_cpu, episodes=eps, seeds=[seeds[int(e)] for e in eps],
                success=info["success"][ids].cpu().numpy(), failure=info["failure"][ids].cpu().numpy(),
                steps=env.privileged()["steps"][ids].cpu().numpy().astype(np.int64),
            )
            success[eps], failure[eps], steps[eps] = ended.success, ended.failure, ended.steps
            hooks.on_end(ended)
            finished += len(eps)
            active[ids] = False
            slot_episode[ids_cpu] = -1
            n_new = min(len(ids), N - next_k)
            if n_new:  # refill from the remaining seeds; other ended slots go idle
                new_ids = ids[:n_new]
                new_eps = torch.arange(next_k, next_k + n_new)
                slot_episode[new_ids.cpu()] = new_eps
                env.reset(new_ids, seeds[next_k:next_k + n_new])
                active[new_ids] = True
                next_k += n_new
                hooks.on_start(new_ids, new_eps)
            if progress is not None:
                progress(finished)
    return Outcomes(seeds=seeds, success=success, failure=failure, steps=steps, scene_steps=scene_steps,
                    seconds=time.perf_counter() - t0)


__all__ = ["ExpertHooks", "Finished", "Hooks", "Outcomes", "run_episodes"]
