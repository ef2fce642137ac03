"""The crash-safe episode file writer :class:`EpisodeWriter` (format: :mod:`graspsim.dataset.format`).

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

Repair: if a part file is damaged or missing, :func:`graspsim.dataset.repair.repair` rewrites the file with
every episode that still reads back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import threading
from pathlib import Path
from typing import Collection, Iterable, Sequence

import h5py
import numpy as np

from ..fileio import fsync_dir, replace_atomically
from ..runs import check_resume
from ..validate import int_in
from .format import (
    ACTIONS, CHUNK_FRAMES, DATA, FORMAT, MASK, OBS, _PART_RE, Episode, _attr_value, _default_env_args, _open_h5,
    _signature, _sorted_demos, _storable, demo_index, demo_name, parts_dir,
    repair_hint,
)

try:
    import fcntl
except ImportError:  # not POSIX: no writer lock
    fcntl = None

log = logging.getLogger(__name__)


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
        attrs: extra file attributes (scalars or strings, e.g. ``world_size``), written with every index.

    ``append`` is durable when it returns; a crash during it loses at most that call's episodes.
    Only one writer per file at a time (enforced with a lock file on POSIX).
    """

    def __init__(self, path: str | os.PathLike, config: dict, *, resume: bool = False, overwrite: bool = False,
                 env_args: dict | None = None, ignore_keys: Collection[str] = (), compression: str | None = "gzip",
                 compression_level: int = 1, consolidate: bool = True, attrs: dict | None = None):
        self.path = self.final = Path(path)  # path: where the index is written; final: the file the caller named
        if resume and overwrite:
            raise ValueError("EpisodeWriter: choose either resume or overwrite, not both")
        if compression not in (None, "gzip", "lzf"):
            raise ValueError(f"EpisodeWriter: compression must be 'gzip', 'lzf' or None; got {compression!r}")
        int_in("EpisodeWriter", "compression_level", compression_level, 0, 9)
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
        self.attrs = dict(attrs or {})
        bad = sorted(k for k, v in self.attrs.items() if k in ("format", "graspsim_version", "config")
                     or not isinstance(v, (bool, int, float, str)))
        if bad:
            raise ValueError(f"EpisodeWriter: attrs {bad} are reserved or not a scalar/string")
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
    def replaces_file(self) -> bool:
        """Whether this writer (an --overwrite of an existing file) writes a new file that replaces the old one only
        when closed; :meth:`abort` keeps the old one."""
        return self.path != self.final

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
        def fill(data: h5py.Group, names: list[str]) -> None:
            for name, ep in zip(names, episodes):
                _write_demo(data.create_group(name), ep, self.compression, self.compression_level)

        return self._commit([ep.num_samples for ep in episodes], sig, fill)

    def append_copies(self, sources: Sequence[tuple[str | os.PathLike, str]]) -> list[str]:
        """Commit copies of demo groups of other episode files, ``(file, demo name)`` in the order given, as new
        episodes (durable on return; arrays, compressed chunks and attributes are copied as they are). Returns
        the new demo names. The same per-step shape rule as :meth:`append` applies."""
        if self._closed:
            raise ValueError(f"EpisodeWriter for {self.path} is closed")
        sources = [(Path(f), str(n)) for f, n in sources]
        if not sources:
            return []
        sig, lengths = self._signature, []
        for f, n in sources:
            with _open_h5(f) as h:
                if f"{DATA}/{n}" not in h:
                    raise ValueError(f"append_copies: {f} has no episode {n}")
                g = h[DATA][n]
                s = _signature(Episode(obs={k: v[:1] for k, v in g[OBS].items()}, actions=g[ACTIONS][:1]))
                lengths.append(int(g.attrs["num_samples"]))
            if sig is None:
                sig = s
            elif s != sig:
                raise ValueError(f"append_copies: {f}:{n} has per-step shapes/dtypes {s}, the file has {sig}")

        def fill(data: h5py.Group, names: list[str]) -> None:
            by_file: dict[Path, list[tuple[str, str]]] = {}
            for name, (f, n) in zip(names, sources):
                by_file.setdefault(f, []).append((n, name))
            for f, pairs in by_file.items():
                with h5py.File(f, "r") as src:
                    for n, name in pairs:
                        src.copy(src[f"{DATA}/{n}"], data, name=name)

        return self._commit(lengths, sig, fill)

    def _commit(self, lengths: list[int], sig: dict, fill) -> list[str]:
        """Write ``len(lengths)`` new episodes (``fill(data group, names)`` creates them) into a new part and
        commit an index that lists them."""
        start = self.num_episodes
        names = [demo_name(start + i) for i in range(len(lengths))]
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
                fill(f.create_group(DATA), names)
            self._next_part += 1
            where.update({n: part for n in names})
            new_lengths = dict(self._lengths)
            new_lengths.update(zip(names, lengths))
            self._write_index(self._demos + names, where, new_lengths)  # commit point
            self._masks_dirty = False
            self._demos += names
            self._where, self._lengths, self._signature = where, new_lengths, sig
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
            check_resume(old, self.config, ignore_keys, self.path)
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
                f.attrs.update(self.attrs)
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
        from .. import __version__

        f.attrs["format"] = FORMAT
        f.attrs["graspsim_version"] = __version__
        f.attrs["config"] = self._config_json
        f.attrs.update(self.attrs)
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
