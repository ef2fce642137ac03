"""Loading the shipped foreign-render transfer sets (``data/transfer/{val,test}``).

The sets are made by :mod:`graspsim.vision.foreign_render` (``graspsim render-transfer``: pybullet's TinyRenderer over
the ``val`` and ``test`` background photos) and stored as image sets (:mod:`graspsim.vision.image_set`):
``images/*.png``, ``masks/*.png`` with the same stems (all-zero mask = target-free frame) and a ``meta.csv`` of
per-frame metadata. ``val`` may be used to choose an operating point; ``test`` is for final reporting only (see
``data/transfer/README.md``).
Nothing here is imported by the training code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .backgrounds import DEFAULT_TRANSFER
from .image_set import IMAGES, MASKS, META, list_images, read_image, read_mask, read_meta

TRANSFER_DIR = DEFAULT_TRANSFER
FRAME_SIZE = 64
_INT_FIELDS = ("visible_px", "fingers", "n_distractors")
_BOOL_FIELDS = ("has_target", "truncated", "occluded", "shadows")
_FLOAT_FIELDS = ("diameter_px", "target_u", "target_v", "glossiness")


@dataclass
class TransferSet:
    """``rgb`` N,3,64,64 uint8; ``mask`` N,64,64 bool; ``names`` image stems; ``meta`` one dict per frame
    (empty dicts when the folder has no ``meta.csv``)."""

    rgb: torch.Tensor
    mask: torch.Tensor
    names: list[str]
    meta: list[dict]

    def __len__(self) -> int:
        return len(self.names)


def _parse_meta_row(row: dict) -> dict:
    out: dict = dict(row)
    for k in _INT_FIELDS:
        if k in out:
            out[k] = int(out[k])
    for k in _BOOL_FIELDS:
        if k in out:
            out[k] = out[k] in ("1", "True", "true")
    for k in _FLOAT_FIELDS:
        if k in out:
            out[k] = float(out[k])
    return out


def load_transfer_set(split: str = "test", root: Path | None = None) -> TransferSet:
    """Read ``root/split`` (default root ``data/transfer``) into tensors.

    Raises FileNotFoundError when the folder (or its ``images``/``masks``) is missing, and ValueError
    naming the files when images and masks do not pair up by stem, a frame is not 64x64, or ``meta.csv``
    does not list the same frames.
    """
    folder = (Path(root) if root is not None else TRANSFER_DIR) / split
    if not folder.is_dir():
        raise FileNotFoundError(f"transfer set {folder} does not exist (make it with graspsim render-transfer)")
    img_dir, mask_dir = folder / IMAGES, folder / MASKS
    for d in (img_dir, mask_dir):
        if not d.is_dir():
            raise FileNotFoundError(f"transfer set {folder} has no {d.name}/ folder")
    images = list_images(img_dir)
    masks = {p.stem: p for p in list_images(mask_dir)}
    names = [p.stem for p in images]
    missing = [n for n in names if n not in masks]
    extra = sorted(set(masks) - set(names))
    if missing or extra:

        def some(stems: list[str]) -> str:
            return ", ".join(stems[:5]) + (" ..." if len(stems) > 5 else "")

        parts = [f"images without a mask in {mask_dir}: {some(missing)}"] if missing else []
        parts += [f"masks without an image in {img_dir}: {some(extra)}"] if extra else []
        raise ValueError(f"transfer set {folder}: " + "; ".join(parts))
    rgb = np.empty((len(images), FRAME_SIZE, FRAME_SIZE, 3), np.uint8)
    mask = np.empty((len(images), FRAME_SIZE, FRAME_SIZE), bool)
    for i, path in enumerate(images):
        img = read_image(path)
        m = read_mask(masks[path.stem])
        for p, a in ((path, img), (masks[path.stem], m)):
            if a.shape[:2] != (FRAME_SIZE, FRAME_SIZE):
                raise ValueError(f"{p} is {a.shape[1]}x{a.shape[0]}, transfer frames must be {FRAME_SIZE}x{FRAME_SIZE}")
        rgb[i] = img
        mask[i] = m
    meta: list[dict] = [{} for _ in names]
    meta_path = folder / META
    if meta_path.is_file():
        rows = {name: _parse_meta_row(r) for name, r in read_meta(meta_path).items()}
        if set(rows) != set(names):
            raise ValueError(
                f"{meta_path} lists {len(rows)} frames that do not match the {len(names)} images in {img_dir}"
            )
        meta = [rows[n] for n in names]
    return TransferSet(
        rgb=torch.from_numpy(rgb).permute(0, 3, 1, 2).contiguous(), mask=torch.from_numpy(mask), names=names, meta=meta
    )
