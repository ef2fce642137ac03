"""What segmenting only the scenes still in an episode saves in a closed-loop rollout with predicted masks.

    python benchmarks/rollout_idle_slots.py --scenes 64 --num-envs 64 --rounds 3 --threads 1 \
        [--vision vision/assets/segnet_so101.pt --policy dagger/assets/policy_so101.pt]

``graspsim.dagger.rollout.rollout`` runs its mask function on the active slots only (since 2026-12-03): at the end of
a run, when most episodes are over and no seed refills their slots, the vision net no longer segments frames nobody
reads. This times the same rollout both ways, interleaved round by round in one process:

- ``active_only``: the library as it is;
- ``every_slot``: the rule before, the mask function on all ``num_envs`` frames each step (this script swaps the
  rollout hook's ``_masks`` for the whole-batch call while it times that side).

Both sides run the same episode seeds (the ``test`` stream) with the learner alone (``beta=0``), on the scenes the
control net was trained for (its embodiment and target kinds, the simulator's other defaults); the default nets are
the shipped SO-101 pair, and a pipeline run's pair (``runs/<name>/vision/checkpoint.pt``, ``runs/<name>/dagger/best.pt``)
times the floating gripper. Prints one JSON object: the median seconds of each side, the ratio
``every_slot / active_only``, whether the outcomes (success and steps of every episode) agree, the mean and longest
episode, and the CPU.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

from graspsim.validate import non_negative_int, positive_int
from so101_driver_vs_backend import cpu_name  # benchmarks/ is the script's folder

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class RolloutIdleSlotsConfig:
    """Time a predicted-mask rollout with the vision net on active slots only against every slot."""

    vision: Path = REPO / "vision" / "assets" / "segnet_so101.pt"
    """Vision checkpoint whose masks the control net reads."""
    policy: Path = REPO / "dagger" / "assets" / "policy_so101.pt"
    """Control checkpoint; the scenes are those of the embodiment and target kinds it was trained for."""
    scenes: int = 64
    """Episodes per side and round (one seed each)."""
    num_envs: int = 64
    """Scenes stepped at once; with ``scenes == num_envs`` no slot is refilled, the case where the saving is largest."""
    rounds: int = 3
    """Timed rounds per side (the sides alternate); the medians are reported."""
    threads: int = 1
    """torch.set_num_threads (0 = leave the default)."""
    seed: int = 0
    """Seed of the episode stream (``graspsim.seeds.episode_seeds(seed, "test", ...)``)."""

    def __post_init__(self) -> None:
        for name in ("scenes", "num_envs", "rounds"):
            positive_int("RolloutIdleSlotsConfig", name, getattr(self, name))
        non_negative_int("RolloutIdleSlotsConfig", "threads", self.threads)
        for name in ("vision", "policy"):  # before any net is loaded or any scene is stepped
            if not Path(getattr(self, name)).is_file():
                raise ValueError(f"RolloutIdleSlotsConfig.{name}: no such checkpoint {getattr(self, name)}")


def main(cfg: RolloutIdleSlotsConfig) -> dict:
    from graspsim import SimConfig
    from graspsim.config import TargetConfig
    from graspsim.dagger import rollout as rollout_module
    from graspsim.dagger.evaluate import _make_env
    from graspsim.dagger.masks import check_vision_kinds, make_mask_fn
    from graspsim.dagger.policy import MaskPolicy
    from graspsim.seeds import episode_seeds

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    policy = MaskPolicy.from_checkpoint(cfg.policy, "cpu")
    sim = SimConfig(embodiment=policy.trained_embodiment or "floating",
                    target=TargetConfig(kinds=tuple(policy.trained_kinds or ("sphere",))))
    check_vision_kinds(cfg.vision, sim)
    mask_fn = make_mask_fn("predicted", cfg.vision, torch.device("cpu"))
    seeds = episode_seeds(cfg.seed, "test", 0, cfg.scenes)
    hooks = rollout_module._MixtureHooks
    active_only = hooks._masks

    def every_slot(self, obs, active):
        return self.mask_fn(obs)

    seconds: dict[str, list[float]] = {"active_only": [], "every_slot": []}
    outcomes: dict[str, tuple] = {}
    try:
        for _ in range(cfg.rounds):
            for side, rule in (("active_only", active_only), ("every_slot", every_slot)):
                hooks._masks = rule
                env = _make_env("torch", sim, cfg.num_envs, "cpu")
                t = time.perf_counter()
                res = rollout_module.rollout(env, seeds, policy=policy.act, beta=0.0, mask_fn=mask_fn)
                seconds[side].append(time.perf_counter() - t)
                outcomes[side] = (res.success.tolist(), res.steps.tolist())
    finally:
        hooks._masks = active_only
    med = {k: statistics.median(v) for k, v in seconds.items()}
    success, steps = outcomes["active_only"]
    return {"vision": str(cfg.vision), "policy": str(cfg.policy), "embodiment": sim.embodiment,
            "kinds": list(sim.target.kinds), "scenes": cfg.scenes, "num_envs": cfg.num_envs, "rounds": cfg.rounds,
            "threads": torch.get_num_threads(), "median_seconds": {k: round(v, 2) for k, v in med.items()},
            "ratio_every_slot_to_active_only": round(med["every_slot"] / med["active_only"], 2),
            "outcomes_agree": outcomes["active_only"] == outcomes["every_slot"],
            "success": round(sum(success) / len(success), 4), "mean_steps": round(sum(steps) / len(steps), 2),
            "max_steps": max(steps), "cpu": cpu_name(),
            "precision": rollout_module.mask_precision(mask_fn)}


if __name__ == "__main__":
    print(json.dumps(main(tyro.cli(RolloutIdleSlotsConfig)), indent=2))
