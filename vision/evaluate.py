"""``graspsim eval-real``: run the segmentation net on a recorded real image set and score it.

Folder format (an image set, :mod:`graspsim.vision.image_set`; docs/vision.md): ``--images DIR`` holds PNG/JPEG
frames; ``--masks DIR`` (optional) holds one binary PNG per image with the same file stem (``images/frame_0001.jpg`` <->
``masks/frame_0001.png``), same width and height, target pixels nonzero (any value, 8- or 16-bit), everything
else 0. A frame without the target has an all-zero mask (it must still be present). Masks with more than
``graspsim.vision.image_set.MASK_MAX_LEVELS`` distinct values look like images and are reported (log and
``suspect_masks``).

Each image is fitted to the network's input (``image_size`` in the checkpoint, INTER_AREA): ``--frame-crop square``
first keeps its centred square (and its mask's), ``stretch`` resizes the whole frame, and ``auto`` (the default) takes
``square`` for a net trained for an embodiment whose wrist image is the square crop of a wider sensor (the SO-101),
as deploy does (:func:`graspsim.vision.image_set.resolve_frame_crop`); frames are then scored on what the net sees. The
probability map (averaged with the left-right mirror's when the checkpoint was trained with ``mirror_tta``) is
gated (frames whose highest probability is below the checkpoint's ``peak_threshold``, or
``--peak-threshold``, predict nothing), resized back (bilinear) and thresholded at the checkpoint's threshold
(or ``--threshold``), and metrics are computed at the original resolution (definitions in :mod:`graspsim.vision.metrics`).

Writes to ``--out``: ``predictions/<stem>.png`` (binary masks), ``overlays/<stem>.png`` (image | prediction
| ground truth), ``report.html``, ``per_image.csv``; with masks also ``metrics.json`` and ``pr_curve.png``.
The headline precision/recall/IoU/F1 are pooled over pixels; ``per_frame`` holds the frame-averaged ones. When the
set's ``meta.csv`` (beside ``images/``) has a ``kind`` column (sets drawn by ``render-transfer --kinds``),
``metrics.json`` also holds ``by_kind``, one row per target kind (:func:`graspsim.vision.metrics.kind_groups`), and
``per_image.csv`` a ``kind`` column.
"""

from __future__ import annotations

import csv
import html
import io
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

import numpy as np
import torch

from graspsim.fileio import atomic_write_bytes, check_in_file, check_out_dir, staged_dir
from graspsim.progress import progress_bar
from graspsim.runtime import Runtime, RuntimeConfig
from graspsim.validate import non_negative_int, positive_int

from .labelled import MAX_MEAN_TARGET, is_grey
from .infer import Segmenter, check_precision, frame_probabilities, to_frame_size
from .image_set import (MASK_MAX_LEVELS, check_frame_crop, check_unique_stems, find_masks, list_images, load_mask,
                        read_image, read_kinds, resolve_frame_crop, square_crop, write_png)
from .metrics import (KIND_TARGETS, SegMetrics, bootstrap_intervals, decide, frame_averaged, kind_groups,
                      meets_kind_targets, subset_metrics_from_counts)

log = logging.getLogger(__name__)

OUTPUT_NAMES = ("metrics.json", "per_image.csv", "report.html", "pr_curve.png", "predictions", "overlays")
PRED_COLOR = np.array([0, 255, 255], dtype=np.float32)  # cyan
GT_COLOR = np.array([255, 0, 255], dtype=np.float32)  # magenta


@dataclass(frozen=True)
class EvalRealConfig:
    """Evaluate the segmentation net on a folder of recorded real images (optionally with masks)."""

    images: Path
    """Folder of PNG/JPEG frames (not recursive)."""
    vision: Path
    """Segmentation checkpoint written by `graspsim train-vision` (checkpoint.pt)."""
    out: Path
    """Output folder (created). A non-empty folder is refused unless --overwrite is given."""
    masks: Optional[Path] = None
    """Folder of binary PNG masks with the same stems as the images (all-zero = no target in the frame)."""
    threshold: Optional[float] = None
    """Probability threshold (default: the one stored in the checkpoint, chosen on validation)."""
    peak_threshold: Optional[float] = None
    """Frame-level gate: a frame's mask is kept only when some pixel reaches this probability (default: the
    checkpoint's, chosen on validation together with --threshold; 0 turns the gate off)."""
    min_pixels: int = 1
    """A target-free frame is a false-positive image when at least this many pixels are predicted."""
    skip_bad: bool = False
    """Skip unreadable or corrupt images (counted and listed in the outputs) instead of failing."""
    overwrite: bool = False
    """Replace the earlier eval-real outputs in --out as a whole (the new ones are swapped in when complete)."""
    batch_size: int = 64
    """Images per network call."""
    runtime: Runtime = field(default_factory=RuntimeConfig)
    """Device, CPU threads and progress bar (flags --device, --threads, --progress/--no-progress; --dist-timeout is
    unused: eval-real runs on one process)."""
    precision: str = "auto"
    """Inference precision: auto (bf16 when the CPU has native bf16 and it matches fp32 on the checkpoint's probe
    images), fp32 or bf16."""
    max_report_images: int = 500
    """At most this many frames are shown in report.html (all are scored and written)."""
    frame_crop: Literal["auto", "stretch", "square"] = "auto"
    """How a frame becomes the net's square input: 'square' keeps its centred square (the mask's too; predictions,
    overlays and metrics are then of that square), 'stretch' resizes the whole frame; 'auto' takes the embodiment the
    net was trained for ('square' for so101, whose image is the square crop of a 16:9 sensor; 'stretch' for
    floating), as deploy does. Square frames are the same either way."""
    bootstrap: int = 2000
    """Resamples of the frames for the 95 % intervals of IoU, precision and recall, beside the Wilson interval of the
    false-positive image rate (``ci95`` in metrics.json, beside each number in report.html; seeded, so a rerun gives
    the same intervals); 0 turns all four off."""

    def __post_init__(self) -> None:
        if self.threshold is not None and not (isinstance(self.threshold, (int, float)) and 0.0 < self.threshold < 1.0):
            raise ValueError(f"EvalRealConfig.threshold must be in (0, 1); got {self.threshold!r}")
        if self.peak_threshold is not None and not (isinstance(self.peak_threshold, (int, float)) and 0.0 <= self.peak_threshold < 1.0):
            raise ValueError(f"EvalRealConfig.peak_threshold must be in [0, 1); got {self.peak_threshold!r}")
        for name in ("min_pixels", "batch_size", "max_report_images"):
            positive_int("EvalRealConfig", name, getattr(self, name))
        non_negative_int("EvalRealConfig", "bootstrap", self.bootstrap)
        check_precision("EvalRealConfig", "precision", self.precision)
        check_frame_crop("EvalRealConfig", self.frame_crop)


def _owns(name: str) -> bool:
    return name in OUTPUT_NAMES


def _overlay(img: np.ndarray, mask: np.ndarray, color: np.ndarray) -> np.ndarray:
    """Tint ``mask`` pixels of ``img`` (H,W,3 uint8) and outline the mask."""
    import cv2

    out = img.astype(np.float32)
    m = mask.astype(bool)
    out[m] = 0.35 * out[m] + 0.65 * color
    edge = m & ~cv2.erode(m.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
    out[edge] = color
    return out.astype(np.uint8)


def _panel(img: np.ndarray, pred: np.ndarray, gt: np.ndarray | None) -> np.ndarray:
    import cv2

    tiles = [img, _overlay(img, pred, PRED_COLOR)]
    if gt is not None:
        tiles.append(_overlay(img, gt, GT_COLOR))
    h, w = img.shape[:2]
    scale = max(1, int(256 // max(h, w)))  # enlarge small frames for viewing
    sep = np.full((h, max(1, w // 32), 3), 255, np.uint8)
    panel = np.concatenate(sum(([t, sep] for t in tiles), [])[:-1], axis=1)
    if scale > 1:
        panel = cv2.resize(panel, (panel.shape[1] * scale, panel.shape[0] * scale), interpolation=cv2.INTER_NEAREST)
    return panel


def _pr_plot(curve: dict, summary: dict, path: Path) -> float:
    """Write the precision-recall curve PNG; returns the area under it (trapezoid over recall)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p, r = curve["precision"], curve["recall"]
    ok = np.isfinite(p) & np.isfinite(r)
    order = np.argsort(r[ok])
    rs, ps = r[ok][order], p[ok][order]
    ap = float(np.trapezoid(ps, rs)) if rs.size > 1 else float("nan")
    fig, ax = plt.subplots(figsize=(4.5, 4.0), dpi=100)
    ax.plot(r, p, "-", color="tab:blue", label=f"threshold sweep 0.01..0.99 (area under swept part {ap:.3f})")
    if math.isfinite(summary["precision"]) and math.isfinite(summary["recall"]):
        ax.plot([summary["recall"]], [summary["precision"]], "o", color="tab:red",
                label=f"operating point (threshold {summary['threshold']:.2f})")
    ax.set_xlim(0, 1.01)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("pixel recall (pooled over target-visible frames)")
    ax.set_ylabel("pixel precision")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title("target segmentation: precision-recall")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return ap


def _fmt(v) -> str:
    if isinstance(v, float):
        return "n/a" if not math.isfinite(v) else f"{v:.4f}"
    return html.escape(str(v))


def _with_ci(row: dict, key: str) -> str:
    """``row[key]`` to 3 decimals, with its 95 % interval when ``row`` has ``ci95`` (e.g. ``0.845 (0.814-0.873)``)."""
    v = float(row.get(key, float("nan")))
    lo, hi = (row.get("ci95") or {}).get(key, (float("nan"), float("nan")))
    text = "n/a" if not math.isfinite(v) else f"{v:.3f}"
    return text + (f" ({lo:.3f}-{hi:.3f})" if math.isfinite(lo) and math.isfinite(hi) else "")


def _cell(row: dict, key: str) -> str:
    """A report cell for ``row[key]``: with its interval (:func:`_with_ci`, kept on one line) when ``row`` has one,
    else as :func:`_fmt` writes it."""
    if key in (row.get("ci95") or {}):
        return f"<span class='num'>{html.escape(_with_ci(row, key))}</span>"
    return _fmt(row.get(key))


def _report(path: Path, cfg: EvalRealConfig, rows: list[dict], summary: dict | None, skipped: list[dict],
            has_masks: bool, crop: str = "stretch") -> None:
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>graspsim eval-real</title>",
             "<style>body{font-family:sans-serif;margin:1.5em} td,th{padding:2px 8px;text-align:left}"
             " img{image-rendering:pixelated} .bad{color:#b00} .num{white-space:nowrap}</style></head><body>",
             "<h1>graspsim eval-real</h1>",
             f"<p>images: <code>{html.escape(str(cfg.images))}</code><br>masks: <code>{html.escape(str(cfg.masks))}</code>"
             f"<br>checkpoint: <code>{html.escape(str(cfg.vision))}</code>"
             f"<br>frames fitted to the net's input by: {'their centred square' if crop == 'square' else 'stretching'}"
             f" (--frame-crop {html.escape(cfg.frame_crop)})</p>"]
    if summary is not None:
        keys = ("precision", "recall", "iou", "f1", "false_positive_image_rate", "num_images", "num_target_images",
                "num_empty_images", "threshold", "pr_area")
        pf = summary.get("per_frame", {})
        label = {"pr_area": "pr_area (swept part only)"}
        parts.append("<h2>Metrics</h2><table>" + "".join(f"<tr><th>{label.get(k, k)}</th><td>{_cell(summary, k)}</td></tr>"
                                                         for k in keys)
                     + "".join(f"<tr><th>{k} (frame-averaged)</th><td>{_fmt(pf.get(k))}</td></tr>"
                               for k in ("precision", "recall", "iou", "f1"))
                     + "</table><p>Headline pixel metrics are pooled over target-visible frames (a frame weighs by its "
                       "pixel count); the frame-averaged ones give every target-visible frame the same weight. "
                       "False-positive image rate over target-free frames."
                     + (f" In brackets, 95 % intervals (IoU, precision, recall: {cfg.bootstrap} resamples of the "
                        "target-visible frames; false-positive image rate: Wilson's interval): a value inside one "
                        "cannot be told from the measured one on this set." if summary.get("ci95") else "") + "</p>"
                       "<img src='pr_curve.png' alt='precision-recall curve'>")
        by_kind = summary.get("by_kind")
        if by_kind:
            cols = ("iou", "precision", "recall", "false_positive_image_rate", "num_target_images", "meets_targets")
            goal = ", ".join(f"{k} {op} {b:g}" for k, (op, b) in KIND_TARGETS.items())
            parts.append("<h2>By target kind</h2><table><tr><th>kind</th>" + "".join(f"<th>{c}</th>" for c in cols)
                         + "</tr>" + "".join(f"<tr><td>{html.escape(k)}</td>"
                                             + "".join(f"<td>{_cell(m, c)}</td>" for c in cols)
                                             + "</tr>" for k, m in by_kind.items())
                         + f"</table><p>Each kind's pixel metrics over its target frames; the false-positive image rate "
                           f"is the set's (target-free frames show no kind). Targets: {html.escape(goal)}.</p>")
    if skipped:
        parts.append(f"<h2 class='bad'>Skipped {len(skipped)} file(s)</h2><ul>"
                     + "".join(f"<li>{html.escape(s['file'])}: {html.escape(s['reason'])}</li>" for s in skipped) + "</ul>")
    legend = "image | prediction (cyan)" + (" | ground truth (magenta)" if has_masks else "")
    parts.append(f"<h2>Frames</h2><p>{legend}</p><table><tr><th>frame</th><th>overlay</th><th>stats</th></tr>")
    for r in rows[: cfg.max_report_images]:
        stats = f"pred px {r['pred_pixels']}, max prob {r['max_prob']:.3f}"
        if has_masks:
            stats += f"<br>gt px {r['gt_pixels']}, tp {r['tp']}, fp {r['fp']}, fn {r['fn']}, iou {_fmt(r['iou'])}"
            if r["false_positive_image"]:
                stats += "<br><b class='bad'>false-positive image</b>"
        parts.append(f"<tr><td>{html.escape(r['file'])}</td><td><img src='overlays/{html.escape(r['stem'])}.png'></td>"
                     f"<td>{stats}</td></tr>")
    if len(rows) > cfg.max_report_images:
        parts.append(f"<tr><td colspan=3>... {len(rows) - cfg.max_report_images} more frames in per_image.csv</td></tr>")
    parts.append("</table></body></html>")
    atomic_write_bytes(path, "\n".join(parts).encode())


def _write_csv(path: Path, rows: list[dict], fields: list[str]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    atomic_write_bytes(path, buf.getvalue().encode())


def evaluate_real(cfg: EvalRealConfig) -> dict:
    """Score (or, without masks, just run) the net on ``cfg.images``; returns the metrics dict (with masks)
    or a summary of predictions (without). See the module docstring for the outputs. Every input is checked
    before anything is written; the outputs are written to a staging folder and replace ``--out``'s as a whole
    when complete, so a failed run leaves ``--out`` as it was."""
    images = list_images(cfg.images)
    check_unique_stems(images)
    masks = find_masks(images, Path(cfg.masks)) if cfg.masks is not None else None
    out = check_out_dir(cfg.out, overwrite=cfg.overwrite)
    for flag, folder in (("--images", cfg.images), ("--masks", cfg.masks)):
        if folder is not None and out.resolve() == Path(folder).resolve():
            raise ValueError(f"--out {out} is the {flag} folder; choose another --out")
    check_in_file(cfg.vision, "EvalRealConfig.vision", "vision checkpoint", inside="checkpoint.pt")
    with cfg.runtime.job("eval-real"):  # sets --threads; one process does the whole set
        seg = Segmenter.from_checkpoint(cfg.vision, device=cfg.runtime.device, precision=cfg.precision)
        crop = resolve_frame_crop(cfg.frame_crop, seg.embodiment, "EvalRealConfig")
        with staged_dir(out, _owns) as stage:
            result = _evaluate(cfg, images, masks, seg, stage, crop)
    log.info("wrote eval-real outputs for %d images to %s", result["num_images"], out)
    return result


def _evaluate(cfg: EvalRealConfig, images: list[Path], masks: dict[Path, Path] | None, seg: Segmenter,
              out: Path, crop: str) -> dict:
    """The work of :func:`evaluate_real`, writing into the (staging) folder ``out``; ``crop`` is the resolved
    ``--frame-crop`` (one of :data:`graspsim.vision.image_set.FRAME_CROPS`)."""
    threshold = seg.threshold if cfg.threshold is None else float(cfg.threshold)
    if cfg.peak_threshold is not None:
        seg.peak_threshold = float(cfg.peak_threshold)
    (out / "predictions").mkdir(parents=True, exist_ok=True)
    (out / "overlays").mkdir(parents=True, exist_ok=True)

    S = seg.image_size
    metrics = SegMetrics(threshold, cfg.min_pixels)
    rows: list[dict] = []
    skipped: list[dict] = []
    suspect: list[dict] = []  # masks that look like images
    grey: list[str] = []  # frames without colour (labelled.is_grey)
    cover: list[float] = []  # fraction of each frame its mask marks as target
    n_cropped = 0  # frames whose centred square was kept (crop == "square" and not square already)

    def load(path: Path):
        nonlocal n_cropped
        try:
            img = read_image(path)
            gt = None
            if masks is not None:
                gt, levels = load_mask(masks[path])
                if levels > MASK_MAX_LEVELS:
                    suspect.append({"file": str(masks[path]), "distinct_values": levels})
        except ValueError as e:
            if not cfg.skip_bad:
                raise
            skipped.append({"file": str(path), "reason": str(e)})
            log.warning("skipping %s", e)
            return None
        if gt is not None and gt.shape != img.shape[:2]:
            raise ValueError(f"mask {masks[path]} is {gt.shape[1]}x{gt.shape[0]} (WxH) but image {path} is "
                             f"{img.shape[1]}x{img.shape[0]}; masks must match their image size")
        if crop == "square" and img.shape[0] != img.shape[1]:
            n_cropped += 1
            img = square_crop(img)
            gt = None if gt is None else square_crop(gt)
        if is_grey(img):
            grey.append(str(path))
        if gt is not None:
            cover.append(float(np.mean(gt > 0)))
        return img, gt

    def flush(batch: list) -> None:
        if not batch:
            return
        raw = frame_probabilities(seg, [img for _, img, _ in batch])
        peaks = raw.flatten(1).amax(1).tolist()  # before the frame gate, for the per-image table
        probs = decide(raw, seg.peak_threshold, threshold, seg.one_region).numpy()
        for (path, img, gt), p, peak in zip(batch, probs, peaks):
            h, w = img.shape[:2]
            prob = to_frame_size(p, h, w)
            prob_t = torch.from_numpy(prob)[None]
            pred = prob >= threshold
            row = {"file": path.name, "stem": path.stem, "width": w, "height": h,
                   "pred_pixels": int(pred.sum()), "max_prob": peak}
            if gt is not None:
                c = metrics.update(prob_t, torch.from_numpy(gt)[None])
                tp, fp, fn, g = (int(c[k][0]) for k in ("tp", "fp", "fn", "gt_pixels"))
                row.update({"has_target": int(g > 0), "gt_pixels": g, "tp": tp, "fp": fp, "fn": fn,
                            "iou": tp / (tp + fp + fn) if tp + fp + fn else float("nan"),
                            "precision": tp / (tp + fp) if tp + fp else float("nan"),
                            "recall": tp / (tp + fn) if tp + fn else float("nan"),
                            "false_positive_image": int(g == 0 and row["pred_pixels"] >= cfg.min_pixels)})
            write_png(out / "predictions" / f"{path.stem}.png", pred)
            write_png(out / "overlays" / f"{path.stem}.png", _panel(img, pred, gt))
            rows.append(row)
        batch.clear()

    batch: list = []
    with progress_bar("eval-real", cfg.runtime.progress, transient=True) as bar:
        task = bar.add_task("eval-real", total=len(images))
        for path in images:
            item = load(path)
            if item is not None:
                batch.append((path, *item))
                if len(batch) >= cfg.batch_size:
                    flush(batch)
            bar.advance(task)
        flush(batch)
    if not rows:
        raise ValueError(f"no readable images in {cfg.images} (skipped {len(skipped)})")

    inverted = _looks_inverted(cover)
    _warn_inputs(grey, inverted, len(rows), cfg)
    base = {"num_images": len(rows), "num_skipped": len(skipped), "skipped": skipped, "threshold": threshold,
            "grey_images": len(grey), "masks_look_inverted": inverted,
            "peak_threshold": seg.peak_threshold, "mirror_tta": seg.mirror_tta, "one_region": seg.one_region,
            "checkpoint": str(cfg.vision), "images": str(cfg.images), "masks": str(cfg.masks) if cfg.masks else None,
            "inference_dtype": "bfloat16" if seg.bf16 else "float32", "model_input_size": S,
            "frame_crop": crop, "frames_cropped": n_cropped}
    how = crop if cfg.frame_crop == crop else f"auto, {crop} for this net's embodiment"
    if n_cropped:
        log.info("eval-real: %d of %d frames were cut to their centred square (--frame-crop %s); predictions, "
                 "overlays and metrics are of that square", n_cropped, len(rows), how)
    elif crop == "stretch" and any(r["width"] != r["height"] for r in rows):
        log.info("eval-real: non-square frames were stretched to the net's square input (--frame-crop %s)", how)
    pred_fields = ["file", "width", "height", "pred_pixels", "max_prob"]
    if masks is None:
        _write_csv(out / "per_image.csv", rows, pred_fields)
        _report(out / "report.html", cfg, rows, None, skipped, has_masks=False, crop=crop)
        result = {**base, "images_with_predicted_target": sum(r["pred_pixels"] > 0 for r in rows)}
        log.info("wrote predictions and overlays for %d images to %s", len(rows), out)
        return result

    if suspect:
        log.warning("%d of %d masks have more than %d distinct values, so they look like images rather than binary "
                    "masks (first: %s); every nonzero pixel counts as target, so the metrics are likely meaningless: "
                    "check --masks", len(suspect), len(rows), MASK_MAX_LEVELS, suspect[0]["file"])
    summary = metrics.summary()
    counts = {k: np.array([r[k] for r in rows]) for k in ("tp", "fp", "fn", "gt_pixels")}
    summary["per_frame"] = frame_averaged(counts["tp"], counts["fp"], counts["fn"], counts["gt_pixels"])
    curve = metrics.curve()
    summary["pr_area"] = _pr_plot(curve, summary, out / "pr_curve.png")
    kinds = _frame_kinds(cfg, rows)
    pred = np.array([r["pred_pixels"] for r in rows])
    per_frame_counts = (counts["tp"], counts["fp"], counts["fn"], counts["gt_pixels"], pred)
    kind_rows: dict = {}
    if kinds is not None:
        for r, k in zip(rows, kinds):
            r["kind"] = k
        kind_rows = kind_groups(kinds, counts["gt_pixels"] > 0)
        by_kind = subset_metrics_from_counts(kind_rows, *per_frame_counts, cfg.min_pixels)
        summary["by_kind"] = {k: {**m, "meets_targets": meets_kind_targets(m)} for k, m in by_kind.items()}
    if cfg.bootstrap:  # seeded, each group by its own name: the same frames give the same intervals
        summary["ci95"] = bootstrap_intervals({"all": np.ones(len(rows), dtype=bool)}, *per_frame_counts, cfg.min_pixels,
                                              draws=cfg.bootstrap)["all"]
        ci = bootstrap_intervals(kind_rows, *per_frame_counts, cfg.min_pixels, draws=cfg.bootstrap)
        for k, m in summary.get("by_kind", {}).items():
            m["ci95"] = ci[k]
    result = {**summary, **base, "headline": "pooled", "suspect_masks": suspect,
              "definitions": {"precision/recall/iou/f1 (headline)": "pixel counts pooled over target-visible frames "
                                                                     "(non-empty mask): a frame weighs by its pixels",
                              "ci95": f"95 % intervals: IoU, precision and recall over {cfg.bootstrap} resamples "
                                      "of the target-visible frames, the false-positive image rate by Wilson's score "
                                      "interval; a value inside one cannot be told from the measured one on this set"
                                      if cfg.bootstrap else "not computed",
                              "per_frame": "the same ratios per target-visible frame, averaged (every frame weighs "
                                           "the same); precision over the frames with a prediction",
                              "false_positive_image_rate": f"target-free frames with >= {cfg.min_pixels} predicted pixel(s), "
                                                           "over all target-free frames"},
              "pr_curve": {k: [None if not math.isfinite(float(v)) else float(v) for v in vals] for k, vals in curve.items()}}
    _write_csv(out / "per_image.csv", rows, pred_fields + ["has_target", "gt_pixels", "tp", "fp", "fn", "iou", "precision",
                                                           "recall", "false_positive_image"]
               + (["kind"] if kinds is not None else []))
    atomic_write_bytes(out / "metrics.json", json.dumps(result, indent=2).encode())
    _report(out / "report.html", cfg, rows, summary, skipped, has_masks=True, crop=crop)
    pf = summary["per_frame"]
    log.info("eval-real on %d images: pooled iou %s precision %s recall %s (frame-averaged iou %.3f precision "
             "%.3f recall %.3f), fp-images %s", len(rows), *(_with_ci(summary, k) for k in ("iou", "precision", "recall")),
             pf["iou"], pf["precision"], pf["recall"], _with_ci(summary, "false_positive_image_rate"))
    for k, m in summary.get("by_kind", {}).items():
        log.info("  %-8s iou %s precision %s recall %s fp-images %s (%d target frames; the set's %d target-free "
                 "frames)%s", k, *(_with_ci(m, x) for x in ("iou", "precision", "recall", "false_positive_image_rate")),
                 m["num_target_images"], m["num_empty_images"], "" if m["meets_targets"] else ": misses a target")
    return result


def _looks_inverted(cover: list[float]) -> bool:
    """Whether masks marking these fractions of their frames look inverted (the rule of
    :func:`graspsim.vision.labelled.check_masks`: a mask covering its whole frame, or more than
    :data:`graspsim.vision.labelled.MAX_MEAN_TARGET` of the frames on average)."""
    return bool(cover) and (max(cover) >= 1.0 or float(np.mean(cover)) > MAX_MEAN_TARGET)


def _warn_inputs(grey: list[str], inverted: bool, n: int, cfg: EvalRealConfig) -> None:
    """Warn about inputs whose scores would mean little (calibrate refuses them; eval-real still scores them)."""
    if grey:
        log.warning("%d of the %d images (first: %s) have no colour (greyscale: red, green and blue are equal "
                    "everywhere); the vision net finds the target by its colour, so its scores on them mean little: "
                    "give the camera's colour frames", len(grey), n, grey[0])
    if inverted:
        log.warning("the masks in %s mark most of their frames as target; the target is a small object, so they "
                    "look inverted (a mask is 255 on the target and 0 elsewhere) and the scores mean little",
                    cfg.masks)


def _frame_kinds(cfg: EvalRealConfig, rows: list[dict]) -> list[str] | None:
    """Each scored frame's target kind from the ``kind`` column of the ``meta.csv`` beside ``cfg.images``
    (:func:`graspsim.vision.image_set.read_kinds`), or None without one. A metadata file that cannot be read is
    warned about and ignored (it is optional)."""
    try:
        kinds = read_kinds(cfg.images, [r["stem"] for r in rows])
    except ValueError as e:
        log.warning("ignoring the per-frame metadata: %s", e)
        return None
    return None if kinds is None else [kinds[r["stem"]] for r in rows]
