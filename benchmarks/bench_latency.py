"""Decision latency at batch 1 on this CPU: per stage, torch vs onnxruntime, vision with and without mirror averaging.

    python benchmarks/bench_latency.py --vision vision/assets/segnet.pt --policy tests/assets/policy_format0.pt
    python benchmarks/bench_latency.py --vision A.pt --policy P.pt --also B.pt   # B's torch float32 vision and decision
                                                                               # beside A's, in the same rounds

One wrist frame at a time, as ``graspsim deploy`` sees them (simulator frames of the test stream, camera partway
down). Stages: ``vision`` (frame -> mask), ``control`` (mask + gripper senses -> action) and ``decision`` (what
the deploy loop times: resize, vision, control and the safety rules of :class:`graspsim.robot.controller.Controller`).
Torch runs at the precision deploy would pick (``auto``: bf16 autocast where the CPU has native bf16 and the
checkpoint's probe frames agree) and at float32; onnxruntime runs the float32 graphs of ``graspsim export``.
The measurements are interleaved round by round, so a change of machine load hits all of them alike; the load
average is printed with the numbers. Target: decision p99 <= 20 ms.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import tyro

from graspsim.extras import require
from graspsim.perf import tune_allocator

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class LatencyConfig:
    """Time one decision at batch 1, per stage, torch vs onnxruntime."""

    vision: Path = REPO / "vision" / "assets" / "segnet.pt"
    """Vision checkpoint."""
    policy: Path = REPO / "tests" / "assets" / "policy_format0.pt"
    """Control checkpoint."""
    threads: int = 2
    """torch.set_num_threads and onnxruntime intra-op threads."""
    calls: int = 300
    """Timed calls per measurement (split over --rounds interleaved rounds)."""
    rounds: int = 5
    """Rounds; each round times every configuration once in turn."""
    warmup: int = 20
    """Untimed calls per configuration before timing."""
    out: Optional[Path] = None
    """Also write the results as JSON here."""
    also: tuple[Path, ...] = ()
    """More vision checkpoints for the same policy (e.g. an ensemble against its single net): their torch float32
    vision and decision stages are timed in the same interleaved rounds, and their decision p50 / p99 are printed as
    ratios to ``--vision``'s."""

    def __post_init__(self) -> None:
        for name in ("threads", "calls", "rounds"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"LatencyConfig.{name} must be a positive int; got {v!r}")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"LatencyConfig.warmup must be a non-negative int; got {self.warmup!r}")
        for module in ("onnx", "onnxruntime"):  # it exports the nets and times them in onnxruntime
            require(module, "deploy", "benchmarks/bench_latency.py")


def _stats(ms: list[float]) -> dict:
    a = np.asarray(ms)
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "mean": float(a.mean()), "n": a.size}


def main(cfg: LatencyConfig) -> dict:
    logging.basicConfig(level=logging.WARNING)
    tune_allocator()
    torch.set_num_threads(cfg.threads)
    from graspsim.robot.controller import Controller, OnnxNets, TorchNets
    from graspsim.robot.export import ExportConfig, export, parity_inputs

    tmp = Path(tempfile.mkdtemp(prefix="bench_latency_"))
    for mirror in (True, False):
        export(ExportConfig(vision=cfg.vision, policy=cfg.policy, out=tmp / f"m{int(mirror)}", mirror_tta=mirror,
                            check=False))
    nets = {}
    for prec in ("auto", "fp32"):
        for mirror in (True, False):
            n = TorchNets(cfg.vision, cfg.policy, precision=prec)
            n.seg.mirror_tta = mirror
            nets[f"torch-{n.precision}{'-mirror' if mirror else ''}"] = n
    for mirror in (True, False):
        nets[f"onnx-fp32{'-mirror' if mirror else ''}"] = OnnxNets(tmp / f"m{int(mirror)}", threads=cfg.threads)
    ckpt_mirror = TorchNets(cfg.vision, cfg.policy).mirror_tta
    first = nets[next(iter(nets))]
    wrist, fingertip = bool(first.wrist), first.fingertip is not None  # a wrist net reads 5 senses (9 with fingertips)
    rgb, grip = parity_inputs(first.image_size, 64, 0, wrist, fingertip)
    frames = [np.ascontiguousarray(f.permute(1, 2, 0).numpy()) for f in rgb]
    senses = grip.numpy()
    ctls = {name: Controller(n) for name, n in nets.items() if name.endswith("-mirror") == ckpt_mirror}
    base = f"torch-fp32{'-mirror' if ckpt_mirror else ''}"  # what --also is compared with
    for v in cfg.also:
        n = TorchNets(v, cfg.policy, precision="fp32")
        if n.image_size != first.image_size:
            raise ValueError(f"--also {v} reads {n.image_size}x{n.image_size} frames, --vision {cfg.vision} "
                             f"{first.image_size}x{first.image_size}; compare nets of one camera")
        nets[f"torch-fp32:{v.stem}"] = n
        ctls[f"torch-fp32:{v.stem}"] = Controller(n)

    def vision(n, k):
        n.mask(frames[k % 64].transpose(2, 0, 1)[None].copy())

    def control(n, k):
        n.action(np.zeros((1, n.image_size, n.image_size), bool) | (k % 2 == 0), senses[k % 64][None])

    def decision(c, k):
        c.decide(frames[k % 64], senses[k % 64][:c.gripper_dim])  # the robot's own senses; the controller adds the rest

    jobs = [("vision", name, vision, n) for name, n in nets.items()]
    jobs += [("control", name.split("-")[0], control, n) for name, n in nets.items() if name in ("torch-fp32", "onnx-fp32")]
    jobs += [("decision", name, decision, c) for name, c in ctls.items()]
    times: dict[tuple, list[float]] = {(stage, name): [] for stage, name, _, _ in jobs}
    for stage, name, fn, obj in jobs:
        for k in range(cfg.warmup):
            fn(obj, k)
    load0 = os.getloadavg()
    per_round = max(1, cfg.calls // cfg.rounds)
    for r in range(cfg.rounds):
        for stage, name, fn, obj in jobs:
            for k in range(per_round):
                t = time.perf_counter()
                fn(obj, k)
                times[(stage, name)].append(1e3 * (time.perf_counter() - t))
    load1 = os.getloadavg()
    res = {"threads": cfg.threads, "calls": per_round * cfg.rounds, "checkpoint_mirror_tta": ckpt_mirror,
           "load_average_before": list(load0), "load_average_after": list(load1), "cpus": os.cpu_count(),
           "results": [{"stage": s, "config": n, **_stats(v)} for (s, n), v in times.items()]}
    print(f"batch 1, {cfg.threads} threads, {res['calls']} calls each; load average {load0[0]:.2f} -> {load1[0]:.2f} "
          f"on {os.cpu_count()} CPUs (other jobs share them: treat the tails as noisy)")
    print(f"{'stage':<9} {'configuration':<22} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for row in res["results"]:
        print(f"{row['stage']:<9} {row['config']:<22} {row['p50']:8.2f} {row['p99']:8.2f} {row['mean']:8.2f}")
    print("decision target: p99 <= 20 ms")
    by = {(r["stage"], r["config"]): r for r in res["results"]}
    for v in cfg.also:
        r, b = by[("decision", f"torch-fp32:{v.stem}")], by[("decision", base)]
        res.setdefault("also_vs_vision", {})[str(v)] = {"p50_ratio": r["p50"] / b["p50"], "p99_ratio": r["p99"] / b["p99"]}
        print(f"decision, {v.stem} / {cfg.vision.stem} (torch float32, same rounds): p50 x{r['p50'] / b['p50']:.2f}, "
              f"p99 x{r['p99'] / b['p99']:.2f}")
    if cfg.out is not None:
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        cfg.out.write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main(tyro.cli(LatencyConfig))
