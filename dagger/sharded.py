"""A rollout whose seeds are split over the ranks of a ``torchrun`` job (:mod:`graspsim.distributed`).

Rank ``r`` runs the contiguous block ``shard_bounds(N, r, W)`` of the seed list through :func:`graspsim.dagger.rollout.rollout`
in an environment of its own; the per-episode outcomes of all ranks are gathered and concatenated in rank order,
which is seed order. In a job of one this is :func:`graspsim.dagger.rollout.rollout` itself.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from graspsim import distributed

from .rollout import RolloutResult, rollout


def sharded_rollout(make_env: Callable[[int], object], seeds: Sequence[int], *, capture: int = 0,
                    **kwargs) -> tuple[RolloutResult, RolloutResult]:
    """Roll out this rank's share of ``seeds``; returns ``(local, merged)``.

    ``make_env(n)`` builds the environment for a share of ``n`` episodes (closed afterwards if it has ``close``).
    ``local`` holds this rank's episodes (``attrs["episode_index"]`` counts in the whole seed list) and its
    captured frames (keyed by position in the whole list; ``capture`` counts from the list's start).
    ``merged`` has every rank's outcomes in seed order (no episodes; frames of every rank), the same object as
    ``local`` in a job of one. Other keyword arguments go to :func:`graspsim.dagger.rollout.rollout`.
    """
    ctx = distributed.context()
    seeds = [int(s) for s in seeds]
    lo, hi = distributed.shard_bounds(len(seeds), ctx.rank, ctx.world_size)
    if hi <= lo:
        raise ValueError(f"{len(seeds)} episodes cannot be shared by {ctx.world_size} processes (each needs at "
                         "least one); ask for more episodes or start fewer processes")
    env = make_env(hi - lo)
    try:
        local = rollout(env, seeds[lo:hi], capture=max(0, min(capture - lo, hi - lo)), **kwargs)
    finally:
        if hasattr(env, "close"):
            env.close()
    if not ctx.distributed:
        return local, local
    for ep in local.episodes:
        ep.attrs["episode_index"] = int(ep.attrs["episode_index"]) + lo
    local.frames = {k + lo: v for k, v in local.frames.items()}
    parts = distributed.all_gather_object({
        "success": local.success, "failure": local.failure, "steps": local.steps,
        "expert_driven": local.expert_driven, "seeds": local.seeds, "frames": local.frames,
        "scene_steps": local.scene_steps, "seconds": local.seconds, "kinds": local.kinds,
    })
    frames: dict = {}
    for p in parts:
        frames.update(p["frames"])
    merged = RolloutResult(
        success=np.concatenate([p["success"] for p in parts]), failure=np.concatenate([p["failure"] for p in parts]),
        steps=np.concatenate([p["steps"] for p in parts]),
        expert_driven=np.concatenate([p["expert_driven"] for p in parts]),
        seeds=[s for p in parts for s in p["seeds"]], frames=frames,
        scene_steps=sum(p["scene_steps"] for p in parts), seconds=max(p["seconds"] for p in parts),
        kinds=None if any(p["kinds"] is None for p in parts) else np.concatenate([p["kinds"] for p in parts]),
    )
    return local, merged


__all__ = ["sharded_rollout"]
