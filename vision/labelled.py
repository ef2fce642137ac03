"""A user's labelled frames (an image set, :mod:`graspsim.vision.image_set`: ``images/`` plus ``masks/`` with the same
stems), read whole into tensors for ``graspsim calibrate`` and for fine-tuning (``train-vision --real``).

Every image needs a mask of the same width and height (all zero on a target-free frame), and all frames of one folder
must share one size, so that they stack into one batch and a mask pixel means the same at every frame.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .image_set import IMAGES, MASK_MAX_LEVELS, MASKS, find_masks, list_images, load_mask, mask_folder_of, read_image


@dataclass
class LabelledFrames:
    """``rgb`` N,3,H,W uint8; ``mask`` N,H,W bool (all False = target-free frame); ``names`` the image stems; ``folder``
    the images folder they came from."""

    rgb: Tensor
    mask: Tensor
    names: list[str]
    folder: Path

    def __len__(self) -> int:
        return int(self.rgb.shape[0])

    @property
    def has_target(self) -> Tensor:
        """N bool: frames whose mask holds a target pixel."""
        return self.mask.flatten(1).any(1)

    @property
    def n_target(self) -> int:
        return int(self.has_target.sum())

    @property
    def n_target_free(self) -> int:
        return len(self) - self.n_target

    def resized(self, size: int) -> "LabelledFrames":
        """The frames at ``size`` x ``size`` (the net's input): RGB area-averaged when shrinking (bilinear when
        enlarging), a mask pixel stays target when at least half of its area is."""
        if self.rgb.shape[-2:] == (size, size):
            return self
        mode = "area" if size < self.rgb.shape[-1] else "bilinear"
        rgb = F.interpolate(self.rgb.float(), size=(size, size), mode=mode).round().clamp(0, 255).to(torch.uint8)
        mask = F.interpolate(self.mask[:, None].float(), size=(size, size), mode=mode)[:, 0] >= 0.5
        return LabelledFrames(rgb, mask, self.names, self.folder)


def load_labelled(images: str | os.PathLike, masks: str | os.PathLike | None = None, square: bool = False) -> LabelledFrames:
    """Read every image of ``images`` and its mask from ``masks`` (default: ``masks/`` beside ``images``).

    Raises FileNotFoundError for a missing folder or file, and ValueError naming the file(s) for an image without a
    mask, a mask of another size than its image, frames of different sizes (or not square, with ``square``), an
    unreadable file, or a mask that looks like a photo rather than a binary mask."""
    images = Path(images)
    files = list_images(images)
    pairs = find_masks(files, Path(masks) if masks is not None else mask_folder_of(images))
    rgbs, gts, size = [], [], None
    for img_path in files:
        img = read_image(img_path)
        gt, levels = load_mask(pairs[img_path])
        if gt.shape != img.shape[:2]:
            raise ValueError(f"mask {pairs[img_path]} is {gt.shape[1]}x{gt.shape[0]} (WxH) but image {img_path} is "
                             f"{img.shape[1]}x{img.shape[0]}; masks must match their image size")
        if levels > MASK_MAX_LEVELS:
            raise ValueError(f"mask {pairs[img_path]} has {levels} distinct values: it looks like an image, not a binary "
                             "mask (255 on the target, 0 elsewhere)")
        if size is None:
            size = img.shape[:2]
            if square and size[0] != size[1]:
                raise ValueError(f"image {img_path} is {size[1]}x{size[0]}; labelled frames for training must be square "
                                 "(crop them to a centred square, docs/own_camera.md), or the target would be stretched")
        elif img.shape[:2] != size:
            raise ValueError(f"image {img_path} is {img.shape[1]}x{img.shape[0]} but {files[0]} is {size[1]}x{size[0]}; "
                             f"all frames of {images} must have one size")
        rgbs.append(img)
        gts.append(gt)
    rgb = torch.from_numpy(np.stack(rgbs)).permute(0, 3, 1, 2).contiguous()
    return LabelledFrames(rgb, torch.from_numpy(np.stack(gts)), [p.stem for p in files], images)


class RealFrames:
    """A user's labelled frames to mix into training batches (``train-vision --real``), at the net's input ``size``.

    ``folders``: each holds ``images/`` and ``masks/``. Frames must be square and of one size across all folders.
    ``sample(n, gen)`` -> (rgb n,3,size,size uint8, mask n,size,size bool), drawn with replacement, each mirrored
    left-right with probability 1/2, on ``gen``'s device."""

    def __init__(self, folders: tuple[Path, ...] | list[Path], size: int):
        sets = []
        for folder in folders:
            folder = Path(folder)
            if not (folder / IMAGES).is_dir():
                raise FileNotFoundError(f"--real {folder} has no images/ folder (it should hold images/ and masks/, the "
                                        "eval-real format)")
            frames = load_labelled(folder / IMAGES, folder / MASKS, square=True)
            if sets and frames.rgb.shape[-2:] != sets[0].rgb.shape[-2:]:
                raise ValueError(f"--real frames of {folder} are {frames.rgb.shape[-1]}x{frames.rgb.shape[-2]} but those of "
                                 f"{sets[0].folder.parent} are {sets[0].rgb.shape[-1]}x{sets[0].rgb.shape[-2]}; give "
                                 "frames of one size")
            sets.append(frames)
        if not sets:
            raise ValueError("RealFrames needs at least one folder")
        self.native_size = int(sets[0].rgb.shape[-1])
        self.folders = [Path(f) for f in folders]
        self.counts = [len(f) for f in sets]
        merged = [f.resized(size) for f in sets]
        self.rgb = torch.cat([f.rgb for f in merged])
        self.mask = torch.cat([f.mask for f in merged])
        self.n_target = int(self.mask.flatten(1).any(1).sum())

    def __len__(self) -> int:
        return int(self.rgb.shape[0])

    def record(self) -> dict:
        """Provenance for checkpoints and metrics: folders, frame counts, native frame size."""
        return {"folders": [str(f.resolve()) for f in self.folders], "n_frames_per_folder": self.counts,
                "n_frames": len(self), "n_target": self.n_target, "n_target_free": len(self) - self.n_target,
                "frame_size": self.native_size}

    def to(self, device: torch.device | str) -> "RealFrames":
        self.rgb, self.mask = self.rgb.to(device), self.mask.to(device)
        return self

    def sample(self, n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        dev = gen.device
        idx = torch.randint(len(self), (n,), generator=gen, device=dev)
        flip = torch.rand((n,), generator=gen, device=dev) < 0.5
        rgb, mask = self.rgb.to(dev)[idx], self.mask.to(dev)[idx]
        rgb = torch.where(flip[:, None, None, None], rgb.flip(-1), rgb)
        mask = torch.where(flip[:, None, None], mask.flip(-1), mask)
        return rgb, mask


__all__ = ["LabelledFrames", "RealFrames", "load_labelled", "mask_folder_of"]
