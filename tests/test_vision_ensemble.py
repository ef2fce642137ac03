"""Vision ensembles (``graspsim calibrate --vision A B ...``): the members' logits averaged, an operating point of
their own, provenance, every verb that loads a vision checkpoint, and refusals that name the members."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from graspsim.cli import main
from graspsim.vision.calibrate import CalibrateConfig, calibrate
from graspsim.vision.checkpoint import load_checkpoint, save_checkpoint
from graspsim.vision.ensemble import SegNetEnsemble
from graspsim.vision.evaluate import EvalRealConfig, evaluate_real
from graspsim.vision.infer import Segmenter
from graspsim.vision.model import SegNet, SegNetConfig

from frame_sets import TINY
from test_calibrate import _checkpoint, _frames

torch.set_num_threads(2)

LIMITS = dict(min_precision=0.5, max_fp_images=0.2, precision="fp32")


def test_an_ensemble_averages_its_members_logits_and_is_calibrated_as_one_net(tmp_path, capsys):
    a, b, c = (_checkpoint(tmp_path / f"{n}.pt", seed=s, config={"seed": s}) for n, s in (("a", 0), ("b", 1), ("c", 2)))
    root = _frames(tmp_path / "tune", n_target=12, n_free=6)
    out = tmp_path / "ens.pt"
    code = main(["calibrate", "--vision", str(a), str(b), str(c), "--images", str(root / "images"), "--out", str(out),
                 "--min-precision", "0.5", "--max-fp-images", "0.2", "--precision", "fp32"])
    assert code == 0, capsys.readouterr().err
    ck = load_checkpoint(out)
    assert ck["ensemble"] == 3 and "optimizer" not in ck and ck["metrics"] == {}
    assert [m["source"] for m in ck["ensemble_members"]] == [str(p.resolve()) for p in (a, b, c)]
    assert [m["seed"] for m in ck["ensemble_members"]] == [0, 1, 2]
    assert ck["calibration"]["source"] == [str(p.resolve()) for p in (a, b, c)]
    for i, p in enumerate((a, b, c)):  # every member's weights, untouched
        member = load_checkpoint(p)["model"]
        assert all(torch.equal(ck["model"][f"members.{i}.{k}"], v) for k, v in member.items())

    seg = Segmenter.from_checkpoint(out, precision="fp32")
    assert isinstance(seg.model, SegNetEnsemble) and seg.mirror_tta
    rgb = torch.randint(0, 256, (5, 3, 64, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    singles = [Segmenter.from_checkpoint(p, precision="fp32").logits(rgb) for p in (a, b, c)]
    assert torch.allclose(seg.logits(rgb), torch.stack(singles).mean(0), atol=1e-5)
    # its operating point is its own, and eval-real measures what calibrate promised
    assert (seg.threshold, seg.peak_threshold) == (ck["calibration"]["after"]["threshold"], ck["peak_threshold"])
    m = evaluate_real(EvalRealConfig(images=root / "images", masks=root / "masks", vision=out, out=tmp_path / "ev",
                                     precision="fp32", bootstrap=0))
    for k in ("precision", "recall", "iou", "false_positive_images"):
        want = ck["calibration"]["after"][k]
        assert (m[k] != m[k]) if want is None else m[k] == pytest.approx(want, abs=1e-9)
    # a calibrated ensemble can be calibrated again (on other frames) like any checkpoint
    again = calibrate(CalibrateConfig(vision=out, images=root / "images", out=tmp_path / "again.pt", **LIMITS))
    assert again["source"] == str(out.resolve()) and load_checkpoint(tmp_path / "again.pt")["ensemble"] == 3


def test_weighted_ensemble_leans_on_the_nets_its_weights_name(tmp_path, capsys, monkeypatch):
    a, b = (_checkpoint(tmp_path / f"{n}.pt", seed=s, config={"seed": s}) for n, s in (("a", 0), ("b", 1)))
    root = _frames(tmp_path / "tune", n_target=12, n_free=6)
    out = tmp_path / "w.pt"
    code = main(["calibrate", "--vision", str(a), str(b), "--ensemble-weights", "3", "1", "--images",
                 str(root / "images"), "--out", str(out), "--min-precision", "0.5", "--max-fp-images", "0.2",
                 "--precision", "fp32"])
    assert code == 0, capsys.readouterr().err
    ck = load_checkpoint(out)
    assert ck["ensemble_weights"] == [0.75, 0.25] and [m["weight"] for m in ck["ensemble_members"]] == [0.75, 0.25]
    assert ck["calibration"]["ensemble_weights"] == [0.75, 0.25]
    assert torch.load(out, weights_only=False)["format_version"] == 3  # a release before weights refuses it
    rgb = torch.randint(0, 256, (5, 3, 64, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    la, lb = (Segmenter.from_checkpoint(p, precision="fp32").logits(rgb) for p in (a, b))
    seg = Segmenter.from_checkpoint(out, precision="fp32")
    assert seg.model.weights == (0.75, 0.25)
    assert torch.allclose(seg.logits(rgb), 0.75 * la + 0.25 * lb, atol=1e-5)
    assert not torch.allclose(seg.logits(rgb), (la + lb) / 2, atol=1e-3)  # the weights are used, not the plain mean
    low = Segmenter.from_checkpoint(out, precision="bf16").logits(rgb)  # bf16 runs the weighted average too
    assert (low - (0.75 * la + 0.25 * lb)).abs().max() < 0.25 * (la.abs().max() + 1)
    # without weights an ensemble is written as before (format 2) and is its members' mean
    calibrate(CalibrateConfig(vision=(a, b), images=root / "images", out=tmp_path / "eq.pt", **LIMITS))
    eq = load_checkpoint(tmp_path / "eq.pt")
    assert "ensemble_weights" not in eq and torch.load(tmp_path / "eq.pt", weights_only=False)["format_version"] == 2
    assert torch.allclose(Segmenter.from_checkpoint(tmp_path / "eq.pt", precision="fp32").logits(rgb), (la + lb) / 2,
                          atol=1e-5)
    # a reader of formats up to 2 refuses the weighted file by its version, instead of averaging it alike
    from graspsim.vision import checkpoint as vck

    monkeypatch.setattr(vck, "FORMAT_VERSION", 2)
    with pytest.raises(ValueError, match="format"):
        vck.load_checkpoint(out)
    vck.load_checkpoint(tmp_path / "eq.pt")


@pytest.mark.parametrize("weights, vision, match", [
    ((1.0,), 2, "1 weight"), ((1.0, 2.0, 3.0), 2, "3 weight"), ((1.0, -1.0), 2, "finite number >= 0"),
    ((float("nan"), 1.0), 2, "finite number >= 0"), ((0.0, 0.0), 2, "sum to 0"), ((1.0,), 1, "at least two"),
])
def test_ensemble_weights_that_do_not_fit_are_refused_by_name(tmp_path, weights, vision, match):
    nets = tuple(tmp_path / f"{i}.pt" for i in range(vision))
    with pytest.raises(ValueError, match=rf"ensemble_weights.*{match}|{match}.*ensemble_weights"):
        CalibrateConfig(vision=nets, images=(tmp_path,), out=tmp_path / "o.pt", ensemble_weights=weights)
    if vision == 2:  # the net itself holds the same rule, for Python callers and stored weights
        with pytest.raises(ValueError, match=match):
            SegNetEnsemble(TINY, 2, weights)


def test_an_ensemble_refuses_members_it_cannot_average(tmp_path):
    a = _checkpoint(tmp_path / "a.pt", seed=0)
    root = _frames(tmp_path / "tune", n_target=12, n_free=6)
    out = tmp_path / "o.pt"

    def ensemble(*members):
        return calibrate(CalibrateConfig(vision=members, images=root / "images", out=out, **LIMITS))

    wide = tmp_path / "wide.pt"
    torch.manual_seed(0)
    cfg = dataclasses.replace(TINY, base_channels=8)
    save_checkpoint(wide, {"model": SegNet(cfg).state_dict(), "model_config": dataclasses.asdict(cfg), "config": {},
                           "step": 0, "threshold": 0.5, "image_size": 64, "mirror_tta": True})
    with pytest.raises(ValueError, match=r"wide.pt and .*a.pt differ in model_config.*nets of one recipe"):
        ensemble(a, wide)
    so101 = _checkpoint(tmp_path / "so101.pt", seed=1, config={"sim": {"embodiment": "so101"}})
    with pytest.raises(ValueError, match=r"so101.pt and .*a.pt differ in embodiment \('so101' vs 'floating'\)"):
        ensemble(a, so101)
    cubes = _checkpoint(tmp_path / "cubes.pt", seed=1, config={"sim": {"target": {"kinds": ["cube"]}}})
    with pytest.raises(ValueError, match=r"cubes.pt and .*a.pt differ in target kinds \(\('cube',\) vs \('sphere',\)\)"):
        ensemble(a, cubes)
    with pytest.raises(ValueError, match="a checkpoint is given twice"):
        CalibrateConfig(vision=(a, tmp_path / "." / "a.pt"), images=root / "images", out=out)
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        ensemble(a, tmp_path / "nope.pt")
    assert not out.exists()
    # an older sphere net (no kinds stored) and one that names its kind are one recipe, as the loaders read them
    b = _checkpoint(tmp_path / "b.pt", seed=1, config={"sim": {"target": {"kinds": ["sphere"]}}})
    ensemble(a, b)
    assert torch.load(out, weights_only=False)["format_version"] == 2  # older releases refuse it by its version
    assert torch.load(a, weights_only=False)["format_version"] == 1  # a single net is written as before
    with pytest.raises(ValueError, match=r"o.pt is already an ensemble of 2 nets; list its members"):
        calibrate(CalibrateConfig(vision=(out, _checkpoint(tmp_path / "c.pt", seed=2)), images=root / "images",
                                  out=tmp_path / "o2.pt", **LIMITS))
    assert not (tmp_path / "o2.pt").exists()
    with pytest.raises(ValueError, match="at least 2 members"):
        SegNetEnsemble(TINY, 1)


def test_fine_tuning_takes_one_member_not_an_ensemble(tmp_path):
    from graspsim.vision.train import fine_tune_config
    from graspsim.vision.train_config import TrainVisionConfig

    root = _frames(tmp_path / "tune", n_target=12, n_free=6)
    members = (_checkpoint(tmp_path / "a.pt", seed=0), _checkpoint(tmp_path / "b.pt", seed=1))
    calibrate(CalibrateConfig(vision=members, images=root / "images", out=tmp_path / "ens.pt", **LIMITS))
    with pytest.raises(ValueError, match=r"--init .*ens.pt is an ensemble of 2 nets.*fine-tune one of its members"):
        fine_tune_config(TrainVisionConfig(init=tmp_path / "ens.pt", out=tmp_path / "run"))


def test_an_ensemble_exports_to_onnx_with_parity(tmp_path):
    """The averaged graph (each member's mirror pass inside) matches torch float32 on simulator frames."""
    from pathlib import Path

    from graspsim.robot.export import PARITY_TOLERANCE, ExportConfig, export

    root = Path(__file__).resolve().parents[1]
    cfg = SegNetConfig(base_channels=4, max_channels=8, depth=2)
    members = []
    for s in range(2):
        torch.manual_seed(s)
        net = SegNet(cfg)
        net.train()
        net(torch.rand(8, 3, 64, 64))  # running statistics off their initial values
        members.append(tmp_path / f"m{s}.pt")
        save_checkpoint(members[-1], {"model": net.state_dict(), "model_config": dataclasses.asdict(cfg), "config": {},
                                      "step": 1, "threshold": 0.5, "image_size": 64, "mirror_tta": True})
    tune = _frames(tmp_path / "tune", n_target=12, n_free=6, size=64)
    for name, weights in (("ens", ()), ("weighted", (0.8, 0.2))):
        calibrate(CalibrateConfig(vision=tuple(members), images=tune / "images", out=tmp_path / f"{name}.pt",
                                  ensemble_weights=weights, **LIMITS))
        contract = export(ExportConfig(vision=tmp_path / f"{name}.pt", out=tmp_path / f"onnx_{name}", frames=64,
                                       policy=root / "tests" / "assets" / "policy_format0.pt"))
        par = contract["parity"]
        assert contract["vision"]["mirror_tta"] is True
        assert par["vision_logits_max_abs_diff"] <= PARITY_TOLERANCE and par["mask_pixels_differing"] == 0
