"""Where does a control net close? The expert's own grasp states, with the target moved along the pads.

    python benchmarks/close_probe.py --policy runs/kinds_dagger_s2/best.pt --vision vision/assets/segnet_kinds.pt

The FSM expert drives a mix of scenes until the step where it first commands the pads to close (fingertips at the
table, centred within its tolerance, a cube's faces turned square). Each scene is frozen there. The target is then
moved by ``d`` mm along the pads (``--axis along``, + away from the camera) or across them (``--axis across``), the
scene is rendered again, and the policy is read: the share of scenes in which it closes (grip > 0) and its mean
velocity along the same axis (mm/s, gripper frame). The pads catch a target whose centre is within their 9-mm half
length (``graspsim.physics.grasp_window``), so a policy that still closes at 10-14 mm loses that target.

``--no-mount-jitter`` places every camera exactly at the nominal mount (``SimConfig.camera_offset``, the nominal
rotation), which shows how much of the spread comes from the camera-mount randomisation that a mask-only policy
cannot observe. Scenes come from the held-out (validation) stream of ``--seed``. Nothing is written.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Literal

import torch
import tyro

from graspsim import GraspEnv, SimConfig, physics
from graspsim.config import TargetConfig
from graspsim.dagger.model import to_gripper_frame
from graspsim.dagger.policy import MaskPolicy, check_fits_scenes
from graspsim.env import observe, privileged
from graspsim.expert.fsm import expert_phase_and_action
from graspsim.perf import tune_allocator
from graspsim.seeds import episode_seeds
from graspsim.state import TARGET_KIND_CODES, State
from graspsim.validate import positive_int


@dataclass(frozen=True)
class CloseProbeConfig:
    """Read a control net's close decision at the expert's grasp states with the target moved (module doc)."""

    policy: str
    """Control checkpoint (``dagger``'s best.pt or policy.pt)."""
    vision: str | None = None
    """Vision checkpoint: also read the policy on its predicted masks (else ground-truth masks only)."""
    kinds: tuple[str, ...] = ("sphere", "cube", "cylinder")
    """Target kinds of the scenes (the mix the policy was trained on)."""
    scenes: int = 600
    """Scenes driven by the expert (split among the kinds at random, as ``--sim.target.kinds`` draws them)."""
    seed: int = 1
    """Run seed; the scenes are its held-out (validation) stream."""
    axis: Literal["along", "across"] = "along"
    """Move the target along the pads (gripper x, + away from the camera) or across them (gripper y)."""
    max_shift_mm: int = 16
    """Largest shift (mm) either way."""
    step_mm: int = 2
    """Shift step (mm)."""
    mount_jitter: bool = True
    """Keep the camera-mount randomisation; ``--no-mount-jitter`` puts every camera at the nominal mount."""
    threads: int = 1
    """torch CPU threads."""

    def __post_init__(self) -> None:
        positive_int("CloseProbeConfig", "scenes", self.scenes)
        positive_int("CloseProbeConfig", "max_shift_mm", self.max_shift_mm)
        positive_int("CloseProbeConfig", "step_mm", self.step_mm)
        positive_int("CloseProbeConfig", "threads", self.threads)
        TargetConfig(kinds=tuple(self.kinds))  # an unknown kind fails here, naming it and the known ones


def expert_close_states(state: State, cfg: SimConfig) -> tuple[State, torch.Tensor]:
    """Drive the scenes ``state`` with the expert; freeze each at the step where the expert first commands a close.
    Returns (the frozen scenes, B bool: those that got there within the episode length; the others are where they
    ended)."""
    reached = torch.zeros(state.batch_size, dtype=torch.bool, device=state.device)
    for _ in range(cfg.max_steps):
        p = privileged(state)
        _, action = expert_phase_and_action(p, cfg)
        reached |= (action[:, -1] > 0) & ~p["close_cmd"].bool()
        if bool(reached.all()):
            break
        state = physics.step(state, action, cfg).where(reached, state)  # a scene that reached its close stays there
    return state, reached


def main(cfg: CloseProbeConfig) -> None:
    tune_allocator()
    torch.set_num_threads(cfg.threads)
    pol = MaskPolicy.from_checkpoint(cfg.policy)
    seg = None
    if cfg.vision:
        from graspsim.vision.infer import Segmenter
        seg = Segmenter.from_checkpoint(cfg.vision)
    sim = SimConfig(target=TargetConfig(kinds=tuple(cfg.kinds)))
    if not cfg.mount_jitter:
        sim = dataclasses.replace(sim, randomization=dataclasses.replace(sim.randomization, mount_jitter_pos=0.0,
                                                                         mount_jitter_rot=0.0))
    check_fits_scenes(pol.cfg, sim, f"control checkpoint {cfg.policy}", pol.trained_kinds)
    env = GraspEnv(sim, num_envs=cfg.scenes, seed=cfg.seed)
    env.reset(torch.arange(cfg.scenes), episode_seeds(cfg.seed, "heldout", 0, cfg.scenes))
    base, reached = expert_close_states(env.state, sim)
    col = 0 if cfg.axis == "along" else 1
    w = base.wrist_yaw
    unit = torch.stack([torch.cos(w), torch.sin(w)], 1) if col == 0 else torch.stack([-torch.sin(w), torch.cos(w)], 1)
    shifts = list(range(-cfg.max_shift_mm, cfg.max_shift_mm + 1, cfg.step_mm))
    rows = []  # per shift: {source: (closes B, velocity B mm/s)}
    for d in shifts:
        pos = base.sphere_pos.clone()
        pos[:, :2] += unit * (d / 1000.0)
        obs = observe(base.replace(sphere_pos=pos), sim)
        masks = {"ground truth": obs["mask"]}
        if seg is not None:
            masks["predicted"] = seg.predict_mask(obs["rgb"])
        row = {}
        for name, m in masks.items():
            a = pol.act(m, obs["gripper"])
            v = to_gripper_frame(a, obs["gripper"]) if a.shape[1] == 5 else a
            row[name] = (a[:, -1] > 0, 1000.0 * v[:, col])
        rows.append(row)
    jitter = "with" if cfg.mount_jitter else "without"
    print(f"policy {cfg.policy}; {jitter} the camera-mount randomisation; target moved {cfg.axis} the pads "
          f"(+ = {'away from the camera' if col == 0 else 'the gripper y axis'})")
    for kind in cfg.kinds:
        sel = reached & (base.target_kind == TARGET_KIND_CODES[kind])
        n = int(sel.sum())
        print(f"\n{kind}: {n} scenes at the expert's close")
        if n == 0:
            continue
        names = list(rows[0])
        print("| shift mm | " + " | ".join(f"{s}: closes | {s}: v mm/s" for s in names) + " |")
        print("|---" * (1 + 2 * len(names)) + "|")
        for d, row in zip(shifts, rows):
            cells = []
            for s in names:
                closes, vel = row[s]
                cells += [f"{100 * closes[sel].float().mean():.0f} %", f"{vel[sel].mean():+.1f}"]
            print(f"| {d:+d} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    try:
        main(tyro.cli(CloseProbeConfig, description=__doc__.splitlines()[0]))
    except (ValueError, FileNotFoundError) as e:  # a bad checkpoint, or a net that does not fit --kinds: one line
        msg = str(e).replace("--sim.target.kinds", "--kinds")  # the shared check names the verbs' flag
        print(f"close_probe.py: error: {msg}", file=sys.stderr)
        sys.exit(2)
