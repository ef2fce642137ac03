"""The control net with a turning wrist (cubes and cylinders): shapes, the gripper-frame velocity, the quarter-turn
statistics, the loss, refusals of nets for other kinds, and a short DAgger run whose data and evaluation know the
kinds."""

import json
import math

import numpy as np
import pytest
import torch

from graspsim import GraspEnv, SimConfig
from graspsim.config import from_dict
from graspsim.dagger.aggregate import Aggregate
from graspsim.dagger.model import ControlNet, ControlNetConfig, quarter_turn_stats, to_action, to_gripper_frame
from graspsim.dagger.policy import MaskPolicy, check_fits_scenes
from graspsim.dagger.train import loss_terms
from graspsim.runtime import RuntimeConfig

WRIST = ControlNetConfig(image_size=32, channels=(8, 8, 8), hidden=32, max_speed=0.1, wrist=True, max_yaw_rate=1.5)


def kinds_sim(kinds: str, **kw) -> SimConfig:
    d = SimConfig(**kw).to_dict()
    d["target"]["kinds"] = kinds.split(",")
    return SimConfig.from_dict(d)


def square(angle: float, size: int = 64, half: float = 10.0) -> torch.Tensor:
    """A filled square of half-side ``half`` px turned by ``angle`` rad about the image centre: H,W bool."""
    ys, xs = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    dx, dy = xs - size / 2, ys - size / 2
    c, s = math.cos(angle), math.sin(angle)
    u, v = c * dx + s * dy, -s * dx + c * dy
    return (u.abs() <= half) & (v.abs() <= half)


def test_wrist_net_shapes_and_units():
    torch.manual_seed(0)
    pol = MaskPolicy(ControlNet(WRIST))
    mask = torch.zeros(4, 32, 32, dtype=torch.bool)
    mask[:, 10:16, 12:18] = True
    grip = torch.tensor([[1.0, 0.0, 0.0, math.sin(a), math.cos(a)] for a in (0.0, 0.3, -0.7, 1.2)])
    a = pol.act(mask, grip)
    assert a.shape == (4, 5) and torch.isfinite(a).all()
    assert (a[:, :2].norm(dim=1) <= math.sqrt(2) * 0.1 + 1e-6).all() and (a[:, 3].abs() <= 1.5 + 1e-6).all()
    with pytest.raises(ValueError, match=r"gripper must be \(4, 5\).*turns the wrist"):
        pol.act(mask, grip[:, :3])


def test_to_action_turns_the_gripper_frame_velocity_into_the_world():
    raw = torch.tensor([[10.0, 0.0, -10.0, 10.0, 2.0]])  # saturated: +x along the pads, down, full yaw rate, close
    a = math.pi / 2
    grip = torch.tensor([[1.0, 0.0, 0.0, math.sin(a), math.cos(a)]])
    act = to_action(raw, WRIST, grip)
    # the gripper's x axis points along world +y after a quarter turn
    assert torch.allclose(act, torch.tensor([[0.0, 0.1, -0.1, 1.5, 2.0]]), atol=1e-6)
    assert torch.allclose(to_gripper_frame(act, grip)[:, :2], torch.tensor([[0.1, 0.0]]), atol=1e-6)
    with pytest.raises(ValueError, match="wrist angle"):
        to_action(raw, WRIST)


def test_quarter_turn_stats_read_a_square_orientation_and_ignore_a_disc():
    base = quarter_turn_stats(square(0.0)[None])[0]
    for angle in (0.1, 0.3, -0.25):
        st = quarter_turn_stats(square(angle)[None])[0]
        turn = math.atan2(st[1], st[0]) - math.atan2(base[1], base[0])
        # four times the square's turn, within the pixel grid's error
        assert abs(math.remainder(turn - 4 * angle, 2 * math.pi)) < 0.15, (angle, turn)
        assert abs(float(st.norm()) - float(base.norm())) < 0.05
    ys, xs = torch.meshgrid(torch.arange(64).float(), torch.arange(64).float(), indexing="ij")
    disc = ((xs - 32) ** 2 + (ys - 32) ** 2 <= 12 ** 2)[None]
    assert float(quarter_turn_stats(disc)[0].norm()) < 0.05 < float(base.norm()) / 4
    assert torch.equal(quarter_turn_stats(torch.zeros(1, 64, 64, dtype=torch.bool)), torch.zeros(1, 2))


def test_wrist_loss_compares_in_the_gripper_frame():
    a = 0.8
    grip = torch.tensor([[1.0, 0.0, 0.0, math.sin(a), math.cos(a)]])
    label = torch.tensor([[0.05, -0.02, -0.03, 0.6, 1.0]])
    g = to_gripper_frame(label, grip)
    raw = torch.cat([torch.atanh(g[:, :3] / 0.1), torch.atanh(g[:, 3:4] / 1.5), torch.tensor([[20.0]])], 1)
    motion, grip_loss = loss_terms(raw, label, WRIST, grip)
    assert float(motion) < 1e-10 and float(grip_loss) < 1e-6
    # the same outputs read as world-frame velocities are wrong by the turn
    wrong = torch.cat([torch.atanh(label[:, :3] / 0.1), raw[:, 3:]], 1)
    assert float(loss_terms(wrong, label, WRIST, grip)[0]) > 1e-3
    # to_action of the matching raw outputs returns the label
    assert torch.allclose(to_action(raw, WRIST, grip)[:, :4], label[:, :4], atol=1e-5)


def test_nets_are_refused_for_kinds_they_cannot_grasp():
    sphere_net = ControlNetConfig()
    check_fits_scenes(sphere_net, SimConfig(), "p.pt")
    check_fits_scenes(WRIST, kinds_sim("cube"), "p.pt")
    with pytest.raises(ValueError, match=r"p\.pt is a sphere-only control net.*--sim.target.kinds cube"):
        check_fits_scenes(sphere_net, kinds_sim("cube"), "p.pt")
    with pytest.raises(ValueError, match=r"p\.pt turns the wrist.*only --sim.target.kinds sphere"):
        check_fits_scenes(WRIST, SimConfig(), "p.pt")


def test_aggregate_refuses_to_mix_sphere_and_wrist_data():
    agg = Aggregate(8, gripper_dim=5, action_dim=5)
    agg.add_arrays(np.zeros((2, 8, 8), bool), np.zeros((2, 5), np.float32), np.zeros((2, 5), np.float32), 0)
    with pytest.raises(ValueError, match="cannot be mixed"):
        agg.add_arrays(np.zeros((2, 8, 8), bool), np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32), 0)
    assert [t.shape[1] for t in agg.sample(4, torch.Generator().manual_seed(0))[1:]] == [5, 5]


def test_dagger_and_eval_sim_know_the_kinds(tmp_path):
    from graspsim.dagger.evaluate import EvalSimConfig, evaluate_sim
    from graspsim.dagger.train import DaggerConfig, run_dagger
    from graspsim.dataset import load_steps
    import h5py

    sim = kinds_sim("cube,cylinder", image_size=32, max_steps=40)
    cfg = DaggerConfig(out=tmp_path / "dg", iterations=2, episodes_per_iter=6, eval_episodes=4, num_envs=6,
                       train_steps=5, batch_size=16, sim=sim, runtime=RuntimeConfig(progress=False))
    res = run_dagger(cfg)
    ckpt = torch.load(res["checkpoint"], weights_only=False)
    assert ckpt["model_config"]["wrist"] is True and ckpt["model_config"]["max_yaw_rate"] == sim.max_yaw_rate
    assert ckpt["model_config"]["fingertip_pixels"] is True
    with h5py.File(tmp_path / "dg" / "data" / "iter_001.h5") as f:
        demo = f["data/demo_0"]
        assert demo["actions"].shape[1] == 5 and demo["obs/gripper"].shape[1] == 9  # 4 fingertip senses by default
        assert demo.attrs["target_kind"] in ("cube", "cylinder")
        assert {"target_kind", "target_yaw", "wrist_yaw", "target_half"} <= set(demo["privileged"])
    m = evaluate_sim(EvalSimConfig(policy=res["checkpoint"], out=tmp_path / "ev", episodes=8, num_envs=8, sim=sim,
                                   runtime=RuntimeConfig(progress=False)))
    assert set(m["per_kind"]) <= {"cube", "cylinder"} and sum(r["num_episodes"] for r in m["per_kind"].values()) == 8
    assert json.loads((tmp_path / "ev" / "metrics.json").read_text())["per_kind"] == m["per_kind"]
    with pytest.raises(ValueError, match="turns the wrist"):
        evaluate_sim(EvalSimConfig(policy=res["checkpoint"], out=tmp_path / "ev2", episodes=2,
                                   sim=SimConfig(image_size=32), runtime=RuntimeConfig(progress=False)))


class _WristNets:
    """Stand-in nets for the controller: a fixed mask and a fixed action."""

    runtime, image_size, max_speed, wrist, max_yaw_rate = "fake", 16, 0.1, True, 1.5

    def __init__(self, action, visible=True):
        self._action, self._visible = np.asarray(action, np.float32), visible

    def mask(self, rgb):
        m = np.zeros((1, 16, 16), bool)
        m[0, 5:8, 5:8] = self._visible
        return m

    def action(self, mask, gripper):
        return self._action[None]


def test_controller_commands_the_wrist_and_stops_it_with_the_rest():
    from graspsim.robot.controller import Controller, SafetyConfig, action_from_raw

    frame = np.zeros((16, 16, 3), np.uint8)
    senses = np.array([1, 0, 0, 0, 1], np.float32)
    d = Controller(_WristNets([0.05, 0.0, -0.2, 3.0, 1.0])).decide(frame, senses)
    assert d.command.tolist() == pytest.approx([0.05, 0.0, -0.1, 1.5, 1.0])  # clipped to max_speed, max_yaw_rate
    d = Controller(_WristNets([0.05, 0.0, 0.0, float("nan"), 1.0])).decide(frame, senses)
    assert d.stop == "non_finite" and d.command[:4].tolist() == [0, 0, 0, 0]
    ctl = Controller(_WristNets([0.05, 0.0, 0.0, 0.7, -1.0], visible=False), SafetyConfig(lost_ticks=1))
    d = ctl.decide(frame, senses)
    assert d.stop == "target_lost" and d.command.tolist() == [0, 0, 0, 0, -1]
    with pytest.raises(ValueError, match=r"5 finite numbers \(the 3 senses, then sin and cos of the wrist angle\)"):
        ctl.decide(frame, senses[:3])
    # the numpy conversion equals the torch one
    raw = torch.tensor([[0.3, -1.2, 0.5, 0.8, 2.0]])
    grip = torch.tensor([[1.0, 0.0, 0.0, math.sin(0.6), math.cos(0.6)]])
    np.testing.assert_allclose(action_from_raw(raw.numpy(), 0.1, grip.numpy(), 1.5), to_action(raw, WRIST, grip).numpy(),
                               atol=1e-6)


@pytest.fixture(scope="module")
def wrist_policy(tmp_path_factory) -> str:
    """A randomly initialised wrist control net at the shipped vision net's 64 px, saved as a deployable checkpoint."""
    from graspsim.dagger.policy import save_checkpoint

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("wrist") / "policy.pt"
    save_checkpoint(path, ControlNet(ControlNetConfig(wrist=True)), None, 0,
                    config={"sim": {"target": {"kinds": ["sphere", "cube", "cylinder"]}}})
    return str(path)


def test_deploy_drives_the_wrist_and_refuses_adapters_without_one(wrist_policy, cube_vision, tmp_path):
    import csv

    from graspsim.robot.deploy import DeployConfig, deploy
    import deploy_fakes as fakes

    d = SimConfig().to_dict()
    d["target"]["kinds"] = ["cube"]
    cube = SimConfig.from_dict(d)
    kw = dict(vision=cube_vision, policy=wrist_policy, hz=0, episodes=1, time_limit=0.5)
    summary = deploy(DeployConfig(out=tmp_path / "sim", camera="sim", robot="sim", sim=cube, **kw))
    assert summary["episodes"] == 1
    with open(tmp_path / "sim" / "ticks.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 5 and {"wrist_sin", "wrist_cos", "cmd_wz", "sent_wz"} <= set(rows[0])
    assert all(abs(float(r["sent_wz"])) <= cube.max_yaw_rate + 1e-6 for r in rows)
    # an adapter with a wrist gets 5-float commands; one without is refused before any command is sent
    fakes.EVENTS.clear()
    deploy(DeployConfig(out=tmp_path / "w", camera="deploy_fakes:RedDotCamera", robot="deploy_fakes:WristRobot", **{**kw, "hz": 20}), camera=fakes.RedDotCamera(), robot=fakes.WristRobot())
    sends = [c for kind, c in fakes.EVENTS if kind == "send"]
    assert sends and all(len(c) == 5 for c in sends)
    fakes.EVENTS.clear()
    with pytest.raises(ValueError, match=r"robot adapter 'logging' \(LoggingRobot.send\) has no wrist"):
        deploy(DeployConfig(out=tmp_path / "nw", camera="deploy_fakes:RedDotCamera", robot="deploy_fakes:LoggingRobot",
                            **{**kw, "hz": 20}), camera=fakes.RedDotCamera(), robot=fakes.LoggingRobot())
    assert not [e for e in fakes.EVENTS if e[0] == "send"]
    with pytest.raises(ValueError, match="holds only --sim.target.kinds sphere"):
        deploy(DeployConfig(out=tmp_path / "sph", camera="sim", robot="sim", **kw))


def test_onnx_export_of_a_wrist_net_names_its_action_layout(wrist_policy, cube_vision, tmp_path):
    pytest.importorskip("onnxruntime")
    from graspsim.robot.export import ExportConfig, export

    contract = export(ExportConfig(vision=cube_vision, policy=wrist_policy, out=tmp_path / "onnx",
                                   frames=32))
    c = contract["control"]
    assert c["action_names"] == ["vx", "vy", "vz", "wz", "grip"] and c["wrist"] is True
    assert c["inputs"][1]["shape"] == ["batch", 5] and c["outputs"][0]["shape"] == ["batch", 5]
    assert contract["parity"]["control_raw_max_abs_diff"] <= 1e-4 and contract["parity"]["action_max_abs_diff"] <= 1e-4


def test_checkpoints_are_refused_for_kinds_they_were_not_trained_on(tmp_path):
    from graspsim import runs
    from graspsim.dagger.masks import check_vision_kinds

    assert runs.trained_kinds(None) == ("sphere",)
    assert runs.trained_kinds({"dagger": {"sim": {"target": {"kinds": ["cube"]}}}}) == ("cube",)
    with pytest.raises(ValueError, match=r"p\.pt was trained on cube, not on cylinder; give --sim.target.kinds within "
                                         r"cube, or train one with --sim.target.kinds cube,cylinder"):
        check_fits_scenes(WRIST, kinds_sim("cube,cylinder"), "p.pt", ("cube",))
    check_fits_scenes(WRIST, kinds_sim("cube"), "p.pt", ("sphere", "cube"))
    # the shipped vision net was trained on spheres only
    with pytest.raises(ValueError, match=r"vision checkpoint vision/assets/segnet.pt was trained on sphere, not on cube"):
        check_vision_kinds("vision/assets/segnet.pt", kinds_sim("sphere,cube"))
    check_vision_kinds("vision/assets/segnet.pt", SimConfig())
