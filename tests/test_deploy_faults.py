"""Faults of ``graspsim deploy`` and ``graspsim record`` (issues 38 and 55): every fault stops the robot first, writes
``summary.json`` and ends with one error line; refusals come before the camera or the robot is opened.

Each case asserts the exit code, the one error line on stderr, the order of the fake robot's calls
(tests/deploy_fakes.py) and the files left behind.
"""

from __future__ import annotations

import csv
import json
import shutil
import time
from pathlib import Path

import pytest

import deploy_fakes
from child_signals import default_stop_signals
from cli_run import run_cli
from graspsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
VISION = ROOT / "vision" / "assets" / "segnet.pt"
POLICY = ROOT / "tests" / "assets" / "policy_format0.pt"
NETS = ["--vision", str(VISION), "--policy", str(POLICY)]
FAKE = ["--hz", "100", "--time-limit", "0.5", "--warmup", "1", "--no-progress"]
SIM = ["--camera", "sim", "--robot", "sim", "--hz", "0", "--time-limit", "0.3", "--warmup", "1", "--no-progress"]
UNWRITABLE = Path("/proc/graspsim-no-such-dir")
"""A folder that cannot be created, even by root (permission bits do not stop root; /proc does)."""


@pytest.fixture(autouse=True)
def _fresh_fakes():
    deploy_fakes.EVENTS.clear()
    deploy_fakes.STAMPS.clear()
    deploy_fakes.RELEASE.clear()
    yield
    deploy_fakes.RELEASE.set()  # frees a BlockingCamera's abandoned read


_run = run_cli


def _kinds() -> list[str]:
    return [k for k, _ in deploy_fakes.EVENTS]


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


# ------------------------------------------------------------------------------------------ the capture watchdog
def test_capture_watchdog_stops_the_robot_when_the_camera_hangs(tmp_path, capsys):
    """A read that never returns: the robot gets stop() two periods after it started, the run ends at
    --frame-timeout + 0.5 s with one line naming the camera and the deadline, summary.json says why."""
    out = tmp_path / "o"
    t0 = time.monotonic()
    code, line = _run(["deploy", *NETS, "--camera", "deploy_fakes:BlockingCamera", "--robot",
                       "deploy_fakes:TimedRobot", "--out", str(out), "--hz", "20", "--frame-timeout", "0.2",
                       "--time-limit", "5", "--warmup", "1", "--no-progress"], capsys)
    took = time.monotonic() - t0
    assert code == 2
    assert line.startswith("graspsim deploy: error: camera 'blocking' (BlockingCamera.read) did "
                           "not return within 0.7 s (its timeout 0.2 s + 0.5 s grace)"), line
    assert line.endswith("the robot was sent a stop command")
    stamps = deploy_fakes.STAMPS
    assert [k for k, _ in stamps] == ["send", "send", "blocked", "stop", "stop"]
    blocked, first_stop = stamps[2][1], stamps[3][1]
    assert 0.09 <= first_stop - blocked <= 0.1 + 0.15  # two periods of 50 ms, with slack for a loaded machine
    assert stamps[4][1] - blocked <= 0.7 + 0.3
    assert took < 8
    s = _summary(out)
    assert s["ended"] == "error" and "did not return within 0.7 s" in s["error"]
    assert s["capture_stalls"] == 1 and s["capture_deadlines_s"] == [pytest.approx(0.1), pytest.approx(0.7)]
    assert len(_rows(out / "ticks.csv")) == 2
    assert _tree(out) == ["summary.json", "ticks.csv"]


def test_a_slow_read_stops_the_robot_and_the_run_goes_on(tmp_path, capsys):
    """A read that takes 0.3 s at 20 Hz: stop() after two periods, then the run continues and completes."""
    out = tmp_path / "o"
    code, _ = _run(["deploy", *NETS, "--camera", "deploy_fakes:SlowCamera", "--robot", "deploy_fakes:TimedRobot",
                    "--out", str(out), "--hz", "20", "--frame-timeout", "1", "--time-limit", "0.3", "--warmup", "1",
                    "--no-progress"], capsys)
    assert code == 0
    kinds = [k for k, _ in deploy_fakes.STAMPS]
    assert kinds[:4] == ["send", "send", "blocked", "stop"] and kinds[4] == "send" and kinds[-1] == "stop"
    s = _summary(out)
    assert s["ended"] == "completed" and s["capture_stalls"] == 1 and s["error"] is None
    assert len(_rows(out / "ticks.csv")) == 6


# ------------------------------------------------------------------------------------------ bad adapter values
BAD_VALUES = [
    ("deploy_fakes:NoneCamera", "deploy_fakes:LoggingRobot", 2,
     "camera 'deploy_fakes:NoneCamera' (NoneCamera.read) returned None; expected a graspsim.robot.cameras.Frame"),
    ("deploy_fakes:TupleCamera", "deploy_fakes:LoggingRobot", 2,
     "camera 'deploy_fakes:TupleCamera' (TupleCamera.read) returned a tuple of 2; expected a graspsim"),
    ("deploy_fakes:EmptyFrameCamera", "deploy_fakes:LoggingRobot", 2,
     "(EmptyFrameCamera.read) returned a frame whose rgb is an array of shape (0, 0, 3) uint8; expected H,W,3 uint8"),
    ("deploy_fakes:FloatFrameCamera", "deploy_fakes:LoggingRobot", 2,
     "(FloatFrameCamera.read) returned a frame whose rgb is an array of shape (64, 64, 3) float32"),
    ("deploy_fakes:GreyFrameCamera", "deploy_fakes:LoggingRobot", 2,
     "(GreyFrameCamera.read) returned a frame whose rgb is an array of shape (64, 64) uint8"),
    ("deploy_fakes:NanTimeCamera", "deploy_fakes:LoggingRobot", 2,
     "(NanTimeCamera.read) returned a frame time of nan; expected time.monotonic() at capture (s)"),
    ("deploy_fakes:WallClockCamera", "deploy_fakes:LoggingRobot", 2,
     "ahead of time.monotonic(); give time.monotonic() at capture (time.time() is another clock)"),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:TwoValueSendRobot", 3,
     "robot adapter 'deploy_fakes:TwoValueSendRobot' (TwoValueSendRobot.send) returned an array of shape (2,) "
     "float32 [0.0, 0.0]; expected the 4 values it sent"),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:NanSendRobot", 3,
     "(NanSendRobot.send) returned an array of shape (4,) float32 [nan, nan, nan, nan]"),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:ExitingRobot", 3,
     "robot adapter 'deploy_fakes:ExitingRobot' (ExitingRobot.send) raised SystemExit: 5"),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:NoneSensesRobot", 2,
     "robot adapter 'deploy_fakes:NoneSensesRobot' (NoneSensesRobot.senses) returned None; expected Senses("),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:TupleSensesRobot", 2,
     "(TupleSensesRobot.senses) returned a tuple of 3"),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:NanSensesRobot", 2,
     "(NanSensesRobot.senses) returned gripper senses an array of shape (3,) float32 [nan, 0.0, 0.0]; expected 3 "
     "finite floats"),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:NoneOutcomeRobot", 2,
     "robot adapter 'deploy_fakes:NoneOutcomeRobot' (NoneOutcomeRobot.outcome) returned None; expected Outcome("),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:BadWorkspaceRobot", 0,
     "(BadWorkspaceRobot.workspace) returned a tuple of 2"),
]


@pytest.mark.parametrize("camera, robot, sends, message", BAD_VALUES,
                         ids=[c.split(":")[1] if "RedDot" not in c else r.split(":")[1] for c, r, _, _ in BAD_VALUES])
def test_bad_adapter_values_stop_the_robot_and_name_the_adapter(tmp_path, capsys, camera, robot, sends, message):
    out = tmp_path / "o"
    code, line = _run(["deploy", *NETS, "--camera", camera, "--robot", robot, "--out", str(out), *FAKE], capsys)
    assert code == 2 and line.startswith("graspsim deploy: error: ") and message in line, line
    assert line.endswith("; the robot was sent a stop command")
    assert _kinds() == ["send"] * sends + ["stop"]  # nothing sent after the bad value; stop() before the report
    s = _summary(out)
    assert s["ended"] == "error" and message in s["error"]
    assert len(_rows(out / "ticks.csv")) == min(sends, 2)  # the tick whose send returned a bad value is not logged
    assert _tree(out) == ["summary.json", "ticks.csv"]


# ------------------------------------------------------------------------------------------ refused up front
@pytest.mark.parametrize("verb", ["deploy", "record"])
def test_torchrun_is_refused_before_anything_opens(tmp_path, capsys, monkeypatch, verb):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    out = tmp_path / "o"
    args = ["--camera", "deploy_fakes:RedDotCamera", "--out", str(out)]
    if verb == "deploy":
        args = [*NETS, *args, "--robot", "deploy_fakes:LoggingRobot", *FAKE]
    opened = []
    monkeypatch.setattr(deploy_fakes.RedDotCamera, "__init__", lambda self, *a: opened.append(self))
    code, line = _run([verb, *args], capsys)
    assert code == 2 and line.startswith(f"graspsim {verb}: error: {verb} runs on one process; under torchrun "
                                         "(WORLD_SIZE=2)"), line
    because = ("open the camera and the robot, send every command again and write the same --out" if verb == "deploy"
               else "open the same camera and write the same --out")
    assert line.endswith(f"every rank would {because}: run it without torchrun"), line
    assert opened == [] and deploy_fakes.EVENTS == [] and not out.exists()


@pytest.mark.parametrize("verb", ["deploy", "record"])
@pytest.mark.parametrize("index", ["-1", "-2", "99999999999", "256"])
def test_bad_camera_index_never_reaches_opencv(tmp_path, capsys, monkeypatch, verb, index):
    import cv2

    monkeypatch.setattr(cv2, "VideoCapture", lambda *a: pytest.fail("cv2.VideoCapture called"))
    out = tmp_path / "o"
    args = [f"--camera={index}", "--out", str(out)]
    if verb == "deploy":
        args = [*NETS, *args, "--robot", "dry-run", *FAKE]
    code, line = _run([verb, *args], capsys)
    assert code == 2 and line == (f"graspsim {verb}: error: --camera {index}: an OpenCV device index is a whole "
                                  "number from 0 to 255; or give a video file, an image folder, 'sim', 'bullet' or "
                                  "module:Class"), line
    assert not out.exists()


@pytest.mark.parametrize("verb", ["deploy", "eval-sim", "calibrate"])
def test_unwritable_out_is_refused_before_the_work(tmp_path, capsys, verb):
    out = UNWRITABLE / "o"
    args = {"deploy": [*NETS, "--camera", "deploy_fakes:RedDotCamera", "--robot", "deploy_fakes:LoggingRobot",
                       "--out", str(out), *FAKE],
            "eval-sim": ["--policy", str(POLICY), "--out", str(out), "--episodes", "1"],
            "calibrate": ["--vision", str(VISION), "--images", str(ROOT / "data" / "sample_real" / "images"),
                          "--out", str(out) + ".pt"]}[verb]
    if verb == "calibrate":  # the folder of a calibrate --out must exist: /proc exists and cannot be written
        args[-1] = "/proc/calibrated.pt"
    t0 = time.monotonic()
    code, line = _run([verb, *args], capsys)
    assert code == 2 and line.startswith(f"graspsim {verb}: error: --out /proc"), line
    assert "cannot be written" in line and "choose another --out" in line
    assert deploy_fakes.EVENTS == []  # deploy: not a single command sent
    assert time.monotonic() - t0 < 5  # refused before the work, not after it


# ------------------------------------------------------------------------------------------ ONNX export folders
@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    """An export of the shipped nets, a calibrated copy of the vision net (another sha256) and broken copies."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from graspsim.robot.export import ExportConfig, export
    from graspsim.vision.checkpoint import load_checkpoint, save_checkpoint

    root = tmp_path_factory.mktemp("onnx")
    export(ExportConfig(vision=VISION, policy=POLICY, out=root / "x", check=False))
    ckpt = load_checkpoint(VISION)
    calibrated = root / "calibrated.pt"
    save_checkpoint(calibrated, {k: v for k, v in ckpt.items() if k not in ("kind", "format_version")} |
                    {"threshold": 0.08})

    def truncate(d: Path) -> None:
        (d / "vision.onnx").write_bytes((d / "vision.onnx").read_bytes()[:300])

    edits = {"speed5": ("control.max_speed", 5.0, False), "speed5_rehashed": ("control.max_speed", 5.0, True),
             "speed_negative": ("control.max_speed", -0.1, True), "threshold0": ("vision.threshold", 0.0, True),
             "threshold2": ("vision.threshold", 2.0, True), "size96": ("vision.image_size", 96, True)}
    for name, (key, value, rehash) in edits.items():
        shutil.copytree(root / "x", root / name)
        _edit_contract(root / name, key, value, rehash)
    mirrored = json.loads((root / "x" / "contract.json").read_text())["vision"]["mirror_tta"]
    export(ExportConfig(vision=VISION, policy=POLICY, out=root / "other", check=False, mirror_tta=not mirrored))
    shutil.copytree(root / "x", root / "foreign_graph")  # a vision.onnx of another export (the other mirror choice)
    shutil.copy(root / "other" / "vision.onnx", root / "foreign_graph" / "vision.onnx")
    for name, damage in (("truncated", truncate),
                         ("empty", lambda d: (d / "control.onnx").write_bytes(b"")),
                         ("no_threshold", lambda d: _drop_key(d / "contract.json", "vision", "threshold")),
                         ("no_sources", lambda d: _drop_key(d / "contract.json", "sources", None))):
        shutil.copytree(root / "x", root / name)
        damage(root / name)
    return {"root": root, "calibrated": calibrated}


def _edit_contract(folder: Path, key: str, value, rehash: bool) -> None:
    """Set the dotted ``key`` of ``folder``'s contract; ``rehash``: also recompute its checksum, as someone who
    knows the format would (the range checks must then catch it)."""
    from graspsim.robot.onnx_contract import HASH_KEY, contract_digest

    path = folder / "contract.json"
    c = json.loads(path.read_text())
    d = c
    *parents, last = key.split(".")
    for k in parents:
        d = d[k]
    d[last] = value
    if rehash:
        c[HASH_KEY] = contract_digest(c)
    path.write_text(json.dumps(c))


def _drop_key(path: Path, section: str, key: str | None) -> None:
    c = json.loads(path.read_text())
    if key is None:
        del c[section]
    else:
        del c[section][key]
    path.write_text(json.dumps(c))


@pytest.mark.parametrize("folder, vision, message", [
    ("x", "calibrated", "x/contract.json was exported from the vision checkpoint {VISION}, not from --vision "
                        "{calibrated} (their sha256 differ)"),
    ("truncated", None, "truncated/vision.onnx is not the graph {root}/truncated/contract.json was exported with "
                        "(their sha256 differ: a graph copied from another export, or changed)"),
    ("empty", None, "empty/control.onnx is empty; export again with 'graspsim export'"),
    ("no_threshold", None, "no_threshold/contract.json lacks vision.threshold; export again"),
    ("no_sources", None, "no_sources/contract.json lacks sources.vision.sha256, sources.policy.sha256; export again"),
    # issue 55, item 4: an edited contract, its constants out of range, a graph of another export; item 14: its
    # image_size other than the graphs' (found before the robot is opened, not after homing)
    ("speed5", None, "speed5/contract.json was changed after it was exported (its contract_sha256 does not match"),
    ("speed5_rehashed", None, "speed5_rehashed/contract.json: control.max_speed is 5.0; it must be a speed above 0 "
                              "and at most 1 m/s"),
    ("speed_negative", None, "control.max_speed is -0.1; it must be a speed above 0"),
    ("threshold0", None, "threshold0/contract.json: vision.threshold is 0.0; it must be a probability strictly "
                         "between 0 and 1"),
    ("threshold2", None, "vision.threshold is 2.0; it must be a probability strictly between 0 and 1"),
    ("size96", None, "size96/vision.onnx: its 'rgb' is ['batch', 3, 64, 64] but the contract (contract.json) says "
                     "['batch', 3, 96, 96] (image_size 96)"),
    ("foreign_graph", None, "foreign_graph/vision.onnx is not the graph {root}/foreign_graph/contract.json was "
                            "exported with (their sha256 differ"),
])
def test_onnx_folder_is_checked_against_the_checkpoints(tmp_path, capsys, exported, folder, vision, message):
    root = exported["root"]
    vision_path = exported["calibrated"] if vision == "calibrated" else VISION
    out = tmp_path / "o"
    code, line = _run(["deploy", "--vision", str(vision_path), "--policy", str(POLICY), "--inference", "onnx",
                       "--onnx", str(root / folder), "--camera", "deploy_fakes:RedDotCamera", "--robot",
                       "deploy_fakes:LoggingRobot", "--out", str(out), *FAKE], capsys)
    expected = message.format(VISION=VISION, calibrated=exported["calibrated"], root=root)
    assert code == 2 and line.startswith("graspsim deploy: error: ") and expected in line, line
    assert deploy_fakes.EVENTS == [] and not out.exists()


def _earlier_run(out: Path, onnx: bool) -> dict[str, bytes]:
    out.mkdir(parents=True)
    (out / "summary.json").write_text('{"old": true}')
    (out / "ticks.csv").write_text("old\n")
    (out / "notes.txt").write_text("mine")
    if onnx:
        (out / "onnx").mkdir()
        (out / "onnx" / "contract.json").write_text("old")
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def test_onnx_overwrite_with_a_camera_that_fails_leaves_out_as_it_was(tmp_path, capsys):
    pytest.importorskip("onnx")
    out = tmp_path / "o"
    before = _earlier_run(out, onnx=False)
    code, line = _run(["deploy", *NETS, "--inference", "onnx", "--overwrite", "--camera", "deploy_fakes:NoSuchCamera",
                       "--robot", "dry-run", "--out", str(out), *FAKE], capsys)
    assert code == 2 and "no attribute 'NoSuchCamera'" in line, line
    assert {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # no onnx/
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".staging", ".old"))]


def test_a_refused_onnx_deploy_leaves_nothing_and_a_rerun_works(tmp_path, capsys):
    pytest.importorskip("onnx")
    out = tmp_path / "o"
    code, _ = _run(["deploy", *NETS, "--inference", "onnx", "--camera", "deploy_fakes:NoSuchCamera", "--robot",
                    "dry-run", "--out", str(out), *FAKE], capsys)
    assert code == 2 and not out.exists()
    code, _ = _run(["deploy", *NETS, "--inference", "onnx", "--camera", "deploy_fakes:RedDotCamera", "--robot",
                    "dry-run", "--out", str(out), *FAKE], capsys)
    assert code == 0 and _tree(out)[:2] == ["onnx", "onnx/contract.json"]
    assert _summary(out)["inference"] == "onnx"


def test_a_torch_overwrite_removes_a_stale_onnx_folder(tmp_path, capsys):
    out = tmp_path / "o"
    _earlier_run(out, onnx=True)
    code, _ = _run(["deploy", *NETS, *SIM, "--overwrite", "--out", str(out)], capsys)
    assert code == 0
    assert _tree(out) == ["notes.txt", "summary.json", "ticks.csv"]  # the user's notes stay, the old onnx/ goes
    assert _summary(out)["inference"] == "torch"


# ------------------------------------------------------------------------------------------ record
def test_record_keeps_its_frames_when_the_camera_raises_anything(tmp_path, capsys):
    out = tmp_path / "r"
    code, line = _run(["record", "--camera", "deploy_fakes:RuntimeErrorCamera", "--out", str(out), "--frames", "9",
                       "--hz", "0"], capsys)
    assert code == 2 and line == ("graspsim record: error: camera 'runtime-error' "
                                  "(RuntimeErrorCamera.read) raised RuntimeError: USB bus reset"), line
    assert _tree(out) == ["frames.csv", "images", "images/frame_0000.png", "images/frame_0001.png"]
    assert len(_rows(out / "frames.csv")) == 2


def test_record_keeps_its_frames_when_the_camera_hangs(tmp_path, capsys):
    out = tmp_path / "r"
    t0 = time.monotonic()
    code, line = _run(["record", "--camera", "deploy_fakes:BlockingCamera", "--out", str(out), "--frames", "9",
                       "--hz", "0", "--frame-timeout", "0.1"], capsys)
    assert code == 2 and "(BlockingCamera.read) did not return within 0.6 s" in line, line
    assert time.monotonic() - t0 < 5
    assert _tree(out) == ["frames.csv", "images", "images/frame_0000.png", "images/frame_0001.png"]


def test_record_refuses_a_float_frame_and_keeps_the_earlier_ones(tmp_path, capsys):
    out = tmp_path / "r"
    code, line = _run(["record", "--camera", "deploy_fakes:FloatFrameCamera", "--out", str(out), "--frames", "9",
                       "--hz", "0"], capsys)
    assert code == 2 and "(FloatFrameCamera.read) returned a frame whose rgb is an array of shape (64, 64, 3) " \
                         "float32; expected H,W,3 uint8" in line, line
    assert _tree(out) == ["frames.csv", "images", "images/frame_0000.png", "images/frame_0001.png"]


# ------------------------------------------------------------------------------------------ issue 55
ISSUE55_BAD = [
    ("deploy_fakes:RedDotCamera", "deploy_fakes:BaseExceptionRobot", 3,
     "robot adapter 'deploy_fakes:BaseExceptionRobot' (BaseExceptionRobot.send) raised _CustomStop: driver gave up"),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:GeneratorExitRobot", 3,
     "robot adapter 'deploy_fakes:GeneratorExitRobot' (GeneratorExitRobot.send) raised GeneratorExit"),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:OwnInterruptRobot", 3,
     "(OwnInterruptRobot.send) raised KeyboardInterrupt while no Ctrl-C or stop signal had arrived"),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:MillimetreGapRobot", 2,
     "(MillimetreGapRobot.senses) returned gripper senses [80.0, 0.0, 0.0]: the gap 80 is outside -0.1..1.5"),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:ContactScaleRobot", 2,
     "(ContactScaleRobot.senses) returned gripper senses [1.0, 0.0, 12.5]: the contact 12.5 is not 0 or 1"),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:HugeTcpRobot", 2,
     "(HugeTcpRobot.senses) returned a fingertip position [1e+30, 0.0, 0.0]: beyond 10 m of the origin"),
    ("deploy_fakes:RedDotCamera", "deploy_fakes:BoxWithoutTcpRobot", 0,
     "(BoxWithoutTcpRobot.senses) gives no fingertip position (Senses.tcp) but robot adapter "
     "'deploy_fakes:BoxWithoutTcpRobot' (BoxWithoutTcpRobot.workspace) gives a box, which could then never be enforced"),
    ("deploy_fakes:TinyFrameCamera", "deploy_fakes:LoggingRobot", 2,
     "(TinyFrameCamera.read) returned a 1x1 frame; expected at least 16 px a side"),
    ("deploy_fakes:StripFrameCamera", "deploy_fakes:LoggingRobot", 2,
     "(StripFrameCamera.read) returned a 10000x1 frame; expected at least 16 px a side and at most 4:1"),
]


@pytest.mark.parametrize("camera, robot, sends, message", ISSUE55_BAD,
                         ids=[c.split(":")[1] if "RedDot" not in c else r.split(":")[1] for c, r, _, _ in ISSUE55_BAD])
def test_adapter_exceptions_and_values_in_wrong_units_stop_the_robot(tmp_path, capsys, camera, robot, sends, message):
    """Issue 55, items 5, 6 and 14 and the clean-but-poor frames: an adapter's own BaseException, GeneratorExit or
    KeyboardInterrupt, senses in other units, a box without a fingertip position, frames of 1x1 or 1x10000 px."""
    out = tmp_path / "o"
    code, line = _run(["deploy", *NETS, "--camera", camera, "--robot", robot, "--out", str(out), *FAKE], capsys)
    assert code == 2 and line.startswith("graspsim deploy: error: ") and message in line, line
    assert line.endswith("; the robot was sent a stop command")
    assert _kinds() == ["send"] * sends + ["stop"]
    s = _summary(out)
    assert s["ended"] == "error" and message in s["error"]
    assert len(_rows(out / "ticks.csv")) == min(sends, 2)
    assert _tree(out) == ["summary.json", "ticks.csv"]


def test_a_frozen_camera_ends_the_run_with_an_error(tmp_path, capsys, monkeypatch):
    """Clean but poor: a camera that gives the same old frame forever used to exit 0 with one INFO line."""
    import graspsim.robot.loop as loop

    monkeypatch.setattr(loop, "FROZEN_SECONDS", 0.2)
    out = tmp_path / "o"
    code, line = _run(["deploy", *NETS, "--camera", "deploy_fakes:FrozenCamera", "--robot",
                       "deploy_fakes:LoggingRobot", "--out", str(out), "--hz", "100", "--time-limit", "5",
                       "--warmup", "1", "--no-progress"], capsys)
    assert code == 2 and "camera 'frozen' (FrozenCamera.read): every frame of the last 20 ticks (0.2 s) was older " \
                         "than 2 control periods" in line and "the camera looks frozen" in line, line
    kinds = _kinds()
    assert kinds[-1] == "stop" and kinds.count("stop") == 1
    rows = _rows(out / "ticks.csv")
    assert len(rows) == kinds.count("send") and rows[-1]["stop"] == "stale_frame"
    sent = [c for k, c in deploy_fakes.EVENTS if k == "send"]
    assert all(c[:3] == [0.0, 0.0, 0.0] for c in sent[2:])  # stale from the third tick on: zero velocity


@pytest.mark.parametrize("robot, camera, message", [
    ("deploy_fakes:ExitingConstructorRobot", "deploy_fakes:RedDotCamera",
     "robot 'deploy_fakes:ExitingConstructorRobot': ExitingConstructorRobot() raised SystemExit: 7"),
    ("dry-run", "deploy_fakes:ExitingConstructorCamera",
     "camera 'deploy_fakes:ExitingConstructorCamera': ExitingConstructorCamera() raised SystemExit: 9"),
])
def test_system_exit_in_an_adapter_constructor_is_one_line(tmp_path, capsys, robot, camera, message):
    out = tmp_path / "o"
    code, line = _run(["deploy", *NETS, "--camera", camera, "--robot", robot, "--out", str(out), *FAKE], capsys)
    assert code == 2 and line == f"graspsim deploy: error: {message}", line
    assert not out.exists()


def test_a_close_that_hangs_is_abandoned_and_the_robot_is_still_closed(tmp_path, capsys, caplog, monkeypatch):
    """Item 13: a camera close() that never returns: the summary is in place before it is called, it is abandoned
    after the deadline with a warning naming it, and the robot's close() is called all the same."""
    import graspsim.robot.cameras as cameras

    monkeypatch.setattr(cameras, "CLOSE_TIMEOUT", 0.3)
    out = tmp_path / "o"
    t0 = time.monotonic()
    code, _ = _run(["deploy", *NETS, "--camera", "deploy_fakes:HangingCloseCamera", "--robot",
                    "deploy_fakes:FileLogRobot", "--out", str(out), *FAKE], capsys)
    assert code == 0 and time.monotonic() - t0 < 10
    assert _kinds()[-3:] == ["stop", "camera_close", "close"]
    assert "camera 'hanging-close' (HangingCloseCamera.close) did not return within 0.3 s; it was abandoned" \
        in caplog.text
    assert _summary(out)["ended"] == "completed" and _tree(out) == ["summary.json", "ticks.csv"]


def test_an_exception_from_the_robots_close_is_named(tmp_path, capsys, caplog):
    out = tmp_path / "o"
    code, _ = _run(["deploy", *NETS, "--camera", "deploy_fakes:RedDotCamera", "--robot",
                    "deploy_fakes:RaisingCloseRobot", "--out", str(out), *FAKE], capsys)
    assert code == 0 and _kinds()[-2:] == ["stop", "close"]
    assert "robot adapter 'raising-close' (RaisingCloseRobot.close) raised OSError: serial port already gone" \
        in caplog.text


def test_a_signal_raised_inside_a_weakref_callback_still_stops_the_run(tmp_path, capsys):
    """Item 3: Python discards an exception raised in a weakref callback; the stop signal is delivered again and the
    tick checks its flag, so the run ends as interrupted (143) with stop() after the last send."""
    out = tmp_path / "o"
    code = main(["deploy", *NETS, "--camera", "deploy_fakes:RedDotCamera", "--robot",
                 "deploy_fakes:FinalizerSignalRobot", "--out", str(out), "--hz", "100", "--time-limit", "20",
                 "--warmup", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 143 and err.strip().splitlines()[-1] == "graspsim deploy: interrupted (SIGTERM)", err
    assert "Exception ignored" not in err and "Traceback" not in err
    kinds = _kinds()
    assert kinds[-2:] == ["stop", "close"] and "stop" not in kinds[:-2] and 3 <= kinds.count("send") <= 6
    s = _summary(out)
    assert s["ended"] == "interrupted" and s["signal"] == "SIGTERM"
    assert len(_rows(out / "ticks.csv")) == kinds.count("send")


@pytest.mark.parametrize("record, out", [("o/rec", "o"), ("r", "r/o")])
def test_record_and_out_nested_are_refused_up_front(tmp_path, capsys, record, out):
    """Item 8: a --record inside --out (or the reverse) used to run every episode, then drop the run."""
    code, line = _run(["deploy", *NETS, "--camera", "deploy_fakes:RedDotCamera", "--robot",
                       "deploy_fakes:LoggingRobot", "--out", str(tmp_path / out), "--record", str(tmp_path / record),
                       *FAKE], capsys)
    assert code == 2 and "are nested" in line and "give two folders side by side" in line, line
    assert deploy_fakes.EVENTS == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("verb", ["deploy", "record"])
@pytest.mark.parametrize("camera", ["", "  "])
def test_an_empty_camera_is_refused(tmp_path, capsys, monkeypatch, verb, camera):
    """Item 11: --camera '' used to replay the PNGs of the current folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.png").write_bytes(b"")
    args = [f"--camera={camera}", "--out", str(tmp_path / "o")]
    if verb == "deploy":
        args = [*NETS, *args, "--robot", "deploy_fakes:LoggingRobot", *FAKE]
    code, line = _run([verb, *args], capsys)
    assert code == 2 and line.startswith(f"graspsim {verb}: error: --camera is empty; give an OpenCV device"), line
    assert not (tmp_path / "o").exists() and deploy_fakes.EVENTS == []


@pytest.mark.parametrize("args, message", [
    (["--hz", "1e6"], "DeployConfig.hz must be at most 1000 Hz"),
    (["--time-limit", "1e9"], "DeployConfig.time_limit must be at most 3600 s"),
    (["--episodes", "99999999999999999999"], "DeployConfig.episodes must be an int in 1..100000"),
    (["--threads", "1000"], "RuntimeConfig.threads must be an int in 0..256"),
])
def test_rates_counts_and_threads_are_capped(tmp_path, capsys, args, message):
    """Item 13: --hz 1e6 used to mean hours of ticks; --threads 1000 was not bounded."""
    code, line = _run(["deploy", *NETS, "--camera", "deploy_fakes:RedDotCamera", "--robot",
                       "deploy_fakes:LoggingRobot", "--out", str(tmp_path / "o"), *FAKE, *args], capsys)
    assert code == 2 and message in line, line
    assert deploy_fakes.EVENTS == [] and not (tmp_path / "o").exists()


def test_a_cube_control_net_with_a_sphere_vision_net_is_refused_on_a_real_adapter(tmp_path, capsys):
    """Item 7: refused with simulated robots before; now with any adapter, before it is opened."""
    cube = tmp_path / "cube_policy.pt"
    _cube_policy(cube)
    code, line = _run(["deploy", "--vision", str(VISION), "--policy", str(cube), "--camera",
                       "deploy_fakes:RedDotCamera", "--robot", "deploy_fakes:WristRobot", "--out",
                       str(tmp_path / "o"), *FAKE], capsys)
    assert code == 2 and line.startswith(f"graspsim deploy: error: vision checkpoint {VISION} was trained on sphere, "
                                         f"but control checkpoint {cube} on "), line
    assert "the vision net would not see a cube" in line
    assert deploy_fakes.EVENTS == [] and not (tmp_path / "o").exists()


def _cube_policy(path: Path) -> None:
    """A control checkpoint like the shipped test one whose stored config says it was trained on cubes."""
    import copy

    import torch

    ck = torch.load(POLICY, map_location="cpu", weights_only=False)  # format 0: the run's config is run_config
    cfg = ck["run_config"] = copy.deepcopy(ck.get("run_config") or {})
    cfg.setdefault("sim", {}).setdefault("target", {})["kinds"] = ["cube"]
    torch.save(ck, path)


# ------------------------------------------------------------------------------------------ signals (issue 55)


def _start(tmp_path: Path, name: str, verb: str, camera: str, robot: str | None = None):
    """``graspsim VERB`` in a subprocess with the fakes, logging the fakes' calls to ``tmp_path/name.log``."""
    import os
    import subprocess
    import sys

    log, out = tmp_path / f"{name}.log", tmp_path / name
    env = {**os.environ, "OMP_NUM_THREADS": "1", deploy_fakes.FAKE_LOG: str(log),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    if verb == "deploy":
        args = ["deploy", *NETS, "--camera", camera, "--robot", robot, "--out", str(out), "--hz", "50",
                "--time-limit", "600", "--warmup", "1", "--no-progress"]
    else:
        args = ["record", "--camera", camera, "--out", str(out), "--frames", "100000", "--hz", "50"]
    proc = subprocess.Popen([sys.executable, "-m", "graspsim.cli", *args], stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=default_stop_signals)
    return proc, log, out


def _events(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def _wait_for(log: Path, kind: str, n: int, proc, timeout: float = 90.0) -> None:
    t0 = time.monotonic()
    while _events(log).count(kind) < n:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() - t0 < timeout, f"no {n} {kind} in {timeout} s"
        time.sleep(0.05)


def _hidden(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith((".staging", ".old"))]


def _after_last_send(ev: list[str]) -> list[str]:
    """The robot's calls after its last send (a loaded machine may also see watchdog stops earlier in the run)."""
    return ev[len(ev) - ev[::-1].index("send"):] if "send" in ev else ev


def test_every_stop_signal_stops_the_robot_first_and_keeps_the_summary(tmp_path):
    """Item 1: SIGQUIT (Ctrl-\\), SIGUSR1, SIGUSR2 and SIGALRM used to kill deploy with no stop(), no summary.json
    and a staging folder left behind; record keeps its frames. The processes run side by side (one startup's time)."""
    import signal

    cases = {sig: _start(tmp_path, sig, "deploy", "deploy_fakes:RedDotCamera", "deploy_fakes:FileLogRobot")
             for sig in ("SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")}
    cases["record-SIGQUIT"] = _start(tmp_path, "record-SIGQUIT", "record", "deploy_fakes:FileLogCamera")
    for name, (proc, log, _) in cases.items():
        _wait_for(log, "read" if name.startswith("record") else "send", 3, proc)
        proc.send_signal(getattr(signal, name.split("-")[-1]))
    for name, (proc, log, out) in cases.items():
        sig = getattr(signal, name.split("-")[-1])
        _, err = proc.communicate(timeout=120)
        lines = err.strip().splitlines()
        verb = "record" if name.startswith("record") else "deploy"
        assert proc.returncode == 128 + sig, err
        assert lines[-1] == f"graspsim {verb}: interrupted ({sig.name})" and "Traceback" not in err, err
        assert _hidden(tmp_path) == []
        if verb == "record":
            reads = _events(log).count("read")
            frames = _tree(out)
            assert "frames.csv" in frames and 3 <= len([f for f in frames if f.startswith("images/")]) <= reads
            continue
        ev = _events(log)
        assert _after_last_send(ev) == ["stop", "close"], ev[-5:]  # stop right after the last send, then close
        assert f"interrupted ({sig.name}): the robot was sent a stop command" in err
        s = _summary(out)
        assert s["ended"] == "interrupted" and s["signal"] == sig.name and s["signals_while_stopping"] == []
        assert len(_rows(out / "ticks.csv")) == ev.count("send") == s["ticks"]
        assert _tree(out) == ["summary.json", "ticks.csv"]


def test_a_second_signal_during_a_slow_stop_does_not_cut_it_short(tmp_path):
    """Item 2: a second Ctrl-C or SIGTERM while the adapter's stop() runs (1.5 s here) used to abort it half-way and
    lose summary.json and ticks.csv, without a word. Now: stop() completes, a warning names the second signal, the
    outputs are written and the exit code is the first signal's. Both orders, side by side."""
    import signal

    pairs = [("SIGINT", "SIGTERM"), ("SIGTERM", "SIGINT")]
    procs = [_start(tmp_path, f"{a}-{b}", "deploy", "deploy_fakes:RedDotCamera", "deploy_fakes:SlowStopRobot")
             for a, b in pairs]
    for (first, _), (proc, log, _) in zip(pairs, procs):
        _wait_for(log, "send", 3, proc)
        proc.send_signal(getattr(signal, first))
    for (_, second), (proc, log, _) in zip(pairs, procs):
        _wait_for(log, "stop_begin", 1, proc)
        proc.send_signal(getattr(signal, second))
    for (first, second), (proc, log, out) in zip(pairs, procs):
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + getattr(signal, first), err
        assert err.strip().splitlines()[-1] == f"graspsim deploy: interrupted ({first})", err
        assert f"{second} arrived while the robot was being stopped; finishing that first" in err, err
        ev = _events(log)
        assert _after_last_send(ev) == ["stop_begin", "stop", "close"], ev[-5:]
        s = _summary(out)
        assert s["ended"] == "interrupted" and s["signal"] == first and s["signals_while_stopping"] == [second]
        assert len(_rows(out / "ticks.csv")) == ev.count("send")
        assert _tree(out) == ["summary.json", "ticks.csv"]
    assert _hidden(tmp_path) == []


def test_a_signal_inside_the_adapters_send_keeps_that_commands_row(tmp_path):
    """CI failed now and then: a stop signal that landed inside the adapter's send(), after the command went out,
    lost that tick's ticks.csv row (3 rows for 4 sends). Now the first signal is held until send() returns, and a
    second one still interrupts a send() that hangs."""
    import signal

    cases = {name: _start(tmp_path, name, "deploy", "deploy_fakes:RedDotCamera", f"deploy_fakes:{name}")
             for name in ("SignalInSendRobot", "HangingSendRobot")}
    proc, log, _ = cases["HangingSendRobot"]
    _wait_for(log, "send", 3, proc)
    time.sleep(0.5)  # the first signal is held while send() hangs
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    for name, (proc, log, out) in cases.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert err.strip().splitlines()[-1] == "graspsim deploy: interrupted (SIGTERM)", err
        ev = _events(log)
        assert ev.count("send") == 3 and _after_last_send(ev) == ["stop", "close"], ev
        s = _summary(out)
        assert s["ended"] == "interrupted" and s["signal"] == "SIGTERM"
        if name == "SignalInSendRobot":  # the command went out and send() returned: its row is there
            assert len(_rows(out / "ticks.csv")) == 3 == s["ticks"]
        else:  # send() never returned: the second signal interrupted it, and its tick has no row
            assert "SIGINT arrived while a command was being sent, after SIGTERM: interrupting it" in err, err
            assert len(_rows(out / "ticks.csv")) == 2
    assert _hidden(tmp_path) == []


def test_a_full_disk_is_refused_up_front_and_a_failed_write_names_its_file(tmp_path, capsys, monkeypatch):
    """Clean but poor: a full disk passed the writability probe, and the failed write named no file."""
    import errno

    import graspsim.fileio as fileio

    out = tmp_path / "o"
    monkeypatch.setattr(fileio, "free_bytes", lambda folder: 4096)
    code, line = _run(["deploy", *NETS, "--camera", "deploy_fakes:RedDotCamera", "--robot",
                       "deploy_fakes:LoggingRobot", "--out", str(out), *FAKE], capsys)
    assert code == 2 and line == (f"graspsim deploy: error: --out {out} cannot be written (inside {tmp_path}): its "
                                  "disk is full (4 KiB free); free some space or choose another --out"), line
    assert deploy_fakes.EVENTS == [] and not out.exists()
    monkeypatch.undo()

    real = Path.write_text

    def disk_fills_up(self, *a, **k):  # the summary's write fails as on a disk that filled up during the run
        if self.name.startswith(".summary.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", disk_fills_up)
    code, line = _run(["deploy", *NETS, "--camera", "deploy_fakes:RedDotCamera", "--robot",
                       "deploy_fakes:LoggingRobot", "--out", str(out), *FAKE], capsys)
    assert code == 2 and line == f"graspsim deploy: error: No space left on device: {out}/summary.json", line
    assert _kinds()[-1] == "stop" and not out.exists() and [p for p in tmp_path.iterdir()] == []


def test_a_camera_without_a_single_frame_is_an_error_naming_it(tmp_path, capsys):
    """Clean but poor: a source that ended before the first tick ran nothing and exited 0."""
    out = tmp_path / "o"
    code, line = _run(["deploy", *NETS, "--camera", "deploy_fakes:EmptyCamera", "--robot",
                       "deploy_fakes:LoggingRobot", "--out", str(out), *FAKE], capsys)
    assert code == 2 and line == ("graspsim deploy: error: camera 'empty' (EmptyCamera.read) gave no frame: its source "
                                  "ended before the first tick (empty: no frame left); the robot was sent a stop "
                                  "command"), line
    assert _kinds() == ["stop"] and _summary(out)["ended"] == "error" and _rows(out / "ticks.csv") == []


def test_a_signal_during_a_blocked_read_ends_the_run_at_once(tmp_path, capsys, caplog):
    """Clean but poor: a SIGTERM while the camera's read is blocked used to wait up to --frame-timeout + 0.5 s (20 s
    here) in silence after stop(); now a read in flight is given one second, with a warning, and left."""
    import os
    import signal
    import threading

    def terminate_once_blocked():
        t0 = time.monotonic()
        while not any(k == "blocked" for k, _ in deploy_fakes.STAMPS) and time.monotonic() - t0 < 30:
            time.sleep(0.01)
        time.sleep(0.3)  # the watchdog's stop has gone out (2 periods of 50 ms)
        os.kill(os.getpid(), signal.SIGTERM)

    out = tmp_path / "o"
    threading.Thread(target=terminate_once_blocked, daemon=True).start()
    code, line = _run(["deploy", *NETS, "--camera", "deploy_fakes:BlockingCamera", "--robot",
                       "deploy_fakes:TimedRobot", "--out", str(out), "--hz", "20", "--frame-timeout", "20",
                       "--time-limit", "60", "--warmup", "1", "--no-progress"], capsys)
    signalled = next(t for k, t in deploy_fakes.STAMPS if k == "blocked") + 0.3
    assert code == 143 and line == "graspsim deploy: interrupted (SIGTERM)", line
    assert time.monotonic() - signalled < 5  # not 20 s
    assert [k for k, _ in deploy_fakes.STAMPS] == ["send", "send", "blocked", "stop", "stop"]
    assert "(BlockingCamera.read) is still blocked; it was not closed" in caplog.text
    assert _summary(out)["ended"] == "interrupted"
