"""The FSM expert: success rate on seeded randomized scenes, and correct labels from arbitrary states."""

from __future__ import annotations

import torch

from graspsim.expert import PHASES, FSMExpert
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
    env = GraspEnv(cfg, num_envs=200, seed=7, render_obs=False)
    expert = FSMExpert(cfg, 200, noise_std=0.01)
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
    env = GraspEnv(cfg, num_envs=5, seed=0, render_obs=False)
    priv = env.privileged()
    priv = dict(priv)
    tcp = priv["sphere_pos"].clone()
    tcp[0, 2] = 0.15  # high above: approach, descending
    tcp[1, 2] = 0.001  # at grasp height, aligned: grasp
    tcp[2, :2] += 0.04  # low and far: move over without descending
    tcp[2, 2] = 0.005
    tcp[3, 1] -= 0.016  # low with the sphere under the +y finger: rise
    tcp[3, 2] = 0.005
    tcp[4, 0] += 0.004  # low, 4 mm off but inside the open gap: keep descending while centring
    tcp[4, 2] = 0.006
    priv["tcp_pos"] = tcp
    expert = FSMExpert(cfg, 5)
    a = expert.act(priv)
    assert [PHASES[p] for p in expert.phase] == ["APPROACH", "GRASP", "APPROACH", "APPROACH", "APPROACH"]
    assert a[0, 2] < 0 and a[0, 3] < 0  # descend, open
    assert a[1, 3] > 0 and a[1, :3].abs().max() == 0  # close, still
    assert a[2, 2] == 0 and a[2, 0] < 0 and a[2, 1] < 0  # hold height, move over
    assert a[3, 2] > 0  # rise: a finger is over the sphere
    assert a[4, 2] < 0 and a[4, 0] < 0  # descend and centre
    assert (a[:, :3].abs() <= cfg.max_speed + 1e-6).all()
    held = dict(priv, held=torch.tensor([True, False, False, False, False]),
                close_cmd=torch.tensor([True, True, False, False, False]))
    a = expert.act(held)
    assert PHASES[expert.phase[0]] == "LIFT" and a[0, 2] > 0 and a[0, 3] > 0


def test_exploration_noise_keeps_success_and_spares_the_grasp():
    cfg = SimConfig()
    env = GraspEnv(cfg, num_envs=300, seed=2, render_obs=False)
    expert = FSMExpert(cfg, 300, noise_std=0.05)
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


def test_contact_sense_reports_table_contact_only():
    """obs["gripper"][:, 2] is 1 exactly when the fingertips are within contact_height of the table."""
    cfg = SimConfig(randomization=RandomizationConfig.none())
    env = GraspEnv(cfg, num_envs=2, seed=0, render_obs=False)
    env.reset()
    assert env.observe()["gripper"][:, 2].tolist() == [0.0, 0.0]  # episodes start 14-22 cm up
    down = torch.tensor([[0.0, 0.0, -cfg.max_speed, -1.0], [0.0, 0.0, 0.0, -1.0]])
    for _ in range(40):
        env.step(down)
    z = env.privileged()["tcp_pos"][:, 2]
    assert float(z[0]) <= cfg.contact_height < float(z[1])
    assert env.observe()["gripper"][:, 2].tolist() == [1.0, 0.0]


def test_expert_closes_only_in_contact_and_centred():
    """The grasp trigger is the contact sense plus centring within CLOSE_TOL, both perceivable by a learner."""
    from graspsim.expert.fsm import CLOSE_TOL, GRASP, expert_phase_and_action

    cfg = SimConfig()
    r = torch.full((4,), 0.007)
    tcp = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.004], [CLOSE_TOL[0] + 0.002, 0.0, 0.0], [0.0, CLOSE_TOL[1] - 0.001, 0.0]])
    priv = {"tcp_pos": tcp, "sphere_pos": torch.tensor([[0.0, 0.0, 0.007]]).repeat(4, 1), "sphere_radius": r,
            "sphere_vel": torch.zeros(4, 2), "finger_width": torch.full((4,), cfg.open_width),
            "held": torch.zeros(4, dtype=torch.bool), "close_cmd": torch.zeros(4, dtype=torch.bool)}
    phase, action = expert_phase_and_action(priv, cfg)
    assert (phase == GRASP).tolist() == [True, False, False, True]
    assert (action[:, 3] > 0).tolist() == [True, False, False, True]
    assert float(action[1, 2]) < 0  # above the table and centred: keep descending to contact
