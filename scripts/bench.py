"""``graspsim bench``: the simulator benchmark of :mod:`graspsim.bench` (batched torch sim against pybullet)
driven by the FSM expert, together with the throughput of the learned parts (:mod:`graspsim.dagger.throughput`: full closed loop, training).
"""

from __future__ import annotations

from graspsim.dagger.throughput import measure_nets
from graspsim.expert import expert_action
from graspsim.bench import BenchConfig, bench


def run_bench(cfg: BenchConfig) -> dict:
    """Run every measurement and write ``bench.json`` and the plot into ``cfg.out``; returns the result."""
    return bench(cfg, act=expert_action, extra=measure_nets)


__all__ = ["BenchConfig", "run_bench"]
