"""``graspsim export-dataset``: episode files as a LeRobotDataset v3.0 folder (library: :mod:`graspsim.dataset.lerobot`).

>>> graspsim export-dataset demos.h5 runs/dg/data/iter_000.h5 --out exports/grasp_lerobot

Needs the optional ``lerobot`` extra (pyarrow, PyAV): ``pip install 'graspsim[lerobot]'``. Layout, field mapping
and what is lost: docs/lerobot.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

import tyro

from graspsim.dataset.lerobot import DEFAULT_TASK, check_codec, export_lerobot, require_extra
from graspsim.fileio import check_folder_path
from graspsim.progress import progress_bar
from graspsim.runtime import Runtime, RuntimeConfig
from graspsim.validate import int_in


@dataclass(frozen=True)
class ExportDatasetConfig:
    """Write episode files (collect's demos, DAgger's iter_NNN.h5) as one LeRobotDataset v3.0 folder."""

    files: tyro.conf.Positional[tuple[Path, ...]]
    """Episode files (.h5), exported in this order; their episodes are renumbered 0, 1, ..."""
    out: Path
    """Output folder (must not exist or be empty, unless --overwrite)."""
    images: Literal["video", "png"] = "video"
    """Wrist images as mp4 video (small, lossy) or as PNG bytes in the parquet rows (lossless, larger)."""
    codec: Literal["av1", "h264"] = "av1"
    """Video codec (with --images video): av1 (SVT-AV1, LeRobot's default) or h264 (libx264)."""
    crf: Optional[int] = None
    """Video constant rate factor, 0-63 for av1, 0-51 for h264 (lower: closer to the source, larger files;
    default: 30 for av1, 23 for h264)."""
    task: str = DEFAULT_TASK
    """Task text of every episode (LeRobot's language instruction)."""
    privileged: bool = False
    """Also export the privileged true state as privileged.<key> columns (for analysis, never a policy input)."""
    overwrite: bool = False
    """Replace an earlier export in --out."""
    runtime: Runtime = field(default_factory=RuntimeConfig)
    """Progress bar and threads (flags --progress/--no-progress, --threads; the others are unused here)."""

    def __post_init__(self) -> None:
        require_extra("export-dataset")  # a missing extra is reported while the flags are parsed
        object.__setattr__(self, "files", tuple(Path(p) for p in self.files))
        object.__setattr__(self, "out", Path(self.out))
        if not self.files:
            raise ValueError("ExportDatasetConfig.files: give one or more episode files (.h5)")
        check_folder_path(self.out)
        if self.crf is not None:
            int_in("ExportDatasetConfig", "crf", self.crf, 0, 63 if self.codec == "av1" else 51)
        if not self.task.strip():
            raise ValueError("ExportDatasetConfig.task must be a non-empty text")
        if self.images == "video":
            check_codec(self.codec)


def export_dataset(cfg: ExportDatasetConfig) -> dict:
    """Export ``cfg.files`` into ``cfg.out`` (:func:`graspsim.dataset.lerobot.export_lerobot`); returns its summary."""
    with cfg.runtime.job("export-dataset"), progress_bar("export-dataset", cfg.runtime.progress) as bar:
        task = bar.add_task("export-dataset", total=None)
        return export_lerobot(cfg.files, cfg.out, images=cfg.images, codec=cfg.codec, crf=cfg.crf, task=cfg.task,
                              privileged=cfg.privileged, overwrite=cfg.overwrite,
                              progress=lambda done, total: bar.update(task, completed=done, total=total))


__all__ = ["ExportDatasetConfig", "export_dataset"]
