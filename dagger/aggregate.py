"""The aggregated DAgger dataset: every visited state with the expert's label, in memory and on disk.

In memory (:class:`Aggregate`): ``mask`` N,H,W bool, ``gripper`` N,3 float32, ``actions`` N,4 float32
(expert labels, simulator units; N,5 and N,5 with the wrist), ``iteration`` N int64, on the training device. On disk: one episode
file per DAgger iteration, ``data/iter_NNN.h5`` in the layout of ``graspsim collect`` (see
:mod:`graspsim.dataset`; obs ``mask`` and ``gripper`` are what the learner saw, ``actions`` the expert's
labels, extras ``executed_actions`` and ``expert_driven``). A file is complete once its iteration is
listed in ``metrics.json``; :meth:`Aggregate.from_files` rebuilds the buffer on resume.

Under ``torchrun`` each rank rolls out its share of an iteration's episodes and writes them to
``data/iter_NNN.rankR.h5`` (:func:`part_file`); rank 0 then joins the parts into ``data/iter_NNN.h5`` by
episode index (:func:`join_iteration`), so the file is the one a single process writes. Each rank keeps only
its own share in memory (``Aggregate.from_files(..., rank, world)`` on resume).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from graspsim.dataset import ACTIONS, Episode, EpisodeWriter, join, load_steps
from graspsim.distributed import shard_bounds
from graspsim.env import GRIPPER_DIM
from graspsim.keys import CONTROL_OBS_KEYS, GRIPPER, MASK


def iteration_file(out: Path, it: int) -> Path:
    return Path(out) / "data" / f"iter_{it:03d}.h5"


def part_file(out: Path, it: int, rank: int) -> Path:
    """Rank ``rank``'s share of iteration ``it`` under torchrun (removed once joined into :func:`iteration_file`)."""
    return Path(out) / "data" / f"iter_{it:03d}.rank{rank}.h5"


def write_iteration(path: Path, episodes: Sequence[Episode], config: dict, world_size: int = 1) -> None:
    """Write one iteration's episodes to ``path`` (an unfinished earlier attempt is replaced); the file attribute
    ``world_size`` records how many processes rolled them out."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with EpisodeWriter(path, config, overwrite=path.exists(), attrs={"world_size": int(world_size)}) as w:
        w.append(list(episodes))


def join_iteration(out: Path, it: int, world_size: int, config: dict) -> Path:
    """Join the ranks' part files of iteration ``it`` into :func:`iteration_file` (by episode index, the order
    a single process writes) and remove the parts; returns the joined file."""
    parts = [part_file(out, it, r) for r in range(world_size)]
    path = iteration_file(out, it)
    with EpisodeWriter(path, config, overwrite=path.exists(), attrs={"world_size": int(world_size)}) as w:
        join(w, parts)
    for p in parts:
        p.unlink()
    return path


class Aggregate:
    """Growing training set of (mask, gripper, expert action) triples on ``device``."""

    def __init__(self, image_size: int, device: str | torch.device = "cpu", gripper_dim: int = GRIPPER_DIM,
                 action_dim: int = 4):
        """``gripper_dim`` and ``action_dim``: 3 and 4 for sphere-only scenes, 9 (5 without the fingertip senses) and 5
        with the wrist (``SimConfig.gripper_dim`` / ``action_dim``)."""
        self.device = torch.device(device)
        H = image_size
        self.mask = torch.zeros((0, H, H), dtype=torch.bool, device=self.device)
        self.gripper = torch.zeros((0, gripper_dim), dtype=torch.float32, device=self.device)
        self.actions = torch.zeros((0, action_dim), dtype=torch.float32, device=self.device)
        self.iteration = torch.zeros((0,), dtype=torch.long, device=self.device)
        self.weight = torch.zeros((0,), dtype=torch.float64, device=self.device)  # N: 1 / episode length
        self._cum: Tensor | None = None

    def __len__(self) -> int:
        return int(self.mask.shape[0])

    def add_arrays(self, mask: np.ndarray, gripper: np.ndarray, actions: np.ndarray, iteration: int,
                   lengths: Sequence[int] | None = None) -> None:
        """Append ``mask`` N,H,W (0/1), ``gripper`` N,3, ``actions`` N,4 (both N,5 with the wrist) from one iteration, made of episodes of
        ``lengths`` steps (consecutive; default one episode of N steps)."""
        n = len(mask)
        lengths = [n] if lengths is None else [int(t) for t in lengths]
        if sum(lengths) != n or min(lengths, default=1) <= 0:
            raise ValueError(f"Aggregate: episode lengths {lengths[:8]}... must be positive and sum to {n}")
        if mask.ndim != 3 or mask.shape[1:] != self.mask.shape[1:]:
            raise ValueError(f"Aggregate: masks must be N,{self.mask.shape[1]},{self.mask.shape[2]}; got {mask.shape}")
        gd, ad = self.gripper.shape[1], self.actions.shape[1]
        if gripper.shape != (n, gd) or actions.shape != (n, ad):
            raise ValueError(f"Aggregate: gripper must be ({n}, {gd}) and actions ({n}, {ad}); "
                             f"got {gripper.shape}, {actions.shape}" + (
                                 " (data of sphere-only scenes and of scenes with the wrist cannot be mixed)"
                                 if gripper.shape[1:] != (gd,) or actions.shape[1:] != (ad,) else ""))
        if not (np.isfinite(gripper).all() and np.isfinite(actions).all()):
            raise ValueError("Aggregate: gripper/actions contain NaN or inf")
        d = self.device
        self.mask = torch.cat([self.mask, torch.as_tensor(mask, device=d).bool()])
        self.gripper = torch.cat([self.gripper, torch.as_tensor(gripper, device=d).float()])
        self.actions = torch.cat([self.actions, torch.as_tensor(actions, device=d).float()])
        self.iteration = torch.cat([self.iteration, torch.full((n,), iteration, dtype=torch.long, device=d)])
        w = np.repeat(1.0 / np.asarray(lengths, np.float64), lengths)
        self.weight = torch.cat([self.weight, torch.as_tensor(w, device=d)])
        self._cum = None

    def add_episodes(self, episodes: Sequence[Episode], iteration: int) -> None:
        if not episodes:
            return
        self.add_arrays(np.concatenate([e.obs[MASK] for e in episodes]),
                        np.concatenate([e.obs[GRIPPER] for e in episodes]),
                        np.concatenate([e.actions for e in episodes]), iteration,
                        [e.num_samples for e in episodes])

    def add_file(self, path: str | os.PathLike, iteration: int, rank: int = 0, world_size: int = 1) -> None:
        """Add the episodes of an iteration file; with ``world_size`` > 1 only rank ``rank``'s contiguous share of
        them (the file's episodes are in episode order, so this is the share that rank rolled out)."""
        steps = load_steps(path, obs_keys=CONTROL_OBS_KEYS)
        if world_size > 1:
            n = int(steps["episode"].max()) + 1
            lo, hi = shard_bounds(n, rank, world_size)
            keep = (steps["episode"] >= lo) & (steps["episode"] < hi)
            steps = {k: v[keep] for k, v in steps.items()}
            if not keep.any():
                return
        _, lengths = np.unique(steps["episode"], return_counts=True)  # episodes are stored consecutively
        self.add_arrays(steps[MASK], steps[GRIPPER], steps[ACTIONS], iteration, lengths.tolist())

    @classmethod
    def from_files(cls, paths: Sequence[Path], image_size: int, device: str | torch.device = "cpu",
                   rank: int = 0, world_size: int = 1, gripper_dim: int = GRIPPER_DIM,
                   action_dim: int = 4) -> "Aggregate":
        agg = cls(image_size, device, gripper_dim, action_dim)
        for it, p in enumerate(paths):
            if not Path(p).is_file():
                raise FileNotFoundError(f"aggregated data of finished iteration {it} is missing: {p}")
            agg.add_file(p, it, rank, world_size)
        return agg

    def sample(self, batch_size: int, generator: torch.Generator, by: str = "step") -> tuple[Tensor, Tensor, Tensor]:
        """Minibatch with replacement: (mask B,H,W bool, gripper B,3 (B,9 or B,5 with the wrist), actions B,4 (B,5)).

        ``by="step"``: every stored step equally likely. ``by="episode"``: every episode equally likely
        (then a uniform step of it), so long failed episodes (a learner hovering until the timeout) do
        not outweigh short successful ones."""
        if len(self) == 0:
            raise ValueError("Aggregate.sample: the dataset is empty")
        if by == "step":
            idx = torch.randint(0, len(self), (batch_size,), generator=generator, device=self.device)
        elif by == "episode":
            if self._cum is None:
                self._cum = torch.cumsum(self.weight, 0)
            u = torch.rand(batch_size, generator=generator, device=self.device, dtype=torch.float64) * self._cum[-1]
            idx = torch.searchsorted(self._cum, u, right=True).clamp_max(len(self) - 1)
        else:
            raise ValueError(f"Aggregate.sample: by must be 'step' or 'episode'; got {by!r}")
        return self.mask[idx], self.gripper[idx], self.actions[idx]


__all__ = ["Aggregate", "iteration_file", "join_iteration", "part_file", "write_iteration"]
