"""train-vision reports the transfer sets beside its own composite test, at an operating point chosen on validation
data only; the pipeline shows it and can use a ready checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from graspsim.vision.backgrounds import DEFAULT_TRANSFER
from graspsim.runtime import RuntimeConfig
from graspsim.vision.model import SegNetConfig
from graspsim.vision.train import TrainVisionConfig, train_vision
from graspsim.vision.transfer_report import load_transfer_sets, operating_point_gap

torch.set_num_threads(2)
TINY = SegNetConfig(base_channels=4, max_channels=8, depth=2, chroma=True)
KW = dict(batch_size=8, steps=4, val_every=4, ckpt_every=4, n_val=32, n_test=16, model=TINY, mirror_tta=False,
          runtime=RuntimeConfig(threads=2, progress=False))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tv") / "run"
    return out, train_vision(TrainVisionConfig(out=out, **KW))


def test_metrics_hold_the_transfer_test_and_what_validation_promised(run):
    out, r = run
    m = json.loads((out / "metrics.json").read_text())
    assert m["transfer_test"]["num_images"] == 1024 and m["transfer_test"]["num_empty_images"] == 256
    assert m["operating_point"]["chosen_on"] == ["composite", "transfer"]
    assert set(m["operating_point"]["promised"]) == {"composite", "transfer"}
    gap = m["operating_point"]["gap"]["transfer"]
    for k in ("precision", "false_positive_image_rate"):
        if k in gap:
            assert gap[k] == pytest.approx(m["transfer_test"][k] - m["transfer_val"][k])
    assert "diameter 4-6 px" in m["transfer_test_breakdown"]
    assert "target-free, with distractors" in m["transfer_test_breakdown"]
    assert m["transfer_test"]["threshold"] == m["threshold"] == r["threshold"]
    tags = {p.name for p in (out / "tb").iterdir()}
    assert tags  # event files exist; the scalars are checked through the summary below
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tb"))
    acc.Reload()
    assert {"transfer_test/iou", "transfer_val/iou", "test/iou"} <= set(acc.Tags()["scalars"])


def test_operating_point_on_composites_alone_and_without_transfer_sets(tmp_path):
    r = train_vision(TrainVisionConfig(out=tmp_path / "a", operating_point="composite", **KW))
    assert r["operating_point"]["chosen_on"] == ["composite"] and "transfer_test" in r
    r = train_vision(TrainVisionConfig(out=tmp_path / "b", transfer=None, operating_point="composite", **KW))
    assert "transfer_test" not in r and r["operating_point"]["gap"].keys() == {"composite"}
    with pytest.raises(ValueError, match="operating_point"):
        TrainVisionConfig(out=tmp_path / "c", transfer=None)  # the default chooses on both, so it needs the sets
    with pytest.raises(ValueError, match="transfer_min_precision"):
        TrainVisionConfig(out=tmp_path / "c", transfer_min_precision=1.5)


def test_missing_transfer_folder_is_named_before_anything_is_written(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        train_vision(TrainVisionConfig(out=tmp_path / "run", transfer=tmp_path / "nowhere", **KW))
    assert not (tmp_path / "run").exists()


def test_transfer_frames_follow_the_training_resolution():
    sets = load_transfer_sets(DEFAULT_TRANSFER, size=32)
    t = sets["test"]
    assert t.rgb.shape == (1024, 3, 32, 32) and t.mask.shape == (1024, 32, 32) and t.mask.dtype == torch.bool
    assert load_transfer_sets(None) == {}


def test_gap_is_test_minus_validation():
    val = {"precision": 0.95, "recall": 0.8, "iou": 0.7, "false_positive_image_rate": 0.01}
    test = {"precision": 0.93, "recall": 0.85, "iou": 0.72, "false_positive_image_rate": float("nan")}
    gap = operating_point_gap({"transfer": val}, {"transfer_test": test})
    assert gap["transfer"]["precision"] == pytest.approx(-0.02) and "false_positive_image_rate" not in gap["transfer"]


def test_deployable_copy_drops_training_state_loads_for_inference_and_refuses_resume(run, tmp_path):
    from graspsim.vision.checkpoint import TRAINING_ONLY, load_checkpoint, save_deployable
    from graspsim.vision.infer import Segmenter

    out, r = run
    dst = tmp_path / "deploy" / "checkpoint.pt"
    dst.parent.mkdir()
    save_deployable(out / "checkpoint.pt", dst)
    full, slim = load_checkpoint(out / "checkpoint.pt"), load_checkpoint(dst)
    assert not set(TRAINING_ONLY) & set(slim) and "optimizer" in full
    assert all(torch.equal(full["model"][k], slim["model"][k]) for k in full["model"])
    assert json.dumps(slim["metrics"]["transfer_test"]) == json.dumps(full["metrics"]["transfer_test"])  # NaN-safe
    seg_a, seg_b = Segmenter.from_checkpoint(out / "checkpoint.pt"), Segmenter.from_checkpoint(dst)
    x = torch.randint(0, 255, (4, 3, 64, 64), dtype=torch.uint8)
    assert torch.equal(seg_a(x), seg_b(x)) and seg_a.threshold == seg_b.threshold
    with pytest.raises(ValueError, match="deployable"):
        train_vision(TrainVisionConfig(out=dst.parent, resume=True, **{**KW, "steps": 8}))
