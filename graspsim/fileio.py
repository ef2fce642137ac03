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
import errno
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
"""File suffixes (lower case) read as images wherever a folder of photos or frames is listed: image-set folders
(:mod:`graspsim.vision.image_set`) and table photos (:func:`graspsim.config.table_photo_files`)."""


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
    except OSError as e:  # a write that failed (a full disk) names the file it was writing
        if e.filename is None and e.errno is not None:
            raise type(e)(e.errno, e.strerror or str(e), str(target)) from None
        if e.filename is not None and str(e.filename) == str(tmp):
            raise type(e)(e.errno, e.strerror or str(e), str(target)) from None
        raise
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
    inside = "" if where == out else f" (inside {where})"
    try:
        probe = tempfile.mkdtemp(prefix=".graspsim-probe-", dir=where)
        os.rmdir(probe)
    except OSError as e:
        raise PermissionError(f"{flag} {out} cannot be written{inside}: {e.strerror or e}; choose another "
                              f"{flag}") from None
    free = free_bytes(where)
    if free is not None and free < MIN_FREE_BYTES:
        raise OSError(errno.ENOSPC, f"{flag} {out} cannot be written{inside}: its disk is full ({free // 1024} KiB "
                                    f"free); free some space or choose another {flag}")
    return out


MIN_FREE_BYTES = 1 << 20
"""Free space (bytes) below which an output folder's disk counts as full when the flags are checked: a full disk
still lets the writability probe make a folder, and would fail the run only at its end."""


def free_bytes(folder: str | os.PathLike) -> int | None:
    """Bytes an unprivileged writer may still use on ``folder``'s file system, or None where that is unknown
    (no ``statvfs``, or a file system such as /proc that reports no blocks)."""
    try:
        st = os.statvfs(folder)
    except (AttributeError, OSError):
        return None
    if st.f_blocks == 0:
        return None
    return st.f_bavail * st.f_frsize


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
def staged_dir(out: str | os.PathLike, owns: Callable[[str], bool], flag: str = "--out") -> Iterator[Path]:
    """Yield an empty hidden folder beside ``out`` to write a verb's outputs into; when the block finishes,
    the staged outputs replace the verb's earlier outputs in ``out`` as a whole: every entry that ``owns`` claims
    goes, every staged entry comes in, other entries stay (a missing ``out`` is created by renaming the staged
    folder). Call :func:`check_out_dir` first.

    If the block raises (Ctrl-C and the stop signals the command turns into it included), the staged folder is
    removed and ``out`` is left exactly as it was (a missing ``out`` stays missing, along with any parent folders
    this call created); an OSError about a file in the staged folder is raised again naming that file's place in
    ``out`` (``flag`` names the option in messages). Another run that wrote its outputs into ``out`` while this one
    worked is not replaced: FileExistsError, and this run's outputs are dropped. A Ctrl-C during the swap itself
    (milliseconds) is held back until the swap is complete."""
    out = Path(out)
    made = [p for p in [out.parent, *out.parent.parents] if not p.exists()]
    stage = out.parent / f".{out.name}.{secrets.token_hex(4)}.staging"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage.mkdir()
        before = _owned(out, owns)  # what an earlier run left: compared at the swap
        yield stage
    except BaseException as e:
        try:
            _remove(stage)
        finally:
            for p in made:  # innermost first
                with contextlib.suppress(OSError):
                    p.rmdir()
        if isinstance(e, OSError):
            raise _named_in_out(e, stage, out) from None
        raise
    try:
        _swap(stage, out, owns, before, flag)
    except BaseException:
        _remove(stage)
        raise


def _owned(out: Path, owns: Callable[[str], bool]) -> dict[str, tuple[int, int]] | None:
    """(inode, modification time in ns) of each entry of ``out`` that ``owns`` claims; None when ``out`` is missing."""
    if not out.is_dir():
        return None
    found = {}
    for p in out.iterdir():
        if owns(p.name):
            with contextlib.suppress(OSError):
                st = p.lstat()
                found[p.name] = (st.st_ino, st.st_mtime_ns)
    return found


def _remove(path: Path) -> None:
    """Remove a folder tree, finishing the job when a Ctrl-C (or a second stop signal) arrives meanwhile; the
    interruption is raised again afterwards."""
    pending = None
    while True:
        try:
            shutil.rmtree(path, ignore_errors=True)
            break
        except KeyboardInterrupt as e:
            pending = e
    if pending is not None:
        raise pending


def _named_in_out(e: OSError, stage: Path, out: Path) -> OSError:
    """``e`` with the staged folder in its file names (and message) replaced by ``out``: a user never sees the hidden
    folder, only the place the file was going to."""
    def rename(x):
        if x is None:
            return None
        s = str(x)
        return s.replace(str(stage), str(out)) if str(stage) in s else x

    try:
        if e.filename is not None and e.errno is not None:
            return type(e)(e.errno, e.strerror, rename(e.filename), None, rename(e.filename2))
        if str(stage) in str(e):
            return type(e)(str(e).replace(str(stage), str(out)))
    except Exception:  # an OSError subclass of another signature
        return OSError(str(e).replace(str(stage), str(out)))
    return e


def _lock(folder: Path):
    """An exclusive advisory lock on ``folder`` (held until the returned descriptor is closed), or None where folders
    cannot be locked; serializes the swaps of several runs into one ``--out``."""
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        return None
    return fd


def _swap(stage: Path, out: Path, owns: Callable[[str], bool], before: dict | None, flag: str) -> None:
    """Move the staged outputs into ``out`` (:func:`staged_dir`); FileExistsError when another run wrote ``out``'s
    outputs since ``before`` was taken. Each phase is repeated until it completes when a Ctrl-C arrives (every phase
    lists its folder afresh, so a repeat never moves an entry twice); the Ctrl-C is raised once all is in place."""
    def taken(now) -> FileExistsError:
        held = f" (it now holds {_names([out / n for n in now])})" if now else ""
        return FileExistsError(f"{flag} {out} was written by another run while this one worked{held}; this run's "
                               f"outputs were dropped, so as not to replace that run's: once that run has ended, run "
                               f"this one again (with --overwrite, which replaces what that run wrote), or choose "
                               f"another {flag}")

    if before is None:
        try:
            os.rename(stage, out)  # atomic; refused when another run created a non-empty out meanwhile
        except OSError as e:
            if out.exists():
                raise taken(_owned(out, owns)) from None
            raise _named_in_out(e, stage, out) from None
        fsync_dir(out.parent)
        return
    pending: list[BaseException] = []

    def until_done(phase: Callable[[], None]) -> None:
        while True:
            try:
                phase()
                return
            except KeyboardInterrupt as e:
                pending.append(e)

    fd = _lock(out)
    try:
        now = _owned(out, owns)
        if now != before and now:
            raise taken(now)
        trash = out.parent / f".{out.name}.{secrets.token_hex(4)}.old"
        until_done(lambda: trash.mkdir(exist_ok=True))
        # replace the outputs entry by entry (keeps the folder itself, which may be a mount point or the cwd); the
        # old outputs go to the trash folder first, so an interruption loses nothing
        until_done(lambda: [os.replace(p, trash / p.name) for p in list(out.iterdir()) if owns(p.name)])
        until_done(lambda: [os.replace(p, out / p.name) for p in list(stage.iterdir())])
        until_done(lambda: fsync_dir(out))
    finally:
        if fd is not None:
            os.close(fd)
    until_done(lambda: stage.rmdir() if stage.exists() else None)
    until_done(lambda: shutil.rmtree(trash, ignore_errors=True))
    if pending:
        raise pending[0]
