"""Fast inference: ``Segmenter.from_checkpoint(path, device)`` -> target probabilities and masks.

On CPU the network runs in bfloat16 autocast with channels-last memory when the CPU has native bf16
(AMX/AVX512-BF16, :func:`~graspsim.vision.model.cpu_has_fast_bf16`; emulated bf16 is slower than float32) and that
gives the same masks as float32 on the probe images stored in the checkpoint (pixel disagreement at most ``BF16_TOLERANCE``);
otherwise it falls back to float32 (logged). ``precision="fp32"`` forces float32, ``"bf16"`` forces bfloat16 (emulated,
and slower than float32, on CPUs without native bf16). :attr:`Segmenter.precision` is what was chosen.
"""

from __future__ import annotations

import copy
import logging
import os
from typing import Literal

import torch
from torch import Tensor

from graspsim import runs
from graspsim.validate import boolean

from .checkpoint import load_checkpoint
from .metrics import decide, logit_mask
from .ensemble import SegNetEnsemble, net_from_checkpoint
from .model import SegNet, cpu_has_fast_bf16, fold_batchnorm

log = logging.getLogger(__name__)

BF16_TOLERANCE = 1e-3  # max fraction of probe pixels whose mask may differ between bf16 and fp32
PRECISIONS = ("auto", "fp32", "bf16")
Precision = Literal["auto", "fp32", "bf16"]
"""Segmentation inference precision, one meaning in every verb that segments (eval-real, calibrate, dagger, eval-sim):
``auto`` (bf16 where the CPU has native bf16 and the checkpoint's probe frames agree with float32), ``fp32``, ``bf16``."""


def check_precision(owner: str, name: str, precision: str) -> None:
    """ValueError naming ``owner.name`` unless ``precision`` is one of :data:`PRECISIONS`."""
    if precision not in PRECISIONS:
        raise ValueError(f"{owner}.{name} must be one of {PRECISIONS}; got {precision!r}")


class Segmenter:
    """Wraps a :class:`SegNet` (or a :class:`~graspsim.vision.ensemble.SegNetEnsemble`) in eval mode with a stored probability ``threshold`` and frame-gate
    ``peak_threshold`` (0 = no gate) and, with ``one_region``, the one-region rule (only the region of predicted pixels
    around a frame's most confident pixel is kept; :func:`graspsim.vision.metrics.top_region`). With ``mirror_tta`` the logits are averaged with those of the left-right
    mirrored frame (:meth:`SegNet.mirror_averaged`, about 2x the cost); checkpoints store whether their thresholds
    were chosen that way, and :meth:`from_checkpoint` follows them.

    ``model`` is the trained net as given; inference runs ``net``, a copy with BatchNorm folded into the convolutions
    (:func:`~graspsim.vision.model.fold_batchnorm`), made once here (with bf16, a copy of ``net`` with bfloat16 weights):
    to use changed weights, build a new Segmenter.

    ``__call__(rgb)``: ``rgb`` B,3,H,W uint8 (H, W multiples of ``model.multiple``; the net was trained at
    ``image_size``) -> probabilities B,H,W float32 in [0, 1]. ``predict_mask(rgb, threshold=None)`` -> B,H,W bool.
    """

    def __init__(self, model: SegNet | SegNetEnsemble, threshold: float = 0.5, image_size: int = 64, device: torch.device | str = "cpu",
                 precision: str = "auto", probe: Tensor | None = None, peak_threshold: float = 0.0,
                 mirror_tta: bool = False, one_region: bool = False, embodiment: str = "floating"):
        check_precision("Segmenter", "precision", precision)
        if not 0.0 < float(threshold) < 1.0:
            raise ValueError(f"threshold must be in (0, 1); got {threshold!r}")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.net = fold_batchnorm(self.model)  # what inference runs: BatchNorm folded into the convolutions
        if not 0.0 <= float(peak_threshold) < 1.0:
            raise ValueError(f"peak_threshold must be in [0, 1); got {peak_threshold!r}")
        boolean("", "mirror_tta", mirror_tta)
        boolean("", "one_region", one_region)
        self.one_region = one_region
        self.threshold = float(threshold)
        self.peak_threshold = float(peak_threshold)
        self.mirror_tta = mirror_tta
        self.image_size = int(image_size)
        self.embodiment = str(embodiment)
        """The embodiment the net was trained for (its camera), from the checkpoint's config."""
        self.bf16 = False
        self.bf16_disagreement: float | None = None
        self._net_bf16: SegNet | SegNetEnsemble | None = None  # made by _bf16_net on first bf16 use
        if self.device.type == "cpu":
            self.net = self.net.to(memory_format=torch.channels_last)
        if precision == "bf16":
            self.bf16 = True
        elif precision == "auto" and self.device.type == "cpu" and not cpu_has_fast_bf16():
            pass  # no native bf16 on this CPU: emulated bf16 is slower than float32
        elif precision == "auto" and probe is not None and len(probe) > 0:
            self.bf16 = self._bf16_agrees(probe)

    @property
    def precision(self) -> str:
        """The precision inference runs in: ``bf16`` (bfloat16 autocast) or ``fp32``."""
        return "bf16" if self.bf16 else "fp32"

    def _bf16_agrees(self, probe: Tensor) -> bool:
        self.bf16 = False
        ref = self.predict_mask(probe)
        self.bf16 = True
        try:
            low = self.predict_mask(probe)
        except RuntimeError as e:  # bf16 kernels unavailable on this device
            log.info("bf16 inference unavailable (%s); using float32", e)
            self.bf16 = False
            return False
        self.bf16_disagreement = float((ref != low).float().mean())
        ok = self.bf16_disagreement <= BF16_TOLERANCE
        if not ok:
            log.warning("bf16 masks differ from float32 on %.3f%% of probe pixels; using float32",
                        100 * self.bf16_disagreement)
        self.bf16 = ok
        return ok

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, device: torch.device | str = "cpu", precision: str = "auto") -> "Segmenter":
        """Rebuild from a ``train-vision`` or ``calibrate`` checkpoint (kind checked; see :mod:`graspsim.vision.checkpoint`;
        an ensemble's members are averaged, :mod:`graspsim.vision.ensemble`)."""
        return cls.from_payload(load_checkpoint(path, map_location="cpu"), path, device, precision)

    @classmethod
    def from_payload(cls, ckpt: dict, path: str | os.PathLike, device: torch.device | str = "cpu",
                     precision: str = "auto") -> "Segmenter":
        """As :meth:`from_checkpoint`, from a checkpoint already loaded (or made, as calibrate makes an ensemble's);
        ``path`` names it in errors."""
        model = net_from_checkpoint(ckpt, path)
        check_precision("Segmenter", "precision", precision)  # the caller's argument: checked here so its error does not name the checkpoint
        try:
            return cls(model, threshold=ckpt["threshold"], image_size=ckpt["image_size"], device=device,
                       precision=precision, probe=ckpt.get("probe_rgb"), peak_threshold=ckpt.get("peak_threshold", 0.0),
                       mirror_tta=ckpt.get("mirror_tta", False), one_region=ckpt.get("one_region", False),
                       embodiment=runs.trained_embodiment(ckpt.get("config")))
        except ValueError as e:  # a stored threshold, mirror_tta or one_region flag out of range
            raise ValueError(f"vision checkpoint {path}: {e}") from None

    def _check(self, rgb: Tensor) -> None:
        if not isinstance(rgb, torch.Tensor) or rgb.dim() != 4 or rgb.shape[1] != 3:
            shape = tuple(rgb.shape) if isinstance(rgb, torch.Tensor) else type(rgb).__name__
            raise ValueError(f"Segmenter expects rgb as a B,3,H,W uint8 tensor; got {shape}")
        if rgb.dtype != torch.uint8:
            raise ValueError(f"Segmenter expects uint8 rgb; got {rgb.dtype}")

    @torch.inference_mode()
    def logits(self, rgb: Tensor) -> Tensor:
        """``rgb`` B,3,H,W uint8 -> logits B,H,W float32 (on ``rgb``'s device)."""
        self._check(rgb)
        x = rgb.to(self.device, non_blocking=True).float().div_(255.0)
        net = self._bf16_net() if self.bf16 else self.net
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            out = net.mirror_averaged(x) if self.mirror_tta else net(x)
        return out.float().to(rgb.device)

    def _bf16_net(self) -> SegNet | SegNetEnsemble:
        """``net`` with its weights stored in bfloat16, made on first use. Autocast would round the same float32
        weights to bfloat16 in every call, so the logits are bit for bit the same; storing them once saves those casts
        (measured 1.08x at batch 256 and 1.15x at batch 1, 2026-11-25)."""
        if self._net_bf16 is None:
            self._net_bf16 = copy.deepcopy(self.net).to(torch.bfloat16)
        return self._net_bf16

    def __call__(self, rgb: Tensor) -> Tensor:
        """``rgb`` B,3,H,W uint8 -> target probability B,H,W float32, after the frame-level gate (frames whose
        highest probability is below ``peak_threshold`` are all zero; :func:`graspsim.vision.metrics.gate_frames`)
        and, with ``one_region``, the one-region rule at ``threshold`` (pixels outside the region are zero)."""
        return decide(torch.sigmoid(self.logits(rgb)), self.peak_threshold, self.threshold, self.one_region)

    def predict_mask(self, rgb: Tensor, threshold: float | None = None) -> Tensor:
        """``rgb`` B,3,H,W uint8 -> B,H,W bool: prob >= threshold (default: the checkpoint's threshold) in
        frames that pass the gate (some pixel >= ``peak_threshold``); with ``one_region``, only the region of those
        pixels around the frame's most confident one."""
        t = self.threshold if threshold is None else float(threshold)
        if not 0.0 < t < 1.0:
            raise ValueError(f"threshold must be in (0, 1); got {threshold!r}")
        return logit_mask(self.logits(rgb), t, self.peak_threshold, self.one_region)


def frame_probabilities(seg: Segmenter, frames: list) -> Tensor:
    """Target probabilities B,S,S float32 (before the frame gate) of ``frames``, a list of H,W,3 uint8 arrays of any
    size: each frame is resized to the net's input side S (area-averaged when shrinking, bilinear when enlarging),
    as ``eval-real`` and ``calibrate`` score recorded frames. :func:`to_frame_size` maps a result back."""
    import cv2
    import numpy as np

    S = seg.image_size
    x = np.stack([f if f.shape[:2] == (S, S) else
                  cv2.resize(f, (S, S), interpolation=cv2.INTER_AREA if max(f.shape[:2]) > S else cv2.INTER_LINEAR)
                  for f in frames])
    return torch.sigmoid(seg.logits(torch.from_numpy(np.ascontiguousarray(x)).permute(0, 3, 1, 2).contiguous())).cpu()


def to_frame_size(prob, h: int, w: int):
    """A probability map S,S (numpy float32) at a frame's ``h`` x ``w`` (bilinear), clipped to [0, 1]."""
    import cv2
    import numpy as np

    return np.clip(prob if prob.shape == (h, w) else cv2.resize(prob, (w, h), interpolation=cv2.INTER_LINEAR), 0.0, 1.0)


def throughput(seg: Segmenter, batch: int = 256, iters: int = 5, seed: int = 0) -> dict:
    """Measure ``predict_mask`` speed on random ``batch,3,S,S`` uint8 frames: dict with ``img_per_s``,
    ``batch``, ``dtype``, ``mirror_tta`` and ``threads``. One warm-up call is not timed. The benchmark script
    ``benchmarks/vision_throughput.py`` compares precisions and mirror averaging with it."""
    import time

    g = torch.Generator().manual_seed(seed)
    rgb = torch.randint(0, 256, (batch, 3, seg.image_size, seg.image_size), generator=g, dtype=torch.uint8)
    seg.predict_mask(rgb)
    t = time.perf_counter()
    for _ in range(iters):
        seg.predict_mask(rgb)
    dt = time.perf_counter() - t
    return {"img_per_s": batch * iters / dt, "batch": batch, "dtype": "bfloat16" if seg.bf16 else "float32",
            "mirror_tta": seg.mirror_tta, "threads": torch.get_num_threads()}


def vision_mflop_per_frame(seg, image_size: int) -> float:
    """MFLOP (10^6 floating-point operations, a multiply-add counted as two) of one frame through
    ``seg.logits`` (a :class:`graspsim.vision.infer.Segmenter`) as deployed (mirror averaging included when on), by
    ``torch.utils.flop_counter``; it counts convolutions and matrix products, not element-wise work."""
    from torch.utils.flop_counter import FlopCounterMode

    rgb = torch.zeros(1, 3, image_size, image_size, dtype=torch.uint8, device=seg.device)
    with FlopCounterMode(display=False) as counter:
        seg.logits(rgb)
    return counter.get_total_flops() / 1e6
