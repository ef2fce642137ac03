"""Observation gap seen by the control net: target-mask statistics along expert trajectories, both backends.

    /work/venv/bin/python benchmarks/mask_gap.py --num-envs 16 --steps 40

The FSM expert drives identical scenes (seeded per scene) in the torch simulator and in pybullet. Every
step's mask area and centroid is binned by the fingertip height above the sphere centre (free sphere
only), so differences come from rendering (TinyRenderer mesh vs analytic ray cast, Panda fingers vs
box fingers), not from different states.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from expert_backends import episode_scenes, put_scenes  # noqa: E402

from expert import FSMExpert  # noqa: E402
from graspsim import GraspEnv, SimConfig  # noqa: E402
from graspsim.bullet import BulletGraspEnv  # noqa: E402

BINS = ((0.1, 0.3), (0.05, 0.1), (0.02, 0.05), (0.005, 0.02), (-0.01, 0.005))


def trajectory_mask_stats(env, cfg: SimConfig, scenes, steps: int) -> torch.Tensor:
    """T,B,6 per step: (tcp height above sphere centre, xy distance, mask area px, centroid x, y, held)."""
    n = env.num_envs
    put_scenes(env, torch.arange(n), scenes)
    expert = FSMExpert(cfg, n)
    obs = env.observe()
    rows = []
    pix = torch.arange(cfg.image_size).float()
    for _ in range(steps):
        p = env.privileged()
        m = obs["mask"].float()
        area = m.sum((1, 2))
        cx = (m.sum(1) * pix).sum(1) / area.clamp_min(1)
        cy = (m.sum(2) * pix).sum(1) / area.clamp_min(1)
        h = p["tcp_pos"][:, 2] - p["sphere_pos"][:, 2]
        dxy = (p["sphere_pos"][:, :2] - p["tcp_pos"][:, :2]).norm(dim=1)
        rows.append(torch.stack([h, dxy, area, cx, cy, p["held"].float()], 1))
        obs, *_ = env.step(expert.act(p))
    return torch.stack(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-envs", type=int, default=16)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=2000)
    args = ap.parse_args()
    if args.num_envs <= 0 or args.steps <= 0:
        ap.error("num-envs and steps must be positive")
    torch.set_num_threads(1)
    cfg = SimConfig()
    scenes = episode_scenes(cfg, list(range(args.seed, args.seed + args.num_envs)))
    stats = {"torch": trajectory_mask_stats(GraspEnv(cfg, num_envs=args.num_envs), cfg, scenes, args.steps)}
    with BulletGraspEnv(cfg, num_envs=args.num_envs) as env:
        stats["bullet"] = trajectory_mask_stats(env, cfg, scenes, args.steps)
    print(f"{'height above sphere (m)':>24} {'backend':>7} {'n':>4} {'visible':>7} {'area px':>7} {'cx':>5} {'cy':>5}")
    for lo, hi in BINS:
        for name, r in stats.items():
            sel = (r[..., 0] >= lo) & (r[..., 0] < hi) & (r[..., 5] == 0)
            x = r[sel]
            if len(x) == 0:
                continue
            seen = x[x[:, 2] > 0]
            print(f"{f'{lo:.3f}..{hi:.3f}':>24} {name:>7} {len(x):>4} {float((x[:, 2] > 0).float().mean()):>7.2f} "
                  f"{float(seen[:, 2].mean()):>7.1f} {float(seen[:, 3].mean()):>5.1f} {float(seen[:, 4].mean()):>5.1f}")


if __name__ == "__main__":
    main()
