"""Scoring on the transfer sets (targets drawn by another renderer over unseen photos; :mod:`graspsim.vision.transfer`).

``train-vision`` reports the transfer ``test/`` set beside its own composite test, broken down by what makes a
frame hard (target size, truncation, a finger in front, distractors) and, when the set's metadata names each frame's
target kind, by kind; and it states how far each test's precision and false-positive image rate land from what
validation promised at the chosen operating point.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from .image_set import KIND_COLUMN, NO_KIND
from .metrics import kind_groups, meets_kind_targets, subset_metrics

if TYPE_CHECKING:
    from .transfer import TransferSet

SPLITS = ("val", "test")
GAP_KEYS = ("precision", "recall", "iou", "false_positive_image_rate")


def load_transfer_sets(root: str | os.PathLike | None, size: int = 64) -> dict[str, TransferSet]:
    """``{"val": ..., "test": ...}`` from ``root/val`` and ``root/test``, frames resized to ``size`` px when they
    differ (area-averaged RGB; a mask pixel stays target when at least half of its area is); ``{}`` when ``root``
    is None."""
    if root is None:
        return {}
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"transfer set folder {root} does not exist (it should hold val/ and test/ in the "
                                "eval-real format); point --transfer at it, or pass --transfer None to skip the "
                                "transfer test and --operating-point composite")
    return dict(_load(root.resolve(), size))


@functools.lru_cache(maxsize=2)
def _load(root: Path, size: int) -> tuple[tuple[str, TransferSet], ...]:
    """Cached per process (reading the 2,048 PNGs takes seconds); callers must not modify the sets."""
    from .transfer import load_transfer_set

    sets = {split: load_transfer_set(split, root) for split in SPLITS}
    for tset in sets.values():
        if tset.rgb.shape[-1] != size:
            mode = "area" if size < tset.rgb.shape[-1] else "bilinear"
            tset.rgb = F.interpolate(tset.rgb.float(), size=(size, size), mode=mode).round().clamp(0, 255).to(torch.uint8)
            tset.mask = F.interpolate(tset.mask[:, None].float(), size=(size, size), mode=mode)[:, 0] >= 0.5
    return tuple(sets.items())


def _number(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _flag(v) -> bool:
    return str(v).strip().lower() in ("1", "true", "yes")


def transfer_breakdown(probs: Tensor, tset: TransferSet, threshold: float, min_pixels: int) -> dict[str, dict]:
    """Metrics of subsets of a transfer set's frames, from its per-frame metadata: target diameter bins, truncated
    or occluded targets, frames with distractors, and target-free frames with and without distractors. ``probs``
    N,H,W are the gated probabilities of ``tset``'s frames."""
    meta = tset.meta
    has = tset.mask.flatten(1).any(1)
    diam = torch.tensor([_number(m.get("diameter_px")) for m in meta])
    dist = torch.tensor([_number(m.get("n_distractors")) for m in meta])
    groups = {
        "diameter < 4 px": has & (diam < 4),
        "diameter 4-6 px": has & (diam >= 4) & (diam < 6),
        "diameter >= 6 px": has & (diam >= 6),
        "truncated by the frame border": has & torch.tensor([_flag(m.get("truncated")) for m in meta]),
        "occluded by a finger": has & torch.tensor([_flag(m.get("occluded")) for m in meta]),
        "with distractors": has & (dist > 0),
        "target-free, with distractors": ~has & (dist > 0),
        "target-free, no distractors": ~has & (dist == 0),
    }
    return subset_metrics(probs, tset.mask, groups, threshold, min_pixels)


def transfer_by_kind(probs: Tensor, tset: TransferSet, threshold: float, min_pixels: int) -> dict[str, dict]:
    """One metrics row per target kind (:func:`graspsim.vision.metrics.kind_groups`: the kind's target frames plus the
    set's target-free frames, whose false-positive image rate all rows share), each with ``meets_targets``
    (:data:`graspsim.vision.metrics.KIND_TARGETS`); ``{}`` when the set's metadata has no kind column. ``probs``
    N,H,W are the gated probabilities of ``tset``'s frames."""
    if not any(KIND_COLUMN in m for m in tset.meta):
        return {}
    kinds = [m.get(KIND_COLUMN) or NO_KIND for m in tset.meta]
    has = tset.mask.flatten(1).any(1)
    groups = {k: torch.from_numpy(g) for k, g in kind_groups(kinds, has.numpy()).items()}
    rows = subset_metrics(probs, tset.mask, groups, threshold, min_pixels)
    return {k: {**row, "meets_targets": meets_kind_targets(row)} for k, row in rows.items()}


def operating_point_gap(promised: dict[str, dict], tests: dict[str, dict]) -> dict[str, dict]:
    """Test minus validation at the chosen operating point, per metric in ``GAP_KEYS``: ``composite`` compares the
    composite test with composite validation, ``transfer`` the transfer test with the transfer ``val/`` set (each
    when both are present)."""
    pairs = {"composite": ("composite", "test"), "transfer": ("transfer", "transfer_test")}
    out = {}
    for name, (v, t) in pairs.items():
        if v in promised and t in tests:
            out[name] = {k: tests[t][k] - promised[v][k] for k in GAP_KEYS
                         if math.isfinite(tests[t][k]) and math.isfinite(promised[v][k])}
    return out
