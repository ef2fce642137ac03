"""Batched kinematics and grasp-contact logic: ``step(state, action, cfg) -> State``.

Action (``B,4`` or ``B,5`` float32): ``(vx, vy, vz)`` commanded fingertip velocity in m/s (world frame),
with 5 columns then ``wz`` the wrist yaw rate in rad/s, and last a gripper command ``g``: ``g > 0`` closes,
``g <= 0`` opens. Executed velocity = command x per-scene gain + Gaussian noise, clipped per axis to
``max_speed`` and rate-limited by ``max_accel``; the yaw rate likewise x gain, clipped to ``max_yaw_rate``,
rate-limited by ``max_yaw_accel``, the angle kept within ``+/- max_wrist_yaw`` (no noise on the yaw). With
``state.latency`` a scene executes the previous step's command (one control step of delay). A 4-D action
means ``wz = 0``; it is refused (ValueError) for a batch holding a cube, whose grasp needs the wrist.

The wrist turns the fingers and the camera: the contact rules below hold in the gripper frame (x along the
pads, y the closing axis), and ``cam_offset`` / ``cam_rot`` turn with the wrist. Where a scene's wrist
angle is exactly 0 every quantity is computed by the same arithmetic as before the wrist existed.

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

Cubes and cylinders follow the same rules with their own shapes: they rest on the table at their half
height, the fingers push them out by their exact footprint (an upright cylinder's disc; a cube's yawed
square, by separating axes), the grasp window asks the fingertips to be below their centre, and the pads
capture them at their width across the pads. An upright cylinder is yaw-free like the sphere. A **cube** is
captured only when the pads close across two opposite faces: its yaw relative to the gripper, folded to
[-45, 45) degrees, must lie within :func:`cube_yaw_tolerance`; the squeeze then turns it flat against the
pads. Closer to its edge, the pads catch two corners, the cube spins past the edge and is squeezed out
along the pads (a missed grasp, like an off-centre sphere). A held target turns with the wrist.

The embodiment (``cfg.body``, :mod:`graspsim.embodiment`) may change three things; the floating preset changes none
of them, so its arithmetic is the one above. A **one-jaw** gripper (the SO-101) has a fixed pad whose face stays at
``fixed_jaw_y`` and a moving pad ``width`` from it: the grasp window is the gap between them, closing herds the target
ahead of the moving pad, and a captured target lies against the fixed pad. A **yaw centre** off the TCP makes the TCP
swing about it when the wrist turns (:func:`yaw_centre_shift`). A **reach band** keeps the TCP radially within the
arm's straight-down reach at its height (:func:`keep_in_reach`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import rng
from .config import SimConfig
from .state import KIND_BOX, KIND_CYLINDER, KIND_NAMES, KIND_SPHERE, State, target_half_height

ACTION_DIM = 4
"""Width of an action without the wrist: (vx, vy, vz, grip)."""
WRIST_ACTION_DIM = 5
"""Width of an action with the wrist: (vx, vy, vz, wz, grip)."""


def validate_action(action: Tensor, batch_size: int, target_kind: Tensor | None = None) -> Tensor:
    """Check an action batch (B,4 or B,5) and return it as float32; raise ValueError with the reason otherwise.

    ``target_kind`` (B int64, ``State.target_kind``): a 4-D action is refused when a scene holds a cube (a cube
    is grasped across two faces, which needs the wrist's yaw rate ``wz``)."""
    if not isinstance(action, torch.Tensor):
        raise ValueError(f"action must be a torch.Tensor of shape ({batch_size}, {ACTION_DIM}); got {type(action).__name__}")
    if action.dim() != 2 or action.shape[0] != batch_size or action.shape[1] not in (ACTION_DIM, WRIST_ACTION_DIM):
        raise ValueError(f"action must have shape ({batch_size}, {ACTION_DIM}) or ({batch_size}, {WRIST_ACTION_DIM}); "
                         f"got {tuple(action.shape)}")
    if not action.dtype.is_floating_point:
        raise ValueError(f"action must be a floating-point tensor; got dtype {action.dtype}")
    finite = torch.isfinite(action).all(dim=1)
    if not bool(finite.all()):
        bad = torch.nonzero(~finite).flatten()[:8].tolist()
        raise ValueError(f"action has NaN or inf entries in scenes {bad}")
    if action.shape[1] == ACTION_DIM and target_kind is not None:
        needs = target_kind.to(action.device) == KIND_BOX
        if bool(needs.any()):
            i = int(torch.nonzero(needs)[0])
            raise ValueError(f"a 4-D action (vx, vy, vz, grip) cannot grasp a {KIND_NAMES[KIND_BOX]} (scene {i}): "
                             f"it needs the wrist; give 5-D actions (vx, vy, vz, wz, grip) with wz in rad/s")
    return action.float()


def split_action(action: Tensor) -> tuple[Tensor, Tensor | None]:
    """(B,4 action without the wrist: vx, vy, vz, grip; B wrist yaw rate wz in rad/s, or None for a 4-D action)."""
    if action.shape[1] == ACTION_DIM:
        return action, None
    return torch.cat([action[:, :3], action[:, 4:5]], 1), action[:, 3]


def finger_boxes(tcp: Tensor, width: Tensor, cfg: SimConfig, yaw: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Finger boxes as (centres ``B,2,3``, half-extents ``B,2,3`` in the gripper frame); finger 0 on the gripper's
    +y side (a one-jaw gripper's fixed jaw, its inner face at ``fixed_jaw_y``; finger 1 the moving jaw, ``width``
    from it). ``yaw`` (B rad, the wrist angle) turns the centres about the TCP; the boxes themselves carry the
    same yaw (the renderer draws them so). Without ``yaw`` the boxes are axis-aligned."""
    one_jaw = cfg.body.one_jaw
    if one_jaw:  # finger 0 the fixed jaw (face at fixed_jaw_y), finger 1 the moving one, ``width`` from it
        face, t2, f2 = cfg.body.fixed_jaw_y, cfg.finger_thickness / 2, cfg.body.fixed_jaw_thickness / 2
        offs = torch.stack([torch.full_like(width, face + f2), face - width - t2], dim=1)  # B,2
    else:
        half_w = width / 2 + cfg.finger_thickness / 2
        offs = torch.stack([half_w, -half_w], dim=1)  # B,2
    centre = tcp[:, None, :].repeat(1, 2, 1)
    if yaw is not None:
        turned = (yaw != 0)[:, None]
        c, s = torch.cos(yaw)[:, None], torch.sin(yaw)[:, None]
        centre[..., 0] = torch.where(turned, centre[..., 0] - s * offs, centre[..., 0])
        centre[..., 1] = centre[..., 1] + torch.where(turned, c * offs, offs)
    else:
        centre[..., 1] = centre[..., 1] + offs
    centre[..., 2] = centre[..., 2] + cfg.finger_length / 2
    if one_jaw:
        half = torch.tensor([[cfg.pad_width / 2, f2, cfg.finger_length / 2],
                             [cfg.pad_width / 2, t2, cfg.finger_length / 2]], dtype=tcp.dtype, device=tcp.device
                            ).expand_as(centre)
        return centre, half
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
    return _push_disc(c, r_eff, touching_z, lo, hi)


def push_disc_out_of_box(c: Tensor, r: Tensor, hz: Tensor, box_c: Tensor, box_h: Tensor) -> Tensor:
    """Horizontal displacement ``B,2`` that moves upright cylinders (centre ``B,3``, radius ``B``, half height
    ``B``) clear of axis-aligned boxes (centre, half-extents ``B,3``); zero where they do not overlap."""
    lo, hi = box_c - box_h, box_c + box_h
    touching_z = (c[:, 2] - hz < hi[:, 2]) & (c[:, 2] + hz > lo[:, 2])
    return _push_disc(c, r, touching_z, lo, hi)


def _push_disc(c: Tensor, r_eff: Tensor, touching_z: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """Shortest horizontal move ``B,2`` of discs (centre ``c`` B,3, radius ``r_eff`` B) out of the footprints
    ``lo``..``hi`` (B,3 corners) where ``touching_z``; zero elsewhere."""
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


def push_square_out_of_box(c: Tensor, a: Tensor, hz: Tensor, yaw: Tensor, box_c: Tensor, box_h: Tensor) -> Tensor:
    """Horizontal displacement ``B,2`` that moves cubes (centre ``c`` B,3, half side ``a`` B, half height ``hz``
    B, yaw ``yaw`` B rad relative to the box axes) clear of axis-aligned boxes (``box_c``, ``box_h`` B,3).

    Separating axes in the table plane (the box's two axes and the cube's two): where every axis shows an
    overlap, the cube moves along the axis of least overlap, away from the box. Zero where they do not touch.
    """
    d = c[:, :2] - box_c[:, :2]
    cu, su = torch.cos(yaw), torch.sin(yaw)
    acu, asu = cu.abs(), su.abs()
    hx, hy = box_h[:, 0], box_h[:, 1]
    du = d[:, 0] * cu + d[:, 1] * su
    dv = -d[:, 0] * su + d[:, 1] * cu
    ext = a * (acu + asu)
    over = torch.stack([hx + ext - d[:, 0].abs(), hy + ext - d[:, 1].abs(),
                        hx * acu + hy * asu + a - du.abs(), hx * asu + hy * acu + a - dv.abs()], 1)  # B,4
    proj = torch.stack([d[:, 0], d[:, 1], du, dv], 1)
    one, zero = torch.ones_like(cu), torch.zeros_like(cu)
    normals = torch.stack([torch.stack([one, zero], -1), torch.stack([zero, one], -1),
                           torch.stack([cu, su], -1), torch.stack([-su, cu], -1)], 1)  # B,4,2
    k = over.argmin(dim=1)
    amount = over.gather(1, k[:, None]).squeeze(1)
    sign = torch.where(proj.gather(1, k[:, None]).squeeze(1) >= 0, one, -one)
    push = normals[torch.arange(c.shape[0], device=c.device), k] * (sign * amount)[:, None]
    touching = (over > 0).all(dim=1) & (c[:, 2] - hz < box_c[:, 2] + box_h[:, 2]) & (c[:, 2] + hz > box_c[:, 2] - box_h[:, 2])
    return torch.where(touching[:, None], push, torch.zeros_like(push))


def cube_yaw_tolerance(half_side: Tensor, cfg: SimConfig) -> Tensor:
    """Largest yaw (rad, B) of a cube relative to the pads, folded to [0, 45] degrees, at which closing the
    pads on it (centred) ends with two opposite faces flat against the pads.

    Derivation (cube half side ``a``, pad half length ``p = pad_width / 2``, pad friction ``mu =
    pad_friction``; yaw ``d`` in [0, pi/4]). The corner of the cube that reaches furthest across the pads sits
    at ``x = a (cos d - sin d)`` along the pad and ``y = a (cos d + sin d)`` across it.

    * If that corner lies beyond the pad's end (``a (cos d - sin d) > p``), the pad's end meets the cube's
      face; the face's normal force acts off the cube's centre and turns the face flat. Held for every such
      ``d``: ``d < acos(p / (sqrt(2) a)) - pi/4`` (only cubes wider than the pad, ``a > p``, get here).
    * Otherwise each pad presses on a corner. The pad's normal force ``f`` turns the cube towards the nearer
      face pair with lever arm ``x``; friction ``mu f`` on the sliding corner resists with arm ``y``. The
      cube turns flat while ``x > mu y``, i.e. ``tan d < (1 - mu) / (1 + mu)``: ``d < pi/4 - atan(mu)``.
      Beyond it the corners jam, and the pads spin the cube over its edge and squeeze it out.

    So the tolerance is ``max(pi/4 - atan(mu), acos(min(1, p / (sqrt(2) a))) - pi/4)``: with the defaults
    (``mu`` = 0.5, ``p`` = 9 mm) 18.4 degrees for cubes up to 25.4 mm, growing to 19.9 degrees at 30 mm.
    """
    p = cfg.pad_width / 2
    friction = math.pi / 4 - math.atan(cfg.pad_friction)
    face = torch.acos((p / (math.sqrt(2.0) * half_side.clamp_min(1e-9))).clamp(max=1.0)) - math.pi / 4
    return face.clamp_min(friction)


def fold_quarter_turn(yaw: Tensor) -> Tensor:
    """Angles (rad) folded into [-pi/4, pi/4): a cube looks the same every quarter turn."""
    q = math.pi / 2
    return torch.remainder(yaw + q / 2, q) - q / 2


def rotate_xy(v: Tensor, c: Tensor, s: Tensor) -> Tensor:
    """``v`` (B,2 or B,3) with its x, y turned by the angle whose cos, sin are ``c``, ``s`` (B); z kept. The one
    wrist rotation: the simulator, the expert and the wrist control net (world <-> gripper frame, ``s`` negated for
    the inverse turn) all call it; the numpy runtime mirrors it in ``graspsim.robot.controller.action_from_raw``."""
    x = c * v[:, 0] - s * v[:, 1]
    y = s * v[:, 0] + c * v[:, 1]
    return torch.cat([torch.stack([x, y], 1), v[:, 2:]], 1)


def _where(mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """Per scene (``mask`` B bool) ``a`` else ``b`` for B,k tensors."""
    return torch.where(mask[:, None], a, b)


def wrist_command(state: State, wz: Tensor, cfg: SimConfig) -> tuple[Tensor, Tensor]:
    """The wrist's action model shared by both backends: (new wrist angle B rad, executed yaw rate B rad/s) for
    the commanded yaw rate ``wz`` (B rad/s). Latency as for the velocities (``state.prev_wz`` where
    ``state.latency``), times the scene's action gain, clipped to ``max_yaw_rate``, rate-limited by
    ``max_yaw_accel``; the angle stays within ``+/- max_wrist_yaw``."""
    dt = cfg.dt
    w = torch.where(state.latency, state.prev_wz, wz)
    w = (w * state.action_gain).clamp(-cfg.max_yaw_rate, cfg.max_yaw_rate)
    dw = (w - state.wrist_rate).clamp(-cfg.max_yaw_accel * dt, cfg.max_yaw_accel * dt)
    yaw = (state.wrist_yaw + (state.wrist_rate + dw) * dt).clamp(-cfg.max_wrist_yaw, cfg.max_wrist_yaw)
    return yaw, (yaw - state.wrist_yaw) / dt


def yaw_centre_shift(yaw_before: Tensor, yaw_after: Tensor, cfg: SimConfig) -> Tensor:
    """B,3 move of the TCP (m, world) when the wrist turns from ``yaw_before`` to ``yaw_after`` (B rad) about the
    embodiment's yaw centre (:attr:`graspsim.embodiment.Embodiment.yaw_centre`, gripper frame): the centre stays,
    the TCP swings about it."""
    c = torch.tensor([*cfg.body.yaw_centre, 0.0], dtype=yaw_before.dtype, device=yaw_before.device).expand(
        yaw_before.shape[0], 3)
    return (rotate_xy(c, torch.cos(yaw_before), torch.sin(yaw_before))
            - rotate_xy(c, torch.cos(yaw_after), torch.sin(yaw_after)))


def rotation_z(angle: Tensor) -> Tensor:
    """B,3,3 rotations about z by ``angle`` (B rad)."""
    c, s = torch.cos(angle), torch.sin(angle)
    zero, one = torch.zeros_like(c), torch.ones_like(c)
    return torch.stack([c, -s, zero, s, c, zero, zero, zero, one], -1).view(-1, 3, 3)


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
    return keep_in_reach(new, cfg)


def keep_in_reach(pos: Tensor, cfg: SimConfig) -> Tensor:
    """``pos`` (B,3 TCP positions, m) clamped to the workspace box and, for an embodiment with a reach band
    (:attr:`graspsim.embodiment.Embodiment.reach`), moved radially into the band at its height."""
    lo = torch.tensor([-cfg.workspace, -cfg.workspace, 0.0], device=pos.device)
    hi = torch.tensor([cfg.workspace, cfg.workspace, cfg.max_height], device=pos.device)
    pos = torch.maximum(torch.minimum(pos, hi), lo)
    body = cfg.body
    if not body.reach:
        return pos
    rows = torch.tensor(body.reach, dtype=pos.dtype, device=pos.device)  # R,3: height, least, greatest radius
    h = pos[:, 2].clamp(float(rows[0, 0]), float(rows[-1, 0]))
    if rows.shape[0] == 1:
        r_lo, r_hi = rows[0, 1].expand_as(h), rows[0, 2].expand_as(h)
    else:
        j = torch.searchsorted(rows[:, 0].contiguous(), h).clamp(1, rows.shape[0] - 1)
        a, b = rows[j - 1], rows[j]
        t = ((h - a[:, 0]) / (b[:, 0] - a[:, 0])).clamp(0.0, 1.0)
        r_lo, r_hi = torch.lerp(a[:, 1], b[:, 1], t), torch.lerp(a[:, 2], b[:, 2], t)
    base = torch.tensor(body.base_xy, dtype=pos.dtype, device=pos.device)
    d = pos[:, :2] - base
    r = d.norm(dim=1)
    scale = torch.minimum(torch.maximum(r, r_lo), r_hi) / r.clamp_min(1e-9)
    return torch.cat([base + d * scale[:, None], pos[:, 2:]], 1)


def step(state: State, action: Tensor, cfg: SimConfig) -> State:
    """Advance every scene by one control step. Pure: returns a new State, ``state`` is not modified.

    ``action`` is B,4 ``(vx, vy, vz, grip)`` or B,5 ``(vx, vy, vz, wz, grip)`` (see the module docstring).
    Action noise and slip are drawn per episode from ``state.key`` and ``state.steps`` (:mod:`graspsim.rng`),
    so a scene evolves the same whatever other scenes share the batch.
    """
    B = state.batch_size
    action = validate_action(action, B, state.target_kind).to(state.device)
    action, wz = split_action(action)
    if wz is None and bool((state.wrist_rate != 0).any()):  # 4-D means wz = 0: a turning wrist slows down
        wz = torch.zeros_like(action[:, 0])
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
    hz = target_half_height(state)
    kind = state.target_kind
    sphere = state.sphere_pos.clone()
    held = state.held.clone()
    dropped = state.dropped.clone()
    missed = state.missed.clone()
    pushed = state.pushed.clone()
    held_offset = state.held_offset
    target_yaw = state.target_yaw

    # --- the wrist: turns the camera mount, the fingers and a held target
    yaw, rate, prev_wz = state.wrist_yaw, state.wrist_rate, state.prev_wz
    cam_offset, cam_rot = state.cam_offset, state.cam_rot
    if wz is not None:
        yaw, rate = wrist_command(state, wz, cfg)
        prev_wz = wz
        dpsi = yaw - state.wrist_yaw
        moved = dpsi != 0
        cd, sd = torch.cos(dpsi), torch.sin(dpsi)
        cam_offset = _where(moved, rotate_xy(cam_offset, cd, sd), cam_offset)
        cam_rot = torch.where(moved[:, None, None], rotation_z(dpsi) @ cam_rot, cam_rot)
        carry = moved & held
        held_offset = _where(carry, rotate_xy(held_offset, cd, sd), held_offset)
        target_yaw = torch.where(carry, target_yaw + dpsi, target_yaw)
        if cfg.body.yaw_centre != (0.0, 0.0):  # the wrist turns about its own axis, off the TCP: the TCP swings
            tcp = keep_in_reach(tcp + yaw_centre_shift(state.wrist_yaw, yaw, cfg), cfg)
    turned = yaw != 0
    cw, sw = torch.cos(yaw), torch.sin(yaw)

    def to_grip(v: Tensor) -> Tensor:  # world vector/position -> gripper axes (about the world origin)
        return _where(turned, rotate_xy(v, cw, -sw), v)

    def to_world(v: Tensor) -> Tensor:
        return _where(turned, rotate_xy(v, cw, sw), v)

    # --- free sphere: drift (moving-target mode), bouncing off the workspace edge
    free = ~held
    sphere_vel = state.sphere_vel
    drifted = sphere[:, :2] + sphere_vel * dt
    out = drifted.abs() > (cfg.workspace - 0.02)
    sphere_vel = torch.where(out & free[:, None], -sphere_vel, sphere_vel)
    sphere[:, :2] = torch.where(free[:, None], drifted.clamp(-cfg.workspace + 0.02, cfg.workspace - 0.02), sphere[:, :2])

    # --- grasp window and capture (gripper frame)
    is_cube = kind == KIND_BOX
    rel = to_grip(sphere - tcp)
    delta = fold_quarter_turn(target_yaw - yaw)  # a cube's yaw relative to the pads
    across = torch.where(is_cube, r * (torch.cos(delta) + torch.sin(delta).abs()), r)  # half-width across the pads
    in_window = free & grasp_window(rel, r, hz, kind, state.finger_width, cfg)
    closing = width < state.finger_width
    tight = in_window & closing & (width <= 2 * across)
    flat_ok = ~is_cube | (delta.abs() <= cube_yaw_tolerance(r, cfg))
    capture = tight & flat_ok
    one_jaw = cfg.body.one_jaw
    squeezed_out = tight & ~flat_ok  # a cube caught on two corners
    limits = cfg.body.cylinder_capture_x
    if one_jaw and limits is not None:  # a cylinder met by the moving pad's end spins out along the pads
        off_pad = tight & (kind == KIND_CYLINDER) & ((rel[:, 0] < limits[0]) | (rel[:, 0] > limits[1]))
        capture = capture & ~off_pad
        squeezed_out = squeezed_out | off_pad
    herd = in_window & closing & ~capture
    if one_jaw:  # the moving pad sweeps the target towards the fixed pad; captured, it lies against the fixed pad
        face = cfg.body.fixed_jaw_y
        herd_y = torch.minimum(torch.maximum(rel[:, 1], face - width + across), face - across)
        new_y = torch.where(capture, face - across, torch.where(herd, herd_y, rel[:, 1]))
    else:  # closing but not yet tight: the pads herd the target towards the centre
        herd_lim = (width / 2 - across).clamp_min(0.0)
        herd_y = rel[:, 1].clamp(-1.0, 1.0).clamp(min=-herd_lim).clamp(max=herd_lim)
        new_y = torch.where(capture, torch.zeros_like(r), torch.where(herd, herd_y, rel[:, 1]))
    moved_y = herd | capture
    plain_y = torch.where(moved_y, tcp[:, 1] + new_y, sphere[:, 1])
    turned_xy = tcp[:, :2] + rotate_xy(torch.stack([rel[:, 0], new_y], 1), cw, sw)
    sphere[:, :2] = torch.where((moved_y & turned)[:, None], turned_xy, sphere[:, :2])
    sphere[:, 1] = torch.where(turned, sphere[:, 1], plain_y)
    # a cube caught on two corners spins over its edge and is squeezed out along the pads (so is a one-jaw
    # gripper's cylinder caught by the pad's end)
    if bool(squeezed_out.any()):
        edge_on = tight & ~flat_ok
        sgn = torch.where(rel[:, 0] >= 0, torch.ones_like(r), -torch.ones_like(r))
        out_x = sgn * (cfg.pad_width / 2 + across + 1e-3)
        ejected = tcp[:, :2] + rotate_xy(torch.stack([out_x, rel[:, 1]], 1), cw, sw)
        sphere[:, :2] = torch.where(squeezed_out[:, None], ejected, sphere[:, :2])
        spin = torch.where(delta >= 0, torch.ones_like(r), -torch.ones_like(r)) * (math.pi / 2) - 2 * delta
        target_yaw = torch.where(edge_on, target_yaw + spin, target_yaw)
        pushed = pushed | squeezed_out
    held = held | capture
    if one_jaw:  # held where the pads squeeze it, in the gripper frame turned to the world
        grip_offset = torch.stack([rel[:, 0], new_y, rel[:, 2]], 1)
        held_offset = _where(capture, _where(turned, rotate_xy(grip_offset, cw, sw), grip_offset), held_offset)
    else:
        plain_offset = sphere - tcp
        plain_offset[:, 1] = torch.where(capture, torch.zeros_like(r), plain_offset[:, 1])
        turned_offset = torch.stack([cw * rel[:, 0], sw * rel[:, 0], rel[:, 2]], 1)
        held_offset = _where(capture, _where(turned, turned_offset, plain_offset), held_offset)
    target_yaw = torch.where(capture & is_cube, target_yaw - delta, target_yaw)  # squeezed flat against the pads

    # --- finger contact pushes the free target aside (gripper frame: the finger boxes are axis-aligned there)
    free = ~held
    centres, halves = finger_boxes(to_grip(tcp), width, cfg)
    has_cyl, has_cube = bool((kind == KIND_CYLINDER).any()), bool(is_cube.any())
    total_push = torch.zeros((B, 2), device=dev)
    for f in range(2):  # two fingers, not a loop over scenes
        c_g = to_grip(sphere)
        p = push_out_of_box(c_g, r, centres[:, f], halves[:, f])
        if has_cyl:
            p = _where(kind == KIND_CYLINDER, push_disc_out_of_box(c_g, r, hz, centres[:, f], halves[:, f]), p)
        if has_cube:
            p = _where(is_cube, push_square_out_of_box(c_g, r, hz, target_yaw - yaw, centres[:, f], halves[:, f]), p)
        p = torch.where(free[:, None], p, torch.zeros_like(p))
        p = to_world(p)
        sphere[:, :2] = sphere[:, :2] + p
        total_push = total_push + p
    pushed = pushed | (total_push.norm(dim=1) > 1e-5)
    sphere[:, :2] = sphere[:, :2].clamp(-cfg.workspace, cfg.workspace)

    # --- closing to (near) zero without capturing counts as a missed grasp
    just_shut = closing & (width <= 1e-6) & (state.finger_width > 1e-6) & ~held
    missed = missed + just_shut.long()

    # --- held target: release on open, random slip, otherwise rigid with the TCP
    opening = ~close & held
    along = torch.where(turned, cw * held_offset[:, 0] + sw * held_offset[:, 1], held_offset[:, 0])  # along the pads
    edge = ((along.abs() / (cfg.pad_width / 2) - 0.5) / 0.5).clamp(0.0, 1.0)
    slip_draw = rng.uniform(state.key, state.steps, rng.TAG_SLIP, 1)[:, 0]
    slip = held & ~opening & (slip_draw < state.slip_rate * edge * edge)
    release = opening | slip
    dropped = dropped | slip
    held = held & ~release
    carried = tcp + held_offset
    sphere = torch.where((held | release)[:, None], carried, sphere)
    sphere[:, 2] = torch.where(release | ~held, hz, sphere[:, 2])  # a free target rests on the table
    width = torch.where(held, torch.maximum(width, 2 * r), width)

    steps = state.steps + 1
    lifted = (sphere[:, 2] - hz) >= cfg.lift_height
    success = state.success | (held & lifted)
    done = state.done | success | (steps >= cfg.max_steps)

    return state.replace(
        tcp_pos=tcp,
        tcp_vel=vel,
        finger_width=width,
        close_cmd=close,
        prev_action=action,
        wrist_yaw=yaw,
        wrist_rate=rate,
        prev_wz=prev_wz,
        cam_offset=cam_offset,
        cam_rot=cam_rot,
        sphere_pos=sphere,
        sphere_vel=sphere_vel,
        target_yaw=target_yaw,
        held=held,
        held_offset=held_offset,
        steps=steps,
        success=success,
        done=done,
        pushed=pushed,
        dropped=dropped,
        missed=missed,
    )


def grasp_window(rel: Tensor, r: Tensor, hz: Tensor, kind: Tensor, width: Tensor, cfg: SimConfig,
                 margin: float = 0.0) -> Tensor:
    """B bool: the target centre, ``rel`` (B,3 m) from the TCP in the gripper frame, lies where closing pads
    of gap ``width`` (B m) catch it: along the pads within their half length (less ``margin``), across them
    inside the gap, and in height above the fingertips by a fifth of its half height (``hz``, B m) and, for a
    sphere, below the finger top by its radius ``r`` (B m). A one-jaw gripper's gap runs from its fixed pad's face
    (``Embodiment.fixed_jaw_y``) to ``width`` below it."""
    top = torch.where(kind == KIND_SPHERE, cfg.finger_length - r, cfg.finger_length - 0.2 * hz)
    if cfg.body.one_jaw:  # between the fixed pad's face and the moving pad's, ``width`` from it
        face = cfg.body.fixed_jaw_y
        across_ok = (rel[:, 1] < face) & (rel[:, 1] > face - width)
    else:
        across_ok = rel[:, 1].abs() < width / 2
    return (
        (rel[:, 0].abs() <= cfg.pad_width / 2 - margin)
        & (rel[:, 2] >= 0.2 * hz)
        & (rel[:, 2] <= top)
        & across_ok
    )


# Failure causes reported at the end of an episode (see ``failure_cause``). ``diverged`` is the MuJoCo backend's
# alone: its physics blew up and MuJoCo reset the scene, so the episode ends there as a failure of the simulation.
FAILURE_NAMES = ("success", "timeout", "missed_grasp", "pushed_away", "dropped", "diverged")


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
