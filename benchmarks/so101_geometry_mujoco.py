"""The SO-101's gripper, camera and reach as the MuJoCo backend builds them, measured on the arm's own MJCF.

    python benchmarks/so101_geometry_mujoco.py [--no-band]

Prints :func:`graspsim.mujoco.model.so101_geometry` (grasp point, TCP, camera pose relative to them with the gripper
straight down, field of view, the jaw-angle -> pad-gap table), the straight-down reach band measured again with the
IK (:func:`graspsim.mujoco.ik.measure_reach_band`, about 10 s) next to the table the IK layer ships
(``REACH_BAND``), the yaw range the wrist-roll limits leave at a few points, and the IK's solve time. Needs
``pip install 'graspsim[mujoco]'``; one thread.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import tyro


@dataclass(frozen=True)
class GeometryConfig:
    """Measure and print the SO-101 geometry of the MuJoCo backend."""

    band: bool = True
    """Measure the reach band again with the IK (about 10 s)."""
    solves: int = 200
    """Warm-started IK solves timed over random reachable targets."""

    def __post_init__(self) -> None:
        if self.solves < 1:
            raise ValueError(f"GeometryConfig.solves must be at least 1; got {self.solves!r}")


def yaw_range(kin, pos, step: float = 0.05) -> tuple[float, float]:
    """The contiguous yaw interval around 0 (rad) in which the IK reaches ``pos`` straight down."""
    ys = np.arange(-math.pi, math.pi + 1e-9, step)
    ok = [kin.solve(pos, y, None).ok for y in ys]
    i = int(np.argmin(np.abs(ys)))
    if not ok[i]:
        return (float("nan"), float("nan"))
    lo = hi = i
    while lo > 0 and ok[lo - 1]:
        lo -= 1
    while hi < len(ys) - 1 and ok[hi + 1]:
        hi += 1
    return float(ys[lo]), float(ys[hi])


def main(args: GeometryConfig) -> None:
    import torch

    torch.set_num_threads(1)
    from graspsim.mujoco.ik import REACH_BAND, REACH_HEIGHTS, So101Kinematics, measure_reach_band
    from graspsim.mujoco.model import BASE_POS, PAN_TO_CENTRE

    kin = So101Kinematics()
    g = kin.geometry
    f3 = lambda v: "(" + ", ".join(f"{x:+.5f}" for x in v) + ")"  # noqa: E731
    print(f"arm base at {f3(BASE_POS)} m in the world; pan axis {PAN_TO_CENTRE} m behind the workspace centre")
    print(f"grasp point (gripper body frame): {f3(g.grasp_point)} m; {-g.grasp_point[2]:.4f} m down the roll axis, "
          f"{math.hypot(*g.grasp_point[:2]):.4f} m off it")
    print(f"fixed pad inner face (gripper body frame): {f3(g.fixed_pad_face)} m; pads 40 mm apart at jaw "
          f"{g.parallel_jaw:.3f} rad")
    print(f"TCP (pads' lower-edge centre) {g.tcp_below_grasp:.4f} m below the grasp point")
    print(f"straight down, yaw 0 (simulator gripper frame = world axes):")
    print(f"  camera - grasp point {f3(g.camera_from_grasp)} m; camera - TCP {f3(g.camera_from_tcp)} m")
    print(f"  optical axis {f3(g.camera_axis)}, {g.camera_tilt_deg:.1f} deg from straight down")
    print(f"  roll axis relative to the TCP (x, y) {f3(g.roll_axis_from_tcp)} m")
    print(f"field of view of the full sensor {g.fov_deg[0]:.1f} x {g.fov_deg[1]:.1f} deg; the square image uses "
          f"{g.fov_deg[1]:.1f} deg")
    print("jaw angle (rad) -> pad gap (mm):")
    print("  " + "  ".join(f"{a:+.3f}:{gap * 1e3:5.1f}" for a, gap in g.jaw_table))
    print("jaw angle (rad) -> depth of the moving pad below the grasp point (mm; the fixed pad: "
          f"{g.tcp_below_grasp * 1e3:.1f}):")
    print("  " + "  ".join(f"{a:+.3f}:{d * 1e3:5.1f}" for a, d in g.jaw_depth))
    if args.band:
        t = time.perf_counter()
        band = measure_reach_band(kin, heights=np.arange(0.0, 0.1001, 0.01))
        print(f"reach band of the grasp point, radius from the pan axis (m), yaw -45/0/+45 deg "
              f"(measured in {time.perf_counter() - t:.1f} s) vs the shipped REACH_BAND:")
        for i, h in enumerate(np.arange(0.0, 0.1001, 0.01)):
            shipped = REACH_BAND[i] if i < len(REACH_HEIGHTS) else (float("nan"), float("nan"))
            print(f"  height {h:.2f}: measured {band[i, 0]:.4f}-{band[i, 1]:.4f}   "
                  f"shipped {shipped[0]:.4f}-{shipped[1]:.4f}")
    for pos in ([0.0, 0.0, 0.02], [0.0, 0.05, 0.02], [0.0, -0.05, 0.02], [0.05, 0.05, 0.02], [-0.05, -0.05, 0.06]):
        lo, hi = yaw_range(kin, np.array(pos))
        print(f"yaw reachable at {pos}: {lo:+.2f} .. {hi:+.2f} rad (wrist_roll limits)")
    rng = np.random.default_rng(0)
    q, times, fails = kin.home, [], 0
    while len(times) < args.solves:
        pos = np.array([rng.uniform(-0.05, 0.05), rng.uniform(-0.05, 0.05), rng.uniform(0.01, 0.07)])
        if not kin.reachable(pos):
            continue
        t = time.perf_counter()
        res = kin.solve(pos, rng.uniform(-0.6, 0.6), q)
        times.append(time.perf_counter() - t)
        fails += not res.ok
        q = res.q if res.ok else q
    print(f"IK: {args.solves} warm-started solves, median {np.median(times) * 1e3:.2f} ms, "
          f"95th percentile {np.percentile(times, 95) * 1e3:.2f} ms, {fails} failed")


if __name__ == "__main__":
    main(tyro.cli(GeometryConfig, description=__doc__.splitlines()[0]))
