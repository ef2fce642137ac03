"""The benchmark scripts run as ``python benchmarks/<name>.py`` from any folder (no sys.path edits: the package is
installed) and parse typed configs whose validation names the bad field. Their measurements are not run here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

# script -> (a bad flag, what the error must name)
BAD_FLAGS = {
    "bench_distributed.py": (["--procs", "0"], "BenchDistributedConfig.procs"),
    "bench_latency.py": (["--calls", "0"], "LatencyConfig.calls"),
    "bench_sim.py": (["--batch-sizes", "0"], "batch_sizes"),
    "bench_vision_train.py": (["--rounds", "0"], "--rounds"),
    "close_probe.py": (["--policy", "x.pt", "--scenes", "0"], "CloseProbeConfig.scenes"),
    "expert_backends.py": (["--workers", "-1"], "ExpertBackendsConfig.workers"),
    "expert_kinds.py": (["--episodes", "0"], "--episodes"),
    "mask_gap.py": (["--steps", "0"], "MaskGapConfig.steps"),
    "own_camera.py": (["piles", "--out", "x", "--n", "0"], "piles --n"),
    "render_floor.py": (["--batch-sizes", "0"], "RenderFloorConfig.batch_sizes"),
    "rollout_idle_slots.py": (["--rounds", "0"], "RolloutIdleSlotsConfig.rounds"),
    "vision_throughput.py": (["--batch", "0"], "VisionThroughputConfig.batch"),
    "sphere_fps.py": (["--base", ".", "--batch", "0"], "--batch"),
    "so101_geometry.py": (["--model", "nowhere.xml"], "--model"),
    "so101_geometry_mujoco.py": (["--solves", "0"], "GeometryConfig.solves"),
    "so101_mujoco.py": (["--episodes", "0"], "So101MujocoConfig.episodes"),
    "so101_capture_region.py": (["--herds", "-1"], "--herds"),
    "so101_driver_vs_backend.py": (["--vision", "v.pt", "--policy", "p.pt", "--episodes", "0"],
                                   "DriverVsBackendConfig.episodes"),
    "so101_wide_camera.py": (["--vision", "v.pt", "--policy", "p.pt", "--episodes", "0"], "WideCameraConfig.episodes"),
}


def test_every_benchmark_script_is_covered():
    assert sorted(p.name for p in BENCHMARKS.glob("*.py")) == sorted(BAD_FLAGS)


@pytest.mark.parametrize("script", sorted(BAD_FLAGS))
def test_benchmark_rejects_a_bad_value_by_name_from_another_folder(script, tmp_path):
    flags, name = BAD_FLAGS[script]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"COLUMNS": "300"}
    p = subprocess.run([sys.executable, str(BENCHMARKS / script), *flags], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert name in p.stderr, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and not list(tmp_path.iterdir())  # refused before measuring or writing


def test_rollout_idle_slots_names_a_missing_checkpoint(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"COLUMNS": "300"}
    p = subprocess.run([sys.executable, str(BENCHMARKS / "rollout_idle_slots.py"), "--policy", "nowhere.pt"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "RolloutIdleSlotsConfig.policy: no such checkpoint nowhere.pt" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_close_probe_refuses_a_net_that_does_not_fit_the_kinds_in_one_line(tmp_path):
    """A sphere-only control net cannot drive the default mix: one line naming the checkpoint and --kinds."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    policy = Path(__file__).resolve().parent / "assets" / "policy_format0.pt"
    p = subprocess.run([sys.executable, str(BENCHMARKS / "close_probe.py"), "--policy", str(policy)], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "sphere-only" in p.stderr and "--kinds" in p.stderr and "Traceback" not in p.stderr
