"""The SO-101 pair shipped in the repository (vision/assets/segnet_so101.pt, an ensemble of two nets, and
dagger/assets/policy_so101.pt): both load, both declare the so101 embodiment and the three kinds, the vision net still finds the target on part of the
MuJoCo-rendered transfer test, and the pair still grasps in the batched simulator with predicted masks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from graspsim import SimConfig, runs
from graspsim.config import TargetConfig
from graspsim.vision.checkpoint import TRAINING_ONLY, load_checkpoint

ROOT = Path(__file__).resolve().parent.parent
VISION = ROOT / "vision" / "assets" / "segnet_so101.pt"
POLICY = ROOT / "dagger" / "assets" / "policy_so101.pt"
KINDS = ("sphere", "cube", "cylinder")

torch.set_num_threads(2)


def _deployable_so101_net(path: Path) -> dict:
    """The vision checkpoint ``path``, checked: at most 5 MB, no training state, trained for the so101 embodiment
    and the three kinds."""
    assert path.stat().st_size <= 5 * 2**20
    ckpt = load_checkpoint(path)
    assert not set(TRAINING_ONLY) & set(ckpt)
    assert runs.trained_embodiment(ckpt["config"]) == "so101"
    assert runs.trained_kinds(ckpt["config"]) == KINDS
    return ckpt


def test_shipped_so101_vision_net_is_deployable_and_matches_its_record():
    ckpt = _deployable_so101_net(VISION)
    record = json.loads(VISION.with_suffix(".json").read_text())
    assert record["threshold"] == ckpt["threshold"] and record["peak_threshold"] == ckpt["peak_threshold"]
    assert record["one_region"] is ckpt["one_region"] is True and ckpt["calibration"]["n_frames"] == 4096
    # an ensemble of two nets (vision/assets/README.md); the record names each member as the checkpoint stores it
    members = ckpt["ensemble_members"]
    assert ckpt["ensemble"] == len(members) == len(record["members"]) == 2
    assert record["config"] == ckpt["config"] and record["steps"] == [m["step"] for m in members]
    assert [m["name"] for m in record["members"]] == [m["source"] for m in members]
    # weighed in the average (calibrate --ensemble-weights); the record and each member carry the same weights
    assert record["ensemble_weights"] == ckpt["ensemble_weights"] == [m["weight"] for m in members] \
        == [m["weight"] for m in record["members"]]
    assert record["transfer_test"]["iou"] == pytest.approx(ckpt["metrics"]["transfer_test"]["iou"])
    assert set(record["transfer_test_by_kind"]) == set(KINDS)


# measured on these 256 frames of data/transfer_so101/test (float32, the one-region rule on): IoU 0.885, precision
# 0.971, recall 0.909, 0 of 64 false-positive images (the single net before the ensemble: 0.895 / 0.963 / 0.926 / 0);
# floors well under, so that a broken loader, preprocessing, threshold, region rule or ensemble average fails here
def test_shipped_so101_vision_net_meets_a_floor_on_the_mujoco_transfer_set():
    from graspsim.vision.backgrounds import data_path
    from graspsim.vision.infer import Segmenter
    from graspsim.vision.metrics import SegMetrics
    from graspsim.vision.transfer import load_transfer_set

    seg = Segmenter.from_checkpoint(VISION, precision="fp32")
    t = load_transfer_set("test", data_path("transfer_so101"))
    m = SegMetrics(seg.threshold)
    with torch.inference_mode():
        m.update(seg(t.rgb[:256]), t.mask[:256])
    s = m.summary()
    assert s["iou"] >= 0.72 and s["recall"] >= 0.75 and s["precision"] >= 0.90
    assert s["false_positive_image_rate"] <= 4 / 64


def test_shipped_so101_policy_grasps_in_the_batched_simulator_with_predicted_masks():
    """64 scenes (test seeds, all three kinds) with the shipped pair: 99.3 % over 3,000 scenes (2026-12-03, float32;
    docs/so101.md); 90 % here leaves room for 64 scenes' noise while a broken pair (wrong embodiment,
    masks, senses or units) falls far below."""
    from graspsim.dagger.evaluate import _make_env
    from graspsim.dagger.masks import make_mask_fn
    from graspsim.dagger.policy import MaskPolicy
    from graspsim.dagger.rollout import rollout
    from graspsim.seeds import episode_seeds

    policy = MaskPolicy.from_checkpoint(POLICY, "cpu")
    assert policy.trained_embodiment == "so101" and tuple(policy.trained_kinds) == KINDS
    sim = SimConfig(embodiment="so101", target=TargetConfig(kinds=KINDS))
    env = _make_env("torch", sim, 64, "cpu")
    res = rollout(env, episode_seeds(0, "test", 0, 64), policy=policy.act, beta=0.0,
                  mask_fn=make_mask_fn("predicted", VISION, torch.device("cpu")))
    assert res.success.mean() >= 0.90, res.success.mean()


def test_kept_candidates_load_as_so101_nets_without_test_scores():
    """vision/assets/candidates/ (docs/architecture.md): each net there loads for the so101 embodiment and its
    README says why it is kept; its training run's scores on test photos were stripped, never read."""
    folder = ROOT / "vision" / "assets" / "candidates"
    readme = (folder / "README.md").read_text()
    nets = sorted(folder.glob("*.pt"))
    assert nets
    for net in nets:
        assert f"`{net.name}`" in readme, f"{net.name} is not described in {folder / 'README.md'}"
        ckpt = _deployable_so101_net(net)
        assert not [k for k in ckpt["metrics"] if k.startswith(("test", "transfer_test"))]


def test_the_shipped_so101_ensemble_holds_the_kept_candidate_it_names():
    """A member named as a file in vision/assets/candidates/ is that file's weights, bit for bit."""
    shipped = load_checkpoint(VISION)
    named = [(i, m["source"]) for i, m in enumerate(shipped["ensemble_members"]) if "candidates/" in m["source"]]
    assert named
    for i, source in named:
        kept = load_checkpoint(ROOT / source)["model"]
        mine = {k[len(f"members.{i}."):]: v for k, v in shipped["model"].items() if k.startswith(f"members.{i}.")}
        assert kept.keys() == mine.keys() and all(torch.equal(kept[k], mine[k]) for k in kept), source
