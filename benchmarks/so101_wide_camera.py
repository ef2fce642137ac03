"""A real SO-101 camera gives wide frames: trained so101 nets on the MuJoCo arm fed its whole 16:9 sensor.

    python benchmarks/so101_wide_camera.py --vision vision/assets/segnet_so101.pt \
        --policy dagger/assets/policy_so101.pt --episodes 60 [--seed 0]

The ``so101`` embodiment's wrist image is the centred square of a 16:9 sensor. A real camera delivers the whole
sensor (or a 4:3 mode of it), so ``deploy`` must cut that square before it resizes the frame (``--frame-crop``).
This runs the full ``deploy`` loop (``hz=0``) on the MuJoCo SO-101 three ways, on the same episode seeds (the
``test`` stream of ``--seed``):

1. **square camera**: the backend's own 64 x 64 wrist image (``deploy --camera mujoco --robot mujoco``);
2. **wide camera, square crop**: :class:`graspsim.robot.cameras.SensorCamera`, the same camera over its whole
   sensor (64 x 114, the scene's blur and noise), with ``--frame-crop square`` (what ``auto`` picks for so101 nets);
3. **wide camera, stretched**: the same frames resized whole to 64 x 64 (``--frame-crop stretch``, deploy's only
   behaviour before the option).

Printed: successes per kind for each, the failure ends, wall time and the CPU. One thread (set
``OMP_NUM_THREADS=1`` as well). Needs the MuJoCo backend (``pip install 'graspsim[mujoco]'``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import tyro
from so101_driver_vs_backend import DriverVsBackendConfig, cpu_name, require_backend, sim_for  # benchmarks/ is the script's folder

ROOT = Path(__file__).resolve().parents[1]
MODES = ("square camera", "wide camera, square crop", "wide camera, stretched")


@dataclass(frozen=True)
class WideCameraConfig(DriverVsBackendConfig):
    """Trained so101 nets on the MuJoCo SO-101 with its square image, and with its whole sensor cropped or stretched
    (the settings and their checks of so101_driver_vs_backend.py)."""

    episodes: int = 60
    """Episodes of each way (the same seeds)."""
    out: Optional[Path] = None
    """Folder of the three deploy runs' outputs; default a temporary folder."""


def run_mode(mode: str, cfg: WideCameraConfig, sim, out: Path) -> tuple[dict, dict]:
    """One deploy run of ``mode`` (one of :data:`MODES`); returns (its summary, {episode seed: target kind})."""
    from graspsim.robot.cameras import SensorCamera, SimCamera
    from graspsim.robot.deploy import DeployConfig, deploy
    from graspsim.robot.robots import SimRobot, SimWorld
    from graspsim.state import KIND_NAMES

    kinds: dict[int, str] = {}

    class World(SimWorld):  # notes each episode's target kind
        def reset(self, seed: int) -> None:
            super().reset(seed)
            kinds[int(seed)] = KIND_NAMES[int(self.env.state.target_kind[0])]

    world = World("mujoco", sim)
    try:
        camera = SimCamera(world) if mode == MODES[0] else SensorCamera(world)
        crop = "stretch" if mode == MODES[2] else "square"
        dcfg = DeployConfig(vision=cfg.vision, policy=cfg.policy, camera="mujoco", robot="mujoco",
                            out=out / mode.replace(", ", "_").replace(" ", "_"), hz=0.0, episodes=cfg.episodes,
                            seed=cfg.seed, sim=sim, overwrite=True, frame_crop=crop,
                            time_limit=sim.max_steps / sim.control_hz)
        summary = deploy(dcfg, camera=camera, robot=SimRobot(world))
    finally:
        world.close()
    return summary, kinds


def main(cfg: WideCameraConfig) -> dict:
    if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):  # before mujoco is first imported
        os.environ.setdefault("MUJOCO_GL", "egl")
    require_backend("so101_wide_camera")
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    from so101_twin import tally  # the driver comparison's per-kind count

    torch.set_num_threads(1)
    sim = sim_for(cfg.policy)
    out = cfg.out if cfg.out is not None else Path(tempfile.mkdtemp(prefix="so101_wide_"))
    results, seconds = {}, {}
    for mode in MODES:
        print(f"{mode} ...", flush=True)
        t0 = time.perf_counter()
        results[mode] = tally(*run_mode(mode, cfg, sim, out))  # {"per_kind": {kind: (ok, n)}, "ends": {kind: ...}}
        seconds[mode] = time.perf_counter() - t0
    order = (*sim.target.kinds, "all")
    print(f"{'':28s}" + "".join(f"{k:>12s}" for k in order) + "   failures")
    for mode in MODES:
        per_kind, ends = results[mode]["per_kind"], results[mode]["ends"].get("all", {})
        row = "".join(f"{'%d/%d' % per_kind.get(k, (0, 0)):>12s}" for k in order)
        print(f"{mode:28s}{row}   " + (", ".join(f"{e} {n}" for e, n in sorted(ends.items())) or "none"))
    print("wall time: " + ", ".join(f"{m} {s:.0f} s" for m, s in seconds.items()))
    print(f"CPU: {cpu_name()} ({time.strftime('%Y-%m-%d')}); nets: {cfg.vision}, {cfg.policy}; seed {cfg.seed}; "
          f"outputs: {out}")
    return results


if __name__ == "__main__":
    main(tyro.cli(WideCameraConfig))
