"""Colour-range mask proposals, a labelling aid (``graspsim propose-masks``).

>>> graspsim propose-masks --images my_set/images --out my_set/proposed  # masks/ + contact_sheet.png

It **proposes** masks: a pixel is proposed as target when its colour lies in an HSV range (by
default the red-orange of the shipped target, hue -0.04..0.06 of the circle, saturation and value >= 0.35),
and only the largest connected blob of at least ``--min-pixels`` is kept. It knows nothing about the scene: a red
cup, a skin tone or a reflection is proposed as happily as the sphere, and a shadowed sphere may be missed.
Check every frame on the contact sheet (each frame beside its proposal outlined in green) and correct or delete
the masks before using them with ``eval-real --masks``. Frames with at most 8 distinct values look like masks
rather than camera frames (``--images`` pointing at a ``masks/`` folder); they are counted in the summary and
warned about, as is a run that proposes a target in no frame at all.

The masks follow the image-set format (:mod:`graspsim.vision.image_set`): ``masks/<stem>.png`` with the stem of each
image, 0/255 8-bit PNG, all zero where nothing is proposed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

import numpy as np

from graspsim.fileio import check_out_dir, staged_dir
from graspsim.validate import positive_int

from .image_set import MASK_MAX_LEVELS, MASKS, PNG, list_images, read_image, write_png

log = logging.getLogger(__name__)


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


PROPOSE_OUTPUTS = (MASKS, "contact_sheet.png")
"""What ``propose-masks`` writes into --out (and replaces as a whole with --overwrite)."""


def propose_masks(cfg: ProposeMasksConfig) -> dict:
    """Write one proposed mask per image and the contact sheet; returns counts (``frames``, ``with_target``,
    ``mask_like``: frames with at most ``MASK_MAX_LEVELS`` distinct values)."""
    files = list_images(cfg.images)
    images, where = Path(cfg.images).resolve(), Path(cfg.out).resolve()
    if where == images or images in where.parents:  # the masks and the sheet would join the frames
        raise ValueError(f"--out {cfg.out} is {'the' if where == images else 'inside the'} --images folder; its "
                         "masks/ and contact_sheet.png would be read as frames: choose an --out outside it")
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

    (stage / MASKS).mkdir()
    tiles, found, mask_like = [], 0, 0
    for p in files:
        img = read_image(p)
        mask_like += int(np.unique(img).size <= MASK_MAX_LEVELS)
        m = colour_mask(img, cfg.hue, cfg.min_saturation, cfg.min_value, cfg.min_pixels)
        found += bool(m.any())
        write_png(stage / MASKS / f"{p.stem}{PNG}", m)
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


__all__ = ["PROPOSE_OUTPUTS", "ProposeMasksConfig", "colour_mask", "propose_masks"]
