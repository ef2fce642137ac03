"""Build the small sample image set shipped in ``data/sample_real`` (reproducible from a seed).

It is *not* a real recording: no real photo of the target sphere with a mask is available offline.
Frames with the target are sim-real composites (the simulator's rendered sphere, fingers and distractors
alpha-composited onto crops of the held-out validation photos, ``data/backgrounds/val``) at 128x128;
target-free frames are plain crops of those real photos (all-zero masks). It demonstrates the folder
format of a recorded image set and exercises ``graspsim eval-real`` end to end.

    python -m graspsim.vision.sample_set --out data/sample_real   # rebuild it (in a checkout)
    python -m graspsim.vision.sample_set --where                  # print the installed set's folder (any install)

The set is installed with the package (:data:`SAMPLE_REAL`), so from a wheel install::

    S=$(python -m graspsim.vision.sample_set --where)
    graspsim eval-real --images "$S/images" --masks "$S/masks" --vision CHECKPOINT --out runs/eval_sample
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from graspsim import SimConfig

from .backgrounds import DEFAULT_BACKGROUNDS, BackgroundBank, data_path
from .compose import ComposeConfig, Composer
from .io import write_png

SAMPLE_REAL = data_path("sample_real")  # the shipped set: images/ and masks/


def build_sample_set(out: Path, n_target: int = 10, n_empty: int = 6, size: int = 128, seed: int = 7) -> list[str]:
    """Write ``out/images/*.png`` and ``out/masks/*.png``; returns the frame stems."""
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "masks").mkdir(parents=True, exist_ok=True)
    bank = BackgroundBank.from_folder(DEFAULT_BACKGROUNDS / "val", size=size)
    composer = Composer(bank, SimConfig(image_size=size), ComposeConfig(empty_prob=0.0, sim_prob=0.0, height=(0.0, 0.2),
                                                                       view_margin=0.0))
    g = torch.Generator().manual_seed(seed)
    stems = []
    kept = 0
    while kept < n_target:  # keep frames whose target is clearly visible (>= 6 px)
        c = composer(16, g)
        for rgb, mask in zip(c.rgb, c.mask):
            if kept < n_target and int(mask.sum()) >= 6:
                stem = f"frame_{len(stems):03d}"
                write_png(out / "images" / f"{stem}.png", rgb.permute(1, 2, 0).numpy())
                write_png(out / "masks" / f"{stem}.png", mask.numpy())
                stems.append(stem)
                kept += 1
    crops = bank.sample(n_empty, seed)
    for crop in crops:
        stem = f"frame_{len(stems):03d}"
        write_png(out / "images" / f"{stem}.png", crop)
        write_png(out / "masks" / f"{stem}.png", np.zeros((size, size), dtype=bool))
        stems.append(stem)
    return stems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--out", type=Path, help="write the set here (data/sample_real rebuilds the shipped one)")
    what.add_argument("--where", action="store_true", help="print the folder of the installed sample set and exit")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    if a.where:
        if not (SAMPLE_REAL / "images").is_dir():
            ap.exit(1, f"the sample set is missing from this install: {SAMPLE_REAL / 'images'} does not exist\n")
        print(SAMPLE_REAL)
        return
    build_sample_set(a.out, seed=a.seed)


if __name__ == "__main__":
    main()
