"""Observation gap seen by the control net: target-mask statistics along expert trajectories, both backends.

    python benchmarks/mask_gap.py --num-envs 16 --steps 40

The FSM expert drives identical scenes (the same episode seeds) in the torch simulator and in pybullet. Every
step's mask area and centroid is binned by the fingertip height above the sphere centre (free sphere
only), so differences come from rendering (TinyRenderer mesh vs analytic ray cast, Panda fingers vs
box fingers), not from different states.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import tyro

from graspsim.expert import FSMExpert
from graspsim import GraspEnv, SimConfig
from graspsim.bullet import BulletGraspEnv
from graspsim.perf import tune_allocator
from graspsim.keys import MASK
from graspsim.seeds import episode_seeds
from graspsim.validate import positive_int


@dataclass(frozen=True)
class MaskGapConfig:
    """Compare target-mask statistics along expert trajectories in the torch simulator and in pybullet."""

    num_envs: int = 16
    """Scenes (one trajectory each) per backend."""
    steps: int = 40
    """Steps per trajectory."""
    seed: int = 2000
    """Run seed of the scenes (scene k: episode k of its test stream, graspsim.seeds)."""

    def __post_init__(self) -> None:
        positive_int("MaskGapConfig", "num_envs", self.num_envs)
        positive_int("MaskGapConfig", "steps", self.steps)


BINS = ((0.1, 0.3), (0.05, 0.1), (0.02, 0.05), (0.005, 0.02), (-0.01, 0.005))


def trajectory_mask_stats(env, cfg: SimConfig, seeds: list[int], steps: int) -> torch.Tensor:
    """T,B,6 per step: (tcp height above sphere centre, xy distance, mask area px, centroid x, y, held), one
    fixed-length trajectory per episode seed (no refill: every slot runs ``steps`` steps)."""
    n = env.num_envs
    obs = env.reset(torch.arange(n), seeds=seeds)
    expert = FSMExpert(cfg, n)
    rows = []
    pix = torch.arange(cfg.image_size).float()
    for _ in range(steps):
        p = env.privileged()
        m = obs[MASK].float()
        area = m.sum((1, 2))
        cx = (m.sum(1) * pix).sum(1) / area.clamp_min(1)
        cy = (m.sum(2) * pix).sum(1) / area.clamp_min(1)
        h = p["tcp_pos"][:, 2] - p["sphere_pos"][:, 2]
        dxy = (p["sphere_pos"][:, :2] - p["tcp_pos"][:, :2]).norm(dim=1)
        rows.append(torch.stack([h, dxy, area, cx, cy, p["held"].float()], 1))
        obs, *_ = env.step(expert.act(p))
    return torch.stack(rows)


def main(args: MaskGapConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    tune_allocator()
    torch.set_num_threads(1)
    cfg = SimConfig()
    seeds = episode_seeds(args.seed, "test", 0, args.num_envs)
    stats = {"torch": trajectory_mask_stats(GraspEnv(cfg, num_envs=args.num_envs), cfg, seeds, args.steps)}
    with BulletGraspEnv(cfg, num_envs=args.num_envs) as env:
        stats["bullet"] = trajectory_mask_stats(env, cfg, seeds, args.steps)
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
    main(tyro.cli(MaskGapConfig, description=__doc__.splitlines()[0]))
