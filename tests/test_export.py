"""``graspsim export``: ONNX graphs match torch float32, and ``deploy --inference onnx`` decides as torch does
(issue 18)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import onnx
import pytest

from graspsim.cli import main
from graspsim.robot.export import PARITY_TOLERANCE, ExportConfig, export

ROOT = Path(__file__).resolve().parents[1]
VISION = ROOT / "vision" / "assets" / "segnet.pt"
POLICY = ROOT / "tests" / "assets" / "policy_format0.pt"
SAMPLE = ROOT / "data" / "sample_real"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("onnx") / "export"
    return out, export(ExportConfig(vision=VISION, policy=POLICY, out=out, frames=256))


def test_export_writes_graphs_and_contract(exported):
    out, contract = exported
    assert sorted(p.name for p in out.iterdir()) == ["contract.json", "control.onnx", "vision.onnx"]
    assert json.loads((out / "contract.json").read_text()) == contract
    for name in ("vision.onnx", "control.onnx"):
        model = onnx.load(str(out / name))
        onnx.checker.check_model(model)
        assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 17
    assert contract["vision"]["inputs"][0]["dtype"] == "uint8"
    assert contract["control"]["max_speed"] == pytest.approx(0.1)


def test_onnx_parity_on_256_frames(exported):
    par = exported[1]["parity"]
    print(par)
    assert par["frames"] == 256 and par["frames_with_target"] >= 128  # frames that exercise the target path
    assert par["vision_logits_max_abs_diff"] <= PARITY_TOLERANCE
    assert par["control_raw_max_abs_diff"] <= PARITY_TOLERANCE
    assert par["mask_pixels_differing"] == 0 and par["grip_decisions_differing"] == 0


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_deploy_onnx_decides_like_torch(tmp_path):
    """Replay the shipped sample real images through deploy with both runtimes (torch at float32, like the graphs):
    the same masks, grip decisions and stops, velocities within the tolerance."""
    runs = {}
    for runtime in ("torch", "onnx"):
        extra = [] if runtime == "onnx" else ["--precision", "fp32"]  # onnx: deploy exports into OUT/onnx itself
        assert main(["deploy", "--vision", str(VISION), "--policy", str(POLICY), "--camera", str(SAMPLE),
                     "--robot", "dry-run", "--out", str(tmp_path / runtime), "--hz", "0", "--time-limit", "1000",
                     "--inference", runtime, *extra, "--no-progress", "--warmup", "1"]) == 0
        runs[runtime] = _rows(tmp_path / runtime / "ticks.csv")
        if runtime == "onnx":
            assert (tmp_path / "onnx" / "onnx" / "contract.json").is_file()
        assert json.loads((tmp_path / runtime / "summary.json").read_text())["inference"] == runtime
    t, o = runs["torch"], runs["onnx"]
    assert len(t) == len(o) >= 10
    assert sum(int(r["visible"]) for r in t) > 0
    for a, b in zip(t, o):
        assert (a["mask_px"], a["cmd_grip"], a["stop"]) == (b["mask_px"], b["cmd_grip"], b["stop"])
        for k in ("act_vx", "act_vy", "act_vz", "act_grip", "cmd_vx", "cmd_vy", "cmd_vz"):
            assert abs(float(a[k]) - float(b[k])) <= PARITY_TOLERANCE, (k, a[k], b[k])


def test_a_cropped_cascade_exports_with_parity(tmp_path):
    """The cropped cascade (locator, gathered window, scattered logits) exports to ONNX with a dynamic batch and
    matches torch float32 on simulator frames, mirror averaging of the window and the whole-frame context included."""
    import dataclasses

    import torch

    from graspsim.vision.checkpoint import save_checkpoint
    from graspsim.vision.model import SegNet, SegNetConfig

    torch.manual_seed(0)
    cfg = SegNetConfig(base_channels=4, max_channels=8, depth=2, chroma=True, crop=16, locator_channels=4, context=True)
    net = SegNet(cfg)
    net(torch.rand(4, 3, 16, 16), frames=torch.rand(4, 3, 64, 64))  # running statistics off their initial values
    vision = tmp_path / "cropped.pt"
    save_checkpoint(vision, {"model": net.state_dict(), "model_config": dataclasses.asdict(cfg), "config": {}, "step": 1,
                             "threshold": 0.5, "image_size": 64, "mirror_tta": True})
    contract = export(ExportConfig(vision=vision, policy=POLICY, out=tmp_path / "onnx", frames=64))
    par = contract["parity"]
    assert contract["vision"]["mirror_tta"] is True
    assert par["vision_logits_max_abs_diff"] <= PARITY_TOLERANCE and par["mask_pixels_differing"] == 0
