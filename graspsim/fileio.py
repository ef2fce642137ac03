"""Atomic file writes: a reader sees the old file or the new one, never a half-written one.

Every output of the project (datasets, checkpoints, metrics, plots, GIFs, images) goes through
:func:`replace_atomically`: write to a temporary file beside the target, then ``os.replace`` it over the
target. Files get the usual permissions (umask), not the owner-only ones of ``tempfile.mkstemp``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Iterator


def fsync_file(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def replace_atomically(target: str | os.PathLike, durable: bool = False) -> Iterator[Path]:
    """Yield a temporary path ``.<name>.<hex>.tmp`` beside ``target`` (writers that pick a format from the
    suffix must be told the format); when the block finishes, rename it over ``target``. If the block
    raises, the temporary file is removed and ``target`` is untouched. ``durable``: fsync the file before and the folder after the rename (for
    data that must survive a power cut, such as dataset commits)."""
    target = Path(target)
    tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
    try:
        yield tmp
        if durable:
            fsync_file(tmp)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    if durable:
        fsync_dir(target.parent)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with replace_atomically(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with replace_atomically(path) as tmp:
        tmp.write_text(text)
