"""Episode file format: layout constants, :class:`Episode`, demo names, per-step signatures, shared file helpers.

Layout (what plain ``h5py`` and robomimic see)::

    /                      attrs: format = "graspsim-episodes-v1", graspsim_version, config (JSON)
    /data                  attrs: total (sum of num_samples), env_args (JSON: env_name, type, env_kwargs)
    /data/demo_K           attrs: num_samples (int), plus per-episode attrs (success, failure, seed, ...)
    /data/demo_K/obs/<key>         T,... per-step observations (rgb T,H,W,3 uint8; mask T,H,W uint8 0/1; ...)
    /data/demo_K/actions           T,A float32 (the expert's labels)
    /data/demo_K/privileged/<key>  T,... true state for analysis (never a policy input)
    /data/demo_K/<extra>           T,... optional per-step arrays (rewards, dones, executed_actions, ...)

``K`` counts from 0 in the order episodes were appended. Boolean arrays are stored as uint8 0/1 so any
HDF5 reader can use them. Image-like arrays (3 or more dimensions) are chunked and compressed.

The crash-safe writer is :mod:`graspsim.dataset.writer`, the readers :mod:`graspsim.dataset.read`, repair
:mod:`graspsim.dataset.repair`, the batched rollout buffer :mod:`graspsim.dataset.recorder`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import h5py
import numpy as np

FORMAT = "graspsim-episodes-v1"
DATA = "data"
OBS = "obs"
ACTIONS = "actions"
PRIVILEGED = "privileged"
MASK = "mask"
DEMO_PREFIX = "demo_"
RESERVED = (OBS, ACTIONS, PRIVILEGED)
PARTS_SUFFIX = ".parts"
_PART_RE = re.compile(r"^part-(\d{6,})\.h5$")
CHUNK_FRAMES = 16
"""Frames per compressed chunk of image-like arrays."""


def demo_name(k: int) -> str:
    return f"{DEMO_PREFIX}{k}"


def demo_index(name: str) -> int:
    """Index ``K`` of a group named ``demo_K`` (the sort key robomimic uses)."""
    return int(name[len(DEMO_PREFIX):])


def _default_env_args(config: dict) -> dict:
    sim = config.get("sim", config)
    return {"env_name": "graspsim.GraspEnv", "type": 2, "env_kwargs": sim if isinstance(sim, dict) else {}}


# ------------------------------------------------------------------------------------------ Episode
@dataclass
class Episode:
    """One episode of ``T`` steps, as numpy arrays with time first.

    ``obs``: policy observations (``rgb`` T,H,W,3 uint8; ``mask`` T,H,W uint8 0/1; ``gripper`` T,3 float32).
    ``actions``: T,A float32 labels. ``privileged``: true state per step (``tcp_pos`` T,3 m, ...).
    ``extras``: other per-step arrays stored beside ``actions`` (``rewards``, ``dones``,
    ``executed_actions``, ``learner_actions``...). ``attrs``: per-episode scalars or strings
    (``success``, ``failure``, ``seed``, ``iteration``, ``beta``...); ``num_samples`` is added on write.
    """

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    privileged: dict[str, np.ndarray] = field(default_factory=dict)
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def num_samples(self) -> int:
        return int(np.shape(self.actions)[0]) if np.ndim(self.actions) else 0

    def arrays(self) -> Iterator[tuple[str, np.ndarray]]:
        """(path inside the demo group, array) for every stored array."""
        for k, v in self.obs.items():
            yield f"{OBS}/{k}", v
        yield ACTIONS, self.actions
        for k, v in self.privileged.items():
            yield f"{PRIVILEGED}/{k}", v
        for k, v in self.extras.items():
            yield k, v

    def validate(self, where: str = "episode") -> None:
        """Raise ValueError unless every array is finite-typed numpy with ``T >= 1`` rows."""
        if not isinstance(self.obs, dict) or not self.obs:
            raise ValueError(f"{where}: obs must be a non-empty dict of arrays")
        for group in (self.obs, self.privileged, self.extras):
            for k in group:
                if not isinstance(k, str) or not k or "/" in k or k.startswith("."):
                    raise ValueError(f"{where}: invalid array name {k!r} (no '/', not empty)")
        clash = sorted(set(self.extras) & set(RESERVED))
        if clash:
            raise ValueError(f"{where}: extras may not be named {clash} (reserved)")
        T = self.num_samples
        if T < 1:
            raise ValueError(f"{where}: actions must be a T,A array with T >= 1; got shape {np.shape(self.actions)}")
        for path, v in self.arrays():
            if not isinstance(v, np.ndarray):
                raise ValueError(f"{where}: {path} must be a numpy array; got {type(v).__name__}")
            if v.ndim == 0 or v.shape[0] != T:
                raise ValueError(f"{where}: {path} has shape {v.shape}; expected {T} rows like actions")
            if v.dtype.kind not in "biuf":
                raise ValueError(f"{where}: {path} has unsupported dtype {v.dtype}")
        if self.actions.ndim != 2 or self.actions.dtype.kind != "f":
            raise ValueError(f"{where}: actions must be a float T,A array; got {self.actions.dtype} {self.actions.shape}")
        if not np.isfinite(self.actions).all():
            raise ValueError(f"{where}: actions contain NaN or inf")
        for k, v in self.attrs.items():
            if not isinstance(k, str) or not k or "/" in k:
                raise ValueError(f"{where}: invalid attribute name {k!r}")
            if not isinstance(v, (bool, int, float, str, np.generic)):
                raise ValueError(f"{where}: attribute {k!r} must be a scalar or string; got {type(v).__name__}")
        if "num_samples" in self.attrs and int(self.attrs["num_samples"]) != T:
            raise ValueError(f"{where}: attrs num_samples={self.attrs['num_samples']} but the episode has {T} steps")


def _storable(v: np.ndarray) -> np.ndarray:
    return v.astype(np.uint8) if v.dtype == np.bool_ else v


def _signature(ep: Episode) -> dict[str, tuple]:
    """Per-step shape and dtype of the arrays that every episode of a file must share (obs, actions)."""
    sig = {f"{OBS}/{k}": (tuple(v.shape[1:]), _storable(v[:0]).dtype.str) for k, v in ep.obs.items()}
    sig[ACTIONS] = (tuple(ep.actions.shape[1:]), ep.actions.dtype.str)
    return sig

def _attr_value(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.generic):
        return v.item()
    return v


def _open_h5(path: Path, what: str = "episode file") -> h5py.File:
    """Open ``path`` read-only; a clear ValueError for files that are not readable HDF5."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path}")
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory, not an HDF5 file")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise ValueError(f"{path} is not a readable HDF5 {what} ({e})") from e


def _sorted_demos(data: h5py.Group) -> list[str]:
    names = [n for n in data.keys() if n.startswith(DEMO_PREFIX) and n[len(DEMO_PREFIX):].isdigit()]
    return sorted(names, key=demo_index)


def parts_dir(path: str | os.PathLike) -> Path:
    """Folder holding the part files of an unconsolidated episode file ``path``."""
    p = Path(path)
    return p.parent / (p.name + PARTS_SUFFIX)


def _check_episode_file(f: h5py.File, path: Path) -> h5py.Group:
    if DATA not in f:
        raise ValueError(f"{path} has no '{DATA}' group; not a robomimic-style episode file")
    return f[DATA]


def repair_hint(path: str | os.PathLike) -> str:
    return f"To keep the readable episodes and drop the damaged ones, run: graspsim inspect {path} --repair"
