"""Segmentation metrics for the target mask, defined once for training validation and ``eval-real``.

Definitions (``thr`` = probability threshold; a pixel is predicted target iff ``prob >= thr``):

* **Target-visible frame**: its ground-truth mask has at least one pixel. **Target-free frame**: empty mask.
* **precision, recall, iou, f1** are *pixel* metrics pooled over all target-visible frames:
  TP, FP, FN are summed over those frames, then precision = TP/(TP+FP), recall = TP/(TP+FN),
  IoU = TP/(TP+FP+FN), F1 = 2TP/(2TP+FP+FN). (Pooled, so a frame counts by its number of pixels.)
  Predicted pixels on target-free frames do not enter these; they are counted by the next metric.
* **false_positive_image_rate**: fraction of target-free frames with at least ``min_pixels`` predicted
  pixels (default 1: any predicted pixel makes the frame a false-positive image).
* **Frame-averaged** metrics (``eval-real``'s ``per_frame`` block): the same ratios computed per target-visible
  frame and then averaged, so every frame counts once whatever its size (a 4000x3000 frame does not outweigh
  the rest). Precision is averaged over the frames with at least one predicted pixel (undefined elsewhere).
* The precision-recall curve sweeps ``thr`` over ``THRESHOLDS`` (histograms of 1000 probability bins).
* An optional frame-level gate (:func:`gate_frames`, the checkpoint's ``peak_threshold``) zeroes frames
  whose highest probability is below a peak threshold before the pixel threshold is applied; the metrics
  are then those of the gated masks, which are what the control module receives.
* An optional one-region rule (:func:`top_region`, the checkpoint's ``one_region``): a scene holds one target, so
  only the connected region of predicted pixels around the frame's most confident pixel is kept; confident
  blobs elsewhere (a target-coloured saucer beside the target) are dropped.
"""

from __future__ import annotations

import math
import warnings
import zlib
from statistics import NormalDist
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from graspsim.stats import wilson
from graspsim.validate import positive_int

BINS = 1000
THRESHOLDS = np.round(np.arange(1, 100) / 100.0, 2)  # 0.01 .. 0.99
# candidate peak thresholds of the frame-level gate (0 = no gate); the top ones matter because confident
# false positives on target-free frames sit at probabilities above 0.99
PEAKS = (0.0, 0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.998, 0.999, 0.9995, 0.9999, 0.99995, 0.99999, 0.999995,
         0.999999)
# a finer grid for nets whose probabilities saturate (calibrate --gate-grid fine): PEAKS plus a point every 0.1 in
# log-odds from 4 to 12 (probability 0.982 to 0.999994), since one step of PEAKS near 1 (0.998 -> 0.999 is 6.2 -> 6.9
# in log-odds) can blank many small-target frames at once
FINE_PEAKS = tuple(sorted(set(PEAKS) | {float(1.0 / (1.0 + np.exp(-z / 10.0))) for z in range(40, 121)}))
# the frame-gate grids calibrate offers by name (--gate-grid)
GATE_GRIDS = {"coarse": PEAKS, "fine": FINE_PEAKS}


def _div(a: float, b: float) -> float:
    return float(a) / float(b) if b > 0 else float("nan")


def frame_counts(prob: Tensor, gt: Tensor, threshold: float) -> dict[str, Tensor]:
    """Per-frame counts at one threshold. ``prob`` B,H,W float, ``gt`` B,H,W bool -> dict of B int64."""
    pred = prob >= threshold
    return {
        "tp": (pred & gt).sum((1, 2)),
        "fp": (pred & ~gt).sum((1, 2)),
        "fn": (~pred & gt).sum((1, 2)),
        "gt_pixels": gt.sum((1, 2)),
        "pred_pixels": pred.sum((1, 2)),
    }


class SegMetrics:
    """Accumulates exact counts at ``threshold`` plus probability histograms for the PR curve."""

    def __init__(self, threshold: float = 0.5, min_pixels: int = 1):
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1); got {threshold!r}")
        positive_int("", "min_pixels", min_pixels)
        self.threshold = float(threshold)
        self.min_pixels = min_pixels
        self.tp = self.fp = self.fn = 0
        self.num_images = self.num_target = self.num_empty = self.fp_images = 0
        self.hist_pos = np.zeros(BINS, dtype=np.int64)  # target-visible frames, gt pixels
        self.hist_neg = np.zeros(BINS, dtype=np.int64)  # target-visible frames, background pixels
        self.empty_kth = []  # per target-free frame: min_pixels-th largest probability

    def update(self, prob: Tensor, gt: Tensor) -> dict[str, Tensor]:
        """Add frames: ``prob`` B,H,W float in [0, 1], ``gt`` B,H,W bool. Returns the per-frame counts."""
        if prob.shape != gt.shape or prob.dim() != 3:
            raise ValueError(f"prob and gt must both be B,H,W; got {tuple(prob.shape)} and {tuple(gt.shape)}")
        prob = prob.float().cpu()
        gt = gt.bool().cpu()
        c = frame_counts(prob, gt, self.threshold)
        has = c["gt_pixels"] > 0
        self.num_images += prob.shape[0]
        self.num_target += int(has.sum())
        self.num_empty += int((~has).sum())
        self.tp += int(c["tp"][has].sum())
        self.fp += int(c["fp"][has].sum())
        self.fn += int(c["fn"][has].sum())
        self.fp_images += int((c["pred_pixels"][~has] >= self.min_pixels).sum())
        bins = (prob * BINS).long().clamp_(0, BINS - 1)
        if bool(has.any()):
            b, g = bins[has], gt[has]
            self.hist_pos += np.bincount(b[g].numpy(), minlength=BINS)
            self.hist_neg += np.bincount(b[~g].numpy(), minlength=BINS)
        if bool((~has).any()):
            flat = prob[~has].flatten(1)
            k = min(self.min_pixels, flat.shape[1])
            self.empty_kth.append(flat.topk(k, dim=1).values[:, -1].numpy())
        return c

    def summary(self) -> dict:
        """Metrics at ``threshold`` (exact counts); NaN where undefined (e.g. no target-visible frame)."""
        tp, fp, fn = self.tp, self.fp, self.fn
        return {
            "precision": _div(tp, tp + fp),
            "recall": _div(tp, tp + fn),
            "iou": _div(tp, tp + fp + fn),
            "f1": _div(2 * tp, 2 * tp + fp + fn),
            "false_positive_image_rate": _div(self.fp_images, self.num_empty),
            "num_images": self.num_images,
            "num_target_images": self.num_target,
            "num_empty_images": self.num_empty,
            "false_positive_images": self.fp_images,
            "tp_pixels": tp,
            "fp_pixels": fp,
            "fn_pixels": fn,
            "threshold": self.threshold,
            "min_pixels": self.min_pixels,
        }

    def curve(self, thresholds: np.ndarray = THRESHOLDS) -> dict[str, np.ndarray]:
        """Pooled precision, recall, F1, IoU and false-positive image rate per threshold (bin-resolution)."""
        kth = np.concatenate(self.empty_kth) if self.empty_kth else np.zeros(0)
        return curve_from_histograms(self.hist_pos, self.hist_neg, kth, thresholds)


def evaluate_set(probs: Tensor, masks: Tensor, threshold: float, min_pixels: int) -> tuple[dict, dict]:
    """:meth:`SegMetrics.summary` and :meth:`SegMetrics.curve` of ``probs`` N,H,W against ``masks`` N,H,W bool."""
    m = SegMetrics(threshold, min_pixels)
    for i in range(0, probs.shape[0], 256):
        m.update(probs[i:i + 256], masks[i:i + 256])
    return m.summary(), m.curve()


SUBSET_KEYS = ("iou", "precision", "recall", "false_positive_image_rate", "num_target_images", "num_empty_images")


def subset_metrics(probs: Tensor, masks: Tensor, groups: dict[str, Tensor], threshold: float,
                   min_pixels: int) -> dict[str, dict]:
    """The ``SUBSET_KEYS`` metrics of each named group of frames (``groups``: name -> N bool selecting frames of
    ``probs`` / ``masks``); groups that select no frame are left out."""
    out = {}
    for name, keep in groups.items():
        if bool(keep.any()):
            summ, _ = evaluate_set(probs[keep], masks[keep], threshold, min_pixels)
            out[name] = {k: summ[k] for k in SUBSET_KEYS}
    return out


KIND_TARGETS = {"iou": (">=", 0.85), "precision": (">=", 0.93), "recall": (">=", 0.88),
                "false_positive_image_rate": ("<=", 0.03)}
"""Issue 39's targets for every target kind on a transfer test set: (comparison, bound) per metric."""


def kind_groups(kinds: Sequence[str], has_target) -> dict[str, np.ndarray]:
    """The frames of each target kind's metrics row. ``kinds`` N names (``sphere``, ``cube``, ``cylinder``, or
    anything else, e.g. ``none`` for a target-free frame), ``has_target`` N bool (the mask is not empty).

    Kind ``k``'s group (N bool) holds its target-visible frames **and every target-free frame of the set**: its
    pixel metrics (which only count target-visible frames) are that kind's, and its false-positive image rate is the
    set's own, shared by all rows, since a target-free frame shows no kind. Kinds come in the order of
    ``graspsim.config.TARGET_KINDS``, then any other name in sorted order; a kind without a target-visible frame
    gets no row."""
    from graspsim.config import TARGET_KINDS

    has = np.asarray(has_target, dtype=bool)
    names = np.asarray(list(kinds), dtype=object)
    present = {str(k) for k in names[has]}
    order = [k for k in TARGET_KINDS if k in present] + sorted(present - set(TARGET_KINDS))
    return {k: (has & (names == k)) | ~has for k in order}


def meets_kind_targets(row: dict) -> bool:
    """True when a metrics row meets every :data:`KIND_TARGETS` bound it has a number for (NaN: not checked)."""
    ok = True
    for key, (op, bound) in KIND_TARGETS.items():
        v = float(row.get(key, float("nan")))
        if math.isfinite(v):
            ok &= v >= bound if op == ">=" else v <= bound
    return bool(ok)


def subset_metrics_from_counts(groups: dict[str, np.ndarray], tp, fp, fn, gt_pixels, pred_pixels,
                               min_pixels: int) -> dict[str, dict]:
    """:func:`subset_metrics` from per-frame counts (each an N array, e.g. ``eval-real``'s counts at the frames'
    own resolution) instead of probabilities: the ``SUBSET_KEYS`` metrics of each named group (N bool) of frames,
    pooled as :class:`SegMetrics` pools them; groups that select no frame are left out."""
    tp, fp, fn, gt, pred = (np.asarray(a, dtype=np.int64) for a in (tp, fp, fn, gt_pixels, pred_pixels))
    out = {}
    for name, keep in groups.items():
        keep = np.asarray(keep, dtype=bool)
        if not keep.any():
            continue
        has, empty = keep & (gt > 0), keep & (gt == 0)
        t, f, n = int(tp[has].sum()), int(fp[has].sum()), int(fn[has].sum())
        out[name] = {"iou": _div(t, t + f + n), "precision": _div(t, t + f), "recall": _div(t, t + n),
                     "false_positive_image_rate": _div(int((pred[empty] >= min_pixels).sum()), int(empty.sum())),
                     "num_target_images": int(has.sum()), "num_empty_images": int(empty.sum())}
    return out


BOOTSTRAP_CHUNK = 250
"""Resamples drawn at a time by :func:`bootstrap_intervals` (keeps its index arrays to chunk x frames)."""


def bootstrap_intervals(groups: dict[str, np.ndarray], tp, fp, fn, gt_pixels, pred_pixels, min_pixels: int,
                        draws: int = 2000, seed: int = 0, level: float = 0.95) -> dict[str, dict[str, list[float]]]:
    """How far each group's metrics could move on another draw of frames like these, for each named group (N bool,
    as :func:`subset_metrics_from_counts`):

    * ``iou``, ``precision``, ``recall`` (pooled over the group's target-visible frames): percentile intervals at
      ``level`` (e.g. 95 %) over ``draws`` resamples with replacement of those frames, the same number of frames in
      every resample. Each group draws from its own stream of ``seed`` and its name, so a group's interval does
      not depend on which other groups are asked for.
    * ``false_positive_image_rate`` (over the group's target-free frames): the Wilson score interval at ``level``,
      which stays honest where the rate is 0 (0 of 256 frames gives 0 to 0.0148; resampling would give 0 to 0);
      groups that share their target-free frames, as :func:`kind_groups` makes them, get the same interval.

    Per-frame counts as in :func:`subset_metrics_from_counts`. A target value inside an interval cannot be told
    from the measured one on this set. Groups without frames are left out; a metric without frames to measure it
    gets ``[nan, nan]``."""
    positive_int("bootstrap_intervals", "draws", draws)
    if not 0.0 < level < 1.0:
        raise ValueError(f"bootstrap_intervals: level must be in (0, 1); got {level!r}")
    tp, fp, fn, gt, pred = (np.asarray(a, dtype=np.int64) for a in (tp, fp, fn, gt_pixels, pred_pixels))
    lo_q, hi_q = 50.0 * (1.0 - level), 100.0 - 50.0 * (1.0 - level)
    z = NormalDist().inv_cdf(0.5 + level / 2)

    out = {}
    for name, keep in groups.items():
        keep = np.asarray(keep, dtype=bool)
        if not keep.any():
            continue
        has, empty = np.flatnonzero(keep & (gt > 0)), np.flatnonzero(keep & (gt == 0))
        row = {k: [math.nan, math.nan] for k in ("iou", "precision", "recall")}
        if len(has):
            rng = np.random.default_rng([seed, zlib.crc32(str(name).encode())])  # keyed by the group's name
            t, f, n = (np.empty(draws, np.int64) for _ in range(3))
            for start in range(0, draws, BOOTSTRAP_CHUNK):
                stop = min(draws, start + BOOTSTRAP_CHUNK)
                pick = has[rng.integers(0, len(has), (stop - start, len(has)))]  # chunk x frames
                t[start:stop], f[start:stop], n[start:stop] = tp[pick].sum(1), fp[pick].sum(1), fn[pick].sum(1)
            with np.errstate(divide="ignore", invalid="ignore"):
                for key, value in (("iou", t / (t + f + n)), ("precision", t / (t + f)), ("recall", t / (t + n))):
                    value = value[np.isfinite(value)]
                    if len(value):
                        row[key] = [float(np.percentile(value, lo_q)), float(np.percentile(value, hi_q))]
        fired = int((pred[empty] >= min_pixels).sum())
        row["false_positive_image_rate"] = list(wilson(fired, len(empty), z))
        out[name] = row
    return out


def curve_from_histograms(hist_pos: np.ndarray, hist_neg: np.ndarray, empty_kth: np.ndarray,
                          thresholds: np.ndarray = THRESHOLDS) -> dict[str, np.ndarray]:
    """The PR curve from ``BINS``-bin probability histograms of target (``hist_pos``) and background
    (``hist_neg``) pixels of target-visible frames, and each target-free frame's ``min_pixels``-th largest
    probability (``empty_kth``)."""
    # pixels with bin >= t*BINS are predicted positive
    cpos = np.cumsum(hist_pos[::-1])[::-1]
    cneg = np.cumsum(hist_neg[::-1])[::-1]
    idx = np.clip(np.round(np.asarray(thresholds) * BINS).astype(int), 0, BINS - 1)
    tp = cpos[idx].astype(float)
    fp = cneg[idx].astype(float)
    fn = float(hist_pos.sum()) - tp
    fpr = np.array([(empty_kth >= t).mean() if empty_kth.size else np.nan for t in thresholds])
    return _curve(thresholds, tp, fp, fn, fpr)


def _curve(thresholds: np.ndarray, tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, fpr: np.ndarray) -> dict[str, np.ndarray]:
    """A PR curve's columns from pooled pixel counts per threshold (NaN where a ratio is undefined)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"threshold": np.asarray(thresholds, dtype=float),
                "precision": np.where(tp + fp > 0, tp / (tp + fp), np.nan),
                "recall": np.where(tp + fn > 0, tp / (tp + fn), np.nan),
                "iou": np.where(tp + fp + fn > 0, tp / (tp + fp + fn), np.nan),
                "f1": np.where(2 * tp + fp + fn > 0, 2 * tp / (2 * tp + fp + fn), np.nan),
                "false_positive_image_rate": fpr}


def frame_averaged(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, gt_pixels: np.ndarray) -> dict:
    """Frame-averaged precision, recall, IoU and F1 over the target-visible frames (``gt_pixels > 0``) from
    per-frame counts (each an N array); NaN where no frame qualifies. ``num_frames`` counts the target-visible
    frames, ``num_frames_precision`` those of them with a prediction."""
    has = np.asarray(gt_pixels) > 0
    tp, fp, fn = (np.asarray(a, dtype=np.float64)[has] for a in (tp, fp, fn))
    predicted = tp + fp > 0

    def mean(v: np.ndarray) -> float:
        return float(v.mean()) if v.size else float("nan")

    return {
        "precision": mean(tp[predicted] / (tp + fp)[predicted]),
        "recall": mean(tp / (tp + fn)),
        "iou": mean(tp / (tp + fp + fn)),
        "f1": mean(2 * tp / (2 * tp + fp + fn)),
        "num_frames": int(has.sum()),
        "num_frames_precision": int(predicted.sum()),
    }


def _best_index(curve: dict[str, np.ndarray], max_fp_image_rate: float | None,
                min_precision: float | None) -> int:
    f1 = np.nan_to_num(curve["f1"], nan=-1.0)
    ok = np.ones_like(f1, dtype=bool)
    if max_fp_image_rate is not None:
        ok = np.nan_to_num(curve["false_positive_image_rate"], nan=0.0) <= max_fp_image_rate
    if min_precision is not None:
        both = ok & (np.nan_to_num(curve["precision"], nan=0.0) >= min_precision)
        if both.any():
            ok = both
    if not ok.any() and max_fp_image_rate is not None:  # none meets it: stay as close to it as possible
        fpr = np.nan_to_num(curve["false_positive_image_rate"], nan=np.inf)
        ok = fpr <= fpr.min()
    if ok.any():
        f1 = np.where(ok, f1, -1.0)
    return int(np.argmax(f1))


def best_threshold(curve: dict[str, np.ndarray], max_fp_image_rate: float | None = None,
                   min_precision: float | None = None) -> float:
    """Threshold with the highest pooled F1 (equivalently IoU) among those meeting the constraints: a
    false-positive image rate of at most ``max_fp_image_rate`` and a precision of at least ``min_precision``
    (each when given). When no threshold meets both, the precision constraint is dropped; when none meets
    the false-positive constraint either, the best F1 among those with the lowest false-positive image rate
    wins."""
    t = float(curve["threshold"][_best_index(curve, max_fp_image_rate, min_precision)])
    return t if math.isfinite(t) else 0.5


def gate_frames(prob: Tensor, peak: float) -> Tensor:
    """Frame-level detection gate: frames whose highest probability is below ``peak`` become all-zero.

    ``prob`` B,H,W in [0, 1] -> B,H,W. Thresholding the result at ``t`` predicts the pixels ``>= t`` of the
    frames that hold at least one pixel ``>= peak`` (hysteresis thresholding). A target-free frame is then a
    false-positive image only when the net is confident somewhere, while the pixel threshold ``t`` can stay low
    enough to take the whole target. ``peak <= 0`` (or ``peak <= t``) leaves the single-threshold rule.
    """
    if peak <= 0.0:
        return prob
    keep = prob.flatten(1).amax(1) >= peak
    return prob * keep[:, None, None].to(prob.dtype)


def top_region(mask: Tensor, score: Tensor) -> Tensor:
    """The one-region rule: of ``mask`` B,H,W bool, only the 8-connected region holding each frame's highest
    ``score`` (B,H,W, e.g. probabilities or logits) pixel; a frame whose highest pixel is not in ``mask`` comes back
    empty. Vectorised over the batch: the region grows from that pixel by 3x3 max-pooling inside ``mask`` until it
    stops changing (one pass per pixel of the region's extent from its peak; frames that stopped leave the loop)."""
    if mask.shape != score.shape or mask.dim() != 3:
        raise ValueError(f"top_region: mask and score must both be B,H,W; got {tuple(mask.shape)} and {tuple(score.shape)}")
    b = mask.shape[0]
    if b == 0:
        return mask.clone()
    top = score.reshape(b, -1).argmax(1)
    inside = mask.reshape(b, 1, *mask.shape[1:]).to(torch.float32)
    region = torch.zeros_like(inside).reshape(b, -1)
    region[torch.arange(b, device=mask.device), top] = 1.0
    region = region.view_as(inside) * inside
    active = torch.arange(b, device=mask.device)  # frames whose region still grows
    while active.numel():
        r, m = region[active], inside[active]
        grown = F.max_pool2d(r, 3, 1, 1) * m
        region[active] = grown
        active = active[(grown != r).flatten(1).any(1)]
    return region[:, 0].bool()


def keep_top_region(prob: Tensor, level: float) -> Tensor:
    """``prob`` B,H,W with every pixel outside the :func:`top_region` of ``prob >= level`` set to 0: thresholding
    the result at any ``t >= level`` gives the one-region rule's mask at ``level`` cut at ``t``."""
    return prob * top_region(prob >= level, prob).to(prob.dtype)


def decide(prob: Tensor, peak: float, level: float, one_region: bool) -> Tensor:
    """The vision net's decision rules on probabilities ``prob`` B,H,W: the frame gate at ``peak``
    (:func:`gate_frames`), then with ``one_region`` the one-region rule at the pixel threshold ``level``
    (:func:`keep_top_region`)."""
    prob = gate_frames(prob, peak)
    return keep_top_region(prob, level) if one_region else prob


def logit_mask(logits: Tensor, threshold: float, peak_threshold: float, one_region: bool) -> Tensor:
    """The same decision rules as :func:`decide`, on logits B,H,W -> B,H,W bool (no sigmoid pass): ``logit >=
    logit(threshold)`` in frames whose largest logit reaches ``logit(peak_threshold)`` (0: no frame gate), and with
    ``one_region`` only the :func:`top_region` of those pixels around the frame's largest logit. The one rule of
    :meth:`graspsim.vision.infer.Segmenter.predict_mask` and of the ONNX controller."""
    mask = logits >= torch.logit(torch.tensor(threshold)).item()
    if peak_threshold > 0.0:
        peak = torch.logit(torch.tensor(peak_threshold)).item()
        mask &= (logits.flatten(1).amax(1) >= peak)[:, None, None]
    return top_region(mask, logits) if one_region else mask


def _region_curves(prob: Tensor, gt: Tensor, min_pixels: int, peaks: tuple[float, ...]) -> list[dict[str, np.ndarray]]:
    """:func:`gated_curves`' per-peak curves under the one-region rule, by brute force over ``THRESHOLDS`` (the
    region depends on the threshold, so no histogram shortcut)."""
    n = prob.shape[0]
    has = gt.flatten(1).any(1)
    peak_of = prob.flatten(1).amax(1)
    g = gt.flatten(1)
    counts = []  # per threshold: per-frame TP, predicted pixels
    for t in THRESHOLDS:
        pred = top_region(prob >= float(t), prob).flatten(1)
        counts.append(((pred & g).sum(1), pred.sum(1)))
    tp = torch.stack([c[0] for c in counts]).double()  # T,N
    pr = torch.stack([c[1] for c in counts]).double()
    gts = g.sum(1).double()
    curves = []
    for peak in peaks:
        keep = (peak_of >= peak if peak > 0.0 else torch.ones(n, dtype=torch.bool)).double()
        k_tp = (tp * keep * has).sum(1).numpy()
        k_fp = ((pr - tp) * keep * has).sum(1).numpy()
        k_fn = (gts * has).sum().item() - k_tp
        empty = ~has
        fpr = ((pr[:, empty] >= min_pixels).double() * keep[empty]).mean(1).numpy() if bool(empty.any()) \
            else np.full(len(THRESHOLDS), np.nan)
        c = _curve(THRESHOLDS, k_tp, k_fp, k_fn, fpr)
        c["peak"] = np.full_like(c["threshold"], float(peak))
        curves.append(c)
    return curves


def gated_curves(prob: Tensor, gt: Tensor, min_pixels: int = 1, peaks: tuple[float, ...] = PEAKS,
                 one_region: bool = False) -> dict[str, np.ndarray]:
    """The :meth:`SegMetrics.curve` of ``gate_frames(prob, peak)`` for every peak in ``peaks``, concatenated
    (``len(peaks) * len(THRESHOLDS)`` entries, with a ``peak`` column). ``prob`` N,H,W, ``gt`` N,H,W bool. With
    ``one_region``, the masks are those of the one-region rule (:func:`decide`) at each threshold."""
    prob, gt = prob.float().cpu(), gt.bool().cpu()
    if one_region:
        curves = _region_curves(prob, gt, min_pixels, peaks)
        return {k: np.concatenate([c[k] for c in curves]) for k in curves[0]}
    n = prob.shape[0]
    has = gt.flatten(1).any(1)
    peak_of = prob.flatten(1).amax(1)
    # per-frame probability histograms of target and background pixels, so that each gate is a sum over frames
    bins = (prob * BINS).long().clamp_(0, BINS - 1).flatten(1) + torch.arange(n)[:, None] * BINS
    g = gt.flatten(1)
    h_pos = torch.bincount(bins[g], minlength=n * BINS).view(n, BINS)
    h_neg = torch.bincount(bins[~g], minlength=n * BINS).view(n, BINS)
    k = min(min_pixels, prob[0].numel())
    kth = prob.flatten(1).topk(k, dim=1).values[:, -1]
    curves = []
    for peak in peaks:
        keep = peak_of >= peak if peak > 0.0 else torch.ones(n, dtype=torch.bool)
        # gated-out frames predict nothing: their pixels all fall in the lowest bin
        pos = h_pos[has & keep].sum(0).numpy()
        pos[0] += int(h_pos[has & ~keep].sum())
        neg = h_neg[has & keep].sum(0).numpy()
        neg[0] += int(h_neg[has & ~keep].sum())
        c = curve_from_histograms(pos, neg, torch.where(keep, kth, torch.zeros_like(kth))[~has].numpy())
        c["peak"] = np.full_like(c["threshold"], float(peak))
        curves.append(c)
    return {k: np.concatenate([c[k] for c in curves]) for k in curves[0]}


def choose_thresholds(prob: Tensor, gt: Tensor, max_fp_image_rate: float | None = None,
                      min_precision: float | None = None, min_pixels: int = 1,
                      peaks: tuple[float, ...] = PEAKS, one_region: bool = False) -> tuple[float, float]:
    """(pixel threshold, peak threshold) for :func:`gate_frames`, chosen jointly on validation frames.

    ``prob`` N,H,W, ``gt`` N,H,W bool. Every pair of a peak in ``peaks`` (0 = no gate) and a pixel threshold in
    ``THRESHOLDS`` is scored (:func:`gated_curves`), and the pair with the best pooled F1 among those meeting
    the constraints wins (same constraint rules as :func:`best_threshold`; ties go to the weaker gate).
    """
    return choose_thresholds_on([(prob, gt)], max_fp_image_rate, min_precision, min_pixels, peaks, one_region)


def choose_thresholds_on(sets: Sequence[tuple], max_fp_image_rate: float | None = None,
                         min_precision: float | None = None, min_pixels: int = 1,
                         peaks: tuple[float, ...] = PEAKS, one_region: bool = False) -> tuple[float, float]:
    """Like :func:`choose_thresholds`, on several validation sets at once, e.g. our composites and frames drawn by
    another renderer. ``sets``: ``(prob N,H,W, gt N,H,W bool)`` pairs, or ``(prob, gt, max_fp_image_rate,
    min_precision)`` with constraints of that set's own (None: the shared ``max_fp_image_rate`` /
    ``min_precision``). A pair must meet the constraints on **every** set (the worst margin counts), and among
    those the best mean F1 over the sets wins, so the operating point holds on each distribution rather than on
    their pooled average. The fall-backs of :func:`best_threshold` apply to the worst margins."""
    if not sets:
        raise ValueError("choose_thresholds_on needs at least one (prob, gt) set")
    tables, fp_lim, prec_lim = [], [], []
    for s in sets:
        prob, gt = s[0], s[1]
        tables.append(gated_curves(prob, gt, min_pixels, peaks, one_region))
        fp_lim.append(s[2] if len(s) > 2 and s[2] is not None else max_fp_image_rate)
        prec_lim.append(s[3] if len(s) > 3 and s[3] is not None else min_precision)
    table = dict(tables[0])
    # margins against each set's own limits; the worst set decides (NaN, e.g. a set without target-free frames,
    # constrains nothing)
    with warnings.catch_warnings():  # a column that is NaN on every set stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        fp_margin = [t["false_positive_image_rate"] - lim for t, lim in zip(tables, fp_lim) if lim is not None]
        prec_margin = [t["precision"] - lim for t, lim in zip(tables, prec_lim) if lim is not None]
        table["false_positive_image_rate"] = np.nanmax(np.stack(fp_margin), 0) if fp_margin else table["false_positive_image_rate"]
        table["precision"] = np.nanmin(np.stack(prec_margin), 0) if prec_margin else table["precision"]
        table["f1"] = np.nanmean(np.stack([t["f1"] for t in tables]), 0)
    i = _best_index(table, 0.0 if fp_margin else None, 0.0 if prec_margin else None)
    t, peak = float(table["threshold"][i]), float(table["peak"][i])
    return (t if math.isfinite(t) else 0.5), (peak if peak > t else 0.0)
