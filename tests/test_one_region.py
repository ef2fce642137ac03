"""The one-region rule of the vision net (a scene holds one target: keep only the region of predicted pixels around
the most confident one): the rule itself, its operating-point search, and that every place that turns logits into a
mask (Segmenter, eval-real, calibrate, the ONNX controller) applies it the same way."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from graspsim.robot.controller import mask_from_logits
from graspsim.vision.calibrate import CalibrateConfig, calibrate
from graspsim.vision.checkpoint import load_checkpoint, save_checkpoint
from graspsim.vision.evaluate import EvalRealConfig, evaluate_real
from graspsim.vision.infer import Segmenter
from graspsim.vision.metrics import THRESHOLDS, decide, evaluate_set, gated_curves, keep_top_region, top_region

from test_calibrate import _checkpoint, _frames

ROOT = Path(__file__).resolve().parents[1]


def _blobs() -> torch.Tensor:
    """Three 12x12 score maps: two blobs (the right one holds the maximum); a diagonal chain; nothing above 0.5."""
    s = torch.zeros(3, 12, 12)
    s[0, 2:5, 2:5] = 0.8
    s[0, 6:10, 7:11] = 0.9
    s[0, 8, 9] = 0.95
    for i in range(6):  # touches only at the corners: one 8-connected region
        s[1, 3 + i, 2 + i] = 0.7
    s[1, 0, 11] = 0.6  # a lone pixel, less confident, elsewhere
    s[2] = 0.3
    return s


def test_top_region_keeps_the_region_of_the_most_confident_pixel():
    s = _blobs()
    r = top_region(s >= 0.5, s)
    assert r.dtype == torch.bool and r.shape == s.shape
    assert torch.equal(r[0], (s[0] >= 0.85))  # the right blob whole, the left one dropped
    chain = s[1] == 0.7
    assert torch.equal(r[1], chain)  # diagonal neighbours belong to the region; the lone pixel does not
    assert not r[2].any()  # nothing predicted: nothing kept
    # each frame decides alone: the batch's order changes nothing
    assert torch.equal(top_region((s >= 0.5).flip(0), s.flip(0)), r.flip(0))
    assert top_region(torch.zeros(0, 4, 4, dtype=torch.bool), torch.zeros(0, 4, 4)).shape == (0, 4, 4)
    with pytest.raises(ValueError, match="B,H,W"):
        top_region(s[0] >= 0.5, s[0])


def test_keep_top_region_and_decide_cut_at_any_higher_threshold():
    s = _blobs()
    kept = keep_top_region(s, 0.5)
    assert torch.equal(kept >= 0.5, top_region(s >= 0.5, s))
    assert torch.equal(kept >= 0.92, s >= 0.92)  # within the region, a higher threshold cuts as usual
    gated = decide(s, 0.9, 0.5, one_region=True)
    assert not gated[1].any() and torch.equal(gated[0] >= 0.5, top_region(s >= 0.5, s)[0])  # frame 1 gated out
    assert torch.equal(decide(s, 0.0, 0.5, one_region=False), s)


def test_region_curves_match_the_masks_they_describe():
    g = torch.Generator().manual_seed(0)
    prob = torch.rand(24, 16, 16, generator=g) ** 3
    gt = torch.zeros(24, 16, 16, dtype=torch.bool)
    gt[:18, 4:9, 5:10] = True
    prob[:18, 4:9, 5:10] = 0.6 + 0.4 * torch.rand(18, 5, 5, generator=g)
    curves = gated_curves(prob, gt, min_pixels=2, peaks=(0.0, 0.9), one_region=True)
    n = len(THRESHOLDS)
    for j, peak in enumerate((0.0, 0.9)):
        for t in (0.05, 0.5, 0.9):
            i = j * n + int(np.argmin(np.abs(THRESHOLDS - t)))
            s, _ = evaluate_set(decide(prob, peak, t, True), gt, t, 2)
            for k in ("precision", "recall", "iou", "false_positive_image_rate"):
                assert curves[k][i] == pytest.approx(s[k], abs=1e-9), (peak, t, k)
            assert curves["peak"][i] == peak


def test_segmenter_applies_the_rule_in_masks_and_probabilities(tmp_path):
    ck = _checkpoint(tmp_path / "net.pt")
    c = load_checkpoint(ck)
    c.update(threshold=0.3, one_region=True)
    save_checkpoint(tmp_path / "region.pt", c)
    plain = Segmenter.from_checkpoint(ck, precision="fp32")
    seg = Segmenter.from_checkpoint(tmp_path / "region.pt", precision="fp32")
    assert seg.one_region and not plain.one_region
    rgb = torch.randint(0, 256, (6, 3, 64, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    logits = seg.logits(rgb)
    want = top_region(logits >= torch.logit(torch.tensor(0.3)), logits)
    assert torch.equal(seg.predict_mask(rgb), want)
    assert torch.equal(seg(rgb) >= 0.3, want)
    assert bool(plain.predict_mask(rgb, 0.3).sum() >= want.sum())
    # the ONNX controller's numpy rule is the same rule
    got = mask_from_logits(logits.numpy(), 0.3, 0.0, one_region=True)
    assert np.array_equal(got, want.numpy())
    c.update(one_region="yes")
    save_checkpoint(tmp_path / "bad.pt", c)
    with pytest.raises(ValueError, match="bad.pt.*one_region"):
        Segmenter.from_checkpoint(tmp_path / "bad.pt")


def test_calibrate_chooses_with_the_rule_and_eval_real_measures_what_it_promised(tmp_path):
    ck = _checkpoint(tmp_path / "net.pt", seed=3)
    root = _frames(tmp_path / "tune", n_target=12, n_free=5)
    out = tmp_path / "cal.pt"
    rec = calibrate(CalibrateConfig(vision=ck, images=root / "images", out=out, min_precision=0.5, max_fp_images=0.2,
                                    precision="fp32", one_region=True))
    c = load_checkpoint(out)
    assert c["one_region"] is True and rec["after"]["one_region"] is True and rec["before"]["one_region"] is False
    m = evaluate_real(EvalRealConfig(images=root / "images", masks=root / "masks", vision=out, out=tmp_path / "ev",
                                     precision="fp32"))
    assert m["one_region"] is True
    for k in ("precision", "recall", "iou", "false_positive_images"):
        want = rec["after"][k]
        assert (m[k] != m[k]) if want is None else m[k] == pytest.approx(want, abs=1e-9)
    # default: the input checkpoint's rule is kept
    rec2 = calibrate(CalibrateConfig(vision=out, images=root / "images", out=tmp_path / "cal2.pt", min_precision=0.5,
                                     max_fp_images=0.2, precision="fp32"))
    assert rec2["after"]["one_region"] is True and load_checkpoint(tmp_path / "cal2.pt")["one_region"] is True


@pytest.mark.slow
def test_the_shipped_so101_net_exports_its_rule_with_parity(tmp_path):
    from graspsim.robot.export import ExportConfig, export

    contract = export(ExportConfig(vision=ROOT / "vision" / "assets" / "segnet_so101.pt",
                                   policy=ROOT / "dagger" / "assets" / "policy_so101.pt", out=tmp_path / "x", frames=128))
    assert contract["vision"]["one_region"] is True and contract["format_version"] == 3
    assert json.loads((tmp_path / "x" / "contract.json").read_text())["vision"]["one_region"] is True
    assert contract["parity"]["mask_pixels_differing"] == 0


def test_a_contract_with_the_rule_is_version_3_which_a_reader_of_version_2_refuses(tmp_path, monkeypatch):
    """A graspsim that reads only version 2 contracts does not know ``vision.one_region``: it must refuse a contract
    whose masks need the rule rather than make other masks. Contracts without the rule stay version 2."""
    from graspsim.robot import onnx_contract as oc

    def export_folder(name: str, one_region: bool) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        for graph in (oc.VISION_ONNX, oc.CONTROL_ONNX):
            (folder / graph).write_bytes(b"not a real graph, only hashed here")
        (tmp_path / "v.pt").write_bytes(b"v")
        (tmp_path / "p.pt").write_bytes(b"p")
        oc.write_contract(folder, oc.build_contract(
            opset=17, vision_path=tmp_path / "v.pt", policy_path=tmp_path / "p.pt", policy_iteration=3, image_size=64,
            threshold=0.5, peak_threshold=0.99, mirror_tta=True, max_speed=0.1, one_region=one_region))
        return folder

    plain, rule = export_folder("plain", False), export_folder("rule", True)
    assert oc.read_contract(plain)["format_version"] == 2
    got = oc.read_contract(rule)
    assert got["format_version"] == 3 and got["vision"]["one_region"] is True
    monkeypatch.setattr(oc, "READ_VERSIONS", (2,))  # a graspsim from before the rule
    assert oc.read_contract(plain)["format_version"] == 2
    with pytest.raises(ValueError, match="contract format_version 3; this version reads 2"):
        oc.read_contract(rule)


def test_the_contract_takes_fingertip_points_outside_the_frame_within_its_range():
    """The SO-101's camera sees its pad centre near the bottom edge: its trained fingertip range reaches past 1 (the
    export of the shipped so101 pair failed on a 0..1 rule)."""
    from graspsim.robot.onnx_contract import FINGERTIP_RANGE, check_constants

    def contract(high_y: float) -> dict:
        tip = {"low": [0.6, 0.56, 0.66, 0.77], "nominal": [0.76, 0.7, 0.83, 0.94], "high": [0.92, 0.86, 1.02, high_y]}
        return {"vision": {"image_size": 64, "threshold": 0.5, "peak_threshold": 0.0, "mirror_tta": True},
                "control": {"max_speed": 0.1, "wrist": True, "max_yaw_rate": 1.5, "fingertip": tip}}

    check_constants(contract(1.16))
    with pytest.raises(ValueError, match=r"control.fingertip .*-1..2 allowed"):
        check_constants(contract(FINGERTIP_RANGE[1] + 0.5))
    bad = contract(1.16)
    bad["vision"]["one_region"] = "yes"
    with pytest.raises(ValueError, match="vision.one_region is 'yes'"):
        check_constants(bad)
