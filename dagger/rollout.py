"""Batched closed-loop rollouts: a per-scene mixture of the FSM expert and the mask-driven learner.

``rollout(env, seeds, ...)`` runs exactly one episode per entry of ``seeds``, ``env.num_envs`` at a time.
Scene ``k`` is built exactly as ``GraspEnv(cfg, num_envs=1, seed=seeds[k])`` builds it
(:func:`expert.collect.seeded_scenes`). Each step, for all scenes at once:

1. the mask the learner sees: ground truth ``obs["mask"]`` or the vision module's prediction on
   ``obs["rgb"]`` (``mask_fn``);
2. the expert's label: :func:`expert.expert_action` of the current privileged state (it labels every
   visited state, whoever drives);
3. the learner's action: one batched forward pass of ``policy(mask, gripper)``;
4. the executed action: ``torch.where(use_expert, expert (+ optional noise), learner)`` where
   ``use_expert`` is drawn once per episode, Bernoulli(``beta``) per scene.

Finished scenes (success or timeout) are replaced by the next seeds (partial reset by index); when the
seeds run out, their slots idle until the last episode ends, so every seed contributes exactly one
episode (no bias towards short episodes). Results come back in seed order.

Held-out evaluation seeds are disjoint from training seeds by construction (:func:`episode_seeds`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from expert import expert_action
from expert.collect import seeded_scenes
from graspsim import FAILURE_NAMES, GraspEnv, SimConfig, State, observe
from graspsim.dataset import Episode, EpisodeRecorder

SPLITS = {"train": 0x747261696E, "heldout": 0x68656C64, "test": 0x74657374}
"""Stream tags mixed into scene seeds: DAgger training rollouts ("train"), DAgger's per-iteration validation
("heldout") and eval-sim ("test") draw from different ``numpy.random.SeedSequence`` streams, so their
scenes never share a seed (collision odds ~2^-63)."""
PRIVILEGED_KEYS = ("tcp_pos", "sphere_pos", "sphere_radius", "finger_width", "held")

MaskFn = Callable[[dict], Tensor]
PolicyFn = Callable[[Tensor, Tensor], Tensor]


def episode_seeds(seed: int, split: str, start: int, n: int) -> list[int]:
    """Scene seeds ``start .. start+n-1`` of run ``seed`` in ``split`` ("train", "heldout" or "test")."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}; got {split!r}")
    out = []
    for k in range(start, start + n):
        a, b = np.random.SeedSequence([int(seed), SPLITS[split], int(k)]).generate_state(2, np.uint32)
        out.append(int((int(a) << 31) ^ int(b)))
    return out


def gt_masks(obs: dict) -> Tensor:
    """The simulator's exact target mask ``B,H,W`` bool."""
    return obs["mask"]


def segmenter_masks(segmenter) -> MaskFn:
    """``mask_fn`` that runs ``vision.infer.Segmenter.predict_mask`` on ``obs["rgb"]``."""
    def fn(obs: dict) -> Tensor:
        with torch.no_grad():
            return segmenter.predict_mask(obs["rgb"])
    return fn


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

    @property
    def num_episodes(self) -> int:
        return len(self.seeds)

    def success_rate(self, which: str = "all") -> float:
        sel = {"all": np.ones_like(self.success), "expert": self.expert_driven, "learner": ~self.expert_driven}[which]
        return float(self.success[sel].mean()) if sel.any() else float("nan")

    def failure_counts(self) -> dict[str, int]:
        return {name: int((self.failure == i).sum()) for i, name in enumerate(FAILURE_NAMES)}


def _put(state: State, ids: Tensor, fresh: State) -> State:
    return State(**{k: v.index_copy(0, ids, getattr(fresh, k)) for k, v in state.items()})


def _reset_slots(env, ids: Tensor, fresh: State) -> dict | None:
    """Put ``fresh`` scenes into slots ``ids``. GraspEnv: returns None (the loop renders every scene once per
    step, which is cheaper than an extra small render call); other backends: their ``reset_to`` observation."""
    if isinstance(env, GraspEnv):
        env.state = _put(env.state, ids, fresh)
        return None
    return env.reset_to(fresh, ids)


def rollout(env, seeds: list[int], *, policy: PolicyFn | None = None, beta: float = 1.0,
            mask_fn: MaskFn = gt_masks, generator: torch.Generator | None = None, expert_noise: float = 0.0,
            record: bool = False, capture: int = 0, progress: Callable[[int], None] | None = None) -> RolloutResult:
    """Run one episode per seed with ``env`` (GraspEnv or a backend with ``reset_to``); see the module doc.

    Args:
        env: batched environment; its ``num_envs`` scenes run in parallel, its generator drives dynamics noise.
        seeds: scene seeds (one episode each).
        policy: learner ``(mask B,H,W bool, gripper B,3) -> B,4`` in simulator units; None = expert only.
        beta: probability that an episode is driven by the expert (per scene, drawn at episode start).
        mask_fn: ``obs -> mask B,H,W bool`` (:func:`gt_masks` or :func:`segmenter_masks`).
        generator: draws the Bernoulli choices and the expert noise (seeded by the caller).
        expert_noise: std (m/s) of Gaussian noise on the *executed* expert velocity (labels stay clean).
        record: keep every episode as a :class:`graspsim.dataset.Episode` (obs ``mask`` T,H,W uint8 and
            ``gripper`` T,3; ``actions`` = expert labels T,4; extras ``executed_actions`` T,4 and
            ``expert_driven`` T uint8; privileged ``PRIVILEGED_KEYS``).
        capture: keep RGB and mask frames of the first ``capture`` episodes (for GIFs).
        progress: called with the number of finished episodes after each step where some finish.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1]; got {beta!r}")
    if policy is None and beta < 1.0:
        raise ValueError("rollout: beta < 1 needs a learner policy")
    N, B = len(seeds), env.num_envs
    if N == 0:
        raise ValueError("rollout: no seeds given")
    sim: SimConfig = env.cfg
    dev = env.device
    g = generator if generator is not None else torch.Generator(device=dev).manual_seed(0)
    t0 = time.perf_counter()

    success = np.zeros(N, bool)
    failure = np.zeros(N, np.int64)
    steps = np.zeros(N, np.int64)
    driven = np.zeros(N, bool)
    episodes: dict[int, Episode] = {}
    frames: dict[int, dict[str, list[np.ndarray]]] = {k: {"rgb": [], "mask": []} for k in range(min(capture, N))}

    n0 = min(B, N)
    slot_ep = torch.full((B,), -1, dtype=torch.long)  # episode index per slot (-1: idle)
    slot_ep[:n0] = torch.arange(n0)
    active = torch.zeros(B, dtype=torch.bool, device=dev)
    active[:n0] = True
    ids0 = torch.arange(n0, device=dev)
    torch_env = isinstance(env, GraspEnv)
    obs = _reset_slots(env, ids0, seeded_scenes(sim, seeds[:n0], dev))
    if torch_env:  # render once per step at the top of the loop (after resets), not inside step()
        saved_render, env.render_obs = env.render_obs, False
    next_k = n0
    use_expert = torch.rand(B, generator=g, device=dev) < beta
    recorder = EpisodeRecorder(B, image_keys=(), capacity=sim.max_steps) if record else None
    scene_steps, finished_count = 0, 0

    while bool(active.any()):
        if torch_env:
            obs = observe(env.state, sim, env.generator)
        mask = mask_fn(obs)
        grip = obs["gripper"]
        priv = env.privileged()
        label = expert_action(priv, sim)  # B,4 expert label for the current true state
        exp_exec = label
        if expert_noise > 0:
            exp_exec = label.clone()
            noise = torch.randn((B, 3), generator=g, device=dev) * expert_noise
            exp_exec[:, :3] = (exp_exec[:, :3] + noise).clamp(-sim.max_speed, sim.max_speed)
        if policy is not None and bool((active & ~use_expert).any()):
            learner = policy(mask, grip).to(dev)
            action = torch.where(use_expert[:, None], exp_exec, learner)
        else:
            action = exp_exec
        if recorder is not None:
            recorder.record(
                {"mask": mask, "gripper": grip}, label, {k: priv[k] for k in PRIVILEGED_KEYS},
                {"executed_actions": action, "expert_driven": use_expert}, active=active.cpu(),
            )
        for k, fr in frames.items():  # at most `capture` slots
            slot = torch.nonzero(slot_ep == k).flatten()
            if slot.numel() and bool(active[slot[0]]):
                s = int(slot[0])
                fr["rgb"].append(obs["rgb"][s].permute(1, 2, 0).cpu().numpy())
                fr["mask"].append(mask[s].cpu().numpy())
        step_obs, _, done, info = env.step(action)
        if not torch_env:
            obs = step_obs
        scene_steps += int(active.sum())
        fin = done & active
        if bool(fin.any()):
            ids = torch.nonzero(fin).flatten()
            ids_cpu = ids.cpu()
            eps = slot_ep[ids_cpu]
            succ = info["success"][ids].cpu().numpy()
            fail = info["failure"][ids].cpu().numpy()
            nstep = env.state.steps[ids].cpu().numpy() if hasattr(env, "state") else np.zeros(len(ids), np.int64)
            drv = use_expert[ids].cpu().numpy()
            e_np = eps.numpy()
            success[e_np], failure[e_np], steps[e_np], driven[e_np] = succ, fail, nstep, drv
            if recorder is not None:
                attrs = [{"success": bool(s), "failure": FAILURE_NAMES[int(c)], "seed": int(seeds[int(e)]),
                          "episode_index": int(e), "expert_driven": bool(d)}
                         for e, s, c, d in zip(e_np, succ, fail, drv)]
                for e, ep in zip(e_np, recorder.finish(ids_cpu, attrs)):
                    episodes[int(e)] = ep
            finished_count += len(ids)
            # refill from the remaining seeds; other finished slots go idle
            n_new = min(len(ids), N - next_k)
            active[ids] = False
            slot_ep[ids_cpu] = -1
            if n_new:
                new_ids = ids[:n_new]
                slot_ep[new_ids.cpu()] = torch.arange(next_k, next_k + n_new)
                new_obs = _reset_slots(env, new_ids, seeded_scenes(sim, seeds[next_k:next_k + n_new], dev))
                if new_obs is not None:
                    obs = new_obs
                next_k += n_new
                active[new_ids] = True
                use_expert[new_ids] = torch.rand(n_new, generator=g, device=dev) < beta
            if progress is not None:
                progress(finished_count)

    if torch_env:
        env.render_obs = saved_render
    return RolloutResult(
        success=success, failure=failure, steps=steps, expert_driven=driven, seeds=list(seeds),
        episodes=[episodes[k] for k in sorted(episodes)],
        frames={k: {kk: vv for kk, vv in fr.items()} for k, fr in frames.items()},
        scene_steps=scene_steps, seconds=time.perf_counter() - t0,
    )


__all__ = ["PRIVILEGED_KEYS", "RolloutResult", "SPLITS", "episode_seeds", "gt_masks", "rollout",
           "segmenter_masks"]
