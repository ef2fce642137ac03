"""Repair of a damaged episode file: keep every episode that reads back in full, renumbered in order.

If a part file is damaged or missing (disk trouble, a copy that missed it), :func:`repair` rewrites the file with
every episode that still reads back and reports the dropped ones; ``graspsim inspect PATH --repair`` runs it, and
``graspsim collect --resume`` continues the repaired file.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..fileio import replace_atomically
from .format import ACTIONS, DATA, MASK, OBS, _attr_value, _check_episode_file, _open_h5, _sorted_demos, demo_name, parts_dir
from .writer import _acquire_lock, _release_lock

log = logging.getLogger(__name__)


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
