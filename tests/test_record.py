"""The record writer of shipped vision nets (graspsim.vision.record): a two-stage run becomes a deployable net and a
record whose stages, operating point and test numbers are the runs', with the record it replaces summarised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from graspsim.runtime import RuntimeConfig
from graspsim.vision.checkpoint import TRAINING_ONLY, load_checkpoint
from graspsim.vision.record import main, ship
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
    assert (last["seed"], last["steps"], last["init_lr"], last["init_as_run"]) == (0, 3, 0.002, "the first stage's net")
    metrics = json.loads((s2 / "metrics.json").read_text())
    assert last["train_seconds"] == metrics["train_seconds"] == record["train_seconds"]
    assert record["test"] == metrics["test"] and record["operating_point"] == metrics["operating_point"]
    assert (record["threshold"], record["steps"], record["config"]) == (ckpt["threshold"], 3, ckpt["config"])
    assert record["mflop_per_frame_as_deployed"] > 0 and record["machine"] == "test box"
    assert record["closed_loop_validation"] == "not measured" and record["chosen_on"] == {"rule": "the only candidate"}
    assert record["replaced"] == {"command": "graspsim train-vision --steps 9", "threshold": 0.3, "peak_threshold": 0.9,
                                  "test": {"iou": 0.8, "recall": 0.9}, "replaced": None}


def test_ship_bad_input_names_the_thing(tmp_path, two_stages, capsys):
    s1, _ = two_stages
    with pytest.raises(ValueError, match=r"\.pt path; got .*net\.onnx"):
        ship(tmp_path / "net.onnx", s1, [{"run": s1, "command": "c"}], chosen_on={})
    with pytest.raises(FileNotFoundError, match=r"ship: run: no such checkpoint .*nowhere"):
        ship(tmp_path / "net.pt", tmp_path / "nowhere", [{"command": "c"}], chosen_on={})
    with pytest.raises(FileNotFoundError, match=r"stage 'c': no such run config .*gone"):
        ship(tmp_path / "net.pt", s1, [{"run": tmp_path / "gone", "command": "c"}], chosen_on={})
    assert not (tmp_path / "net.pt").exists()  # nothing written before every input was read
    assert main([]) == 2 and "SPEC.json" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="record spec: no such file"):
        main([str(tmp_path / "spec.json")])
