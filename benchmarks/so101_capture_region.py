"""Where does the SO-101's one-jaw gripper capture a target? MuJoCo (the arm's own model) against the batched simulator.

    python benchmarks/so101_capture_region.py                      # cylinders, spheres, cubes; about 5 minutes
    python benchmarks/so101_capture_region.py --kinds cylinder --csv /tmp/capture.csv

A target stands at the workspace centre; the gripper (yaw 0, jaw open) starts with the target at a controlled place
in its frame (the simulator's gripper frame: x along the pads, y across them towards the fixed pad, z up):

* ``x``: the target's centre along the pads from the pads' centre line (mm);
* ``herd``: the gap between the target's side and the fixed pad's face (mm): how far the moving jaw must push it;
* ``height``: the pads' lower edge (the TCP) above the table, as a fraction of the target's height.

Then the same commands in both simulators: one step open, ``CLOSE_STEPS`` closing in place, ``LIFT_STEPS`` closed and
rising at full speed. Outcomes: ``C`` captured (held and lifted: the episode's success), ``T`` tipped (MuJoCo only:
the target's axis ends more than 30 degrees from vertical), ``P`` pushed (not held, moved more than 3 mm beyond where
the jaw herds it), ``D`` dropped (held, then lost), ``M`` missed (closed on nothing, or held nothing). The batched
simulator runs every trial in one batch; MuJoCo one after the other without images. Prints, per target shape, the
grid of outcomes (MuJoCo / batched) and the agreement of captured-or-not; ``--csv`` writes one row a trial.
Per-scene randomization that is not the grasp's (latency, action gain and noise, slip, drift) is switched off.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import itertools
import math
import time

import numpy as np
import torch

from graspsim import SimConfig, physics
from graspsim.config import TargetConfig
from graspsim.randomization import sample_scenes
from graspsim.state import KIND_BOX, KIND_CYLINDER, KIND_SPHERE, State

CLOSE_STEPS = 8  # 0.8 s: the jaw shuts from 50 mm in about 0.42 s in MuJoCo (0.12 m/s of gap), 0.25 s in the sim
LIFT_STEPS = 12  # at 0.1 m/s the held target's bottom passes the 5 cm of success within 8-10 steps
TIP_DEG = 30.0
PUSH_MM = 3.0

XS_MM = (-6.0, -4.0, -2.0, 0.0, 2.0, 4.0, 6.0)
HERDS_MM = (0.0, 4.0, 8.0, 14.0, 20.0)
HEIGHTS = (0.0, 0.15, 0.3)


def shapes(kinds: tuple[str, ...]) -> list[tuple[str, int, float, float]]:
    """(label, kind code, half width r, half height hz) of each target shape swept (m): each kind's size range."""
    t = TargetConfig()
    out = []
    if "cylinder" in kinds:
        for d, h in itertools.product((t.cylinder_diameter[0], 0.018, t.cylinder_diameter[1]),
                                      (t.cylinder_height[0], 0.03, t.cylinder_height[1])):
            out.append((f"cylinder d{d * 1e3:.0f} h{h * 1e3:.0f}", KIND_CYLINDER, d / 2, h / 2))
    if "sphere" in kinds:
        for d in (0.0125, 0.015):
            out.append((f"sphere d{d * 1e3:.1f}", KIND_SPHERE, d / 2, d / 2))
    if "cube" in kinds:
        for s in (t.cube_side[0], t.cube_side[1]):
            out.append((f"cube s{s * 1e3:.0f}", KIND_BOX, s / 2, s / 2))
    return out


def trials(cfg: SimConfig, kinds: tuple[str, ...], xs=XS_MM, herds=HERDS_MM, heights=HEIGHTS) -> list[dict]:
    """One dict per trial: shape, offsets and the TCP's start (m, world = gripper frame at yaw 0)."""
    face = cfg.body.fixed_jaw_y
    out = []
    for label, kind, r, hz in shapes(kinds):
        for herd_mm, x_mm, f in itertools.product(herds, xs, heights):
            herd = herd_mm * 1e-3
            if 2 * r + herd > cfg.open_width - 0.002:  # the open moving pad would stand on the target
                continue
            rel = (x_mm * 1e-3, face - r - herd)  # the target from the TCP, gripper frame
            h = f * 2 * hz
            out.append({"shape": label, "kind": kind, "r": r, "hz": hz, "x_mm": x_mm, "herd_mm": herd_mm,
                        "height": f, "tcp": (-rel[0], -rel[1], h)})
    return out


def scenes(cfg: SimConfig, ts: list[dict]) -> State:
    """A batch of scenes, one a trial: the target at the origin, the TCP where the trial puts it, nothing random
    left that is not the grasp's."""
    n = len(ts)
    s = sample_scenes(cfg, n, torch.Generator().manual_seed(0))
    f = lambda k, dt=torch.float32: torch.tensor([t[k] for t in ts], dtype=dt)  # noqa: E731
    r, hz = f("r"), f("hz")
    kind = f("kind", torch.long)
    pos = torch.stack([torch.zeros(n), torch.zeros(n), torch.where(kind == KIND_CYLINDER, hz, r)], 1)
    zeros = torch.zeros(n)
    return s.replace(
        target_kind=kind, sphere_radius=r, target_half_height=torch.where(kind == KIND_CYLINDER, hz, zeros),
        sphere_pos=pos, sphere_vel=torch.zeros(n, 2), start_xy=pos[:, :2].clone(), target_yaw=zeros.clone(),
        tcp_pos=f("tcp"), tcp_vel=torch.zeros(n, 3), finger_width=torch.full((n,), cfg.open_width),
        wrist_yaw=zeros.clone(), wrist_rate=zeros.clone(), prev_wz=zeros.clone(), close_cmd=torch.zeros(n, dtype=torch.bool),
        prev_action=torch.zeros(n, 4), dist_kind=torch.zeros_like(s.dist_kind), latency=torch.zeros(n, dtype=torch.bool),
        action_gain=torch.ones(n), action_noise=zeros.clone(), slip_rate=zeros.clone(),
    )


def actions(n: int, dim: int, speed: float) -> list[torch.Tensor]:
    """The trial's command sequence (B,dim each): open, close in place, rise closed."""
    seq = []
    for k in range(1 + CLOSE_STEPS + LIFT_STEPS):
        a = torch.zeros(n, dim)
        a[:, -1] = -1.0 if k == 0 else 1.0
        if k > CLOSE_STEPS:
            a[:, 2] = speed
        seq.append(a)
    return seq


def outcome(success: bool, ever_held: bool, dropped: bool, tipped: bool, beyond_mm: float) -> str:
    if success:
        return "C"
    if tipped:
        return "T"
    if dropped or ever_held:
        return "D"
    if beyond_mm > PUSH_MM:
        return "P"
    return "M"


def run_batched(cfg: SimConfig, ts: list[dict]) -> list[str]:
    s = scenes(cfg, ts)
    held_any = torch.zeros(len(ts), dtype=torch.bool)
    for a in actions(len(ts), cfg.action_dim, cfg.max_speed):
        s = physics.step(s, a, cfg)
        held_any |= s.held
    moved = (s.sphere_pos[:, :2] - s.start_xy).norm(dim=1) * 1e3
    herd = torch.tensor([t["herd_mm"] for t in ts])
    return [outcome(bool(s.success[i]), bool(held_any[i]), bool(s.dropped[i]), False, float(moved[i] - herd[i]))
            for i in range(len(ts))]


def run_mujoco(cfg: SimConfig, ts: list[dict]) -> list[str]:
    from graspsim.mujoco import MujocoGraspEnv

    batch = scenes(cfg, ts)
    names = [f.name for f in dataclasses.fields(State)]
    env = MujocoGraspEnv(cfg, num_envs=1, seed=0, render_obs=False)
    out = []
    try:
        seq = actions(1, cfg.action_dim, cfg.max_speed)
        for i, t in enumerate(ts):
            env.state = State(**{k: getattr(batch, k)[i:i + 1] for k in names})
            env._build(torch.arange(1))
            env._success_before = env.state.success
            start = env.state.sphere_pos[0, :2].clone()
            held_any = False
            for a in seq:
                env.step(a)
                held_any |= bool(env.state.held[0])
            s, sc = env.state, env.scenes[0]
            q = sc.qadr["target"]
            w, x, y, z = sc.d.qpos[q + 3:q + 7]
            tilt = math.degrees(math.acos(max(-1.0, min(1.0, 1 - 2 * (x * x + y * y)))))
            tipped = t["kind"] != KIND_SPHERE and tilt > TIP_DEG and not bool(s.success[0])
            moved = float((s.sphere_pos[0, :2] - start).norm()) * 1e3
            out.append(outcome(bool(s.success[0]), held_any, bool(s.dropped[0]), tipped, moved - t["herd_mm"]))
    finally:
        env.close()
    return out


def report(ts: list[dict], mj: list[str], sim: list[str]) -> None:
    xs = sorted(set(t["x_mm"] for t in ts))
    herds = sorted(set(t["herd_mm"] for t in ts))
    heights = sorted(set(t["height"] for t in ts))
    agree = [(a == "C") == (b == "C") for a, b in zip(mj, sim)]
    print(f"\ncells: MuJoCo/batched outcome (C captured, T tipped, P pushed, D dropped, M missed); rows herd mm, "
          f"columns x mm {xs}; blocks pad height as a fraction of the target's height")
    for label in dict.fromkeys(t["shape"] for t in ts):
        idx = [i for i, t in enumerate(ts) if t["shape"] == label]
        a = sum(agree[i] for i in idx) / len(idx)
        cm = sum(mj[i] == "C" for i in idx) / len(idx)
        cs = sum(sim[i] == "C" for i in idx) / len(idx)
        print(f"\n{label}: captured MuJoCo {cm:.0%} batched {cs:.0%}, agreement {a:.0%} ({len(idx)} trials)")
        for f in heights:
            print(f"  height {f:.2f}")
            for herd in herds:
                cells = {t["x_mm"]: f"{mj[i]}/{sim[i]}" for i in idx for t in [ts[i]]
                         if t["height"] == f and t["herd_mm"] == herd}
                if cells:
                    print(f"    herd {herd:4.0f}: " + " ".join(f"{cells.get(x, '   '):>3}" for x in xs))
    print("\nsummary (captured-or-not agreement)")
    for kind, code in (("sphere", KIND_SPHERE), ("cube", KIND_BOX), ("cylinder", KIND_CYLINDER)):
        idx = [i for i, t in enumerate(ts) if t["kind"] == code]
        if idx:
            fp = sum(mj[i] != "C" and sim[i] == "C" for i in idx)
            fn = sum(mj[i] == "C" and sim[i] != "C" for i in idx)
            print(f"  {kind:8} {sum(agree[i] for i in idx) / len(idx):6.1%} of {len(idx)}: batched captures where "
                  f"MuJoCo does not {fp}, the reverse {fn}; MuJoCo captured {sum(mj[i] == 'C' for i in idx)}, "
                  f"batched {sum(sim[i] == 'C' for i in idx)}")
    print(f"  all      {sum(agree) / len(agree):6.1%} of {len(agree)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", nargs="+", default=["cylinder", "sphere", "cube"])
    ap.add_argument("--xs", nargs="+", type=float, default=list(XS_MM), help="offsets along the pads (mm)")
    ap.add_argument("--herds", nargs="+", type=float, default=list(HERDS_MM), help="gaps to the fixed pad (mm)")
    ap.add_argument("--heights", nargs="+", type=float, default=list(HEIGHTS),
                    help="pad heights (fractions of the target's height)")
    ap.add_argument("--csv", default=None, help="write one row a trial here")
    ap.add_argument("--batched-only", action="store_true", help="skip MuJoCo (read its outcomes from --mujoco-csv)")
    ap.add_argument("--mujoco-csv", default=None, help="MuJoCo outcomes of an earlier run (its --csv)")
    a = ap.parse_args()
    if not all(h >= 0 for h in a.herds):
        ap.error(f"--herds must be gaps of 0 mm or more; got {a.herds}")
    if not all(0 <= f < 1 for f in a.heights):
        ap.error(f"--heights must be fractions of the target's height in [0, 1); got {a.heights}")
    if not all(math.isfinite(x) for x in a.xs):
        ap.error(f"--xs must be finite offsets (mm); got {a.xs}")
    for k in a.kinds:
        TargetConfig(kinds=(k,))  # an unknown kind fails here, naming it
    torch.set_num_threads(1)
    cfg = SimConfig(embodiment="so101", target=TargetConfig(kinds=tuple(a.kinds)))
    ts = trials(cfg, tuple(a.kinds), a.xs, a.herds, a.heights)
    t0 = time.perf_counter()
    sim = run_batched(cfg, ts)
    t1 = time.perf_counter()
    if a.mujoco_csv:
        with open(a.mujoco_csv) as fh:
            rows = {(r["shape"], float(r["x_mm"]), float(r["herd_mm"]), float(r["height"])): r["mujoco"]
                    for r in csv.DictReader(fh)}
        mj = [rows[(t["shape"], t["x_mm"], t["herd_mm"], t["height"])] for t in ts]
    elif a.batched_only:
        mj = ["?"] * len(ts)
    else:
        mj = run_mujoco(cfg, ts)
    t2 = time.perf_counter()
    print(f"{len(ts)} trials: batched {t1 - t0:.1f} s, MuJoCo {t2 - t1:.1f} s")
    report(ts, mj, sim)
    if a.csv:
        with open(a.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["shape", "kind", "x_mm", "herd_mm", "height", "mujoco", "batched"])
            for t, m, s in zip(ts, mj, sim):
                w.writerow([t["shape"], t["kind"], t["x_mm"], t["herd_mm"], t["height"], m, s])


if __name__ == "__main__":
    main()
