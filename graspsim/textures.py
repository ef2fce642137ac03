"""Table texture bank: real photo textures shipped in ``graspsim/assets/textures`` plus procedural ones, or the photos
of a user's folder (``RandomizationConfig.table_photos``).

The bank is a single tensor ``T,S,S,3`` float32 in [0, 1] (channels last so one gather fetches a texel).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from .config import table_photo_files

TEXTURE_DIR = Path(__file__).parent / "assets" / "textures"
PHOTO_TEXTURES = ("wood", "brick", "grass", "gravel")
PROCEDURAL_TEXTURES = ("checker", "stripes", "noise", "plain")
TEXTURE_NAMES = PHOTO_TEXTURES + PROCEDURAL_TEXTURES
TEXTURE_SIZE = 128


def _read_square(path: Path, size: int) -> np.ndarray | None:
    """The centred square of the image at ``path`` at ``size`` x ``size`` (area-averaged; enlarged bilinearly when
    smaller), RGB float32 in [0, 1]; None when it cannot be read."""
    import cv2

    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if img is None:
        return None
    h, w = img.shape[:2]
    side = min(h, w)
    img = img[(h - side) // 2:(h - side) // 2 + side, (w - side) // 2:(w - side) // 2 + side]
    img = cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA if side >= size else cv2.INTER_LINEAR)[..., ::-1]
    return img.astype(np.float32) / 255.0


def _load_photo(name: str, size: int) -> np.ndarray:
    path = TEXTURE_DIR / f"{name}.png"
    img = _read_square(path, size)
    if img is None:
        raise FileNotFoundError(f"texture {path} is missing or unreadable (reinstall graspsim)")
    return img


def _load_table_photo(path: Path, size: int) -> np.ndarray:
    """A user's table photo (:func:`_read_square`); ValueError naming the file when it cannot be read."""
    img = _read_square(path, size)
    if img is None:
        raise ValueError(f"RandomizationConfig.table_photos: {path} is not a readable PNG or JPEG image")
    return img


def _procedural(name: str, size: int, rng: np.random.Generator) -> np.ndarray:
    y, x = np.mgrid[0:size, 0:size] / size
    if name == "checker":
        v = ((np.floor(x * 8) + np.floor(y * 8)) % 2) * 0.5 + 0.25
    elif name == "stripes":
        v = 0.5 + 0.35 * np.sin(2 * np.pi * 6 * (x + 0.3 * y))
    elif name == "noise":
        coarse = rng.random((9, 9)).astype(np.float32)
        import cv2

        v = cv2.resize(coarse, (size, size), interpolation=cv2.INTER_CUBIC)
        v = 0.3 + 0.5 * (v - v.min()) / max(float(v.max() - v.min()), 1e-6)
        v = v + 0.08 * rng.standard_normal((size, size))
    elif name == "plain":
        v = np.full((size, size), 0.6) + 0.03 * rng.standard_normal((size, size))
    else:  # pragma: no cover - guarded by TEXTURE_NAMES
        raise ValueError(name)
    v = np.clip(v, 0.0, 1.0).astype(np.float32)
    return np.stack([v, v, v], axis=-1)


@functools.lru_cache(maxsize=4)
def _bank_numpy(size: int, photos: str | None = None) -> np.ndarray:
    """The bank ``T,S,S,3`` float32: the built-in textures, or with ``photos`` (a folder) the folder's photos."""
    if photos is not None:
        return np.stack([_load_table_photo(f, size) for f in table_photo_files(photos)]).astype(np.float32)
    rng = np.random.default_rng(1234)
    imgs = [_load_photo(n, size) for n in PHOTO_TEXTURES]
    imgs += [_procedural(n, size, rng) for n in PROCEDURAL_TEXTURES]
    return np.stack(imgs).astype(np.float32)


def texture_count(photos: str | None = None) -> int:
    """Textures in the bank: ``len(TEXTURE_NAMES)``, or the photos in the folder ``photos`` (as first listed in this
    process: :func:`graspsim.config.table_photo_files`)."""
    return len(TEXTURE_NAMES) if photos is None else len(table_photo_files(photos))


def texture_bank(device: torch.device | str = "cpu", size: int = TEXTURE_SIZE, photos: str | None = None) -> torch.Tensor:
    """All table textures as ``T,S,S,3`` float32 in [0, 1] on ``device`` (T = :func:`texture_count`): the built-in
    bank, or the photos of the folder ``photos`` (``RandomizationConfig.table_photos``)."""
    return torch.from_numpy(_bank_numpy(size, photos)).to(device)
