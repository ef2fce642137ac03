"""``graspsim calibrate``: choose a vision checkpoint's operating point (pixel threshold and frame gate) on a user's own
labelled frames, and write a copy of the checkpoint that carries it and records where it came from.

The frames are scored the way ``eval-real`` scores them (each frame fitted to the net's input by ``--frame-crop``, as
eval-real and deploy fit it; the probabilities resized back to the frame; metrics at the frame's resolution), and the
pair is chosen by the same rule as at the end of ``train-vision`` (:func:`graspsim.vision.metrics.choose_thresholds_on`):
the best pooled F1 among the (threshold, gate) pairs whose false-positive image rate is at most ``--max-fp-images``
and whose pixel precision is at least ``--min-precision``.

**How many frames.** With N target-free frames the false-positive image rate moves in steps of 1/N, so a limit of
``max_fp_images`` can only be told apart from zero when N >= 1 / max_fp_images (34 frames for 3 %). Likewise, one
wrong frame in n target frames should weigh no more than the imprecision allowed, 1 - min_precision, which needs
n >= 1 / (1 - min_precision) target frames (15 for 0.93), and never fewer than ``MIN_TARGET_FRAMES``. A smaller set is
refused with the counts it needs.

The output checkpoint is the input's deployable part (no optimizer state) with the new ``threshold`` and
``peak_threshold`` and a ``calibration`` record: ``folder`` (images), ``masks``, ``n_frames``, ``n_target``,
``n_target_free``, ``min_precision``, ``max_fp_images``, ``min_pixels``, ``chosen_at`` (UTC time), ``source``
(the input checkpoint), ``before`` / ``after`` (the metrics on these frames at the old and the new point) and
``constraints_met``. Score frames you did **not** calibrate on with ``eval-real`` before you trust the numbers.

**Several folders** (``--images A B ...``, e.g. one recording session per table): every folder is a set of its own
that must meet both limits (the worst folder decides), and among the pairs that do, the best mean F1 over the folders
wins (:func:`graspsim.vision.metrics.choose_thresholds_on`). So a folder of easy tables cannot buy false positives on a
folder of hard ones, as pooling their frames would. Each folder must be large enough on its own. The record then
holds lists in ``folder`` and ``masks``, the totals in ``n_*``, the pooled ``before`` / ``after``, and ``by_folder``
(each folder's counts and ``before`` / ``after``); ``constraints_met`` asks every folder.

**Several nets** (``--vision A B ...``, nets of one recipe trained with other seeds): the output is their ensemble
(:mod:`graspsim.vision.ensemble`), whose logits are the members' average, calibrated as one net; ``source`` is then
the list of members and ``before`` is measured at the first member's point. It costs the members' summed inference
time wherever it runs. ``--ensemble-weights`` averages the members' logits with weights of your choice (one per
net; normalised to sum 1) instead of alike, e.g. to lean on the net that is better on the harder target kind.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

import numpy as np
import torch
from torch import Tensor

from graspsim import runs
from graspsim.fileio import check_writable
from graspsim.runtime import Runtime, RuntimeConfig
from graspsim.validate import boolean, positive_int

from .checkpoint import load_checkpoint, save_checkpoint
from .ensemble import WEIGHTS_KEY, check_weights, ensemble_payload
from .image_set import NO_KIND, check_frame_crop, read_kinds, resolve_frame_crop
from .infer import Segmenter, check_precision, frame_probabilities, to_frame_size
from .labelled import LabelledFrames, load_labelled
from .metrics import GATE_GRIDS, choose_thresholds_on, decide, evaluate_set, kind_groups

log = logging.getLogger(__name__)

MIN_TARGET_FRAMES = 10
"""The fewest target frames calibrate accepts whatever --min-precision is."""
REPORT_KEYS = ("precision", "recall", "iou", "f1", "false_positive_image_rate", "false_positive_images",
               "num_target_images", "num_empty_images", "threshold")


@dataclass(frozen=True)
class CalibrateConfig:
    """Choose the pixel threshold and frame gate of a vision checkpoint on your own labelled frames."""

    vision: tuple[Path, ...]
    """Vision checkpoint to calibrate (written by train-vision, or the shipped vision/assets/segnet.pt). Several
    checkpoints of one recipe (other seeds): the output is their ensemble, whose logits are the members' average
    (:mod:`graspsim.vision.ensemble`), at the members' summed inference cost."""
    images: tuple[Path, ...]
    """Folder(s) of your labelled tuning frames (PNG/JPEG, one size). Keep the frames you report on out of them.
    Several folders: the limits must hold on each (module docstring)."""
    out: Path
    """Where to write the calibrated checkpoint (a file). An existing file is refused unless --overwrite is given."""
    ensemble_weights: tuple[float, ...] = ()
    """With several --vision nets: the weight of each net's logits in their average, in the --vision order (normalised
    to sum 1; e.g. 0.75 0.25); default: alike. Refused with one net."""
    masks: tuple[Path, ...] = ()
    """Folder(s) of binary masks with the images' stems (all-zero = target-free frame), one per --images folder in
    the same order; default: masks/ beside each --images folder."""
    min_precision: float = 0.93
    """The chosen pair must reach at least this pooled pixel precision on the frames (dropped when no pair does)."""
    max_fp_images: float = 0.03
    """The chosen pair may predict a target on at most this fraction of the target-free frames."""
    min_pixels: int = 1
    """A target-free frame is a false-positive image when at least this many pixels are predicted."""
    frame_gate: bool = True
    """Choose a frame gate with the threshold (:func:`graspsim.vision.metrics.gate_frames`); off: the gate is 0 (none)."""
    gate_grid: Literal["coarse", "fine"] = "coarse"
    """The frame gates tried: 'coarse' is :data:`graspsim.vision.metrics.PEAKS` (16 values, as train-vision uses),
    'fine' adds one every 0.1 in log-odds from 0.982 to 0.999994 (:data:`~graspsim.vision.metrics.FINE_PEAKS`), for a
    net whose frame peaks crowd just under 1, where one coarse step can blank many small-target frames."""
    one_region: Optional[bool] = None
    """The one-region rule (keep only the region of target pixels around a frame's most confident pixel;
    :func:`graspsim.vision.metrics.top_region`): ``--one-region True`` chooses the operating point with it and stores it
    in the output, ``False`` without it; default (None): as the input checkpoint has it."""
    by_kind: bool = False
    """Hold --min-precision on each target kind of each folder (the ``kind`` column of the meta.csv beside each
    --images folder), not only on each folder's frames pooled (module docstring)."""
    overwrite: bool = False
    """Replace an existing --out file."""
    precision: str = "auto"
    """Inference precision, as eval-real and deploy use it: auto, fp32 or bf16."""
    frame_crop: Literal["auto", "stretch", "square"] = "auto"
    """How a frame becomes the net's square input, as in eval-real and deploy: 'square' keeps the centred square of
    each frame and mask, 'stretch' resizes the whole frame, 'auto' follows the embodiment the net was trained for."""
    runtime: Runtime = field(default_factory=RuntimeConfig)
    """Device and CPU threads (flags --device, --threads; --dist-timeout and --progress are unused: calibrate runs
    on one process and draws no bar)."""

    def __post_init__(self) -> None:
        for name in ("vision", "images", "masks"):  # one may be given as a path (Python callers, older configs)
            v = getattr(self, name)
            object.__setattr__(self, name, () if v is None else (Path(v),) if isinstance(v, (str, os.PathLike))
                               else tuple(Path(x) for x in v))
        if not self.vision:
            raise ValueError("CalibrateConfig.vision: give the vision checkpoint to calibrate")
        if not self.images:
            raise ValueError("CalibrateConfig.images: give at least one folder of labelled frames")
        if self.ensemble_weights:
            object.__setattr__(self, "ensemble_weights", tuple(self.ensemble_weights))
            if len(self.vision) < 2:
                raise ValueError("CalibrateConfig.ensemble_weights weigh the nets of an ensemble; give at least two "
                                 "--vision checkpoints, or drop --ensemble-weights")
            check_weights(self.ensemble_weights, len(self.vision), "CalibrateConfig.ensemble_weights")
        if len({p.resolve() for p in self.vision}) < len(self.vision):
            raise ValueError(f"CalibrateConfig.vision: a checkpoint is given twice ({', '.join(map(str, self.vision))}); "
                             "an ensemble's members must be different nets")
        seen: dict[Path, Path] = {}
        for folder in self.images:  # a folder named twice would count its frames twice
            if folder.resolve() in seen:
                first = seen[folder.resolve()]
                also = "" if first == folder else f" (as {first} too)"
                raise ValueError(f"CalibrateConfig.images: {folder} is given twice{also}; name each folder once")
            seen[folder.resolve()] = folder
        if self.masks and len(self.masks) != len(self.images):
            raise ValueError(f"CalibrateConfig.masks: {len(self.masks)} mask folder(s) for {len(self.images)} --images "
                             "folder(s); give one per images folder, in the same order, or none (masks/ beside each)")
        for name in ("min_precision", "max_fp_images"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < v < 1.0:
                raise ValueError(f"CalibrateConfig.{name} must be in (0, 1); got {v!r}")
        positive_int("CalibrateConfig", "min_pixels", self.min_pixels)
        for name in ("frame_gate", "by_kind", "overwrite"):
            boolean("CalibrateConfig", name, getattr(self, name))
        if self.one_region is not None:
            boolean("CalibrateConfig", "one_region", self.one_region)
        if self.gate_grid not in GATE_GRIDS:
            raise ValueError(f"CalibrateConfig.gate_grid must be {' or '.join(map(repr, GATE_GRIDS))}; "
                             f"got {self.gate_grid!r}")
        check_precision("CalibrateConfig", "precision", self.precision)
        check_frame_crop("CalibrateConfig", self.frame_crop)


def frames_needed(min_precision: float, max_fp_images: float) -> tuple[int, int]:
    """(target frames, target-free frames) that a tuning set needs for these limits (module docstring)."""
    # round first: 1 / 0.03 is 33.33, but 1 / (1 - 0.9) is 10.000000000000002 in floating point
    n_free = math.ceil(round(1.0 / max_fp_images, 9))
    n_target = max(MIN_TARGET_FRAMES, math.ceil(round(1.0 / (1.0 - min_precision), 9)))
    return n_target, n_free


def check_enough(frames: LabelledFrames, min_precision: float, max_fp_images: float) -> None:
    """ValueError saying how many frames of each kind are missing when ``frames`` is too small to choose on."""
    need_target, need_free = frames_needed(min_precision, max_fp_images)
    have_target, have_free = frames.n_target, frames.n_target_free
    if have_target >= need_target and have_free >= need_free:
        return
    parts = []
    if have_free == 0:
        parts.append(f"it has no target-free frames (all-zero masks); false positives cannot be measured without "
                     f"them, and it needs at least {need_free}")
    elif have_free < need_free:
        parts.append(f"it has {have_free} target-free frames and needs at least {need_free}: with N of them the "
                     f"false-positive image rate moves in steps of 1/N, so --max-fp-images {max_fp_images:g} needs "
                     f"N >= {need_free}")
    if have_target < need_target:
        parts.append(f"it has {have_target} frames with the target and needs at least {need_target} (one frame in n "
                     f"should weigh no more than 1 - --min-precision {min_precision:g}, and never fewer than "
                     f"{MIN_TARGET_FRAMES})")
    raise ValueError(f"the tuning set {frames.folder} ({len(frames)} frames) is too small to choose an operating point: "
                     + "; ".join(parts))


def probabilities(seg: Segmenter, rgb: Tensor, batch: int = 64) -> Tensor:
    """Target probabilities N,H,W float32 of frames ``rgb`` N,3,H,W uint8, before any frame gate, as eval-real makes
    them (:func:`graspsim.vision.infer.frame_probabilities`, then back to the frames' size)."""
    n, _, h, w = rgb.shape
    out = torch.empty((n, h, w), dtype=torch.float32)
    frames = rgb.permute(0, 2, 3, 1).numpy()
    for i in range(0, n, batch):
        p = frame_probabilities(seg, list(frames[i:i + batch])).numpy()
        out[i:i + len(p)] = torch.from_numpy(np.stack([to_frame_size(q, h, w) for q in p]))
    return out


def _summary(probs: Tensor, mask: Tensor, threshold: float, peak: float, min_pixels: int, one_region: bool) -> dict:
    s, _ = evaluate_set(decide(probs, peak, threshold, one_region), mask, threshold, min_pixels)
    out = {k: s[k] for k in REPORT_KEYS}
    out["peak_threshold"] = peak
    out["one_region"] = one_region
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def _check_out(cfg: CalibrateConfig) -> Path:
    out = Path(cfg.out)
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; give the calibrated checkpoint's file name, e.g. {out / 'calibrated.pt'}")
    if out.exists() and any(_same_file(out, Path(v)) for v in cfg.vision):  # --overwrite would replace a net it reads
        raise ValueError(f"--out {out} is the --vision checkpoint itself; calibrate writes a calibrated copy and keeps "
                         "its source: choose another --out")
    if out.exists() and not cfg.overwrite:
        raise FileExistsError(f"--out {out} exists; pass --overwrite to replace it")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"the folder of --out {out} does not exist")
    return check_writable(out)  # now, not after the frames were scored


def _source(vision: tuple[Path, ...], weights: tuple[float, ...] = ()) -> tuple[dict, str]:
    """The checkpoint to calibrate and its name for errors: the one ``--vision`` checkpoint, or the ensemble of several
    (:func:`graspsim.vision.ensemble.ensemble_payload`), with ``weights`` when given. Each is loaded and checked
    (missing, corrupt and control checkpoints are refused) before any frame is read."""
    loaded = [load_checkpoint(v) for v in vision]
    if len(vision) == 1:
        return loaded[0], str(vision[0])
    payload = ensemble_payload(list(vision), loaded, weights or None)
    ws = payload.get(WEIGHTS_KEY)
    log.info("calibrating the ensemble of %d nets: %s%s", len(vision), ", ".join(map(str, vision)),
             "" if ws is None else " (weights " + ", ".join(f"{w:.4g}" for w in ws) + ")")
    return payload, f"the ensemble of {', '.join(map(str, vision))}"


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file (the same path, a symlink or a hard link to it)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def calibrate(cfg: CalibrateConfig) -> dict:
    """Choose the operating point on ``cfg.images`` and write the calibrated checkpoint to ``cfg.out``; returns the
    ``calibration`` record stored in it (module docstring). Every input is checked before anything is written."""
    out = _check_out(cfg)
    ckpt, name = _source(cfg.vision, cfg.ensemble_weights)
    masks = cfg.masks or (None,) * len(cfg.images)
    with cfg.runtime.job("calibrate"):  # sets --threads; one process does the whole set
        seg = Segmenter.from_payload(ckpt, name, device=cfg.runtime.device, precision=cfg.precision)
        crop = resolve_frame_crop(cfg.frame_crop, seg.embodiment, "CalibrateConfig")
        sets = [load_labelled(images, m) for images, m in zip(cfg.images, masks)]
        if crop == "square":
            sets = [f.square() for f in sets]
        for frames in sets:  # every folder is checked before any is scored
            check_enough(frames, cfg.min_precision, cfg.max_fp_images)
        kinds = [kind_subsets(f) if cfg.by_kind else {} for f in sets]
        for frames, groups in zip(sets, kinds):
            for kind, g in groups.items():
                check_enough(_subset(frames, g, kind), cfg.min_precision, cfg.max_fp_images)
        if len({tuple(f.rgb.shape[-2:]) for f in sets}) > 1:
            raise ValueError("the --images folders hold frames of different sizes ("
                             + ", ".join(f"{f.folder}: {f.rgb.shape[-1]}x{f.rgb.shape[-2]}" for f in sets)
                             + "); calibrate on one camera resolution at a time")
        probs = [probabilities(seg, f.rgb) for f in sets]
    one_region = seg.one_region if cfg.one_region is None else cfg.one_region
    choose_on = [(p[g], f.mask[g]) for p, f, groups in zip(probs, sets, kinds) for g in groups.values()] if cfg.by_kind \
        else [(p, f.mask) for p, f in zip(probs, sets)]
    threshold, peak = choose_thresholds_on(choose_on, cfg.max_fp_images, cfg.min_precision, cfg.min_pixels,
                                           GATE_GRIDS[cfg.gate_grid] if cfg.frame_gate else (0.0,), one_region)
    parts = [_folder_record(p, f, m, seg, threshold, peak, one_region, cfg, groups)
             for p, f, m, groups in zip(probs, sets, masks, kinds)]
    record = parts[0] if len(parts) == 1 else _pooled_record(parts, torch.cat(probs), torch.cat([f.mask for f in sets]),
                                                             seg, threshold, peak, one_region, cfg)
    record.update({
        "min_precision": cfg.min_precision, "max_fp_images": cfg.max_fp_images, "min_pixels": cfg.min_pixels,
        "by_kind": cfg.by_kind, "gate_grid": cfg.gate_grid, "ensemble_weights": ckpt.get(WEIGHTS_KEY),
        "chosen_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "source": ([str(Path(v).resolve()) for v in cfg.vision] if len(cfg.vision) > 1
                   else str(Path(cfg.vision[0]).resolve())), "inference_dtype": "bfloat16" if seg.bf16 else "float32",
        "frame_crop": crop,
    })
    before, after, met = record["before"], record["after"], record["constraints_met"]
    payload = {k: v for k, v in runs.deployable(ckpt).items() if k not in ("kind", "format_version")}
    payload.update(threshold=threshold, peak_threshold=peak, one_region=one_region, calibration=record)
    save_checkpoint(out, payload)
    fewest_free = min(f.n_target_free for f in sets)
    se = math.sqrt(cfg.max_fp_images * (1 - cfg.max_fp_images) / fewest_free)
    log.info("calibrated on %d frames (%d with the target, %d target-free) of %s: threshold %.2f, frame gate %s, "
             "one region %s (was %.2f, %s, %s)", record["n_frames"], record["n_target"], record["n_target_free"],
             ", ".join(str(i) for i in cfg.images), threshold, f"{peak:g}" if peak else "off",
             "on" if one_region else "off", seg.threshold, f"{seg.peak_threshold:g}" if seg.peak_threshold else "off",
             "on" if seg.one_region else "off")
    for name, m in (("before", before), ("after", after)):
        log.info("  %s: precision %s recall %s iou %s fp-images %d of %d", name, _f(m["precision"]), _f(m["recall"]),
                 _f(m["iou"]), m["false_positive_images"], m["num_empty_images"])
    for r in parts:
        if len(parts) > 1:
            m = r["after"]
            log.info("  after, %s: precision %s recall %s iou %s fp-images %d of %d", r["folder"], _f(m["precision"]),
                     _f(m["recall"]), _f(m["iou"]), m["false_positive_images"], m["num_empty_images"])
        for kind, k in r.get("kinds", {}).items():
            log.info("    %s: precision %s recall %s iou %s", kind, _f(k["after"]["precision"]),
                     _f(k["after"]["recall"]), _f(k["after"]["iou"]))
    log.info("a false-positive image rate of %.0f%% measured on %d target-free frames is uncertain by about +-%.1f "
             "points (one standard error); check on frames you did not calibrate on (eval-real)",
             100 * cfg.max_fp_images, fewest_free, 100 * se)
    if not met:
        log.warning("no operating point meets precision >= %g and false-positive images <= %g on these frames; the "
                    "closest was written (constraints_met: false). Consider fine-tuning on your frames "
                    "(train-vision --init %s --real ...)", cfg.min_precision, cfg.max_fp_images, cfg.vision[0])
    log.info("wrote %s", out)
    return record


def kind_subsets(frames: LabelledFrames) -> dict[str, Tensor]:
    """Each target kind's frames of ``frames`` (N bool each: the kind's target frames and every target-free frame,
    :func:`graspsim.vision.metrics.kind_groups`), from the ``kind`` column of the meta.csv beside its folder.
    ValueError naming the folder when it has no such column, when a frame that shows the target has no kind there,
    or when no frame has a kind."""
    try:
        kinds = read_kinds(frames.folder, frames.names)
    except ValueError as e:
        raise ValueError(f"--by-kind: the metadata beside {frames.folder} cannot be read: {e}") from None
    if kinds is None:
        raise ValueError(f"--by-kind needs each frame's target kind, from the 'kind' column of "
                         f"{Path(frames.folder).parent / 'meta.csv'}, which does not exist or has no such column; "
                         "add it (one row per frame: name, kind) or calibrate without --by-kind")
    names = [kinds[n] for n in frames.names]
    unknown = [n for n, k, t in zip(frames.names, names, frames.has_target.tolist()) if t and k == NO_KIND]
    if unknown:  # a target frame left out of meta.csv (or marked target-free there) would form a kind of its own
        raise ValueError(f"--by-kind: {len(unknown)} frame(s) of {frames.folder} show the target but have no kind in "
                         f"{Path(frames.folder).parent / 'meta.csv'} (first: {unknown[0]}); give every frame its kind")
    groups = kind_groups(names, frames.has_target.numpy())
    if not groups:
        raise ValueError(f"--by-kind: no target frame of {frames.folder} has a kind in its meta.csv")
    return {k: torch.from_numpy(g) for k, g in groups.items()}


def _subset(frames: LabelledFrames, rows: Tensor, kind: str) -> LabelledFrames:
    names = [n for n, keep in zip(frames.names, rows.tolist()) if keep]
    return LabelledFrames(frames.rgb[rows], frames.mask[rows], names, Path(f"{frames.folder} (kind {kind})"))


def _met(after: dict, cfg: CalibrateConfig) -> bool:
    return bool(after["false_positive_image_rate"] is not None and after["false_positive_image_rate"] <= cfg.max_fp_images
                and after["precision"] is not None and after["precision"] >= cfg.min_precision)


def _folder_record(probs: Tensor, frames: LabelledFrames, masks: Path | None, seg: Segmenter, threshold: float,
                   peak: float, one_region: bool, cfg: CalibrateConfig, kinds: dict[str, Tensor]) -> dict:
    """One folder's part of the ``calibration`` record: where its frames are, their counts, and the metrics at the
    input's point (``before``) and at the chosen one (``after``), with whether both limits hold there; with
    ``kinds`` (--by-kind) the same for each kind, and the limits must hold on each."""
    def measured(p: Tensor, mask: Tensor) -> tuple[dict, dict]:
        return (_summary(p, mask, seg.threshold, seg.peak_threshold, cfg.min_pixels, seg.one_region),
                _summary(p, mask, threshold, peak, cfg.min_pixels, one_region))

    before, after = measured(probs, frames.mask)
    images = Path(frames.folder).resolve()
    record = {
        "folder": str(images), "masks": str(Path(masks).resolve()) if masks is not None else str(images.parent / "masks"),
        "n_frames": len(frames), "n_target": frames.n_target, "n_target_free": frames.n_target_free,
        "frame_size": list(frames.rgb.shape[-2:]), "before": before, "after": after, "constraints_met": _met(after, cfg),
    }
    if kinds:
        record["kinds"] = {}
        for kind, g in kinds.items():
            kb, ka = measured(probs[g], frames.mask[g])
            record["kinds"][kind] = {"n_target": int(frames.has_target[g].sum()), "before": kb, "after": ka,
                                     "constraints_met": _met(ka, cfg)}
        record["constraints_met"] = record["constraints_met"] and all(k["constraints_met"]
                                                                      for k in record["kinds"].values())
    return record


def _pooled_record(parts: list[dict], probs: Tensor, mask: Tensor, seg: Segmenter, threshold: float, peak: float,
                   one_region: bool, cfg: CalibrateConfig) -> dict:
    """The ``calibration`` record of several folders: their places and summed counts, the metrics of all their frames
    together (``probs`` / ``mask`` concatenated) before and after, and each folder's own part (``by_folder``)."""
    return {
        "folder": [r["folder"] for r in parts], "masks": [r["masks"] for r in parts],
        **{k: sum(r[k] for r in parts) for k in ("n_frames", "n_target", "n_target_free")},
        "frame_size": parts[0]["frame_size"],
        "before": _summary(probs, mask, seg.threshold, seg.peak_threshold, cfg.min_pixels, seg.one_region),
        "after": _summary(probs, mask, threshold, peak, cfg.min_pixels, one_region),
        "constraints_met": all(r["constraints_met"] for r in parts),
        "by_folder": [{k: r[k] for k in ("folder", "n_frames", "n_target", "n_target_free", "before", "after",
                                         "constraints_met", "kinds") if k in r} for r in parts],
    }


def _f(v) -> str:
    return "n/a" if v is None else f"{v:.3f}"


__all__ = ["CalibrateConfig", "MIN_TARGET_FRAMES", "calibrate", "check_enough", "frames_needed", "kind_subsets",
           "probabilities"]
