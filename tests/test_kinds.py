"""Target kinds (sphere, cube, upright cylinder) and the wrist that turns (issue 39): the sphere-only default
is unchanged to the bit, masks and shadows are exact for every kind with the wrist turned, the cube's hold
rule, 4-D actions, the expert per kind, configuration errors and the gymnasium spaces."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from pixel_ref import camera_ray, ref_hit, reference_mask
from cpu_pins import pin_for_this_cpu
from sphere_pin import bullet_digests, torch_digests

from graspsim import GraspEnv, SimConfig
from graspsim.config import RandomizationConfig, TargetConfig
from graspsim.expert.fsm import FSMExpert
from graspsim.physics import cube_yaw_tolerance, finger_boxes, fold_quarter_turn
from graspsim.render import render
from graspsim.rollout import ExpertHooks, run_episodes
from graspsim.seeds import episode_seeds
from graspsim.state import KIND_BOX, KIND_CYLINDER, KIND_NONE, KIND_SPHERE, target_half_extents

MIX = TargetConfig(kinds=("sphere", "cube", "cylinder"))


def _nominal(kinds, **sim) -> SimConfig:
    return SimConfig(randomization=RandomizationConfig.none(), target=TargetConfig(kinds=kinds), **sim)


# ------------------------------------------------------------------ the sphere-only default is unchanged
def _sphere_pin() -> dict:
    """The digests of the pin's commit (c81aff7b) on this CPU's vendor; skips on a vendor without them
    (tests/cpu_pins.py)."""
    name = pin_for_this_cpu({"AuthenticAMD": "sphere_pin.json", "GenuineIntel": "sphere_pin_intel.json"})
    return json.loads((Path(__file__).parent / "assets" / name).read_text())


def test_sphere_only_default_reproduces_the_pinned_state_images_and_expert_actions():
    """Digests recorded before kinds and the wrist existed (tests/sphere_pin.py): every State field that
    existed then, every image, mask, gripper sense and (noisy) expert action, then a generator reset."""
    pin = _sphere_pin()
    got = torch_digests()
    assert got == {k: v for k, v in pin.items() if k != "bullet"}


def test_sphere_only_pybullet_episode_is_unchanged():
    pytest.importorskip("pybullet")
    assert bullet_digests() == {"bullet": _sphere_pin()["bullet"]}


def test_a_mix_keeps_each_seeds_looks_camera_and_dynamics():
    """Kinds are drawn after every other draw: a seed's scene differs only in its target."""
    a = GraspEnv(SimConfig(), num_envs=8, seed=5).state
    b = GraspEnv(SimConfig(target=MIX), num_envs=8, seed=5).state
    for k in ("table_tex", "light_dir", "cam_rot", "focal", "action_gain", "latency", "sphere_color", "dist_pos"):
        assert torch.equal(getattr(a, k), getattr(b, k)), k
    assert torch.equal(a.sphere_pos[:, :2], b.sphere_pos[:, :2])


# ------------------------------------------------------------------ drawing the kinds
def test_kinds_are_drawn_in_their_ranges_and_rest_on_the_table():
    t = MIX
    s = GraspEnv(SimConfig(target=t), num_envs=600, seed=2, render_obs=False).state
    kinds = s.target_kind
    for code in (KIND_SPHERE, KIND_BOX, KIND_CYLINDER):
        assert 150 < int((kinds == code).sum()) < 250
    cube, cyl = kinds == KIND_BOX, kinds == KIND_CYLINDER
    side = 2 * s.sphere_radius[cube]
    assert side.min() >= t.cube_side[0] - 1e-7 and side.max() <= t.cube_side[1] + 1e-7
    d, h = 2 * s.sphere_radius[cyl], 2 * s.target_half_height[cyl]
    assert d.min() >= t.cylinder_diameter[0] - 1e-7 and d.max() <= t.cylinder_diameter[1] + 1e-7
    assert h.min() >= t.cylinder_height[0] - 1e-7 and h.max() <= t.cylinder_height[1] + 1e-7
    assert torch.allclose(s.sphere_pos[:, 2], target_half_extents(s)[:, 2])  # resting on the table
    assert s.target_yaw[cube].std() > 1.0 and (s.target_yaw[~cube] == 0).all()


# ------------------------------------------------------------------ renderer: exact masks and shadows
def _turned_scene(size=24, n=6, seed=11):
    """Scenes of every kind seen from close by, with the wrist turned by a few steps of yaw rate."""
    cfg = SimConfig(image_size=size, target=MIX,
                    randomization=RandomizationConfig(max_distractors=4, start_height=(0.04, 0.09),
                                                      start_offset=(-0.015, 0.015)))
    env = GraspEnv(cfg, num_envs=n, seed=seed, render_obs=False)
    a = torch.zeros(n, 5)
    a[:, 3] = torch.tensor([1.5, -1.5]).repeat(n)[:n]
    a[:, 4] = -1.0
    for _ in range(5):
        env.step(a)
    assert (env.state.wrist_yaw.abs() > 0.3).all()
    return cfg, env.state


def _objects(s, cfg, b):
    """Float64 primitives of scene ``b``: (kind, centre, half, yaw, is_target)."""
    fc, fh = finger_boxes(s.tcp_pos, s.finger_width, cfg, s.wrist_yaw)
    half = target_half_extents(s)
    objs = [(int(s.target_kind[b]), s.sphere_pos[b], half[b], float(s.target_yaw[b]), True)]
    objs += [(KIND_BOX, fc[b, i], fh[b, i], float(s.wrist_yaw[b]), False) for i in range(2)]
    objs += [(int(s.dist_kind[b, k]), s.dist_pos[b, k], s.dist_size[b, k], float(s.dist_yaw[b, k]), False)
             for k in range(s.dist_kind.shape[1]) if int(s.dist_kind[b, k]) != KIND_NONE]
    return [(k, c.double().numpy(), h.double().numpy(), y, t) for k, c, h, y, t in objs]


def test_mask_is_exactly_the_visible_target_for_every_kind_with_the_wrist_turned():
    cfg, s = _turned_scene()
    size = cfg.image_size
    out = render(s, cfg, post=False)
    mismatches, shown = 0, set()
    for b in range(s.batch_size):
        objs = _objects(s, cfg, b)
        ref = reference_mask(s, b, size, objs)
        if ref.any():
            shown.add(int(s.target_kind[b]))
        mismatches += int((ref != out.mask[b].numpy()).sum())
    assert shown == {KIND_SPHERE, KIND_BOX, KIND_CYLINDER}
    assert mismatches == 0


def test_table_shadows_of_every_kind_equal_independent_shadow_rays():
    cfg, s = _turned_scene(seed=12)
    size = cfg.image_size
    lit = render(s, cfg, post=False, shadows=False)
    sh = render(s, cfg, post=False, shadows=True)
    darker = (sh.color < lit.color - 1e-6).any(1) & ~sh.alpha
    mismatches, by_target = 0, 0
    for b in range(s.batch_size):
        objs = _objects(s, cfg, b)
        L = s.light_dir[b].double().numpy()
        for v in range(size):
            for u in range(size):
                if sh.alpha[b, v, u]:
                    continue
                o, d = camera_ray(s, b, u, v, size)
                p = o + (-o[2] / d[2]) * d
                hits = [t for kind, c, h, yaw, t in objs if ref_hit(p, L, kind, c, h, yaw) is not None]
                by_target += any(hits)
                mismatches += bool(hits) != bool(darker[b, v, u])
    assert by_target > 20
    assert mismatches == 0


# ------------------------------------------------------------------ the wrist
def test_wrist_rate_is_clipped_and_rate_limited_and_turns_camera_fingers_and_senses():
    cfg = _nominal(("cube",))
    env = GraspEnv(cfg, num_envs=2, seed=0, render_obs=False)
    rot0, off0 = env.state.cam_rot.clone(), env.state.cam_offset.clone()
    a = torch.zeros(2, 5)
    a[:, 3] = torch.tensor([10.0, -0.5])  # far beyond the limit; a slow turn
    a[:, 4] = -1.0
    env.step(a)
    s = env.state
    dv = cfg.max_yaw_accel * cfg.dt
    assert torch.allclose(s.wrist_rate, torch.tensor([dv, -0.5]))  # from rest: at most one step of acceleration
    for _ in range(5):
        env.step(a)
    s = env.state
    assert torch.allclose(s.wrist_rate[0], torch.tensor(cfg.max_yaw_rate))
    yaw = s.wrist_yaw
    rz = torch.stack([torch.cos(yaw), -torch.sin(yaw), torch.zeros(2), torch.sin(yaw), torch.cos(yaw),
                      torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.ones(2)], -1).view(2, 3, 3)
    assert torch.allclose(s.cam_rot, rz @ rot0, atol=1e-5)
    assert torch.allclose(s.cam_offset, (rz @ off0[..., None])[..., 0], atol=1e-6)
    g = env.observe()["gripper"]
    assert g.shape == (2, 9) and torch.allclose(g[:, 3], torch.sin(yaw)) and torch.allclose(g[:, 4], torch.cos(yaw))
    fc, _ = finger_boxes(s.tcp_pos, s.finger_width, cfg, yaw)
    across = fc[:, 0, :2] - fc[:, 1, :2]  # finger 0 minus finger 1: along the turned gripper y axis
    assert torch.allclose(across / across.norm(dim=1, keepdim=True),
                          torch.stack([-torch.sin(yaw), torch.cos(yaw)], 1), atol=1e-5)
    for _ in range(30):
        env.step(a)
    assert env.state.wrist_yaw[0] == pytest.approx(cfg.max_wrist_yaw)


def test_four_d_actions_are_refused_for_cubes_and_kept_for_spheres_and_cylinders():
    env = GraspEnv(_nominal(("cube",)), num_envs=3, seed=0, render_obs=False)
    with pytest.raises(ValueError, match=r"cube.*\(vx, vy, vz, wz, grip\)") as e:
        env.step(torch.zeros(3, 4))
    assert "\n" not in str(e.value)
    for kinds in (("sphere",), ("cylinder",)):
        env = GraspEnv(_nominal(kinds), num_envs=3, seed=0, render_obs=False)
        env.step(torch.zeros(3, 4))
        env.step(torch.zeros(3, 5))
        assert (env.state.wrist_yaw == 0).all()


def test_four_d_action_equals_five_d_with_zero_yaw_rate():
    cfg = SimConfig(target=TargetConfig(kinds=("sphere", "cylinder")))
    e4, e5 = (GraspEnv(cfg, num_envs=16, seed=3, render_obs=False) for _ in range(2))
    ex = FSMExpert(cfg, num_envs=16)
    for _ in range(30):
        a5 = ex.act(e5.privileged())
        a5[:, 3] = 0.0
        e4.step(torch.cat([a5[:, :3], a5[:, 4:]], 1))
        e5.step(a5)
    for k, v in e4.state.items():
        assert torch.equal(v, getattr(e5.state, k)), k


# ------------------------------------------------------------------ holding
def _close_on(kind: str, rel_yaw: float, n_lift: int = 8, side: float = 0.024, offset=(0.0, 0.0)):
    """One nominal scene of ``kind``: the gripper (wrist at 0) straddles the target at table contact with the
    target's yaw ``rel_yaw`` relative to the pads, closes and lifts. Returns the final state."""
    t = TargetConfig(kinds=(kind,), cube_side=(side, side))
    cfg = SimConfig(randomization=RandomizationConfig.none(), target=t)
    env = GraspEnv(cfg, num_envs=1, seed=0, render_obs=False)
    s = env.state
    tcp = s.sphere_pos.clone()
    tcp[:, 0] += offset[0]
    tcp[:, 1] += offset[1]
    tcp[:, 2] = 0.001
    yaw = torch.full((1,), rel_yaw) if kind == "cube" else s.target_yaw + rel_yaw
    env.state = s.replace(tcp_pos=tcp, target_yaw=yaw)
    a = torch.zeros(1, 5)
    a[:, 4] = 1.0
    for _ in range(3):
        env.step(a)
    a[:, 2] = cfg.max_speed
    for _ in range(n_lift):
        env.step(a)
    return cfg, env.state


def test_cube_is_held_only_within_its_yaw_tolerance():
    for side in (0.016, 0.024, 0.030):
        cfg, _ = _close_on("cube", 0.0, side=side)
        tol = float(cube_yaw_tolerance(torch.tensor([side / 2]), cfg))
        assert math.radians(18) < tol < math.radians(20.5)
        for rel_yaw in (0.0, 0.5 * tol, 0.95 * tol, -0.95 * tol, math.pi / 2 + 0.9 * tol):
            _, s = _close_on("cube", rel_yaw, side=side)
            assert bool(s.success[0]), (side, rel_yaw)
            assert abs(float(fold_quarter_turn(s.target_yaw - s.wrist_yaw))) < 1e-5  # squeezed flat
            assert float(s.finger_width[0]) == pytest.approx(side, abs=1e-6)
        for rel_yaw in (1.05 * tol, math.pi / 4, -math.pi / 4 + 0.01, math.pi / 2 - 1.05 * tol):
            _, s = _close_on("cube", rel_yaw, side=side)
            assert not bool(s.held[0]) and not bool(s.success[0]), (side, rel_yaw)
            assert bool(s.pushed[0]) and int(s.missed[0]) >= 1


def test_cube_off_centre_along_the_pads_is_squeezed_out():
    cfg, s = _close_on("cube", 0.0, offset=(0.011, 0.0))
    assert not bool(s.success[0])
    _, s = _close_on("cube", 0.0, offset=(0.006, 0.0))
    assert bool(s.success[0])


@pytest.mark.parametrize("kind", ["sphere", "cylinder"])
def test_spheres_and_cylinders_are_yaw_free(kind):
    for rel_yaw in (0.0, 0.4, math.pi / 4, 1.3):
        cfg = _nominal((kind,))
        env = GraspEnv(cfg, num_envs=1, seed=0, render_obs=False)
        s = env.state
        tcp = s.sphere_pos.clone()
        tcp[:, 2] = 0.001
        env.state = s.replace(tcp_pos=tcp)
        a = torch.zeros(1, 5)
        a[:, 4] = -1.0
        a[:, 3] = cfg.max_yaw_rate
        while float(env.state.wrist_yaw[0]) < rel_yaw - 1e-6:  # turn the wrist first, fingers open
            a[:, 3] = min(cfg.max_yaw_rate, (rel_yaw - float(env.state.wrist_yaw[0])) / cfg.dt)
            env.step(a)
        a[:, 3] = 0.0
        a[:, 4] = 1.0
        for _ in range(3):
            env.step(a)
        a[:, 2] = cfg.max_speed
        for _ in range(8):
            env.step(a)
        assert bool(env.state.success[0]), (kind, rel_yaw)


def test_a_held_cube_turns_with_the_wrist():
    cfg, s = _close_on("cube", 0.1, n_lift=3)
    env = GraspEnv(cfg, num_envs=1, seed=0, render_obs=False)
    env.state = s
    a = torch.zeros(1, 5)
    a[:, 3], a[:, 4] = 1.0, 1.0
    for _ in range(4):
        env.step(a)
    s2 = env.state
    assert bool(s2.held[0])
    turn = float(s2.wrist_yaw[0] - s.wrist_yaw[0])
    assert turn > 0.2
    assert float(s2.target_yaw[0] - s.target_yaw[0]) == pytest.approx(turn, abs=1e-5)
    assert torch.allclose(s2.sphere_pos[:, :2], s2.tcp_pos[:, :2], atol=1e-5)


def test_fingers_push_a_cube_and_a_cylinder_out_of_their_footprint():
    for kind in ("cube", "cylinder"):
        cfg = _nominal((kind,))
        env = GraspEnv(cfg, num_envs=1, seed=0, render_obs=False)
        s = env.state
        tcp = s.sphere_pos.clone()
        tcp[:, 1] += cfg.open_width / 2 + cfg.finger_thickness / 2  # a finger right above the target
        tcp[:, 2] = 0.06
        env.state = s.replace(tcp_pos=tcp)
        start = s.sphere_pos.clone()
        a = torch.zeros(1, 5)
        a[:, 2], a[:, 4] = -cfg.max_speed, -1.0
        for _ in range(8):
            env.step(a)
        s = env.state
        assert bool(s.pushed[0]) and float((s.sphere_pos - start)[0, :2].norm()) > 0.003, kind
        assert float(s.sphere_pos[0, 2]) == pytest.approx(float(target_half_extents(s)[0, 2]))


# ------------------------------------------------------------------ the expert
def _expert_success(kinds, n, noise=0.0, num_envs=100):
    cfg = SimConfig(target=TargetConfig(kinds=kinds))
    env = GraspEnv(cfg, num_envs=min(n, num_envs), seed=0, render_obs=False)
    env.observe = lambda: {}  # the expert reads privileged state only: skip the per-step render

    class Noisy(ExpertHooks):
        def act(self, obs, active):
            return self.policy.perturb(self.policy.act(self.env.privileged()))

    ex = FSMExpert(cfg, num_envs=env.num_envs, noise_std=noise)
    return run_episodes(env, episode_seeds(0, "test", 0, n), Noisy(env, ex))


@pytest.mark.parametrize("kind", ["cube", "cylinder"])
def test_expert_grasps_each_kind(kind):
    out = _expert_success((kind,), 200, noise=0.03)
    assert out.success.mean() >= 0.99, out.failure_counts()


def test_expert_turns_the_wrist_by_the_smallest_rotation():
    cfg = _nominal(("cube",))
    env = GraspEnv(cfg, num_envs=64, seed=1, render_obs=False)
    yaw0 = fold_quarter_turn(env.state.target_yaw)
    ex = FSMExpert(cfg, num_envs=64)
    peak = torch.zeros(64)
    for _ in range(25):
        a = ex.act(env.privileged())
        assert a.shape == (64, 5)
        env.step(a)
        peak = torch.maximum(peak, env.state.wrist_yaw.abs())
    assert (peak <= yaw0.abs() + 0.02).all()  # never turns further than the nearest face pair
    assert (fold_quarter_turn(env.state.target_yaw - env.state.wrist_yaw).abs() < 0.05).all()


def test_expert_recovers_after_closing_on_a_cube_edge():
    """A learner closed across the cube's edge: the cube spun out; the expert opens, rises, turns the wrist to
    the new face pair and grasps."""
    cfg, s = _close_on("cube", math.pi / 4 - 0.05, n_lift=0)
    assert not bool(s.held[0]) and int(s.missed[0]) >= 1
    env = GraspEnv(cfg, num_envs=1, seed=0, render_obs=False)
    env.state = s
    ex = FSMExpert(cfg, num_envs=1)
    phases = set()
    for _ in range(80):
        env.step(ex.act(env.privileged()))
        phases.add(int(ex.phase[0]))
        if bool(env.state.success[0]):
            break
    assert bool(env.state.success[0]) and 0 in phases  # through RESET


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sphere", "cube", "cylinder"])
def test_expert_1000_scenes_per_kind(kind):
    out = _expert_success((kind,), 1000, noise=0.03, num_envs=250)
    assert out.success.mean() >= 0.99, out.failure_counts()


# ------------------------------------------------------------------ configuration
@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: TargetConfig(kinds=("pyramid",)), r"unknown kind 'pyramid'; known kinds: sphere, cube, cylinder"),
        (lambda: SimConfig(target=TargetConfig(kinds=("cube",), cube_side=(0.02, 0.045))),
         r"cube_side \(0.02, 0.045\).*open width.*0.04"),
        (lambda: SimConfig(target=TargetConfig(kinds=("cylinder",), cylinder_diameter=(0.02, 0.041))),
         r"cylinder_diameter \(0.02, 0.041\).*open width.*0.04"),
        (lambda: TargetConfig(kinds=()), "at least one kind"),
        (lambda: TargetConfig(kinds=("sphere", "cube"), weights=(1, 2, 3)), r"3 numbers for 2 kinds \(sphere,cube\)"),
        (lambda: TargetConfig(kinds=("sphere", "cube"), weights=(1, 0)), r"above 0 .*\(1\.0, 0\.0\)"),
        (lambda: TargetConfig(kinds=("sphere", "cube"), weights=(1, float("nan"))), r"finite and above 0"),
        (lambda: TargetConfig(kinds=("sphere", "cube"), weights=("two", 1)), r"weights must be numbers.*'two'"),
    ],
)
def test_bad_target_config_is_one_line_naming_the_value_and_what_fits(build, match):
    with pytest.raises(ValueError, match=match) as e:
        build()
    assert "\n" not in str(e.value)


def test_kinds_parse_from_the_cli_spellings_and_round_trip():
    assert TargetConfig(kinds=("sphere,cube,cylinder",)).kinds == ("sphere", "cube", "cylinder")
    assert TargetConfig(kinds="cube").kinds == ("cube",)
    cfg = SimConfig(target=MIX)
    assert SimConfig.from_dict(json.loads(cfg.to_json())) == cfg
    assert (SimConfig().action_dim, SimConfig().gripper_dim) == (4, 3)
    assert (cfg.action_dim, cfg.gripper_dim) == (5, 9)  # the wrist angle and the fingertip senses
    import tyro

    parsed = tyro.cli(SimConfig, args=["--target.kinds", "cube", "cylinder"])
    assert parsed.target.kinds == ("cube", "cylinder")


def test_weights_set_each_kinds_share_and_equal_weights_draw_as_before():
    from graspsim.randomization import sample_scenes

    def kinds(weights, n=20000):
        cfg = SimConfig(target=TargetConfig(kinds=("sphere", "cube", "cylinder"), weights=weights))
        return sample_scenes(cfg, n, torch.Generator().manual_seed(3)).target_kind

    share = torch.bincount(kinds((1, 2, 4)), minlength=4)[1:].double() / 20000  # box, cylinder, sphere codes
    assert torch.allclose(share, torch.tensor([2 / 7, 4 / 7, 1 / 7], dtype=torch.float64), atol=0.015)
    assert torch.equal(kinds((3, 3, 3), 500), kinds((), 500))  # uniform: the stream runs before weights drew
    assert TargetConfig(kinds=("sphere", "cube"), weights=(2, 2)).weights == ()  # equal weights are stored as none
    parsed = TargetConfig(kinds="sphere,cube,cylinder", weights="2,1,2")
    assert parsed.weights == (2.0, 1.0, 2.0)
    cfg = SimConfig(target=parsed)
    assert SimConfig.from_dict(json.loads(cfg.to_json())) == cfg
    import tyro

    got = tyro.cli(SimConfig, args=["--target.kinds", "sphere", "cube", "--target.weights", "2", "1"])
    assert got.target.weights == (2.0, 1.0)


def test_gymnasium_spaces_follow_the_kinds():
    from gymnasium.utils.env_checker import check_env

    from graspsim.gym_env import WristGraspEnv

    env = WristGraspEnv(SimConfig(target=MIX))
    assert env.action_space.shape == (5,) and env.observation_space["gripper"].shape == (9,)
    check_env(env, skip_render_check=True)
    assert WristGraspEnv().action_space.shape == (4,)


# ------------------------------------------------------------------ pybullet
def _bullet():
    pytest.importorskip("pybullet")
    from graspsim.bullet import BulletGraspEnv

    return BulletGraspEnv


@pytest.mark.parametrize("kind", ["cube", "cylinder"])
def test_bullet_mask_of_each_kind_agrees_with_the_torch_renderer(kind):
    """Same camera model, same scene: a cube or cylinder covers nearly the same pixels in both renderers,
    also after the wrist has turned (the pybullet camera follows the measured hand)."""
    rnd = RandomizationConfig(**{**RandomizationConfig.none().__dict__, "start_offset": (-0.01, 0.01),
                                 "start_height": (0.08, 0.08)})
    cfg = SimConfig(randomization=rnd, target=TargetConfig(kinds=(kind,)))
    with _bullet()(cfg, num_envs=2, seed=1) as e:
        a = torch.zeros(2, 5)
        a[:, 3], a[:, 4] = torch.tensor([1.0, -1.0]), -1.0
        for _ in range(4):
            e.step(a)
        obs = e.observe()
        assert (e.state.wrist_yaw.abs() > 0.2).all()
        ref = render(e.state.replace(cam_rot=_turn(e.state.cam_rot, e.state.wrist_yaw),
                                     cam_offset=_turn(e.state.cam_offset[..., None], e.state.wrist_yaw)[..., 0]),
                     cfg, fingers=False, distractors=False).mask
    inter = (obs["mask"] & ref).sum(dim=(1, 2)).float()
    union = (obs["mask"] | ref).sum(dim=(1, 2)).float()
    assert bool((union > 5).all())
    assert float((inter / union).mean()) > 0.7


def _turn(m, yaw):
    """Rz(yaw) @ m for B,3,k ``m``: the reset camera mount turned with the measured wrist."""
    c, s = torch.cos(yaw), torch.sin(yaw)
    z, o = torch.zeros_like(c), torch.ones_like(c)
    return torch.stack([c, -s, z, s, c, z, z, z, o], -1).view(-1, 3, 3) @ m


def test_bullet_refuses_four_d_actions_for_cubes():
    with _bullet()(_nominal(("cube",)), num_envs=1, seed=0) as e:
        with pytest.raises(ValueError, match=r"cube.*\(vx, vy, vz, wz, grip\)"):
            e.step(torch.zeros(1, 4))


@pytest.mark.parametrize("kind", ["cube", "cylinder"])
def test_bullet_expert_grasps_each_kind(kind):
    cfg = SimConfig(target=TargetConfig(kinds=(kind,)))
    with _bullet()(cfg, num_envs=4, seed=0, render_obs=False) as env:
        env.observe = lambda: {}
        out = run_episodes(env, episode_seeds(0, "test", 0, 8), ExpertHooks(env, FSMExpert(cfg, num_envs=4)))
    assert out.success.mean() >= 7 / 8, out.failure_counts()


def test_run_folders_written_before_kinds_still_resume_and_a_changed_mix_is_named():
    from graspsim.runs import check_resume

    new = {"sim": SimConfig().to_dict(), "episodes": 10}
    old = json.loads(json.dumps(new))
    for k in ("target", "max_yaw_rate", "max_yaw_accel", "max_wrist_yaw", "pad_friction"):
        del old["sim"][k]  # as stored before kinds and the wrist existed
    check_resume(old, new, may_change=(), where="run/config.json")
    mixed = {"sim": SimConfig(target=MIX).to_dict(), "episodes": 10}
    with pytest.raises(ValueError, match=r"sim\.target\.kinds"):
        check_resume(old, mixed, may_change=(), where="run/config.json")
    before_weights = json.loads(json.dumps(mixed))
    del before_weights["sim"]["target"]["weights"]  # a mix stored before weights existed resumes as uniform
    check_resume(before_weights, mixed, may_change=(), where="run/config.json")
    weighted = {"sim": SimConfig(target=TargetConfig(kinds=MIX.kinds, weights=(2, 1, 2))).to_dict(), "episodes": 10}
    with pytest.raises(ValueError, match=r"sim\.target\.weights"):
        check_resume(before_weights, weighted, may_change=(), where="run/config.json")
