"""A bank of real background photos: random crops and resizes plus photometric augmentation.

Users point it at their own wrist-camera photos taken without the target; the repository ships
``data/backgrounds/{train,val}`` (see its SOURCES.md), installed with the package (:func:`data_path`). Crops come from albumentations
(``RandomResizedCrop``, flips, 90-degree turns, colour jitter including full hue rotations, gamma, blur,
grey), seeded per call so
the same seed gives the same crops.
"""

from __future__ import annotations

import importlib.resources
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from graspsim.validate import probability

from .image_set import list_images, read_image


log = logging.getLogger(__name__)

DATA_PACKAGE = "graspsim.data"  # the repository's data/ folder, installed under this name (pyproject.toml)


def data_path(*parts: str) -> Path:
    """Path of a shipped data file or folder, e.g. ``data_path("backgrounds", "train")``.

    The shipped data (background photos, transfer sets, the sample image set) is the repository's ``data/``
    folder, installed as the package ``graspsim.data``; this is the one place that finds it, for an editable
    install (the checkout's ``data/``) and a wheel (``site-packages/graspsim/data``) alike. The path is
    returned whether or not it exists; readers report a missing one. An editable install made before the data
    package existed does not know ``graspsim.data``; then the checkout's ``data/`` beside this package is used
    (``pip install -e .`` again makes it importable).
    """
    try:
        root = Path(str(importlib.resources.files(DATA_PACKAGE)))
    except ModuleNotFoundError:
        root = Path(__file__).resolve().parent.parent / "data"
    return root.joinpath(*parts)


DATA_DIR = data_path()
DEFAULT_BACKGROUNDS = data_path("backgrounds")
DEFAULT_TRANSFER = data_path("transfer")  # the foreign-render transfer sets (graspsim.vision.transfer)
DEFAULT_KINDS_TRANSFER = data_path("transfer_kinds")
"""The foreign-render transfer sets with spheres, cubes and cylinders (``render-transfer --kinds sphere,cube,cylinder``):
the default transfer sets of a run whose ``sim.target.kinds`` go beyond spheres (:func:`default_transfer`)."""


def default_transfer(transfer, kinds) -> object:
    """``transfer`` as given, except that the default sphere sets become :data:`DEFAULT_KINDS_TRANSFER` when the
    target ``kinds`` hold a cube or a cylinder (the sphere sets would not test them)."""
    if transfer is not None and Path(transfer) == DEFAULT_TRANSFER and tuple(kinds) != ("sphere",):
        return DEFAULT_KINDS_TRANSFER
    return transfer


def _pipeline(size: int, hue_rotation_prob: float):
    import albumentations as A
    import cv2

    return A.Compose(
        [
            A.RandomResizedCrop(size=(size, size), scale=(0.03, 1.0), ratio=(0.6, 1.6), interpolation=cv2.INTER_AREA),
            A.HorizontalFlip(p=0.5),
            A.VerticalFlip(p=0.5),
            A.RandomRotate90(p=0.5),
            A.ColorJitter(brightness=(0.6, 1.4), contrast=(0.6, 1.4), saturation=(0.5, 1.5), hue=(-0.08, 0.08), p=0.8),
            # any hue, so target-coloured (camouflaging) backgrounds are common and colour alone cannot decide
            A.ColorJitter(brightness=0.0, contrast=0.0, saturation=0.0, hue=(-0.5, 0.5), p=hue_rotation_prob),
            A.RandomGamma(gamma_limit=(70, 140), p=0.5),
            A.ToGray(p=0.05),
            A.GaussianBlur(blur_limit=(3, 3), sigma_limit=(0.3, 1.0), p=0.2),
        ]
    )


def _shift_hue_to(img: np.ndarray, hue: float) -> np.ndarray:
    """Rotate the hue of ``img`` (H,W,3 uint8 RGB) so its saturation-weighted circular mean hue is ``hue``
    (0..1); near-grey crops get a saturation boost so that the new hue shows."""
    import cv2

    hsv = cv2.cvtColor(img, cv2.COLOR_RGB2HSV_FULL)  # H in 0..255 for the full circle
    h = hsv[..., 0].astype(np.float32) * (2 * np.pi / 256.0)
    w = hsv[..., 1].astype(np.float32) + 1.0
    mean = np.arctan2((w * np.sin(h)).sum(), (w * np.cos(h)).sum()) / (2 * np.pi)
    shift = int(round(((hue - mean) % 1.0) * 256.0))
    hsv[..., 0] = ((hsv[..., 0].astype(np.int32) + shift) % 256).astype(np.uint8)
    sat = hsv[..., 1].astype(np.float32)
    if sat.mean() < 60:
        hsv[..., 1] = np.clip(sat + 60 + 60 * (sat / 255.0), 0, 255).astype(np.uint8)
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB_FULL)


class BackgroundBank:
    """In-memory real photos and a seeded crop/augment sampler.

    ``images``: list of ``H,W,3 uint8`` RGB arrays (any sizes); ``names``: their file names.
    ``skipped``: files that could not be read and were skipped (``skip_bad``). ``hue_rotation_prob``: chance
    that a crop's hue is rotated by a uniform amount (training aid against camouflage; use 0 for validation so
    held-out photos keep their real colours). ``camouflage_prob``: chance that a crop's hue is rotated so that
    its dominant (saturation-weighted mean) hue lands uniformly inside ``camouflage_hue`` (HSV hue, 1.0 = full
    circle: pass the target's hue band), i.e. the crop takes the target's colour; also 0 for validation.
    """

    def __init__(self, images: list[np.ndarray], names: list[str], size: int = 64, skipped: list[str] | None = None,
                 hue_rotation_prob: float = 0.0, camouflage_prob: float = 0.0,
                 camouflage_hue: tuple[float, float] = (-0.04, 0.06)):
        if not images:
            raise ValueError("BackgroundBank needs at least one image")
        if len(images) != len(names):
            raise ValueError(f"BackgroundBank: {len(images)} images but {len(names)} names")
        if not isinstance(size, int) or size < 8:
            raise ValueError(f"BackgroundBank.size must be an int >= 8; got {size!r}")
        for im, n in zip(images, names):
            if im.ndim != 3 or im.shape[2] != 3 or im.dtype != np.uint8:
                raise ValueError(f"background {n}: expected H,W,3 uint8, got {im.shape} {im.dtype}")
        self.images = images
        self.names = list(names)
        self.size = size
        self.skipped = list(skipped or [])
        probability("BackgroundBank", "hue_rotation_prob", hue_rotation_prob)
        probability("BackgroundBank", "camouflage_prob", camouflage_prob)
        self.hue_rotation_prob = hue_rotation_prob
        self.camouflage_prob = camouflage_prob
        self.camouflage_hue = (float(camouflage_hue[0]), float(camouflage_hue[1]))
        self._aug = _pipeline(size, hue_rotation_prob)

    @classmethod
    def from_folder(cls, folder: str | os.PathLike | Sequence[str | os.PathLike], size: int = 64,
                    skip_bad: bool = False, max_side: int = 320,
                    hue_rotation_prob: float = 0.0, camouflage_prob: float = 0.0,
                    camouflage_hue: tuple[float, float] = (-0.04, 0.06)) -> "BackgroundBank":
        """Load every PNG/JPEG directly inside ``folder`` (or inside each of several folders, in order); images
        larger than ``max_side`` are downscaled.

        An unreadable file raises ValueError naming it, unless ``skip_bad`` (then it is logged and listed
        in ``.skipped``). An empty folder (or one whose files are all bad) raises ValueError naming it.
        """
        import cv2

        folders = [folder] if isinstance(folder, (str, os.PathLike)) else list(folder)
        if not folders:
            raise ValueError("BackgroundBank.from_folder needs at least one folder")
        files = [f for d in folders for f in list_images(d)]
        images, names, skipped = [], [], []
        for f in files:
            try:
                im = read_image(f)
            except ValueError:
                if not skip_bad:
                    raise
                skipped.append(str(f))
                continue
            h, w = im.shape[:2]
            if max(h, w) > max_side:
                s = max_side / max(h, w)
                im = cv2.resize(im, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)
            images.append(im)
            names.append(f.name)
        if skipped:
            log.warning("skipped %d unreadable background file(s): %s", len(skipped), ", ".join(skipped))
        if not images:
            where = ", ".join(str(d) for d in folders)
            raise ValueError(f"background folder {where}: no readable images (skipped {len(skipped)})")
        return cls(images, names, size=size, skipped=skipped, hue_rotation_prob=hue_rotation_prob,
                   camouflage_prob=camouflage_prob, camouflage_hue=camouflage_hue)

    def __len__(self) -> int:
        return len(self.images)

    def sample(self, n: int, seed: int) -> np.ndarray:
        """``n`` augmented crops as ``n,size,size,3 uint8``; deterministic given ``seed``."""
        return self.sample_indexed(n, seed)[0]

    def sample_indexed(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`sample`, plus each crop's photo index ``n int64`` into :attr:`names`."""
        if n <= 0:
            raise ValueError(f"BackgroundBank.sample: n must be positive; got {n}")
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(self.images), size=n)
        self._aug.set_random_seed(int(seed))
        out = np.empty((n, self.size, self.size, 3), dtype=np.uint8)
        camo = rng.random(n) < self.camouflage_prob
        lo, hi = self.camouflage_hue
        goal = rng.uniform(lo, hi, size=n) % 1.0
        for i, k in enumerate(idx):  # per-image crop of a variable-size photo (CPU, ~3k img/s)
            out[i] = self._aug(image=self.images[k])["image"]
            if camo[i]:
                out[i] = _shift_hue_to(out[i], goal[i])
        return out, idx.astype(np.int64)

    def sample_tensor(self, n: int, generator: torch.Generator, device: torch.device | str = "cpu") -> Tensor:
        """``n`` crops as ``n,3,size,size float32`` in [0, 1] on ``device``; the seed is drawn from ``generator``."""
        return self.sample_tensor_indexed(n, generator, device)[0]

    def sample_tensor_indexed(self, n: int, generator: torch.Generator,
                              device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
        """Like :meth:`sample_tensor`, plus each crop's photo index ``n int64`` (as :meth:`sample_indexed`)."""
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device).item())
        arr, idx = self.sample_indexed(n, seed)
        return torch.from_numpy(arr).to(device).permute(0, 3, 1, 2).float().div_(255.0), torch.from_numpy(idx).to(device)


def resolve_split(backgrounds: str | os.PathLike, val_backgrounds: str | os.PathLike | None) -> tuple[Path, Path]:
    """Training and validation background folders.

    ``val_backgrounds`` given: (backgrounds, val_backgrounds). Otherwise ``backgrounds`` must contain
    ``train/`` and ``val/`` sub-folders (the layout of the shipped ``data/backgrounds``).
    """
    bg = Path(backgrounds)
    if not bg.exists():
        raise FileNotFoundError(f"background folder {bg} does not exist")
    if val_backgrounds is not None:
        val = Path(val_backgrounds)
        if not val.exists():
            raise FileNotFoundError(f"validation background folder {val} does not exist")
        if val.resolve() == bg.resolve():
            raise ValueError(f"validation backgrounds {val} must differ from training backgrounds {bg}")
        return bg, val
    if (bg / "train").is_dir() and (bg / "val").is_dir():
        return bg / "train", bg / "val"
    raise ValueError(
        f"background folder {bg} has no train/ and val/ sub-folders; pass --val-backgrounds DIR with "
        "photos held out from training"
    )
