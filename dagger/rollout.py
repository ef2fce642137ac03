"""Batched closed-loop rollouts: a per-scene mixture of the FSM expert and the mask-driven learner.

``rollout(env, seeds, ...)`` runs exactly one episode per entry of ``seeds``, ``env.num_envs`` at a time.
Scene ``k`` is built from its episode seed (:func:`graspsim.randomization.scenes_from_seeds`) by the one
rollout driver, :func:`graspsim.rollout.run_episodes`; this module supplies its hooks. Each step, for all
scenes at once:

1. the mask the learner sees: ground truth ``obs["mask"]`` or the vision module's prediction on
   ``obs["rgb"]`` (``mask_fn``), run only on the scenes still in an episode;
2. the expert's label: :func:`expert.expert_action` of the current privileged state (it labels every
   visited state, whoever drives);
3. the learner's action: one batched forward pass of ``policy(mask, gripper)``;
4. the executed action: ``torch.where(use_expert, expert (+ optional noise), learner)`` where
   ``use_expert`` is drawn once per episode, Bernoulli(``beta``) per scene.

Results come back in seed order. Held-out evaluation seeds are disjoint from training seeds by
construction (:mod:`graspsim.seeds`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from graspsim.expert import expert_action, exploration_noise
from graspsim import FAILURE_NAMES, SimConfig, rng
from graspsim.dataset import Episode, EpisodeRecorder
from graspsim.keys import GRIPPER, MASK, PRIVILEGED_KEYS, RGB, privileged_keys
from graspsim.rollout import Finished, Hooks, run_episodes
from graspsim.state import KIND_NAMES, KIND_SPHERE


MaskFn = Callable[[dict], Tensor]
PolicyFn = Callable[[Tensor, Tensor], Tensor]


def gt_masks(obs: dict) -> Tensor:
    """The simulator's exact target mask ``B,H,W`` bool."""
    return obs[MASK]


class SegmenterMasks:
    """``mask_fn`` that runs ``graspsim.vision.infer.Segmenter.predict_mask`` on ``obs["rgb"]``; ``precision`` is the
    one the segmenter runs in (``bf16`` or ``fp32``)."""

    def __init__(self, segmenter):
        self.segmenter = segmenter

    @property
    def precision(self) -> str:
        return self.segmenter.precision

    def __call__(self, obs: dict) -> Tensor:
        with torch.no_grad():
            return self.segmenter.predict_mask(obs[RGB])


def segmenter_masks(segmenter) -> MaskFn:
    """``mask_fn`` that runs ``graspsim.vision.infer.Segmenter.predict_mask`` on ``obs["rgb"]`` (:class:`SegmenterMasks`)."""
    return SegmenterMasks(segmenter)


def mask_precision(mask_fn: MaskFn) -> str | None:
    """The precision a :func:`segmenter_masks` function segments in (``bf16`` or ``fp32``); None for other mask
    functions (:func:`gt_masks`)."""
    return mask_fn.precision if isinstance(mask_fn, SegmenterMasks) else None


@dataclass
class RolloutResult:
    """Per-episode outcomes in seed order (numpy arrays of length N) plus optional recordings."""

    success: np.ndarray
    failure: np.ndarray
    steps: np.ndarray
    expert_driven: np.ndarray
    seeds: list[int]
    episodes: list[Episode] = field(default_factory=list)
    frames: dict[int, dict[str, list[np.ndarray]]] = field(default_factory=dict)
    scene_steps: int = 0
    seconds: float = 0.0
    kinds: np.ndarray | None = None
    """N target-kind names (``sphere``, ``cube``, ``cylinder``) in seed order, when the backend reports them."""

    def kind_success(self) -> dict[str, dict]:
        """Success per target kind: ``{kind: {"success": rate, "episodes": n}}`` ({} when no kinds are known)."""
        if self.kinds is None:
            return {}
        return {k: {"success": float(self.success[self.kinds == k].mean()), "episodes": int((self.kinds == k).sum())}
                for k in sorted(set(self.kinds.tolist()))}

    @property
    def num_episodes(self) -> int:
        return len(self.seeds)

    def success_rate(self, which: str = "all") -> float:
        sel = {"all": np.ones_like(self.success), "expert": self.expert_driven, "learner": ~self.expert_driven}[which]
        return float(self.success[sel].mean()) if sel.any() else float("nan")

    def failure_counts(self) -> dict[str, int]:
        return {name: int((self.failure == i).sum()) for i, name in enumerate(FAILURE_NAMES)}


class _MixtureHooks(Hooks):
    """The DAgger mixture as rollout hooks (see the module docstring)."""

    def __init__(self, env, policy, beta, mask_fn, expert_noise, recorder, capture, seeds):
        self.env, self.policy, self.beta, self.mask_fn = env, policy, beta, mask_fn
        self.expert_noise, self.recorder, self.seeds = expert_noise, recorder, seeds
        self.sim: SimConfig = env.cfg
        self.use_expert = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
        self.frames = {k: {RGB: [], MASK: []} for k in range(min(capture, len(seeds)))}
        self.episodes: dict[int, Episode] = {}
        self._step: tuple | None = None
        self.driven = np.zeros(len(seeds), bool)  # N: episode driven by the expert
        self.kinds = np.full(len(seeds), KIND_NAMES[KIND_SPHERE], dtype=object)  # N: target kind names

    def on_start(self, slots: Tensor, episodes: Tensor) -> None:
        # who drives is the episode's own draw (from its key), so it does not depend on the batch
        priv = self.env.privileged()
        key = priv["key"][slots]
        if "target_kind" in priv:
            codes = priv["target_kind"][slots].cpu().numpy()
            self.kinds[episodes.cpu().numpy() if isinstance(episodes, Tensor) else episodes] = [KIND_NAMES[int(c)]
                                                                                                for c in codes]
        self.use_expert[slots] = rng.uniform(key, 0, rng.TAG_EXPERT_CHOICE, 1)[:, 0].to(self.env.device) < self.beta

    def _masks(self, obs: dict, active: Tensor) -> Tensor:
        """``mask_fn`` on the active slots only: a slot whose episode is over and that no seed refills gets an empty
        mask, which nothing reads (its action is not executed into any episode, nor recorded). At the end of a run,
        when most slots have finished, this saves most of a vision net's work."""
        if self.mask_fn is gt_masks or bool(active.all()):
            return self.mask_fn(obs)
        idx = torch.nonzero(active).flatten()
        B = active.shape[0]
        sub = {k: v[idx] if isinstance(v, Tensor) and v.shape[:1] == (B,) else v for k, v in obs.items()}
        part = self.mask_fn(sub)
        mask = part.new_zeros((B, *part.shape[1:]))
        mask[idx.to(part.device)] = part
        return mask

    def act(self, obs: dict, active: Tensor) -> Tensor:
        sim, dev = self.sim, self.env.device
        mask = self._masks(obs, active)
        grip = obs[GRIPPER]
        priv = self.env.privileged()
        label = expert_action(priv, sim)  # B,sim.action_dim expert label for the current true state
        exp_exec = label
        if self.expert_noise > 0:  # the expert's one noise rule, in every phase (exploration_noise says why)
            exp_exec = exploration_noise(label, priv["key"], priv["steps"], self.expert_noise, sim.max_speed)
        if self.policy is not None and bool((active & ~self.use_expert).any()):
            action = torch.where(self.use_expert[:, None], exp_exec, self.policy(mask, grip).to(dev))
        else:
            action = exp_exec
        self._step = (mask, grip, label, priv)
        return action

    def record(self, obs: dict, action: Tensor, active: Tensor, slot_episode: Tensor) -> None:
        mask, grip, label, priv = self._step
        if self.recorder is not None:
            self.recorder.record(
                {MASK: mask, GRIPPER: grip}, label, {k: priv[k] for k in privileged_keys(self.sim.wrist)},
                {"executed_actions": action, "expert_driven": self.use_expert}, active=active.cpu(),
            )
        for k, fr in self.frames.items():  # at most `capture` slots
            slot = torch.nonzero(slot_episode == k).flatten()
            if slot.numel() and bool(active[slot[0]]):
                s = int(slot[0])
                fr[RGB].append(obs[RGB][s].permute(1, 2, 0).cpu().numpy())
                fr[MASK].append(mask[s].cpu().numpy())

    def on_end(self, fin: Finished) -> None:
        drv = self.use_expert[fin.slots.to(self.env.device)].cpu().numpy()
        self.driven[fin.episodes] = drv
        if self.recorder is not None:
            attrs = [{"success": bool(s), "failure": FAILURE_NAMES[int(c)], "seed": int(seed),
                      "episode_index": int(e), "expert_driven": bool(d)}
                     for e, seed, s, c, d in zip(fin.episodes, fin.seeds, fin.success, fin.failure, drv)]
            for e, ep in zip(fin.episodes, self.recorder.finish(fin.slots, attrs)):
                if "target_kind" in ep.privileged:  # with the wrist: the episode's target kind by name
                    ep.attrs["target_kind"] = KIND_NAMES[int(ep.privileged["target_kind"][0])]
                self.episodes[int(e)] = ep


def rollout(env, seeds: list[int], *, policy: PolicyFn | None = None, beta: float = 1.0,
            mask_fn: MaskFn = gt_masks, expert_noise: float = 0.0,
            record: bool = False, capture: int = 0, progress: Callable[[int], None] | None = None) -> RolloutResult:
    """Run one episode per seed with ``env`` (either backend) through :func:`graspsim.rollout.run_episodes`.

    Args:
        env: batched environment; its ``num_envs`` scenes run in parallel.
        seeds: episode seeds (one episode each; :func:`graspsim.seeds.episode_seeds`).
        policy: learner ``(mask B,H,W bool, gripper B,3) -> B,4`` in simulator units (``B,9`` and ``B,5`` with
            the wrist and the fingertip senses, ``B,5`` and ``B,5`` without them); None = expert only.
        beta: probability that an episode is driven by the expert (drawn once per episode from its own key,
            :mod:`graspsim.rng`, like every random number of an episode: the outcome of a seed does not depend
            on the batch it ran in).
        mask_fn: ``obs -> mask B,H,W bool`` (:func:`gt_masks` or :func:`segmenter_masks`).
        expert_noise: std (m/s) of Gaussian noise on the *executed* expert velocity (labels stay clean).
        record: keep every episode as a :class:`graspsim.dataset.Episode` (obs ``mask`` T,H,W uint8 and
            ``gripper`` T,3; ``actions`` = expert labels T,4; extras ``executed_actions`` T,4 and
            ``expert_driven`` T uint8; privileged ``PRIVILEGED_KEYS``, plus ``WRIST_PRIVILEGED_KEYS`` and the attribute
            ``target_kind`` with the wrist).
        capture: keep RGB and mask frames of the first ``capture`` episodes (for GIFs).
        progress: called with the number of finished episodes after each step where some finish.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1]; got {beta!r}")
    if policy is None and beta < 1.0:
        raise ValueError("rollout: beta < 1 needs a learner policy")
    if len(seeds) == 0:
        raise ValueError("rollout: no seeds given")
    recorder = EpisodeRecorder(env.num_envs, image_keys=(), capacity=env.cfg.max_steps) if record else None
    hooks = _MixtureHooks(env, policy, beta, mask_fn, expert_noise, recorder, capture, list(seeds))
    out = run_episodes(env, seeds, hooks, progress=progress)
    return RolloutResult(
        success=out.success, failure=out.failure, steps=out.steps, expert_driven=hooks.driven, seeds=list(seeds),
        episodes=[hooks.episodes[k] for k in sorted(hooks.episodes)], frames=hooks.frames,
        scene_steps=out.scene_steps, seconds=out.seconds, kinds=hooks.kinds.astype(str),
    )


__all__ = ["PRIVILEGED_KEYS", "RolloutResult", "gt_masks", "rollout",
           "mask_precision", "segmenter_masks"]
