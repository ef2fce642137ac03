"""1 process vs N processes (torchrun, gloo, one thread each) for collect, eval-sim and train-vision steps.

    python benchmarks/bench_distributed.py --procs 1 2

Runs each verb through ``torchrun --standalone --nproc-per-node P -m graspsim.cli <verb>`` with
``OMP_NUM_THREADS=1`` (also for P = 1, so the comparison is one thread per process either way) and reads the
throughput the verb itself reports: collect's episodes/s (rank 0's log: new episodes over its run time, the join
included), eval-sim's scene steps/s (``metrics.json``: all ranks' steps over the slowest rank's rollout time) and
train-vision's optimizer steps/s (``metrics.json``: ``steps`` over ``train_seconds``; every step of P processes
trains on P x batch composites, so composites/s is printed too). Process start-up is left out of these numbers
and printed apart as wall time. The machine may be shared: the 1-minute load average is printed beside each
measurement, and ratios taken under a changing load mean little.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

import tyro

ASSETS = Path(__file__).resolve().parent.parent / "tests" / "assets"


@dataclass(frozen=True)
class BenchDistributedConfig:
    """Throughput of collect, eval-sim and train-vision on 1 vs N processes."""

    procs: Tuple[int, ...] = (1, 2)
    """Process counts to compare (the first is the baseline of the ratios)."""
    collect_episodes: int = 48
    """Episodes per collect run."""
    eval_episodes: int = 96
    """Episodes per eval-sim run."""
    vision_steps: int = 12
    """Optimizer steps per train-vision run."""
    vision_batch: int = 16
    """Composites per step and process."""
    num_envs: int = 16
    """Scenes in parallel per process (collect and eval-sim)."""
    policy: Path = ASSETS / "policy_format0.pt"
    """Control checkpoint for eval-sim."""
    verbs: Tuple[str, ...] = ("collect", "eval-sim", "train-vision")
    """Which verbs to measure."""

    def __post_init__(self) -> None:
        name = "BenchDistributedConfig"
        if not self.procs or any(not isinstance(p, int) or p < 1 for p in self.procs):
            raise ValueError(f"{name}.procs must be positive ints; got {self.procs!r}")
        for f in ("collect_episodes", "eval_episodes", "vision_steps", "vision_batch", "num_envs"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < max(self.procs):
                raise ValueError(f"{name}.{f} must be an int of at least the largest process count; got {v!r}")
        bad = [v for v in self.verbs if v not in ("collect", "eval-sim", "train-vision")]
        if bad or not self.verbs:
            raise ValueError(f"{name}.verbs must name collect, eval-sim or train-vision; got {self.verbs!r}")


def launch(procs: int, verb: str, args: list[str], cwd: Path) -> tuple[str, float]:
    """Run one verb under torchrun; returns (its output, wall seconds)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}", "-m",
           "graspsim.cli", verb, *args, "--no-progress"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{verb} on {procs} process(es) failed:\n{(p.stdout + p.stderr)[-3000:]}")
    return p.stdout + p.stderr, wall


def measure(cfg: BenchDistributedConfig, verb: str, procs: int, work: Path) -> dict:
    out = work / f"{verb}-{procs}"
    if verb == "collect":
        log, wall = launch(procs, verb, ["--out", f"{out}.h5", "--episodes", str(cfg.collect_episodes),
                                         "--num-envs", str(cfg.num_envs), "--seed", "0"], work)
        eps = float(re.search(r"collect: \d+ episodes .*?([\d.]+) eps/s", log).group(1))
        return {"rate": eps, "unit": "episodes/s", "wall": wall}
    if verb == "eval-sim":
        _, wall = launch(procs, verb, ["--policy", str(cfg.policy), "--out", str(out), "--episodes",
                                       str(cfg.eval_episodes), "--num-envs", str(cfg.num_envs), "--gifs", "0",
                                       "--threads", "1"], work)
        m = json.loads((out / "metrics.json").read_text())
        return {"rate": m["scene_steps"] / m["seconds"], "unit": "scene steps/s", "wall": wall}
    _, wall = launch(procs, verb, ["--out", str(out), "--steps", str(cfg.vision_steps), "--batch-size",
                                   str(cfg.vision_batch), "--val-every", str(cfg.vision_steps), "--ckpt-every",
                                   str(cfg.vision_steps), "--n-val", "16", "--n-test", "16", "--transfer", "None",
                                   "--operating-point", "composite", "--threads", "1"], work)
    m = json.loads((out / "metrics.json").read_text())
    steps_per_s = m["steps"] / m["train_seconds"]
    return {"rate": steps_per_s, "unit": "steps/s", "wall": wall,
            "extra": f"{steps_per_s * procs * cfg.vision_batch:.1f} composites/s"}


def main(cfg: BenchDistributedConfig) -> None:
    print(f"machine: {os.cpu_count()} cores; one thread per process; load average at start "
          f"{os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="bench_distributed_") as tmp:
        work = Path(tmp)
        for verb in cfg.verbs:
            base = None
            for procs in cfg.procs:
                load = os.getloadavg()[0]
                r = measure(cfg, verb, procs, work)
                base = r["rate"] if base is None else base
                extra = f", {r['extra']}" if "extra" in r else ""
                print(f"{verb:13s} {procs} process(es): {r['rate']:9.2f} {r['unit']}{extra} "
                      f"(x{r['rate'] / base:.2f} of {cfg.procs[0]}); wall {r['wall']:.1f} s with start-up; "
                      f"load {load:.2f} -> {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main(tyro.cli(BenchDistributedConfig, description=__doc__.splitlines()[0]))
