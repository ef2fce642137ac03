"""Time budget of ``graspsim train-vision``: the cost of each variant measured side by side, projected to a whole run.

Measures the per-step cost of the default recipe and of variants in one run, and projects each one's wall time
against the 300 s target of issue 27 (issue 16's was 15 minutes).

    python benchmarks/bench_vision_train.py                       # all variants, 2 threads (~1 min)
    python benchmarks/bench_vision_train.py --variants default batch-16 --threads 1

For every variant it times, over interleaved rounds (so a change in machine load hits all variants alike), the two
halves of a training step as ``graspsim.vision.train`` runs them: drawing the batch (:func:`graspsim.vision.train.training_batch`:
render, composite, cut patches) and the optimizer step (:func:`graspsim.vision.train.train_step`: forward, loss, backward,
AdamW). It also times one validation pass (mirror averaging as configured) and rendering the fixed sets, on
``--n-eval`` frames scaled to the configured set sizes. The projection is

    loop  = steps x (batch + step) + validations inside the loop x (pass + transfer val pass)
    total = loop + validation at step 0 + rendering the validation and test sets + the test pass
            + the transfer test pass

It leaves out process start-up, loading photos and writing checkpoints (a few seconds). The medians per variant, the
ratios to ``default`` and the ratio to the 300 s budget are printed. Accuracy is not measured here: docs/vision.md and
docs/notes/vision_log.md
has what each variant reached.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
import tyro

from graspsim.perf import tune_allocator
from graspsim.runtime import RuntimeConfig
from graspsim.fileio import atomic_write_bytes
from graspsim.vision.train import (TrainVisionConfig, build_composers, make_set, new_training_state, predict_probs, train_step,
                          training_batch)
from graspsim.vision.train_config import HALFRES_MODEL, UNET_MODEL

BUDGET_S = 300.0
TRANSFER_FRAMES = 1024  # frames in each transfer set (data/transfer/{val,test})

VARIANTS: dict[str, dict] = {
    "default": {},
    "float32": {"bf16": False},
    "unet": {"model": UNET_MODEL},
    "halfres": {"model": HALFRES_MODEL, "mirror_tta": False},
    "halfres-whole": {"model": HALFRES_MODEL, "mirror_tta": False, "patch": 0},
    "unet-patch-32": {"model": UNET_MODEL, "patch": 32},
    "batch-16": {"batch_size": 16},
}
"""Overrides of :class:`TrainVisionConfig` per variant. ``default`` is the cropped cascade
(:data:`graspsim.vision.train_config.CROPPED_MODEL`, 36.7 MFLOP a frame with mirror averaging of its window; its U-Net also
trains on the locator's windows, 48 more patches a step); ``unet`` the whole-frame U-Net
(:data:`graspsim.vision.train_config.UNET_MODEL`). ``halfres`` is issue 27's cheapest candidate
(:data:`graspsim.vision.train_config.HALFRES_MODEL`, 36 MFLOP a frame, no mirror averaging) on the default 24x24 patches,
``halfres-whole`` the same on whole frames; ``unet-patch-32`` trains the U-Net on 32x32 patches (1.8x the pixels of a
step); ``batch-16`` is a third of the frames per step. ``float32`` turns bf16 autocast off (what a CPU without native
bf16, e.g. an AVX2-only EPYC, runs). A variant may override ``model`` with a :class:`graspsim.vision.model.SegNetConfig` and
``augment`` with a :class:`graspsim.vision.augment.AugmentConfig`."""


@dataclass(frozen=True)
class BenchVisionConfig:
    """Measure the training budget of train-vision variants side by side."""

    variants: tuple[str, ...] = tuple(VARIANTS)
    """Variants to time (names in VARIANTS)."""
    threads: int = 2
    """torch.set_num_threads for the whole run."""
    rounds: int = 3
    """Interleaved timing rounds; the median round per variant is reported."""
    steps_per_round: int = 10
    """Timed training steps per variant and round (after --warmup untimed ones)."""
    warmup: int = 3
    """Untimed steps per variant before the first round."""
    n_eval: int = 512
    """Frames rendered and scored to time the fixed sets and a validation pass (scaled to n_val / n_test)."""
    seed: int = 0
    """Seed of the models and the drawn batches."""
    out: Optional[Path] = None
    """Write the results as JSON here (atomically), when given."""

    def __post_init__(self) -> None:
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown or not self.variants:
            raise ValueError(f"--variants: unknown {unknown or 'empty list'}; choose from {sorted(VARIANTS)}")
        for name in ("threads", "rounds", "steps_per_round", "n_eval"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be a positive int; got {v!r}")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0; got {self.warmup!r}")


@dataclass
class _Runner:
    """One variant's training state and its timings (seconds)."""

    name: str
    cfg: TrainVisionConfig
    batch_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.composer, self.val_composer = build_composers(self.cfg)
        self.model, self.opt, self.gen, self.bf16 = new_training_state(self.cfg)
        self.step = 0

    def run(self, n: int, record: bool) -> None:
        batch = step = 0.0
        for _ in range(n):
            t0 = time.perf_counter()
            x, mask, *frames = training_batch(self.composer, self.cfg, self.gen, with_frames=bool(self.cfg.model.crop))
            t1 = time.perf_counter()
            train_step(self.model, self.opt, x, mask, self.cfg, self.bf16, self.step, frames=tuple(frames) or None)
            t2 = time.perf_counter()
            batch, step, self.step = batch + t1 - t0, step + t2 - t1, self.step + 1
        if record:
            self.batch_s.append(batch / n)
            self.step_s.append(step / n)

    def fixed_costs(self, n_eval: int) -> dict:
        """Rendering ``n_eval`` held-out composites and one validation pass over them, scaled to the set sizes."""
        t0 = time.perf_counter()
        rgb, _ = make_set(self.val_composer, n_eval, self.cfg.val_seed)
        t1 = time.perf_counter()
        predict_probs(self.model, rgb, self.bf16, mirror=self.cfg.mirror_tta)
        t2 = time.perf_counter()
        render, pass_ = (t1 - t0) / n_eval, (t2 - t1) / n_eval
        transfer = pass_ * TRANSFER_FRAMES if self.cfg.transfer is not None else 0.0
        return {"render_val_s": render * self.cfg.n_val, "render_test_s": render * self.cfg.n_test,
                "val_pass_s": pass_ * self.cfg.n_val, "test_pass_s": pass_ * self.cfg.n_test,
                "transfer_pass_s": transfer}


def project(cfg: TrainVisionConfig, batch_s: float, step_s: float, fixed: dict) -> dict:
    """Projected wall time (s) of ``train_vision(cfg)`` from the measured per-step and fixed costs."""
    in_loop_vals = len({*range(cfg.val_every, cfg.steps + 1, cfg.val_every), cfg.steps})
    loop = cfg.steps * (batch_s + step_s) + in_loop_vals * (fixed["val_pass_s"] + fixed["transfer_pass_s"])
    total = (loop + fixed["val_pass_s"] + fixed["render_val_s"] + fixed["render_test_s"] + fixed["test_pass_s"]
             + fixed["transfer_pass_s"])
    return {"loop_s": loop, "total_s": total, "validations_in_loop": in_loop_vals}


def bench_vision(cfg: BenchVisionConfig) -> dict:
    torch.set_num_threads(cfg.threads)
    unused = Path(tempfile.gettempdir())  # TrainVisionConfig needs a run folder; the benchmark writes nothing there
    quiet = RuntimeConfig(progress=False)
    runners = [_Runner(v, dataclasses.replace(TrainVisionConfig(out=unused, seed=cfg.seed, runtime=quiet),
                                              **VARIANTS[v])) for v in cfg.variants]
    for r in runners:
        r.run(cfg.warmup, record=False)
    for k in range(cfg.rounds):
        for r in runners:
            r.run(cfg.steps_per_round, record=True)
        logging.info("round %d of %d timed", k + 1, cfg.rounds)
    results = {}
    for r in runners:
        batch_s, step_s = statistics.median(r.batch_s), statistics.median(r.step_s)
        fixed = r.fixed_costs(cfg.n_eval)
        overrides = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in VARIANTS[r.name].items()}
        results[r.name] = {"overrides": overrides, "steps": r.cfg.steps, "batch_size": r.cfg.batch_size,
                           "patch": r.cfg.patch, "batch_s": batch_s, "step_s": step_s, **fixed,
                           **project(r.cfg, batch_s, step_s, fixed)}
    base = results.get("default")
    for res in results.values():
        res["ratio_to_budget"] = res["total_s"] / BUDGET_S
        if base is not None:
            res["step_ratio_to_default"] = (res["batch_s"] + res["step_s"]) / (base["batch_s"] + base["step_s"])
            res["total_ratio_to_default"] = res["total_s"] / base["total_s"]
    return {"threads": cfg.threads, "rounds": cfg.rounds, "steps_per_round": cfg.steps_per_round,
            "torch": torch.__version__, "budget_s": BUDGET_S, "variants": results}


def table(result: dict) -> str:
    """Text table of :func:`bench_vision`'s result."""
    head = (f"{'variant':<11} {'steps':>5} {'batch s':>8} {'step s':>7} {'val pass s':>10} {'loop s':>7} "
            f"{'total s':>8} {'x default':>9} {'x budget':>8}")
    lines = [f"train-vision time budget, {result['threads']} threads, torch {result['torch']} "
             f"(median of {result['rounds']} rounds of {result['steps_per_round']} steps)", head]
    for name, r in result["variants"].items():
        ratio = r.get("total_ratio_to_default", math.nan)
        lines.append(f"{name:<11} {r['steps']:>5} {r['batch_s']:>8.3f} {r['step_s']:>7.3f} {r['val_pass_s']:>10.1f} "
                     f"{r['loop_s']:>7.0f} {r['total_s']:>8.0f} {ratio:>8.2f}x {r['ratio_to_budget']:>7.2f}x")
    lines.append(f"budget: {result['budget_s']:.0f} s for the whole command (issue 27); 'x budget' > 1 means over it. "
                 "Start-up, photo loading and checkpoints are not included.")
    return "\n".join(lines)


def main(cfg: BenchVisionConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    tune_allocator()
    result = bench_vision(cfg)
    print(table(result))
    if cfg.out is not None:
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(cfg.out, json.dumps(result, indent=2).encode())


if __name__ == "__main__":
    main(tyro.cli(BenchVisionConfig, description=__doc__.splitlines()[0]))
