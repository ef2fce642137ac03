"""A batched rollout buffer: per-step ``B,...`` tensors in, finished episodes (:class:`~graspsim.dataset.format.Episode`) out."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from ..keys import RGB
from ..validate import positive_int
from .format import ACTIONS, Episode


# ------------------------------------------------------------------------------------------ recorder
class EpisodeRecorder:
    """Collect batched per-step tensors and emit finished :class:`Episode`s for the scenes that end.

    Buffers are ``B,cap,...`` tensors on ``buffer_device`` (grown by doubling), written with one
    vectorized scatter per key per step; only finished episodes are converted to numpy (a Python loop
    over finished episodes, never over all scenes).

    Args:
        num_envs: batch size ``B``.
        image_keys: obs keys given as ``B,C,H,W`` and stored as ``T,H,W,C``.
        capacity: initial steps per scene (grows as needed).
        buffer_device: where the buffers live (CPU by default: episodes are written from there).
    """

    def __init__(self, num_envs: int, image_keys: Sequence[str] = (RGB,), capacity: int = 64,
                 buffer_device: str | torch.device = "cpu"):
        positive_int("EpisodeRecorder", "num_envs", num_envs)
        positive_int("EpisodeRecorder", "capacity", capacity)
        self.num_envs = num_envs
        self.image_keys = tuple(image_keys)
        self.capacity = capacity
        self.device = torch.device(buffer_device)
        self.lengths = torch.zeros(num_envs, dtype=torch.long, device=self.device)  # B: steps recorded
        self._buf: dict[str, dict[str, Tensor]] = {}
        self._order: tuple | None = None

    def record(self, obs: dict[str, Tensor], actions: Tensor, privileged: dict[str, Tensor] | None = None,
               extras: dict[str, Tensor] | None = None, active: Tensor | None = None) -> None:
        """Append one step for the scenes in ``active`` (B bool; default all). Every tensor is ``B,...``."""
        groups = {"obs": obs, "actions": {ACTIONS: actions}, "privileged": privileged or {}, "extras": extras or {}}
        order = tuple((g, tuple(sorted(d))) for g, d in groups.items())
        if self._order is None:
            self._order = order
        elif order != self._order:
            raise ValueError(f"EpisodeRecorder.record: keys changed from {self._order} to {order}")
        B = self.num_envs
        if active is None:
            idx = torch.arange(B, device=self.device)
        else:
            active = torch.as_tensor(active, device=self.device)
            if active.shape != (B,) or active.dtype != torch.bool:
                raise ValueError(f"EpisodeRecorder.record: active must be a ({B},) bool tensor; got {tuple(active.shape)} {active.dtype}")
            idx = torch.nonzero(active).flatten()
        if idx.numel() == 0:
            return
        t = self.lengths[idx]
        if int(t.max()) >= self.capacity:
            self._grow(int(t.max()) + 1)
        for gname, d in groups.items():
            bufs = self._buf.setdefault(gname, {})
            for k, v in d.items():
                if not isinstance(v, Tensor) or v.dim() == 0 or v.shape[0] != B:
                    raise ValueError(f"EpisodeRecorder.record: {gname}/{k} must be a tensor with leading dim {B}; "
                                     f"got {getattr(v, 'shape', type(v).__name__)}")
                v = v.detach()
                if gname == "obs" and k in self.image_keys:
                    if v.dim() != 4:
                        raise ValueError(f"EpisodeRecorder.record: image obs {k} must be B,C,H,W; got {tuple(v.shape)}")
                    v = v.permute(0, 2, 3, 1)
                if v.dtype == torch.bool:
                    v = v.to(torch.uint8)
                v = v.to(self.device)
                buf = bufs.get(k)
                if buf is None:
                    buf = bufs[k] = torch.zeros((B, self.capacity) + tuple(v.shape[1:]), dtype=v.dtype, device=self.device)
                elif buf.shape[2:] != v.shape[1:] or buf.dtype != v.dtype:
                    raise ValueError(f"EpisodeRecorder.record: {gname}/{k} changed from {tuple(buf.shape[2:])} {buf.dtype} "
                                     f"to {tuple(v.shape[1:])} {v.dtype}")
                buf[idx, t] = v[idx]
        self.lengths[idx] += 1

    def _grow(self, need: int) -> None:
        cap = self.capacity
        while cap < need:
            cap *= 2
        for bufs in self._buf.values():
            for k, b in bufs.items():
                nb = torch.zeros((b.shape[0], cap) + tuple(b.shape[2:]), dtype=b.dtype, device=b.device)
                nb[:, : b.shape[1]] = b
                bufs[k] = nb
        self.capacity = cap

    def finish(self, env_ids: Tensor | Sequence[int], attrs: Sequence[dict] | None = None) -> list[Episode]:
        """Emit the episodes of scenes ``env_ids`` (in the given order) and clear their buffers.

        ``attrs[i]`` becomes the attrs of the i-th episode. Scenes with no recorded step raise ValueError.
        """
        ids = [int(i) for i in torch.as_tensor(env_ids).flatten().tolist()]
        if attrs is not None and len(attrs) != len(ids):
            raise ValueError(f"EpisodeRecorder.finish: {len(ids)} env ids but {len(attrs)} attrs")
        lengths = self.lengths.tolist()
        out = []
        for j, i in enumerate(ids):
            if not 0 <= i < self.num_envs:
                raise ValueError(f"EpisodeRecorder.finish: env id {i} outside 0..{self.num_envs - 1}")
            T = lengths[i]
            if T == 0:
                raise ValueError(f"EpisodeRecorder.finish: scene {i} has no recorded steps")
            take = {g: {k: b[i, :T].cpu().numpy().copy() for k, b in bufs.items()} for g, bufs in self._buf.items()}
            out.append(Episode(obs=take["obs"], actions=take["actions"][ACTIONS], privileged=take.get("privileged", {}),
                               extras=take.get("extras", {}), attrs=dict(attrs[j]) if attrs is not None else {}))
        self.discard(ids)
        return out

    def discard(self, env_ids: Tensor | Sequence[int]) -> None:
        """Forget the recorded steps of scenes ``env_ids`` (e.g. episodes cut short)."""
        ids = torch.as_tensor(env_ids, dtype=torch.long, device=self.device).flatten()
        self.lengths[ids] = 0
