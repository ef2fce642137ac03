"""The MuJoCo backend with the SO-101: control steps per second, and a scripted straight-down grasp per target kind.

    python benchmarks/so101_mujoco.py --episodes 200

1. Speed: one scene, its 64 x 64 wrist image rendered every control step (the env protocol's ``observe``), the
   scripted grasp acting, on one thread; and the same without images.
2. Grasps: :class:`graspsim.mujoco.scripted.ScriptedGrasp` (privileged poses, straight-down approach through the IK
   layer, contact physics, the jaw through its measured table) on ``--episodes`` scenes of each kind, episode k the
   scene of episode seed k of the ``test`` stream of ``--seed``, through the one rollout driver. Success: the target
   held by the pads with its bottom at least ``lift_height`` (5 cm) above the table.

The scenes use the ``so101`` embodiment's numbers (targets in a 10 cm square around the workspace centre, TCP start
4.5-6.5 cm high, workspace 7 cm, highest TCP 7.28 cm, jaws open 5 cm). Needs ``pip install 'graspsim[mujoco]'``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Tuple

import torch
import tyro

from graspsim.config import TARGET_KINDS, RandomizationConfig, SimConfig, TargetConfig
from graspsim.physics import FAILURE_NAMES
from graspsim.rollout import ExpertHooks, run_episodes
from graspsim.seeds import episode_seeds


@dataclass(frozen=True)
class So101MujocoConfig:
    """Speed and scripted grasps of the MuJoCo SO-101 backend."""

    episodes: int = 200
    """Scripted grasp episodes per kind."""
    kinds: Tuple[str, ...] = TARGET_KINDS
    """Target kinds to grasp."""
    num_envs: int = 1
    """Scenes stepped one after the other per env step."""
    speed_steps: int = 300
    """Control steps timed for the speed figure."""
    seed: int = 1000
    """Run seed of the scenes (graspsim.seeds, test stream)."""

    def __post_init__(self) -> None:
        for name in ("episodes", "num_envs", "speed_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"So101MujocoConfig.{name} must be at least 1; got {getattr(self, name)!r}")
        bad = [k for k in self.kinds if k not in TARGET_KINDS]
        if bad or not self.kinds:
            raise ValueError(f"So101MujocoConfig.kinds must name kinds of {', '.join(TARGET_KINDS)}; "
                             f"got {self.kinds!r}")


def so101_scenes(kinds: Tuple[str, ...]) -> SimConfig:
    """The so101 embodiment's scene numbers as plain SimConfig settings."""
    rand = RandomizationConfig(sphere_xy=(-0.05, 0.05), start_height=(0.045, 0.065), start_offset=(-0.03, 0.03))
    return SimConfig(randomization=rand, target=TargetConfig(kinds=tuple(kinds)), workspace=0.07, max_height=0.0728,
                     open_width=0.05)


def speed(args: So101MujocoConfig) -> None:
    from graspsim.mujoco.env import MujocoGraspEnv
    from graspsim.mujoco.scripted import ScriptedGrasp

    cfg = so101_scenes(("sphere", "cube", "cylinder"))
    with MujocoGraspEnv(cfg, num_envs=1, seed=args.seed) as env:
        pol = ScriptedGrasp.for_env(env)
        for render in (True, False):
            seeds = iter(range(10**6))
            env.reset(seeds=[next(seeds)])
            pol.reset()
            with env.rendering(False):  # as the rollout driver: one observe (render) per step, none inside step
                t = time.perf_counter()
                for _ in range(args.speed_steps):
                    if render:
                        env.observe()
                    _, _, done, _ = env.step(pol(env.privileged()))
                    if bool(done[0]):
                        env.reset(seeds=[next(seeds)])
                        pol.reset()
                rate = args.speed_steps / (time.perf_counter() - t)
            what = f"with its {cfg.image_size}x{cfg.image_size} wrist image (RGB + segmentation)" if render else \
                "without images"
            print(f"speed: one scene {what}: {rate:.0f} control steps/s (scripted grasps, resets included)")


def grasps(args: So101MujocoConfig) -> None:
    from graspsim.mujoco.env import MujocoGraspEnv
    from graspsim.mujoco.scripted import ScriptedGrasp

    for kind in args.kinds:
        cfg = so101_scenes((kind,))
        with MujocoGraspEnv(cfg, num_envs=args.num_envs, seed=args.seed) as env:
            out = run_episodes(env, episode_seeds(args.seed, "test", 0, args.episodes),
                               ExpertHooks(env, ScriptedGrasp.for_env(env)))
        counts = Counter(FAILURE_NAMES[int(c)] for c in out.failure)
        steps = out.steps[out.success].mean() if out.success.any() else float("nan")
        print(f"scripted grasp, {kind:>8}: success {out.success.mean():.1%} of {args.episodes} | {dict(counts)} | "
              f"mean steps to success {steps:.1f} | {out.scene_steps / out.seconds:.0f} steps/s with images")


def main(args: So101MujocoConfig) -> None:
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    speed(args)
    grasps(args)


if __name__ == "__main__":
    main(tyro.cli(So101MujocoConfig, description=__doc__.splitlines()[0]))
