"""The fingertip senses of wrist scenes (``SimConfig.fingertip_pixels``): where the fingertip centre and a point 2 cm
above it appear in the image. Constant within a scene, nominal at the nominal mount, read by new wrist nets and not by
old ones, resumed as they were, exported, named, and given (and checked) on a deployed robot."""

import json

import numpy as np
import pytest
import torch

from graspsim import GraspEnv, SimConfig
from graspsim.dagger.model import ControlNet, ControlNetConfig
from graspsim.dagger.policy import MaskPolicy, check_fits_scenes, save_checkpoint
from graspsim.env import fingertip_calibration, fingertip_fractions, fingertip_senses, nominal_fingertip_fractions
from graspsim.keys import FINGERTIP_SENSES
from graspsim.runtime import RuntimeConfig

SMALL = dict(image_size=32, channels=(8, 8, 8), hidden=32, wrist=True)


def kinds_sim(kinds: str = "cube", **kw) -> SimConfig:
    d = SimConfig(**kw).to_dict()
    d["target"]["kinds"] = kinds.split(",")
    return SimConfig.from_dict(d)


def test_senses_are_the_scene_constants_of_its_camera_mount():
    cfg = kinds_sim("cube,cylinder")
    assert cfg.gripper_dim == 9 and kinds_sim("cube", fingertip_pixels=False).gripper_dim == 5
    assert SimConfig().gripper_dim == 3 and SimConfig(fingertip_pixels=True).gripper_dim == 3  # spheres: no wrist
    env = GraspEnv(cfg, num_envs=6, seed=3)
    first = env.reset()["gripper"][:, 5:]
    turn = torch.tensor([[0.05, -0.03, -0.06, 1.2, -1.0]]).repeat(6, 1)
    for _ in range(6):
        obs, *_ = env.step(turn)
    assert env.state.wrist_yaw.abs().min() > 0.3  # the wrist turned, the camera with it
    torch.testing.assert_close(obs["gripper"][:, 5:], first, atol=1e-4, rtol=0)  # and the fingertips stay put
    assert (first.std(0) > 0.1).all()  # each scene's randomised mount moves them
    torch.testing.assert_close(first, fingertip_senses(fingertip_fractions(env.state, cfg.image_size)))
    # at the nominal mount and field of view they are the nominal points, which the camera centres on the fingertips
    d = cfg.to_dict()
    d["randomization"].update(mount_jitter_pos=0.0, mount_jitter_rot=0.0, fov=[1.2, 1.2])
    flat = GraspEnv(SimConfig.from_dict(d), num_envs=2, seed=0)
    flat.reset()
    nominal = nominal_fingertip_fractions(cfg)
    torch.testing.assert_close(fingertip_fractions(flat.state, 64), torch.tensor([nominal] * 2), atol=1e-5, rtol=0)
    assert nominal[:3] == pytest.approx([0.5, 0.5, 0.5]) and nominal[3] < 0.5  # the higher point is up in the frame
    assert fingertip_senses(np.array([0.5, 0.0, 1.0, 0.55])).tolist() == pytest.approx([0.0, -10.0, 10.0, 1.0])
    with pytest.raises(ValueError, match="fingertip_pixels must be true or false"):
        SimConfig(fingertip_pixels="yes")


def test_calibration_range_holds_every_trained_mount_and_not_much_more():
    cfg = kinds_sim("cube")
    cal = fingertip_calibration(cfg)
    lo, hi = np.array(cal["low"]), np.array(cal["high"])
    env = GraspEnv(cfg, num_envs=512, seed=11)  # other scenes than the calibration's own draw
    env.reset()
    f = fingertip_fractions(env.state, cfg.image_size).numpy()
    assert (f >= lo).all() and (f <= hi).all()
    assert (lo < cal["nominal"]).all() and (np.array(cal["nominal"]) < hi).all() and (hi - lo < 0.25).all()


def test_old_wrist_nets_read_their_five_senses_and_new_ones_need_the_fingertips():
    with pytest.raises(ValueError, match="fingertip_pixels needs wrist"):
        ControlNetConfig(fingertip_pixels=True)
    torch.manual_seed(0)
    old = MaskPolicy(ControlNet(ControlNetConfig(**SMALL)))
    new = MaskPolicy(ControlNet(ControlNetConfig(**SMALL, fingertip_pixels=True)))
    assert (old.cfg.gripper_dim, new.cfg.gripper_dim) == (5, 9)
    mask = torch.zeros(3, 32, 32, dtype=torch.bool)
    mask[:, 12:18, 10:20] = True
    grip = torch.tensor([[1.0, 0.0, 0.0, 0.3, 0.95, 0.1, -0.2, 0.0, -1.1]]).repeat(3, 1)
    torch.testing.assert_close(old.act(mask, grip), old.act(mask, grip[:, :5]))  # an old net reads the first 5
    assert new.act(mask, grip).shape == (3, 5)
    with pytest.raises(ValueError, match=r"gripper must be \(3, 9\).*4 fingertip senses"):
        new.act(mask, grip[:, :5])
    check_fits_scenes(old.cfg, kinds_sim("cube"), "old.pt")
    check_fits_scenes(new.cfg, kinds_sim("cube"), "new.pt")
    with pytest.raises(ValueError, match="new.pt reads the fingertip senses but .* --sim.no-fingertip-pixels"):
        check_fits_scenes(new.cfg, kinds_sim("cube", fingertip_pixels=False), "new.pt")


def test_a_dagger_run_folder_from_before_the_fingertips_resumes_without_them(tmp_path):
    from graspsim.dagger.train import DaggerConfig, run_dagger

    sim = kinds_sim("cube", image_size=32, max_steps=30)
    kw = dict(out=tmp_path / "dg", episodes_per_iter=4, eval_episodes=2, num_envs=4, train_steps=3, batch_size=8,
              runtime=RuntimeConfig(progress=False))
    run_dagger(DaggerConfig(iterations=1, sim=SimConfig.from_dict({**sim.to_dict(), "fingertip_pixels": False}), **kw))
    cfg_file = tmp_path / "dg" / "config.json"
    stored = json.loads(cfg_file.read_text())
    del stored["sim"]["fingertip_pixels"], stored["model"]["fingertip_pixels"]  # as a folder of the version before
    cfg_file.write_text(json.dumps(stored))
    res = run_dagger(DaggerConfig(iterations=2, resume=True, sim=sim, **kw))  # today's default asks for them
    ckpt = torch.load(res["checkpoint"], weights_only=False)
    assert ckpt["model_config"]["fingertip_pixels"] is False and ckpt["config"]["sim"]["fingertip_pixels"] is False
    import h5py
    with h5py.File(tmp_path / "dg" / "data" / "iter_001.h5") as f:
        assert f["data/demo_0/obs/gripper"].shape[1] == 5
    # a changed setting is still refused
    with pytest.raises(ValueError, match="differs in"):
        run_dagger(DaggerConfig(iterations=3, resume=True, sim=sim, **{**kw, "episodes_per_iter": 6}))


@pytest.fixture(scope="module")
def fingertip_policy(tmp_path_factory) -> str:
    """A randomly initialised wrist net with fingertip senses at 64 px, as a deployable checkpoint of cube scenes."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("fingertip") / "policy.pt"
    save_checkpoint(path, ControlNet(ControlNetConfig(wrist=True, fingertip_pixels=True)), None, 0,
                    config={"sim": kinds_sim("sphere,cube,cylinder").to_dict()})
    return str(path)


class _Nets:
    """Stand-in nets that remember the senses the control net was given."""

    runtime, image_size, max_speed, wrist, max_yaw_rate = "fake", 16, 0.1, True, 1.5
    fingertip = {"nominal": [0.5, 0.5, 0.5, 0.44], "low": [0.4] * 4, "high": [0.6] * 4}

    def __init__(self):
        self.seen = []

    def mask(self, rgb):
        return np.ones((1, 16, 16), bool)

    def action(self, mask, gripper):
        self.seen.append(gripper.copy())
        return np.zeros((1, 5), np.float32)


def test_controller_appends_the_fingertip_senses_and_checks_them():
    from graspsim.robot.controller import Controller

    frame, senses = np.zeros((16, 16, 3), np.uint8), np.array([1, 0, 0, 0, 1], np.float32)
    nets = _Nets()
    ctl = Controller(nets)  # nothing given: the nominal mount
    assert ctl.reads_fingertip and ctl.gripper_dim == 5 and ctl.fingertip == pytest.approx((0.5, 0.5, 0.5, 0.44))
    ctl.decide(frame, senses)
    np.testing.assert_allclose(nets.seen[-1][0], [1, 0, 0, 0, 1, 0, 0, 0, -1.2], atol=1e-5)
    ctl = Controller(nets, fingertip=(0.55, 0.45, 0.5, 0.5))
    ctl.decide(frame, senses)
    np.testing.assert_allclose(nets.seen[-1][0, 5:], [1, -1, 0, 0], atol=1e-5)
    assert ctl.fingertip_source == "--fingertip"
    with pytest.raises(ValueError, match=r"--fingertip: fingertip points outside what the policy was trained on: "
                                         r"x0 = 0\.900 \(trained 0\.400-0\.600\)"):
        Controller(nets, fingertip=(0.9, 0.5, 0.5, 0.44))
    with pytest.raises(ValueError, match=r"must be 4 finite numbers x0 y0 x1 y1"):
        Controller(nets, fingertip=(0.5, 0.5, float("nan"), 0.44))
    with pytest.raises(ValueError, match=r"must be 4 finite numbers"):
        Controller(nets, fingertip=(0.5, 0.5))


def test_deploy_gives_the_fingertips_from_flag_adapter_or_nominal_mount(fingertip_policy, cube_vision, tmp_path,
                                                                         caplog):
    from graspsim.robot.deploy import DeployConfig, deploy
    from graspsim.robot.loop import DeployError
    import deploy_fakes as fakes

    kw = dict(vision=cube_vision, policy=fingertip_policy, hz=0, episodes=1, time_limit=0.3)
    cube = kinds_sim("cube")
    s = deploy(DeployConfig(out=tmp_path / "sim", camera="sim", robot="sim", sim=cube, **kw))
    # the simulated robot reports its scene's exact points, as a calibrated arm would
    assert s["fingertip"] == {"points": None, "source": "robot adapter 'sim' (SimRobot.fingertip)"}
    env = GraspEnv(cube, num_envs=1)
    from graspsim.seeds import episode_seeds
    env.reset([0], episode_seeds(0, "test", 0, 1))
    points = s["per_episode"][0]["fingertip"]
    assert points == pytest.approx(fingertip_fractions(env.state, 64)[0].tolist(), abs=1e-6)
    given = [0.5, 0.49, 0.5, 0.45]
    s = deploy(DeployConfig(out=tmp_path / "flag", camera="sim", robot="sim", sim=cube, fingertip=tuple(given), **kw))
    assert s["fingertip"] == {"points": pytest.approx(given), "source": "--fingertip"}
    robot_kw = {**kw, "hz": 20}
    s = deploy(DeployConfig(out=tmp_path / "cal", camera="x:y", robot="x:y", **robot_kw),
               camera=fakes.RedDotCamera(), robot=fakes.CalibratedWristRobot())
    assert s["fingertip"]["points"] is None
    assert s["per_episode"][0]["fingertip"] == pytest.approx(fakes.CalibratedWristRobot.POINTS)
    with caplog.at_level("WARNING", logger="graspsim.robot.deploy"):
        s = deploy(DeployConfig(out=tmp_path / "nom", camera="x:y", robot="x:y", **robot_kw),
                   camera=fakes.RedDotCamera(), robot=fakes.WristRobot())
    assert s["fingertip"]["source"] == "the nominal camera mount of the training scenes"
    assert "no --fingertip and robot adapter 'wrist'" in caplog.text and "measure your camera's" in caplog.text
    fakes.EVENTS.clear()
    with pytest.raises(DeployError, match=r"robot adapter 'miscalibrated' \(MiscalibratedWristRobot.fingertip\): "
                                          r"fingertip points outside .* x0 = 0\.020"):
        deploy(DeployConfig(out=tmp_path / "bad", camera="x:y", robot="x:y", **robot_kw),
               camera=fakes.RedDotCamera(), robot=fakes.MiscalibratedWristRobot())
    assert not fakes.EVENTS  # refused before the arm was asked to do anything, its home pose included
    with pytest.raises(DeployError, match=r"robot adapter 'uncalibrated' \(UncalibratedWristRobot.fingertip\) returned "
                                          r"None"):
        deploy(DeployConfig(out=tmp_path / "none", camera="x:y", robot="x:y", **robot_kw),
               camera=fakes.RedDotCamera(), robot=fakes.UncalibratedWristRobot())
    assert not fakes.EVENTS
    with pytest.raises(ValueError, match=r"--fingertip: fingertip points outside"):
        deploy(DeployConfig(out=tmp_path / "badflag", camera="sim", robot="sim", sim=cube,
                            fingertip=(0.5, 0.9, 0.5, 0.44), **kw))


def test_onnx_export_carries_the_fingertip_senses(fingertip_policy, cube_vision, tmp_path):
    pytest.importorskip("onnxruntime")
    from graspsim.robot.controller import Controller
    from graspsim.robot.export import ExportConfig, export

    contract = export(ExportConfig(vision=cube_vision, policy=fingertip_policy, out=tmp_path / "onnx", frames=32))
    c = contract["control"]
    assert c["inputs"][1]["shape"] == ["batch", 9] and "fingertip centre" in c["inputs"][1]["meaning"]
    assert c["fingertip"]["nominal"] == pytest.approx(nominal_fingertip_fractions(kinds_sim("cube")))
    assert contract["parity"]["control_raw_max_abs_diff"] <= 1e-4
    torch_ctl = Controller.from_checkpoints(cube_vision, fingertip_policy, precision="fp32")
    onnx_ctl = Controller.from_export(tmp_path / "onnx")
    assert onnx_ctl.reads_fingertip and onnx_ctl.fingertip == pytest.approx(torch_ctl.fingertip)
    rgb = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    senses = np.array([1, 0, 1, 0.2, 0.98], np.float32)
    np.testing.assert_allclose(onnx_ctl.decide(rgb, senses).action, torch_ctl.decide(rgb, senses).action, atol=1e-4)


def test_old_configs_without_the_setting_resume_where_it_changes_nothing():
    """A stored config from before ``fingertip_pixels``: sphere-only scenes (no wrist) compare as today's request, so
    collect, train-vision and LeRobot export take old and new sphere files together; wrist scenes compare as False (5
    senses), so a resume that would mix 5- and 9-sense episodes is refused, naming the setting."""
    from graspsim import runs
    from graspsim.runs import sim_fields_added
    from graspsim.compat import added_settings
    from graspsim.vision.train import RESUMABLE_KEYS

    def old(sim: SimConfig) -> dict:
        d = sim.to_dict()
        del d["fingertip_pixels"]
        return d

    sphere, cube = SimConfig(), kinds_sim("cube")
    runs.check_resume({"sim": old(sphere)}, {"sim": sphere.to_dict()}, (), "old.h5")
    assert runs.config_differences(sim_fields_added(old(sphere), sphere.to_dict()),
                                   sim_fields_added(sphere.to_dict(), old(sphere))) == []
    with pytest.raises(ValueError, match=r"sim.fingertip_pixels: False -> True"):
        runs.check_resume({"sim": old(cube)}, {"sim": cube.to_dict()}, (), "old.h5")
    runs.check_resume({"sim": old(cube)}, {"sim": cube.to_dict()}, RESUMABLE_KEYS, "vision run")  # frames are the same
    # a vision run folder from before SegNetConfig.recentre resumes
    from graspsim.vision.train_config import TrainVisionConfig
    new = TrainVisionConfig(out="v").to_dict()
    stored = json.loads(json.dumps(new))
    del stored["model"]["recentre"]
    runs.check_resume(stored, new, RESUMABLE_KEYS, "v/checkpoint.pt", added_settings("train-vision"))


def test_an_export_whose_gripper_width_disagrees_with_its_contract_is_refused(tmp_path):
    from graspsim.robot.onnx_contract import read_contract, write_contract

    folder = tmp_path / "onnx"
    folder.mkdir()
    for name in ("vision.onnx", "control.onnx"):
        (folder / name).write_bytes(b"x")
    contract = {"kind": "graspsim-onnx-contract", "format_version": None,
                "sources": {"vision": {"sha256": "a"}, "policy": {"sha256": "b"}},
                "vision": {"image_size": 64, "threshold": 0.5, "peak_threshold": 0.0, "mirror_tta": False},
                "control": {"max_speed": 0.1, "wrist": True, "max_yaw_rate": 1.5,
                            "inputs": [{"name": "mask", "shape": ["batch", 64, 64]},
                                       {"name": "gripper", "shape": ["batch", 5]}]}}
    from graspsim.robot import onnx_contract
    contract["kind"], contract["format_version"] = onnx_contract.CONTRACT_KIND, onnx_contract.CONTRACT_VERSION
    write_contract(folder, contract)  # with the checksums a reader needs
    assert read_contract(folder)["control"]["wrist"] is True  # 5 senses with the wrist: consistent
    contract["control"]["fingertip"] = {"nominal": [0.5] * 4, "low": [0.4] * 4, "high": [0.6] * 4}
    write_contract(folder, contract)
    with pytest.raises(ValueError, match=r"gripper input is 5 wide, but its wrist and fingertip entries say 9"):
        read_contract(folder)
    del contract["control"]["inputs"]
    write_contract(folder, contract)
    with pytest.raises(ValueError, match=r"lacks control.inputs"):
        read_contract(folder)


def test_lerobot_and_gymnasium_name_and_bound_the_nine_senses(tmp_path):
    from graspsim.dataset.lerobot import FINGERTIP_STATE_NAMES, STATE_LAYOUTS

    assert FINGERTIP_STATE_NAMES[-4:] == FINGERTIP_SENSES and len(FINGERTIP_STATE_NAMES) == 9
    assert [len(s) for s, _ in STATE_LAYOUTS] == [3, 5, 9]
    pytest.importorskip("gymnasium")
    from graspsim.gym_env import WristGraspEnv

    env = WristGraspEnv(kinds_sim("cube", image_size=32))
    space = env.observation_space["gripper"]
    assert space.shape == (9,) and (space.high[5:] == 20).all() and (space.low[5:] == -20).all() and space.high[4] == 1.0
    obs, _ = env.reset(seed=0)
    assert space.contains(obs["gripper"])
