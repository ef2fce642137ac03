"""``graspsim dagger``: train the mask-driven policy by DAgger (Ross et al., AISTATS 2011).

Iteration ``i`` (all scenes batched on ``device``):

1. **Roll out** ``episodes_per_iter`` training scenes (seeds from the ``train`` stream). Iteration 0 is
   driven by the expert (beta = 1); later iterations draw, per scene and episode, the expert with
   probability ``beta_i`` and the current learner otherwise (``schedule``: linear, exponential or
   constant, starting at ``beta_start`` in iteration 1). The expert labels every visited state.
2. **Aggregate**: the episodes are written to ``out/data/iter_NNN.h5`` (layout of ``graspsim collect``)
   and appended to the in-memory training set.
3. **Train** ``train_steps`` Adam steps on minibatches of all data so far (``sample_by``) (the net is
   fine-tuned across iterations, not re-initialised).
4. **Evaluate** the learner alone (beta = 0) on ``eval_episodes`` held-out scenes (seeds from the
   ``heldout`` stream, the same scenes every iteration, never used for training).
5. **Checkpoint** ``out/checkpoints/iter_NNN.pt``, ``out/policy.pt`` (latest) and ``out/best.pt`` (the
   iteration with the best held-out success so far, later iteration on ties) (model + config; only the
   resumable ``iter_NNN.pt`` also holds the optimizer),
   then append the iteration's row to ``metrics.json`` / ``metrics.csv`` (the commit point), TensorBoard
   scalars under ``out/tb`` and ``learning_curve.png``.

Under ``torchrun`` (:mod:`graspsim.distributed`) every iteration is split over the processes: each rank rolls out
its contiguous share of the iteration's seeds (and of the held-out seeds), writes its episodes to
``data/iter_NNN.rankR.h5``, and after a barrier rank 0 joins them into ``data/iter_NNN.h5`` by episode index.
Training is data-parallel (DDP): every rank takes ``train_steps`` steps on minibatches of its own share of the
aggregated data (its own minibatch stream, :func:`graspsim.distributed.rank_seed`) and the gradients are
averaged, so each step's gradient is a stratified sample of the union and every rank holds the same weights
(checked before each checkpoint). Outcomes and losses are gathered; rank 0 writes checkpoints, metrics and plots.

``--resume`` continues after the last iteration listed in ``metrics.json``: the model, optimizer and
aggregated data of the finished iterations are reloaded; a half-written iteration is redone. Every
random stream is derived from (seed, iteration, purpose), so a resumed run draws what an uninterrupted
one would.

Loss (per sample): ``mean((tanh(v_raw) - v_expert / max_speed)^2) + grip_weight * BCE(grip_logit,
expert_grip > 0)`` with close labels weighted ``grip_pos_weight``. A behaviour-cloning baseline with the same budget is ``--schedule constant
--beta-start 1`` (the expert drives every episode; only expert-visited states are labelled).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, NamedTuple, Optional

import numpy as np
import torch
import torch.nn.functional as F

from graspsim import GraspEnv, SimConfig, compat, distributed, interrupts
from graspsim.config import from_dict
from graspsim.fileio import check_in_file, check_out_dir, replace_atomically
from graspsim.progress import progress_bar
from graspsim.torch_util import count_parameters
from graspsim.runtime import Runtime, RuntimeConfig
from graspsim.validate import finite_non_negative, finite_positive, non_negative_int, positive_int, probability
from graspsim.vision.infer import Precision, check_precision

from .aggregate import Aggregate, iteration_file, join_iteration, part_file, write_iteration
from .model import ControlNet, ControlNetConfig, to_gripper_frame
from .policy import MaskPolicy, load_checkpoint, save_checkpoint
from graspsim import runs
from graspsim.seeds import dagger_stream_seed, episode_seeds, net_init_seed

from .masks import check_vision_kinds, make_mask_fn
from .rollout import RolloutResult, mask_precision
from .sharded import sharded_rollout

log = logging.getLogger(__name__)

RESUMABLE_KEYS = ("out", "iterations", "resume", "runtime.progress", "runtime.threads", "runtime.dist_timeout")
"""Config fields that may differ when resuming (they do not change what finished iterations did; ``out`` differs
when a run folder was moved or copied)."""
SCHEDULES = ("linear", "exponential", "constant")
@dataclass(frozen=True)
class DaggerConfig:
    """Train the mask-driven policy by DAgger (or behaviour cloning with --schedule constant --beta-start 1)."""

    out: Path
    """Run folder (created): config.json, data/, checkpoints/, policy.pt, metrics.json/csv, tb/, learning_curve.png.
    A non-empty folder is refused unless --resume is given."""
    iterations: int = 5
    """DAgger iterations (iteration 0 is expert-only). With --resume: the total."""
    episodes_per_iter: int = 128
    """Training episodes rolled out (and aggregated) per iteration."""
    eval_episodes: int = 128
    """Held-out episodes of the learner alone after each iteration."""
    num_envs: int = 64
    """Scenes simulated in parallel."""
    schedule: Literal["linear", "exponential", "constant"] = "exponential"
    """Beta schedule for iterations >= 1: linear from beta_start to 0 at the last iteration,
    exponential beta_start * beta_decay**(i-1), or constant beta_start."""
    beta_start: float = 0.5
    """Probability that the expert drives an episode in iteration 1."""
    beta_decay: float = 0.5
    """Factor per iteration of the exponential schedule."""
    expert_noise: float = 0.01
    """Std (m/s) of noise added to the expert's executed velocity (labels stay clean), for state diversity."""
    train_steps: int = 400
    """Adam steps after each iteration's aggregation."""
    batch_size: int = 256
    """Minibatch size."""
    sample_by: Literal["episode", "step"] = "episode"
    """Minibatch sampling over all aggregated data: every episode equally likely (then a uniform step), or
    every step equally likely. Per-episode keeps the long time-out episodes of early learners from
    swamping the data."""
    lr: float = 2e-3
    """Adam learning rate at the start of each iteration's training."""
    lr_final_frac: float = 0.05
    """Each iteration's training anneals the learning rate from lr to lr * lr_final_frac (cosine), so the
    iteration's checkpoint is not taken at the noisy high-rate end of training."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grip_weight: float = 0.5
    """Weight of the grip BCE loss beside the velocity MSE (velocity in units of max_speed)."""
    grip_pos_weight: float = 3.0
    """BCE weight of 'close' labels. Close labels are rare (a few steps per episode) and the exact grasp height
    is barely visible in the mask, so an unweighted learner hovers open above the target; >1 makes it commit."""
    masks: Literal["gt", "predicted"] = "gt"
    """Learner input: simulator ground-truth masks or the vision module's predictions (needs --vision)."""
    vision: Optional[Path] = None
    """Vision checkpoint (graspsim train-vision) for --masks predicted."""
    precision: Precision = "auto"
    """Segmentation precision with --masks predicted: auto (bf16 where the CPU has native bf16 and the checkpoint's
    probe frames agree with float32), fp32 or bf16 (as in eval-real). The run's result names the one used."""
    seed: int = 0
    """Run seed: network init, scenes, Bernoulli choices, noise and minibatches derive from it."""
    resume: bool = False
    """Continue the run in --out after its last finished iteration."""
    runtime: Runtime = field(default_factory=RuntimeConfig)
    """Device, threads, torchrun timeout and progress bar (flags --device, --threads, --dist-timeout,
    --progress/--no-progress)."""
    model: ControlNetConfig = field(default_factory=ControlNetConfig)
    """Policy network size (its image_size, max_speed, and with cubes or cylinders its wrist and max_yaw_rate, are
    taken from --sim)."""
    sim: SimConfig = field(default_factory=SimConfig)
    """Simulator configuration (training scenes)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))
        if self.vision is not None:
            object.__setattr__(self, "vision", Path(self.vision))
        owner = "DaggerConfig"
        for name in ("iterations", "episodes_per_iter", "eval_episodes", "num_envs", "train_steps", "batch_size"):
            positive_int(owner, name, getattr(self, name))
        if self.schedule not in SCHEDULES:
            raise ValueError(f"DaggerConfig.schedule must be one of {SCHEDULES}; got {self.schedule!r}")
        for name in ("beta_start", "beta_decay"):
            probability(owner, name, getattr(self, name))
        for name in ("expert_noise", "weight_decay", "grip_weight", "grip_pos_weight"):
            finite_non_negative(owner, name, getattr(self, name))
        finite_positive(owner, "lr", self.lr)
        if not (isinstance(self.lr_final_frac, (int, float)) and 0.0 < self.lr_final_frac <= 1.0):
            raise ValueError(f"DaggerConfig.lr_final_frac must be in (0, 1]; got {self.lr_final_frac!r}")
        if self.sample_by not in ("episode", "step"):
            raise ValueError(f"DaggerConfig.sample_by must be 'episode' or 'step'; got {self.sample_by!r}")
        if self.masks not in ("gt", "predicted"):
            raise ValueError(f"DaggerConfig.masks must be 'gt' or 'predicted'; got {self.masks!r}")
        if self.masks == "predicted" and self.vision is None:
            raise ValueError("DaggerConfig: --masks predicted needs --vision CKPT (a train-vision checkpoint)")
        if self.vision is not None:
            check_in_file(self.vision, "DaggerConfig.vision", "vision checkpoint", inside="checkpoint.pt")
        check_precision(owner, "precision", self.precision)
        non_negative_int(owner, "seed", self.seed)
        # the net's input size and velocity scale are the simulator's
        object.__setattr__(self, "model", dataclasses.replace(
            self.model, image_size=self.sim.image_size, max_speed=self.sim.max_speed, wrist=self.sim.wrist,
            max_yaw_rate=self.sim.max_yaw_rate if self.sim.wrist else ControlNetConfig.max_yaw_rate,
            fingertip_pixels=self.sim.wrist and self.sim.fingertip_pixels))

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))

    @classmethod
    def from_dict(cls, d: dict) -> "DaggerConfig":
        return from_dict(cls, d)


# ------------------------------------------------------------------------------------------ helpers
def beta_at(cfg: DaggerConfig, it: int) -> float:
    """Probability that the expert drives an episode in iteration ``it`` (1.0 for iteration 0)."""
    if it == 0:
        return 1.0
    if cfg.schedule == "constant":
        return float(cfg.beta_start)
    if cfg.schedule == "exponential":
        return float(cfg.beta_start * cfg.beta_decay ** (it - 1))
    span = max(cfg.iterations - 2, 1)  # linear: beta_start at iteration 1 down to 0 at the last one
    return float(max(0.0, cfg.beta_start * (1.0 - (it - 1) / span)))


def stream_seed(seed: int, it: int, purpose: int) -> int:
    """Seed of iteration ``it``'s random stream for ``purpose``: :func:`graspsim.seeds.dagger_stream_seed`."""
    return dagger_stream_seed(seed, it, purpose)


def generator(seed: int, device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return g


def loss_terms(raw: torch.Tensor, label: torch.Tensor, net: ControlNetConfig, gripper: torch.Tensor,
               grip_pos_weight: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(motion MSE, grip BCE with ``grip_pos_weight`` on close labels) for raw net outputs and expert labels
    ``B,net.action_dim`` (simulator units). The motion term compares the tanh outputs with the label's velocity in
    units of ``max_speed``; with the wrist the velocity is first turned into the gripper's frame (the net's, see
    :mod:`graspsim.dagger.model`; ``gripper`` B,5 the senses it read) and the yaw rate in units of ``max_yaw_rate``
    joins it as a fourth component."""
    if net.wrist:
        label = to_gripper_frame(label, gripper)
        target = torch.cat([label[:, :3] / net.max_speed, label[:, 3:4] / net.max_yaw_rate], 1).clamp(-1.0, 1.0)
        motion = F.mse_loss(torch.tanh(raw[:, :4]), target)
    else:
        motion = F.mse_loss(torch.tanh(raw[:, :3]), (label[:, :3] / net.max_speed).clamp(-1.0, 1.0))
    pw = torch.tensor(float(grip_pos_weight), device=raw.device)
    grip = F.binary_cross_entropy_with_logits(raw[:, -1], (label[:, -1] > 0).float(), pos_weight=pw)
    return motion, grip


def train_steps(model: ControlNet, opt: torch.optim.Optimizer, data: Aggregate, steps: int, batch_size: int,
                grip_weight: float, g: torch.Generator, on_step: Callable[[], None] | None = None,
                grip_pos_weight: float = 1.0, sample_by: str = "step", lr: float | None = None,
                lr_final_frac: float = 1.0) -> dict:
    """``steps`` optimizer steps on minibatches drawn by ``sample_by``; returns mean losses over the last half.

    With ``lr`` given, the learning rate follows a cosine from ``lr`` down to ``lr * lr_final_frac``."""
    model.train()
    net_cfg = getattr(model, "module", model).cfg  # model may be a DistributedDataParallel wrapper
    hist = []
    for k in range(steps):
        if lr is not None:
            frac = lr_final_frac + (1.0 - lr_final_frac) * 0.5 * (1.0 + math.cos(math.pi * k / max(steps - 1, 1)))
            for group in opt.param_groups:
                group["lr"] = lr * frac
        mask, grip, label = data.sample(batch_size, g, sample_by)
        raw = model(mask, grip)
        vel, gl = loss_terms(raw, label, net_cfg, grip, grip_pos_weight)
        loss = vel + grip_weight * gl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        hist.append((float(loss.detach()), float(vel.detach()), float(gl.detach())))
        if on_step is not None:
            on_step()
    model.eval()
    tail = np.array(hist[len(hist) // 2:])
    return {"loss": float(tail[:, 0].mean()), "loss_vel": float(tail[:, 1].mean()), "loss_grip": float(tail[:, 2].mean())}


def plot_learning_curve(path: Path, curves: dict[str, list[dict]]) -> None:
    """PNG: held-out success (learner alone) and training loss versus iteration, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    for name, rows in curves.items():
        its = [r["iteration"] for r in rows]
        a.plot(its, [100 * r["eval_success"] for r in rows], "o-", label=name)
        b.plot(its, [r["loss"] for r in rows], "o-", label=name)
    a.set(xlabel="iteration", ylabel="held-out success (%)", ylim=(-2, 102), title="learner alone")
    b.set(xlabel="iteration", ylabel="training loss", yscale="log", title="loss on aggregated data")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    with replace_atomically(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)


# ------------------------------------------------------------------------------------------ main
class _Learner(NamedTuple):
    """The net being trained and what trains it."""

    model: ControlNet
    """The control net (rank 0's weights are what checkpoints hold)."""
    opt: torch.optim.Optimizer
    """Its AdamW optimizer (state carried across iterations)."""
    net: torch.nn.Module
    """What the training steps call: ``model``, or its data-parallel wrapper under torchrun."""
    data: Aggregate
    """Every finished iteration's aggregated samples (this rank's share under torchrun)."""


def run_dagger(cfg: DaggerConfig, progress_fn: Callable[[dict], None] | None = None) -> dict:
    """Run (or resume) DAgger; returns a summary dict (``final_eval_success``, ``rows`` per iteration,
    ``checkpoint``, ``samples``, ``seconds``...). ``progress_fn`` receives each finished iteration's row (on rank 0
    under torchrun, where every rank returns the same summary)."""
    with cfg.runtime.job("dagger") as ctx:
        try:
            return _run_dagger(cfg, progress_fn, ctx)
        finally:
            runs.release_run_folder(cfg.out)


def resumed_config(cfg: DaggerConfig) -> DaggerConfig:
    """``cfg`` with ``sim.fingertip_pixels`` off where ``--resume`` continues a run folder written before the fingertip
    senses existed (its wrist net reads 5 senses) and ``cfg`` asks for today's default; otherwise ``cfg`` itself."""
    if not cfg.resume:
        return cfg
    stored = runs.read_config(cfg.out)
    if not stored:
        return cfg
    adopted = runs.resume_old_defaults(stored, cfg.to_dict(), compat.changed_defaults("dagger"),
                                       compat.added_settings("dagger"))
    if "sim.fingertip_pixels" not in adopted:
        return cfg
    log.info("--resume: %s was written before the fingertip senses; resuming without them", cfg.out)
    return dataclasses.replace(cfg, sim=dataclasses.replace(cfg.sim, fingertip_pixels=adopted["sim.fingertip_pixels"]))


def _run_dagger(cfg: DaggerConfig, progress_fn: Callable[[dict], None] | None, ctx: distributed.Context) -> dict:
    """The iterations of the module docstring, from the first unfinished one to ``cfg.iterations - 1``."""
    cfg = resumed_config(cfg)
    from torch.utils.tensorboard import SummaryWriter

    dev = distributed.local_device(cfg.runtime.device)
    out, rows, mask_fn = _open_run_folder(cfg, dev, ctx)
    learner = _start_learner(cfg, out, len(rows), dev, ctx)
    policy = MaskPolicy(learner.model, dev)
    heldout = episode_seeds(cfg.seed, "heldout", 0, cfg.eval_episodes)
    tb = SummaryWriter(str(out / "tb")) if ctx.is_main else None
    t_run = time.perf_counter()
    seg_precision = mask_precision(mask_fn)
    log.info("DAgger: %d iterations x %d episodes, %d-parameter policy, masks=%s%s, schedule=%s",
             cfg.iterations, cfg.episodes_per_iter, count_parameters(learner.model), cfg.masks,
             f" (segmented in {seg_precision})" if seg_precision else "", cfg.schedule)
    try:
        with progress_bar(None, cfg.runtime.progress and ctx.is_main, fields=("{task.fields[info]}",), remaining=False) as bar:
            for it in range(len(rows), cfg.iterations):
                interrupts.check()  # a stop signal whose exception Python discarded still ends the run here
                row = _iteration(cfg, it, learner, policy, mask_fn, heldout, out, dev, ctx, bar)
                distributed.check_identical(learner.model, f"dagger iteration {it}")
                rows.append(row)
                if not ctx.is_main:
                    continue
                _commit_iteration(cfg, out, it, learner, rows, tb)
                if progress_fn is not None:
                    progress_fn(row)
    finally:
        if tb is not None:
            tb.close()
    distributed.barrier()  # rank 0's checkpoints and metrics of the last iteration are on disk
    return {**_summary(out, rows, learner, time.perf_counter() - t_run), "segmentation_precision": seg_precision}


def _open_run_folder(cfg: DaggerConfig, dev: torch.device,
                     ctx: distributed.Context) -> tuple[Path, list[dict], Callable[[dict], torch.Tensor]]:
    """Check ``cfg.out`` and the inputs before anything is written, then (rank 0) create the folder and write its
    config. Returns (the run folder, the rows of its finished iterations ([] for a fresh run), the mask function
    ``obs -> B,H,W bool`` the learner sees)."""
    out = check_out_dir(cfg.out, resume=cfg.resume)
    rows = runs.finished_iterations(out, cfg.to_dict(), RESUMABLE_KEYS, resume=cfg.resume, what="DAgger",
                                    added=compat.added_settings("dagger"))
    mask_fn = make_mask_fn(cfg.masks, cfg.vision, dev, cfg.precision)  # checks the vision checkpoint before anything is written
    if cfg.masks == "predicted":
        check_vision_kinds(cfg.vision, cfg.sim)
    if ctx.world_size > min(cfg.episodes_per_iter, cfg.eval_episodes):
        raise ValueError(f"DaggerConfig: --episodes-per-iter {cfg.episodes_per_iter} and --eval-episodes "
                         f"{cfg.eval_episodes} must be at least the number of processes ({ctx.world_size})")
    distributed.barrier()  # every rank has checked the folder before rank 0 writes into it
    if ctx.is_main:
        runs.claim_run_folder(out, cfg.resume)
        (out / runs.CHECKPOINTS_DIR).mkdir(exist_ok=True)
        runs.write_config(out, cfg.to_dict())
    return out, rows, mask_fn


def _start_learner(cfg: DaggerConfig, out: Path, start: int, dev: torch.device, ctx: distributed.Context) -> _Learner:
    """A freshly initialised net (torch's global generator seeded by :func:`graspsim.seeds.net_init_seed`) and its
    optimizer; with ``start`` > 0 finished iterations, their last checkpoint's weights and optimizer and the
    aggregated data of iterations 0..start-1 (this rank's share)."""
    torch.manual_seed(net_init_seed(cfg.seed))
    model = ControlNet(cfg.model).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if start:
        ckpt = load_checkpoint(runs.iteration_checkpoint(out, start - 1), map_location=dev)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        data = Aggregate.from_files([iteration_file(out, i) for i in range(start)], cfg.sim.image_size, dev,
                                    ctx.rank, ctx.world_size,  # this rank's share of each iteration
                                    cfg.sim.gripper_dim, cfg.sim.action_dim)
        log.info("resumed %s after iteration %d (%d aggregated samples%s)", out, start - 1, len(data),
                 " in this rank's share" if ctx.distributed else "")
    else:
        data = Aggregate(cfg.sim.image_size, dev, cfg.sim.gripper_dim, cfg.sim.action_dim)
    model.eval()
    net = model
    if ctx.distributed:
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    return _Learner(model, opt, net, data)


def _envs(cfg: DaggerConfig, dev: torch.device) -> Callable[[int], GraspEnv]:
    """``n -> GraspEnv`` with at most ``cfg.num_envs`` scenes for a rollout of ``n`` episodes."""
    return lambda n: GraspEnv(cfg.sim, num_envs=min(cfg.num_envs, n), device=dev)


def _iteration(cfg: DaggerConfig, it: int, learner: _Learner, policy: MaskPolicy, mask_fn, heldout: list[int],
               out: Path, dev: torch.device, ctx: distributed.Context, bar) -> dict:
    """One DAgger iteration: roll out, aggregate, train, evaluate. Returns its metrics row (``iteration``, ``beta``,
    sample counts, rollout and held-out success, losses, failure counts, seconds per phase)."""
    t0 = time.perf_counter()
    beta = beta_at(cfg, it)
    ro, ro_all = _roll_out(cfg, it, beta, policy, mask_fn, dev, bar)
    t_roll = time.perf_counter() - t0
    _aggregate(cfg, out, it, beta, ro.episodes, learner.data, ctx)
    t1 = time.perf_counter()
    losses = _train(cfg, it, learner, dev, ctx, bar)
    t_train = time.perf_counter() - t1
    t2 = time.perf_counter()
    ev = _evaluate(cfg, heldout, policy, mask_fn, dev, bar)
    t_eval = time.perf_counter() - t2
    counts = distributed.all_gather_object((len(learner.data), int(sum(e.num_samples for e in ro.episodes))))
    return {
        "iteration": it, "beta": beta, "episodes": ro_all.num_episodes, "samples": sum(c[0] for c in counts),
        "new_samples": sum(c[1] for c in counts),
        "rollout_success": ro_all.success_rate(), "rollout_expert_success": ro_all.success_rate("expert"),
        "rollout_learner_success": ro_all.success_rate("learner"),
        "learner_episodes": int((~ro_all.expert_driven).sum()),
        **losses,
        "eval_success": ev.success_rate(), "eval_episodes": ev.num_episodes,
        "eval_failures": ev.failure_counts(),
        "eval_mean_steps": float(ev.steps.mean()),
        "rollout_seconds": t_roll, "train_seconds": t_train, "eval_seconds": t_eval,
        "rollout_frames_per_s": ro_all.scene_steps / max(t_roll, 1e-9),
        "seconds": time.perf_counter() - t0, "world_size": ctx.world_size,
    }


def _roll_out(cfg: DaggerConfig, it: int, beta: float, policy: MaskPolicy, mask_fn, dev: torch.device,
              bar) -> tuple[RolloutResult, RolloutResult]:
    """Iteration ``it``'s training episodes (the ``train`` stream's ``it * episodes_per_iter`` onwards), the expert
    driving each with probability ``beta`` (always in iteration 0). Returns (this rank's episodes, recorded; every
    rank's outcomes)."""
    task = bar.add_task("rollout", total=cfg.episodes_per_iter, info=f"iter {it}/{cfg.iterations - 1} beta={beta:.2f}")
    seeds = episode_seeds(cfg.seed, "train", it * cfg.episodes_per_iter, cfg.episodes_per_iter)
    ro, ro_all = sharded_rollout(_envs(cfg, dev), seeds, policy=policy.act if it > 0 else None, beta=beta,
                                 mask_fn=mask_fn, expert_noise=cfg.expert_noise, record=True,
                                 progress=lambda n: bar.update(task, completed=n))
    bar.remove_task(task)
    return ro, ro_all


def _aggregate(cfg: DaggerConfig, out: Path, it: int, beta: float, episodes: list, data: Aggregate,
               ctx: distributed.Context) -> None:
    """Write iteration ``it``'s ``episodes`` to ``data/iter_NNN.h5`` (under torchrun: each rank's part, joined by rank
    0) and append them to ``data``."""
    file_config = {"dagger": cfg.to_dict(), "iteration": it, "beta": beta}
    if ctx.distributed:
        write_iteration(part_file(out, it, ctx.rank), episodes, file_config, ctx.world_size)
        distributed.barrier()  # every part is written
        if ctx.is_main:
            join_iteration(out, it, ctx.world_size, file_config)
    else:
        write_iteration(iteration_file(out, it), episodes, file_config)
    data.add_episodes(episodes, it)


def _train(cfg: DaggerConfig, it: int, learner: _Learner, dev: torch.device, ctx: distributed.Context, bar) -> dict:
    """Iteration ``it``'s ``cfg.train_steps`` optimizer steps on all data so far, minibatches from the iteration's
    own stream. Returns the mean losses (``loss``, ``loss_vel``, ``loss_grip``; the mean over ranks)."""
    task = bar.add_task("train", total=cfg.train_steps, info=f"{len(learner.data)} samples")
    g = generator(distributed.rank_seed(stream_seed(cfg.seed, it, 2), ctx.rank), dev)
    losses = train_steps(learner.net, learner.opt, learner.data, cfg.train_steps, cfg.batch_size, cfg.grip_weight, g,
                         lambda: bar.advance(task), cfg.grip_pos_weight, cfg.sample_by, cfg.lr, cfg.lr_final_frac)
    if ctx.distributed:  # the mean over ranks (each rank's loss is of its own minibatches)
        losses = dict(zip(losses, distributed.all_reduce_mean(list(losses.values()))))
    bar.remove_task(task)
    return losses


def _evaluate(cfg: DaggerConfig, heldout: list[int], policy: MaskPolicy, mask_fn, dev: torch.device,
              bar) -> RolloutResult:
    """The learner alone (beta = 0) on the ``heldout`` episode seeds; every rank's outcomes."""
    task = bar.add_task("eval", total=cfg.eval_episodes, info="learner alone, held-out")
    _, ev = sharded_rollout(_envs(cfg, dev), heldout, policy=policy.act, beta=0.0, mask_fn=mask_fn,
                            progress=lambda n: bar.update(task, completed=n))
    bar.remove_task(task)
    return ev


def _commit_iteration(cfg: DaggerConfig, out: Path, it: int, learner: _Learner, rows: list[dict], tb) -> None:
    """Rank 0's outputs of finished iteration ``it`` (its row is ``rows[-1]``): the resumable ``iter_NNN.pt``,
    ``policy.pt``, ``best.pt`` when held-out success is the best so far (ties: the later), then the metrics (the
    commit point), TensorBoard scalars, the learning curve and a log line."""
    row = rows[-1]
    model, config = learner.model, cfg.to_dict()
    save_checkpoint(runs.iteration_checkpoint(out, it), model, learner.opt, it, config=config, metrics=row)
    save_checkpoint(out / "policy.pt", model, None, it, config=config, metrics=row)
    if all(row["eval_success"] >= r["eval_success"] for r in rows):  # ties go to the later iteration
        save_checkpoint(out / "best.pt", model, None, it, config=config, metrics=row)
    runs.write_metrics(out, rows)  # commit point of the iteration
    for k in ("eval_success", "rollout_success", "rollout_learner_success", "beta", "samples"):
        tb.add_scalar(f"charts/{k}", row[k], it)
    for k in ("loss", "loss_vel", "loss_grip"):
        tb.add_scalar(f"losses/{k}", row[k], it)
    tb.flush()
    plot_learning_curve(out / "learning_curve.png", {out.name: rows})
    log.info("iter %d: beta %.2f, %d samples, loss %.4f (vel %.4f grip %.4f), rollout success %.1f%%, "
             "held-out learner success %.1f%% (%s), %.0fs", it, row["beta"], row["samples"], row["loss"],
             row["loss_vel"], row["loss_grip"], 100 * row["rollout_success"], 100 * row["eval_success"],
             row["eval_failures"], row["seconds"])


def _summary(out: Path, rows: list[dict], learner: _Learner, seconds: float) -> dict:
    """What :func:`run_dagger` returns (see there)."""
    best = max(range(len(rows)), key=lambda i: (rows[i]["eval_success"], i)) if rows else -1
    return {
        "out": str(out), "checkpoint": str(out / "policy.pt"), "iterations": len(rows),
        "best_checkpoint": str(out / "best.pt"), "best_iteration": best,
        "final_eval_success": rows[-1]["eval_success"] if rows else float("nan"),
        "samples": rows[-1]["samples"] if rows else len(learner.data), "rows": rows, "seconds": seconds,
        "num_parameters": count_parameters(learner.model),
    }


__all__ = ["DaggerConfig", "beta_at", "loss_terms", "plot_learning_curve", "run_dagger", "stream_seed", "train_steps"]
