"""The image-set folder: the one module that reads and writes it (the ``eval-real`` format, docs/vision.md).

Layout::

    SET/
      images/<stem>.png|.jpg|.jpeg   frames, listed non-recursively in name order; stems must be unique
      masks/<stem>.png               optional: one binary mask per image, same stem, same width and height
      meta.csv                       optional: one row of per-frame metadata per frame (``name`` = the stem)

Reading (any file a user brings): PNG or JPEG, any size, 8- or 16-bit, grey, RGB or RGBA (alpha dropped). Frames
come back as ``H,W,3 uint8`` RGB; masks as ``H,W bool`` (target = any nonzero value, at any bit depth, in any
channel). Errors name the file (and the folder) concerned.

Writing (what this project produces), through :class:`ImageSetWriter`:

- **naming**: ``<prefix>_<index>.png`` with the index zero-padded to ``digits`` (``frame_0000.png``), the index
  being the number of frames added before; a caller may give its own stem instead (deploy: ``ep000_t0000``);
- **bit depth**: frames are 8-bit RGB PNG (``H,W,3 uint8`` in), masks 8-bit grey PNG, 255 on the target and 0
  elsewhere; PNG is lossless, so a frame reads back bit for bit;
- **overwrite rule**: a non-empty ``out`` is refused (nothing written) unless ``overwrite``; everything is written
  into a hidden sibling folder and, when the writer closes without an error, replaces the set's own entries
  (``images/``, ``masks/``, the metadata file and the caller's declared extra outputs) as a whole; other files in
  ``out`` stay, and an error leaves ``out`` exactly as it was (see :func:`graspsim.fileio.staged_dir`).
"""

from __future__ import annotations

import csv
import io
import logging
import os
import re
import zlib
from pathlib import Path
from typing import Iterable, Mapping, Optional

import numpy as np

from graspsim.fileio import IMAGE_SUFFIXES, atomic_write_bytes, check_out_dir, staged_dir

log = logging.getLogger(__name__)

IMAGES = "images"
"""Sub-folder of the frames."""
MASKS = "masks"
"""Sub-folder of the masks (optional)."""
META = "meta.csv"
"""Default name of the per-frame metadata file (optional)."""
META_KEY = "name"
"""Column of the metadata file that holds a frame's stem."""
KIND_COLUMN = "kind"
"""Optional column of the metadata file: the target kind seen in the frame (``sphere``, ``cube``, ``cylinder``, the
names of ``graspsim.config.TARGET_KINDS``), or :data:`NO_KIND` in a target-free frame. Evaluation splits its
metrics by it (:func:`read_kinds`)."""
NO_KIND = "none"
"""The :data:`KIND_COLUMN` value of a target-free frame."""
IMAGE_EXTENSIONS = IMAGE_SUFFIXES  # the one list (graspsim.fileio)
PNG = ".png"
"""Suffix of every file this module writes."""
MASK_MAX_LEVELS = 8
"""A mask with more distinct values than this looks like an image (a photo, noise, a JPEG-compressed mask) rather
than a binary mask, and is reported."""
_COMPACT_PNG = None  # cv2 parameters of the strongest zlib setting, built on first use (cv2 is imported lazily)
_STEM_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# ----------------------------------------------------------------------------------------------------- reading
FRAME_CROPS = ("stretch", "square")
"""How a camera frame of any shape is fitted to a net's square input: ``stretch`` resizes the whole frame (a non-square
frame loses its aspect), ``square`` first keeps its centred square (for an embodiment whose wrist image is the square
crop of a wider sensor, the SO-101). ``eval-real``, ``calibrate`` and deploy's controller share them."""


def square_window(h: int, w: int) -> tuple[slice, slice]:
    """The rows and columns of the centred square of an ``h`` x ``w`` image (side ``min(h, w)``, the odd pixel left
    on the far side): the one cut of :func:`square_crop` and :meth:`graspsim.vision.labelled.LabelledFrames.square`."""
    s = min(h, w)
    y, x = (h - s) // 2, (w - s) // 2
    return slice(y, y + s), slice(x, x + s)


def square_crop(img: np.ndarray) -> np.ndarray:
    """The centred square of ``img`` H,W[,C] (:func:`square_window`); a square image is returned as it is. A mask
    and its frame cut by this stay aligned pixel for pixel."""
    h, w = img.shape[:2]
    return img if h == w else img[square_window(h, w)]


def check_frame_crop(owner: str, choice) -> None:
    """ValueError naming ``owner.frame_crop`` unless ``choice`` is ``auto`` or one of :data:`FRAME_CROPS`."""
    if choice != "auto" and choice not in FRAME_CROPS:
        raise ValueError(f"{owner}.frame_crop must be auto, {' or '.join(FRAME_CROPS)}; got {choice!r}")


def resolve_frame_crop(choice: str, embodiment: str, owner: str = "resolve_frame_crop") -> str:
    """``choice`` (``auto`` or one of :data:`FRAME_CROPS`) as a crop, ``auto`` resolved from the ``embodiment`` a net
    was trained for (``graspsim.runs.trained_embodiment`` of its checkpoint's config): ``square`` when its wrist image
    is the centred square of a wider sensor (``Embodiment.sensor_aspect != 1``), else ``stretch``. ValueError naming
    ``owner.frame_crop`` for anything else."""
    check_frame_crop(owner, choice)
    if choice in FRAME_CROPS:
        return choice
    from graspsim.embodiment import get_embodiment

    return "square" if get_embodiment(embodiment).sensor_aspect != 1.0 else "stretch"


def list_images(folder: str | os.PathLike) -> list[Path]:
    """Sorted image files (by name) directly inside ``folder`` (not recursive).

    Raises FileNotFoundError if the folder does not exist, ValueError if it is a file or holds no PNG/JPEG file.
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


def images_folder(folder: str | os.PathLike) -> Path:
    """The frames' folder of ``folder``: ``folder/images`` when that exists (a whole set), else ``folder`` itself."""
    folder = Path(folder)
    return folder / IMAGES if (folder / IMAGES).is_dir() else folder


def mask_folder_of(images: str | os.PathLike) -> Path:
    """The ``masks/`` folder beside an ``images/`` folder."""
    return Path(images).parent / MASKS


def check_unique_stems(images: list[Path]) -> None:
    """ValueError when two images share a file stem (``a.png``, ``a.jpg``): their masks and their outputs
    (``predictions/<stem>.png``) could not be told apart."""
    stems: dict[str, list[Path]] = {}
    for im in images:
        stems.setdefault(im.stem, []).append(im)
    dup = sorted(s for s, v in stems.items() if len(v) > 1)
    if dup:
        names = [p.name for s in dup[:10] for p in stems[s]]
        raise ValueError(f"several images in {images[0].parent} share a stem, so their masks and outputs would be "
                         f"ambiguous: {names}; rename or remove all but one of each")


def mask_files(mask_dir: str | os.PathLike) -> dict[str, list[Path]]:
    """Image files of ``mask_dir`` by stem (a list, so that ambiguous stems can be reported). Raises
    FileNotFoundError when the folder is missing and ValueError when it is a file."""
    mask_dir = Path(mask_dir)
    if not mask_dir.exists():
        raise FileNotFoundError(f"mask folder {mask_dir} does not exist")
    if not mask_dir.is_dir():
        raise ValueError(f"{mask_dir} is not a folder")
    by_stem: dict[str, list[Path]] = {}
    for p in sorted(mask_dir.iterdir()):
        if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS:
            by_stem.setdefault(p.stem, []).append(p)
    return by_stem


def find_masks(images: list[Path], mask_dir: str | os.PathLike) -> dict[Path, Path]:
    """Map every image to its mask (same stem). ValueError lists images without a mask or ambiguous stems, and
    refuses ``mask_dir`` equal to the images' folder. Masks without an image are ignored."""
    mask_dir = Path(mask_dir)
    by_stem = mask_files(mask_dir)
    if images and mask_dir.resolve() == images[0].parent.resolve():
        raise ValueError(f"--masks {mask_dir} is the images folder; give the folder of binary masks (same stems)")
    check_unique_stems(images)
    out, missing = {}, []
    for im in images:
        cand = by_stem.get(im.stem, [])
        if not cand:
            missing.append(im.name)
        elif len(cand) > 1:
            raise ValueError(f"image {im.name} has several masks: {sorted(c.name for c in cand)}")
        else:
            out[im] = cand[0]
    if missing:
        raise ValueError(f"{len(missing)} image(s) in {images[0].parent} have no mask in {mask_dir} (same stem "
                         f"expected; use an all-zero mask for frames without the target): {missing[:10]}")
    return out


def _to_uint8(img: np.ndarray) -> np.ndarray:
    if img.dtype == np.uint8:
        return img
    if img.dtype == np.uint16:
        return (img // 257).astype(np.uint8)
    if np.issubdtype(img.dtype, np.floating):
        return (np.clip(np.nan_to_num(img), 0.0, 1.0) * 255 + 0.5).astype(np.uint8)
    return np.clip(img, 0, 255).astype(np.uint8)


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_damage(data: bytes) -> str | None:
    """Why the PNG file ``data`` is damaged (a chunk that fails its CRC, a file cut short before its IEND chunk), or
    None when it is whole or not a PNG at all. Checked before decoding because libpng prints its own
    "libpng error: ..." line to stderr for such a file, ahead of the error that names the file."""
    if not data.startswith(_PNG_SIGNATURE):
        return None
    at = len(_PNG_SIGNATURE)
    while at + 12 <= len(data):
        length = int.from_bytes(data[at:at + 4], "big")
        kind = data[at + 4:at + 8]
        end = at + 12 + length
        if end > len(data):
            break
        if zlib.crc32(data[at + 4:end - 4]) != int.from_bytes(data[end - 4:end], "big"):
            return f"its {kind.decode('latin-1')} chunk at byte {at} fails its checksum"
        if kind == b"IEND":
            return None
        at = end
    return f"it ends at byte {len(data)}, before its last (IEND) chunk: it was cut short"


def _decode(path: Path, what: str) -> np.ndarray:
    import cv2

    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    raw = path.read_bytes()
    damage = png_damage(raw)
    if damage is not None:
        raise ValueError(f"cannot read {what} {path}: a damaged PNG file ({damage})")
    data = np.frombuffer(raw, dtype=np.uint8)
    img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if img is None or img.size == 0:
        raise ValueError(f"cannot read {what} {path}: unreadable or corrupt file")
    return img


def read_image(path: str | os.PathLike) -> np.ndarray:
    """Read one PNG/JPEG as ``H,W,3 uint8`` RGB. Grey is replicated, alpha dropped, 16-bit scaled (``// 257``).

    Raises FileNotFoundError when missing and ValueError naming the file when it cannot be decoded.
    """
    path = Path(path)
    img = _to_uint8(_decode(path, "image"))
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
    m = _decode(Path(path), "mask")
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


def read_meta(path: str | os.PathLike, key: str = META_KEY) -> dict[str, dict[str, str]]:
    """Rows of a metadata CSV by their ``key`` column (values as strings, the key column included). Raises
    FileNotFoundError when missing and ValueError naming the file when it has no ``key`` column or repeats a key."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"metadata file {path} does not exist")
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        if key not in (reader.fieldnames or ()):
            raise ValueError(f"metadata file {path} has no {key!r} column (columns: {reader.fieldnames})")
        rows: dict[str, dict[str, str]] = {}
        for r in reader:
            if r[key] in rows:
                raise ValueError(f"metadata file {path} lists frame {r[key]!r} twice")
            rows[r[key]] = r
    return rows


def read_kinds(images: str | os.PathLike, stems: Iterable[str]) -> Optional[dict[str, str]]:
    """Each frame's target kind, from the :data:`KIND_COLUMN` of the metadata file beside the ``images/`` folder
    ``images`` (``images/../meta.csv``): ``{stem: kind}`` for the ``stems`` the file lists (others get
    :data:`NO_KIND`), or None when there is no metadata file or it has no such column. Raises like
    :func:`read_meta`."""
    path = Path(images).parent / META
    if not path.is_file():
        return None
    rows = read_meta(path)
    if not rows or KIND_COLUMN not in next(iter(rows.values())):
        return None
    return {s: (rows[s][KIND_COLUMN] or NO_KIND) if s in rows else NO_KIND for s in stems}


# ----------------------------------------------------------------------------------------------------- writing
def encode_png(img: np.ndarray, compact: bool = False) -> bytes:
    """PNG bytes of an ``H,W`` grey or ``H,W,3`` RGB ``uint8`` image, or of an ``H,W bool`` mask (as 0/255).
    ``compact``: the strongest zlib setting (slower; for sets kept in git). Same input, same bytes."""
    import cv2

    global _COMPACT_PNG
    if img.dtype == bool:
        img = img.astype(np.uint8) * 255
    if img.ndim == 3:
        img = img[..., ::-1]
    if compact and _COMPACT_PNG is None:
        _COMPACT_PNG = [cv2.IMWRITE_PNG_COMPRESSION, 9, cv2.IMWRITE_PNG_STRATEGY, cv2.IMWRITE_PNG_STRATEGY_FILTERED]
    args = (_COMPACT_PNG,) if compact else ()
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(img), *args)
    if not ok:
        raise ValueError(f"could not encode a PNG of shape {img.shape} and dtype {img.dtype}")
    return buf.tobytes()


def write_png(path: str | os.PathLike, img: np.ndarray, compact: bool = False) -> None:
    """Atomically write an image or mask as PNG (see :func:`encode_png`); a whole set goes through
    :class:`ImageSetWriter`."""
    try:
        data = encode_png(img, compact)
    except ValueError as e:
        raise ValueError(f"{e} for {path}") from None
    atomic_write_bytes(path, data)


def frame_stem(index: int, prefix: str = "frame", digits: int = 4) -> str:
    """The stem of the ``index``-th frame of a set: ``frame_stem(7) == "frame_0007"``."""
    return f"{prefix}_{int(index):0{int(digits)}d}"


def _as_rgb(rgb, where: str) -> np.ndarray:
    rgb = np.asarray(rgb)
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3 or 0 in rgb.shape:
        raise ValueError(f"{where}: a frame must be H,W,3 uint8 RGB; got shape {rgb.shape} dtype {rgb.dtype}")
    return rgb


def _as_mask(mask, size: tuple[int, int], where: str) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.dtype != bool:
        if not (np.issubdtype(mask.dtype, np.integer) or np.issubdtype(mask.dtype, np.floating)):
            raise ValueError(f"{where}: a mask must be H,W bool (or numbers, nonzero = target); got dtype {mask.dtype}")
        mask = mask != 0
    if mask.shape != size:
        raise ValueError(f"{where}: the mask is {mask.shape} (H,W) but its frame is {size}; they must match")
    return mask


class ImageSetWriter:
    """Writes one image set; use it as a context manager::

        with ImageSetWriter("my_set", overwrite=False) as w:
            stem = w.add(rgb)                    # images/frame_0000.png; returns "frame_0000"
            w.add(rgb, mask, {"t_s": 0.2})        # + masks/frame_0001.png and a row of meta.csv

    The set appears in ``out`` only when the ``with`` block ends without an error (module docstring: overwrite rule).

    Args:
        out: the set's folder. Validated when the writer is made: an existing file, or a non-empty folder without
            ``overwrite``, is refused before anything is written (messages name ``flag``).
        overwrite: replace the set's earlier entries in a non-empty ``out``.
        masks: True: every frame needs a mask (``masks/`` is made even for an empty set); False: no masks; None:
            the first frame decides, and every later frame must do the same.
        prefix, digits: default stems ``<prefix>_<index>`` (:func:`frame_stem`).
        compact: the strongest PNG compression (:func:`encode_png`).
        meta_file: name of the metadata CSV (written when a frame was given ``meta``, at the end, rows in order).
        meta_fields: its columns in order (default: ``meta_key`` then the first row's keys in their order);
            a row may leave columns out (empty cells) but may not add others.
        meta_key: column that receives each frame's stem (None: no such column; the caller's rows say it all).
        extra_outputs: names of other entries the caller writes into :attr:`folder`; they are replaced along
            with the set under the overwrite rule.
        flag: how ``out`` is named in messages.
    """

    def __init__(self, out: str | os.PathLike, *, overwrite: bool = False, masks: Optional[bool] = None,
                 prefix: str = "frame", digits: int = 4, compact: bool = False, meta_file: str = META,
                 meta_fields: Optional[Iterable[str]] = None, meta_key: Optional[str] = META_KEY,
                 extra_outputs: Iterable[str] = (), flag: str = "--out"):
        self.out = check_out_dir(out, flag=flag, overwrite=overwrite)
        self.flag = flag
        self.masks = masks
        self.prefix, self.digits, self.compact = prefix, int(digits), bool(compact)
        self.meta_file, self.meta_key = meta_file, meta_key
        self.meta_fields = list(meta_fields) if meta_fields is not None else None
        self.outputs = frozenset((IMAGES, MASKS, meta_file, *extra_outputs))
        self.stems: list[str] = []
        self._rows: list[dict] = []
        self._seen: set[str] = set()
        self._stage_cm = None
        self.folder: Optional[Path] = None
        """The staging folder while the ``with`` block runs (where extra outputs go); None before and after."""

    # -- lifecycle
    def __enter__(self) -> "ImageSetWriter":
        if self._stage_cm is not None or self.stems:
            raise RuntimeError("an ImageSetWriter writes one set: make a new one for another")
        self._stage_cm = staged_dir(self.out, lambda name: name in self.outputs, self.flag)
        self.folder = self._stage_cm.__enter__()
        (self.folder / IMAGES).mkdir()
        if self.masks:
            (self.folder / MASKS).mkdir()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        cm, self._stage_cm = self._stage_cm, None
        try:
            if exc_type is None and self._rows:
                self._write_meta()
        except BaseException as e:  # the metadata failed: discard the staged set like any other error
            cm.__exit__(type(e), e, e.__traceback__)
            self.folder = None
            raise
        try:
            return bool(cm.__exit__(exc_type, exc, tb))
        finally:
            self.folder = None

    def __len__(self) -> int:
        return len(self.stems)

    # -- frames
    def add(self, rgb: np.ndarray, mask: Optional[np.ndarray] = None, meta: Optional[Mapping] = None,
            stem: Optional[str] = None) -> str:
        """Write one frame. ``rgb`` H,W,3 uint8 RGB; ``mask`` H,W bool (nonzero numbers count as target) of the same
        size; ``meta`` a row of the metadata file (bools are written as 0/1); ``stem`` the file stem (default
        :func:`frame_stem` of the frames added so far). Returns the stem. Raises ValueError naming the frame for a
        wrong shape or dtype, a repeated or unsafe stem, or a mask given or missing against the set's rule."""
        if self.folder is None:
            raise RuntimeError("ImageSetWriter.add outside its `with` block")
        stem = frame_stem(len(self.stems), self.prefix, self.digits) if stem is None else str(stem)
        where = f"image set {self.out}, frame {stem}"
        if not _STEM_OK.match(stem):
            raise ValueError(f"{where}: a stem is letters, digits, '.', '_' and '-' (not starting with '.' or '-')")
        if stem in self._seen:
            raise ValueError(f"{where}: a frame with this stem was already added")
        rgb = _as_rgb(rgb, where)
        if self.masks is None:
            self.masks = mask is not None
            if self.masks:
                (self.folder / MASKS).mkdir()
        if self.masks and mask is None:
            raise ValueError(f"{where}: this set has masks, so every frame needs one (all zero = no target)")
        if not self.masks and mask is not None:
            raise ValueError(f"{where}: this set has no masks (its first frame had none, or masks=False)")
        name = stem + PNG
        if mask is not None:
            mask = _as_mask(mask, rgb.shape[:2], where)
        atomic_write_bytes(self.folder / IMAGES / name, encode_png(rgb, self.compact))
        if mask is not None:
            atomic_write_bytes(self.folder / MASKS / name, encode_png(mask, self.compact))
        if meta is not None:
            row = dict(meta)
            if self.meta_key is not None:
                row = {self.meta_key: stem, **{k: v for k, v in row.items() if k != self.meta_key}}
            self._rows.append(row)
        self._seen.add(stem)
        self.stems.append(stem)
        return stem

    def _write_meta(self) -> None:
        fields = self.meta_fields or list(self._rows[0])
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=fields)  # extra keys raise ValueError
        w.writeheader()
        for r in self._rows:
            w.writerow({k: (int(v) if isinstance(v, (bool, np.bool_)) else v) for k, v in r.items()})
        atomic_write_bytes(self.folder / self.meta_file, buf.getvalue().encode())


__all__ = ["FRAME_CROPS", "IMAGES", "IMAGE_EXTENSIONS", "ImageSetWriter", "KIND_COLUMN", "MASKS", "MASK_MAX_LEVELS",
           "META", "META_KEY", "NO_KIND", "PNG", "check_frame_crop", "check_unique_stems", "encode_png", "find_masks",
           "frame_stem", "images_folder", "list_images", "load_mask", "mask_files", "mask_folder_of", "read_image",
           "read_kinds", "read_mask", "read_meta", "resolve_frame_crop", "square_crop", "square_window", "write_png"]
