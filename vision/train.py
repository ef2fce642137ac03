"""``graspsim train-vision``: train :class:`~graspsim.vision.model.SegNet` on on-the-fly sim-real composites.

Every step draws a fresh batch of composites (:mod:`graspsim.vision.compose`, with the training-only appearance randomization
of :mod:`graspsim.vision.augment`) on training backgrounds, optionally mixed with frames of a collected HDF5 dataset.
Validation runs at fixed seeds on composites whose backgrounds are held out from training, and on the transfer
``val/`` set (another renderer, :mod:`graspsim.vision.transfer`). At the end the pixel threshold and frame gate are chosen on
validation (``--operating-point``: composites, transfer ``val/`` or both, each set with its own limits), and the final
metrics are measured at that point on a separate *test* draw of composites (other seed, same held-out backgrounds)
and on the transfer ``test/`` set, so the reported numbers are not tuned on themselves.

Run folder ``out/``: ``checkpoint.pt`` (model + optimizer + config, every ``ckpt_every`` steps, atomic),
``config.json``, ``metrics.json`` (final), ``tb/`` (TensorBoard scalars ``loss/*``, ``val/*``, ``charts/*``).

With ``--ema-decay`` (e.g. 0.999) the run keeps an exponential moving average of the weights and BatchNorm statistics
(``torch.optim.swa_utils.AveragedModel``), updated after every optimizer step. The average is what is validated,
calibrated, tested and saved as the checkpoint's ``model``; the optimizer's own weights are saved as ``raw_model``
(with ``ema_updates``) for ``--resume`` only, and deployable copies drop them.

Under ``torchrun`` (:mod:`graspsim.distributed`) the net trains data-parallel (DDP): every process draws its own
``batch_size`` composites from its own data stream (rank 0 from ``seed``, rank r > 0 from
:func:`graspsim.distributed.rank_seed`), gradients are averaged over the processes, so every rank takes the same optimizer step and
holds bit-identical weights (checked at every checkpoint). BatchNorm keeps per-rank batch statistics (no
SyncBatchNorm on the CPU); its running statistics are rank 0's, broadcast to the others at every forward pass.
Rank 0 alone validates, logs, writes checkpoints and runs the final evaluation. ``loss/train`` is rank 0's batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from graspsim import compat, distributed, interrupts, runs
from graspsim.fileio import atomic_write_bytes, check_out_dir
from graspsim.progress import progress_bar
from graspsim.seeds import data_seed, net_init_seed
from graspsim.torch_util import count_parameters

from .backgrounds import BackgroundBank, resolve_split
from .checkpoint import load_checkpoint, save_checkpoint
from .compose import Composer
from .ensemble import ensemble_size
from .eval_sets import make_set, per_background, per_kind, predict_probs
from .hdf5_frames import HDF5Frames
from .image_set import list_images
from .labelled import RealFrames
from .losses import lr_at, seg_loss
from .metrics import PEAKS, best_threshold, choose_thresholds_on, evaluate_set, gate_frames
from .model import SegNet, SegNetConfig, cpu_has_fast_bf16, locator_coverage, locator_loss
from .patches import _hdf5_share, _real_share, random_patches, training_batch
from .train_config import TrainVisionConfig
from .transfer_report import load_transfer_sets, operating_point_gap, transfer_breakdown, transfer_by_kind

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.pt"
RESUMABLE_KEYS = ("steps", "init_steps", "resume", "ckpt_every", "out", "runtime.progress", "runtime.threads",
                  "runtime.dist_timeout", "sim.fingertip_pixels")
"""Settings that may change on --resume (``steps`` is the new total: the cosine schedule stretches to it;
``sim.fingertip_pixels`` changes gripper senses, never a frame)."""
__all__ = [  # the config, losses, batches and evaluation sets live in their own modules; importable from here too
    "CHECKPOINT_NAME", "HDF5Frames", "TrainVisionConfig", "build_composers", "lr_at", "make_set", "new_training_state",
    "per_background", "predict_probs", "random_patches", "seg_loss", "train_step", "train_vision", "training_batch",
]


# ----------------------------------------------------------------------------------------------- helpers
def train_step(model: SegNet, opt: torch.optim.Optimizer, x: Tensor, mask: Tensor, cfg: TrainVisionConfig, bf16: bool,
               step: int, soft: Tensor | None = None, frames: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """One optimizer step on ``x`` N,3,S,S / ``mask`` N,S,S (:func:`training_batch`); returns the detached loss.
    ``soft`` N,S,S (optional): a teacher's probabilities, matched with weight ``cfg.teacher_weight``.
    ``frames`` (cropped nets): the whole frames B,3,H,W and their masks B,H,W, on which the locator learns
    (:func:`graspsim.vision.model.locator_loss`, weight ``cfg.locator_weight``) and whose chosen windows the U-Net also
    trains on (:meth:`graspsim.vision.model.SegNet.forward`).
    Raises FloatingPointError (naming ``step``) before touching the weights if the loss is not finite."""
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        if frames is None:
            logits, target = model(x), mask
        else:  # cropped net: the patches, then the locator's windows of the whole frames
            logits, cells, index = model(x, frames=frames[0])
            target = torch.cat([mask, frames[1].flatten(1).gather(1, index).unflatten(1, x.shape[-2:])])
    loss = seg_loss(logits, target, cfg.dice_weight, cfg.pos_weight, cfg.tversky_beta, cfg.frame_loss_weight)
    if frames is not None:
        loss = loss + cfg.locator_weight * locator_loss(cells, frames[1])
    if soft is not None:
        loss = loss + cfg.teacher_weight * F.binary_cross_entropy_with_logits(logits[:len(soft)].float(), soft)
    if not torch.isfinite(loss):
        raise FloatingPointError(f"training loss became {float(loss)} at step {step}; lower --lr")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def _file_hashes(folder: Path) -> dict[str, str]:
    return {hashlib.sha1(p.read_bytes()).hexdigest(): p.name for p in list_images(folder)}


def _check_disjoint(train_dir: Path, val_dir: Path) -> None:
    common = set(_file_hashes(train_dir)) & set(_file_hashes(val_dir))
    if common:
        names = sorted(_file_hashes(val_dir)[h] for h in common)
        raise ValueError(f"validation backgrounds {val_dir} share identical files with training backgrounds {train_dir}: {names}")


def build_composers(cfg: TrainVisionConfig) -> tuple[Composer, Composer]:
    """The training composer (training photos with the configured hue rotation, camouflage and colour matching) and
    the validation/test composer (held-out photos, real colours), on ``cfg.runtime.device``. Refuses photo folders that
    share an identical file."""
    train_dir, val_dir = resolve_split(cfg.backgrounds, cfg.val_backgrounds)
    train_dirs = [train_dir, *cfg.extra_backgrounds]
    photos = cfg.sim.randomization.table_photos  # the simulator's tables in the frames of --hdf5 and the composites
    for d in train_dirs + ([Path(photos)] if photos else []):
        _check_disjoint(d, val_dir)
    size = cfg.sim.image_size
    train_bank = BackgroundBank.from_folder(train_dirs, size=size, skip_bad=cfg.skip_bad,
                                            hue_rotation_prob=cfg.hue_rotation_prob, camouflage_prob=cfg.camouflage_prob,
                                            camouflage_hue=cfg.sim.randomization.target_hue)
    val_bank = BackgroundBank.from_folder(val_dir, size=size, skip_bad=cfg.skip_bad)
    log.info("training backgrounds (%d) from %s: %s", len(train_bank), ", ".join(map(str, train_dirs)),
             ", ".join(train_bank.names))
    log.info("held-out validation backgrounds (%d) from %s: %s", len(val_bank), val_dir, ", ".join(val_bank.names))
    dev = torch.device(cfg.runtime.device)
    return (Composer(train_bank, cfg.sim, cfg.compose, dev, color_match_prob=cfg.color_match_prob, augment=cfg.augment,
                     decoy_prob=cfg.decoy_prob),
            Composer(val_bank, cfg.sim, cfg.compose, dev))


def load_teacher(path: Path, device: torch.device, patch: int) -> Callable[[Tensor, bool], Tensor]:
    """The distillation teacher of ``--teacher``: a function of a training batch ``x`` N,3,S,S float in [0, 1] (and
    whether to run under bf16 autocast) giving the teacher's probabilities N,S,S float32 (BatchNorm folded, one pass
    without mirror averaging, which would double its cost, no gradients). Raises like :func:`load_checkpoint` for a
    missing file or another kind of checkpoint, and ValueError when the teacher's stride does not divide the training
    patch side ``patch``."""
    from .infer import Segmenter

    seg = Segmenter.from_checkpoint(path, device, precision="fp32")
    if patch and patch % seg.model.multiple:
        raise ValueError(f"--teacher {path}: its net's stride {seg.model.multiple} does not divide --patch {patch}")
    log.info("distilling from %s (%s net)", path, seg.model.cfg.arch)

    @torch.no_grad()
    def probs(x: Tensor, bf16: bool) -> Tensor:
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
            return torch.sigmoid(seg.net(x).float())

    return probs


def new_training_state(cfg: TrainVisionConfig) -> tuple[SegNet, torch.optim.Optimizer, torch.Generator, bool]:
    """A freshly initialised model (seeded by :func:`graspsim.seeds.net_init_seed`; channels-last on CPU), its AdamW
    optimizer, the data generator (seeded by :func:`graspsim.seeds.data_seed`) on ``cfg.runtime.device``, and whether to train under bf16 autocast (only on CPUs with
    native bf16, :func:`graspsim.vision.model.cpu_has_fast_bf16`)."""
    dev = torch.device(cfg.runtime.device)
    torch.manual_seed(net_init_seed(cfg.seed))
    model = SegNet(cfg.model).to(dev)
    if dev.type == "cpu":
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator(device=dev).manual_seed(data_seed(cfg.seed))
    return model, opt, gen, cfg.bf16 and dev.type == "cpu" and cpu_has_fast_bf16()


# ----------------------------------------------------------------------------------------------- fine-tuning
def resumed_config(cfg: TrainVisionConfig) -> TrainVisionConfig:
    """``cfg`` with the net a ``--resume``d run folder trained, where that folder was written before the default net
    changed (:data:`graspsim.compat.CHANGED_DEFAULTS`) and ``cfg`` asks for today's default; otherwise ``cfg``
    itself."""
    if not cfg.resume or not (Path(cfg.out) / CHECKPOINT_NAME).is_file():
        return cfg  # nothing to resume: _train_vision says so
    stored = runs.read_config(cfg.out) or {}  # the run folder's config.json, as the checkpoint holds it
    adopted = runs.resume_old_defaults(stored, cfg.to_dict(), compat.changed_defaults("train-vision"),
                                       compat.added_settings("train-vision"))
    if "model" in adopted:
        log.info("--resume: %s trained the net that was the default then (%s); resuming with it", cfg.out,
                 adopted["model"])
        return dataclasses.replace(cfg, model=SegNetConfig(**adopted["model"]))
    return cfg


def fine_tune_config(cfg: TrainVisionConfig) -> TrainVisionConfig:
    """``cfg`` as it runs: with ``--init``, the net of the init checkpoint (its stored model config, so that its
    weights fit) and the short schedule ``init_steps`` / ``init_lr`` in place of ``steps`` / ``lr``. Refuses a
    checkpoint that is not a vision checkpoint (e.g. a control net) or was trained at another image size, and an
    explicit ``--steps`` / ``--lr`` (the fine-tune's are ``--init-steps`` / ``--init-lr``)."""
    if cfg.init is None:
        return cfg
    fields = TrainVisionConfig.__dataclass_fields__
    for name in ("steps", "lr"):
        if getattr(cfg, name) not in (fields[name].default, getattr(cfg, f"init_{name}")):
            raise ValueError(f"--{name} sets a from-scratch run; with --init the fine-tune's is --init-{name.replace('_', '-')} "
                             f"(now {getattr(cfg, f'init_{name}')})")
    ck = load_checkpoint(cfg.init)
    if ensemble_size(ck) > 1:
        raise ValueError(f"--init {cfg.init} is an ensemble of {ensemble_size(ck)} nets (graspsim calibrate --vision A B "
                         "...); fine-tune one of its members (its ensemble_members record lists them), then ensemble again")
    if int(ck["image_size"]) != cfg.sim.image_size:
        raise ValueError(f"--init {cfg.init} was trained at {ck['image_size']} px, this run at --sim.image-size "
                         f"{cfg.sim.image_size}")
    try:
        model = SegNetConfig(**ck["model_config"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"--init {cfg.init}: its stored model config does not build a net ({e})") from None
    return dataclasses.replace(cfg, model=model, steps=cfg.init_steps, lr=cfg.init_lr)


def load_real_frames(cfg: TrainVisionConfig, transfer: dict) -> RealFrames | None:
    """The ``--real`` frames at the training size, or None. Refuses frames of the transfer ``test/`` set (it is only
    ever reported); warns about frames of the transfer ``val/`` set (the operating point would be chosen on frames
    the net trained on)."""
    if not cfg.real:
        return None
    real = RealFrames(cfg.real, cfg.sim.image_size)
    mine = {hashlib.sha1(f.numpy().tobytes()).hexdigest() for f in real.rgb}
    for split in ("test", "val"):
        if split in transfer:
            shared = sum(hashlib.sha1(f.numpy().tobytes()).hexdigest() in mine for f in transfer[split].rgb)
            if shared and split == "test":
                raise ValueError(f"--real holds {shared} frame(s) of the transfer test set {cfg.transfer}/test, which is "
                                 "only ever reported; train on other frames")
            if shared and cfg.operating_point != "composite":
                log.warning("--real holds %d frame(s) of the transfer val/ set, on which this run chooses its operating "
                            "point; calibrate the result on frames it did not train on (graspsim calibrate)", shared)
    log.info("mixing %d labelled real frames (%d with the target) from %s into %.0f%% of every batch", len(real),
             real.n_target, ", ".join(map(str, cfg.real)), 100 * cfg.real_fraction)
    return real


def _start_from_init(model: SegNet, cfg: TrainVisionConfig, real: RealFrames | None) -> dict | None:
    """Load the ``--init`` weights into ``model``; returns the ``fine_tune`` record of checkpoints and metrics."""
    if cfg.init is None:
        return {"init": None, "real": real.record()} if real is not None else None
    ck = load_checkpoint(cfg.init)
    model.load_state_dict(ck["model"])
    return {"init": str(Path(cfg.init).resolve()), "init_step": int(ck["step"]), "init_threshold": float(ck["threshold"]),
            "init_peak_threshold": float(ck.get("peak_threshold", 0.0)), "steps": cfg.steps, "lr": cfg.lr,
            "real_fraction": cfg.real_fraction if real is not None else 0.0,
            "real": real.record() if real is not None else None}


# ----------------------------------------------------------------------------------------------- main
def train_vision(cfg: TrainVisionConfig) -> dict:
    """Train (or resume) and return the final metrics dict (``test`` metrics at the chosen threshold,
    plus ``val``, ``threshold``, ``steps``, ``train_seconds``, ``num_parameters``, ``world_size``). See the module
    docstring; under torchrun every rank returns rank 0's dict."""
    cfg = fine_tune_config(resumed_config(cfg))
    with cfg.runtime.job("train-vision") as ctx:
        try:
            return _train_vision(cfg, ctx)
        finally:
            runs.release_run_folder(cfg.out)


def _train_vision(cfg: TrainVisionConfig, ctx: distributed.Context) -> dict:
    """The run of the module docstring: inputs, the net, the training steps, then the operating point and the tests."""
    dev = distributed.local_device(cfg.runtime.device)
    out = check_out_dir(cfg.out, resume=cfg.resume)  # a non-empty folder needs --resume
    ckpt_path = out / CHECKPOINT_NAME
    if cfg.resume and not ckpt_path.is_file():
        raise FileNotFoundError(f"--resume: no checkpoint at {ckpt_path}")
    inputs = _load_inputs(cfg, dev)
    distributed.barrier()  # every rank has checked the inputs before rank 0 writes into out/
    if ctx.is_main:
        runs.claim_run_folder(out, cfg.resume)  # created only once the inputs are known to be good
    run = _start_training(cfg, inputs.real, ckpt_path, dev, ctx)
    validator = None
    if ctx.is_main:  # rank 0 writes, validates and logs; the others only train
        runs.write_config(out, cfg.to_dict())
        validator = _Validator(cfg, inputs.val_composer, inputs.transfer, out)
    log.info("training precision: %s", "bf16 autocast" if run.bf16 else "float32")
    net = _data_parallel(run.model, cfg, dev, ctx)
    nparams = count_parameters(run.model)
    log.info("SegNet %s: %d parameters", dataclasses.asdict(cfg.model), nparams)

    val_summary, train_seconds = _train_loop(cfg, run, net, inputs, validator, ckpt_path, ctx)
    steps_done = max(run.start, cfg.steps)
    final_states = _generator_states(run, steps_done)
    if not ctx.is_main:
        return distributed.broadcast_object(None)  # rank 0's final metrics

    result, by_background = _final_evaluation(cfg, run, inputs, validator, val_summary, steps_done)
    result.update({"train_seconds": train_seconds, "num_parameters": nparams, "batch_size": cfg.batch_size,
                   "train_backgrounds": inputs.composer.bank.names, "val_backgrounds": inputs.val_composer.bank.names,
                   "history": run.history, "test_by_background": by_background,
                   **({"fine_tune": run.fine_tune} if run.fine_tune else {})})
    result["world_size"] = ctx.world_size
    _save(ckpt_path, cfg, run, validator.probe, steps_done, result["threshold"], result, train_seconds, final_states,
          ctx, result["peak_threshold"])
    atomic_write_bytes(out / "metrics.json", json.dumps(result, indent=2).encode())
    _log_tests(result)
    return distributed.broadcast_object(result)


class _Inputs(NamedTuple):
    """What a run trains and validates on besides the net (every rank loads them)."""

    composer: Composer
    """Training composites (training photos, appearance randomization)."""
    val_composer: Composer
    """Validation and test composites (held-out photos, real colours)."""
    transfer: dict
    """Transfer sets by split (``val``, ``test``; empty without ``--transfer``)."""
    hdf5: HDF5Frames | None
    """Frames of ``--hdf5`` mixed into every batch, or None."""
    teacher: Callable[[Tensor, bool], Tensor] | None
    """The distillation teacher of ``--teacher`` (:func:`load_teacher`), or None."""
    real: RealFrames | None
    """The labelled real frames of ``--real``, or None."""


def _load_inputs(cfg: TrainVisionConfig, dev: torch.device) -> _Inputs:
    """Load and check every input of the run (nothing is written): transfer sets, composers, ``--hdf5`` frames,
    teacher, ``--real`` frames."""
    transfer = load_transfer_sets(cfg.transfer, cfg.sim.image_size)
    size = cfg.sim.image_size
    composer, val_composer = build_composers(cfg)
    hdf5 = HDF5Frames(cfg.hdf5, size, cfg.hdf5_max_frames) if cfg.hdf5 is not None else None
    teacher = load_teacher(cfg.teacher, dev, cfg.patch if 0 < cfg.patch < size else 0) if cfg.teacher is not None else None
    real = load_real_frames(cfg, transfer)
    return _Inputs(composer, val_composer, transfer, hdf5, teacher, real)


@dataclasses.dataclass
class _Training:
    """What a run carries from step to step and into its checkpoints."""

    model: SegNet
    opt: torch.optim.Optimizer
    gen: torch.Generator
    """This rank's data stream (composites, patches, frame draws)."""
    bf16: bool
    """Train under bf16 autocast."""
    start: int
    """Steps finished before this invocation (0 for a fresh run)."""
    train_seconds: float
    """Training seconds of earlier invocations."""
    fine_tune: dict | None
    """The ``fine_tune`` record (``--init`` / ``--real``), or None."""
    history: list[dict]
    """Validation rows (step, loss, iou, precision, recall) so far."""
    ema: AveragedModel | None = None
    """The moving average of the weights (``--ema-decay``), or None."""

    @property
    def net(self) -> SegNet:
        """The weights the run validates, tests and saves as ``model``: the moving average's, or the optimizer's."""
        return self.ema.module if self.ema is not None else self.model

    def update_average(self) -> None:
        """Fold the optimizer's weights into the moving average (after every step; no-op without one)."""
        if self.ema is not None:
            self.ema.update_parameters(self.model)


def _start_training(cfg: TrainVisionConfig, real: RealFrames | None, ckpt_path: Path, dev: torch.device,
                    ctx: distributed.Context) -> _Training:
    """The net, optimizer and this rank's data stream: fresh (:func:`new_training_state`, then the ``--init`` weights)
    or, with ``--resume``, as ``ckpt_path`` left them (after the one resume rule and the world-size check)."""
    model, opt, gen, bf16 = new_training_state(cfg)
    model.to(dev)
    fine_tune = None if cfg.resume else _start_from_init(model, cfg, real)
    gen.manual_seed(distributed.rank_seed(data_seed(cfg.seed), ctx.rank))
    run = _Training(model, opt, gen, bf16, start=0, train_seconds=0.0, fine_tune=fine_tune, history=[])
    if cfg.ema_decay > 0:  # a copy of the (initial) weights, averaged from the first step on
        run.ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema_decay), use_buffers=True)
    if not cfg.resume:
        return run
    ckpt = load_checkpoint(ckpt_path, map_location=dev)
    if "optimizer" not in ckpt or "generator_state" not in ckpt:
        raise ValueError(f"--resume: {ckpt_path} is a deployable checkpoint without optimizer and data-RNG state "
                         "(e.g. a shipped net); it can be used for inference but not resumed")
    runs.check_resume(ckpt["config"], cfg.to_dict(), RESUMABLE_KEYS, ckpt_path,  # the one resume rule
                      compat.added_settings("train-vision"))
    stored_world = int(ckpt.get("world_size", 1))
    if stored_world != ctx.world_size:
        raise ValueError(f"--resume: {ckpt_path} was written by {stored_world} process(es), this run has "
                         f"{ctx.world_size}; each process continues its own data stream, so resume with "
                         f"--nproc-per-node {stored_world} (or start a new run folder)")
    if run.ema is not None:  # "model" holds the average; the optimizer's weights are "raw_model"
        model.load_state_dict(ckpt["raw_model"])
        run.ema.module.load_state_dict(ckpt["model"])
        run.ema.n_averaged.fill_(int(ckpt["ema_updates"]))
    else:
        model.load_state_dict(ckpt["model"])
    run.fine_tune = ckpt.get("fine_tune")
    opt.load_state_dict(ckpt["optimizer"])
    gen.set_state(ckpt.get("generator_states", [ckpt["generator_state"]])[ctx.rank])
    run.start = int(ckpt["step"])
    run.train_seconds = float(ckpt.get("train_seconds", 0.0))
    run.history = list(ckpt.get("history", []))
    log.info("resumed %s at step %d", ckpt_path, run.start)
    if run.start >= cfg.steps:
        log.info("checkpoint already at step %d >= --steps %d; only re-evaluating", run.start, cfg.steps)
    return run


def _data_parallel(model: SegNet, cfg: TrainVisionConfig, dev: torch.device, ctx: distributed.Context) -> torch.nn.Module:
    """What :func:`train_step` calls: ``model`` itself, or under torchrun its data-parallel wrapper (DDP's defaults:
    parameters broadcast from rank 0 at construction, buffers such as BatchNorm running statistics from rank 0
    before every forward pass)."""
    if not ctx.distributed:
        return model
    net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    log.info("data-parallel training on %d processes: %d composites per step (%d per process)", ctx.world_size,
             ctx.world_size * cfg.batch_size, cfg.batch_size)
    return net


class _Validator:
    """Rank 0's validation: the fixed validation composites (``cfg.n_val`` at ``cfg.val_seed``) and the transfer
    ``val/`` set scored at a step and logged to TensorBoard (``out/tb``). Keeps each set's latest probabilities
    (``last_probs``: ``composite`` / ``transfer`` -> N,H,W float) for the final choice of the operating point."""

    def __init__(self, cfg: TrainVisionConfig, val_composer: Composer, transfer: dict, out: Path):
        from torch.utils.tensorboard import SummaryWriter

        log.info("rendering %d validation composites", cfg.n_val)
        self.cfg, self.transfer = cfg, transfer
        self.rgb, self.mask = make_set(val_composer, cfg.n_val, cfg.val_seed)  # N,3,H,W uint8 / N,H,W bool
        self.probe = self.rgb[self.mask.flatten(1).any(1)][:24].clone()  # clone: a slice would save the whole storage
        self.writer = SummaryWriter(str(out / "tb"))
        self.last_probs: dict[str, Tensor] = {}

    def __call__(self, model: SegNet, step: int, bf16: bool) -> dict:
        """Validation metrics of ``model`` at ``step`` (loss, IoU, precision, recall, false-positive image rate at
        0.5, ``best_threshold``; ``window_coverage`` for cropped nets; ``transfer_iou`` when a transfer val/ set is
        given and ``step`` > 0)."""
        cfg, writer = self.cfg, self.writer
        probs = predict_probs(model, self.rgb, bf16, mirror=cfg.mirror_tta)
        self.last_probs["composite"] = probs
        with torch.no_grad():
            vloss = float(seg_loss(torch.logit(probs.clamp(1e-6, 1 - 1e-6)), self.mask, cfg.dice_weight,
                                  cfg.pos_weight, cfg.tversky_beta))
        summ, curve = evaluate_set(probs, self.mask, 0.5, cfg.min_pixels)
        summ["loss"] = vloss
        summ["best_threshold"] = best_threshold(curve, cfg.max_fp_image_rate, cfg.min_precision)
        if cfg.model.crop:  # share of the target pixels that fall inside the cascade's windows
            summ["window_coverage"] = locator_coverage(model, self.rgb, self.mask)
        for k in ("loss", "iou", "precision", "recall", "false_positive_image_rate", "window_coverage"):
            if math.isfinite(summ.get(k, math.nan)):
                writer.add_scalar(f"val/{k}", summ[k], step)
        if "val" in self.transfer and step > 0:  # (the untrained net's score on it says nothing)
            tv = self.transfer["val"]
            self.last_probs["transfer"] = predict_probs(model, tv.rgb, bf16, mirror=cfg.mirror_tta)
            tsum, _ = evaluate_set(self.last_probs["transfer"], tv.mask, 0.5, cfg.min_pixels)
            summ["transfer_iou"] = tsum["iou"]
            for k in ("iou", "precision", "recall", "false_positive_image_rate"):
                if math.isfinite(tsum[k]):
                    writer.add_scalar(f"transfer_val/{k}", tsum[k], step)
        return summ


def _history_row(step: int, summ: dict) -> dict:
    return {"step": step, **{k: summ[k] for k in ("loss", "iou", "precision", "recall")}}


def _train_loop(cfg: TrainVisionConfig, run: _Training, net: torch.nn.Module, inputs: _Inputs,
                validator: _Validator | None, ckpt_path: Path, ctx: distributed.Context) -> tuple[dict, float]:
    """Steps ``run.start`` .. ``cfg.steps - 1``: rank 0 also logs, validates every ``val_every`` steps and checkpoints
    every ``ckpt_every`` steps (``validator`` None on the other ranks, which only train and join the checkpoints'
    collectives). Returns (the last validation summary, {} if none ran; the training seconds of every invocation)."""
    n_other = _hdf5_share(cfg, inputs.hdf5) + _real_share(cfg, inputs.real)  # frames of a batch that are not composites
    val_summary: dict = {}
    threshold = 0.5
    if run.start == 0 and validator is not None:
        run.history.append(_history_row(0, validator(run.net, 0, run.bf16)))
    run.model.train()
    layers = None
    t_start = time.perf_counter()
    with progress_bar("train-vision", cfg.runtime.progress and ctx.is_main, fields=("{task.fields[info]}",)) as bar:
        task = bar.add_task("train", total=cfg.steps, completed=run.start, info="")
        for step in range(run.start, cfg.steps):
            interrupts.check()  # a stop signal whose exception Python discarded still ends training here
            loss, layers = _step(cfg, run, net, inputs, step, layers, n_other)
            done = step + 1
            checkpoint_now = done % cfg.ckpt_every == 0 or done == cfg.steps
            if validator is None:
                if checkpoint_now:
                    _generator_states(run, done)
                continue
            if done % 10 == 0 or done == cfg.steps:
                validator.writer.add_scalar("loss/train", float(loss), done)
                validator.writer.add_scalar("charts/lr", run.opt.param_groups[0]["lr"], done)
            if done % cfg.val_every == 0 or done == cfg.steps:
                val_summary = validator(run.net, done, run.bf16)
                threshold = val_summary["best_threshold"]
                run.history.append(_history_row(done, val_summary))
                bar.update(task, info=f"loss {float(loss):.3f} val iou@0.5 {val_summary['iou']:.3f}")
                _log_validation(done, val_summary, bool(cfg.model.crop))
            if checkpoint_now:
                seconds = run.train_seconds + time.perf_counter() - t_start
                validator.writer.add_scalar("charts/train_seconds", seconds, done)
                _save(ckpt_path, cfg, run, validator.probe, done, threshold, val_summary, seconds,
                      _generator_states(run, done), ctx)
            bar.update(task, advance=1)
    return val_summary, run.train_seconds + time.perf_counter() - t_start


def _step(cfg: TrainVisionConfig, run: _Training, net: torch.nn.Module, inputs: _Inputs, step: int,
          layers, n_other: int) -> tuple[Tensor, object]:
    """Training step ``step`` (0-based): the learning rate of the schedule, the batch (rendering new composite layers
    every ``layer_reuse`` steps), the teacher's probabilities, one optimizer step. ``layers``: the reused composite
    layers (None until first rendered); ``n_other``: frames of a batch that are not composites. Returns (the
    detached loss, the layers for the next step)."""
    composer = inputs.composer
    for grp in run.opt.param_groups:
        grp["lr"] = lr_at(step, cfg)
    if cfg.layer_reuse > 1 and (layers is None or (step - run.start) % cfg.layer_reuse == 0):
        layers = composer.render_layers(cfg.batch_size - n_other, run.gen)
    x, mask, *frames = training_batch(composer, cfg, run.gen, inputs.hdf5, layers, inputs.real,
                                      with_frames=bool(cfg.model.crop))
    soft = inputs.teacher(x, run.bf16) if inputs.teacher is not None else None
    loss = train_step(net, run.opt, x, mask, cfg, run.bf16, step, soft, tuple(frames) or None)
    run.update_average()
    return loss, layers


def _log_validation(step: int, summ: dict, cropped: bool) -> None:
    log.info("step %d: val loss %.4f iou@0.5 %.3f precision %.3f recall %.3f fp-images %.3f%s", step,
             summ["loss"], summ["iou"], summ["precision"], summ["recall"], summ["false_positive_image_rate"],
             f" window coverage {summ['window_coverage']:.4f}" if cropped else "")


def _generator_states(run: _Training, done: int) -> list[Tensor]:
    """Every rank's data-RNG state after ``done`` steps, in rank order (a collective: every rank calls it at the same
    steps; it first checks that every rank holds the same weights)."""
    distributed.check_identical(run.model, f"train-vision step {done}")
    return distributed.all_gather_object(run.gen.get_state())


def _save(path: Path, cfg: TrainVisionConfig, run: _Training, probe: Tensor, step: int, threshold: float,
          metrics: dict, seconds: float, states: list[Tensor], ctx: distributed.Context, peak: float = 0.0) -> None:
    """Rank 0 writes the resumable checkpoint at ``step`` (:mod:`graspsim.vision.checkpoint`): weights, optimizer,
    configs, operating point (``threshold``, frame gate ``peak``), ``metrics``, ``probe`` images N,3,H,W uint8, the
    data-RNG ``states`` of every rank, ``seconds`` of training and the validation history."""
    if not ctx.is_main:
        return
    extra = {"world_size": ctx.world_size, "generator_states": states} if ctx.distributed else {}
    if run.ema is not None:
        extra.update(raw_model=run.model.state_dict(), ema_updates=int(run.ema.n_averaged))
    save_checkpoint(path, {**extra,
        "model": run.net.state_dict(), "optimizer": run.opt.state_dict(), "model_config": dataclasses.asdict(cfg.model),
        "config": cfg.to_dict(), "step": step, "threshold": threshold, "peak_threshold": peak,
        "image_size": cfg.sim.image_size, "mirror_tta": cfg.mirror_tta,
        **({"fine_tune": run.fine_tune} if run.fine_tune else {}),
        "metrics": metrics,
        "probe_rgb": probe, "generator_state": run.gen.get_state(), "train_seconds": seconds, "history": run.history,
    })


def _final_evaluation(cfg: TrainVisionConfig, run: _Training, inputs: _Inputs, validator: _Validator,
                      val_summary: dict, steps_done: int) -> tuple[dict, dict]:
    """Rank 0's end of the run: the pixel threshold and frame gate chosen on validation (``--operating-point``), what
    validation promises there, and the metrics at that point on the test composites (``cfg.n_test`` at
    ``cfg.test_seed``) and the transfer ``test/`` set. Returns (the first part of the metrics dict: ``test``, ``val``,
    ``threshold``, ``peak_threshold``, ``operating_point``, transfer results, ``mirror_tta``, ``steps``; the test
    metrics per background photo); closes the TensorBoard writer."""
    model, bf16, transfer, writer = run.net, run.bf16, inputs.transfer, validator.writer
    if not val_summary or "composite" not in validator.last_probs:
        val_summary = validator(model, steps_done, bf16)
    chooser = {"composite": ["composite"], "transfer": ["transfer"], "both": ["composite", "transfer"]}[cfg.operating_point]
    val_sets = {"composite": (validator.last_probs["composite"], validator.mask, cfg.max_fp_image_rate, cfg.min_precision)}
    if "val" in transfer:
        val_sets["transfer"] = (validator.last_probs["transfer"], transfer["val"].mask, cfg.transfer_max_fp_image_rate,
                                cfg.transfer_min_precision)
    threshold, peak = choose_thresholds_on([val_sets[k] for k in chooser], min_pixels=cfg.min_pixels,
                                           peaks=PEAKS if cfg.frame_gate else (0.0,))
    log.info("operating point chosen on %s validation: threshold %.2f, frame gate %s; mirror averaging %s",
             " + ".join(chooser), threshold, f"{peak:g}" if peak else "off", "on" if cfg.mirror_tta else "off")
    # what validation promises at the chosen point, to compare with the tests
    promised = {k: evaluate_set(gate_frames(v[0], peak), v[1], threshold, cfg.min_pixels)[0] for k, v in val_sets.items()}
    log.info("rendering test composites")
    test_rgb, test_mask, test_bg, test_kind = make_set(inputs.val_composer, cfg.n_test, cfg.test_seed,
                                                       with_background=True, with_kind=True)
    test_probs = gate_frames(predict_probs(model, test_rgb, bf16, mirror=cfg.mirror_tta), peak)
    test_summary, _ = evaluate_set(test_probs, test_mask, threshold, cfg.min_pixels)
    test_summary["peak_threshold"] = peak
    by_background = per_background(test_probs, test_mask, test_bg, inputs.val_composer.bank.names, threshold,
                                   cfg.min_pixels)
    if cfg.sim.target.wrist:  # a mix beyond spheres: the composite test per target kind too
        test_summary["by_kind"] = per_kind(test_probs, test_mask, test_kind, threshold, cfg.min_pixels)
    tests = {"test": test_summary}
    transfer_result: dict = {}
    if "test" in transfer:
        tt = transfer["test"]
        tprobs = gate_frames(predict_probs(model, tt.rgb, bf16, mirror=cfg.mirror_tta), peak)
        tests["transfer_test"], _ = evaluate_set(tprobs, tt.mask, threshold, cfg.min_pixels)
        transfer_result = {"transfer_test": tests["transfer_test"],
                           "transfer_test_breakdown": transfer_breakdown(tprobs, tt, threshold, cfg.min_pixels),
                           "transfer_val": promised.get("transfer")}
        by_kind = transfer_by_kind(tprobs, tt, threshold, cfg.min_pixels)
        if by_kind:  # the set's metadata names each frame's target kind
            transfer_result["transfer_test_by_kind"] = by_kind
    for name, summ in tests.items():
        for k in ("iou", "precision", "recall", "f1", "false_positive_image_rate"):
            if math.isfinite(summ[k]):
                writer.add_scalar(f"{name}/{k}", summ[k], steps_done)
    writer.close()
    return {
        "test": test_summary, "val": val_summary, "threshold": threshold, "peak_threshold": peak,
        "operating_point": {"chosen_on": chooser, "max_fp_image_rate": cfg.max_fp_image_rate,
                            "min_precision": cfg.min_precision, "transfer_max_fp_image_rate": cfg.transfer_max_fp_image_rate,
                            "transfer_min_precision": cfg.transfer_min_precision, "promised": promised,
                            "gap": operating_point_gap(promised, tests)},
        **transfer_result,
        "mirror_tta": cfg.mirror_tta, "steps": steps_done, "training_precision": "bf16" if bf16 else "fp32",
    }, by_background


def _log_tests(result: dict) -> None:
    """Log the final test metrics (composites, transfer test, per background)."""
    t = result["test"]
    log.info("test (held-out backgrounds, %d frames): iou %.3f precision %.3f recall %.3f fp-images %.3f",
             t["num_images"], t["iou"], t["precision"], t["recall"], t["false_positive_image_rate"])
    for kind, m in t.get("by_kind", {}).items():
        log.info("  test, %-8s iou %.3f precision %.3f recall %.3f (%d target frames)", kind, m["iou"], m["precision"],
                 m["recall"], m["num_target_images"])
    if "transfer_test" in result:
        t = result["transfer_test"]
        log.info("transfer test (another renderer on unseen photos, %d frames): iou %.3f precision %.3f recall %.3f "
                 "fp-images %.3f", t["num_images"], t["iou"], t["precision"], t["recall"], t["false_positive_image_rate"])
    for kind, m in result.get("transfer_test_by_kind", {}).items():
        log.info("  transfer test, %-8s iou %.3f precision %.3f recall %.3f fp-images %.3f (%d target frames; the "
                 "set's %d target-free frames) %s", kind, m["iou"], m["precision"], m["recall"],
                 m["false_positive_image_rate"], m["num_target_images"], m["num_empty_images"],
                 "meets the targets" if m["meets_targets"] else "misses a target")
    for name, m in result["test_by_background"].items():
        log.info("  test on %-28s iou %.3f precision %.3f recall %.3f fp-images %.3f (%d target / %d empty frames)",
                 name, m["iou"], m["precision"], m["recall"], m["false_positive_image_rate"], m["num_target_images"],
                 m["num_empty_images"])
