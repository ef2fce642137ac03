"""Reading image folders: photos for backgrounds, recorded real image sets and their binary masks.

Supported files: PNG and JPEG (``.png``, ``.jpg``, ``.jpeg``, any case). Any size, 8- or 16-bit, grey,
RGB or RGBA (alpha is dropped). Images come back as ``H,W,3 uint8`` RGB numpy arrays; masks as
``H,W bool`` (True = target pixel: any nonzero value, at any bit depth).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from graspsim.fileio import atomic_write_bytes  # noqa: F401  (re-exported: vision writers use it)

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")
MASK_MAX_LEVELS = 8
"""A mask with more distinct values than this looks like an image (a photo, noise, a JPEG-compressed mask) rather
than a binary mask, and is reported."""

log = logging.getLogger(__name__)


def list_images(folder: str | os.PathLike) -> list[Path]:
    """Sorted image files (by name) directly inside ``folder`` (not recursive).

    Raises FileNotFoundError if the folder does not exist, NotADirectoryError-like ValueError if it is
    a file, and ValueError if it holds no PNG/JPEG file.
    """
    folder = Path(folder)
    if not folder.exists():
        raise FileNotFoundError(f"image folder {folder} does not exist")
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
    if not files:
        raise ValueError(f"image folder {folder} holds no PNG/JPEG files ({', '.join(IMAGE_EXTENSIONS)})")
    return files


def _to_uint8(img: np.ndarray) -> np.ndarray:
    if img.dtype == np.uint8:
        return img
    if img.dtype == np.uint16:
        return (img // 257).astype(np.uint8)
    if np.issubdtype(img.dtype, np.floating):
        return (np.clip(np.nan_to_num(img), 0.0, 1.0) * 255 + 0.5).astype(np.uint8)
    return np.clip(img, 0, 255).astype(np.uint8)


def read_image(path: str | os.PathLike) -> np.ndarray:
    """Read one PNG/JPEG as ``H,W,3 uint8`` RGB. Grey is replicated, alpha dropped, 16-bit scaled.

    Raises FileNotFoundError when missing and ValueError naming the file when it cannot be decoded.
    """
    import cv2

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image {path} does not exist")
    data = np.fromfile(str(path), dtype=np.uint8)
    img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if img is None or img.size == 0:
        raise ValueError(f"cannot read image {path}: unreadable or corrupt file")
    img = _to_uint8(img)
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    elif img.ndim == 3 and img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    elif img.ndim == 3 and img.shape[2] == 4:
        img = img[..., 2::-1]
    elif img.ndim == 3 and img.shape[2] == 3:
        img = img[..., ::-1]
    else:
        raise ValueError(f"cannot read image {path}: unsupported shape {img.shape}")
    return np.ascontiguousarray(img)


def load_mask(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """Read a mask as ``(H,W bool, number of distinct values in the file)``. Target = any nonzero value, so 0/1,
    0/255 and 0/65535 masks (8- or 16-bit, grey or colour: any channel set) all read the same. Raises like
    :func:`read_image`."""
    import cv2

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"mask {path} does not exist")
    data = np.fromfile(str(path), dtype=np.uint8)
    m = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if m is None or m.size == 0:
        raise ValueError(f"cannot read mask {path}: unreadable or corrupt file")
    if m.ndim == 3:
        m = m[..., :3].max(axis=2)  # never rescaled: a 16-bit 1 is still a target pixel
    return m > 0, int(np.unique(m).size)


def read_mask(path: str | os.PathLike) -> np.ndarray:
    """Read a binary mask as ``H,W bool`` (see :func:`load_mask`); logs a warning when the file has more than
    ``MASK_MAX_LEVELS`` distinct values, because then it looks like an image rather than a mask."""
    mask, levels = load_mask(path)
    if levels > MASK_MAX_LEVELS:
        log.warning("mask %s has %d distinct values: it looks like an image, not a binary mask "
                    "(every nonzero pixel counts as target)", path, levels)
    return mask


def write_png(path: str | os.PathLike, img: np.ndarray) -> None:
    """Atomically write an ``H,W`` grey / ``H,W,3`` RGB uint8 image (or bool mask as 0/255) as PNG."""
    import cv2

    if img.dtype == bool:
        img = img.astype(np.uint8) * 255
    if img.ndim == 3:
        img = img[..., ::-1]
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(img))
    if not ok:
        raise ValueError(f"could not encode PNG for {path}")
    atomic_write_bytes(path, buf.tobytes())
