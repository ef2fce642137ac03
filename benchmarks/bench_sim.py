"""Reproducible throughput comparison: batched torch simulator vs the pybullet backend, one run.

    python benchmarks/bench_sim.py --out runs/bench            # default run (< 5 min)
    python benchmarks/bench_sim.py --out /tmp/b --seconds 0.5 --batch-sizes 1 64 256

Calls the library function behind ``graspsim bench`` (``graspsim.dagger.throughput.run_bench``; same flags) and prints the
measured frames/s and every torch/pybullet ratio, all taken side by side in this process.
"""

from __future__ import annotations

import logging

import tyro

from graspsim.perf import tune_allocator
from graspsim.bench import BenchConfig
from graspsim.dagger.throughput import run_bench as bench


def ratio_table(result: dict) -> str:
    """Text table: torch frames/s per batch size and its ratio to every pybullet configuration."""
    bullet = result["bullet"]
    heads = [f"/bullet {b['num_envs']}env {b['workers']}w" for b in bullet]
    lines = [f"{'batch':>6} {'threads':>7} {'torch fps':>10} " + " ".join(f"{h:>20}" for h in heads)]
    for r in result["torch_sim"]:
        ratios = " ".join(f"{r['fps'] / b['fps']:>19.1f}x" for b in bullet)
        lines.append(f"{r['batch']:>6} {r['threads']:>7} {r['fps']:>10.0f} {ratios}")
    lines.append("pybullet fps: " + ", ".join(f"{b['num_envs']} env/{b['workers']} workers = {b['fps']:.0f}"
                                              for b in bullet))
    loop = result.get("full_loop", {})
    if "fps" in loop:
        lines.append(f"full loop (sim + vision + control) at batch {loop['batch']}: {loop['fps']:.0f} fps")
    for name, t in result.get("training", {}).items():
        if isinstance(t, dict) and "samples_per_s" in t:
            lines.append(f"training {name}: {t['samples_per_s']:.0f} samples/s (batch {t['batch']})")
    d = result.get("speedup_detail")
    if d:
        lines.append(f"speedup_vs_bullet = {result['speedup_vs_bullet']:.2f}x (torch batch {d['torch']['batch']}, "
                     f"{d['torch']['threads']} threads vs "
                     f"bullet {d['bullet']['num_envs']} envs / {d['bullet']['workers']} workers; target "
                     f"{d['target']}x, {'met' if d['met'] else 'NOT met'})")
    pair = result.get("speedup_paired")
    if pair:
        lines.append("paired rounds (alternating windows, same load): " + ", ".join(
            f"{r['torch_fps']:.0f}/{r['bullet_fps']:.0f} = {r['ratio']:.1f}x" for r in pair["rounds"])
            + f"; median {pair['median_ratio']:.1f}x")
    return "\n".join(lines)


def main(cfg: BenchConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    tune_allocator()
    print(ratio_table(bench(cfg)))


if __name__ == "__main__":
    main(tyro.cli(BenchConfig, description=__doc__.splitlines()[0]))
