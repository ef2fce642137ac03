"""``graspsim record`` (capture a real image set) and ``graspsim propose-masks`` (a labelling aid).

>>> graspsim record --camera 0 --out my_set --frames 200 --hz 5          # my_set/images/frame_0000.png ...
>>> graspsim propose-masks --images my_set/images --out my_set/proposed  # masks/ + contact_sheet.png

``record`` writes frames in the eval-real folder format (``images/``), plus ``frames.csv`` (file, capture time
relative to the first frame, frame age at the write). A source that ends before ``--frames`` (a video, an image
folder) gives fewer frames, with a warning that says how many. Ctrl-C or a camera failure keeps the frames captured
until then (and ends with exit 130 or the camera's error). ``--overwrite`` replaces the earlier ``images/`` and
``frames.csv`` as a whole, so no frame of a longer earlier recording is left among the new ones.

``propose-masks`` **proposes** masks: a pixel is proposed as target when its colour lies in an HSV range (by
default the red-orange of the shipped target, hue -0.04..0.06 of the circle, saturation and value >= 0.35),
and only the largest connected blob of at least ``--min-pixels`` is kept. It knows nothing about the scene: a red
cup, a skin tone or a reflection is proposed as happily as the sphere, and a shadowed sphere may be missed.
Check every frame on the contact sheet (each frame beside its proposal outlined in green) and correct or delete
the masks before using them with ``eval-real --masks``. Frames with at most 8 distinct values look like masks
rather than camera frames (``--images`` pointing at a ``masks/`` folder); they are counted in the summary and
warned about, as is a run that proposes a target in no frame at all.
"""

from __future__ import annotations

import csv
import io
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

import numpy as np

from graspsim.fileio import atomic_write_text, check_out_dir, staged_dir
from graspsim.validate import finite_non_negative, positive_int
from graspsim.vision.io import MASK_MAX_LEVELS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordConfig:
    """Capture frames from a camera into an eval-real image folder."""

    camera: str
    """Camera: an OpenCV device index, a video file, an image folder, or module:Class."""
    out: Path
    """Output folder: images/ and frames.csv."""
    frames: int = 100
    """Frames to capture (fewer if a finite source ends first)."""
    hz: float = 5.0
    """Capture rate (Hz); 0 = as fast as the camera gives frames."""
    frame_timeout: float = 2.0
    """Seconds to wait for a frame before giving up with an error."""
    overwrite: bool = False
    """Write into a non-empty --out."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))
        positive_int("RecordConfig", "frames", self.frames)
        finite_non_negative("RecordConfig", "hz", self.hz, unit="Hz")
        if self.camera.strip() in ("sim", "bullet"):
            raise ValueError("RecordConfig: record a real camera; simulated frames come from 'graspsim deploy --record'")


RECORD_OUTPUTS = ("images", "frames.csv")
"""What ``record`` writes into --out (and replaces as a whole with --overwrite)."""


def record(cfg: RecordConfig) -> dict:
    """Capture up to ``cfg.frames`` frames; returns ``{"frames": n, "asked": cfg.frames, "ended": why, "folder": ...}``
    with ``ended`` one of ``done``, ``camera_ended`` (a finite source ran out), ``interrupted`` or ``camera_failed``.
    Ctrl-C and a camera error are raised again once the frames captured before them are in place."""
    from graspsim.vision.io import write_png

    from .cameras import CameraError, EndOfStream, open_camera

    out = check_out_dir(cfg.out, overwrite=cfg.overwrite)
    cam = open_camera(cfg.camera)
    rows, t_first, ended, stopped_by = [], None, "done", None
    try:
        with staged_dir(out, lambda name: name in RECORD_OUTPUTS) as stage:
            (stage / "images").mkdir()
            period = 1.0 / cfg.hz if cfg.hz > 0 else 0.0
            next_t = time.monotonic()
            for k in range(cfg.frames):
                try:
                    if period:
                        time.sleep(max(0.0, next_t - time.monotonic()))
                        next_t += period
                    f = cam.read(cfg.frame_timeout)
                except EndOfStream:
                    ended = "camera_ended"
                    break
                except (KeyboardInterrupt, CameraError) as e:
                    ended, stopped_by = ("interrupted" if isinstance(e, KeyboardInterrupt) else "camera_failed"), e
                    break
                t_first = f.t if t_first is None else t_first
                name = f"frame_{k:04d}.png"
                write_png(stage / "images" / name, f.rgb)
                rows.append({"image": name, "t_s": f"{f.t - t_first:.4f}",
                             "age_ms": f"{1e3 * (time.monotonic() - f.t):.2f}"})
            if not rows:  # nothing captured: leave --out as it was
                raise stopped_by or CameraError(f"camera {cfg.camera!r} gave no frame")
            buf = io.StringIO()
            w = csv.DictWriter(buf, ["image", "t_s", "age_ms"])
            w.writeheader()
            w.writerows(rows)
            atomic_write_text(stage / "frames.csv", buf.getvalue())
    finally:
        if hasattr(cam, "close"):  # a user's camera class may have none
            cam.close()
    if ended == "done":
        log.info("record: %d frames into %s", len(rows), out / "images")
    else:
        why = {"camera_ended": "the camera's source ended", "interrupted": "interrupted",
               "camera_failed": f"the camera failed ({stopped_by})"}[ended]
        log.warning("record: %s after %d of the %d frames asked for (--frames); they are in %s", why, len(rows),
                    cfg.frames, out / "images")
    if stopped_by is not None:
        raise stopped_by
    return {"frames": len(rows), "asked": cfg.frames, "ended": ended, "folder": str(out)}


@dataclass(frozen=True)
class ProposeMasksConfig:
    """Propose target masks by colour range and write a contact sheet to check them by eye (a proposal tool)."""

    images: Path
    """Folder of images (an eval-real images/ folder)."""
    out: Path
    """Output folder: masks/ (one PNG per image, same stem) and contact_sheet.png."""
    hue: Tuple[float, float] = (-0.04, 0.06)
    """Hue range as a fraction of the colour circle (a negative low end wraps around red)."""
    min_saturation: float = 0.35
    """Lowest saturation (0-1) of a target pixel."""
    min_value: float = 0.35
    """Lowest value (brightness, 0-1) of a target pixel."""
    min_pixels: int = 4
    """Smallest blob kept; frames without such a blob get an all-zero mask (no target)."""
    thumb: int = 128
    """Contact-sheet tile size (pixels)."""
    overwrite: bool = False
    """Write into a non-empty --out."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "images", Path(self.images))
        object.__setattr__(self, "out", Path(self.out))
        lo, hi = self.hue
        if not (-0.5 <= lo < hi <= 1.0 and hi - lo <= 1.0):
            raise ValueError(f"ProposeMasksConfig.hue must satisfy -0.5 <= low < high <= 1; got {self.hue!r}")
        for name in ("min_saturation", "min_value"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
                raise ValueError(f"ProposeMasksConfig.{name} must be in [0, 1]; got {v!r}")
        positive_int("ProposeMasksConfig", "min_pixels", self.min_pixels)
        positive_int("ProposeMasksConfig", "thumb", self.thumb)


def colour_mask(rgb: np.ndarray, hue: Tuple[float, float], min_s: float, min_v: float, min_pixels: int) -> np.ndarray:
    """H,W,3 uint8 -> H,W bool: the largest connected blob (>= ``min_pixels``) of pixels inside the HSV range."""
    import cv2

    hsv = cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV_FULL).astype(np.float32) / 255.0
    h = hsv[..., 0]
    lo, hi = hue
    in_hue = ((h >= lo) & (h <= hi)) | ((h - 1.0 >= lo) & (h - 1.0 <= hi))
    m = in_hue & (hsv[..., 1] >= min_s) & (hsv[..., 2] >= min_v)
    n, labels, stats, _ = cv2.connectedComponentsWithStats(m.astype(np.uint8), connectivity=8)
    if n <= 1:
        return np.zeros_like(m)
    best = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    if stats[best, cv2.CC_STAT_AREA] < min_pixels:
        return np.zeros_like(m)
    return labels == best


PROPOSE_OUTPUTS = ("masks", "contact_sheet.png")
"""What ``propose-masks`` writes into --out (and replaces as a whole with --overwrite)."""


def propose_masks(cfg: ProposeMasksConfig) -> dict:
    """Write one proposed mask per image and the contact sheet; returns counts (``frames``, ``with_target``,
    ``mask_like``: frames with at most ``MASK_MAX_LEVELS`` distinct values)."""
    from graspsim.vision.io import list_images

    files = list_images(cfg.images)
    out = check_out_dir(cfg.out, overwrite=cfg.overwrite)
    with staged_dir(out, lambda name: name in PROPOSE_OUTPUTS) as stage:
        found, mask_like = _propose(cfg, files, stage)
    n = len(files)
    if mask_like:
        log.warning("propose-masks: %d of %d images in %s have at most %d distinct values: they look like masks, not "
                    "camera frames (does --images point at a masks/ folder?)", mask_like, n, cfg.images,
                    MASK_MAX_LEVELS)
    (log.info if found else log.warning)(
        "propose-masks: a target proposed in %d of %d frames; CHECK %s by eye and correct the masks before using "
        "them", found, n, out / "contact_sheet.png")
    return {"frames": n, "with_target": found, "mask_like": mask_like}


def _propose(cfg: ProposeMasksConfig, files: list[Path], stage: Path) -> tuple[int, int]:
    """Write the masks and the contact sheet into ``stage``; returns (frames with a proposal, mask-like frames)."""
    import cv2

    from graspsim.vision.io import read_image, write_png

    (stage / "masks").mkdir()
    tiles, found, mask_like = [], 0, 0
    for p in files:
        img = read_image(p)
        mask_like += int(np.unique(img).size <= MASK_MAX_LEVELS)
        m = colour_mask(img, cfg.hue, cfg.min_saturation, cfg.min_value, cfg.min_pixels)
        found += bool(m.any())
        write_png(stage / "masks" / f"{p.stem}.png", m)
        t = cfg.thumb
        a = cv2.resize(img, (t, t), interpolation=cv2.INTER_AREA)
        b = a.copy()
        edge = cv2.resize(m.astype(np.uint8), (t, t), interpolation=cv2.INTER_NEAREST)
        contours, _ = cv2.findContours(edge, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        cv2.drawContours(b, contours, -1, (0, 255, 0), 1)
        tile = np.concatenate([a, np.full((t, 2, 3), 255, np.uint8), b], 1)
        cv2.putText(tile, p.stem[:20], (2, 12), cv2.FONT_HERSHEY_SIMPLEX, 0.35, (255, 255, 0), 1)
        tiles.append(tile)
    cols = 4
    while len(tiles) % cols:
        tiles.append(np.zeros_like(tiles[0]))
    sheet = np.concatenate([np.concatenate(tiles[i:i + cols], 1) for i in range(0, len(tiles), cols)], 0)
    write_png(stage / "contact_sheet.png", sheet)
    return found, mask_like


__all__ = ["ProposeMasksConfig", "RecordConfig", "colour_mask", "propose_masks", "record"]
