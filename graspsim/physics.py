"""Batched kinematics and grasp-contact logic: ``step(state, action, cfg) -> State``.

Action (``B,4`` float32): ``(vx, vy, vz)`` commanded fingertip velocity in m/s (world frame), and a
gripper command ``g``: ``g > 0`` closes, ``g <= 0`` opens. Executed velocity = command x per-scene gain
+ Gaussian noise, clipped per axis to ``max_speed`` and rate-limited by ``max_accel``. With
``state.latency`` a scene executes the previous step's command (one control step of delay).

Contact model (all scenes at once, no loop over scenes):

* The fingertips cannot go below the table (z >= 0) nor leave the workspace box.
* Each finger is a box. If a finger overlaps the free sphere, the sphere is pushed sideways in the
  table plane until it just touches the finger (it cannot be pressed into the table). Descending onto
  the sphere therefore shoves it aside; closing on a sphere that is off the pads squeezes it out.
* Grasp window: the sphere centre lies between the pads (``|x - tcp_x| <= pad_width/2``), above the
  fingertips by at least 20% of its radius and below the finger top by its radius. Closing then centres
  it between the pads; when the gap reaches the sphere diameter it is **held**: it moves rigidly with
  the TCP and the gap stays at the diameter.
* A held sphere is released when the gripper opens and falls onto the table. It may also slip (a
  *drop*) with per-step probability ``slip_rate * e**2`` where ``e`` in [0, 1] grows from the pad
  centre to the pad edge.
* Success: held with the sphere bottom at least ``lift_height`` above the table. ``done`` is success
  or ``steps >= max_steps``; both latch until reset.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import rng
from .config import SimConfig
from .state import State

ACTION_DIM = 4


def validate_action(action: Tensor, batch_size: int) -> Tensor:
    """Check an action batch and return it as float32; raise ValueError with the reason otherwise."""
    if not isinstance(action, torch.Tensor):
        raise ValueError(f"action must be a torch.Tensor of shape ({batch_size}, {ACTION_DIM}); got {type(action).__name__}")
    if action.shape != (batch_size, ACTION_DIM):
        raise ValueError(f"action must have shape ({batch_size}, {ACTION_DIM}); got {tuple(action.shape)}")
    if not action.dtype.is_floating_point:
        raise ValueError(f"action must be a floating-point tensor; got dtype {action.dtype}")
    finite = torch.isfinite(action).all(dim=1)
    if not bool(finite.all()):
        bad = torch.nonzero(~finite).flatten()[:8].tolist()
        raise ValueError(f"action has NaN or inf entries in scenes {bad}")
    return action.float()


def finger_boxes(tcp: Tensor, width: Tensor, cfg: SimConfig) -> tuple[Tensor, Tensor]:
    """Axis-aligned finger boxes as (centres ``B,2,3``, half-extents ``B,2,3``); finger 0 on +y."""
    half_w = width / 2 + cfg.finger_thickness / 2
    offs = torch.stack([half_w, -half_w], dim=1)  # B,2
    centre = tcp[:, None, :].repeat(1, 2, 1)
    centre[..., 1] = centre[..., 1] + offs
    centre[..., 2] = centre[..., 2] + cfg.finger_length / 2
    half = torch.tensor(
        [cfg.pad_width / 2, cfg.finger_thickness / 2, cfg.finger_length / 2], dtype=tcp.dtype, device=tcp.device
    ).expand_as(centre)
    return centre, half


def push_out_of_box(c: Tensor, r: Tensor, box_c: Tensor, box_h: Tensor) -> Tensor:
    """Horizontal displacement ``B,2`` that moves spheres (centre ``B,3``, radius ``B``) clear of boxes.

    Zero where there is no overlap. The sphere is only moved in the table plane.
    """
    lo, hi = box_c - box_h, box_c + box_h
    dz = torch.clamp(torch.maximum(lo[:, 2] - c[:, 2], c[:, 2] - hi[:, 2]), min=0.0)
    touching_z = dz < r
    r_eff = torch.sqrt(torch.clamp(r * r - dz * dz, min=0.0))
    q = torch.maximum(torch.minimum(c[:, :2], hi[:, :2]), lo[:, :2])
    d = c[:, :2] - q
    dist = d.norm(dim=1)
    outside = dist > 1e-9
    push_out = d / dist.clamp_min(1e-9)[:, None] * (r_eff - dist).clamp_min(0.0)[:, None]
    # centre inside the footprint: leave by the cheapest side
    exits = torch.stack(
        [hi[:, 0] - c[:, 0] + r_eff, c[:, 0] - lo[:, 0] + r_eff, hi[:, 1] - c[:, 1] + r_eff, c[:, 1] - lo[:, 1] + r_eff], 1
    )
    k = exits.argmin(dim=1)
    amount = exits.gather(1, k[:, None]).squeeze(1)
    dirs = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]], device=c.device, dtype=c.dtype)
    push_in = dirs[k] * amount[:, None]
    push = torch.where(outside[:, None], push_out, push_in)
    overlap = touching_z & (dist < r_eff)
    return torch.where(overlap[:, None], push, torch.zeros_like(push))


def command(state: State, action: Tensor, cfg: SimConfig) -> tuple[Tensor, Tensor]:
    """The action model shared by both backends: what the controller executes for ``action`` (B,4).

    Returns (executed B,4: the action after the scene's one-step latency, i.e. the previous action where
    ``state.latency``; commanded velocity B,3 in m/s: executed velocity times the scene's action gain plus
    Gaussian noise of std ``state.action_noise``, clipped per axis to ``cfg.max_speed``). The noise is the
    episode's own (drawn from ``state.key`` and ``state.steps``, :mod:`graspsim.rng`).
    """
    executed = torch.where(state.latency[:, None], state.prev_action, action)
    noise = rng.normal(state.key, state.steps, rng.TAG_ACTION_NOISE, 3) * state.action_noise[:, None]
    v_cmd = (executed[:, :3] * state.action_gain[:, None] + noise).clamp(-cfg.max_speed, cfg.max_speed)
    return executed, v_cmd


def move_toward(pos: Tensor, vel: Tensor, v_cmd: Tensor, cfg: SimConfig) -> Tensor:
    """One control step of a point at ``pos`` (B,3, m) moving at ``vel`` (B,3, m/s) towards the commanded
    velocity ``v_cmd``: the velocity change is limited to ``cfg.max_accel * dt`` per axis and the new
    position is clamped to the workspace box. Returns the new position B,3 (both backends use it: the
    torch simulator for the fingertips, pybullet for the fingertip target the arm tracks)."""
    dt = cfg.dt
    dv = (v_cmd - vel).clamp(-cfg.max_accel * dt, cfg.max_accel * dt)
    new = pos + (vel + dv) * dt
    lo = torch.tensor([-cfg.workspace, -cfg.workspace, 0.0], device=pos.device)
    hi = torch.tensor([cfg.workspace, cfg.workspace, cfg.max_height], device=pos.device)
    return torch.maximum(torch.minimum(new, hi), lo)


def step(state: State, action: Tensor, cfg: SimConfig) -> State:
    """Advance every scene by one control step. Pure: returns a new State, ``state`` is not modified.

    Action noise and slip are drawn per episode from ``state.key`` and ``state.steps`` (:mod:`graspsim.rng`),
    so a scene evolves the same whatever other scenes share the batch.
    """
    B = state.batch_size
    action = validate_action(action, B).to(state.device)
    dt = cfg.dt
    dev = state.device

    executed, v_cmd = command(state, action, cfg)
    tcp = move_toward(state.tcp_pos, state.tcp_vel, v_cmd, cfg)
    vel = (tcp - state.tcp_pos) / dt

    close = executed[:, 3] > 0
    target_w = torch.where(close, torch.zeros_like(state.finger_width), torch.full_like(state.finger_width, cfg.open_width))
    step_w = cfg.finger_speed * dt
    width = state.finger_width + (target_w - state.finger_width).clamp(-step_w, step_w)

    r = state.sphere_radius
    sphere = state.sphere_pos.clone()
    held = state.held.clone()
    dropped = state.dropped.clone()
    missed = state.missed.clone()
    pushed = state.pushed.clone()

    # --- free sphere: drift (moving-target mode), bouncing off the workspace edge
    free = ~held
    sphere_vel = state.sphere_vel
    drifted = sphere[:, :2] + sphere_vel * dt
    out = drifted.abs() > (cfg.workspace - 0.02)
    sphere_vel = torch.where(out & free[:, None], -sphere_vel, sphere_vel)
    sphere[:, :2] = torch.where(free[:, None], drifted.clamp(-cfg.workspace + 0.02, cfg.workspace - 0.02), sphere[:, :2])

    # --- grasp window and capture
    rel = sphere - tcp
    in_window = (
        free
        & (rel[:, 0].abs() <= cfg.pad_width / 2)
        & (rel[:, 2] >= 0.2 * r)
        & (rel[:, 2] <= cfg.finger_length - r)
        & (rel[:, 1].abs() < state.finger_width / 2)
    )
    closing = width < state.finger_width
    capture = in_window & closing & (width <= 2 * r)
    # closing but not yet tight: the pads herd the sphere towards the centre
    herd_lim = (width / 2 - r).clamp_min(0.0)
    herded_y = tcp[:, 1] + rel[:, 1].clamp(-1.0, 1.0).clamp(min=-herd_lim).clamp(max=herd_lim)
    sphere[:, 1] = torch.where(in_window & closing & ~capture, herded_y, sphere[:, 1])
    sphere[:, 1] = torch.where(capture, tcp[:, 1], sphere[:, 1])
    held = held | capture
    held_offset = torch.where(capture[:, None], sphere - tcp, state.held_offset)
    held_offset[:, 1] = torch.where(capture, torch.zeros_like(r), held_offset[:, 1])

    # --- finger contact pushes the free sphere aside
    free = ~held
    centres, halves = finger_boxes(tcp, width, cfg)
    total_push = torch.zeros((B, 2), device=dev)
    for f in range(2):  # two fingers, not a loop over scenes
        p = push_out_of_box(sphere, r, centres[:, f], halves[:, f])
        p = torch.where(free[:, None], p, torch.zeros_like(p))
        sphere[:, :2] = sphere[:, :2] + p
        total_push = total_push + p
    pushed = pushed | (total_push.norm(dim=1) > 1e-5)
    sphere[:, :2] = sphere[:, :2].clamp(-cfg.workspace, cfg.workspace)

    # --- closing to (near) zero without capturing counts as a missed grasp
    just_shut = closing & (width <= 1e-6) & (state.finger_width > 1e-6) & ~held
    missed = missed + just_shut.long()

    # --- held sphere: release on open, random slip, otherwise rigid with the TCP
    opening = ~close & held
    edge = ((held_offset[:, 0].abs() / (cfg.pad_width / 2) - 0.5) / 0.5).clamp(0.0, 1.0)
    slip_draw = rng.uniform(state.key, state.steps, rng.TAG_SLIP, 1)[:, 0]
    slip = held & ~opening & (slip_draw < state.slip_rate * edge * edge)
    release = opening | slip
    dropped = dropped | slip
    held = held & ~release
    carried = tcp + held_offset
    sphere = torch.where((held | release)[:, None], carried, sphere)
    sphere[:, 2] = torch.where(release | ~held, r, sphere[:, 2])  # a free sphere rests on the table
    width = torch.where(held, torch.maximum(width, 2 * r), width)

    steps = state.steps + 1
    lifted = (sphere[:, 2] - r) >= cfg.lift_height
    success = state.success | (held & lifted)
    done = state.done | success | (steps >= cfg.max_steps)

    return state.replace(
        tcp_pos=tcp,
        tcp_vel=vel,
        finger_width=width,
        close_cmd=close,
        prev_action=action,
        sphere_pos=sphere,
        sphere_vel=sphere_vel,
        held=held,
        held_offset=held_offset,
        steps=steps,
        success=success,
        done=done,
        pushed=pushed,
        dropped=dropped,
        missed=missed,
    )


# Failure causes reported at the end of an episode (see ``failure_cause``).
FAILURE_NAMES = ("success", "timeout", "missed_grasp", "pushed_away", "dropped")


def failure_cause(state: State, pushed_away_dist: float = 0.02) -> Tensor:
    """Per-scene outcome code ``B`` int64 indexing ``FAILURE_NAMES``.

    Priority: success, then dropped (a held sphere slipped), pushed away (displaced more than
    ``pushed_away_dist`` from where it rested at reset, excluding drift), missed grasp (closed on
    nothing at least once), else timeout.
    """
    code = torch.full((state.batch_size,), FAILURE_NAMES.index("timeout"), dtype=torch.long, device=state.device)
    moved = (state.sphere_pos[:, :2] - state.start_xy).norm(dim=1) > pushed_away_dist
    still = state.sphere_vel.norm(dim=1) == 0
    code = torch.where(state.missed > 0, torch.full_like(code, FAILURE_NAMES.index("missed_grasp")), code)
    code = torch.where(state.pushed & (moved | ~still), torch.full_like(code, FAILURE_NAMES.index("pushed_away")), code)
    code = torch.where(state.dropped, torch.full_like(code, FAILURE_NAMES.index("dropped")), code)
    code = torch.where(state.success, torch.full_like(code, FAILURE_NAMES.index("success")), code)
    return code
