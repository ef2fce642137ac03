"""benchmarks/bench_vision_train.py: the projection arithmetic and a one-step smoke run (no timing asserted)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from graspsim.vision.model import SegNetConfig
from graspsim.vision.train import TrainVisionConfig

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_vision_train.py"
_spec = importlib.util.spec_from_file_location("bench_vision_train", _PATH)
bv = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bv  # dataclasses look their module up there
_spec.loader.exec_module(bv)

FIXED = {"render_val_s": 4.0, "render_test_s": 5.0, "val_pass_s": 10.0, "test_pass_s": 11.0, "transfer_pass_s": 6.0}


def test_projection_counts_the_validations_inside_the_loop(tmp_path):
    cfg = TrainVisionConfig(out=tmp_path, steps=3000, val_every=1000)
    p = bv.project(cfg, 0.1, 0.2, FIXED)
    assert p["validations_in_loop"] == 3  # 1000, 2000, 3000
    assert p["loop_s"] == pytest.approx(3000 * 0.3 + 3 * (10.0 + 6.0))  # each validation scores the transfer val set too
    assert p["total_s"] == pytest.approx(p["loop_s"] + 10.0 + 4.0 + 5.0 + 11.0 + 6.0)  # + step-0 pass, renders, tests
    p = bv.project(TrainVisionConfig(out=tmp_path, steps=2500, val_every=1000), 0.1, 0.2, FIXED)
    assert p["validations_in_loop"] == 3  # 1000, 2000 and the final 2500


def test_config_rejects_unknown_variants_and_bad_counts():
    with pytest.raises(ValueError, match="nope"):
        bv.BenchVisionConfig(variants=("default", "nope"))
    with pytest.raises(ValueError, match="--rounds"):
        bv.BenchVisionConfig(rounds=0)


def test_one_step_smoke_run_writes_consistent_results(tmp_path, monkeypatch):
    monkeypatch.setitem(bv.VARIANTS, "tiny", {"batch_size": 4, "steps": 10, "n_val": 16, "n_test": 16,
                                              "model": SegNetConfig(base_channels=4, max_channels=8)})
    cfg = bv.BenchVisionConfig(variants=("tiny",), threads=1, rounds=1, steps_per_round=1, warmup=0, n_eval=8)
    result = bv.bench_vision(cfg)
    r = result["variants"]["tiny"]
    assert r["batch_s"] > 0 and r["step_s"] > 0 and r["val_pass_s"] > 0
    assert r["loop_s"] == pytest.approx(10 * (r["batch_s"] + r["step_s"]) + r["val_pass_s"] + r["transfer_pass_s"])
    assert r["ratio_to_budget"] == pytest.approx(r["total_s"] / 300.0)
    assert "step_ratio_to_default" not in r  # no default variant in this run
    assert "tiny" in bv.table(result)
    assert json.loads(json.dumps(result))["variants"]["tiny"]["overrides"]["model"]["base_channels"] == 4  # --out is JSON


@pytest.mark.parametrize("name", sorted(bv.VARIANTS))
def test_every_shipped_variant_is_a_valid_training_config(name, tmp_path):
    cfg = bv.dataclasses.replace(TrainVisionConfig(out=tmp_path), **bv.VARIANTS[name])  # runs __post_init__ checks
    for key, value in bv.VARIANTS[name].items():
        assert getattr(cfg, key) == value
