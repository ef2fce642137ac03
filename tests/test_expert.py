"""The FSM expert: success rate on seeded randomized scenes, and correct labels from arbitrary states."""

from __future__ import annotations

import torch

from expert import PHASES, FSMExpert
from graspsim import FAILURE_NAMES, GraspEnv, SimConfig, failure_cause
from graspsim.config import RandomizationConfig


def _run(env: GraspEnv, expert: FSMExpert, steps: int) -> None:
    for _ in range(steps):
        env.step(expert.perturb(expert.act(env.privileged())))


def test_expert_succeeds_on_randomized_scenes():
    cfg = SimConfig()  # distractors, looks and dynamics randomization on (latency, gain, noise, slip)
    env = GraspEnv(cfg, num_envs=400, seed=2024, render_obs=False)
    expert = FSMExpert(cfg, 400)
    _run(env, expert, cfg.max_steps)
    rate = env.state.success.float().mean().item()
    codes = failure_cause(env.state)
    breakdown = {n: int((codes == i).sum()) for i, n in enumerate(FAILURE_NAMES)}
    assert rate >= 0.99, breakdown


def test_expert_with_noise_and_moving_target():
    cfg = SimConfig(randomization=RandomizationConfig(target_speed=(0.005, 0.02)))
    g = torch.Generator().manual_seed(0)
    env = GraspEnv(cfg, num_envs=200, seed=7, render_obs=False)
    expert = FSMExpert(cfg, 200, noise_std=0.01, generator=g)
    _run(env, expert, cfg.max_steps)
    assert env.state.success.float().mean().item() >= 0.95


def test_expert_recovers_from_states_a_learner_drove_into():
    """Random actions for a while (closing on nothing, pushing the sphere), then the expert takes over."""
    cfg = SimConfig(max_steps=200)
    env = GraspEnv(cfg, num_envs=200, seed=3, render_obs=False)
    g = torch.Generator().manual_seed(5)
    for _ in range(25):
        a = torch.rand(200, 4, generator=g) * 0.2 - 0.1
        a[:, 2] = torch.where(env.state.tcp_pos[:, 2] > 0.05, -0.1, a[:, 2])  # stay low, near the sphere
        a[:, 3] = torch.rand(200, generator=g) * 2 - 1
        env.step(a)
    took_over = ~env.state.done
    expert = FSMExpert(cfg, 200)
    _run(env, expert, cfg.max_steps - 25)
    rate = env.state.success[took_over].float().mean().item()
    assert took_over.sum() > 150 and rate >= 0.95


def test_expert_phases_and_labels():
    cfg = SimConfig(randomization=RandomizationConfig.none())
    env = GraspEnv(cfg, num_envs=3, seed=0, render_obs=False)
    priv = env.privileged()
    priv = dict(priv)
    tcp = priv["sphere_pos"].clone()
    tcp[0, 2] = 0.15  # high above: approach, descending
    tcp[1, 2] = 0.001  # at grasp height, aligned: grasp
    tcp[2, :2] += 0.04  # low and far: rise while moving over
    tcp[2, 2] = 0.005
    priv["tcp_pos"] = tcp
    expert = FSMExpert(cfg, 3)
    a = expert.act(priv)
    assert [PHASES[p] for p in expert.phase] == ["APPROACH", "GRASP", "APPROACH"]
    assert a[0, 2] < 0 and a[0, 3] < 0  # descend, open
    assert a[1, 3] > 0 and a[1, :3].abs().max() == 0  # close, still
    assert a[2, 2] > 0  # rise before moving sideways near the table
    assert (a[:, :3].abs() <= cfg.max_speed + 1e-6).all()
    held = dict(priv, held=torch.tensor([True, False, False]), close_cmd=torch.tensor([True, True, False]))
    a = expert.act(held)
    assert PHASES[expert.phase[0]] == "LIFT" and a[0, 2] > 0 and a[0, 3] > 0


def test_exploration_noise_keeps_success_and_spares_the_grasp():
    cfg = SimConfig()
    env = GraspEnv(cfg, num_envs=300, seed=2, render_obs=False)
    expert = FSMExpert(cfg, 300, noise_std=0.05, generator=torch.Generator().manual_seed(0))
    perturbed_high = False
    for _ in range(cfg.max_steps):
        clean = expert.act(env.privileged())
        noisy = expert.perturb(clean)
        not_approach = expert.phase != PHASES.index("APPROACH")
        assert torch.equal(noisy[not_approach], clean[not_approach])  # no noise while grasping/lifting
        perturbed_high |= bool((noisy != clean).any())
        env.step(noisy)
    assert perturbed_high
    assert env.state.success.float().mean().item() >= 0.99
