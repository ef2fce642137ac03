"""Process-wide speed settings that the app layer may apply; importing a library module applies none of them.

:func:`tune_allocator` tells glibc to keep freed heap memory for reuse. The ``graspsim`` command and the
benchmarks call it once at start-up and log that they did; a program that drives the library itself can call it
too (it changes the whole process's allocator, which is why no library import does it).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger(__name__)

ENV_SWITCH = "GRASPSIM_MALLOC_TUNING"  # set to 0 to leave the allocator alone

# glibc mallopt parameters and the values we set
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_SETTINGS = ((_M_TRIM_THRESHOLD, 1 << 30, "trim threshold 1 GiB"), (_M_TOP_PAD, 64 << 20, "top pad 64 MiB"),
             (_M_MMAP_THRESHOLD, 32 << 20, "mmap threshold 32 MiB"))

_done: str | None = None  # what the first call did, so later calls do not repeat it
_announced = False  # whether that has been logged


def tune_allocator(announce: bool = True) -> str:
    """glibc: keep freed heap memory for reuse instead of handing it back to the OS after every call.

    A render allocates a few buffers of about 4 MB per 256 scenes; with glibc's defaults they are mmap'ed or
    trimmed on free, so every call page-faults them in again (measured: that doubled the render time at batch
    256). Raising the trim threshold, the top pad and a fixed 32 MB mmap threshold keeps them in the heap (the
    peak resident size stays allocated). This changes the allocator of the whole process, so only the app layer
    (the ``graspsim`` command, the benchmarks) calls it. Set ``GRASPSIM_MALLOC_TUNING=0`` to leave the allocator
    alone; it does nothing outside Linux/glibc.

    Returns what it did (``"tuned glibc malloc: ..."``) or why it did not, and logs that at INFO on the first call
    of the process unless ``announce`` is False (for a caller that reports it itself, as the ``graspsim`` command
    does after a verb has run, so that a refused input's error stays the first line of its output).
    """
    global _done, _announced
    if _done is None:
        _done = _apply()
    if announce and not _announced:
        _announced = True
        log.info("%s", _done)
    return _done


def _apply() -> str:
    """Set the glibc parameters unless switched off; what was done, as a sentence."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return f"glibc malloc left alone ({ENV_SWITCH}=0)"
    if not sys.platform.startswith("linux"):
        return f"malloc tuning skipped: not Linux ({sys.platform})"
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
        ok = [bool(mallopt(param, value)) for param, value, _ in _SETTINGS]  # mallopt returns 1 on success
    except (OSError, AttributeError) as e:
        return f"malloc tuning skipped: no glibc mallopt ({e})"
    done = [what for (_, _, what), good in zip(_SETTINGS, ok) if good]
    if not done:
        return "malloc tuning skipped: glibc refused every setting"
    return f"tuned glibc malloc: {', '.join(done)} (keeps render buffers in the heap; {ENV_SWITCH}=0 turns this off)"
