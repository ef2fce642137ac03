"""Readers of episode files: whole episodes (:class:`~graspsim.dataset.format.Episode`), flat step arrays,
per-demo attributes and a summary (:func:`describe`)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Collection, Iterable, Iterator, Sequence

import h5py
import numpy as np

from ..keys import CONTROL_OBS_KEYS
from .format import (
    ACTIONS, MASK, OBS, PRIVILEGED, RESERVED, _PART_RE, Episode, _attr_value, _check_episode_file, _open_h5,
    _sorted_demos, demo_index, demo_name, parts_dir, repair_hint,
)


def _read_demo(g: h5py.Group, obs_keys: Collection[str] | None = None) -> Episode:
    obs_g = g[OBS]
    names = list(obs_g.keys()) if obs_keys is None else list(obs_keys)
    missing = [k for k in names if k not in obs_g]
    if missing:
        raise KeyError(f"{g.name}: no obs key(s) {missing}; available: {sorted(obs_g.keys())}")
    obs = {k: obs_g[k][()] for k in names}
    priv = {k: v[()] for k, v in g[PRIVILEGED].items()} if PRIVILEGED in g else {}
    extras = {k: v[()] for k, v in g.items() if k not in RESERVED and isinstance(v, h5py.Dataset)}
    attrs = {k: _attr_value(v) for k, v in g.attrs.items() if k != "num_samples"}
    return Episode(obs=obs, actions=g[ACTIONS][()], privileged=priv, extras=extras, attrs=attrs)


# ------------------------------------------------------------------------------------------ readers
def _demo(data: h5py.Group, name: str, path: Path) -> h5py.Group:
    """``data[name]`` with a clear error when it cannot be opened (e.g. a part file was deleted)."""
    try:
        return data[name]
    except (KeyError, OSError) as e:
        link = data.get(name, getlink=True)
        where = f" (stored in {link.filename}, beside the file)" if isinstance(link, h5py.ExternalLink) else ""
        raise ValueError(f"{path}: {name} cannot be read{where}: {e}. {repair_hint(path)}") from e


def read_episodes(path: str | os.PathLike, keys: Collection[str] | None = None,
                  demos: Iterable[int] | None = None) -> Iterator[Episode]:
    """Yield the episodes of ``path`` in demo order (``demo_0``, ``demo_1``...).

    ``keys``: observation keys to load (None = all). ``demos``: indices K to read (None = all).
    Actions, privileged arrays, extras and attrs are always loaded.
    """
    path = Path(path)
    with _open_h5(path) as f:
        data = _check_episode_file(f, path)
        names = _sorted_demos(data)
        if demos is not None:
            wanted = [demo_name(int(k)) for k in demos]
            missing = [n for n in wanted if n not in data]
            if missing:
                raise KeyError(f"{path}: no demo(s) {missing}; the file has {len(names)} demos")
            names = wanted
        for n in names:
            yield _read_demo(_demo(data, n, path), keys)


def load_steps(path: str | os.PathLike, obs_keys: Sequence[str] = CONTROL_OBS_KEYS,
               extra_keys: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """All steps of all demos concatenated: ``{obs key: N,..., "actions": N,A, extra key: N,...,
    "episode": N int64 (demo index K), "step": N int64 (step within the episode)}``."""
    path = Path(path)
    with _open_h5(path) as f:
        data = _check_episode_file(f, path)
        names = _sorted_demos(data)
        if not names:
            raise ValueError(f"{path} holds no episodes")
        lengths = [int(_demo(data, n, path).attrs["num_samples"]) for n in names]
        total = sum(lengths)
        first = data[names[0]]
        sources = {k: f"{OBS}/{k}" for k in obs_keys}
        sources[ACTIONS] = ACTIONS
        sources.update({k: k for k in extra_keys})
        for k, src in sources.items():
            if src not in first:
                raise KeyError(f"{path}: {names[0]} has no array '{src}'")
        out = {k: np.empty((total,) + first[src].shape[1:], first[src].dtype) for k, src in sources.items()}
        out["episode"] = np.repeat(np.array([demo_index(n) for n in names], np.int64), lengths)
        out["step"] = np.concatenate([np.arange(t, dtype=np.int64) for t in lengths])
        at = 0
        for n, t in zip(names, lengths):
            g = _demo(data, n, path)
            for k, src in sources.items():
                ds = g[src]
                if ds.shape[0] != t:
                    raise ValueError(f"{path}: {n}/{src} has {ds.shape[0]} rows but num_samples is {t}")
                ds.read_direct(out[k], dest_sel=np.s_[at:at + t])
            at += t
    return out


def demo_attrs(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Per-demo attributes (including ``num_samples``) in demo order, without loading arrays."""
    path = Path(path)
    with _open_h5(path) as f:
        data = _check_episode_file(f, path)
        return [{k: _attr_value(v) for k, v in _demo(data, n, path).attrs.items()} for n in _sorted_demos(data)]


def describe(path: str | os.PathLike) -> dict[str, Any]:
    """Summary of an episode file: counts, success rate, failure causes, array keys/shapes/dtypes."""
    path = Path(path)
    with _open_h5(path) as f:
        data = _check_episode_file(f, path)
        names = _sorted_demos(data)
        attrs = [{k: _attr_value(v) for k, v in _demo(data, n, path).attrs.items()} for n in names]
        arrays: dict[str, dict[str, Any]] = {}
        if names:
            def visit(name: str, obj: Any) -> None:
                if isinstance(obj, h5py.Dataset):
                    arrays[name] = {"shape": list(obj.shape), "dtype": str(obj.dtype),
                                    "compression": obj.compression}
            data[names[0]].visititems(visit)
        external = any(isinstance(data.get(n, getlink=True), h5py.ExternalLink) for n in names)
        config = _attr_value(f.attrs.get("config", "{}"))
        fmt = _attr_value(f.attrs.get("format", ""))
        total = int(_attr_value(data.attrs.get("total", -1)))
        filter_keys = {k: int(v.shape[0]) for k, v in f[MASK].items()} if MASK in f else {}
    lengths = np.array([int(a.get("num_samples", 0)) for a in attrs], np.int64)
    known = np.array(["success" in a for a in attrs], bool)  # foreign files may not record success at all
    success = np.array([bool(a.get("success", False)) for a in attrs], bool)
    failures: dict[str, int] = {}
    for a in attrs:
        if "failure" in a:
            failures[str(a["failure"])] = failures.get(str(a["failure"]), 0) + 1
    size = path.stat().st_size
    pdir = parts_dir(path)
    if external and pdir.is_dir():
        size += sum(p.stat().st_size for p in pdir.iterdir() if _PART_RE.match(p.name))
    return {
        "path": str(path),
        "format": fmt,
        "episodes": len(names),
        "steps": int(lengths.sum()),
        "total_attr": total,
        "success_rate": float(success[known].mean()) if known.any() else math.nan,
        "success_known": int(known.sum()),
        "failures": failures,
        "median_steps_success": float(np.median(lengths[success])) if success.any() else math.nan,
        "mean_steps": float(lengths.mean()) if len(names) else math.nan,
        "arrays": arrays,
        "consolidated": not external,
        "filter_keys": filter_keys,
        "bytes": int(size),
        "config": json.loads(config) if config else {},
    }
