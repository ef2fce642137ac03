"""graspsim bench at a tiny scale: writes bench.json with the expected keys and a consistent speedup."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from graspsim.bench import BenchConfig, PeakMemory
from graspsim.dagger.throughput import run_bench as bench


def test_bench_tiny_writes_json_and_plot(tmp_path: Path):
    cfg = BenchConfig(out=tmp_path / "b", image_size=32, batch_sizes=(1, 2), bullet_configs=((1, 0),), loop_batch=2,
                      train_batch=2, warmup=0, min_steps=1, seconds=0.01, target_speedup=1e6, threads=(1,),
                      paired_rounds=2, loop_rounds=3)
    res = bench(cfg)
    data = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert (tmp_path / "b" / "fps_vs_batch.png").stat().st_size > 0
    for key in ("machine", "torch_sim", "bullet", "speedup_vs_bullet", "speedup_detail", "full_loop", "training",
                "profile", "total_seconds", "image_size"):
        assert key in data, key
    assert [r["batch"] for r in data["torch_sim"]] == [1, 2]
    assert all(r["fps"] > 0 and r["steps"] >= 1 for r in data["torch_sim"] + data["bullet"])
    best_t = max(r["fps"] for r in data["torch_sim"])
    best_b = max(r["fps"] for r in data["bullet"])
    assert data["speedup_vs_bullet"] == pytest.approx(best_t / best_b)
    assert data["speedup_detail"]["met"] is False  # a 1e6 target cannot be met, so the profile ran
    assert data["profile"]["top_ops"] and "render" in data["profile"]["ms_per_step"]
    assert set(data["profile"]["render_ablation_fps"]) >= {"full", "no_shadows", "sphere_and_table_only"}
    assert data["machine"]["torch_threads"] == 1 and data["image_size"] == 32
    assert res["speedup_vs_bullet"] == data["speedup_vs_bullet"]
    assert len(data["speedup_paired"]["rounds"]) == 2 and data["speedup_paired"]["median_ratio"] > 0
    loop = data["full_loop"]
    assert loop["fps"] > 0 and loop["batch"] == 2
    # without checkpoints the loop times the default nets, as a trained default checkpoint would run them
    from graspsim.vision.train_config import DEFAULT_MIRROR_TTA, DEFAULT_MODEL
    assert loop["nets"]["vision_arch"] == dataclasses.asdict(DEFAULT_MODEL)
    assert loop["nets"]["vision_mirror_tta"] is DEFAULT_MIRROR_TTA
    # its cost at 32x32: the locator reads the whole frame (a quarter of its 12.3 MFLOP at 64x64) and the window
    # U-Net its 24x24 window, mirrored, whatever the frame size (24.4 MFLOP); GFLOP/s = MFLOP x frames/s
    assert loop["vision_mflop_per_frame"] == pytest.approx(12.3 / 4 + 24.4, rel=0.02)
    # the paired rounds: bare simulator and loop timed one after the other at the loop's batch, median of the ratios
    pair = loop["paired"]
    assert pair["batch"] == 2 and len(pair["rounds"]) == 3
    assert all(r["ratio"] == pytest.approx(r["sim_fps"] / r["loop_fps"]) for r in pair["rounds"])
    assert pair["median_ratio"] == sorted(r["ratio"] for r in pair["rounds"])[1]
    assert loop["paired_by_threads"] == {"1": pair}  # one thread count swept: the run's own measurement only
    assert loop["vision_gflop_per_s"] == pytest.approx(loop["vision_mflop_per_frame"] * loop["vision_fps"] / 1e3)
    assert loop["sim_best_over_loop"] == pytest.approx(best_t / loop["fps"])
    assert loop["sim_same_batch_over_loop"] == pytest.approx(data["torch_sim"][1]["fps"] / loop["fps"])
    assert data["training"]["vision"]["samples_per_s"] > 0 and data["training"]["control"]["samples_per_s"] > 0


def test_paired_ratio_at_each_thread_count(tmp_path: Path):
    """The loop/sim ratio is measured at the run's thread count and again at every other count swept, and the
    run's thread count is restored afterwards."""
    import dataclasses as dc

    import torch

    from graspsim.dagger.throughput import load_nets, paired_by_threads
    from graspsim.expert import expert_action

    cfg = BenchConfig(out=tmp_path / "b", image_size=32, loop_batch=2, warmup=0, min_steps=1, seconds=0.01,
                      threads=(1, 2), loop_rounds=1)
    sim = dc.replace(cfg.sim, image_size=32)
    seg, ctl, _ = load_nets(cfg, 32, sim)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        run, by = paired_by_threads(cfg, sim, seg, ctl, expert_action)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(old)
    assert set(by) == {"1", "2"} and run is by["2"]
    assert by["1"]["threads"] == 1 and by["2"]["threads"] == 2
    assert all(len(p["rounds"]) == 1 and p["median_ratio"] > 0 for p in by.values())


def test_thread_count_zero_is_torch_default_in_the_paired_rounds(tmp_path: Path):
    """``threads`` 0 means torch's default thread count (here 2), for the simulator rows and the paired rounds alike,
    whichever count turns out best."""
    import torch

    old = torch.get_num_threads()
    cfg = BenchConfig(out=tmp_path / "b", image_size=32, batch_sizes=(2,), bullet_configs=(), loop_batch=2,
                      train_batch=2, warmup=0, min_steps=1, seconds=0.01, threads=(0, 1), loop_rounds=1, profile=False,
                      plot=False)
    try:
        torch.set_num_threads(2)
        data = bench(cfg)
    finally:
        torch.set_num_threads(old)
    assert [r["threads"] for r in data["torch_sim"]] == [2, 1]
    assert set(data["full_loop"]["paired_by_threads"]) == {"1", "2"}


def test_bench_config_errors(tmp_path: Path):
    with pytest.raises(ValueError, match="batch_sizes"):
        BenchConfig(batch_sizes=(0,))
    with pytest.raises(ValueError, match="threads"):
        BenchConfig(threads=())
    with pytest.raises(ValueError, match="bullet_configs"):
        BenchConfig(bullet_configs=((2, -1),))
    with pytest.raises(FileNotFoundError, match="BenchConfig.vision"):
        BenchConfig(vision=tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="loop_rounds"):
        BenchConfig(loop_rounds=-1)


def test_peak_memory_sees_an_allocation():
    with PeakMemory() as mem:
        block = bytearray(64 * 2**20)
        block[::4096] = b"x" * len(block[::4096])  # touch every page
    if mem.peak_bytes is None:
        pytest.skip("VmHWM cannot be reset on this system")
    assert mem.peak_bytes >= 48 * 2**20


def test_bench_with_a_mix_of_kinds_times_the_wrist_loop(tmp_path: Path):
    from graspsim import SimConfig

    d = SimConfig(image_size=32).to_dict()
    d["target"]["kinds"] = ["sphere", "cube", "cylinder"]
    cfg = BenchConfig(out=tmp_path / "b", image_size=32, batch_sizes=(2,), bullet_configs=((1, 0),), loop_batch=2,
                      train_batch=2, warmup=0, min_steps=1, seconds=0.01, threads=(1,), paired_rounds=1, loop_rounds=1,
                      sim=SimConfig.from_dict(d))
    bench(cfg)
    data = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert data["full_loop"]["fps"] > 0 and data["training"]["control"]["samples_per_s"] > 0
    with pytest.raises(ValueError, match="sphere-only control net"):
        bench(dataclasses.replace(cfg, out=tmp_path / "c", policy=Path("tests/assets/policy_format0.pt")))
