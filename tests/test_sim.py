"""Behaviour of the batched simulator: determinism, resets, physics invariants, renderer exactness."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pixel_ref import reference_mask

from graspsim import FAILURE_NAMES, GraspEnv, SimConfig, failure_cause
from graspsim.config import RandomizationConfig
from graspsim.render import render
from graspsim.state import KIND_BOX, KIND_NONE, KIND_SPHERE

NOMINAL = SimConfig(randomization=RandomizationConfig.none())


def _grasp_at(offset_xy, cfg=NOMINAL, lift_steps=10):
    """Place the fingertips above the sphere with an xy offset, descend, close, lift. Returns the env."""
    env = GraspEnv(cfg, num_envs=len(offset_xy), seed=0, render_obs=False)
    tcp = env.state.sphere_pos.clone()
    tcp[:, :2] += torch.tensor(offset_xy, dtype=torch.float32)
    tcp[:, 2] = 0.05
    env.state = env.state.replace(tcp_pos=tcp)
    a = torch.zeros(len(offset_xy), 4)
    a[:, 3] = -1.0
    for _ in range(10):
        a[:, 2] = ((0.002 - env.state.tcp_pos[:, 2]) / cfg.dt * 0.5).clamp(-cfg.max_speed, cfg.max_speed)
        env.step(a)
    a[:] = 0.0
    a[:, 3] = 1.0
    for _ in range(3):
        env.step(a)
    a[:, 2] = cfg.max_speed
    for _ in range(lift_steps):
        env.step(a)
    return env


def test_same_seed_identical_tensors():
    cfg = SimConfig()
    envs = [GraspEnv(cfg, num_envs=8, seed=7) for _ in range(2)]
    obs = [e.reset(seed=3) for e in envs]
    g = torch.Generator().manual_seed(0)
    actions = [torch.rand(8, 4, generator=g) * 0.2 - 0.1 for _ in range(5)]
    for a in actions:
        obs = [e.step(a)[0] for e in envs]
    for k in ("rgb", "mask", "gripper"):
        assert torch.equal(obs[0][k], obs[1][k]), k
    for (name, v0), (_, v1) in zip(envs[0].state.items(), envs[1].state.items()):
        assert torch.equal(v0, v1), name


def test_different_seed_differs():
    a = GraspEnv(num_envs=4, seed=1).state
    b = GraspEnv(num_envs=4, seed=2).state
    assert not torch.equal(a.sphere_pos, b.sphere_pos)


def test_partial_reset_touches_only_given_scenes():
    env = GraspEnv(SimConfig(), num_envs=6, seed=0)
    for _ in range(3):
        env.step(torch.full((6, 4), 0.05))
    before = env.state.clone()
    env.reset(env_ids=[1, 4])
    for name, v in env.state.items():
        old = getattr(before, name)
        for i in (0, 2, 3, 5):
            assert torch.equal(v[i], old[i]), f"{name}[{i}] changed"
    assert int(env.state.steps[1]) == 0 and int(env.state.steps[4]) == 0
    assert not torch.equal(env.state.sphere_pos[1], before.sphere_pos[1])
    # bool mask form, and bad ids
    env.reset(env_ids=torch.tensor([True, False, False, False, False, False]))
    assert int(env.state.steps[0]) == 0 and int(env.state.steps[2]) == 3
    with pytest.raises(ValueError, match="env_ids"):
        env.reset(env_ids=[6])


def test_reset_with_seeds_builds_the_scene_of_each_seed_whatever_the_batch():
    from graspsim.randomization import scenes_from_seeds

    env = GraspEnv(SimConfig(), num_envs=4, seed=0, render_obs=False)
    env.reset([3, 1], seeds=[11, 12])  # ids in the order of their seeds
    alone = GraspEnv(SimConfig(), num_envs=1, seed=12, render_obs=False).state
    assert torch.equal(env.state.sphere_pos[1], alone.sphere_pos[0])
    pair = scenes_from_seeds(SimConfig(), [12, 11])
    assert torch.equal(env.state.sphere_pos[3], pair.sphere_pos[1])
    with pytest.raises(ValueError, match="seeds"):
        env.reset([0, 1], seeds=[5])
    with pytest.raises(ValueError, match="distinct"):
        env.reset([0, 0], seeds=[5, 6])


def test_driver_runs_one_episode_per_seed_and_an_episode_does_not_depend_on_its_batch():
    """Every random number of an episode (scene, action noise, slip, image noise, expert noise) comes from its
    episode seed, so the same seeds give the same outcomes and trajectories at any batch size."""
    from graspsim.expert import FSMExpert
    from graspsim.rollout import ExpertHooks, run_episodes
    from graspsim.seeds import episode_seeds

    seeds = episode_seeds(0, "test", 0, 10)
    outs, images = [], []
    for B in (3, 10):
        env = GraspEnv(SimConfig(), num_envs=B, seed=B)  # the env seed no longer matters for seeded episodes
        ends = []

        class Hooks(ExpertHooks):
            def on_end(self, fin):
                ends.extend(fin.episodes.tolist())

            def record(self, obs, action, active, slot_episode):
                slot = int(torch.nonzero(slot_episode == 0).flatten()[0]) if (slot_episode == 0).any() else None
                if slot is not None:
                    first.append((obs["rgb"][slot].clone(), action[slot].clone()))

        first = []
        out = run_episodes(env, seeds, Hooks(env, FSMExpert(env.cfg, B, noise_std=0.02)))
        assert sorted(ends) == list(range(10)) and out.seeds == seeds
        assert env.render_obs  # the render-off context restored the setting
        outs.append(out)
        images.append(first)
    assert outs[0].success.tolist() == outs[1].success.tolist()
    assert outs[0].steps.tolist() == outs[1].steps.tolist() and outs[0].success.mean() >= 0.8
    assert len(images[0]) == len(images[1])
    for (im_a, act_a), (im_b, act_b) in zip(*images):  # episode 0, step by step: same image, same action
        assert torch.equal(im_a, im_b) and torch.equal(act_a, act_b)


def test_centred_grasp_succeeds_off_centre_fails():
    env = _grasp_at([(0.0, 0.0), (0.004, 0.0), (0.0, 0.006), (0.012, 0.0), (0.025, 0.0), (0.0, 0.035)])
    s = env.state
    assert s.success.tolist() == [True, True, True, False, False, False]
    assert s.held[:3].all() and not s.held[3:].any()
    # held sphere moved up with the gripper, with the same offset
    assert torch.allclose(s.sphere_pos[:3], s.tcp_pos[:3] + s.held_offset[:3])
    assert (s.sphere_pos[:3, 2] - s.sphere_radius[:3] >= NOMINAL.lift_height).all()
    codes = failure_cause(s)
    assert [FAILURE_NAMES[c] for c in codes[:3]] == ["success"] * 3
    assert all(FAILURE_NAMES[c] in ("missed_grasp", "pushed_away") for c in codes[3:])


def test_lift_below_threshold_is_not_success():
    env = _grasp_at([(0.0, 0.0)], lift_steps=3)  # ~3 cm of lift
    assert env.state.held.all() and not env.state.success.any()


def test_sphere_does_not_move_unless_touched():
    cfg = SimConfig(randomization=RandomizationConfig(max_distractors=3))
    env = GraspEnv(cfg, num_envs=32, seed=5, render_obs=False)
    start = env.state.sphere_pos.clone()
    g = torch.Generator().manual_seed(1)
    for _ in range(20):  # random motion high above the table, gripper open and closing
        a = torch.rand(32, 4, generator=g) * 0.2 - 0.1
        a[:, 2] = 0.05
        env.step(a)
    assert torch.equal(env.state.sphere_pos, start)
    assert not env.state.pushed.any()


def test_descending_onto_sphere_pushes_it_and_fingers_stay_above_table():
    env = GraspEnv(NOMINAL, num_envs=1, seed=0, render_obs=False)
    tcp = env.state.sphere_pos.clone()
    tcp[:, 1] -= NOMINAL.open_width / 2 + NOMINAL.finger_thickness / 2  # finger 0 right above the sphere
    tcp[:, 2] = 0.03
    env.state = env.state.replace(tcp_pos=tcp)
    start = env.state.sphere_pos.clone()
    for _ in range(10):
        env.step(torch.tensor([[0.0, 0.0, -0.1, -1.0]]))
    assert env.state.tcp_pos[0, 2] >= 0.0
    assert env.state.pushed.all()
    moved = (env.state.sphere_pos - start)[0]
    assert moved[:2].norm() > 0.005 and abs(float(moved[2])) < 1e-6  # shoved sideways, not into the table


def test_timeout_sets_done():
    cfg = SimConfig(max_steps=5, randomization=RandomizationConfig.none())
    env = GraspEnv(cfg, num_envs=2, seed=0, render_obs=False)
    for i in range(5):
        _, _, done, info = env.step(torch.zeros(2, 4))
    assert done.all() and info["timeout"].all() and not info["success"].any()


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.full((2, 4), float("nan")), "NaN or inf"),
        (torch.tensor([[0.0, 0.0, float("inf"), 0.0], [0.0] * 4]), "NaN or inf"),
        (torch.zeros(2, 3), "shape"),
        (torch.zeros(3, 4), "shape"),
        (torch.zeros(2, 4, dtype=torch.long), "floating-point"),
        (np.zeros((2, 4)), "torch.Tensor"),
    ],
)
def test_bad_actions_raise(bad, match):
    env = GraspEnv(num_envs=2, seed=0, render_obs=False)
    before = env.state.clone()
    with pytest.raises(ValueError, match=match):
        env.step(bad)
    assert torch.equal(env.state.tcp_pos, before.tcp_pos)


def test_device_is_honoured():
    env = GraspEnv(num_envs=3, device="cpu", seed=0)
    obs = env.reset()
    assert all(v.device.type == "cpu" for v in obs.values())
    assert all(v.device.type == "cpu" for _, v in env.state.items())
    if torch.cuda.is_available():  # pragma: no cover - no GPU in CI
        env = GraspEnv(num_envs=3, device="cuda", seed=0)
        obs = env.step(torch.zeros(3, 4, device="cuda"))[0]
        assert all(v.device.type == "cuda" for v in obs.values())


def test_observation_shapes_and_dtypes():
    cfg = SimConfig(image_size=32)
    env = GraspEnv(cfg, num_envs=5, seed=0)
    obs = env.reset()
    assert obs["rgb"].shape == (5, 3, 32, 32) and obs["rgb"].dtype == torch.uint8
    assert obs["mask"].shape == (5, 32, 32) and obs["mask"].dtype == torch.bool
    assert obs["gripper"].shape == (5, 3) and obs["gripper"].dtype == torch.float32
    assert set(obs) == {"rgb", "mask", "gripper"}  # nothing privileged leaks into the observation


def test_target_starts_in_view():
    env = GraspEnv(SimConfig(), num_envs=300, seed=4)
    assert env.observe()["mask"].flatten(1).any(1).all()


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(image_size=8), "image_size"),
        (dict(max_speed=-1.0), "max_speed"),
        (dict(max_steps=0), "max_steps"),
        (dict(open_width=0.01), "open_width"),
    ],
)
def test_config_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SimConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(sphere_diameter=(0.02, 0.01)), "sphere_diameter"),
        (dict(max_distractors=-1), "max_distractors"),
        (dict(latency_prob=2.0), "latency_prob"),
        (dict(fov=(float("nan"), 1.0)), "fov"),
    ],
)
def test_randomization_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        RandomizationConfig(**kwargs)


def test_config_round_trip_and_typo():
    cfg = SimConfig(image_size=48, randomization=RandomizationConfig(max_distractors=2))
    assert SimConfig.from_dict(cfg.to_dict()) == cfg
    d = cfg.to_dict()
    d["imge_size"] = 3
    with pytest.raises(ValueError, match="imge_size"):
        SimConfig.from_dict(d)


# ------------------------------------------------------------------ renderer vs a per-pixel reference
def test_mask_equals_independent_per_pixel_reference():
    size = 24
    cfg = SimConfig(image_size=size, randomization=RandomizationConfig(max_distractors=4, start_height=(0.03, 0.08),
                                                                      start_offset=(-0.02, 0.02)))
    env = GraspEnv(cfg, num_envs=6, seed=11)
    s = env.state
    out = render(s, cfg, post=False)
    from graspsim.physics import finger_boxes

    fc, fh = finger_boxes(s.tcp_pos, s.finger_width, cfg)
    mismatches = 0
    for b in range(s.batch_size):
        objs = [(KIND_SPHERE, s.sphere_pos[b], s.sphere_radius[b].repeat(3), 0.0, True)]
        objs += [(KIND_BOX, fc[b, i], fh[b, i], 0.0, False) for i in range(2)]
        for k in range(s.dist_kind.shape[1]):
            if int(s.dist_kind[b, k]) != KIND_NONE:
                objs.append((int(s.dist_kind[b, k]), s.dist_pos[b, k], s.dist_size[b, k], float(s.dist_yaw[b, k]), False))
        objs = [(k, c.double().numpy(), h.double().numpy(), y, tgt) for k, c, h, y, tgt in objs]
        ref = reference_mask(s, b, size, objs)
        assert ref.any(), "reference scene should show the target"
        mismatches += int((ref != out.mask[b].numpy()).sum())
    assert mismatches == 0
