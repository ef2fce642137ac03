"""FSM expert on identical scenes in both backends: success rate, failure causes, episode length.

    python benchmarks/expert_backends.py --episodes 100 --num-envs 8 --workers 2

Episode k uses the scene drawn by ``sample_scenes`` from a generator seeded with ``seed + k``, in the
batched torch simulator and in the pybullet backend (Franka Panda, contact physics). This is the
reference for a learned policy evaluated in pybullet: what the privileged expert itself achieves there.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass

import torch
import tyro

from expert import FSMExpert
from graspsim import FAILURE_NAMES, GraspEnv, SimConfig, State, sample_scenes
from graspsim.bullet import BulletGraspEnv
from graspsim.perf import tune_allocator


@dataclass(frozen=True)
class ExpertBackendsConfig:
    """Run the FSM expert on the same seeded scenes in the torch simulator and in pybullet."""

    episodes: int = 100
    """Episodes per backend (episode k uses the scene of seed + k)."""
    num_envs: int = 8
    """Scenes stepped at once in each backend."""
    workers: int = 2
    """pybullet worker processes (0 = in-process)."""
    seed: int = 1000
    """Seed of episode 0."""

    def __post_init__(self) -> None:
        for name, least in (("episodes", 1), ("num_envs", 1), ("workers", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < least:
                raise ValueError(f"ExpertBackendsConfig.{name} must be an int >= {least}; got {v!r}")


def episode_scenes(cfg: SimConfig, seeds: list[int]) -> State:
    """One fresh scene per seed, stacked (B = len(seeds))."""
    parts = [sample_scenes(cfg, 1, torch.Generator().manual_seed(s)) for s in seeds]
    return State(**{k: torch.cat([getattr(p, k) for p in parts]) for k, _ in parts[0].items()})


def put_scenes(env, ids: torch.Tensor, scenes: State) -> None:
    """Place ``scenes`` into ``env`` at ``ids`` (pybullet: rebuild; torch: overwrite the state rows)."""
    if isinstance(env, BulletGraspEnv):
        env.reset_to(scenes, ids)
        return
    out = {}
    for k, v in env.state.items():
        v = v.clone()
        v[ids] = getattr(scenes, k)
        out[k] = v
    env.state = State(**out)


def run_expert(env, cfg: SimConfig, episodes: int, seed: int) -> dict:
    """Run ``episodes`` expert episodes (scene k from seed + k); returns outcome counts and mean steps."""
    n = env.num_envs
    expert = FSMExpert(cfg, n)
    next_ep = min(n, episodes)
    slot_ep = torch.arange(n)
    put_scenes(env, torch.arange(next_ep), episode_scenes(cfg, [seed + k for k in range(next_ep)]))
    active = torch.arange(n) < next_ep
    outcomes: dict[int, tuple[str, int]] = {}
    t0, frames = time.perf_counter(), 0
    while len(outcomes) < episodes:
        _, _, done, info = env.step(expert.act(env.privileged()))
        frames += n
        fin = torch.nonzero(done & active).flatten()
        if fin.numel() == 0:
            continue
        steps = env.privileged()["steps"]
        for i in fin.tolist():
            outcomes[int(slot_ep[i])] = (FAILURE_NAMES[int(info["failure"][i])], int(steps[i]))
        new = []
        for i in fin.tolist():
            if next_ep < episodes:
                slot_ep[i] = next_ep
                new.append(i)
                next_ep += 1
            else:
                active[i] = False
        if new:
            ids = torch.tensor(new)
            put_scenes(env, ids, episode_scenes(cfg, [seed + int(slot_ep[i]) for i in new]))
            expert.reset(ids)
        # finished slots with no new episode keep stepping harmlessly
    counts = Counter(o for o, _ in outcomes.values())
    succ_steps = [s for o, s in outcomes.values() if o == "success"]
    return {"episodes": episodes, "success_rate": counts["success"] / episodes, "outcomes": dict(counts),
            "mean_steps_to_success": sum(succ_steps) / max(1, len(succ_steps)),
            "frames_per_s": frames / (time.perf_counter() - t0), "per_episode": outcomes}


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
