"""``graspsim eval-sim``: closed-loop success of a control checkpoint in simulation.

The learner drives every scene alone (no expert); masks are the simulator's ground truth
(``--masks gt``) or the vision module's predictions on the rendered RGB (``--masks predicted``, needs
``--vision``; the default when ``--vision`` is given). Scenes come from the ``test`` seed stream of
``--seed`` (:mod:`graspsim.seeds`), disjoint from every DAgger training scene (``train``
stream) and from DAgger's per-iteration validation scenes (``heldout`` stream). ``--split heldout`` draws them
from that validation stream instead: for choosing between policies, vision nets or settings (for example on the
MuJoCo backend) without reading the test scenes you report.

``--moving-target`` sets ``RandomizationConfig.target_speed`` to ``moving_speed`` (default 0.005-0.02 m/s,
uniform speed, uniform direction); training always uses a still target (0, 0), so these speeds are never
seen in training.

Outputs in ``--out``: ``metrics.json`` (``success_rate``, ``num_episodes``, ``failures`` with counts of
success / timeout / missed_grasp / pushed_away / dropped, ``failure_rates``, a 95% Wilson interval,
mean steps, timing, ``segmentation_precision`` (``bf16`` or ``fp32``; None with ground-truth masks), per target
kind ``per_kind`` (success, episodes, Wilson interval), and per episode in seed order ``per_episode_success`` /
``_failure`` / ``_steps`` / ``_kind``),
``rollout_K.gif`` for the first ``--gifs`` episodes, of each kind with a mix of target kinds (RGB beside the mask
the policy saw, upscaled), and ``report.md``.

Under ``torchrun`` (:mod:`graspsim.distributed`) rank ``r`` of ``W`` runs the contiguous block
``shard_bounds(episodes, r, W)`` of the test seeds and the outcomes are gathered in seed order. Every random
number of an episode comes from its own seed (:mod:`graspsim.rng`), so the metrics equal the single-process
run's episode for episode; ``metrics.json`` records ``world_size``. Rank 0 writes the outputs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Tuple

import numpy as np
import torch

from graspsim import FAILURE_NAMES, SimConfig, distributed
from graspsim import runs
from graspsim.config import TARGET_KINDS
from graspsim.fileio import atomic_write_text, check_in_file, check_out_dir, replace_atomically, staged_dir
from graspsim.keys import MASK, RGB
from graspsim.progress import progress_bar
from graspsim.runtime import Runtime, RuntimeConfig
from graspsim.seeds import episode_seeds
from graspsim.stats import wilson
from graspsim.validate import non_negative_int, positive_int
from graspsim.vision.infer import Precision, check_precision

from .policy import MaskPolicy, check_fits_scenes
from .rollout import RolloutResult, mask_precision
from .sharded import sharded_rollout
from .masks import check_vision_kinds, make_mask_fn

log = logging.getLogger(__name__)

OUTPUTS = re.compile(r"^(metrics\.json|report\.md|rollout_\d+\.gif)$")
"""Names of the files eval-sim writes into --out."""
MOVING_SPEED = (0.005, 0.02)
"""Target drift speeds (m/s) of --moving-target; training uses (0, 0)."""


@dataclass(frozen=True)
class EvalSimConfig:
    """Evaluate a policy checkpoint closed-loop in randomized simulated scenes."""

    policy: Path
    """Policy checkpoint (graspsim dagger: policy.pt or checkpoints/iter_NNN.pt)."""
    out: Path
    """Output folder (created): metrics.json, rollout GIFs, report.md. A non-empty folder is refused unless
    --overwrite is given."""
    vision: Optional[Path] = None
    """Vision checkpoint (graspsim train-vision); needed for --masks predicted."""
    masks: Optional[Literal["gt", "predicted"]] = None
    """Mask source: gt (simulator) or predicted (vision net on the RGB). Default: predicted if --vision is given, else gt."""
    precision: Precision = "auto"
    """Segmentation precision with predicted masks: auto (bf16 where the CPU has native bf16 and the checkpoint's
    probe frames agree with float32), fp32 or bf16 (as in eval-real); metrics.json names the one used
    (``segmentation_precision``)."""
    episodes: int = 1000
    """Number of evaluation episodes (one per held-out scene)."""
    seed: int = 0
    """Seed of the test scenes (test stream; disjoint from training scenes) and of the dynamics noise."""
    split: Literal["test", "heldout"] = "test"
    """Seed stream of the scenes: test (report these) or heldout (DAgger's validation stream: choose on these, then
    report the test stream once)."""
    num_envs: int = 128
    """Scenes simulated in parallel."""
    moving_target: bool = False
    """Make the target drift at speeds in --moving-speed (never used in training)."""
    moving_speed: Tuple[float, float] = MOVING_SPEED
    """Drift speed range (m/s) used with --moving-target."""
    backend: Literal["torch", "bullet", "mujoco"] = "torch"
    """Simulator backend: batched torch scenes, pybullet (Franka Panda) or MuJoCo (SO-101 through its IK layer; needs
    ``pip install 'graspsim[mujoco]'``)."""
    gifs: int = 4
    """Rollout GIFs to write (the first episodes)."""
    runtime: Runtime = field(default_factory=RuntimeConfig)
    """Device, threads, torchrun timeout and progress bar (flags --device, --threads, --dist-timeout,
    --progress/--no-progress)."""
    overwrite: bool = False
    """Replace the earlier eval-sim outputs in --out as a whole (the new ones are swapped in when complete)."""
    sim: SimConfig = field(default_factory=SimConfig)
    """Simulator configuration (randomization ranges, episode length)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", Path(self.policy))
        object.__setattr__(self, "out", Path(self.out))
        if self.vision is not None:
            object.__setattr__(self, "vision", Path(self.vision))
        check_in_file(self.policy, "EvalSimConfig.policy", "policy checkpoint", inside="best.pt")
        if self.vision is not None:
            check_in_file(self.vision, "EvalSimConfig.vision", "vision checkpoint", inside="checkpoint.pt")
        if self.masks not in (None, "gt", "predicted"):
            raise ValueError(f"EvalSimConfig.masks must be 'gt' or 'predicted'; got {self.masks!r}")
        if self.masks == "predicted" and self.vision is None:
            raise ValueError("EvalSimConfig: --masks predicted needs --vision CKPT")
        check_precision("EvalSimConfig", "precision", self.precision)
        positive_int("EvalSimConfig", "episodes", self.episodes)
        positive_int("EvalSimConfig", "num_envs", self.num_envs)
        non_negative_int("EvalSimConfig", "gifs", self.gifs)
        non_negative_int("EvalSimConfig", "seed", self.seed)
        lo, hi = self.moving_speed
        if not (0.0 <= lo <= hi <= 0.2):
            raise ValueError(f"EvalSimConfig.moving_speed must satisfy 0 <= low <= high <= 0.2 m/s; got {self.moving_speed!r}")
        if self.backend not in ("torch", "bullet", "mujoco"):
            raise ValueError(f"EvalSimConfig.backend must be 'torch', 'bullet' or 'mujoco'; got {self.backend!r}")
        if self.split not in ("test", "heldout"):
            raise ValueError(f"EvalSimConfig.split must be 'test' or 'heldout'; got {self.split!r}")

    @property
    def mask_source(self) -> str:
        return self.masks or ("predicted" if self.vision is not None else "gt")

    def eval_sim_config(self) -> SimConfig:
        """The simulator config actually used (moving target applied)."""
        if not self.moving_target:
            return self.sim
        rnd = dataclasses.replace(self.sim.randomization, target_speed=tuple(self.moving_speed))
        return dataclasses.replace(self.sim, randomization=rnd)

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))


def _owns(name: str) -> bool:
    return bool(OUTPUTS.match(name))


def summarize(res: RolloutResult) -> dict:
    """Metrics dict of an evaluation rollout (see the module docstring)."""
    n = res.num_episodes
    k = int(res.success.sum())
    counts = res.failure_counts()
    lo, hi = wilson(k, n)
    return {
        "success_rate": k / n,
        "num_episodes": n,
        "num_success": k,
        "success_ci95": [lo, hi],
        "failures": counts,
        "failure_rates": {name: c / n for name, c in counts.items()},
        "mean_steps": float(res.steps.mean()),
        "mean_steps_success": float(res.steps[res.success].mean()) if k else math.nan,
        "scene_steps": res.scene_steps,
        "seconds": res.seconds,
        "frames_per_s": res.scene_steps / max(res.seconds, 1e-9),
        "per_episode_success": [bool(x) for x in res.success],
        "per_episode_failure": [FAILURE_NAMES[int(c)] for c in res.failure],
        "per_episode_steps": [int(x) for x in res.steps],
        "per_episode_kind": [str(k) for k in res.kinds] if res.kinds is not None else [],
        "per_kind": per_kind_success(res),
    }


def per_kind_success(res: RolloutResult) -> dict[str, dict]:
    """Success per target kind: ``{kind: {"success_rate", "num_success", "num_episodes", "success_ci95"}}`` in
    the order of :data:`graspsim.config.TARGET_KINDS` ({} when the backend reports no kinds)."""
    if res.kinds is None:
        return {}
    rows = {}
    for kind in TARGET_KINDS:
        sel = res.kinds == kind
        n = int(sel.sum())
        if n:
            k = int(res.success[sel].sum())
            rows[kind] = {"success_rate": k / n, "num_success": k, "num_episodes": n, "success_ci95": list(wilson(k, n))}
    return rows


def gif_episodes(res: RolloutResult, gifs: int, per_kind: bool) -> list[int]:
    """Which captured episodes become GIFs: the first ``gifs``, or with a mix of kinds the first ``gifs`` of each
    kind among the captured ones (in episode order)."""
    captured = sorted(res.frames)
    if not per_kind or res.kinds is None:
        return captured[:gifs]
    return sorted(k for kind in dict.fromkeys(res.kinds[captured].tolist())
                  for k in [c for c in captured if res.kinds[c] == kind][:gifs])


def write_gif(path: Path, rgb: list[np.ndarray], mask: list[np.ndarray], caption: str, scale: int = 4) -> None:
    """Animated GIF: each frame is the RGB (H,W,3 uint8) beside the mask the policy saw, upscaled ``scale``x."""
    from PIL import Image, ImageDraw

    frames = []
    for im, m in zip(rgb, mask):
        mm = np.repeat((m.astype(np.uint8) * 255)[..., None], 3, -1)
        pair = np.concatenate([im, np.full((im.shape[0], 2, 3), 128, np.uint8), mm], 1)
        pic = Image.fromarray(pair).resize((pair.shape[1] * scale, pair.shape[0] * scale), Image.NEAREST)
        canvas = Image.new("RGB", (pic.width, pic.height + 14), (0, 0, 0))
        canvas.paste(pic, (0, 14))
        ImageDraw.Draw(canvas).text((2, 1), caption, fill=(255, 255, 255))
        frames.append(canvas)
    if not frames:
        return
    with replace_atomically(path) as tmp:
        frames[0].save(tmp, format="GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)


def _make_env(backend: str, sim: SimConfig, num_envs: int, device: str):
    import graspsim

    if hasattr(graspsim, "make_env"):
        return graspsim.make_env(backend, sim, num_envs, device)
    if backend != "torch":
        raise ValueError(f"backend {backend!r} needs graspsim.make_env")
    return graspsim.GraspEnv(sim, num_envs=num_envs, device=device)


def evaluate_sim(cfg: EvalSimConfig) -> dict:
    """Run the evaluation and write the outputs; returns the metrics dict (also in ``metrics.json``; under torchrun
    every rank returns it)."""
    with cfg.runtime.job("eval-sim") as ctx:
        return _evaluate_sim(cfg, ctx)


def _evaluate_sim(cfg: EvalSimConfig, ctx: distributed.Context) -> dict:
    out = check_out_dir(cfg.out, overwrite=cfg.overwrite)  # before the work, writability included
    dev = distributed.local_device(cfg.runtime.device)
    policy = MaskPolicy.from_checkpoint(cfg.policy, dev)
    sim = cfg.eval_sim_config()
    check_fits_scenes(policy.cfg, sim, f"policy checkpoint {cfg.policy}", policy.trained_kinds,
                      policy.trained_embodiment)
    if cfg.vision is not None and cfg.mask_source == "predicted":
        check_vision_kinds(cfg.vision, sim)
    if policy.cfg.image_size != sim.image_size:
        raise ValueError(f"policy was trained at image_size {policy.cfg.image_size}, sim.image_size is {sim.image_size}")
    mask_fn = make_mask_fn(cfg.mask_source, cfg.vision, dev, cfg.precision)
    seeds = episode_seeds(cfg.seed, cfg.split, 0, cfg.episodes)
    bar = progress_bar("eval-sim", cfg.runtime.progress and ctx.is_main, remaining=False)
    with bar:
        task = bar.add_task("eval", total=cfg.episodes)
        _, res = sharded_rollout(  # this rank's share of the seeds; res: every rank's outcomes in seed order
            lambda n: _make_env(cfg.backend, sim, min(cfg.num_envs, n), str(dev)),
            seeds, policy=policy.act, beta=0.0, mask_fn=mask_fn, capture=cfg.gifs * len(sim.target.kinds),
            progress=lambda n: bar.update(task, completed=n))
    metrics = summarize(res)
    metrics.update({
        "masks": cfg.mask_source, "moving_target": cfg.moving_target,
        "target_speed": list(sim.randomization.target_speed), "backend": cfg.backend,
        "policy": str(cfg.policy), "policy_iteration": policy.iteration,
        "vision": str(cfg.vision) if cfg.vision else None, "segmentation_precision": mask_precision(mask_fn),
        "seed": cfg.seed, "seed_split": cfg.split,
        "config": cfg.to_dict(), "world_size": ctx.world_size,
    })
    if not ctx.is_main:
        return distributed.broadcast_object(None)  # rank 0's metrics, once its outputs are written
    gifs = []
    with staged_dir(out, _owns) as stage:  # replaces --out's earlier outputs as a whole
        for k in gif_episodes(res, cfg.gifs, len(sim.target.kinds) > 1):
            fr = res.frames[k]
            name = f"rollout_{k}.gif"
            outcome = FAILURE_NAMES[int(res.failure[k])]
            kind = str(res.kinds[k]) if res.kinds is not None else "sphere"
            write_gif(stage / name, fr[RGB], fr[MASK], f"ep {k} ({kind}): {outcome} ({cfg.mask_source} mask)")
            gifs.append({"file": name, "outcome": outcome, "steps": int(res.steps[k]), "kind": kind})
        metrics["gifs"] = gifs
        atomic_write_text(stage / "metrics.json", json.dumps(metrics, indent=2))
        atomic_write_text(stage / "report.md", report_markdown(metrics))
    lo, hi = metrics["success_ci95"]
    log.info("eval-sim: success %.1f%% (95%% CI %.1f-%.1f) over %d episodes, masks=%s, moving=%s, failures %s",
             100 * metrics["success_rate"], 100 * lo, 100 * hi, metrics["num_episodes"], cfg.mask_source,
             cfg.moving_target, metrics["failures"])
    return distributed.broadcast_object(metrics)


def report_markdown(m: dict) -> str:
    lo, hi = m["success_ci95"]
    lines = [
        "# eval-sim report", "",
        f"- policy: `{m['policy']}` (DAgger iteration {m['policy_iteration']})",
        f"- masks: {m['masks']}" + (f" (vision `{m['vision']}`, segmented in {m.get('segmentation_precision')})"
                                    if m["vision"] else ""),
        f"- backend: {m['backend']}; moving target: {m['moving_target']} (speed {m['target_speed']} m/s)",
        f"- scenes: {m['num_episodes']} from the {m.get('seed_split', 'test')} seed stream of seed {m['seed']}", "",
        f"**Success: {100 * m['success_rate']:.1f}%** ({m['num_success']}/{m['num_episodes']}, "
        f"95% CI {100 * lo:.1f}-{100 * hi:.1f}%)", "",
        "| outcome | episodes | rate |", "|---|---|---|",
    ]
    for name, c in m["failures"].items():
        lines.append(f"| {name} | {c} | {100 * m['failure_rates'][name]:.1f}% |")
    if len(m.get("per_kind", {})) > 1:
        lines += ["", "| target kind | success | episodes | 95% CI |", "|---|---|---|---|"]
        for kind, r in m["per_kind"].items():
            lo_k, hi_k = r["success_ci95"]
            lines.append(f"| {kind} | {100 * r['success_rate']:.1f}% | {r['num_episodes']} | "
                         f"{100 * lo_k:.1f}-{100 * hi_k:.1f}% |")
    lines += ["", f"Mean episode length {m['mean_steps']:.1f} steps; {m['frames_per_s']:.0f} scene steps/s "
              f"({m['seconds']:.0f} s).", ""]
    for g in m.get("gifs", []):
        lines.append(f"- `{g['file']}`: {g['outcome']} after {g['steps']} steps")
    return "\n".join(lines) + "\n"


__all__ = ["EvalSimConfig", "MOVING_SPEED", "evaluate_sim", "summarize", "wilson"]
