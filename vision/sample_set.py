"""Build the small sample image set shipped in ``data/sample_real`` (reproducible from a seed).

It is *not* a real recording: no real photo of the target sphere with a mask is available offline.
Frames with the target are sim-real composites (the simulator's rendered sphere, fingers and distractors
alpha-composited onto crops of the held-out validation photos, ``data/backgrounds/val``) at 128x128;
target-free frames are plain crops of those real photos (all-zero masks). It demonstrates the folder
format of a recorded image set and exercises ``graspsim eval-real`` end to end.

    graspsim sample-set --out data/sample_real --overwrite   # rebuild it (in a checkout)
    graspsim sample-set --where                              # print the installed set's folder (any install)

The set is installed with the package (:data:`SAMPLE_REAL`), so from a wheel install::

    S=$(graspsim sample-set --where)
    graspsim eval-real --images "$S/images" --masks "$S/masks" --vision CHECKPOINT --out runs/eval_sample
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from graspsim import SimConfig

from .backgrounds import DEFAULT_BACKGROUNDS, BackgroundBank, data_path
from .compose import ComposeConfig, Composer
from .image_set import ImageSetWriter

log = logging.getLogger(__name__)

SAMPLE_REAL = data_path("sample_real")  # the shipped set: images/ and masks/


def build_sample_set(out: Path, n_target: int = 10, n_empty: int = 6, size: int = 128, seed: int = 7,
                     overwrite: bool = False) -> list[str]:
    """Write the set as an image set (:class:`graspsim.vision.image_set.ImageSetWriter`: ``out/images/frame_000.png``
    ..., ``out/masks/frame_000.png`` ...): ``n_target`` composites of ``size`` x ``size`` with a visible target, then
    ``n_empty`` target-free photo crops. Returns the frame stems. A non-empty ``out`` needs ``overwrite``; its other
    files (the README of ``data/sample_real``) stay."""
    with ImageSetWriter(out, overwrite=overwrite, masks=True, digits=3) as w:
        bank = BackgroundBank.from_folder(DEFAULT_BACKGROUNDS / "val", size=size)
        composer = Composer(bank, SimConfig(image_size=size), ComposeConfig(empty_prob=0.0, sim_prob=0.0,
                                                                           height=(0.0, 0.2), view_margin=0.0))
        g = torch.Generator().manual_seed(seed)
        while len(w) < n_target:  # keep frames whose target is clearly visible (>= 6 px)
            c = composer(16, g)
            for rgb, mask in zip(c.rgb, c.mask):
                if len(w) < n_target and int(mask.sum()) >= 6:
                    w.add(rgb.permute(1, 2, 0).numpy(), mask.numpy())
        for crop in bank.sample(n_empty, seed):
            w.add(crop, np.zeros((size, size), dtype=bool))
        return list(w.stems)


def installed_sample_set() -> Path:
    """The folder of the sample set installed with the package (``images/`` and ``masks/``); FileNotFoundError when
    this install lacks it."""
    if not (SAMPLE_REAL / "images").is_dir():
        raise FileNotFoundError(f"the sample set is missing from this install: {SAMPLE_REAL / 'images'} does not exist")
    return SAMPLE_REAL


@dataclass(frozen=True)
class SampleSetConfig:
    """Print the folder of the installed sample image set (--where), or rebuild the set into --out."""

    where: bool = False
    """Give the folder of the sample set installed with the package (images/ and masks/)."""
    out: Optional[Path] = None
    """Rebuild the set into this folder instead (data/sample_real, with --overwrite, rebuilds the shipped one)."""
    seed: int = 7
    """Seed of the rebuilt set (the shipped one: 7)."""
    overwrite: bool = False
    """Replace the set (images/, masks/) of a non-empty --out as a whole; its other files stay."""

    def __post_init__(self) -> None:
        if bool(self.where) == (self.out is not None):
            raise ValueError("SampleSetConfig: give exactly one of --where (print the installed set's folder) and "
                             "--out DIR (rebuild the set there)")


def sample_set(cfg: SampleSetConfig) -> Path:
    """The installed set's folder (``cfg.where``), or the folder ``cfg.out`` after rebuilding the set into it."""
    if cfg.where:
        return installed_sample_set()
    stems = build_sample_set(Path(cfg.out), seed=cfg.seed, overwrite=cfg.overwrite)
    log.info("wrote the %d-frame sample set to %s", len(stems), cfg.out)
    return Path(cfg.out)
