"""FSM expert on identical scenes in both backends: success rate, failure causes, episode length.

    python benchmarks/expert_backends.py --episodes 100 --num-envs 8 --workers 2

Episode k uses the scene of episode seed k of the ``test`` stream (:mod:`graspsim.seeds`), in the
batched torch simulator and in the pybullet backend (Franka Panda, contact physics). This is the
reference for a learned policy evaluated in pybullet: what the privileged expert itself achieves there.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

import torch
import tyro

from graspsim.expert import FSMExpert
from graspsim import FAILURE_NAMES, GraspEnv, SimConfig
from graspsim.bullet import BulletGraspEnv
from graspsim.perf import tune_allocator
from graspsim.rollout import ExpertHooks, run_episodes
from graspsim.seeds import episode_seeds
from graspsim.validate import non_negative_int, positive_int


@dataclass(frozen=True)
class ExpertBackendsConfig:
    """Run the FSM expert on the same seeded scenes in the torch simulator and in pybullet."""

    episodes: int = 100
    """Episodes per backend (episode k: the scene of episode k of the test stream of --seed)."""
    num_envs: int = 8
    """Scenes stepped at once in each backend."""
    workers: int = 2
    """pybullet worker processes (0 = in-process)."""
    seed: int = 1000
    """Run seed of the scenes (graspsim.seeds)."""

    def __post_init__(self) -> None:
        positive_int("ExpertBackendsConfig", "episodes", self.episodes)
        positive_int("ExpertBackendsConfig", "num_envs", self.num_envs)
        non_negative_int("ExpertBackendsConfig", "workers", self.workers)


def run_expert(env, cfg: SimConfig, episodes: int, seed: int) -> dict:
    """Run ``episodes`` expert episodes on the ``test`` stream of ``seed`` through the one rollout driver;
    returns outcome counts and mean steps."""
    out = run_episodes(env, episode_seeds(seed, "test", 0, episodes), ExpertHooks(env, FSMExpert(cfg, env.num_envs)))
    outcomes = {k: (FAILURE_NAMES[int(c)], int(n)) for k, (c, n) in enumerate(zip(out.failure, out.steps))}
    counts = Counter(o for o, _ in outcomes.values())
    succ_steps = [n for o, n in outcomes.values() if o == "success"]
    return {"episodes": episodes, "success_rate": counts["success"] / episodes, "outcomes": dict(counts),
            "mean_steps_to_success": sum(succ_steps) / max(1, len(succ_steps)),
            "frames_per_s": out.scene_steps / out.seconds, "per_episode": outcomes}


def main(args: ExpertBackendsConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    tune_allocator()
    torch.set_num_threads(1)
    cfg = SimConfig()
    res = {}
    res["torch"] = run_expert(GraspEnv(cfg, num_envs=args.num_envs, seed=args.seed), cfg, args.episodes, args.seed)
    with BulletGraspEnv(cfg, num_envs=args.num_envs, seed=args.seed, workers=args.workers) as env:
        res["bullet"] = run_expert(env, cfg, args.episodes, args.seed)
    for name, r in res.items():
        print(f"{name:>7}: success {r['success_rate']:.1%} of {r['episodes']} | outcomes {r['outcomes']} | "
              f"mean steps to success {r['mean_steps_to_success']:.1f} | {r['frames_per_s']:.0f} frames/s")
    t_eps, b_eps = res["torch"]["per_episode"], res["bullet"]["per_episode"]
    both = [k for k in t_eps if t_eps[k][0] != b_eps[k][0]]
    print(f"episodes with different outcomes: {len(both)}: "
          + ", ".join(f"#{k} torch={t_eps[k][0]} bullet={b_eps[k][0]}" for k in both[:10]))


if __name__ == "__main__":
    main(tyro.cli(ExpertBackendsConfig, description=__doc__.splitlines()[0]))
