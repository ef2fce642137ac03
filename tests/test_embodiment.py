"""Embodiments (issue 53): the floating preset is today's simulator, the so101 preset's camera sees its jaws, the
one-jaw gripper pushes the target against its fixed jaw, the wrist turns about the yaw centre, the arm stays in its
reach band, the expert grasps every kind, and a net trained for one embodiment is refused on another."""

from __future__ import annotations

import dataclasses
import json
import math
import types

import numpy as np
import pytest
import torch

from graspsim import GraspEnv, SimConfig, runs
from graspsim.config import EMBODIMENT_FIELDS, RandomizationConfig, TargetConfig
from graspsim.embodiment import EMBODIMENTS, FLOATING, SO101, get_embodiment
from graspsim.expert.fsm import FSMExpert
from graspsim.physics import finger_boxes, rotate_xy
from graspsim.state import KIND_CYLINDER
from graspsim.render import project, render
from graspsim.rollout import ExpertHooks, run_episodes
from graspsim.seeds import episode_seeds

KINDS = ("sphere", "cube", "cylinder")


def _so101(kinds=("sphere",), **rand) -> SimConfig:
    """The so101 preset in a nominal scene (no distractors, ideal dynamics, the lens's nominal field of view)."""
    r = dataclasses.replace(RandomizationConfig.none(), fov=(SO101.nominal_fov,) * 2, **rand)
    return SimConfig(embodiment="so101", randomization=r, target=TargetConfig(kinds=kinds))


# ------------------------------------------------------------------ presets and configuration
def test_floating_preset_is_the_old_default_and_changes_nothing():
    cfg = SimConfig()
    assert cfg.embodiment == "floating" and cfg.body is FLOATING
    assert SimConfig(embodiment="floating") == cfg
    for dotted, attr in EMBODIMENT_FIELDS.items():
        holder = cfg.randomization if dotted.startswith("randomization.") else cfg
        assert getattr(holder, dotted.split(".")[-1]) == getattr(FLOATING, attr), dotted
    assert FLOATING.gripper == "parallel" and FLOATING.camera_forward is None
    assert FLOATING.yaw_centre == (0.0, 0.0) and FLOATING.reach == ()


def test_so101_preset_sets_the_settings_it_owns_and_keeps_a_value_given():
    cfg = SimConfig(embodiment="so101")
    assert cfg.body is SO101 and cfg.body.one_jaw
    assert cfg.camera_offset == SO101.camera_offset and cfg.open_width == SO101.open_width
    assert cfg.randomization.fov == SO101.fov and cfg.randomization.start_height == SO101.start_height
    assert cfg.max_height == SO101.max_height and cfg.workspace == SO101.workspace
    assert SimConfig(embodiment="so101", max_steps=77, open_width=0.045).open_width == 0.045  # given: kept
    # the start is low enough to reach straight down (none at a grasp point of 10 cm and more)
    assert SO101.start_height[1] < SO101.reach[-1][0] <= SO101.max_height


def test_unknown_embodiment_is_a_clear_error_listing_the_presets():
    with pytest.raises(ValueError, match=r"SimConfig.embodiment: unknown embodiment 'ur5'; presets: floating, so101"):
        SimConfig(embodiment="ur5")
    with pytest.raises(ValueError, match="presets: floating, so101"):
        get_embodiment("SO101")
    assert set(EMBODIMENTS) == {"floating", "so101"}


def test_config_round_trip_and_old_configs_load_as_floating():
    import tyro

    for cfg in (SimConfig(), SimConfig(embodiment="so101", target=TargetConfig(kinds=KINDS))):
        d = json.loads(cfg.to_json())
        assert d["embodiment"] == cfg.embodiment
        assert SimConfig.from_dict(d) == cfg
    old = json.loads(SimConfig().to_json())
    del old["embodiment"]
    assert SimConfig.from_dict(old).embodiment == "floating"
    assert tyro.cli(SimConfig, args=["--embodiment", "so101"]) == SimConfig(embodiment="so101")
    # a run folder written before embodiments resumes as floating, and refuses so101
    runs.check_resume({"sim": old}, {"sim": json.loads(SimConfig().to_json())}, [], "run")
    with pytest.raises(ValueError, match="embodiment"):
        runs.check_resume({"sim": old}, {"sim": json.loads(SimConfig(embodiment="so101").to_json())}, [], "run")


def test_a_net_trained_for_one_embodiment_is_refused_on_another(tmp_path):
    from graspsim.dagger.evaluate import check_vision_kinds
    from graspsim.dagger.policy import check_fits_scenes
    from graspsim.vision.checkpoint import save_checkpoint

    so101, floating = SimConfig(embodiment="so101"), SimConfig()
    assert runs.trained_embodiment({"sim": json.loads(floating.to_json())}) == "floating"
    old = json.loads(floating.to_json())
    del old["embodiment"]
    assert runs.trained_embodiment({"sim": old}) == "floating"  # written before embodiments
    assert runs.trained_embodiment({"dagger": {"sim": json.loads(so101.to_json())}}) == "so101"
    # a control checkpoint written before embodiments existed is a floating one, refused on the so101
    from pathlib import Path

    from graspsim.dagger.policy import MaskPolicy

    old_policy = MaskPolicy.from_checkpoint(Path(__file__).parent / "assets" / "policy_format0.pt")
    assert old_policy.trained_embodiment == "floating"
    with pytest.raises(ValueError, match="'floating' embodiment, not for 'so101'"):
        check_fits_scenes(old_policy.cfg, so101, "control checkpoint old.pt", old_policy.trained_kinds,
                          old_policy.trained_embodiment)
    net = types.SimpleNamespace(wrist=False)
    with pytest.raises(ValueError, match=r"control checkpoint c.pt was trained for the 'floating' embodiment, "
                                         r"not for 'so101'"):
        check_fits_scenes(net, so101, "control checkpoint c.pt", ("sphere",), "floating")
    check_fits_scenes(net, so101, "control checkpoint c.pt", ("sphere",), "so101")
    check_fits_scenes(net, floating, "control checkpoint c.pt", ("sphere",), "floating")
    # a vision checkpoint, matched to the scenes by the same rule
    path = tmp_path / "seg.pt"
    save_checkpoint(path, {"model": {}, "model_config": {}, "config": {"sim": json.loads(so101.to_json())},
                           "step": 0, "threshold": 0.5, "image_size": 64})
    check_vision_kinds(path, so101)
    with pytest.raises(ValueError, match=r"vision checkpoint .*seg.pt was trained for the 'so101' embodiment, "
                                         r"not for 'floating'"):
        check_vision_kinds(path, floating)


def test_pybullet_backend_refuses_the_so101():
    from graspsim.bullet import BulletGraspEnv

    with pytest.raises(ValueError, match="floating embodiment.*so101"):
        BulletGraspEnv(SimConfig(embodiment="so101"), num_envs=1)


# ------------------------------------------------------------------ the camera sees its jaws
def test_so101_camera_sees_the_fixed_jaw_tip_in_the_lower_part_of_the_image():
    """Only the jaws drawn (no table, distractors, target far away): the jaw pixels start at the fixed jaw's tip,
    below the image middle, and run down to the bottom edge; the projected tip lies on the topmost jaw pixels."""
    cfg = dataclasses.replace(_so101(), image_size=64)
    env = GraspEnv(cfg, num_envs=4, seed=0)
    s = env.state
    s = s.replace(sphere_pos=s.sphere_pos + torch.tensor([5.0, 5.0, 0.0]))
    out = render(s, cfg, table=False, distractors=False, post=False)
    jaw = out.alpha & ~out.mask
    assert not out.mask.any()
    H = cfg.image_size
    for b in range(4):
        rows = torch.nonzero(jaw[b].any(1)).flatten()
        assert rows.numel() > 0
        top, bottom = int(rows.min()), int(rows.max())
        assert top > 0.6 * H and bottom == H - 1, (top, bottom)
        assert not jaw[b, : H // 2].any()
        c, h = finger_boxes(s.tcp_pos[b:b + 1], s.finger_width[b:b + 1], cfg, s.wrist_yaw[b:b + 1])
        signs = torch.tensor([[sx, sy, -1.0] for sx in (-1.0, 1.0) for sy in (-1.0, 1.0)])
        tip = c[:, :1] + signs[None] * h[:, :1]  # 1,4,3: the corners of the fixed jaw's lower face (wrist at 0)
        pix, _ = project(s.index(slice(b, b + 1)), tip, H)
        assert abs(float(pix[0, :, 1].min()) - 0.5 - top) < 1.0, (pix[0, :, 1].tolist(), top)
        # left of centre: the camera sits beside the fixed jaw
        assert 0.3 * H < float(pix[0, :, 0].mean()) < 0.6 * H


def test_so101_mask_stays_exact_with_the_jaws_in_view():
    """The target straddled by the open jaws at the table: its mask is the set of pixels whose first hit is the
    target (the jaws may hide part of it, never add to it)."""
    cfg = dataclasses.replace(_so101(KINDS), image_size=64)
    env = GraspEnv(cfg, num_envs=6, seed=2)
    s = env.state
    y = SO101.fixed_jaw_y - s.sphere_radius - 0.004
    tcp = s.sphere_pos.clone()
    tcp[:, 1] -= y
    tcp[:, 2] = 0.0
    s = s.replace(tcp_pos=tcp)
    full = render(s, cfg, post=False)
    alone = render(s, cfg, table=False, fingers=False, distractors=False, post=False)
    assert full.mask.any(dim=(1, 2)).all()
    assert not (full.mask & ~alone.mask).any()  # nothing but the target is ever in the mask
    d_full, d_alone = full.depth, alone.depth
    same = alone.mask & (d_alone <= d_full + 1e-6)
    assert torch.equal(full.mask, same)


# ------------------------------------------------------------------ one-jaw physics
def _closing_scene(cfg: SimConfig, rel_y: float):
    env = GraspEnv(cfg, num_envs=1, seed=0, render_obs=False)
    s = env.state
    r = float(s.sphere_radius[0])
    tcp = torch.tensor([[0.0, 0.0, 0.0]])
    env.state = s.replace(tcp_pos=tcp, sphere_pos=torch.tensor([[0.0, rel_y, r]]),
                          start_xy=torch.tensor([[0.0, rel_y]]))
    return env, r


def test_one_jaw_closing_pushes_a_sphere_against_the_fixed_jaw_and_captures_it():
    cfg = _so101()
    face = SO101.fixed_jaw_y
    env, r = _closing_scene(cfg, face - cfg.open_width + 0.0075)  # just inside the moving pad's face
    ys = [float(env.state.sphere_pos[0, 1])]
    for _ in range(10):
        env.step(torch.tensor([[0.0, 0.0, 0.0, 1.0]]))
        ys.append(float(env.state.sphere_pos[0, 1]))
        if bool(env.state.held[0]):
            break
    assert bool(env.state.held[0])
    assert all(b >= a - 1e-7 for a, b in zip(ys, ys[1:])) and ys[-1] > ys[0] + 0.02  # swept towards the fixed jaw
    assert ys[-1] == pytest.approx(face - r, abs=1e-6)  # squeezed against the fixed pad
    assert float(env.state.finger_width[0]) == pytest.approx(2 * r, abs=1e-6)
    for _ in range(8):  # and lifted with the gripper
        env.step(torch.tensor([[0.0, 0.0, 0.1, 1.0]]))
    assert bool(env.state.success[0])
    # the same start with the parallel gripper centres it between the pads instead
    flo = SimConfig(randomization=RandomizationConfig.none())
    env, r = _closing_scene(flo, -flo.open_width / 2 + 0.0075)
    for _ in range(10):
        env.step(torch.tensor([[0.0, 0.0, 0.0, 1.0]]))
    assert bool(env.state.held[0]) and float(env.state.sphere_pos[0, 1]) == pytest.approx(0.0, abs=1e-6)


def test_one_jaw_misses_a_sphere_outside_the_gap():
    cfg = _so101()
    env, r = _closing_scene(cfg, SO101.fixed_jaw_y + 0.02)  # beyond the fixed jaw
    for _ in range(10):
        env.step(torch.tensor([[0.0, 0.0, 0.0, 1.0]]))
    assert not bool(env.state.held[0]) and int(env.state.missed[0]) == 1


def test_cube_across_its_corners_is_not_captured_by_the_one_jaw_gripper():
    cfg = _so101(("cube",))
    env = GraspEnv(cfg, num_envs=1, seed=0, render_obs=False)
    s = env.state
    a = float(s.sphere_radius[0])
    face = SO101.fixed_jaw_y
    for yaw, held in ((0.05, True), (math.pi / 4, False)):
        env.state = s.replace(tcp_pos=torch.tensor([[0.0, 0.0, 0.0]]), target_yaw=torch.tensor([yaw]),
                              sphere_pos=torch.tensor([[0.0, face - 0.5 * cfg.open_width, a]]))
        for _ in range(10):
            env.step(torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]]))
        assert bool(env.state.held[0]) == held, yaw


def _close_and_lift_cylinder(cfg: SimConfig, rel_x: float) -> GraspEnv:
    """A 18 mm wide, 30 mm tall cylinder 4 mm from the fixed pad (or centred between a parallel gripper's pads),
    ``rel_x`` along the pads from the TCP; the jaw closes in place, then lifts."""
    env = GraspEnv(cfg, num_envs=1, seed=0, render_obs=False)
    r, hz = 0.009, 0.015
    y = SO101.fixed_jaw_y - r - 0.004 if cfg.body.one_jaw else 0.0
    env.state = env.state.replace(
        tcp_pos=torch.tensor([[0.0, 0.0, 0.0]]), sphere_pos=torch.tensor([[rel_x, y, hz]]),
        start_xy=torch.tensor([[rel_x, y]]), sphere_radius=torch.tensor([r]), target_half_height=torch.tensor([hz]),
        target_kind=torch.tensor([KIND_CYLINDER]), target_yaw=torch.zeros(1))
    for k in range(18):
        env.step(torch.tensor([[0.0, 0.0, 0.1 if k >= 8 else 0.0, 0.0, 1.0]]))
    return env


def test_so101_cylinder_met_by_the_pad_end_spins_out_as_in_mujoco():
    # benchmarks/so101_capture_region.py: MuJoCo captures a cylinder centred on the pads and loses 83 of 90 at +6 mm
    # along them; the batched simulator caught every one of them before SO101.cylinder_capture_x
    cfg = _so101(("cylinder",))
    assert bool(_close_and_lift_cylinder(cfg, 0.0).state.success[0])
    assert bool(_close_and_lift_cylinder(cfg, -0.0055).state.success[0])
    off = _close_and_lift_cylinder(cfg, 0.0059).state
    assert not bool(off.held[0]) and not bool(off.success[0]) and bool(off.pushed[0])
    assert float(off.sphere_pos[0, 0]) > cfg.pad_width / 2  # out along the pads
    # the floating preset's parallel gripper has no such limit: its 18 mm pads hold it there
    flo = SimConfig(randomization=RandomizationConfig.none(), target=TargetConfig(kinds=("cylinder",)))
    assert FLOATING.cylinder_capture_x is None
    assert bool(_close_and_lift_cylinder(flo, 0.0059).state.success[0])


def test_so101_turns_about_its_grasp_point_as_the_ik_layer_does():
    """The IK layer turns the gripper about the grasp point, straight above the TCP: a pure yaw leaves the TCP."""
    env = GraspEnv(_so101(("cube",)), num_envs=2, seed=1, render_obs=False)
    tcp0 = env.state.tcp_pos.clone()
    for _ in range(5):
        env.step(torch.tensor([[0.0, 0.0, 0.0, 1.0, -1.0], [0.0, 0.0, 0.0, -1.0, -1.0]]))
    assert (env.state.wrist_yaw.abs() > 0.3).all()
    assert torch.allclose(env.state.tcp_pos, tcp0, atol=1e-6)


def test_wrist_turns_about_the_yaw_centre(monkeypatch):
    """An arm whose wrist turns about an axis beside the TCP (the SO-101's roll axis, without the IK's correction)."""
    from graspsim import embodiment

    body = dataclasses.replace(SO101, name="roll_axis", yaw_centre=(0.00015, 0.0185))
    monkeypatch.setitem(embodiment.EMBODIMENTS, "roll_axis", body)
    cfg = dataclasses.replace(_so101(("cube",)), embodiment="roll_axis")
    env = GraspEnv(cfg, num_envs=2, seed=1, render_obs=False)
    c = torch.tensor([[*body.yaw_centre, 0.0]]).expand(2, 3)

    def centre():
        s = env.state
        return s.tcp_pos + rotate_xy(c, torch.cos(s.wrist_yaw), torch.sin(s.wrist_yaw))

    before, tcp0 = centre(), env.state.tcp_pos.clone()
    for _ in range(5):
        env.step(torch.tensor([[0.0, 0.0, 0.0, 1.0, -1.0], [0.0, 0.0, 0.0, -1.0, -1.0]]))
    assert (env.state.wrist_yaw.abs() > 0.3).all()
    assert torch.allclose(centre(), before, atol=1e-6)
    assert ((env.state.tcp_pos - tcp0).norm(dim=1) > 0.005).all()  # the TCP swung about it


def test_so101_stays_in_its_reach_band():
    cfg = SimConfig(embodiment="so101", target=TargetConfig(kinds=KINDS))
    env = GraspEnv(cfg, num_envs=64, seed=3, render_obs=False)
    g = torch.Generator().manual_seed(0)
    base = torch.tensor(SO101.base_xy)
    heights = torch.tensor([row[0] for row in SO101.reach])
    lo_r = torch.tensor([row[1] for row in SO101.reach])
    hi_r = torch.tensor([row[2] for row in SO101.reach])

    def band_ok(p):
        h = p[:, 2].clamp(float(heights[0]), float(heights[-1]))
        lo = torch.from_numpy(np.interp(h.numpy(), heights.numpy(), lo_r.numpy())).float()
        hi = torch.from_numpy(np.interp(h.numpy(), heights.numpy(), hi_r.numpy())).float()
        r = (p[:, :2] - base).norm(dim=1)
        return bool(((r >= lo - 1e-5) & (r <= hi + 1e-5)).all() and (p[:, 2] <= SO101.max_height + 1e-6).all())

    assert band_ok(env.state.tcp_pos)
    for _ in range(40):
        a = torch.rand((64, 5), generator=g) * 2 - 1
        a[:, :3] *= 0.1
        env.step(a)
        assert band_ok(env.state.tcp_pos)


# ------------------------------------------------------------------ the expert
class _Expert(ExpertHooks):
    def act(self, obs, active):
        return self.policy.act(self.env.privileged())


@pytest.mark.parametrize("kind", KINDS)
def test_so101_expert_grasps_every_kind(kind):
    """64 scenes of the default randomization per kind (dynamics noise, latency, gain): at least 62 succeed."""
    cfg = SimConfig(embodiment="so101", target=TargetConfig(kinds=(kind,)))
    env = GraspEnv(cfg, num_envs=64, seed=0, render_obs=False)
    env.observe = lambda: {}
    out = run_episodes(env, episode_seeds(0, "test", 0, 64), _Expert(env, FSMExpert(cfg, num_envs=64)))
    assert int(out.success.sum()) >= 62, out.failure_counts()
