"""Joining episode files written side by side (one per rank of a ``torchrun`` job) into one file.

Every episode carries ``attrs["episode_index"]``, its index in the run's episode stream (:mod:`graspsim.seeds`).
:func:`join` copies the episodes of several files into an :class:`~graspsim.dataset.EpisodeWriter` in
ascending ``episode_index``, so the joined file does not depend on how the episodes were split over ranks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Collection, Sequence

from .format import demo_name
from .read import demo_attrs
from .writer import EpisodeWriter


def indexed_episodes(paths: Sequence[str | os.PathLike]) -> list[tuple[int, Path, str]]:
    """``(episode_index, file, demo name)`` of every episode of ``paths``, by ascending ``episode_index``.
    ValueError if an episode lacks the attribute or two episodes share an index."""
    found: list[tuple[int, Path, str]] = []
    for p in paths:
        for k, a in enumerate(demo_attrs(p)):
            if "episode_index" not in a:
                raise ValueError(f"{p}: {demo_name(k)} has no episode_index attribute; cannot join it")
            found.append((int(a["episode_index"]), Path(p), demo_name(k)))
    found.sort(key=lambda t: t[0])
    dup = sorted({a[0] for a, b in zip(found, found[1:]) if a[0] == b[0]})
    if dup:
        raise ValueError(f"episode indices {dup[:8]} occur more than once in {[str(p) for p in paths]}")
    return found


def join(writer: EpisodeWriter, paths: Sequence[str | os.PathLike], skip: Collection[int] = ()) -> list[str]:
    """Append every episode of ``paths`` whose ``episode_index`` is not in ``skip`` to ``writer``, by ascending
    index (one commit); returns the new demo names."""
    skip = set(int(k) for k in skip)
    return writer.append_copies([(p, n) for k, p, n in indexed_episodes(paths) if k not in skip])


__all__ = ["indexed_episodes", "join"]
