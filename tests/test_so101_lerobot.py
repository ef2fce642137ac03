"""The SO-101 on LeRobot's own driver (issue 54), without hardware: LeRobot's ``SO101Follower`` and Feetech bus code run
unchanged on a simulated Feetech SDK whose servo writes drive the MuJoCo SO-101 and whose reads come back from it
(tests/so101_twin.py); the MuJoCo wrist camera is the camera. The ``deploy`` loop grasps through it; each fault stops
the robot first; every refusal happens before anything moves.

The decisions come from scripted grasps in place of trained nets (no nets trained for the so101 embodiment ship with
the repository): on the fixed test scenes tests/so101_twin.py ``ScriptedNets`` (colour mask, privileged cube pose);
in the slow comparison over the MuJoCo backend's own scenes (:class:`so101_twin.BackendWorld`) the backend's scripted
grasp. benchmarks/so101_driver_vs_backend.py runs the same comparison with trained nets.
"""

from __future__ import annotations

import importlib.metadata
import math
from pathlib import Path

import numpy as np
import pytest

try:  # LeRobot before MuJoCo's GL: loading torch's triton after Mesa's LLVM crashes the process
    from graspsim.robot.so101 import require_lerobot

    require_lerobot()
    import lerobot.cameras.opencv  # noqa: F401
except (ImportError, ValueError) as e:
    pytest.skip(f"the so101 robot needs LeRobot 0.4.4 (pip install 'graspsim[so101]'): {e}", allow_module_level=True)
try:
    import mujoco  # noqa: F401

    from graspsim.mujoco.ik import So101Kinematics  # noqa: F401
except ImportError as e:
    pytest.skip(f"the SO-101 twin needs the MuJoCo backend (pip install 'graspsim[mujoco]'): {e}",
                allow_module_level=True)

import so101_twin as tw  # noqa: E402
from graspsim.robot import so101  # noqa: E402
from graspsim.robot.controller import Controller  # noqa: E402
from graspsim.robot.deploy import DeployConfig, deploy  # noqa: E402
from graspsim.robot.lerobot_camera import LeRobotCamera, parse_spec  # noqa: E402
from graspsim.robot.loop import DeployError  # noqa: E402
from graspsim.robot.so101 import JointMap, So101Config, So101Fault  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VISION = ROOT / "vision" / "assets" / "segnet.pt"
POLICY = ROOT / "tests" / "assets" / "policy_format0.pt"  # a floating-embodiment control net


@pytest.fixture(scope="module")
def kin():
    return So101Kinematics()


@pytest.fixture
def twin(tmp_path, monkeypatch):
    """(world, arm, config): a fresh MuJoCo SO-101 behind a simulated Feetech bus on a port that exists."""
    tw.patch_sdk(monkeypatch)
    world = tw.TwinWorld()
    port = tmp_path / "ttyTWIN0"
    port.write_text("")
    arm = tw.TwinArm(world, str(port), tmp_path / "calibration")
    cfg = So101Config(port=str(port), id="twin", calibration_dir=tmp_path / "calibration")
    yield world, arm, cfg
    tw.TWINS.pop(str(port), None)
    world.close()


def _arm_q(world) -> np.ndarray:
    return world.data.qpos[world.qadr].copy()


class Recorder:
    """Wraps a robot's send and stop to record the order of calls (and the fault that ended a run)."""

    def __init__(self, robot):
        self.events: list[str] = []
        self.holds: list[tuple[np.ndarray, np.ndarray]] = []
        send, stop = robot.send, robot.stop

        def rec_send(cmd):
            self.events.append("send")
            return send(cmd)

        def rec_stop():
            self.events.append("stop")
            stop()
            w = getattr(robot, "_world", None)
            if w is not None:
                self.holds.append((w.data.ctrl[w.act].copy(), _arm_q(w)))

        robot.send, robot.stop = rec_send, rec_stop


def _run(tmp_path, world, robot, kin, camera=None, episodes=1, time_limit=6.0, **kw):
    ctl = Controller(tw.ScriptedNets(world, kin))
    cfg = DeployConfig(vision=VISION, policy=POLICY, camera="sim-twin", robot="dry-run", out=tmp_path / "out",
                       hz=0.0, episodes=episodes, time_limit=time_limit, progress=False, warmup=1, **kw)
    cam = camera if camera is not None else LeRobotCamera(tw.lerobot_twin_camera(world))
    return deploy(cfg, camera=cam, robot=robot, controller=ctl)


# ------------------------------------------------------------------------------------------ units and refusals
def test_joint_map_round_trip_and_checks():
    m = JointMap(sign=(1, -1, 1, -1, 1), offset=(0.1, 0, -0.2, 0, 0.3))
    deg = np.array([10.0, -20.0, 33.0, 90.0, -150.0])
    assert np.allclose(m.to_lerobot(m.to_model(deg)), deg)
    assert np.allclose(m.to_model(deg)[1], -math.radians(-20.0))
    with pytest.raises(ValueError, match="JointMap.sign"):
        JointMap(sign=(1, 2, 1, 1, 1))
    with pytest.raises(ValueError, match="So101Config.speed"):
        So101Config(speed=1.5)
    with pytest.raises(ValueError, match="So101Config.start_height"):
        So101Config(start_height=0.2)


def test_driver_reads_the_model_joint_angles(twin, kin):
    """Degrees and the 0-100 gripper through LeRobot's real conversions come back as the MuJoCo joint angles."""
    world, arm, cfg = twin
    robot = tw.twin_robot(cfg, world, kinematics=kin)
    q, pct = robot._read()
    tick = math.radians(360 / 4095)
    assert np.abs(q - _arm_q(world)[:5]).max() <= tick
    assert abs(robot.to_jaw(pct) - _arm_q(world)[5]) <= 2 * tick
    for jaw in (robot.jaw_closed, 0.4, 1.2):
        assert abs(robot.to_jaw(robot.to_pct(jaw)) - jaw) < 1e-9
    robot.close()


def test_refused_without_port_or_id_or_calibration(twin, kin, tmp_path):
    world, arm, cfg = twin
    with pytest.raises(ValueError, match="--so101.port"):
        so101.So101Robot(So101Config(id="twin"))
    with pytest.raises(ValueError, match="--so101.id"):
        so101.So101Robot(So101Config(port=cfg.port))
    with pytest.raises(ValueError, match="does not exist"):
        so101.So101Robot(So101Config(port=str(tmp_path / "ttyNONE"), id="twin"))
    with pytest.raises(ValueError, match="--so101.port"):
        DeployConfig(vision=VISION, policy=POLICY, camera="0", robot="so101", out=tmp_path / "o")
    other = So101Config(port=cfg.port, id="not_calibrated", calibration_dir=cfg.calibration_dir)
    with pytest.raises(ValueError, match="lerobot-calibrate --robot.type=so101_follower .*--robot.id=not_calibrated"):
        so101.So101Robot(other, kinematics=kin)
    assert arm.writes == 0


def test_deploy_config_refuses_so101_without_lerobot(tmp_path, monkeypatch):
    from graspsim.extras import MissingExtra
    from graspsim.robot import deploy as deploy_module

    monkeypatch.setattr(deploy_module, "installed", lambda module: module != "lerobot")
    with pytest.raises(MissingExtra, match=r"LeRobot, which is not installed: pip install 'graspsim\[so101\]'"):
        DeployConfig(vision=VISION, policy=POLICY, camera="0", robot="so101", out=tmp_path / "o",
                     so101=So101Config(port="/dev/ttyACM0", id="a"))


def test_refused_when_motors_hold_another_calibration(twin, kin):
    world, arm, cfg = twin
    arm.regs[3][tw.ADDR["Homing_Offset"]] = 5  # the elbow was calibrated again since the file was written
    q0 = _arm_q(world)
    with pytest.raises(ValueError, match="another calibration"):
        tw.twin_robot(cfg, world, kinematics=kin)
    assert arm.writes == 0 and np.array_equal(_arm_q(world), q0)


def test_refused_for_an_untested_or_missing_lerobot(twin, kin, monkeypatch):
    world, arm, cfg = twin
    monkeypatch.setattr(so101.importlib.metadata, "version", lambda name: "0.6.1")
    with pytest.raises(ValueError, match="tested with LeRobot 0.4.4.*--so101.untested-lerobot"):
        tw.twin_robot(cfg, world, kinematics=kin)

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(so101.importlib.metadata, "version", missing)
    with pytest.raises(ImportError, match=r"pip install 'graspsim\[so101\]'"):
        tw.twin_robot(cfg, world, kinematics=kin)
    assert arm.writes == 0


def test_refused_when_the_measured_pose_is_implausible(twin, kin):
    """A wrong offset (or sign) puts the measured wrist_flex outside the model's range: refused before homing."""
    world, arm, cfg = twin
    bad = So101Config(port=cfg.port, id="twin", calibration_dir=cfg.calibration_dir,
                      joint_map=JointMap(offset=(0.0, 0.0, 0.0, 1.0, 0.0)))
    robot = tw.twin_robot(bad, world, kinematics=kin)
    q0 = _arm_q(world)
    with pytest.raises(ValueError, match="wrist_flex .* not one the arm can have|not one the arm can have.*wrist_flex"):
        robot.start_episode(0)
    assert np.abs(_arm_q(world) - q0).max() < math.radians(0.5)  # the hold at connect moved nothing
    robot.close()


def test_deploy_refuses_a_net_of_another_embodiment_before_connecting(twin, tmp_path):
    world, arm, cfg = twin
    dcfg = DeployConfig(vision=VISION, policy=POLICY, camera="0", robot="so101", out=tmp_path / "out", so101=cfg)
    with pytest.raises(ValueError, match="trained for the 'floating' embodiment.*'so101'.*--sim.embodiment so101"):
        deploy(dcfg)
    assert arm.writes == 0 and arm.reads == 0


def test_embodiment_check_reads_both_checkpoints(tmp_path):
    """A control and a vision checkpoint recorded as so101 pass; a floating one of either is refused, named."""
    import torch

    from graspsim.robot.deploy import check_embodiment

    so101_sim = {"sim": {"embodiment": "so101"}}
    policy, vision = tmp_path / "policy.pt", tmp_path / "seg.pt"
    from graspsim.dagger import policy as control

    ckpt = control.load_checkpoint(POLICY)  # upgraded from its old format
    torch.save({**ckpt, "kind": control.KIND, "format_version": control.FORMAT_VERSION, "config": so101_sim}, policy)
    torch.save({**torch.load(VISION, map_location="cpu", weights_only=False), "config": so101_sim}, vision)
    check_embodiment("so101", policy, vision)
    with pytest.raises(ValueError, match=r"control checkpoint .*policy_format0.pt was trained for the 'floating'"):
        check_embodiment("so101", POLICY, vision)
    with pytest.raises(ValueError, match=r"vision checkpoint .*segnet.pt was trained for the 'floating'"):
        check_embodiment("so101", policy, VISION)


# ------------------------------------------------------------------------------------------ commands
def test_send_limits_joint_steps_and_scales_speed(twin, kin):
    world, arm, cfg = twin
    slow = So101Config(port=cfg.port, id="twin", calibration_dir=cfg.calibration_dir, speed=0.5, max_step_deg=2.0)
    robot = tw.twin_robot(slow, world, kinematics=kin)
    robot.start_episode(1)
    q0 = robot.q.copy()
    sent = robot.send(np.array([0.1, -0.1, 0.0, 1.5, -1.0], np.float32))
    assert np.allclose(sent, [0.05, -0.05, 0.0, 0.75, -1.0])
    assert np.abs(robot.goal_q - q0).max() <= math.radians(2.0) + 1e-9
    with pytest.raises(ValueError, match="4 or 5 finite numbers"):
        robot.send(np.array([np.nan, 0, 0, 0, 1.0]))
    robot.close()


def test_the_wrist_turns_no_further_than_the_simulator_lets_it(twin, kin):
    """The yaw target stays within max_wrist_yaw of the episode's start, as in the simulator: a net that keeps asking
    to turn at that limit gets no turn there (unlimited, the IK's target ran past the wrist's reach and the arm stopped
    with wrist_roll "not following")."""
    world, arm, cfg = twin
    robot = tw.twin_robot(cfg, world, kinematics=kin, max_wrist_yaw=0.3)
    robot.start_episode(2)
    sent = [float(robot.send(np.array([0.0, 0.0, 0.0, 1.5, -1.0], np.float32))[3]) for _ in range(4)]
    assert np.allclose(sent, [1.5, 1.5, 0.0, 0.0], atol=1e-6), sent
    assert abs(robot.ik.yaw - robot.yaw0) <= 0.3 + 1e-9
    robot.close()


def test_gap_sense_is_never_negative(twin, kin):
    """Closed on nothing, the jaw squeezes past where the pads touch (the jaw's table gives a negative gap there):
    the gap sense reads 0, as in the simulators, not a negative fraction the robot loop refuses."""
    world, arm, cfg = twin
    robot = tw.twin_robot(cfg, world, kinematics=kin)
    robot.start_episode(0)
    world.place("cube", 0.09, 0.09, 0.0)  # nothing between the jaws
    for _ in range(12):
        robot.send(np.array([0.0, 0.0, 0.0, 0.0, 1.0], np.float32))
    assert kin.jaw_to_gap(robot.to_jaw(robot.pct)) < 0  # squeezed past touching
    assert robot.senses().gripper[0] == 0.0
    robot.close()


def test_the_jaw_target_moves_at_the_finger_speed(twin, kin):
    """The jaw's target moves towards closed by the simulator's finger speed a tick (2 cm of pad gap at 0.2 m/s and
    10 Hz), not in one jump of LeRobot's gripper limit: the nets were trained with that speed."""
    world, arm, cfg = twin
    robot = tw.twin_robot(cfg, world, kinematics=kin, finger_speed=0.2)
    robot.start_episode(0)
    jaw0, goals = robot.jaw_cmd, []
    for _ in range(4):
        robot.send(np.array([0.0, 0.0, 0.0, 0.0, 1.0], np.float32))
        goals.append(robot.to_jaw(robot.goal_pct))
    steps = -np.diff([jaw0, *goals])
    assert np.allclose(steps[:2], robot.jaw_step, atol=1e-6), steps
    assert abs(kin.jaw_to_gap(jaw0) - kin.jaw_to_gap(goals[0]) - 0.02) < 0.004
    robot.close()


def test_the_pads_stay_off_the_table_while_the_jaw_opens_from_half_closed(twin, kin):
    """Pressed down at the table with the jaw half closed, then opened: the IK keeps both pads off the table over
    the jaw's measured travel (half closed, the moving pad hangs lower than open), so the jaw opens. Kept off only
    for the open jaw, the pad pressed on the table pinned the jaw and the run ended on a gripper stall."""
    world, arm, cfg = twin
    robot = tw.twin_robot(cfg, world, kinematics=kin)
    robot.start_episode(0)
    world.place("cube", 0.09, 0.09, 0.0)  # nothing between the jaws
    down = lambda grip: robot.send(np.array([0.0, 0.0, -0.1, 0.0, grip], np.float32))  # noqa: E731
    for _ in range(10):
        down(-1.0)
    for _ in range(3):
        down(1.0)
    half = robot.pct
    for _ in range(12):
        down(-1.0)
    assert half < robot.to_pct(robot.ik.open_jaw) - 10
    assert abs(robot.pct - robot.to_pct(robot.ik.open_jaw)) < 3.0 and not robot.stalled
    robot.close()


def test_contact_sense_is_the_guarded_move_near_the_table(twin, kin):
    """Going down at full speed in the air gives no contact (the servos' lag is not a contact); near the table, the
    arm held back by it (or the fingertips at the table) does."""
    world, arm, cfg = twin
    robot = tw.twin_robot(cfg, world, kinematics=kin)
    robot.start_episode(0)
    world.place("cube", 0.09, 0.09, 0.0)  # nothing under the jaws
    seen = []
    for _ in range(12):
        robot.send(np.array([0.0, 0.0, -0.1, 0.0, -1.0], np.float32))
        s = robot.senses()
        seen.append((float(s.tcp[2]), bool(s.gripper[2])))
    assert not any(c for tip, c in seen if tip > cfg.press_height), seen
    assert seen[-1][1] and seen[-1][0] < 0.005, seen  # pressing on the table
    robot.close()


def test_dry_run_moves_nothing_and_logs_joint_targets(twin, kin, tmp_path):
    world, arm, cfg = twin
    dry = So101Config(port=cfg.port, id="twin", calibration_dir=cfg.calibration_dir, dry_run=True)
    robot = tw.twin_robot(dry, world, kinematics=kin)
    q0 = _arm_q(world)
    summary = _run(tmp_path, world, robot, kin, time_limit=2.0)
    assert summary["ended"] == "completed" and arm.writes == 0
    assert np.abs(_arm_q(world) - q0).max() < math.radians(0.5)
    kinds = {k for k, _ in robot.log}
    assert {"home", "targets", "stop"} <= kinds
    targets = [a for k, a in robot.log if k == "targets"]
    assert len(targets) == summary["ticks"] and set(targets[0]) == {f"{j}.pos" for j in tw.MOTORS}
    robot.close()


def test_deploy_robot_so101_opens_the_arm_from_its_flags(twin, kin, tmp_path):
    """``--robot so101 --so101.*`` through DeployConfig and open_robot (real time, 10 Hz), dry run: the adapter is
    built from the flags and connected; nothing moves."""
    world, arm, cfg = twin
    dry = So101Config(port=cfg.port, id="twin", calibration_dir=cfg.calibration_dir, dry_run=True)
    dcfg = DeployConfig(vision=VISION, policy=POLICY, camera="lerobot:twin", robot="so101", out=tmp_path / "out",
                        hz=10.0, time_limit=0.5, progress=False, warmup=1, so101=dry)
    q0 = _arm_q(world)
    summary = deploy(dcfg, camera=LeRobotCamera(tw.lerobot_twin_camera(world)),
                     controller=Controller(tw.ScriptedNets(world, kin)))
    assert summary["ended"] == "completed" and summary["robot"] == "so101" and summary["ticks"] == 5
    assert summary["config"]["so101"]["dry_run"] is True and arm.writes == 0
    assert np.abs(_arm_q(world) - q0).max() < math.radians(0.5)


# ------------------------------------------------------------------------------------------ the loop grasps
def test_deploy_grasps_in_mujoco_through_lerobots_driver(twin, kin, tmp_path):
    """Three scenes, full deploy loop: LeRobot camera adapter on the MuJoCo wrist camera, So101Robot on LeRobot's
    SO101Follower on the simulated bus. Each cube (turned up to 40 degrees) is lifted."""
    world, arm, cfg = twin
    robot = tw.twin_robot(cfg, world, kinematics=kin)
    summary = _run(tmp_path, world, robot, kin, episodes=3)
    assert summary["ended"] == "completed", summary["error"]
    assert summary["num_success"] == 3, summary["per_episode"]
    assert arm.writes > 0 and arm.reads > 0
    robot.close()


def test_a_wrong_joint_sign_breaks_the_grasps(twin, kin, tmp_path):
    """The same scenes with shoulder_pan's sign flipped (a mapping that passes the start-pose check, the pan near its
    middle): the arm goes the wrong way and no cube is lifted, so the grasp test above does check the conversions."""
    world, arm, cfg = twin
    flipped = So101Config(port=cfg.port, id="twin", calibration_dir=cfg.calibration_dir,
                          joint_map=JointMap(sign=(-1, 1, 1, 1, 1)))
    robot = tw.twin_robot(flipped, world, kinematics=kin)
    summary = _run(tmp_path, world, robot, kin, episodes=3, time_limit=3.0)
    assert summary["num_success"] == 0, summary["per_episode"]
    robot.close()


# ------------------------------------------------------------------------------------------ faults: stop first
def _faulty(world, arm, at: int, fault):
    """The LeRobot twin camera, injecting ``fault(arm)`` once ``at`` frames were read."""
    cam = tw.lerobot_twin_camera(world)
    read = cam.async_read

    def async_read(timeout_ms=200):
        if cam.k == at:
            fault(arm)
        return read(timeout_ms)

    cam.async_read = async_read
    return LeRobotCamera(cam)


def _fault_run(twin, kin, tmp_path, at, fault, match, **cfg_kw):
    world, arm, cfg = twin
    c = So101Config(port=cfg.port, id="twin", calibration_dir=cfg.calibration_dir, **cfg_kw)
    robot = tw.twin_robot(c, world, kinematics=kin)
    robot._world = world
    rec = Recorder(robot)
    with pytest.raises(DeployError, match=match):
        _run(tmp_path, world, robot, kin, camera=_faulty(world, arm, at, fault))
    summary = (tmp_path / "out" / "summary.json").read_text()
    assert '"ended": "error"' in summary
    assert rec.events[-1] == "stop", rec.events[-5:]  # stopped first, nothing sent after the fault
    return world, arm, robot, rec


def test_bus_read_timeout_stops_the_arm_holding_its_last_pose(twin, kin, tmp_path):
    world, arm, robot, rec = _fault_run(twin, kin, tmp_path, 6, lambda a: setattr(a, "fail_reads", True),
                                        "reading the arm's joints failed.*no status packet")
    ctrl, q = rec.holds[-1]
    assert np.abs(ctrl[:5] - robot.q).max() < math.radians(0.1)  # held at the last good reading


def test_refused_write_stops_the_arm(twin, kin, tmp_path, caplog):
    world, arm, robot, rec = _fault_run(twin, kin, tmp_path, 6, lambda a: setattr(a, "refuse_writes", True),
                                        "refused the joint targets")
    assert "could not send the hold" in caplog.text  # stop() tried, logged, and did not raise


def test_a_joint_that_does_not_follow_stops_the_arm(twin, kin, tmp_path):
    world, arm, robot, rec = _fault_run(twin, kin, tmp_path, 2, lambda a: setattr(a, "stuck", "shoulder_pan"),
                                        "joint shoulder_pan does not follow", follow_limit_deg=3.0)
    ctrl, q = rec.holds[-1]
    assert np.abs(ctrl[1:5] - robot.q[1:]).max() < math.radians(0.1)  # the others hold where they are


def test_a_stalled_gripper_stops_the_arm(twin, kin, tmp_path):
    world, arm, robot, rec = _fault_run(twin, kin, tmp_path, 1, lambda a: setattr(a, "stuck", "gripper"),
                                        "gripper stalled")
    assert robot.goal_pct is not None and abs(robot.goal_pct - robot.pct) < 1.0  # held where it stalled


def test_an_unplugged_camera_stops_the_arm(twin, kin, tmp_path):
    world, arm, cfg = twin
    robot = tw.twin_robot(cfg, world, kinematics=kin)
    robot._world = world
    rec = Recorder(robot)
    cam = LeRobotCamera(tw.lerobot_twin_camera(world, unplug_after=8))
    with pytest.raises(DeployError, match=r"camera .*failed \(unplugged\?\).*read thread is not running"):
        _run(tmp_path, world, robot, kin, camera=cam)
    assert rec.events[-1] == "stop" and rec.events.count("send") == 8
    ctrl, q = rec.holds[-1]
    assert np.abs(ctrl[:5] - robot.q).max() < math.radians(0.1)


# ------------------------------------------------------------------------------------------ the camera adapter
def test_lerobot_camera_spec_and_errors():
    assert parse_spec("lerobot:opencv:0") == ("opencv", "0", {})
    assert parse_spec("lerobot:opencv:/dev/video2:640x480@30") == ("opencv", "/dev/video2",
                                                                    {"width": 640, "height": 480, "fps": 30})
    assert parse_spec("lerobot:realsense:0123456") == ("realsense", "0123456", {})
    from graspsim.robot.cameras import CameraError, CameraTimeout, open_camera

    with pytest.raises(CameraError, match="lerobot:KIND:SOURCE"):
        parse_spec("lerobot:webcam:0")
    with pytest.raises(CameraError, match="lerobot:opencv:/nonexistent"):
        open_camera("lerobot:opencv:/nonexistent/video9")

    class Slow:
        latest_timestamp = None

        def connect(self):
            pass

        def async_read(self, timeout_ms=200):
            raise TimeoutError("no frame")

        def disconnect(self):
            pass

    with pytest.raises(CameraTimeout, match="no new frame within 0.1 s"):
        LeRobotCamera(Slow(), name="slow").read(0.1)


@pytest.mark.slow
def test_driver_matches_the_backend_alone_over_100_scenes(tmp_path):
    """Issue 54's target: success through LeRobot's driver within 3 points of the MuJoCo backend alone (``deploy
    --camera mujoco --robot mujoco``) over the backend's own 100 scenes of the same episode seeds (all three kinds,
    randomized sizes, poses, looks and distractors). The decisions come from the backend's scripted grasp on the true
    state; the next test runs the shipped so101 nets."""
    from graspsim import SimConfig
    from graspsim.config import TargetConfig

    sim = SimConfig(embodiment="so101", target=TargetConfig(kinds=("sphere", "cube", "cylinder")))
    result = tw.driver_vs_backend(sim, VISION, POLICY, 100, tmp_path, scripted=True)
    a, b = (tw.tally(result[k], result["kinds"]) for k in ("driver", "backend"))
    assert [e["seed"] for e in result["driver"]["per_episode"]] == [e["seed"] for e in result["backend"]["per_episode"]]

    def line(t):
        return ", ".join(f"{k} {s}/{n}" for k, (s, n) in sorted(t["per_kind"].items())) + f"; failures {t['ends']}"

    print(f"through LeRobot's driver: {line(a)}\nMuJoCo backend alone: {line(b)}")
    assert len(set(result["kinds"].values())) == 3  # the backend's scenes, every kind
    assert abs(a["per_kind"]["all"][0] - b["per_kind"]["all"][0]) <= 3, (line(a), line(b))


@pytest.mark.slow
def test_shipped_so101_nets_through_the_driver_match_the_backend_alone(tmp_path):
    """Issue 54's target with trained nets: the shipped so101 pair (vision/assets/segnet_so101.pt,
    dagger/assets/policy_so101.pt) through LeRobot's driver within 3 points of the same pair on the MuJoCo backend
    alone, 100 scenes of the same seeds (100/100 against 99/100 on 2026-12-06 with the current vision net, the
    weighted ensemble; 100/100 against 100/100 with the equal-weight one; 100/100 against 99/100 on 2026-12-01 with the
    single net; 100/100 against 100/100 on 2026-11-28 with the net before, at either of its operating points; 92/100
    against 91/100 before the simulated robot reported MuJoCo's measured fingertip points)."""
    from graspsim import SimConfig
    from graspsim.config import TargetConfig

    sim = SimConfig(embodiment="so101", target=TargetConfig(kinds=("sphere", "cube", "cylinder")))
    vision = ROOT / "vision" / "assets" / "segnet_so101.pt"
    policy = ROOT / "dagger" / "assets" / "policy_so101.pt"
    result = tw.driver_vs_backend(sim, vision, policy, 100, tmp_path, scripted=False)
    a, b = (tw.tally(result[k], result["kinds"]) for k in ("driver", "backend"))
    print(f"through LeRobot's driver {a['per_kind']}, backend alone {b['per_kind']}")
    assert len(result["driver"]["per_episode"]) == 100  # no fault ended the driver's run
    assert b["per_kind"]["all"][0] >= 85  # the pair still grasps on the backend (99/100 on 2026-12-01)
    assert abs(a["per_kind"]["all"][0] - b["per_kind"]["all"][0]) <= 3
