"""Observation gap seen by the control net: target-mask statistics along expert trajectories, both backends.

    python benchmarks/mask_gap.py --num-envs 16 --steps 40

The FSM expert drives identical scenes (seeded per scene) in the torch simulator and in pybullet. Every
step's mask area and centroid is binned by the fingertip height above the sphere centre (free sphere
only), so differences come from rendering (TinyRenderer mesh vs analytic ray cast, Panda fingers vs
box fingers), not from different states.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import tyro

from expert import FSMExpert
from graspsim import GraspEnv, SimConfig
from graspsim.bullet import BulletGraspEnv
from graspsim.perf import tune_allocator

# the sibling benchmark: running ``python benchmarks/mask_gap.py`` puts this folder first on sys.path
from expert_backends import episode_scenes, put_scenes


@dataclass(frozen=True)
class MaskGapConfig:
    """Compare target-mask statistics along expert trajectories in the torch simulator and in pybullet."""

    num_envs: int = 16
    """Scenes (one trajectory each) per backend."""
    steps: int = 40
    """Steps per trajectory."""
    seed: int = 2000
    """Seed of the first scene (scene k: seed + k)."""

    def __post_init__(self) -> None:
        for name in ("num_envs", "steps"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"MaskGapConfig.{name} must be a positive int; got {v!r}")


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


def main(args: MaskGapConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    tune_allocator()
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
    main(tyro.cli(MaskGapConfig, description=__doc__.splitlines()[0]))
