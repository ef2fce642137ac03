"""A user's labelled frames (an image set, :mod:`graspsim.vision.image_set`: ``images/`` plus ``masks/`` with the same
stems), read whole into tensors for ``graspsim calibrate`` and for fine-tuning (``train-vision --real``).

Every image needs a mask of the same width and height (all zero on a target-free frame), and all frames of one folder
must share one size, so that they stack into one batch and a mask pixel means the same at every frame. Frames must be
colour camera frames at least :data:`MIN_FRAME_SIDE` pixels on a side (the net finds the target by its colour: on grey
frames it finds almost nothing, and calibrating on them would choose a meaningless operating point), and masks must
mark the target, not the background (:func:`check_masks`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .image_set import (IMAGES, MASK_MAX_LEVELS, MASKS, find_masks, list_images, load_mask, mask_folder_of, read_image,
                        square_window)


MIN_FRAME_SIDE = 16
"""The smallest frame side (pixels) of labelled frames: a smaller frame holds no usable view of the target."""
MAX_MEAN_TARGET = 0.5
"""The largest mean fraction of a frame that a folder's masks may mark as target: the target is a small object, so
masks that cover most of their frames are inverted (0 on the target, 255 elsewhere)."""


def is_grey(img: np.ndarray) -> bool:
    """Whether ``img`` (H,W,3 uint8) has no colour: its three channels equal everywhere (a greyscale file, or a grey
    frame saved as RGB), and not a single flat value (an all-black frame is left to the other checks)."""
    return bool((img[..., 0] == img[..., 1]).all() and (img[..., 1] == img[..., 2]).all() and np.ptp(img) > 0)


def check_masks(frames: "LabelledFrames", masks: Path) -> None:
    """ValueError naming ``masks`` (the folder) when a mask marks every pixel of its frame as target, or when the
    masks mark more than :data:`MAX_MEAN_TARGET` of their frames on average: both mean inverted masks."""
    cover = frames.mask.flatten(1).float().mean(1)  # N: fraction of each frame marked as target
    full = [n for n, c in zip(frames.names, cover.tolist()) if c >= 1.0]
    if full:
        raise ValueError(f"masks in {masks}: {len(full)} of {len(frames)} mark every pixel of their frame as target "
                         f"(e.g. {full[0]}); they look inverted: a mask is 255 on the target and 0 elsewhere")
    if float(cover.mean()) > MAX_MEAN_TARGET:
        raise ValueError(f"masks in {masks} mark {100 * float(cover.mean()):.0f}% of each frame as target on average; "
                         "the target is a small object, so they look inverted: a mask is 255 on the target and 0 "
                         "elsewhere")


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

    def square(self) -> "LabelledFrames":
        """The frames' and masks' centred squares (:func:`graspsim.vision.image_set.square_crop`'s cut); square frames
        are returned as they are."""
        h, w = self.rgb.shape[-2:]
        if h == w:
            return self
        rows, cols = square_window(h, w)
        return LabelledFrames(self.rgb[..., rows, cols].contiguous(), self.mask[..., rows, cols].contiguous(),
                              self.names, self.folder)

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
    mask, a mask of another size than its image, frames of different sizes (or not square, with ``square``), frames
    smaller than :data:`MIN_FRAME_SIDE`, grey frames (:func:`is_grey`), an unreadable file, a mask that looks like a
    photo rather than a binary mask, or inverted masks (:func:`check_masks`)."""
    images = Path(images)
    files = list_images(images)
    mask_dir = Path(masks) if masks is not None else mask_folder_of(images)
    pairs = find_masks(files, mask_dir)
    rgbs, gts, size, grey = [], [], None, []
    for img_path in files:
        img = read_image(img_path)
        if min(img.shape[:2]) < MIN_FRAME_SIDE:
            raise ValueError(f"image {img_path} is {img.shape[1]}x{img.shape[0]}; labelled frames must be at least "
                             f"{MIN_FRAME_SIDE}x{MIN_FRAME_SIDE} pixels (give the camera's frames, not thumbnails)")
        if is_grey(img):
            grey.append(img_path)
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
    if grey:
        more = f" and {len(grey) - 1} more of the {len(files)}" if len(grey) > 1 else ""
        raise ValueError(f"image {grey[0]}{more} in {images} has no colour (greyscale: red, green and blue are equal "
                         "everywhere); the vision net finds the target by its colour, so give the camera's colour "
                         "frames")
    rgb = torch.from_numpy(np.stack(rgbs)).permute(0, 3, 1, 2).contiguous()
    frames = LabelledFrames(rgb, torch.from_numpy(np.stack(gts)), [p.stem for p in files], images)
    check_masks(frames, mask_dir)
    return frames


class RealFrames:
    """A user's labelled frames to mix into training batches (``train-vision --real``), at the net's input ``size``.

    ``folders``: each holds ``images/`` and ``masks/``. Frames must be square and of one size across all folders.
    ``sample(n, gen)`` -> (rgb n,3,size,size uint8, mask n,size,size bool), drawn with replacement, each mirrored
    left-right with probability 1/2, on ``gen``'s device."""

    def __init__(self, folders: tuple[Path, ...] | list[Path], size: int):
        sets, seen = [], {}
        for folder in folders:
            folder = Path(folder)
            key = folder.resolve()
            if key in seen:
                same = "" if str(seen[key]) == str(folder) else f" (as {seen[key]} and {folder})"
                raise ValueError(f"--real {folder} is given twice{same}; its frames would count twice: give each folder "
                                 "once")
            seen[key] = folder
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


__all__ = ["LabelledFrames", "MAX_MEAN_TARGET", "MIN_FRAME_SIDE", "RealFrames", "check_masks", "is_grey",
           "load_labelled", "mask_folder_of"]
