"""The ``graspsim train-vision`` configuration, :class:`TrainVisionConfig` (the loop is :mod:`graspsim.vision.train`)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Tuple

from graspsim import SimConfig
from graspsim.fileio import check_in_file
from graspsim.runtime import Runtime, RuntimeConfig
from graspsim.validate import (boolean, finite_non_negative, finite_positive, positive_int,
                               probability)

from .augment import AugmentConfig
from .backgrounds import DEFAULT_BACKGROUNDS, DEFAULT_TRANSFER, default_transfer
from .compose import ComposeConfig
from .model import SegNetConfig


UNET_MODEL = SegNetConfig(base_channels=12, max_channels=96, chroma=True)
"""The whole-frame U-Net at 12/24/48/96 channels with chroma features (192 MFLOP per 64x64 frame, 384 with mirror
averaging); the default until issue 40. It is about 0.01 IoU better on composites than :data:`CROPPED_MODEL` (five
seeds: 0.890 against 0.879) and level on the transfer test, at ten times the cost: the choice for a user with a GPU
who wants the last 0.01 of composite IoU. ``train-vision``: ``--model.crop 0 --model.no-context
--model.base-channels 12 --model.max-channels 96``; ``pipeline``: ``--vision-model unet``."""
DEFAULT_MIRROR_TTA = True
"""Mirror averaging on by default (the cascade mirrors its window only): +0.02 held-out IoU and recall on the U-Net,
at twice the inference cost."""
CROPPED_MODEL = SegNetConfig(base_channels=8, max_channels=64, chroma=True, crop=24, locator_channels=12, context=True)
"""The cropped cascade (issue 27): a 12-channel locator (12.3 MFLOP) finds the target's 4x4 cell in the whole frame,
and an 8/16/32/64-channel U-Net segments the 24x24 window around it with the locator's pooled whole-frame features
added to its bottleneck (``graspsim.vision.model``). 36.7 MFLOP per 64x64 frame with mirror averaging of the window, a tenth
of :data:`UNET_MODEL`'s 384. Over seeds 0-4 it is level with the U-Net on the transfer test (mean IoU 0.865 against
0.863, recall 0.889 against 0.891) and 0.011 behind on composite test IoU; on three sets no part of the repository
holds, the mean IoU of the two is the same (docs/vision.md, "Choosing a net")."""
DEFAULT_MODEL = CROPPED_MODEL
"""The default net of ``train-vision`` and the pipeline (issue 40): :data:`CROPPED_MODEL`."""
HALFRES_MODEL = SegNetConfig(arch="halfres", base_channels=16, max_channels=64, depth=2, chroma=True, full_channels=8)
"""Issue 27's half-resolution candidate (36 MFLOP per frame; about 7x the default's frames/s):
``--model.arch halfres --model.base-channels 16 --model.max-channels 64 --model.depth 2 --model.full-channels 8
--no-mirror-tta``. Superseded by :data:`CROPPED_MODEL`, which is as cheap and 0.06-0.08 validation IoU better."""


@dataclass(frozen=True)
class TrainVisionConfig:
    """Train the target segmentation net on sim-real composites."""

    out: Path
    """Run folder (created); holds checkpoint.pt, config.json, metrics.json and tb/."""
    backgrounds: Path = DEFAULT_BACKGROUNDS
    """Folder of real background photos (no target in them). With train/ and val/ sub-folders these are the
    training and held-out validation photos; otherwise give --val-backgrounds."""
    val_backgrounds: Optional[Path] = None
    """Folder of held-out validation background photos (never used in training)."""
    extra_backgrounds: tuple[Path, ...] = ()
    """More folders of training photos, added to those of --backgrounds, e.g. photos of your own table or floor (none
    may share a file with the validation photos; training only, so validation stays as it was)."""
    steps: int = 3700
    """Optimizer steps. 3,700 steps of 24x24 patches cost what 2,500 steps of 32x32 patches did (0.21 against 0.31 s a
    step on the 2-core reference CPU with bf16), which keeps the default command inside 15 minutes with the
    12/24/48/96-channel net (docs/vision.md, "Time"). Round 11 chose the smaller patches at equal time on validation."""
    batch_size: int = 48
    """Composites per step (per process under torchrun: N processes train on N x batch_size composites a step)."""
    lr: float = 3e-3
    """Peak learning rate (AdamW; linear warm-up over 3% of steps, then cosine decay to 5%)."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    ema_decay: float = 0.0
    """Keep an exponential moving average of the weights (and BatchNorm statistics) with this decay per step, e.g.
    0.999 (an average over about the last 1,000 steps; ``torch.optim.swa_utils.AveragedModel``). Validation, the
    operating point, the tests and the checkpoint's ``model`` are then the average's; the optimizer's own weights are
    kept in the checkpoint only for --resume. 0 turns it off."""
    dice_weight: float = 1.0
    """Weight of the soft-Dice (Tversky) term added to the pixel BCE loss."""
    pos_weight: float = 1.0
    """BCE weight of target pixels (> 1 favours recall)."""
    tversky_beta: float = 0.5
    """Weight of false negatives in the Tversky term (0.5 = soft Dice; larger favours recall)."""
    layer_reuse: int = 1
    """Each rendered batch of targets/fingers/distractors is composited onto fresh background crops (with
    fresh jitter, noise and a random left-right mirror) for this many steps; 1 renders every step."""
    patch: int = 24
    """Train on square patches of this side (px, a multiple of 2**depth; 0, or at least the image size, = whole
    frames). Each composite gives ``patches_per_frame`` patches, so a step costs about
    ``batch_size * patches_per_frame * (patch / image_size)**2`` frames of compute. The net is fully convolutional and
    is validated and used on whole frames. 24 px patches take 0.68x the time of a 32 px step; at equal time (3,700
    against 2,500 steps) they scored higher on both validation sets for two seeds (docs/vision.md, round 11)."""
    patches_per_frame: int = 4
    """Patches cut from each composite when --patch is set."""
    patch_target_prob: float = 0.5
    """Chance that a patch is placed so that it contains the target's centre (when the target is visible);
    otherwise the patch is placed uniformly."""
    frame_loss_weight: float = 0.05
    """Weight of a frame-level BCE of each training frame's (or patch's) highest logit against "the target is
    visible". It trains the statistic the frame gate thresholds, so confident false positives on target-free
    frames are pushed down and the chosen gate can be lower (0 turns it off)."""
    seed: int = 0
    """Seed of model init and training data."""
    val_every: int = 1000
    """Validate every this many steps (and at the end)."""
    ckpt_every: int = 500
    """Write checkpoint.pt every this many steps (and at the end)."""
    n_val: int = 2048
    """Validation composites (fixed seed), used for the loss curve and to choose the threshold."""
    n_test: int = 2048
    """Test composites (another fixed seed, same held-out backgrounds) for the final metrics."""
    val_seed: int = 1000
    """Seed of the validation composites."""
    test_seed: int = 2000
    """Seed of the test composites."""
    max_fp_image_rate: float = 0.01
    """Threshold choice: best F1 among (threshold, frame gate) pairs whose validation false-positive image rate is
    at most this and whose validation precision is at least --min-precision (when some pair meets both). The 1 %
    is a margin under the 2 % target: each estimate from ~950 target-free frames has a standard error of about
    0.4 points, so validation and test can differ by a point (a 1.5 % limit gave 2.2 % on test once)."""
    min_precision: float = 0.96
    """Threshold choice: validation precision must be at least this (dropped when no pair meets it). A margin over the
    0.95 target: test precision read up to 0.009 below validation precision at the chosen pair (0.955 gave test
    precision 0.946-0.948 in 3 of 10 runs; 0.96 gave >= 0.950 in all 10)."""
    min_pixels: int = 1
    """A target-free frame counts as a false-positive image when at least this many pixels are predicted."""
    mirror_tta: bool = DEFAULT_MIRROR_TTA
    """Test-time mirror averaging (:meth:`graspsim.vision.model.SegNet.mirror_averaged`): validation, the test set and every
    later use of the checkpoint (it is stored there) average the logits of each frame and of its left-right
    mirror. About 2x the inference cost; +0.02 held-out IoU and recall on the default net."""
    frame_gate: bool = True
    """Choose a frame-level detection gate with the threshold (:func:`graspsim.vision.metrics.gate_frames`): a frame's
    mask is kept only when some pixel reaches the gate's peak threshold, so the pixel threshold can stay low
    without confident false positives on target-free frames. The chosen pair is stored in the checkpoint."""
    hue_rotation_prob: float = 0.35
    """Chance that a training background crop gets a random hue rotation (validation crops never do), so that
    target-coloured backgrounds are common in training."""
    camouflage_prob: float = 0.7
    """Chance that a training background crop is hue-rotated so that its dominant hue falls in the target's
    hue band (``sim.randomization.target_hue``): target-coloured backgrounds, the main source of misses."""
    color_match_prob: float = 0.15
    """Chance that a training frame's background crop is shifted to the mean colour of the frame's own target
    (target-free frames: of another frame's target), keeping its texture (:func:`graspsim.vision.compose.match_target_color`):
    the hardest camouflage, aimed at the misses on warm held-out photos. Validation and test crops never get it."""
    decoy_prob: float = 0.0
    """Chance that a training frame's background crop gets a decoy: an ellipse of its own texture shifted to a
    target's colour, target-sized, not in the label (:func:`graspsim.vision.compose.paste_decoys`). Hard negatives
    for confident false regions on warm photos (an orange flower, a knot in red wood). 0 (the default) draws
    nothing, so runs without it are unchanged bit for bit."""
    transfer: Optional[Path] = DEFAULT_TRANSFER
    """Folder of the transfer sets (``val/`` and ``test/`` in the eval-real format): targets drawn by another
    renderer (pybullet's TinyRenderer) over real photos that training never reads (data/transfer/README.md). With
    cubes or cylinders in ``--sim.target.kinds`` the default is ``data/transfer_kinds`` (all three kinds).
    ``val/`` may take part in choosing the operating point (--operating-point); ``test/`` is only reported.
    None skips both."""
    operating_point: Literal["composite", "transfer", "both"] = "both"
    """Validation data that chooses the threshold and frame gate: our composites, the transfer ``val/`` set, or
    both (each set's constraints must hold, the mean F1 is maximised). Never the test sets."""
    transfer_max_fp_image_rate: float = 0.02
    """Operating point: the most false-positive images allowed on the transfer ``val/`` set (a margin under the 3 %
    target; its 256 target-free frames give the estimate a standard error of about 0.9 points)."""
    transfer_min_precision: float = 0.94
    """Operating point: the least precision required on the transfer ``val/`` set (a margin over the 0.93 target)."""
    resume: bool = False
    """Continue from out/checkpoint.pt up to --steps."""
    teacher: Optional[Path] = None
    """A trained vision checkpoint to distil from: the net also learns to match the teacher's probabilities on every
    training patch (BCE against them, weighted by --teacher-weight), beside the exact masks. The teacher runs one
    pass per patch (no mirror averaging) under the same autocast as training."""
    teacher_weight: float = 1.0
    """Weight of the distillation term (with --teacher)."""
    locator_weight: float = 1.0
    """Cropped nets (``--model.crop``): weight of the locator's loss (:func:`graspsim.vision.model.locator_loss`, on the
    step's whole composites) beside the U-Net's loss on their patches."""
    hdf5: Optional[Path] = None
    """Optional collected dataset (graspsim-episodes-v1) whose rgb/mask frames are mixed into training."""
    hdf5_fraction: float = 0.25
    """Fraction of each batch taken from --hdf5 frames (when given)."""
    hdf5_max_frames: int = 20000
    """Load at most this many frames from --hdf5 (evenly spread)."""
    init: Optional[Path] = None
    """Fine-tune: start from this vision checkpoint's weights and net (its stored model config replaces --model.*),
    with the short schedule --init-steps / --init-lr instead of --steps / --lr. A fresh optimizer; the run folder,
    resume rule and reports are those of any train-vision run."""
    init_steps: int = 300
    """Optimizer steps of a fine-tune (--init); minutes, not the full budget."""
    init_lr: float = 1e-3
    """Peak learning rate of a fine-tune (--init), under the same warm-up and cosine decay."""
    real: Tuple[Path, ...] = ()
    """Folders of your labelled real frames (each with images/ and masks/, the eval-real format; several as
    DIR,DIR or DIR DIR) mixed into every training batch. Square frames of one size, resized to the net's input.
    Keep the frames you will calibrate and report on out of them."""
    real_fraction: float = 0.5
    """Share of each batch's frames drawn from --real (with a random left-right mirror); the rest are composites."""
    skip_bad: bool = False
    """Skip unreadable background photos (listed in the log) instead of failing."""
    runtime: Runtime = field(default_factory=RuntimeConfig)
    """Device, threads, torchrun timeout and progress bar (flags --device, --threads, --dist-timeout,
    --progress/--no-progress)."""
    bf16: bool = True
    """bfloat16 autocast for forward/backward on CPU when the CPU has native bf16 (AMX/AVX512-BF16); without
    it float32 is used, because emulated bf16 is ~10x slower. Weights and optimizer stay float32."""
    model: SegNetConfig = field(default_factory=lambda: DEFAULT_MODEL)
    """Network design and size: the cropped cascade (:data:`CROPPED_MODEL`). The whole-frame U-Net
    (:data:`UNET_MODEL`) is ``--model.crop 0 --model.no-context --model.base-channels 12 --model.max-channels 96``; ``--model.arch
    halfres`` selects :data:`HALFRES_MODEL`. A run folder written before the cascade became the default resumes as
    the U-Net it trained (:data:`graspsim.compat.CHANGED_DEFAULTS`)."""
    compose: ComposeConfig = field(default_factory=ComposeConfig)
    """How composites are drawn."""
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    """Training-only appearance randomization of the composites (:mod:`graspsim.vision.augment`): target scale, coloured
    light, highlights, speckle, cast shadows, soft edges, occluders, exposure, white balance, gamma, vignetting,
    defocus and motion blur, shot noise, JPEG. Validation and test composites never get it."""
    sim: SimConfig = field(default_factory=SimConfig)
    """Simulator config for rendering targets (image_size sets the training resolution)."""

    def __post_init__(self) -> None:
        owner = "TrainVisionConfig"
        for name in ("steps", "batch_size", "layer_reuse", "val_every", "ckpt_every", "n_val", "n_test", "hdf5_max_frames",
                     "min_pixels", "patches_per_frame"):
            positive_int(owner, name, getattr(self, name))
        finite_positive(owner, "lr", self.lr)
        for name in ("weight_decay", "dice_weight", "pos_weight", "frame_loss_weight", "teacher_weight",
                     "locator_weight"):
            finite_non_negative(owner, name, getattr(self, name))
        m = self.model.multiple  # the net's stride: patches must tile it
        if not isinstance(self.patch, int) or self.patch < 0 or (self.patch and self.patch % m):
            hint = f" (e.g. --patch {(self.patch // m + 1) * m})" if isinstance(self.patch, int) and self.patch > 0 else ""
            raise ValueError(f"TrainVisionConfig.patch must be 0 or a positive multiple of the net's stride {m} "
                             f"(model.multiple); got {self.patch!r}{hint}")
        if not (isinstance(self.ema_decay, (int, float)) and 0.0 <= self.ema_decay < 1.0):
            raise ValueError(f"TrainVisionConfig.ema_decay must be in [0, 1) (0 = no weight average, e.g. 0.999); "
                             f"got {self.ema_decay!r}")
        for name in ("tversky_beta", "patch_target_prob", "hdf5_fraction", "camouflage_prob", "color_match_prob", "decoy_prob", "hue_rotation_prob",
                     "min_precision", "max_fp_image_rate", "transfer_min_precision", "transfer_max_fp_image_rate"):
            probability(owner, name, getattr(self, name))
        for name in ("mirror_tta", "frame_gate", "bf16", "resume", "skip_bad"):
            boolean(owner, name, getattr(self, name))
        self._check_fine_tune()
        object.__setattr__(self, "transfer", default_transfer(self.transfer, self.sim.target.kinds))
        if self.operating_point not in ("composite", "transfer", "both"):
            raise ValueError(f"TrainVisionConfig.operating_point must be composite, transfer or both; got {self.operating_point!r}")
        if self.operating_point != "composite" and self.transfer is None:
            raise ValueError(f"TrainVisionConfig.operating_point={self.operating_point!r} needs the transfer sets (--transfer)")
        if self.teacher is not None:
            check_in_file(self.teacher, f"{owner}.teacher", "vision checkpoint", inside="checkpoint.pt")
        if self.model.crop and self.patch != self.model.crop:
            raise ValueError(f"TrainVisionConfig: a cropped net (model.crop {self.model.crop}) trains its U-Net on patches "
                             f"of the crop's side; set --patch {self.model.crop} (got {self.patch})")
        if self.sim.image_size % self.model.multiple:
            raise ValueError(f"TrainVisionConfig: sim.image_size {self.sim.image_size} must be a multiple of "
                             f"the net's stride {self.model.multiple} (model.multiple)")

    def _check_fine_tune(self) -> None:
        owner = "TrainVisionConfig"
        positive_int(owner, "init_steps", self.init_steps)
        finite_positive(owner, "init_lr", self.init_lr)
        probability(owner, "real_fraction", self.real_fraction)
        # DIR,DIR on the command line: split, so that every entry is one folder
        real = tuple(Path(p) for entry in self.real for p in str(entry).split(",") if p)
        object.__setattr__(self, "real", real)
        if real and not 0.0 < self.real_fraction < 1.0:
            raise ValueError(f"TrainVisionConfig.real_fraction must be in (0, 1) with --real; got {self.real_fraction!r}")
        if real and self.hdf5 is not None and self.real_fraction + self.hdf5_fraction >= 1.0:
            raise ValueError(f"TrainVisionConfig: real_fraction {self.real_fraction} + hdf5_fraction "
                             f"{self.hdf5_fraction} leave no composites in a batch; lower one of them")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return json.loads(json.dumps(d, default=str))
