"""The record writer of shipped vision nets (graspsim.vision.record): a two-stage run becomes a deployable net and a
record whose stages, operating point and test numbers are the runs', with the record it replaces summarised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from graspsim.runtime import RuntimeConfig
from graspsim.vision.checkpoint import TRAINING_ONLY, load_checkpoint
from graspsim.vision.checkpoint import save_checkpoint
from graspsim.vision.record import recalibrate, ship
from graspsim.vision.train import TrainVisionConfig, train_vision

from frame_sets import TINY

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def two_stages(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("stages")
    kw = dict(batch_size=6, val_every=3, ckpt_every=3, n_val=16, n_test=8, model=TINY, transfer=None,
              operating_point="composite", runtime=RuntimeConfig(threads=2, progress=False))
    train_vision(TrainVisionConfig(out=root / "s1", steps=3, seed=4, **kw))
    train_vision(TrainVisionConfig(out=root / "s2", init=root / "s1" / "checkpoint.pt", init_steps=3, init_lr=0.002,
                                   **kw))
    return root / "s1", root / "s2"


def test_ship_writes_a_deployable_net_and_a_record_of_its_stages(tmp_path, two_stages):
    s1, s2 = two_stages
    net = tmp_path / "assets" / "net.pt"
    net.parent.mkdir()
    net.with_suffix(".json").write_text(json.dumps({"command": "graspsim train-vision --steps 9", "threshold": 0.3,
                                                    "peak_threshold": 0.9, "test": {"iou": 0.8, "recall": 0.9,
                                                                                    "extra": 1}}))
    record = ship(net, s2, [{"run": s1, "command": "graspsim train-vision --steps 3 --seed 4"},
                            {"run": s2, "command": "graspsim train-vision --init s1 --init-steps 3 --init-lr 0.002",
                             "init_as_run": "the first stage's net"}],
                  chosen_on={"rule": "the only candidate"}, init_as="vision/assets/net.pt", machine="test box",
                  extra={"closed_loop_validation": "not measured"})
    ckpt = load_checkpoint(net)
    assert not set(TRAINING_ONLY) & set(ckpt)
    assert ckpt["config"]["init"] == ckpt["fine_tune"]["init"] == "vision/assets/net.pt"
    assert json.loads(net.with_suffix(".json").read_text()) == json.loads(json.dumps(record, default=str))
    assert record["command"] == ("graspsim train-vision --steps 3 --seed 4, then graspsim train-vision --init s1 "
                                 "--init-steps 3 --init-lr 0.002")
    first, last = record["stages"]
    assert (first["seed"], first["steps"], "init_lr" in first) == (4, 3, False)
    # each stage keeps its own operating point: the second stage started from the first's
    assert (first["threshold"], first["peak_threshold"]) == (ckpt["fine_tune"]["init_threshold"],
                                                           ckpt["fine_tune"]["init_peak_threshold"])
    assert (last["seed"], last["steps"], last["init_lr"], last["init_as_run"]) == (0, 3, 0.002, "the first stage's net")
    metrics = json.loads((s2 / "metrics.json").read_text())
    assert last["train_seconds"] == metrics["train_seconds"] == record["train_seconds"]
    assert record["test"] == metrics["test"] and record["operating_point"] == metrics["operating_point"]
    assert (record["threshold"], record["steps"], record["config"]) == (ckpt["threshold"], 3, ckpt["config"])
    assert record["mflop_per_frame_as_deployed"] > 0 and record["machine"] == "test box"
    assert record["closed_loop_validation"] == "not measured" and record["chosen_on"] == {"rule": "the only candidate"}
    assert record["replaced"] == {"command": "graspsim train-vision --steps 9", "threshold": 0.3, "peak_threshold": 0.9,
                                  "test": {"iou": 0.8, "recall": 0.9}, "replaced": None}


def test_ship_checks_every_input_before_it_writes(tmp_path, two_stages):
    s1, s2 = two_stages
    net = tmp_path / "net.pt"
    cases = [
        (dict(net=tmp_path / "net.onnx", run=s1, stages=[{"run": s1, "command": "c"}]), ValueError, r"\.pt path; got .*net\.onnx"),
        (dict(net=net, run=tmp_path / "nowhere", stages=[{"run": tmp_path / "nowhere", "command": "c"}]),
         FileNotFoundError, r"ship: run: no such checkpoint .*nowhere"),
        (dict(net=net, run=s2, stages=[{"run": tmp_path / "gone", "command": "a"}, {"run": s2, "command": "b"}]),
         FileNotFoundError, r"stage 'a': no such run config .*gone"),
        (dict(net=net, run=s2, stages=[{"seed": 0}, {"run": s2, "command": "b"}]), ValueError,
         r"stage 1 of 2 needs a 'command'"),
        (dict(net=net, run=s2, stages=[{"run": s2, "command": "b"}, {"run": s1, "command": "a"}]), ValueError,
         r"last stage must be read from the run shipped"),
        (dict(net=net, run=s1, stages=[{"run": s1, "command": "a"}], init_as="x.pt"), ValueError,
         r"init_as='x\.pt' was given, but .* was not started from another net"),
        (dict(net=net, run=s1, stages=[]), ValueError, "give the stages"),
    ]
    for kw, error, match in cases:
        with pytest.raises(error, match=match):
            ship(chosen_on={}, **kw)
        assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, no temporary file left


def test_ship_leaves_the_old_net_and_record_when_the_new_net_cannot_be_loaded(tmp_path, two_stages, monkeypatch):
    import graspsim.vision.record as record

    s1, _ = two_stages
    net = tmp_path / "net.pt"
    net.write_bytes(b"old net")
    net.with_suffix(".json").write_text("{}")

    def broken(*args, **kwargs):
        raise RuntimeError("cannot build the net")

    monkeypatch.setattr(record.Segmenter, "from_checkpoint", broken)
    with pytest.raises(RuntimeError, match="cannot build"):
        ship(net, s1, [{"run": s1, "command": "a"}], chosen_on={})
    assert net.read_bytes() == b"old net" and net.with_suffix(".json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.json", "net.pt"]


def test_recalibrate_ships_a_new_operating_point_and_adds_it_to_the_record(tmp_path, two_stages):
    s1, _ = two_stages
    net = tmp_path / "net.pt"
    ship(net, s1, [{"run": s1, "command": "graspsim train-vision --steps 3"}], chosen_on={"rule": "first"})
    old = json.loads(net.with_suffix(".json").read_text())
    ck = load_checkpoint(net)
    calibrated = tmp_path / "cal.pt"
    save_checkpoint(calibrated, {**{k: v for k, v in ck.items() if k not in ("kind", "format_version")},
                                 "threshold": 0.7, "peak_threshold": 0.99, "one_region": True,
                                 "calibration": {"max_fp_images": 0.025, "after": {"iou": 0.5}}})
    test = tmp_path / "metrics.json"
    by_kind = {"sphere": {"iou": 0.6, "recall": 0.7, "ci95": {}, "meets_targets": False}}
    test.write_text(json.dumps({"iou": 0.61, "recall": 0.71, "threshold": 0.7, "peak_threshold": 0.99,
                                "one_region": True, "per_frame": [1, 2], "by_kind": by_kind}))

    other = tmp_path / "other.pt"  # other weights: refused, nothing written
    weights = {k: v + 1 if v.is_floating_point() else v for k, v in ck["model"].items()}
    save_checkpoint(other, {**{k: v for k, v in ck.items() if k not in ("kind", "format_version")}, "model": weights,
                            "calibration": {}})
    wrong_point = tmp_path / "wrong.json"
    wrong_point.write_text(json.dumps({"threshold": 0.5, "peak_threshold": 0.99, "one_region": True}))
    corrupt = tmp_path / "corrupt.json"  # cut off while written
    corrupt.write_text('{"iou": 0.61, "thre')
    kw = dict(command="graspsim calibrate --max-fp-images 0.025", chosen_on={"rule": "val IoU"},
              test_command="graspsim eval-real ...")
    for cal, metrics, match in [(other, test, "does not hold the weights"), (net, test, "has no calibration record"),
                                (calibrated, wrong_point, r"measured at .*\(0\.5, 0\.99, True\)"),
                                (calibrated, corrupt, r"recalibrate: test: .*corrupt\.json is not a readable "
                                                      r"eval-real metrics file")]:
        with pytest.raises(ValueError, match=match):
            recalibrate(net, cal, test=metrics, **kw)
        assert json.loads(net.with_suffix(".json").read_text()) == old and load_checkpoint(net)["threshold"] == ck["threshold"]

    record = recalibrate(net, calibrated, test=test, **kw)
    shipped = load_checkpoint(net)
    assert (shipped["threshold"], shipped["peak_threshold"], shipped["one_region"]) == (0.7, 0.99, True)
    assert shipped["metrics"]["transfer_test"] == record["transfer_test"] and shipped["metrics"]["threshold"] == 0.7
    assert shipped["metrics"]["recalibrated_from"] == {"threshold": ck["threshold"], "peak_threshold": ck["peak_threshold"]}
    assert json.loads(net.with_suffix(".json").read_text()) == json.loads(json.dumps(record, default=str))
    assert [st["command"] for st in record["stages"]] == ["graspsim train-vision --steps 3", kw["command"]]
    assert record["command"] == "graspsim train-vision --steps 3, then " + kw["command"]
    assert (record["threshold"], record["peak_threshold"], record["chosen_on"]) == (0.7, 0.99, {"rule": "val IoU"})
    assert record["transfer_test"] == {"iou": 0.61, "recall": 0.71, "threshold": 0.7}
    assert record["transfer_test_by_kind"] == {"sphere": {"iou": 0.6, "recall": 0.7, "meets_targets": False}}
    assert record["transfer_val"] == {"iou": 0.5} and record["operating_point"]["calibration"]["max_fp_images"] == 0.025
    assert record["replaced"]["command"] == old["command"] and record["replaced"]["threshold"] == old["threshold"]
    assert "test" not in record and record["replaced"]["test"]["iou"] == old["test"]["iou"]  # the old point's numbers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.pt", "corrupt.json", "metrics.json", "net.json", "net.pt",
                                                          "other.pt", "wrong.json"]


def test_ship_ensemble_ships_a_calibrated_ensemble_with_its_members_records(tmp_path, two_stages):
    from graspsim.vision.ensemble import ensemble_payload
    from graspsim.vision.infer import Segmenter
    from graspsim.vision.record import add_test, ship_ensemble

    s1, s2 = two_stages
    net = tmp_path / "net.pt"
    ship(net, s1, [{"run": s1, "command": "graspsim train-vision --steps 3"}], chosen_on={"rule": "first"})
    old = json.loads(net.with_suffix(".json").read_text())
    b = s2 / "checkpoint.pt"
    payload = ensemble_payload([net, b], [load_checkpoint(net), load_checkpoint(b)])
    calibrated = tmp_path / "cal.pt"
    save_checkpoint(calibrated, {**payload, "threshold": 0.6, "peak_threshold": 0.995, "one_region": True,
                                 "calibration": {"n_frames": 8, "after": {"iou": 0.4}}})
    members = [{"file": net, "name": "assets/net.pt", "record": net.with_suffix(".json")},
               {"file": b, "name": "candidates/b.pt", "command": "graspsim train-vision --init s1"}]
    kw = dict(command="graspsim calibrate --vision assets/net.pt candidates/b.pt", chosen_on={"rule": "both gates"})

    single = tmp_path / "single.pt"
    save_checkpoint(single, {**load_checkpoint(net), "calibration": {}})
    for cal, mem, match in [(single, members, "is not a calibrated ensemble"), (calibrated, members[:1], "has 2 members"),
                            (calibrated, members[::-1], "does not hold the weights of member 1"),
                            (calibrated, [members[0], {"name": "x"}], "member 2 needs a 'file'")]:
        with pytest.raises(ValueError, match=match):
            ship_ensemble(net, cal, mem, **kw)
        assert json.loads(net.with_suffix(".json").read_text()) == old and "ensemble" not in load_checkpoint(net)

    record = ship_ensemble(net, calibrated, members, **kw)
    shipped = load_checkpoint(net)
    assert shipped["ensemble"] == 2 and (shipped["threshold"], shipped["peak_threshold"]) == (0.6, 0.995)
    assert [m["source"] for m in shipped["ensemble_members"]] == ["assets/net.pt", "candidates/b.pt"]
    assert Segmenter.from_checkpoint(net, precision="fp32").threshold == 0.6
    assert json.loads(net.with_suffix(".json").read_text()) == json.loads(json.dumps(record, default=str))
    assert record["steps"] == [m["step"] for m in shipped["ensemble_members"]] == [3, 3]
    assert record["config"] == shipped["config"] and record["one_region"] is True
    first, second = record["members"]
    assert first["record"]["command"] == old["command"] and "replaced" not in first["record"]
    assert second["command"] == "graspsim train-vision --init s1" and "record" not in second
    assert record["transfer_val"] == {"iou": 0.4} and "transfer_test" not in record
    assert record["replaced"]["command"] == old["command"]
    assert record["ensemble_weights"] is None and "weight" not in first  # the members' plain mean

    test = tmp_path / "metrics.json"
    test.write_text(json.dumps({"iou": 0.5, "threshold": 0.6, "peak_threshold": 0.995, "one_region": True,
                                "by_kind": {"sphere": {"iou": 0.5, "ci95": {}}}}))
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"iou": 0.5, "threshold": 0.5, "peak_threshold": 0.995, "one_region": True}))
    with pytest.raises(ValueError, match=r"add_test: .*wrong\.json was measured at .*\(0\.5, 0\.995, True\)"):
        add_test(net, wrong, test_command="graspsim eval-real ...")
    assert "transfer_test" not in json.loads(net.with_suffix(".json").read_text())
    record = add_test(net, test, test_command="graspsim eval-real ...")
    assert record["transfer_test"] == {"iou": 0.5, "threshold": 0.6} == load_checkpoint(net)["metrics"]["transfer_test"]
    assert record["transfer_test_by_kind"] == {"sphere": {"iou": 0.5}} and record["members"] == [first, second]
    assert load_checkpoint(net)["ensemble"] == 2

    # a weighted ensemble ships its weights: in the net, in each member's entry and in the record
    a = s1 / "checkpoint.pt"
    wp = ensemble_payload([a, b], [load_checkpoint(a), load_checkpoint(b)], weights=(3, 1))
    save_checkpoint(tmp_path / "wcal.pt", {**wp, "threshold": 0.7, "peak_threshold": 0.99, "one_region": True,
                                           "calibration": {"n_frames": 8, "after": {"iou": 0.5}}})
    wnet = tmp_path / "wnet.pt"
    rec = ship_ensemble(wnet, tmp_path / "wcal.pt", [{"file": a, "name": "a.pt"}, {"file": b, "name": "b.pt"}], **kw)
    assert rec["ensemble_weights"] == [0.75, 0.25] == load_checkpoint(wnet)["ensemble_weights"]
    assert [m["weight"] for m in rec["members"]] == [0.75, 0.25]
    assert torch.load(wnet, weights_only=False)["format_version"] == 3
