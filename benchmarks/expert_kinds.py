"""The FSM expert's success per target kind, in the torch simulator, pybullet and MuJoCo (issues 39, 53).

    python benchmarks/expert_kinds.py --engine torch --episodes 1000
    python benchmarks/expert_kinds.py --engine bullet --episodes 1000 --kinds cube cylinder
    python benchmarks/expert_kinds.py --engine torch --episodes 1000 --embodiment so101
    python benchmarks/expert_kinds.py --engine mujoco --episodes 200 --embodiment so101   # through the IK layer

Each kind runs alone (``SimConfig.target.kinds = (kind,)``, default randomization) on episode seeds 0..N-1 of
run seed 0's ``test`` stream through the one rollout driver, the expert reading privileged state (no images
are rendered: the expert does not look). Prints success and failure counts per kind. One torch thread.
"""

from __future__ import annotations

import argparse
import time

import torch

from graspsim import GraspEnv, SimConfig
from graspsim.config import TargetConfig
from graspsim.expert.fsm import FSMExpert
from graspsim.rollout import ExpertHooks, run_episodes
from graspsim.seeds import episode_seeds


class NoisyExpert(ExpertHooks):
    """The expert's label plus its exploration noise (none at ``noise_std`` 0)."""

    def act(self, obs, active):
        return self.policy.perturb(self.policy.act(self.env.privileged()))


def run(engine: str, kind: str, episodes: int, noise: float, workers: int, embodiment: str = "floating") -> dict:
    cfg = SimConfig(target=TargetConfig(kinds=(kind,)), embodiment=embodiment)
    if engine == "torch":
        env = GraspEnv(cfg, num_envs=min(episodes, 250), seed=0, render_obs=False)
    elif engine == "mujoco":  # the SO-101's own model, contact physics, the expert's commands through the IK layer
        from graspsim.mujoco import MujocoGraspEnv

        env = MujocoGraspEnv(cfg, num_envs=1, seed=0, render_obs=False)
    else:
        from graspsim.bullet import BulletGraspEnv

        env = BulletGraspEnv(cfg, num_envs=min(episodes, 8), seed=0, workers=workers, render_obs=False)
    env.observe = lambda: {}  # the expert reads the true state only
    try:
        t0 = time.perf_counter()
        out = run_episodes(env, episode_seeds(0, "test", 0, episodes),
                           NoisyExpert(env, FSMExpert(cfg, num_envs=env.num_envs, noise_std=noise)))
    finally:
        env.close()
    return {"engine": engine, "embodiment": embodiment, "kind": kind, "episodes": episodes, "success": float(out.success.mean()),
            "failures": out.failure_counts(), "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("torch", "bullet", "mujoco"), default="torch")
    ap.add_argument("--kinds", nargs="+", default=["sphere", "cube", "cylinder"])
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--noise", type=float, default=0.0, help="exploration noise std (m/s), as collect uses")
    ap.add_argument("--workers", type=int, default=0, help="pybullet worker processes")
    ap.add_argument("--embodiment", default="floating", help="simulator embodiment preset (floating, so101)")
    a = ap.parse_args()
    if a.episodes <= 0:
        ap.error(f"--episodes must be a positive count; got {a.episodes}")
    if a.workers < 0:
        ap.error(f"--workers must be 0 or more; got {a.workers}")
    if not a.noise >= 0:
        ap.error(f"--noise must be a non-negative std (m/s); got {a.noise}")
    for k in a.kinds:
        TargetConfig(kinds=(k,))  # an unknown kind fails here, naming it
    try:
        SimConfig(embodiment=a.embodiment)
    except ValueError as e:
        ap.error(str(e))
    torch.set_num_threads(1)
    for kind in a.kinds:
        r = run(a.engine, kind, a.episodes, a.noise, a.workers, a.embodiment)
        print(f"{r['engine']:6} {r['embodiment']:8} {r['kind']:8} {r['episodes']} episodes: success {r['success']:.3f} "
              f"{r['failures']} ({r['seconds']:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
