"""Episode files: robomimic-style HDF5, written crash-safely, read back as episodes or flat step arrays.

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

Crash safety
------------
HDF5 cannot be modified in place safely: a process killed during a write can leave the library's
metadata half-updated and the whole file unreadable. The writer therefore never modifies a committed
file. Each :meth:`EpisodeWriter.append` does:

1. write the new episodes into a fresh *part* file ``<name>.parts/part-NNNNNN.h5`` (temporary name,
   fsync, atomic rename);
2. write a new small *index* file holding the attributes and one HDF5 external link per episode
   (``data/demo_K`` -> ``part-NNNNNN.h5:/data/demo_K``), fsync, and atomically rename it over ``PATH``.

Step 2's rename is the commit point: at every instant ``PATH`` is a complete HDF5 file that plain
``h5py`` opens (external links resolve relative to the file's folder), holding every committed
episode. A crash leaves at worst an unreferenced part or a temporary file, which the next writer
deletes. :meth:`EpisodeWriter.close` *consolidates*: it copies every episode (compressed chunks are
copied as they are) into one self-contained file, renames it over ``PATH`` and removes the parts
folder. Resuming a consolidated file hard-links it into the parts folder as the first part, so old
episodes are never rewritten while appending. Each append costs the new episodes plus an index of one
link per episode, so appending stays cheap for thousands of episodes.

Overwriting an existing file writes the new one under a hidden name beside it (``.<name>.overwrite``) and
renames it over ``PATH`` only when it is closed; until then (and after a failure, :meth:`EpisodeWriter.abort`)
the old file is untouched.

Repair: if a part file is damaged or missing (disk trouble, a copy that missed it), :func:`repair` rewrites the
file with every episode that still reads back, renumbered in order, and reports the dropped ones; ``graspsim
inspect PATH --repair`` runs it, and ``graspsim collect --resume`` continues the repaired file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import shutil
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterable, Iterator, Sequence

import h5py
import numpy as np
import torch
from torch import Tensor

from .fileio import fsync_dir, replace_atomically

try:
    import fcntl
except ImportError:  # not POSIX: no writer lock
    fcntl = None

log = logging.getLogger(__name__)

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


def _write_demo(group: h5py.Group, ep: Episode, compression: str | None, level: int | None) -> None:
    for path, v in ep.arrays():
        v = _storable(np.ascontiguousarray(v))
        if v.ndim >= 3 and compression:
            chunks = (min(v.shape[0], CHUNK_FRAMES),) + v.shape[1:]
            group.create_dataset(path, data=v, chunks=chunks, compression=compression,
                                 compression_opts=level if compression == "gzip" else None, shuffle=False)
        else:
            group.create_dataset(path, data=v)
    group.attrs["num_samples"] = np.int64(ep.num_samples)
    for k, v in ep.attrs.items():
        if k != "num_samples":
            group.attrs[k] = v


def _attr_value(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.generic):
        return v.item()
    return v


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


# ------------------------------------------------------------------------------------------ file utils
@contextlib.contextmanager
def _sigint_deferred():
    """Hold back Ctrl-C (SIGINT) until the block ends, so a commit is never half-recorded in memory."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    old = signal.signal(signal.SIGINT, lambda *a: caught.append(a))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if caught:
            raise KeyboardInterrupt


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


def _lock_path(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


def _acquire_lock(path: Path) -> int | None:
    """Take the one-writer lock of episode file ``path`` (POSIX; None elsewhere); ValueError if it is held."""
    if fcntl is None:
        return None
    lock = _lock_path(path)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        raise ValueError(f"{path} is being written by another process (lock {lock} is held)") from e
    return fd


def _release_lock(path: Path, fd: int | None) -> None:
    if fd is None:
        return
    with contextlib.suppress(OSError):
        _lock_path(path).unlink()
    os.close(fd)


def _staging_path(path: Path) -> Path:
    """Where an --overwrite writes the new file until it is closed (hidden, beside ``path``)."""
    return path.parent / f".{path.name}.overwrite"


def parts_dir(path: str | os.PathLike) -> Path:
    """Folder holding the part files of an unconsolidated episode file ``path``."""
    p = Path(path)
    return p.parent / (p.name + PARTS_SUFFIX)


def flatten_config(d: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists kept as values)."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(flatten_config(v, key))
        else:
            out[key] = v
    return out


def config_differences(old: dict, new: dict, ignore: Collection[str] = ()) -> list[str]:
    """Dotted keys whose values differ between two configs (``ignore`` lists top-level or dotted keys)."""
    a, b = flatten_config(json.loads(json.dumps(old))), flatten_config(json.loads(json.dumps(new)))
    ign = set(ignore)

    def ignored(k: str) -> bool:
        return any(k == i or k.startswith(i + ".") for i in ign)

    return sorted(k for k in set(a) | set(b) if not ignored(k) and a.get(k, "<missing>") != b.get(k, "<missing>"))


# ------------------------------------------------------------------------------------------ writer
class EpisodeWriter:
    """Append episodes to a robomimic-style HDF5 file; crash-safe (see the module docstring).

    Args:
        path: the ``.h5`` file. Its folder must exist and be writable.
        config: the resolved run configuration (JSON-serializable); stored as the file attr ``config``.
        resume: continue an existing file (its stored config must equal ``config`` up to ``ignore_keys``);
            a missing file is started fresh.
        overwrite: replace an existing file. Without ``resume`` or ``overwrite`` an existing file is
            refused with FileExistsError.
        env_args: robomimic ``env_args`` (dict with env_name, type, env_kwargs); default derived from
            ``config["sim"]``.
        ignore_keys: config keys (top-level or dotted) that may differ on resume (e.g. ``episodes``).
        compression: ``"gzip"``, ``"lzf"`` or None, for arrays with 3+ dimensions (images, masks).
        compression_level: gzip level 0-9.
        consolidate: on :meth:`close`, merge all parts into one self-contained file (default True).

    ``append`` is durable when it returns; a crash during it loses at most that call's episodes.
    Only one writer per file at a time (enforced with a lock file on POSIX).
    """

    def __init__(self, path: str | os.PathLike, config: dict, *, resume: bool = False, overwrite: bool = False,
                 env_args: dict | None = None, ignore_keys: Collection[str] = (), compression: str | None = "gzip",
                 compression_level: int = 1, consolidate: bool = True):
        self.path = self.final = Path(path)  # path: where the index is written; final: the file the caller named
        if resume and overwrite:
            raise ValueError("EpisodeWriter: choose either resume or overwrite, not both")
        if compression not in (None, "gzip", "lzf"):
            raise ValueError(f"EpisodeWriter: compression must be 'gzip', 'lzf' or None; got {compression!r}")
        if not (isinstance(compression_level, int) and 0 <= compression_level <= 9):
            raise ValueError(f"EpisodeWriter: compression_level must be an int in 0..9; got {compression_level!r}")
        try:
            self._config_json = json.dumps(config, sort_keys=True)
        except (TypeError, ValueError) as e:
            raise ValueError(f"EpisodeWriter: config is not JSON-serializable ({e})") from e
        if not isinstance(config, dict):
            raise ValueError(f"EpisodeWriter: config must be a dict; got {type(config).__name__}")
        self.config = json.loads(self._config_json)
        self.env_args = env_args if env_args is not None else _default_env_args(self.config)
        self._env_args_json = json.dumps(self.env_args, sort_keys=True)
        self.compression, self.compression_level, self.consolidate = compression, compression_level, consolidate
        self.parts = parts_dir(self.path)
        # committed state: demo names in order, where each lives (None = inside PATH itself), lengths
        self._demos: list[str] = []
        self._where: dict[str, str | None] = {}
        self._lengths: dict[str, int] = {}
        self._signature: dict[str, tuple] | None = None
        self._next_part = 0
        self._masks: dict[str, list[str]] = {}  # robomimic filter keys (kept from a resumed file)
        self._masks_dirty = False
        self._closed = False
        self._lock_fd: int | None = None

        folder = self.path.parent
        if not folder.is_dir():
            raise FileNotFoundError(f"output folder does not exist: {folder} (for {self.path})")
        if self.path.is_dir():
            raise ValueError(f"output path {self.path} is a directory; give a .h5 file path")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(f"output folder is not writable: {folder}")
        exists = self.path.exists()
        if exists and not (resume or overwrite):
            raise FileExistsError(f"{self.path} already exists; resume it (--resume) or replace it (--overwrite)")
        if exists and resume:
            self._load_existing(ignore_keys)  # validates before anything is written
        self._created = not exists  # this writer starts the file (abort() removes it if nothing was committed)
        self._lock()
        try:
            self._remove_stale_temps()
            if exists and overwrite:
                # the new file is written beside the old one and replaces it only on close (see close/abort)
                log.info("overwriting %s (the old file is kept until the new one is closed)", self.final)
                self.path = _staging_path(self.final)
                self.parts = parts_dir(self.path)
            elif resume and not exists:
                log.info("%s does not exist; starting a new file", self.path)
            if not (exists and resume):
                self._write_index()
            self._collect_garbage()
        except BaseException:
            self._unlock()
            raise

    # ---------------------------------------------------------------- public API
    @property
    def num_episodes(self) -> int:
        return len(self._demos)

    @property
    def num_steps(self) -> int:
        return sum(self._lengths.values())

    @property
    def demo_names(self) -> list[str]:
        return list(self._demos)

    def append(self, episodes: Sequence[Episode]) -> list[str]:
        """Commit ``episodes`` (durable on return). Returns the new demo names ``demo_K``.

        Every episode must share the per-step shapes and dtypes of ``obs`` and ``actions`` with the
        episodes already in the file; violations raise ValueError before anything is written.
        """
        if self._closed:
            raise ValueError(f"EpisodeWriter for {self.path} is closed")
        episodes = list(episodes)
        if not episodes:
            return []
        sig = self._signature
        for i, ep in enumerate(episodes):
            if not isinstance(ep, Episode):
                raise ValueError(f"append: item {i} is a {type(ep).__name__}, not an Episode")
            ep.validate(f"episode {i}")
            s = _signature(ep)
            if sig is None:
                sig = s
            elif s != sig:
                bad = sorted(k for k in set(s) | set(sig) if s.get(k) != sig.get(k))
                raise ValueError(
                    f"episode {i}: per-step shape/dtype of {bad} differs from the file's "
                    f"({[sig.get(k) for k in bad]} expected, got {[s.get(k) for k in bad]})"
                )
        start = self.num_episodes
        names = [demo_name(start + i) for i in range(len(episodes))]
        self.parts.mkdir(exist_ok=True)
        with _sigint_deferred():
            where = dict(self._where)
            embedded = [n for n, w in where.items() if w is None]
            if embedded:  # resumed a consolidated file: keep its episodes in place as the first part
                base = self._part_name(self._next_part)
                self._link_or_copy(self.path, self.parts / base)
                self._next_part += 1
                where.update({n: base for n in embedded})
            part = self._part_name(self._next_part)
            with replace_atomically(self.parts / part, durable=True) as tmp, h5py.File(tmp, "w") as f:
                data = f.create_group(DATA)
                for name, ep in zip(names, episodes):
                    _write_demo(data.create_group(name), ep, self.compression, self.compression_level)
            self._next_part += 1
            where.update({n: part for n in names})
            lengths = dict(self._lengths)
            lengths.update({n: ep.num_samples for n, ep in zip(names, episodes)})
            self._write_index(self._demos + names, where, lengths)  # commit point
            self._masks_dirty = False
            self._demos += names
            self._where, self._lengths, self._signature = where, lengths, sig
        return names

    def set_filter_keys(self, keys: dict[str, Iterable[int]]) -> None:
        """Set robomimic filter keys (``mask/<key>``: a subset of demos, e.g. ``train`` / ``valid``) from
        demo indices K of committed episodes; they are written when the file is next committed or closed."""
        masks = {}
        for key, idx in keys.items():
            if not isinstance(key, str) or not key or "/" in key:
                raise ValueError(f"set_filter_keys: invalid filter key name {key!r}")
            idx = [int(k) for k in idx]
            bad = [k for k in idx if not 0 <= k < self.num_episodes]
            if bad:
                raise ValueError(f"set_filter_keys: {key!r} lists demos {bad[:8]} outside 0..{self.num_episodes - 1}")
            masks[key] = [demo_name(k) for k in sorted(set(idx))]
        self._masks.update(masks)
        self._masks_dirty = True

    def close(self) -> None:
        """Consolidate (if enabled and needed) and release the file. Safe to call twice."""
        if self._closed:
            return
        if self.path != self.final and not self._demos:  # an --overwrite that wrote nothing keeps the old file
            self.abort()
            return
        try:
            staged = self.path != self.final  # a staged file must be self-contained before it is renamed
            if self.consolidate or staged or (self._masks_dirty and any(w is None for w in self._where.values())):
                self._consolidate()
            elif self._masks_dirty:
                self._write_index()
                self._masks_dirty = False
            if self.path != self.final:  # the new file is complete: it replaces the old one (and its parts)
                os.replace(self.path, self.final)
                fsync_dir(self.final.parent)
                shutil.rmtree(parts_dir(self.final), ignore_errors=True)
                self.path, self.parts = self.final, parts_dir(self.final)
        finally:
            self._closed = True
            self._unlock()

    def abort(self) -> None:
        """Give up after a failure, keeping what was there before: an overwrite's new file is dropped (the old
        file stays as it was); a file this writer started is removed if no episode was committed; otherwise the
        committed episodes stay as an interrupted file that a resumed writer continues. Safe after close."""
        if self._closed:
            return
        try:
            if self.path != self.final:
                log.warning("%s was not replaced: %d new episode(s) discarded", self.final, len(self._demos))
                self._remove_staging()
            elif self._created and not self._demos:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                shutil.rmtree(self.parts, ignore_errors=True)
        finally:
            self._closed = True
            self._unlock()

    def __enter__(self) -> "EpisodeWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None and self.path != self.final:
            self.abort()  # a failed overwrite keeps the old file
        else:
            self.close()

    # ---------------------------------------------------------------- internals
    @staticmethod
    def _part_name(i: int) -> str:
        return f"part-{i:06d}.h5"

    def _lock(self) -> None:
        self._lock_fd = _acquire_lock(self.final)

    def _unlock(self) -> None:
        _release_lock(self.final, self._lock_fd)
        self._lock_fd = None

    def _remove_stale_temps(self) -> None:
        """Delete temporary files left by a writer that was killed (we hold the lock, so none is live)."""
        self._remove_staging()  # an --overwrite run that was killed: its old file is intact
        pattern = re.compile(rf"^\.{re.escape(self.path.name)}\.[0-9a-f]+\.tmp$")
        for p in self.path.parent.iterdir():
            if pattern.match(p.name):
                log.info("removing leftover temporary file %s", p)
                p.unlink()
        if self.parts.is_dir():
            for p in self.parts.iterdir():
                if p.name.startswith(".") and p.name.endswith(".tmp"):
                    p.unlink()

    def _remove_staging(self) -> None:
        """Delete the staged new file of an --overwrite of ``final`` (with its parts and temporary files)."""
        stage = _staging_path(self.final)
        pattern = re.compile(rf"^\.{re.escape(stage.name)}\.[0-9a-f]+\.tmp$")
        for p in self.final.parent.iterdir():
            if p == stage or pattern.match(p.name):
                p.unlink()
        shutil.rmtree(parts_dir(stage), ignore_errors=True)

    def _collect_garbage(self) -> None:
        """Delete parts the committed index does not reference (a crash between part write and commit)."""
        if not self.parts.is_dir():
            return
        used = set(self._where.values())
        for p in self.parts.iterdir():
            m = _PART_RE.match(p.name)
            if m and p.name not in used:
                log.info("removing uncommitted part %s", p)
                p.unlink()
            elif m:
                self._next_part = max(self._next_part, int(m.group(1)) + 1)
        if not any(self.parts.iterdir()):
            self.parts.rmdir()

    def _load_existing(self, ignore_keys: Collection[str]) -> None:
        """Read and check an existing file for resuming. Writes nothing; raises ValueError if unusable."""
        with _open_h5(self.path) as f:
            fmt = _attr_value(f.attrs.get("format", ""))
            if fmt != FORMAT:
                raise ValueError(f"{self.path} is not a graspsim episode file (format attr {fmt!r}, expected {FORMAT!r})")
            try:
                old = json.loads(_attr_value(f.attrs["config"]))
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{self.path}: missing or unreadable 'config' attribute ({e})") from e
            diff = config_differences(old, self.config, ignore_keys)
            if diff:
                shown = ", ".join(f"{k}: {flatten_config(old).get(k, '<missing>')!r} -> "
                                  f"{flatten_config(self.config).get(k, '<missing>')!r}" for k in diff[:8])
                raise ValueError(f"cannot resume {self.path}: its config differs in {len(diff)} field(s): {shown}")
            if DATA not in f:
                raise ValueError(f"{self.path}: no '{DATA}' group")
            data = f[DATA]
            names = _sorted_demos(data)
            if [demo_index(n) for n in names] != list(range(len(names))):
                raise ValueError(f"{self.path}: demo groups are not numbered 0..{len(names) - 1}")
            for n in names:
                link = data.get(n, getlink=True)
                if isinstance(link, h5py.ExternalLink):
                    target = self.path.parent / link.filename
                    if Path(link.filename).parent.name != self.parts.name or not target.is_file():
                        raise ValueError(f"{self.path}: {n} points to a missing part file {target}. "
                                         f"{repair_hint(self.path)}")
                    self._where[n] = Path(link.filename).name
                else:
                    self._where[n] = None
                try:
                    g = data[n]
                    self._lengths[n] = int(g.attrs["num_samples"])
                    if self._signature is None:
                        obs = {k: v[:1] for k, v in g[OBS].items()}
                        self._signature = _signature(Episode(obs=obs, actions=g[ACTIONS][:1]))
                except (KeyError, OSError, ValueError) as e:
                    raise ValueError(f"{self.path}: {n} is unreadable ({e}). {repair_hint(self.path)}") from e
            self._demos = names
            if MASK in f:
                self._masks = {k: [_attr_value(x) for x in v[()]] for k, v in f[MASK].items()}

    def _write_index(self, demos: list[str] | None = None, where: dict | None = None,
                     lengths: dict | None = None) -> None:
        """Commit a new index listing ``demos`` (default: the committed ones) and rename it over ``path``.

        When the committed file is already an index of parts, the new index is a byte copy of it with
        only the new links added (the copy is cheap; rebuilding thousands of links is not).
        """
        demos = self._demos if demos is None else demos
        where = self._where if where is None else where
        lengths = self._lengths if lengths is None else lengths
        total = sum(lengths[n] for n in demos)
        old = self._demos
        incremental = (bool(old) and demos[: len(old)] == old and self.path.is_file()
                       and all(self._where[n] is not None for n in old))
        with replace_atomically(self.path, durable=True) as tmp:
            if incremental:
                shutil.copyfile(self.path, tmp)
                f = h5py.File(tmp, "a")
                f.attrs["config"] = self._config_json
                f[DATA].attrs["total"] = np.int64(total)
                self._write_masks(f)
                new = demos[len(old):]
            else:
                f = h5py.File(tmp, "w")
                self._write_header(f, total)
                new = demos
            with f:
                data = f[DATA]
                for n in new:
                    data[n] = h5py.ExternalLink(f"{self.parts.name}/{where[n]}", f"/{DATA}/{n}")

    def _write_header(self, f: h5py.File, total: int) -> None:
        from . import __version__

        f.attrs["format"] = FORMAT
        f.attrs["graspsim_version"] = __version__
        f.attrs["config"] = self._config_json
        data = f.create_group(DATA)
        data.attrs["total"] = np.int64(total)
        data.attrs["env_args"] = self._env_args_json
        self._write_masks(f)

    def _write_masks(self, f: h5py.File) -> None:
        """robomimic filter keys: ``mask/<key>`` = byte strings of demo names."""
        if MASK in f:
            del f[MASK]
        for key, names in sorted(self._masks.items()):
            f.create_dataset(f"{MASK}/{key}", data=np.array([n.encode() for n in names], dtype="S"))

    def _link_or_copy(self, src: Path, dst: Path) -> None:
        try:
            os.link(src, dst)
        except OSError:
            with replace_atomically(dst, durable=True) as tmp:
                shutil.copyfile(src, tmp)
        fsync_dir(dst.parent)

    def _consolidate(self) -> None:
        if not self._masks_dirty and not any(w is not None for w in self._where.values()):
            return  # already self-contained and up to date
        with _sigint_deferred():
            with replace_atomically(self.path, durable=True) as tmp, h5py.File(tmp, "w") as f:
                self._write_header(f, self.num_steps)
                data = f[DATA]
                by_part: dict[str, list[str]] = {}
                for n in self._demos:
                    by_part.setdefault(self._where[n], []).append(n)
                for part, names in sorted(by_part.items(), key=lambda kv: kv[0] or ""):
                    with h5py.File(self.path if part is None else self.parts / part, "r") as src:
                        for n in names:
                            src.copy(src[f"{DATA}/{n}"], data, name=n)
            self._where = {n: None for n in self._demos}
            self._masks_dirty = False
        shutil.rmtree(self.parts, ignore_errors=True)


# ------------------------------------------------------------------------------------------ readers
def _check_episode_file(f: h5py.File, path: Path) -> h5py.Group:
    if DATA not in f:
        raise ValueError(f"{path} has no '{DATA}' group; not a robomimic-style episode file")
    return f[DATA]


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


def load_steps(path: str | os.PathLike, obs_keys: Sequence[str] = ("mask", "gripper"),
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


def repair_hint(path: str | os.PathLike) -> str:
    return f"To keep the readable episodes and drop the damaged ones, run: graspsim inspect {path} --repair"


def _check_readable(g: h5py.Group) -> None:
    """Read every array of demo group ``g`` in full (a damaged chunk raises) and check its step count."""
    n = int(g.attrs["num_samples"])
    for name, ds in _datasets(g):
        v = ds[()]
        if v.ndim and v.shape[0] != n:
            raise ValueError(f"{name} has {v.shape[0]} rows but num_samples is {n}")
    if ACTIONS not in g or OBS not in g:
        raise ValueError(f"it has no '{ACTIONS}' or '{OBS}'")


def _datasets(g: h5py.Group) -> list[tuple[str, h5py.Dataset]]:
    found: list[tuple[str, h5py.Dataset]] = []
    g.visititems(lambda name, obj: found.append((name, obj)) if isinstance(obj, h5py.Dataset) else None)
    return found


def repair(path: str | os.PathLike) -> dict[str, Any]:
    """Rewrite a damaged episode file ``path`` (e.g. an interrupted collection with a corrupt or missing part
    file) as one self-contained file holding every episode that reads back in full, renumbered ``demo_0..``
    in their old order; the file's attributes and robomimic filter keys are kept (minus dropped episodes).

    Returns ``{"path", "kept", "dropped": [{"demo", "reason"}], "renumbered": {old: new}}``. The old file is
    replaced atomically once the new one is complete, then its parts folder is removed. A writer must not be
    running (the writer lock is taken). ``collect --resume`` continues the repaired file.
    """
    path = Path(path)
    _open_h5(path).close()  # a missing or unreadable file is reported as such before anything else
    fd = _acquire_lock(path)
    try:
        kept: list[tuple[str, str]] = []
        dropped: list[dict[str, str]] = []
        total = 0
        with replace_atomically(path, durable=True) as tmp:
            with _open_h5(path) as f, h5py.File(tmp, "w") as out:
                data = _check_episode_file(f, path)
                for k, v in f.attrs.items():
                    out.attrs[k] = v
                new_data = out.create_group(DATA)
                for k, v in data.attrs.items():
                    new_data.attrs[k] = v
                for n in _sorted_demos(data):
                    new = demo_name(len(kept))
                    try:
                        g = data[n]
                        _check_readable(g)
                        g.file.copy(g, new_data, name=new)
                    except (KeyError, OSError, ValueError, RuntimeError) as e:
                        if new in new_data:
                            del new_data[new]
                        dropped.append({"demo": n, "reason": str(e).splitlines()[0] if str(e) else type(e).__name__})
                        log.warning("repair %s: dropping %s (%s)", path, n, dropped[-1]["reason"])
                        continue
                    total += int(g.attrs["num_samples"])
                    kept.append((n, new))
                new_data.attrs["total"] = np.int64(total)
                renamed = dict(kept)
                if MASK in f:
                    for key, names in f[MASK].items():
                        names = [renamed[x] for x in (_attr_value(y) for y in names[()]) if x in renamed]
                        out.create_dataset(f"{MASK}/{key}", data=np.array([x.encode() for x in names], dtype="S"))
        shutil.rmtree(parts_dir(path), ignore_errors=True)
    finally:
        _release_lock(path, fd)
    report = {"path": str(path), "kept": len(kept), "dropped": dropped,
              "renumbered": {old: new for old, new in kept if old != new}}
    log.info("repaired %s: kept %d episode(s), dropped %d%s", path, len(kept), len(dropped),
             f" ({', '.join(d['demo'] for d in dropped)})" if dropped else "")
    return report


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

    def __init__(self, num_envs: int, image_keys: Sequence[str] = ("rgb",), capacity: int = 64,
                 buffer_device: str | torch.device = "cpu"):
        if not isinstance(num_envs, int) or num_envs <= 0:
            raise ValueError(f"EpisodeRecorder: num_envs must be a positive int; got {num_envs!r}")
        if not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"EpisodeRecorder: capacity must be a positive int; got {capacity!r}")
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


__all__ = [
    "Episode", "EpisodeRecorder", "EpisodeWriter", "FORMAT", "config_differences", "demo_attrs", "demo_name",
    "describe", "load_steps", "parts_dir", "read_episodes", "repair",
]
