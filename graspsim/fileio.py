"""Atomic file writes, and the one rule every verb follows for its outputs.

Atomic writes: a reader sees the old file or the new one, never a half-written one.

Every output of the project (datasets, checkpoints, metrics, plots, GIFs, images) goes through
:func:`replace_atomically`: write to a temporary file beside the target, then ``os.replace`` it over the
target. Files get the usual permissions (umask), not the owner-only ones of ``tempfile.mkstemp``.

Output folders (see the comment above :func:`check_out_dir`): :func:`check_out_dir` / :func:`check_out_file`
validate ``--out`` before anything is written, and :func:`staged_dir` writes a verb's outputs beside the
folder and swaps them in as a whole. A process killed during the swap can leave a hidden
``.<name>.<hex>.staging`` or ``.<name>.<hex>.old`` folder beside ``--out``; nothing in ``--out`` is lost.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator


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


# ------------------------------------------------------------------------------------------ output folders
# One rule for every verb's --out (README, "Mistakes and outputs"):
# * a folder that exists and is not empty is refused unless --overwrite or --resume is given;
# * --overwrite replaces the folder's outputs as a whole (the new outputs are written to a hidden sibling
#   folder and swapped in at the end), so no stale file of an earlier run survives, and a failed run leaves
#   the earlier outputs as they were; files the verb does not write are left where they are;
# * nothing is written, not even an empty folder, when validation fails.
# Single-file outputs (collect's .h5, show's and inspect's images) follow the same rule for the file.


def _first_file_ancestor(path: Path) -> Path | None:
    """The nearest ancestor of ``path`` (or ``path`` itself) that exists and is not a folder, if any."""
    for p in [path, *path.parents]:
        if p.exists() or p.is_symlink():
            return None if p.is_dir() else p
    return None


def _names(entries: list[Path], most: int = 5) -> str:
    shown = ", ".join(sorted(p.name for p in entries)[:most])
    return shown + (f" and {len(entries) - most} more" if len(entries) > most else "")


def check_folder_path(out: str | os.PathLike, flag: str = "--out") -> Path:
    """ValueError unless ``out`` can be a folder: neither it nor one of its parents is an existing file."""
    out = Path(out)
    blocker = _first_file_ancestor(out)
    if blocker is not None:
        what = f"{flag} {out}" if blocker == out else f"{flag} {out}: its parent {blocker}"
        raise ValueError(f"{what} is an existing file, not a folder; give a folder path")
    return out


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (the folder a new output would be created in)."""
    for p in [path, *path.parents]:
        if p.exists():
            return p
    return Path(".")


def check_writable(out: str | os.PathLike, flag: str = "--out") -> Path:
    """PermissionError unless an output at ``out`` (a folder or a file) can be created or written: ``out`` itself
    when it is an existing folder, else the nearest existing folder above it. Tried for real (a hidden probe folder
    is made and removed at once), because permission bits say nothing for root, read-only mounts or /proc. Run when
    the flags are checked, so a verb that drives a robot or runs for hours does not find out at its end."""
    out = Path(out)
    where = out if out.is_dir() else _nearest_existing(out.parent)
    try:
        probe = tempfile.mkdtemp(prefix=".graspsim-probe-", dir=where)
        os.rmdir(probe)
    except OSError as e:
        inside = "" if where == out else f" (inside {where})"
        raise PermissionError(f"{flag} {out} cannot be written{inside}: {e.strerror or e}; choose another "
                              f"{flag}") from None
    return out


def check_out_dir(out: str | os.PathLike, *, flag: str = "--out", overwrite: bool | None = None,
                  resume: bool | None = None) -> Path:
    """Validate a verb's output folder without writing anything; return it as a Path. ``overwrite`` / ``resume``:
    the verb's flags of that name (None where the verb has no such flag; the message offers those it has).

    Raises ValueError when ``out`` (or one of its parents) is an existing file, and FileExistsError when ``out``
    is a non-empty folder and neither flag is set. Every message names the folder and says what to do.
    """
    out = check_folder_path(out, flag)
    if not out.is_dir():
        return check_writable(out, flag)
    if not os.access(out, os.W_OK | os.X_OK):
        raise PermissionError(f"{flag} {out} is not writable; choose another folder")
    check_writable(out, flag)
    entries = list(out.iterdir())
    if not entries or overwrite or resume:
        return out
    how = []
    if overwrite is not None:
        how.append("--overwrite to replace its outputs")
    if resume is not None:
        how.append("--resume to continue the run in it")
    raise FileExistsError(f"{flag} {out} is not empty (holds {_names(entries)}); pass {' or '.join(how)}, or "
                          f"choose another {flag}")


def check_out_file(path: str | os.PathLike, *, flag: str = "--out", overwrite: bool = False,
                   resume: bool | None = None) -> Path:
    """Validate a single output file without writing anything: its folder must be a folder (it is created
    later if missing), ``path`` must not be a folder, and an existing file needs ``overwrite`` or ``resume``
    (None: the verb cannot resume a file)."""
    path = Path(path)
    blocker = _first_file_ancestor(path.parent)
    if blocker is not None:
        raise ValueError(f"{flag} {path}: {blocker} is an existing file, not a folder; give a path inside a folder")
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give a file path")
    if path.exists() and not (overwrite or resume):
        how = "--resume to continue it, --overwrite to replace it," if resume is not None else "--overwrite to replace it"
        raise FileExistsError(f"{flag} {path} already exists; pass {how} or choose another {flag}")
    return check_writable(path, flag)


def check_in_file(path: str | os.PathLike, label: str, what: str = "file", inside: str | None = None) -> Path:
    """An input file that must exist: FileNotFoundError when missing, ValueError when it is a folder (naming
    ``inside`` in that folder when it exists there, e.g. the checkpoint a run folder holds)."""
    path = Path(path)
    if path.is_dir():
        hint = f"; did you mean {path / inside}?" if inside and (path / inside).is_file() else f"; give the {what} itself"
        raise ValueError(f"{label}: {path} is a folder, not a {what}{hint}")
    if not path.is_file():
        raise FileNotFoundError(f"{label}: no such {what} {path}; check the path")
    return path


@contextlib.contextmanager
def staged_dir(out: str | os.PathLike, owns: Callable[[str], bool]) -> Iterator[Path]:
    """Yield an empty hidden folder beside ``out`` to write a verb's outputs into; when the block finishes,
    the staged outputs replace the verb's earlier outputs in ``out`` as a whole: every entry that ``owns`` claims
    goes, every staged entry comes in, other entries stay (a missing ``out`` is created by renaming the staged
    folder). If the block raises, the staged folder is removed and ``out`` is left exactly as it was (a missing
    ``out`` stays missing, along with any parent folders this call created). Call :func:`check_out_dir` first."""
    out = Path(out)
    made = [p for p in [out.parent, *out.parent.parents] if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = out.parent / f".{out.name}.{secrets.token_hex(4)}.staging"
    stage.mkdir()
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for p in made:  # innermost first
            with contextlib.suppress(OSError):
                p.rmdir()
        raise
    if not out.exists():
        os.replace(stage, out)
        fsync_dir(out.parent)
        return
    # replace the outputs entry by entry (keeps the folder itself, which may be a mount point or the cwd);
    # the old outputs go to a trash folder first, so an interruption loses nothing
    trash = out.parent / f".{out.name}.{secrets.token_hex(4)}.old"
    trash.mkdir()
    for p in list(out.iterdir()):
        if owns(p.name):
            os.replace(p, trash / p.name)
    for p in list(stage.iterdir()):
        os.replace(p, out / p.name)
    fsync_dir(out)
    stage.rmdir()
    shutil.rmtree(trash, ignore_errors=True)
