"""Side-by-side frames/s of the sphere-only torch simulator: this tree against another copy of graspsim.

    python benchmarks/sphere_fps.py --base /tmp/base39 --batch 1024 --rounds 3 --seconds 4

``--base`` is a folder holding an importable ``graspsim`` package (e.g. ``git archive <commit> graspsim expert``
unpacked with ``expert/`` moved to ``graspsim/expert``). Each measurement runs in a fresh process on one thread:
the default :class:`graspsim.SimConfig` (sphere only), ``batch`` scenes driven by the FSM expert, rendering every
step (what ``graspsim bench`` times). The two trees alternate round by round so they share the machine's load;
the script prints every round and the median ratios (this tree / base) of wall-clock frames/s and of frames per
CPU-second of the process (steadier when other jobs share the cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time, torch
torch.set_num_threads(1)
import graspsim
from graspsim import GraspEnv, SimConfig
from graspsim.expert.fsm import expert_action
batch, seconds = int(sys.argv[1]), float(sys.argv[2])
cfg = SimConfig()
env = GraspEnv(cfg, num_envs=batch, seed=0)
env.reset()
for _ in range(3):
    env.step(expert_action(env.privileged(), cfg))
n, t0, c0 = 0, time.perf_counter(), time.process_time()
while n < 5 or time.perf_counter() - t0 < seconds:
    env.step(expert_action(env.privileged(), cfg))
    n += 1
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"fps": batch * n / wall, "cpu_fps": batch * n / cpu, "file": graspsim.__file__}))
"""


def measure(tree: str | None, batch: int, seconds: float) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if tree is not None:
        env["PYTHONPATH"] = tree
    out = subprocess.run([sys.executable, "-c", CHILD, str(batch), str(seconds)], env=env, check=True,
                         capture_output=True, text=True, cwd="/")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="folder holding the baseline graspsim package")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    a = ap.parse_args()
    for name in ("batch", "rounds"):
        if getattr(a, name) <= 0:
            ap.error(f"--{name} must be positive; got {getattr(a, name)}")
    if not a.seconds > 0:
        ap.error(f"--seconds must be positive; got {a.seconds}")
    if not (Path(a.base) / "graspsim").is_dir():
        ap.error(f"--base {a.base}: no graspsim package folder there")
    # this tree, importable the same way as the base: a temporary folder holding graspsim/ with expert/ inside
    src = Path(__file__).resolve().parents[1]
    tmp = tempfile.mkdtemp(prefix="sphere_fps_")
    here = tmp
    shutil.copytree(src / "graspsim", Path(tmp) / "graspsim", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(src / "expert", Path(tmp) / "graspsim" / "expert", ignore=shutil.ignore_patterns("__pycache__"))
    ratios, cpu_ratios = [], []
    for k in range(a.rounds):
        base = measure(a.base, a.batch, a.seconds)
        new = measure(here, a.batch, a.seconds)
        ratios.append(new["fps"] / base["fps"])
        cpu_ratios.append(new["cpu_fps"] / base["cpu_fps"])
        print(f"round {k}: base {base['fps']:.0f} fps ({base['cpu_fps']:.0f} per CPU-s), this tree {new['fps']:.0f} fps "
              f"({new['cpu_fps']:.0f} per CPU-s); ratio {ratios[-1]:.3f} wall, {cpu_ratios[-1]:.3f} CPU", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"median ratio (this tree / base) at batch {a.batch}: {statistics.median(ratios):.3f} wall-clock, "
          f"{statistics.median(cpu_ratios):.3f} per CPU-second")


if __name__ == "__main__":
    main()
