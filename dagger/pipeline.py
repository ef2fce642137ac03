"""``graspsim pipeline``: collect -> train vision -> DAgger (+ BC baseline) -> evaluate -> report.html.

One command runs every stage into ``runs/<name>/`` (default name ``pipeline__{preset}__{seed}__{time}``):

=================  ==========================================================================
``config.json``    the resolved pipeline config and the preset's stage budgets
``demos.h5``       expert demonstrations (``graspsim collect``); their frames also train the vision net
``vision/``        segmentation net (``graspsim train-vision``): checkpoint.pt, metrics.json, tb/
``dagger/``        DAgger run (``graspsim dagger``, masks from ``--masks``): data/, checkpoints/,
                   policy.pt, metrics.json/csv, tb/, learning_curve.png
``bc/``            behaviour-cloning baseline: the same loop and budget with beta = 1 throughout
``eval_*/``        ``graspsim eval-sim`` of each run's ``best.pt`` (its best held-out iteration): DAgger
                   with predicted masks, ground-truth masks and a moving target, and BC
``learning_curves.png``  held-out success and loss per iteration, DAgger beside BC
``summary.json``   every stage's numbers and wall-clock seconds
``report.html``    the numbers, curves and example rollouts
=================  ==========================================================================

``--resume`` (with ``--name``) skips stages whose outputs are complete and resumes DAgger/BC runs
after their last finished iteration. Presets (``PRESETS``): ``small`` (default; about 15 minutes on
2 CPU cores), ``medium`` and ``full`` for real runs; a target kind may raise a preset's budgets (``KIND_BUDGETS``:
cubes get more DAgger iterations at ``small``). Any budget can be overridden with the
``--collect-episodes``, ``--vision-steps``, ``--iterations``, ``--episodes-per-iter``, ``--train-steps``,
``--dagger-eval-episodes`` and ``--eval-episodes`` flags. The vision stage trains the cropped cascade
(``graspsim.vision.train_config.CROPPED_MODEL``); ``--vision-model unet`` trains the whole-frame U-Net instead, and
``--vision CKPT`` skips the stage and uses a trained net. ``--precision fp32`` trains and runs the vision net in float32
on any CPU (``auto``: bf16 where the CPU has native bf16); the summary and report name the precisions used.

Under ``torchrun`` every stage runs on all processes (:mod:`graspsim.distributed`; each verb splits its own work)
and rank 0 writes the run folder's own files (config, summary, curves, report). Every decision that looks at the
folder (which stages to resume) is taken on rank 0 and broadcast, so all ranks run the same stages.
"""

from __future__ import annotations

import dataclasses
import html
import json
import logging
import math
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal, Optional

from graspsim import SimConfig, compat, distributed
from graspsim.config import TargetConfig
from graspsim import runs as run_folder
from graspsim.fileio import atomic_write_text, check_folder_path, check_in_file, check_out_dir
from graspsim.runtime import Runtime, RuntimeConfig
from graspsim.validate import non_negative_int, positive_int
from graspsim.vision.backgrounds import DEFAULT_TRANSFER, default_transfer
from graspsim.vision.image_set import IMAGES, MASKS

from .train import DaggerConfig, plot_learning_curve, run_dagger

log = logging.getLogger(__name__)

PRESETS: dict[str, dict[str, int]] = {
    "small": dict(collect_episodes=64, vision_steps=2600, vision_batch=48, iterations=5, episodes_per_iter=96,
                  train_steps=400, dagger_eval_episodes=64, eval_episodes=200, num_envs=96, vision_mirror=0),
    "medium": dict(collect_episodes=256, vision_steps=1500, vision_batch=48, iterations=6, episodes_per_iter=192,
                   train_steps=600, dagger_eval_episodes=128, eval_episodes=1000, num_envs=128, vision_mirror=1),
    "full": dict(collect_episodes=1000, vision_steps=3700, vision_batch=48, iterations=10, episodes_per_iter=512,
                 train_steps=1000, dagger_eval_episodes=256, eval_episodes=1000, num_envs=128, vision_mirror=1),
}
"""Stage budgets per preset (episodes, optimizer steps). ``vision_mirror``: train and use the default vision net with
test-time mirror averaging (``TrainVisionConfig.mirror_tta``) with ``--vision-model unet``; off in ``small``,
where the doubled segmentation cost of every DAgger, BC and evaluation rollout would not fit the preset's time
budget. The default cascade always mirrors its window (36.7 MFLOP a frame in all)."""
KIND_BUDGETS: dict[str, dict[str, dict[str, int]]] = {
    "cube": {"small": dict(iterations=8, dagger_eval_episodes=128)},
}
"""Budgets a target kind raises in a preset (docs/dagger.md, "Presets and target kinds"): a run whose ``--target``
holds the kind gets the larger of the kind's and the preset's number, and an override flag still wins.
``PRESETS`` are the sphere's budgets, which no kind changes."""
RESUMABLE_KEYS = ("resume", "runtime.progress", "runtime.threads", "gifs", "runtime.dist_timeout")
"""Settings that may differ when resuming a pipeline run folder (they do not change results)."""
VISION_MODELS = {"cropped": "the cropped cascade", "unet": "the whole-frame U-Net"}
"""Nets the vision stage can train (``--vision-model``: ``graspsim.vision.train_config.CROPPED_MODEL`` and ``UNET_MODEL``),
as the report names them."""
PIPELINE_PRECISIONS = ("auto", "fp32")
"""``--precision`` choices. No forced ``bf16``: training under emulated bf16 (a CPU without native bf16) is about 10x
slower than float32, so the vision stage would not fit any preset."""
EVAL_STAGES = ("eval_dagger_predicted", "eval_dagger_gt", "eval_dagger_moving", "eval_bc")
"""The evaluation stages' keys in ``summary.json`` (and folders in the run folder)."""
OVERRIDES = ("collect_episodes", "vision_steps", "iterations", "episodes_per_iter", "train_steps",
             "dagger_eval_episodes", "eval_episodes", "num_envs")


@dataclass(frozen=True)
class PipelineConfig:
    """Run the whole pipeline (collect, train vision, DAgger + BC baseline, evaluate) and write report.html."""

    preset: Literal["small", "medium", "full"] = "small"
    """Stage budgets: small (default, ~15 min on 2 cores), medium, full."""
    name: Optional[str] = None
    """Run folder name under --runs-dir (default pipeline__{preset}__{seed}__{YYYYmmdd-HHMMSS})."""
    runs_dir: Path = Path("runs")
    """Parent folder of run folders."""
    seed: int = 0
    """Run seed (every stage derives its seeds from it)."""
    masks: Literal["predicted", "gt"] = "predicted"
    """Masks the DAgger learner is trained on: the trained vision net's predictions, or ground truth."""
    bc_baseline: bool = True
    """Also train the behaviour-cloning baseline (expert data only, same budget) and evaluate it."""
    moving_target: bool = True
    """Also evaluate with a drifting target (speeds never used in training)."""
    resume: bool = False
    """Continue an existing run folder (needs --name): finished stages are skipped."""
    target: Optional[str] = None
    """What the robot grasps, shorthand for ``--sim.target.kinds``: ``sphere`` (today's default), ``cube``,
    ``cylinder``, or a mix such as ``sphere,cube,cylinder`` (one net for all; the report gives success per kind).
    Cubes and cylinders turn the wrist: actions ``(vx, vy, vz, wz, grip)``."""
    transfer: Optional[Path] = DEFAULT_TRANSFER
    """Transfer sets (``val/`` and ``test/``) for the vision stage (``train-vision --transfer``): the operating point
    is chosen on composites + ``val/``, and ``test/`` is reported. Give sets drawn with your target's colour when
    you change ``--sim.randomization.target-hue``; None skips them (operating point on composites alone)."""
    vision_model: Literal["cropped", "unet"] = "cropped"
    """The net the vision stage trains. ``cropped`` (default): the cropped cascade
    (``graspsim.vision.train_config.CROPPED_MODEL``), 36.7 MFLOP a frame with its window's mirror averaging, which it always
    uses. ``unet``: the whole-frame U-Net (192 MFLOP a 64x64 frame; the preset decides mirror averaging, off in
    ``small``), 0.011 composite IoU better over five seeds and level on the transfer test; the small preset's stages
    after vision take 1.7x as long with it (docs/vision.md, "Choosing a net")."""
    vision: Optional[Path] = None
    """Use this trained segmentation checkpoint (e.g. the shipped ``vision/assets/segnet.pt``) instead of training
    a vision net; the report then shows the metrics stored with it."""
    precision: Literal["auto", "fp32"] = "auto"
    """Numeric precision of the vision net, in training (``train-vision --bf16/--no-bf16``) and in segmenting every
    DAgger, BC and evaluation frame (``dagger`` / ``eval-sim --precision``): ``auto`` (bf16 autocast where the CPU has
    native bf16, AVX512-BF16 or AMX, and float32 elsewhere) or ``fp32`` (float32 everywhere: what a CPU without native
    bf16 runs, on any CPU). The two give different nets, so different numbers; the summary and report name the
    precisions used."""
    collect_episodes: Optional[int] = None
    """Override: expert episodes collected for the vision net."""
    vision_steps: Optional[int] = None
    """Override: vision training steps."""
    iterations: Optional[int] = None
    """Override: DAgger iterations."""
    episodes_per_iter: Optional[int] = None
    """Override: DAgger training episodes per iteration."""
    train_steps: Optional[int] = None
    """Override: control-net optimizer steps per DAgger iteration."""
    dagger_eval_episodes: Optional[int] = None
    """Override: held-out episodes after each DAgger iteration."""
    eval_episodes: Optional[int] = None
    """Override: final eval-sim episodes per condition."""
    num_envs: Optional[int] = None
    """Override: scenes simulated in parallel."""
    gifs: int = 3
    """Example rollout GIFs per evaluation."""
    runtime: Runtime = field(default_factory=RuntimeConfig)
    """Device, threads, torchrun timeout and progress bars of every stage (flags --device, --threads, --dist-timeout,
    --progress/--no-progress)."""
    sim: SimConfig = field(default_factory=SimConfig)
    """Simulator configuration for every stage."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "runs_dir", Path(self.runs_dir))
        if self.preset not in PRESETS:
            raise ValueError(f"PipelineConfig.preset must be one of {sorted(PRESETS)}; got {self.preset!r}")
        for k in OVERRIDES:
            if getattr(self, k) is not None:
                positive_int("PipelineConfig", k, getattr(self, k))
        if self.resume and not self.name:
            raise ValueError("PipelineConfig: --resume needs --name of the run to continue")
        if self.name is not None and (not self.name or "/" in self.name or self.name in (".", "..")):
            raise ValueError(f"PipelineConfig.name must be a plain folder name; got {self.name!r}")
        non_negative_int("PipelineConfig", "seed", self.seed)
        if self.vision_model not in VISION_MODELS:
            raise ValueError(f"PipelineConfig.vision_model must be one of {list(VISION_MODELS)}; got {self.vision_model!r}")
        if self.vision is not None and self.vision_model != "cropped":
            raise ValueError("PipelineConfig: --vision-model chooses the net the vision stage trains, and "
                             "--vision skips that stage; give one of them")
        if self.vision is not None:
            object.__setattr__(self, "vision", check_in_file(self.vision, "PipelineConfig.vision", "vision checkpoint",
                                                             inside="checkpoint.pt"))
        non_negative_int("PipelineConfig", "gifs", self.gifs)
        if self.precision not in PIPELINE_PRECISIONS:
            raise ValueError(f"PipelineConfig.precision must be one of {PIPELINE_PRECISIONS}; got {self.precision!r}")
        if self.target is not None:
            kinds = TargetConfig(kinds=self.target).kinds  # checks the names (the error lists the known kinds)
            stated = self.sim.target.kinds
            if stated != TargetConfig().kinds and stated != kinds:
                raise ValueError(f"PipelineConfig: --target {self.target} and --sim.target.kinds {','.join(stated)} "
                                 "disagree; give one of them")
            object.__setattr__(self, "target", ",".join(kinds))
            object.__setattr__(self, "sim", dataclasses.replace(
                self.sim, target=dataclasses.replace(self.sim.target, kinds=kinds)))
        object.__setattr__(self, "transfer", default_transfer(self.transfer, self.sim.target.kinds))
        if self.transfer is not None and self.vision is None:  # now, not after the collect stage
            check_transfer_folder(self.transfer)

    def budgets(self) -> dict[str, int]:
        """The stage budgets: the preset's (:data:`PRESETS`), raised by the target kinds (:data:`KIND_BUDGETS`),
        then the override flags."""
        b = dict(PRESETS[self.preset])
        for kind in self.sim.target.kinds:
            for k, v in KIND_BUDGETS.get(kind, {}).get(self.preset, {}).items():
                b[k] = max(b[k], v)
        b.update({k: getattr(self, k) for k in OVERRIDES if getattr(self, k) is not None})
        return b

    def to_dict(self) -> dict:
        d = json.loads(json.dumps(dataclasses.asdict(self), default=str))
        d["budgets"] = self.budgets()
        return d


def check_transfer_folder(folder: Path) -> None:
    """ValueError naming ``folder`` unless it holds the transfer sets the vision stage reads: ``val/`` and ``test/``,
    each with ``images/`` and ``masks/`` (the eval-real format). Checked when the flags are parsed, so a wrong
    ``--transfer`` is refused before the collect stage and before the run folder is made."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"--transfer {folder} does not exist (it should hold the transfer sets val/ and test/ in the "
                         "eval-real format); point --transfer at them, or pass --transfer None to skip the transfer "
                         "test")
    missing = [f"{split}/{sub}/" for split in ("val", "test") for sub in (IMAGES, MASKS)
               if not (folder / split / sub).is_dir()]
    if missing:
        raise ValueError(f"--transfer {folder} has no {', '.join(missing)} (the transfer sets val/ and test/, each with "
                         "images/ and masks/; make them with graspsim render-transfer), or pass --transfer None to "
                         "skip the transfer test")


def _stage(summary: dict, name: str, fn, out: Path):
    t0 = time.perf_counter()
    log.info("pipeline: stage %s", name)
    result = fn()
    summary["seconds"][name] = time.perf_counter() - t0
    if distributed.is_main():
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, default=str))
    return result


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _resumed_config(cfg: PipelineConfig, out: Path) -> PipelineConfig:
    """The one resume rule for a pipeline run folder, after giving ``cfg`` the vision net the folder trained where it
    was written before the default net changed (:data:`graspsim.compat.CHANGED_DEFAULTS`; old names in
    :data:`graspsim.compat.RENAMED_VALUES`) and ``cfg`` asks for today's default. Settings stored under an old name
    (:data:`graspsim.compat.RENAMED_SETTINGS`) compare under the new one. Raises ValueError naming every other
    difference."""
    stored = run_folder.read_config(out)
    if stored is None:
        return cfg
    stored = compat.renamed_settings("pipeline", stored)
    added = compat.added_settings("pipeline")
    adopted = run_folder.resume_old_defaults(stored, cfg.to_dict(), compat.changed_defaults("pipeline"), added)
    if "vision_model" in adopted:
        log.info("pipeline --resume: %s trained the %s, the default then; resuming with it", out,
                 VISION_MODELS[adopted["vision_model"]])
        cfg = dataclasses.replace(cfg, vision_model=adopted["vision_model"])
    if "sim.fingertip_pixels" in adopted:
        log.info("pipeline --resume: %s was written before the fingertip senses; resuming without them", out)
        cfg = dataclasses.replace(cfg, sim=dataclasses.replace(cfg.sim, fingertip_pixels=False))
    run_folder.check_resume(stored, cfg.to_dict(), RESUMABLE_KEYS, out / run_folder.CONFIG_NAME, added)
    return cfg


def run_pipeline(cfg: PipelineConfig) -> dict:
    """Run every stage (see the module docstring); returns the summary dict (also ``summary.json``)."""
    with cfg.runtime.job("pipeline") as ctx:
        return _run_pipeline(cfg, ctx)


def _run_pipeline(cfg: PipelineConfig, ctx: distributed.Context) -> dict:
    """The stages of the module docstring, each skipped when ``summary.json`` already holds it."""
    t_start = time.perf_counter()
    # one name for all ranks (their clocks may disagree on the second)
    name = distributed.broadcast_object(
        cfg.name or f"pipeline__{cfg.preset}__{cfg.seed}__{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    check_folder_path(cfg.runs_dir, flag="--runs-dir")
    out = check_out_dir(cfg.runs_dir / name, flag="--runs-dir/--name", resume=cfg.resume)
    if cfg.resume and not (out / run_folder.CONFIG_NAME).is_file():  # a typo would start a whole new pipeline
        existing = sorted(p.name for p in cfg.runs_dir.iterdir() if (p / run_folder.CONFIG_NAME).is_file()) \
            if cfg.runs_dir.is_dir() else []
        raise FileNotFoundError(f"--resume: {out} holds no pipeline run (no {run_folder.CONFIG_NAME}); run folders in "
                                f"{cfg.runs_dir}: {', '.join(existing[-5:]) or 'none'}")
    b = cfg.budgets()
    if cfg.resume:  # the one resume rule: a changed preset or setting would mix budgets across stages
        cfg = _resumed_config(cfg, out)
    distributed.barrier()  # every rank has checked the folder before rank 0 writes into it
    summary: dict | None = None
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        run_folder.write_config(out, cfg.to_dict())
        summary = _json(out / "summary.json")
    summary = distributed.broadcast_object(summary) or {"name": name, "preset": cfg.preset, "budgets": b,
                                                        "seconds": {}}
    demos = _collect_stage(cfg, b, out, summary, ctx)
    vckpt = _vision_stage(cfg, b, out, demos, summary, ctx)
    _control_stages(cfg, b, out, vckpt, summary, ctx)
    _evaluation_stages(cfg, b, out, vckpt, summary)
    summary["precision"] = precisions_used(summary, cfg.precision)
    summary["total_seconds"] = sum(summary["seconds"].values())
    summary["wall_seconds_this_invocation"] = time.perf_counter() - t_start
    summary["world_size"] = ctx.world_size
    if not ctx.is_main:
        return distributed.broadcast_object(None)  # rank 0's summary, once its files are written
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, default=str))
    atomic_write_text(out / "report.html", report_html(summary, cfg))
    log.info("pipeline: report at %s (%.0f s of stage time)", out / "report.html", summary["total_seconds"])
    summary["out"] = str(out)
    summary["report"] = str(out / "report.html")
    return distributed.broadcast_object(summary)


def _main_sees(path: Path, ctx: distributed.Context) -> bool:
    """Whether ``path`` exists, as rank 0 sees it (the same answer on every rank)."""
    return distributed.broadcast_object(path.exists() if ctx.is_main else None)


def _collect_stage(cfg: PipelineConfig, b: dict[str, int], out: Path, summary: dict, ctx: distributed.Context) -> Path:
    """Stage 1, expert demonstrations (frames for the vision net; also the expert's own success rate) into
    ``out/demos.h5``, with budgets ``b``; adds ``summary["collect"]``. Returns the file's path."""
    from graspsim.expert.collect import CollectConfig, collect

    demos = out / "demos.h5"
    if "collect" not in summary:
        ccfg = CollectConfig(out=demos, episodes=b["collect_episodes"], seed=cfg.seed, num_envs=b["num_envs"],
                             resume=_main_sees(demos, ctx), sim=cfg.sim, runtime=cfg.runtime)
        res = _stage(summary, "collect", lambda: collect(ccfg), out)
        summary["collect"] = {k: res[k] for k in ("episodes", "steps", "success_rate", "failures", "seconds")}
    return demos


def _vision_stage(cfg: PipelineConfig, b: dict[str, int], out: Path, demos: Path, summary: dict,
                  ctx: distributed.Context) -> Path:
    """Stage 2, the vision net: ``cfg.vision`` when given (its stored metrics go to the summary), else trained into
    ``out/vision/`` on composites and the frames of ``demos``; adds ``summary["vision"]``. Returns the checkpoint the
    later stages use."""
    from graspsim.vision.train import CHECKPOINT_NAME, TrainVisionConfig, train_vision
    from graspsim.vision.train_config import UNET_MODEL

    vdir = out / "vision"
    vckpt = vdir / CHECKPOINT_NAME
    if cfg.vision is not None:
        vckpt = cfg.vision
        if "vision" not in summary:
            from graspsim.vision.checkpoint import load_checkpoint

            stored = load_checkpoint(vckpt).get("metrics") or {}
            summary["vision"] = {"checkpoint": str(vckpt), **_vision_summary(stored)}
    elif "vision" not in summary:
        if ctx.is_main and vdir.is_dir() and not vckpt.exists():  # stopped before its first checkpoint: nothing to keep
            log.info("pipeline: %s holds no checkpoint yet; starting the vision stage afresh", vdir)
            shutil.rmtree(vdir)
        vision_resume = _main_sees(vckpt, ctx)
        cropped = cfg.vision_model == "cropped"
        net = {} if cropped else {"model": UNET_MODEL}
        vcfg = TrainVisionConfig(out=vdir, steps=b["vision_steps"], batch_size=b["vision_batch"], seed=cfg.seed,
                                 val_every=max(1, b["vision_steps"] // 3), ckpt_every=max(1, b["vision_steps"] // 3),
                                 n_val=(1024 if b["vision_steps"] >= 1000 else 512) if b["vision_steps"] >= 100 else 32,
                                 n_test=512 if b["vision_steps"] >= 100 else 64, hdf5=demos, resume=vision_resume, sim=cfg.sim,
                                 mirror_tta=cropped or bool(b["vision_mirror"]), transfer=cfg.transfer,
                                 operating_point="both" if cfg.transfer is not None else "composite", **net,
                                 bf16=cfg.precision != "fp32", runtime=cfg.runtime)
        res = _stage(summary, "vision", lambda: train_vision(vcfg), out)
        summary["vision"] = {"model": cfg.vision_model, **_vision_summary(res)}
    return vckpt


def _control_stages(cfg: PipelineConfig, b: dict[str, int], out: Path, vckpt: Path, summary: dict,
                    ctx: distributed.Context) -> None:
    """Stage 3, DAgger into ``out/dagger/`` and the BC baseline (same loop and budget, beta = 1 throughout) into
    ``out/bc/``, on the masks of ``cfg.masks`` (predicted by ``vckpt``); adds ``summary["dagger"]`` / ``["bc"]`` and
    (rank 0) writes ``learning_curves.png``."""
    runs = {"dagger": {}, "bc": dict(schedule="constant", beta_start=1.0)} if cfg.bc_baseline else {"dagger": {}}
    for key, extra in runs.items():
        if key in summary:
            continue
        rdir = out / key
        dcfg = DaggerConfig(
            out=rdir, iterations=b["iterations"], episodes_per_iter=b["episodes_per_iter"],
            eval_episodes=b["dagger_eval_episodes"], num_envs=b["num_envs"], train_steps=b["train_steps"],
            masks=cfg.masks, vision=vckpt if cfg.masks == "predicted" else None, precision=cfg.precision, seed=cfg.seed,
            resume=_main_sees(rdir, ctx), sim=cfg.sim, runtime=cfg.runtime, **extra,
        )
        res = _stage(summary, key, lambda: run_dagger(dcfg), out)
        summary[key] = {k: res[k] for k in ("final_eval_success", "samples", "iterations", "checkpoint",
                                            "best_checkpoint", "best_iteration", "segmentation_precision")}
        summary[key]["rows"] = res["rows"]
    curves = {{"dagger": "DAgger", "bc": "BC baseline"}[k]: summary[k]["rows"] for k in runs}
    if ctx.is_main:
        plot_learning_curve(out / "learning_curves.png", curves)


def _evaluation_stages(cfg: PipelineConfig, b: dict[str, int], out: Path, vckpt: Path, summary: dict) -> None:
    """Stage 4, closed-loop evaluation of each run's ``best.pt`` on test scenes (``out/eval_*/``): DAgger with
    predicted masks, ground-truth masks and (``moving_target``) a drifting target, and BC; adds ``summary["eval_*"]``."""
    from .evaluate import EvalSimConfig, evaluate_sim

    evals = {"eval_dagger_predicted": ("dagger", "predicted", False), "eval_dagger_gt": ("dagger", "gt", False)}
    if cfg.moving_target:
        evals["eval_dagger_moving"] = ("dagger", cfg.masks, True)
    if cfg.bc_baseline:
        evals["eval_bc"] = ("bc", cfg.masks, False)
    for key, (run, masks, moving) in evals.items():
        if key in summary:
            continue
        ecfg = EvalSimConfig(policy=out / run / "best.pt", out=out / key, vision=vckpt if masks == "predicted" else None,
                             masks=masks, precision=cfg.precision, episodes=b["eval_episodes"], seed=cfg.seed,
                             num_envs=b["num_envs"], moving_target=moving, gifs=cfg.gifs, sim=cfg.sim, overwrite=True,
                             runtime=cfg.runtime)
        res = _stage(summary, key, lambda: evaluate_sim(ecfg), out)
        summary[key] = {k: res[k] for k in ("success_rate", "num_episodes", "success_ci95", "failures", "masks",
                                            "moving_target", "target_speed", "gifs", "per_kind",
                                            "segmentation_precision")}


def precisions_used(summary: dict, requested: str) -> dict:
    """``{"requested", "vision_training", "segmentation"}``: the ``--precision`` asked for and what the stages in
    ``summary`` ran in (``bf16`` or ``fp32``; None where no stage of the run says, e.g. a ``--vision`` checkpoint is
    not trained here, or stages finished before precisions were recorded)."""
    seg = [summary.get(k, {}).get("segmentation_precision") for k in ("dagger", "bc", *EVAL_STAGES)]
    seg = sorted({p for p in seg if p})
    return {"requested": requested, "vision_training": summary.get("vision", {}).get("training_precision"),
            "segmentation": "/".join(seg) or None}


def _vision_summary(res: dict) -> dict:
    """The part of train-vision's metrics that the summary and the report show."""
    keys = ("test", "transfer_test", "transfer_val", "transfer_test_breakdown", "transfer_test_by_kind",
            "operating_point", "threshold", "peak_threshold", "mirror_tta", "steps", "training_precision")
    return {k: res[k] for k in keys if k in res}


def _cells(m: dict) -> str:
    """Table cells of IoU, precision, recall and false-positive image rate ("-" where undefined, e.g. the rate on
    frames that all show the target)."""
    return "".join(f"<td>{m[k]:.3f}</td>" if math.isfinite(m[k]) else "<td>-</td>"
                   for k in ("iou", "precision", "recall", "false_positive_image_rate"))


def _vision_html(v: dict) -> str:
    """The vision section of the report: composite test and transfer test at the chosen operating point."""
    e = html.escape
    nan = float("nan")
    op = v.get("operating_point", {})
    promised = op.get("promised", {})
    rows = [("composites (our renderer, held-out photos)", v.get("test", {}), promised.get("composite")),
            ("transfer test (another renderer, unseen photos)", v.get("transfer_test"), promised.get("transfer"))]
    body = ""
    for label, m, val in rows:
        if not m:
            continue
        promise = (f"{val.get('precision', nan):.3f} / {val.get('false_positive_image_rate', nan):.3f}" if val else "n/a")
        body += f"<tr><td>{e(label)}</td>{_cells(m)}<td>{m['num_images']}</td><td>{promise}</td></tr>"
    sub = "".join(f"<tr><td>{e(k)}</td>{_cells(m)}<td>{m['num_target_images'] + m['num_empty_images']}</td><td></td></tr>"
                  for k, m in v.get("transfer_test_breakdown", {}).items())
    by_kind = "".join(f"<tr><td>{e(k)}</td>{_cells(m)}<td>{m['num_target_images'] + m['num_empty_images']}</td>"
                      "<td></td></tr>" for k, m in v.get("transfer_test_by_kind", {}).items())
    where = " + ".join(op.get("chosen_on", ["composite"]))
    src = f" Checkpoint: <code>{e(v['checkpoint'])}</code>." if "checkpoint" in v else ""
    model = compat.renamed_value("pipeline", "vision_model", v.get("model"))
    net = (f"Net: {e(VISION_MODELS[model])} (<code>--vision-model {e(model)}</code>). " if model in VISION_MODELS else "")
    return (f"<p>{net}Operating point chosen on <b>{e(where)}</b> validation: threshold {v.get('threshold', nan):.2f}, frame gate "
            f"{v.get('peak_threshold', 0.0):g}, mirror averaging {'on' if v.get('mirror_tta') else 'off'}.{src}</p>"
            "<table><tr><th>test set</th><th>IoU</th><th>precision</th><th>recall</th><th>false-positive images</th>"
            f"<th>frames</th><th>validation promised (precision / FP images)</th></tr>{body}"
            + (f"<tr><th colspan=7>transfer test by target kind (false-positive images: the whole set's)</th></tr>"
               f"{by_kind}" if by_kind else "")
            + (f"<tr><th colspan=7>transfer test by kind of frame</th></tr>{sub}" if sub else "") + "</table>")


def _precision_html(p: dict | None) -> str:
    """The report's sentence on precision (empty for a summary written before precisions were recorded)."""
    if not p:
        return ""
    return (f"Precision <code>--precision {html.escape(p['requested'])}</code>: vision net trained in "
            f"<b>{html.escape(str(p['vision_training'] or 'n/a'))}</b>, frames segmented in "
            f"<b>{html.escape(str(p['segmentation'] or 'n/a'))}</b>. ")


def _pct(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def report_html(s: dict, cfg: PipelineConfig) -> str:
    """Self-contained HTML page (images referenced by relative path inside the run folder)."""
    e = html.escape
    rows = []
    labels = {"eval_dagger_predicted": "DAgger, predicted masks", "eval_dagger_gt": "DAgger, ground-truth masks",
              "eval_dagger_moving": f"DAgger, moving target ({cfg.masks} masks)",
              "eval_bc": f"BC baseline ({cfg.masks} masks)"}
    for key, label in labels.items():
        if key not in s:
            continue
        m = s[key]
        lo, hi = m["success_ci95"]
        f = m["failures"]
        rows.append(f"<tr><td>{e(label)}</td><td><b>{_pct(m['success_rate'])}</b></td><td>{_pct(lo)}-{_pct(hi)}</td>"
                    f"<td>{m['num_episodes']}</td><td>{f.get('missed_grasp', 0)}</td><td>{f.get('pushed_away', 0)}</td>"
                    f"<td>{f.get('timeout', 0)}</td><td>{f.get('dropped', 0)}</td></tr>")
        kinds = m.get("per_kind", {})
        for kind, r in kinds.items() if len(kinds) > 1 else ():
            lo_k, hi_k = r["success_ci95"]
            rows.append(f"<tr><td>&nbsp;&nbsp;{e(kind)}</td><td>{_pct(r['success_rate'])}</td>"
                        f"<td>{_pct(lo_k)}-{_pct(hi_k)}</td><td>{r['num_episodes']}</td><td colspan=4></td></tr>")
    gifs = []
    for key in labels:
        for g in s.get(key, {}).get("gifs", []):
            kind = f", {g['kind']}" if len(cfg.sim.target.kinds) > 1 and "kind" in g else ""
            gifs.append(f"<figure><img src='{e(key)}/{e(g['file'])}' width='520'><figcaption>{e(labels[key])}{e(kind)}: "
                        f"{e(g['outcome'])} ({g['steps']} steps)</figcaption></figure>")
    col = s.get("collect", {})
    secs = "".join(f"<tr><td>{e(k)}</td><td>{v:.0f} s</td></tr>" for k, v in s["seconds"].items())
    iters = ""
    for key in ("dagger", "bc"):
        if key not in s:
            continue
        iters += f"<h3>{'DAgger' if key == 'dagger' else 'BC baseline'} per iteration</h3><table><tr><th>iter</th>" \
                 "<th>beta</th><th>samples</th><th>loss</th><th>rollout success</th><th>held-out learner success</th></tr>"
        for r in s[key]["rows"]:
            iters += (f"<tr><td>{r['iteration']}</td><td>{r['beta']:.2f}</td><td>{r['samples']}</td>"
                      f"<td>{r['loss']:.4f}</td><td>{_pct(r['rollout_success'])}</td><td>{_pct(r['eval_success'])}</td></tr>")
        iters += "</table>"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>graspsim pipeline {e(s['name'])}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}
figure{{display:inline-block;margin:6px}}</style></head><body>
<h1>graspsim pipeline: {e(s['name'])}</h1>
<p>Preset <b>{e(s['preset'])}</b>, seed {cfg.seed}, embodiment <b>{e(cfg.sim.embodiment)}</b>, target kinds <b>{e(', '.join(cfg.sim.target.kinds))}</b>,
DAgger trained on <b>{e(cfg.masks)}</b> masks.
Stage budgets: <code>{e(json.dumps(s['budgets']))}</code>. {_precision_html(s.get('precision'))}Total stage time
{s.get('total_seconds', 0):.0f} s.</p>
<h2>Closed-loop success (learner alone, test scenes disjoint from training)</h2>
<table><tr><th>condition</th><th>success</th><th>95% CI</th><th>episodes</th><th>missed grasp</th>
<th>pushed away</th><th>timeout</th><th>dropped</th></tr>{''.join(rows)}</table>
<h2>Learning curves</h2><img src="learning_curves.png" width="900">
{iters}
<h2>Expert and vision</h2>
<p>Expert demonstrations: {col.get('episodes', 'n/a')} episodes, success {_pct(col.get('success_rate', float('nan')))}.</p>
{_vision_html(s.get('vision', {}))}
<h2>Example rollouts</h2><p>Left: wrist RGB; right: the mask the policy saw.</p>{''.join(gifs)}
<h2>Stage wall-clock</h2><table>{secs}</table>
<p>Resolved configuration: <a href="config.json">config.json</a>; numbers: <a href="summary.json">summary.json</a>.</p>
</body></html>
"""


__all__ = ["KIND_BUDGETS", "PRESETS", "PipelineConfig", "run_pipeline"]
