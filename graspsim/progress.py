"""The one rich progress bar factory of the verbs (collect, train-vision, dagger, eval-sim, eval-real)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from rich.progress import Progress


def progress_bar(label: str | None, enabled: bool = True, *, fields: Sequence[str] = (), remaining: bool = True,
                 transient: bool = False) -> "Progress":
    """A rich ``Progress``: bold ``label`` (None: each task's description), bar, done/total, one text column per
    entry of ``fields`` (rich format strings such as ``"{task.fields[info]}"``; give the fields to ``add_task``),
    time elapsed and, with ``remaining``, time remaining. ``enabled=False`` draws nothing (the calls still work);
    ``transient`` clears the bar when it stops. Use it as a context manager."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = [TextColumn(f"[bold]{label}" if label is not None else "[bold]{task.description}"), BarColumn(),
               MofNCompleteColumn(), *(TextColumn(f) for f in fields), TimeElapsedColumn()]
    if remaining:
        columns.append(TimeRemainingColumn())
    return Progress(*columns, disable=not enabled, transient=transient)


__all__ = ["progress_bar"]
