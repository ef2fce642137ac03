"""Bad inputs and faults for the verbs that came after tests/test_bad_input.py (issue 30): ``export``, ``deploy``,
``record``, ``propose-masks``, an optional extra that is not installed, and ``torchrun`` jobs.

The cases run like those of tests/test_bad_input.py: ``graspsim.cli.main(argv)`` in a copy of a small prepared
folder, checking the exit code, that no traceback is printed, that the message names the offending thing, and that
nothing is lost or left stale (a refused input changes nothing; an accepted one only the paths it may change).
The torchrun cases start 2 gloo processes on the CPU.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import deploy_fakes
from test_bad_input import T, C, Case, _allowed, _changed, _png, copy_world, prepare, run_case, run_cli, snapshot

ROOT = Path(__file__).resolve().parents[1]
VISION = ROOT / "vision" / "assets" / "segnet.pt"
POLICY = ROOT / "tests" / "assets" / "policy_format0.pt"
NETS = ["--vision", str(VISION), "--policy", str(POLICY)]
SIM_DEPLOY = ["--camera", "sim", "--robot", "sim", "--hz", "0", "--time-limit", "0.5", "--warmup", "1",
              "--no-progress"]
FAKE = ["--hz", "100", "--time-limit", "0.1", "--warmup", "1", "--no-progress"]
DEPLOY_EXTRA = "pip install 'graspsim[deploy]'"


# ------------------------------------------------------------------------------------------ the prepared folder
def _build(root: Path) -> None:
    from graspsim.vision.checkpoint import save_checkpoint as save_vision
    from graspsim.vision.model import SegNet, SegNetConfig

    rng = np.random.default_rng(1)
    for i, name in enumerate("abc"):
        img = np.repeat(rng.integers(90, 160, (64, 64, 1), dtype=np.uint8), 3, axis=2)  # a grey, textured table
        mask = np.zeros((64, 64), np.uint8)
        if i:
            mask[20:20 + 6 * i, 30:30 + 6 * i] = 255
            img[mask > 0] = (30, 70, 230)  # BGR red-orange: a target the colour range proposes
        _png(root / "images" / f"{name}.png", img)
        _png(root / "masks" / f"{name}.png", mask)
    _png(root / "bad_images" / "a.png", rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
    (root / "bad_images" / "b.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    (root / "empty").mkdir()
    (root / "full").mkdir()
    (root / "full" / "keep.txt").write_text("mine")
    (root / "file.txt").write_text("a file")
    (root / "vision_run").mkdir()
    seg_cfg = SegNetConfig(base_channels=4, max_channels=8, depth=2)
    save_vision(root / "vision32.pt", {"model": SegNet(seg_cfg).state_dict(), "model_config": dataclasses.asdict(seg_cfg),
                                       "config": {}, "step": 0, "threshold": 0.5, "image_size": 32, "probe_rgb": None})
    # earlier outputs, each with a file of the user's that must survive an --overwrite
    for k in range(6):  # a longer earlier recording
        _png(root / "rec_done" / "images" / f"frame_{k:04d}.png", np.zeros((8, 8, 3), np.uint8))
    (root / "rec_done" / "frames.csv").write_text("image,t_s,age_ms\n")
    (root / "rec_done" / "notes.txt").write_text("mine")
    _png(root / "pm_done" / "masks" / "old_only.png", np.zeros((8, 8), np.uint8))
    (root / "pm_done" / "contact_sheet.png").write_bytes(b"old sheet")
    (root / "pm_done" / "notes.txt").write_text("mine")
    for name in ("vision.onnx", "control.onnx", "contract.json"):
        (root / "export_done" / name).parent.mkdir(exist_ok=True)
        (root / "export_done" / name).write_bytes(b"old " + name.encode())
    (root / "export_done" / "notes.txt").write_text("mine")
    for k in range(9):
        _png(root / "drec_done" / "images" / f"old_{k}.png", np.zeros((8, 8, 3), np.uint8))
    (root / "drec_done" / "ticks.csv").write_text("old\n")
    (root / "drec_done" / "notes.txt").write_text("mine")
    (root / "not_export").mkdir()
    (root / "not_export" / "contract.json").write_text(json.dumps({"kind": "something-else"}))


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return prepare(tmp_path_factory, "bad_input_verbs", _build)


@pytest.fixture
def world(template: Path, tmp_path: Path) -> Path:
    return copy_world(template, tmp_path)


# ------------------------------------------------------------------------------------------ checks of accepted runs
def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _no_staging_left(w: Path) -> None:
    assert not [p for p in w.rglob(".*") if p.name.endswith((".staging", ".old"))]


def _check_export(w: Path, log: str) -> None:
    assert _names(w / "x") == ["contract.json", "control.onnx", "vision.onnx"]
    c = json.loads((w / "x" / "contract.json").read_text())
    assert c["kind"] == "graspsim-onnx-contract" and "parity" not in c  # --no-check


def _check_export_replaced(w: Path, log: str) -> None:
    out = w / "export_done"
    assert _names(out) == ["contract.json", "control.onnx", "notes.txt", "vision.onnx"]
    assert not (out / "vision.onnx").read_bytes().startswith(b"old")
    c = json.loads((out / "contract.json").read_text())
    assert c["parity"]["frames"] == 4 and c["parity"]["grip_decisions_differing"] == 0
    _no_staging_left(w)


def _check_deploy(w: Path, log: str) -> None:
    s = json.loads((w / "d" / "summary.json").read_text())
    assert s["episodes"] == 1 and s["ended"] == "completed" and s["ticks"] == 5
    assert len(_rows(w / "d" / "ticks.csv")) == 5


def _check_deploy_record_replaced(w: Path, log: str) -> None:
    rec = w / "drec_done"
    assert _names(rec) == ["images", "masks", "notes.txt", "ticks.csv"]  # the user's notes stay
    rows = _rows(rec / "ticks.csv")
    assert len(rows) == 5 and _names(rec / "images") == sorted(r["image"] for r in rows)  # no old_K.png left
    assert _names(rec / "masks") == _names(rec / "images")
    _no_staging_left(w)


def _check_deploy_replay_recorded(w: Path, log: str) -> None:
    s = json.loads((w / "d" / "summary.json").read_text())
    assert s["ended"] == "camera_ended" and s["ticks"] == 3
    assert len(os.listdir(w / "rec" / "images")) == 3 and not (w / "rec" / "masks").exists()  # no masks from a real camera


def _check_deploy_interrupted(w: Path, log: str) -> None:
    s = json.loads((w / "d" / "summary.json").read_text())
    assert s["ended"] == "interrupted" and s["per_episode"][0]["end"] == "interrupted"
    assert [k for k, _ in deploy_fakes.EVENTS] == ["send", "send", "stop"]  # the robot was stopped
    assert len(os.listdir(w / "rec" / "images")) == 2 and len(_rows(w / "rec" / "ticks.csv")) == 2  # kept
    _no_staging_left(w)


def _check_deploy_fault(w: Path, log: str) -> None:
    assert [k for k, _ in deploy_fakes.EVENTS] == ["send", "send", "stop"]
    s = json.loads((w / "d" / "summary.json").read_text())
    assert s["ended"] == "error" and len(_rows(w / "d" / "ticks.csv")) == 2


def _check_deploy_camera_failed(w: Path, log: str) -> None:
    assert deploy_fakes.EVENTS[-1][0] == "stop"
    assert json.loads((w / "d" / "summary.json").read_text())["ended"] == "error"


def _check_record_short(w: Path, log: str) -> None:
    assert _names(w / "r" / "images") == ["frame_0000.png", "frame_0001.png", "frame_0002.png"]
    assert len(_rows(w / "r" / "frames.csv")) == 3
    assert "WARNING" in log and "after 3 of the 5000 frames asked for (--frames)" in log


def _check_record_replaced(w: Path, log: str) -> None:
    out = w / "rec_done"
    assert _names(out) == ["frames.csv", "images", "notes.txt"]
    assert _names(out / "images") == ["frame_0000.png", "frame_0001.png"]  # none of the 6 earlier frames left
    assert len(_rows(out / "frames.csv")) == 2
    _no_staging_left(w)


def _check_record_interrupted(w: Path, log: str) -> None:
    assert _names(w / "r" / "images") == ["frame_0000.png", "frame_0001.png"]
    assert len(_rows(w / "r" / "frames.csv")) == 2 and "interrupted after 2 of the 9 frames" in log


def _check_record_kept_before_failure(w: Path, log: str) -> None:
    assert _names(w / "r" / "images") == ["frame_0000.png"] and len(_rows(w / "r" / "frames.csv")) == 1
    assert "the camera failed" in log and "after 1 of the 5 frames" in log


def _check_pm_masks_folder(w: Path, log: str) -> None:
    assert "WARNING" in log and "3 of 3 images" in log and "look like masks" in log
    assert "a target proposed in 0 of 3 frames" in log
    assert _names(w / "p" / "masks") == ["a.png", "b.png", "c.png"]


def _check_pm(w: Path, log: str) -> None:
    from graspsim.vision.image_set import load_mask

    assert "a target proposed in 2 of 3 frames" in log and "look like masks" not in log
    assert not load_mask(w / "p" / "masks" / "a.png")[0].any() and load_mask(w / "p" / "masks" / "c.png")[0].any()


def _check_pm_replaced(w: Path, log: str) -> None:
    out = w / "pm_done"
    assert _names(out) == ["contact_sheet.png", "masks", "notes.txt"]
    assert _names(out / "masks") == ["a.png", "b.png", "c.png"]  # old_only.png is gone
    assert (out / "contact_sheet.png").read_bytes()[:4] == b"\x89PNG"
    _no_staging_left(w)


# ------------------------------------------------------------------------------------------ the cases
# (Case fields as in tests/test_bad_input.py; here ``changes`` also lists what a run that ends early keeps)
CASES = [
    # --- export
    C("export-no-check", "export", *NETS, "--out", f"{T}/x", "--no-check", rc=0, changes=("x",), check=_check_export),
    C("export-overwrite-replaces-keeps-foreign", "export", *NETS, "--out", f"{T}/export_done", "--overwrite",
      "--frames", "4", rc=0, changes=("export_done/vision.onnx", "export_done/control.onnx",
                                      "export_done/contract.json"), check=_check_export_replaced),
    C("export-earlier-export-refused", "export", *NETS, "--out", f"{T}/export_done",
      must=("export_done", "not empty", "--overwrite")),
    C("export-out-is-file", "export", *NETS, "--out", f"{T}/file.txt", "--no-check", must=("file.txt", "not a folder")),
    C("export-vision-missing", "export", "--vision", f"{T}/nope.pt", "--policy", str(POLICY), "--out", f"{T}/x",
      must=("nope.pt", "no such")),
    C("export-vision-is-folder", "export", "--vision", f"{T}/vision_run", "--policy", str(POLICY), "--out", f"{T}/x",
      must=("vision_run", "is a folder", "give the vision checkpoint itself")),
    C("export-vision-is-a-policy", "export", "--vision", str(POLICY), "--policy", str(POLICY), "--out", f"{T}/x",
      must=("policy_format0.pt", "graspsim-control", "graspsim-vision")),
    C("export-policy-is-a-vision-net", "export", "--vision", str(VISION), "--policy", str(VISION), "--out", f"{T}/x",
      must=("segnet.pt", "graspsim-control")),
    C("export-policy-not-a-checkpoint", "export", "--vision", str(VISION), "--policy", f"{T}/file.txt", "--out",
      f"{T}/x", must=("file.txt", "not a readable torch checkpoint")),
    C("export-image-sizes-differ", "export", "--vision", f"{T}/vision32.pt", "--policy", str(POLICY), "--out",
      f"{T}/x", must=("32 px", "64 px", "one image size")),
    C("export-opset-too-old", "export", *NETS, "--out", f"{T}/x", "--opset", "11", must=("ExportConfig.opset", "11")),
    C("export-frames-zero", "export", *NETS, "--out", f"{T}/x", "--frames", "0", must=("ExportConfig.frames",)),
    C("export-without-onnx", "export", *NETS, "--out", f"{T}/x", hide=("onnx",),
      must=("export needs the optional 'deploy' extra", "onnx is not installed", DEPLOY_EXTRA)),
    C("export-check-without-onnxruntime", "export", *NETS, "--out", f"{T}/x", hide=("onnxruntime",),
      must=("onnxruntime is not installed", "--no-check", DEPLOY_EXTRA)),
    C("export-no-check-without-onnxruntime", "export", *NETS, "--out", f"{T}/x", "--no-check", hide=("onnxruntime",),
      rc=0, changes=("x",), check=_check_export),
    # --- deploy: the outputs, --record vs --out
    C("deploy-sim-world", "deploy", *NETS, *SIM_DEPLOY, "--out", f"{T}/d", rc=0, changes=("d",), check=_check_deploy),
    C("deploy-out-not-empty", "deploy", *NETS, *SIM_DEPLOY, "--out", f"{T}/full", must=("full", "not empty",
                                                                                          "--overwrite")),
    C("deploy-record-is-out", "deploy", *NETS, *SIM_DEPLOY, "--out", f"{T}/d", "--record", f"{T}/d",
      must=("--record must be another folder than --out",)),
    C("deploy-record-not-empty-writes-nothing", "deploy", *NETS, *SIM_DEPLOY, "--out", f"{T}/d", "--record",
      f"{T}/drec_done", must=("drec_done", "not empty", "--overwrite")),
    C("deploy-record-is-file", "deploy", *NETS, *SIM_DEPLOY, "--out", f"{T}/d", "--record", f"{T}/file.txt",
      must=("file.txt", "not a folder")),
    C("deploy-record-overwrite-replaces-as-whole", "deploy", *NETS, *SIM_DEPLOY, "--out", f"{T}/d", "--record",
      f"{T}/drec_done", "--overwrite", rc=0, changes=("d", "drec_done/images", "drec_done/masks", "drec_done/ticks.csv"),
      check=_check_deploy_record_replaced),
    C("deploy-replay-folder-records", "deploy", *NETS, "--camera", f"{T}/images", "--robot", "dry-run", "--hz", "0",
      "--time-limit", "100", "--warmup", "1", "--no-progress", "--out", f"{T}/d", "--record", f"{T}/rec", rc=0,
      changes=("d", "rec"), check=_check_deploy_replay_recorded),
    # --- deploy: cameras
    C("deploy-camera-empty-folder", "deploy", *NETS, "--camera", f"{T}/empty", "--robot", "dry-run", *FAKE, "--out",
      f"{T}/d", must=("empty", "holds no PNG/JPEG")),
    C("deploy-camera-file-not-a-video", "deploy", *NETS, "--camera", f"{T}/file.txt", "--robot", "dry-run", *FAKE,
      "--out", f"{T}/d", must=("file.txt", "not a video")),
    C("deploy-camera-class-missing", "deploy", *NETS, "--camera", "deploy_fakes:NoSuchCamera", "--robot", "dry-run",
      *FAKE, "--out", f"{T}/d", must=("deploy_fakes:NoSuchCamera", "no attribute 'NoSuchCamera'")),
    C("deploy-camera-not-module-class", "deploy", *NETS, "--camera", "deploy_fakes:", "--robot", "dry-run", *FAKE,
      "--out", f"{T}/d", must=("deploy_fakes:",)),
    C("deploy-camera-sim-with-bullet-robot", "deploy", *NETS, "--camera", "sim", "--robot", "bullet", "--out",
      f"{T}/d", must=("--camera sim", "--robot sim")),
    C("deploy-camera-damaged-frame-stops-robot", "deploy", *NETS, "--camera", f"{T}/bad_images", "--robot",
      "deploy_fakes:LoggingRobot", *FAKE, "--time-limit", "1", "--out", f"{T}/d",
      must=("b.png", "cannot read image"), changes=("d",), check=_check_deploy_camera_failed),
    # --- deploy: adapters and faults
    C("deploy-robot-class-missing", "deploy", *NETS, "--camera", "deploy_fakes:RedDotCamera", "--robot",
      "deploy_fakes:NoSuchArm", *FAKE, "--out", f"{T}/d", must=("deploy_fakes:NoSuchArm", "NoSuchArm")),
    C("deploy-robot-sim-with-bullet-camera", "deploy", *NETS, "--camera", "bullet", "--robot", "sim", "--out",
      f"{T}/d", must=("--camera bullet", "--robot bullet")),
    C("deploy-robot-raises-is-stopped", "deploy", *NETS, "--camera", "deploy_fakes:RedDotCamera", "--robot",
      "deploy_fakes:RaisingRobot", *FAKE, "--out", f"{T}/d", must=("arm controller went away", "stop command"),
      changes=("d",), check=_check_deploy_fault),
    C("deploy-ctrl-c-keeps-summary-and-recording", "deploy", *NETS, "--camera", "deploy_fakes:InterruptedCamera",
      "--robot", "deploy_fakes:LoggingRobot", "--hz", "100", "--time-limit", "1", "--warmup", "1", "--no-progress",
      "--out", f"{T}/d", "--record", f"{T}/rec", rc=130, must=("interrupted",), changes=("d", "rec"),
      check=_check_deploy_interrupted),
    C("deploy-episodes-zero", "deploy", *NETS, *SIM_DEPLOY, "--episodes", "0", "--out", f"{T}/d",
      must=("DeployConfig.episodes",)),
    C("deploy-time-limit-zero", "deploy", *NETS, *SIM_DEPLOY, "--time-limit", "0", "--out", f"{T}/d",
      must=("DeployConfig.time_limit",)),
    C("deploy-hz-negative", "deploy", *NETS, *SIM_DEPLOY, "--hz", "-5", "--out", f"{T}/d", must=("DeployConfig.hz",)),
    C("deploy-threads-negative", "deploy", *NETS, *SIM_DEPLOY, "--threads", "-1", "--out", f"{T}/d",
      must=("RuntimeConfig.threads",)),
    C("deploy-vision-sizes-differ", "deploy", "--vision", f"{T}/vision32.pt", "--policy", str(POLICY), *SIM_DEPLOY,
      "--out", f"{T}/d", must=("32 px", "64 px")),
    # --- deploy: onnx inference
    C("deploy-old-runtime-flag", "deploy", *NETS, *SIM_DEPLOY, "--runtime", "onnx", "--out", f"{T}/d",
      must=("--runtime is now --inference", "give --inference")),
    C("deploy-onnx-folder-needs-inference-onnx", "deploy", *NETS, *SIM_DEPLOY, "--onnx", f"{T}/export_done", "--out",
      f"{T}/d", must=("--onnx DIR needs --inference onnx",)),
    C("deploy-onnx-folder-not-an-export", "deploy", *NETS, *SIM_DEPLOY, "--inference", "onnx", "--onnx", f"{T}/empty",
      "--out", f"{T}/d", must=("empty", "not a 'graspsim export' folder", "contract.json")),
    C("deploy-onnx-contract-of-another-kind", "deploy", *NETS, *SIM_DEPLOY, "--inference", "onnx", "--onnx",
      f"{T}/not_export", "--out", f"{T}/d", must=("not_export", "not a graspsim ONNX contract")),
    C("deploy-inference-onnx-without-onnxruntime", "deploy", *NETS, *SIM_DEPLOY, "--inference", "onnx", "--out",
      f"{T}/d", hide=("onnxruntime",), must=("deploy --inference onnx", "onnxruntime is not installed", DEPLOY_EXTRA)),
    C("deploy-inference-onnx-export-without-onnx", "deploy", *NETS, *SIM_DEPLOY, "--inference", "onnx", "--out",
      f"{T}/d", hide=("onnx",), must=("onnx is not installed", "--onnx DIR", DEPLOY_EXTRA)),
    C("deploy-inference-torch-needs-no-extra", "deploy", *NETS, *SIM_DEPLOY, "--out", f"{T}/d",
      hide=("onnx", "onnxruntime"), rc=0, changes=("d",), check=_check_deploy),
    # --- record
    C("record-source-ends-early", "record", "--camera", f"{T}/images", "--out", f"{T}/r", "--frames", "5000",
      "--hz", "0", rc=0, changes=("r",), check=_check_record_short),
    C("record-overwrite-leaves-no-stale-frame", "record", "--camera", f"{T}/images", "--out", f"{T}/rec_done",
      "--frames", "2", "--hz", "0", "--overwrite", rc=0,
      changes=("rec_done/images", "rec_done/frames.csv"), check=_check_record_replaced),
    C("record-earlier-recording-refused", "record", "--camera", f"{T}/images", "--out", f"{T}/rec_done", "--hz", "0",
      must=("rec_done", "not empty", "--overwrite")),
    C("record-sim-camera-refused", "record", "--camera", "sim", "--out", f"{T}/r",
      must=("record a real camera", "deploy --record")),
    C("record-camera-unknown", "record", "--camera", "nowhere_cam", "--out", f"{T}/r",
      must=("unknown camera 'nowhere_cam'",)),
    C("record-camera-empty-folder", "record", "--camera", f"{T}/empty", "--out", f"{T}/r",
      must=("empty", "holds no PNG/JPEG")),
    C("record-camera-silent-writes-nothing", "record", "--camera", "deploy_fakes:SilentCamera", "--out", f"{T}/r",
      "--frame-timeout", "0.05", "--hz", "0", must=("silent: no new frame within 0.05 s",)),
    C("record-ctrl-c-keeps-frames", "record", "--camera", "deploy_fakes:InterruptedCamera", "--out", f"{T}/r",
      "--frames", "9", "--hz", "0", rc=130, must=("interrupted",), changes=("r",), check=_check_record_interrupted),
    C("record-damaged-frame-keeps-earlier", "record", "--camera", f"{T}/bad_images", "--out", f"{T}/r", "--frames",
      "5", "--hz", "0", must=("b.png", "cannot read image"), changes=("r",), check=_check_record_kept_before_failure),
    C("record-frames-zero", "record", "--camera", f"{T}/images", "--out", f"{T}/r", "--frames", "0",
      must=("RecordConfig.frames",)),
    C("record-hz-negative", "record", "--camera", f"{T}/images", "--out", f"{T}/r", "--hz", "-1",
      must=("RecordConfig.hz",)),
    C("record-out-is-file", "record", "--camera", f"{T}/images", "--out", f"{T}/file.txt",
      must=("file.txt", "not a folder")),
    # --- propose-masks
    C("pm-images-is-a-masks-folder-warns", "propose-masks", "--images", f"{T}/masks", "--out", f"{T}/p", rc=0,
      changes=("p",), check=_check_pm_masks_folder),
    C("pm-proposes-on-frames", "propose-masks", "--images", f"{T}/images", "--out", f"{T}/p", rc=0, changes=("p",),
      check=_check_pm),
    C("pm-overwrite-leaves-no-stale-mask", "propose-masks", "--images", f"{T}/images", "--out", f"{T}/pm_done",
      "--overwrite", rc=0, changes=("pm_done/masks", "pm_done/contact_sheet.png"), check=_check_pm_replaced),
    C("pm-earlier-output-refused", "propose-masks", "--images", f"{T}/images", "--out", f"{T}/pm_done",
      must=("pm_done", "not empty", "--overwrite")),
    C("pm-images-missing", "propose-masks", "--images", f"{T}/nope", "--out", f"{T}/p", must=("nope", "does not exist")),
    C("pm-images-empty", "propose-masks", "--images", f"{T}/empty", "--out", f"{T}/p", must=("empty", "holds no PNG")),
    C("pm-images-is-file", "propose-masks", "--images", f"{T}/file.txt", "--out", f"{T}/p",
      must=("file.txt", "not a folder")),
    C("pm-damaged-image-writes-nothing", "propose-masks", "--images", f"{T}/bad_images", "--out", f"{T}/p",
      must=("b.png", "cannot read image")),
    C("pm-hue-reversed", "propose-masks", "--images", f"{T}/images", "--out", f"{T}/p", "--hue", "0.1", "0.0",
      must=("ProposeMasksConfig.hue",)),
    C("pm-min-saturation-above-one", "propose-masks", "--images", f"{T}/images", "--out", f"{T}/p",
      "--min-saturation", "1.5", must=("ProposeMasksConfig.min_saturation",)),
    C("pm-min-pixels-zero", "propose-masks", "--images", f"{T}/images", "--out", f"{T}/p", "--min-pixels", "0",
      must=("ProposeMasksConfig.min_pixels",)),
]


def test_cases_are_many_and_distinct():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 40
    assert {c.argv[0] for c in CASES} == {"export", "deploy", "record", "propose-masks"}


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_bad_input(case: Case, world: Path, capsys, caplog, monkeypatch):
    for module in case.hide:
        monkeypatch.setitem(sys.modules, module, None)  # "import onnx" now fails as if it were not installed
    deploy_fakes.EVENTS.clear()
    text, err, changed = run_case(case, world, capsys, caplog)
    assert all(_allowed(p, case.changes) for p in changed), sorted(changed)  # a refused input: none at all
    if case.rc == 2:
        assert err.startswith(f"graspsim {case.argv[0]}: error: "), err
    if case.check is not None:
        case.check(world, text)


def test_a_missing_extra_in_a_real_process(world: Path):
    """The process itself (a meta-path finder refuses ``onnx``, as a Python without the extra would): exit 2, one
    line, no traceback, nothing written."""
    blocker = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name == 'onnx' or name.startswith('onnx.'):\n"
               "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
               "sys.meta_path.insert(0, Block())\n"
               "from graspsim.cli import main\n"
               "raise SystemExit(main(sys.argv[1:]))\n")
    before = snapshot(world)
    proc = subprocess.run([sys.executable, "-c", blocker, "export", *NETS, "--out", str(world / "x")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "graspsim export: error: export needs the optional 'deploy' extra (onnx is not installed): "
        "pip install 'graspsim[deploy]'"]
    assert not _changed(before, snapshot(world))


def test_require_names_the_extra(monkeypatch):
    from graspsim.extras import MissingExtra, installed, require

    require("json", "deploy", "x")  # installed: nothing happens
    assert installed("json") and not installed("no_such_module_xyz")
    with pytest.raises(MissingExtra, match=r"^lerobot export needs the optional 'lerobot' extra \(pyarrow_xyz is "
                                           r"not installed\): pip install 'graspsim\[lerobot\]'$"):
        require("pyarrow_xyz", "lerobot", "lerobot export")
    monkeypatch.setitem(sys.modules, "json", None)
    assert not installed("json")


# ------------------------------------------------------------------------------------------ torchrun
def _torchrun(*args: str) -> subprocess.Popen:
    from test_distributed import torchrun

    return torchrun("-m", "graspsim.cli", *args)


def _finish(proc: subprocess.Popen, timeout: float = 150) -> str:
    from test_distributed import finish

    return finish(proc, timeout)


OUR_FRAME = re.compile(r'File "[^"]*/(graspsim|scripts|dagger|vision|expert)/[^"/]*\.py"')
"""A traceback line in one of our files (torchrun prints its own traceback when a worker fails)."""
SMALL_SIM = ["--sim.image-size", "32", "--sim.max-steps", "8", "--sim.no-shadows", "--no-progress",
             "--dist-timeout", "60"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("verb,args,must", [
    pytest.param("eval-sim", ["--policy", "{w}/policy.pt", "--out", "{w}/o", "--episodes", "1", "--num-envs", "1"],
                 "1 episodes cannot be shared by 2 processes", id="eval-sim-more-ranks-than-episodes"),
    pytest.param("dagger", ["--out", "{w}/o", "--iterations", "1", "--episodes-per-iter", "1", "--eval-episodes", "4",
                            "--num-envs", "1", "--train-steps", "1", "--batch-size", "4"],
                 "must be at least the number of processes (2)", id="dagger-more-ranks-than-episodes"),
])
def test_more_ranks_than_episodes_is_refused(world: Path, verb: str, args: list[str], must: str):
    from graspsim.dagger.model import ControlNet, ControlNetConfig
    from graspsim.dagger.policy import save_checkpoint

    save_checkpoint(world / "policy.pt", ControlNet(ControlNetConfig(image_size=32)), None, iteration=0)
    before = snapshot(world)
    proc = _torchrun(verb, *[a.replace("{w}", str(world)) for a in args], *SMALL_SIM)
    log = _finish(proc)
    assert proc.returncode != 0 and must in log, log[-3000:]
    assert f"graspsim {verb} (rank " in log and not OUR_FRAME.search(log), log[-3000:]  # (torchrun's own may be there)
    assert not _changed(before, snapshot(world))  # nothing written: not even the output folder


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the rank's process through /proc")
@pytest.mark.timeout(300)
def test_collect_killed_rank_then_resume_on_one_process(world: Path):
    """A rank is killed mid-collect under torchrun; ``collect --resume`` without torchrun finishes the file, and its
    episodes are those of a run that was never interrupted (episode by episode, by index)."""
    from graspsim.expert.collect import shard_file, shards_dir
    from test_distributed import committed, episodes_by_index, kill_rank_once_it_committed

    n, out = 16, world / "two.h5"
    args = ["collect", "--out", str(out), "--episodes", str(n), "--seed", "4", "--num-envs", "1", *SMALL_SIM]
    proc = _torchrun(*args)
    kill_rank_once_it_committed(proc, shard_file(out, 1))
    log = _finish(proc, 90)
    assert proc.returncode != 0 and "SIGKILL" in log, log[-3000:]
    kept = committed(shard_file(out, 1))
    assert shards_dir(out).is_dir() and kept >= 1  # what rank 1 committed is kept

    assert run_cli(args[:-2]) == 2  # neither --resume nor --overwrite: refused, pointing at --resume
    assert run_cli([*args[:-2], "--resume", "--threads", "1"]) == 0
    assert not shards_dir(out).exists()
    assert run_cli(["collect", "--out", str(world / "one.h5"), "--episodes", str(n), "--seed", "4", "--num-envs", "2",
                    "--threads", "1", *SMALL_SIM[:-2]]) == 0
    one, two = episodes_by_index(world / "one.h5"), episodes_by_index(out)
    assert sorted(two) == sorted(one) == list(range(n))
    for k in range(n):
        (a1, t1), (a2, t2) = one[k], two[k]
        assert t1 == t2, k
        for name in a1:
            assert np.array_equal(a1[name], a2[name]), (k, name)
