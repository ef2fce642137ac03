"""Vision checkpoints: one ``torch.save`` dict, written atomically, checked for its kind on load.

Keys: ``kind`` = "graspsim-vision", ``format_version``, ``model`` (state_dict), ``model_config`` (dict of
:class:`~vision.model.SegNetConfig`), ``optimizer``, ``scheduler``, ``config`` (the training config as a
JSON-able dict), ``step``, ``threshold`` (probability threshold chosen on validation), ``peak_threshold`` (frame-level
gate chosen with it, 0 = none; optional, older checkpoints lack it), ``image_size``,
``metrics`` (last validation metrics), ``probe_rgb`` (a few validation images ``N,3,H,W uint8`` used to
check reduced-precision inference), ``generator_state`` (training data RNG, for resume).
"""

from __future__ import annotations

import io
import os

import torch

from graspsim.fileio import check_in_file

from .io import atomic_write_bytes

KIND = "graspsim-vision"
FORMAT_VERSION = 1
REQUIRED = ("model", "model_config", "config", "step", "threshold", "image_size")


def save_checkpoint(path: str | os.PathLike, payload: dict) -> None:
    """Atomically write ``payload`` (``kind`` and ``format_version`` are added) to ``path``."""
    data = dict(payload)
    data["kind"] = KIND
    data["format_version"] = FORMAT_VERSION
    buf = io.BytesIO()
    torch.save(data, buf)
    atomic_write_bytes(path, buf.getvalue())


TRAINING_ONLY = ("optimizer", "scheduler", "generator_state")


def save_deployable(src: str | os.PathLike, dst: str | os.PathLike) -> dict:
    """Copy the vision checkpoint ``src`` to ``dst`` without what only resuming training needs (``TRAINING_ONLY``:
    optimizer and data-RNG state): weights, configs, thresholds, metrics and probe images stay. Returns the payload
    written. The result loads with :func:`load_checkpoint` and :meth:`vision.infer.Segmenter.from_checkpoint`, but
    cannot be resumed."""
    ckpt = load_checkpoint(src)
    payload = {k: v for k, v in ckpt.items() if k not in TRAINING_ONLY and k not in ("kind", "format_version")}
    save_checkpoint(dst, payload)
    return payload


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Load and validate a vision checkpoint.

    FileNotFoundError if missing; ValueError if it is not a torch checkpoint, is of another kind (e.g. a
    control checkpoint, ``kind="graspsim-control"``) or lacks required keys.
    """
    path = check_in_file(path, "vision checkpoint", "vision checkpoint", inside="checkpoint.pt")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # any unpickling/zip error means "not a checkpoint"
        raise ValueError(f"{path} is not a readable torch checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(ckpt, dict):
        raise ValueError(f"{path} is not a graspsim checkpoint (got a {type(ckpt).__name__}, expected a dict)")
    kind = ckpt.get("kind")
    if kind != KIND:
        raise ValueError(f"{path} is a checkpoint of kind {kind!r}, expected {KIND!r} (a segmentation checkpoint "
                         "written by `graspsim train-vision`)")
    missing = [k for k in REQUIRED if k not in ckpt]
    if missing:
        raise ValueError(f"vision checkpoint {path} lacks keys {missing}")
    if ckpt.get("format_version", 0) > FORMAT_VERSION:
        raise ValueError(f"vision checkpoint {path} has format_version {ckpt['format_version']}, newer than this "
                         f"code ({FORMAT_VERSION})")
    return ckpt
