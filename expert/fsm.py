"""Batched finite-state-machine expert that reads privileged state (true poses).

Phases (``PHASES``), decided per scene from the current true state every step, so the expert labels
correctly from *any* state a learner may have driven the scene into (DAgger needs this):

* ``RESET``    - the gripper is closed (or closing) on nothing: open, and rise if low, so the fingers
                 clear the sphere before the next approach. This is also the recovery path after a
                 missed or slipped grasp.
* ``APPROACH`` - open gripper: servo the fingertip centre over the sphere (with feed-forward of the
                 sphere's drift), descending inside a cone around the sphere so the fingers never sweep
                 into it sideways, down to table contact (a guarded move); rise only if low with the
                 sphere near a finger's footprint (not inside the open gap).
* ``GRASP``    - fingers open, touching the table (the gripper's contact sense, ``SimConfig.contact_height``)
                 and centred within ``CLOSE_TOL`` of the sphere (or already closing with the sphere between
                 the pads): close, hold position (tracking drift).
* ``LIFT``     - the sphere is held: keep closed and go up.

A one-jaw gripper (``SimConfig.body.one_jaw``, the SO-101) has a fixed jaw and a moving jaw: the expert servos the
TCP to where the target lies ``FIXED_JAW_GAP`` from the fixed pad's face (instead of centred between the pads) and
closes the moving jaw, which pushes the target against the fixed one; the rest of the machine is the same.

Cubes and cylinders (``SimConfig.target.kinds`` beyond spheres, ``cfg.wrist``): the action gains the wrist's
yaw rate, ``(vx, vy, vz, wz, grip)``. For a cube the expert turns the wrist during the approach to the
nearest face pair (a cube repeats every quarter turn, so the turn is the target's yaw relative to the pads
folded to [-45, 45) degrees, the smallest rotation), waits near the table until that is within
``YAW_TOL``, and closes only then; spheres and cylinders are yaw-free (wz = 0). The geometry (clearance
of the open fingers, footprint, height) uses the target's width across the pads and its height, all in
the gripper frame. Without the wrist the actions are the 4-D ones of the sphere-only expert, unchanged.

The grasp trigger uses only what a mask-driven learner can also perceive: contact is in
``obs["gripper"]``, and the centring tolerance is loose enough (a few millimetres, well inside the pads'
capture window) that the learner's view of it (the target blob near the image centre) suffices.

All arithmetic is on ``B``-sized tensors; nothing loops over scenes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from graspsim import rng
from graspsim.config import SimConfig
from graspsim.env import table_contact
from graspsim.physics import fold_quarter_turn, grasp_window, rotate_xy
from graspsim.state import KIND_BOX, KIND_SPHERE
from graspsim.validate import finite_non_negative

PHASES = ("RESET", "APPROACH", "GRASP", "LIFT")
RESET, APPROACH, GRASP, LIFT = range(4)
CLOSE_TOL = (0.004, 0.006)
"""Largest |x|, |y| offset (m) of the sphere from the fingertip centre at which the expert closes. Along x
the pads are ``pad_width`` = 18 mm long (slip grows only beyond 4.5 mm); along y the open fingers herd it."""
CONE_INNER = (0.004, 0.15)
"""Full descent speed while the horizontal distance to the sphere is within ``a + b * height`` (m)."""
CONE_OUTER = (0.010, 0.30)
"""No descent beyond ``a + b * height`` (m) (linear fade in between)."""
GAP_MARGIN = 0.002
"""Clearance (m) kept between the sphere and a finger's inner face when descending near the table."""
DESCEND_TO = -0.004
"""Height (m) the descent aims at: just below the table, so the fingertips reach contact instead of
creeping towards it."""
YAW_TOL = 0.05
"""Largest yaw (rad) of a cube relative to the pads at which the expert descends the last centimetres and
closes; far inside the physics' tolerance (about 0.32 rad, :func:`graspsim.physics.cube_yaw_tolerance`)."""
FIXED_JAW_GAP = 0.004
"""One-jaw gripper: the target's side is aimed this far (m) from the fixed pad's face while descending; closing, the
moving pad then pushes it against the fixed one."""
YAW_GAIN = 0.5
"""Fraction of the remaining wrist turn commanded per control step (as the xy servo does with position)."""


def expert_phase_and_action(priv: dict[str, Tensor], cfg: SimConfig) -> tuple[Tensor, Tensor]:
    """Expert decision for every scene.

    ``priv``: the privileged dict of :func:`graspsim.privileged` (tcp_pos B,3; sphere_pos B,3;
    sphere_radius B; sphere_vel B,2; finger_width B; held B; close_cmd B; with the wrist also target_kind B,
    target_half B,3, target_yaw B and wrist_yaw B; missing ones mean a sphere and an unturned wrist).
    Returns ``(phase B int64, action B,cfg.action_dim float32)`` with action = (vx, vy, vz) m/s, with the wrist
    wz rad/s, and grip (+1 close, -1 open).
    """
    tcp, sph = priv["tcp_pos"], priv["sphere_pos"]
    r, width = priv["sphere_radius"], priv["finger_width"]
    held, close_cmd = priv["held"].bool(), priv["close_cmd"].bool()
    drift = priv.get("sphere_vel", torch.zeros_like(sph[:, :2]))
    vmax, dt = cfg.max_speed, cfg.dt
    B, dev = tcp.shape[0], tcp.device
    kind = priv.get("target_kind", torch.full((B,), KIND_SPHERE, dtype=torch.long, device=dev))
    hz = priv["target_half"][:, 2] if "target_half" in priv else r
    wrist = priv.get("wrist_yaw", torch.zeros_like(r))
    turned = wrist != 0
    cw, sw = torch.cos(wrist), torch.sin(wrist)

    def to_grip(v: Tensor) -> Tensor:  # B,2 or B,3 world vector -> gripper axes (unchanged where not turned)
        return torch.where(turned[:, None], rotate_xy(v, cw, -sw), v)

    # a cube: the turn to the nearest face pair, and its width across the pads at the present yaw
    is_cube = kind == KIND_BOX
    yaw_err = torch.where(is_cube, fold_quarter_turn(priv.get("target_yaw", torch.zeros_like(r)) - wrist),
                          torch.zeros_like(r))
    aligned = yaw_err.abs() <= YAW_TOL
    across = torch.where(is_cube, r * (torch.cos(yaw_err) + torch.sin(yaw_err).abs()), r)

    # aim one step ahead of a drifting sphere
    aim_xy = sph[:, :2] + drift * dt
    one_jaw = cfg.body.one_jaw
    if one_jaw:  # the TCP goes where the target lies FIXED_JAW_GAP from the fixed pad's face (gripper y)
        face = cfg.body.fixed_jaw_y
        y_aim = face - across - FIXED_JAW_GAP
        off = torch.stack([torch.zeros_like(y_aim), y_aim], 1)
        e_xy = aim_xy - torch.where(turned[:, None], rotate_xy(off, cw, sw), off) - tcp[:, :2]
    else:
        e_xy = aim_xy - tcp[:, :2]
    dist_xy = e_xy.norm(dim=1)
    e_g = to_grip(e_xy)  # the same error along the pads (x) and across them (y)
    h = tcp[:, 2]
    rel = to_grip(sph - tcp)
    contact = table_contact(tcp, cfg)

    # xy servo: close half the error per step, plus drift feed-forward
    v_xy = (0.5 * e_xy / dt + drift).clamp(-vmax, vmax)
    # Descent speed fades smoothly from full (inside an inner cone around the sphere) to none (outside an
    # outer cone), so a learner that sees the misalignment only to a pixel or two gets consistent labels.
    hc = h.clamp_min(0.0)
    inner, outer = CONE_INNER[0] + CONE_INNER[1] * hc, CONE_OUTER[0] + CONE_OUTER[1] * hc
    ramp = ((outer - dist_xy) / (outer - inner)).clamp(0.0, 1.0)
    centred = (e_g[:, 0].abs() <= CLOSE_TOL[0]) & (e_g[:, 1].abs() <= CLOSE_TOL[1])
    low = h < (2 * hz + 0.012)
    fully_open = width >= 0.95 * cfg.open_width
    vz_descend = (0.5 * (DESCEND_TO - h) / dt).clamp(-vmax, 0.0) * ramp
    # near the table, wait for the fingers to be fully open (and a cube's faces to be turned) before going lower
    wait = ~fully_open | ~aligned
    vz_descend = torch.where(wait & low, torch.zeros_like(vz_descend), vz_descend)
    # rise only where a finger could come down on the sphere: low, and the sphere not inside the open gap
    # (the footprint grown by one step of travel, so a finger cannot sweep into the sphere sideways)
    reach = cfg.pad_width / 2 + across + GAP_MARGIN + vmax * dt
    if one_jaw:  # the gap runs from the fixed pad's face down to the moving pad's, ``width`` from it
        y_t = e_g[:, 1] + y_aim  # the target across the pads, from the TCP
        outside_gap = (y_t + across + GAP_MARGIN > face) | (y_t - across - GAP_MARGIN < face - width)
    else:
        gap_half = width / 2 - across - GAP_MARGIN
        outside_gap = e_g[:, 1].abs() > gap_half
    under_finger = low & outside_gap & (e_g[:, 0].abs() < reach)
    vz = torch.where(under_finger, torch.full_like(h, 0.5 * vmax), vz_descend)

    ready = fully_open & contact & centred & aligned
    closing_on_target = close_cmd & ~held & grasp_window(rel, r, hz, kind, width, cfg) & (width > 2 * across - 1e-6)
    closed_on_nothing = close_cmd & ~held & ~closing_on_target

    phase = torch.full((B,), APPROACH, dtype=torch.long, device=dev)
    phase = torch.where(ready | closing_on_target, torch.full_like(phase, GRASP), phase)
    phase = torch.where(closed_on_nothing, torch.full_like(phase, RESET), phase)
    phase = torch.where(held, torch.full_like(phase, LIFT), phase)

    zero = torch.zeros_like(h)
    up = torch.full_like(h, vmax)
    action = torch.zeros((B, 4), device=dev)
    # APPROACH
    action[:, 0:2] = v_xy
    action[:, 2] = vz
    action[:, 3] = -1.0
    # GRASP: close, track drift only
    g = phase == GRASP
    action[:, 0:2] = torch.where(g[:, None], drift.clamp(-vmax, vmax), action[:, 0:2])
    action[:, 2] = torch.where(g, zero, action[:, 2])
    action[:, 3] = torch.where(g, torch.ones_like(h), action[:, 3])
    # RESET: open and rise
    rs = phase == RESET
    action[:, 0:2] = torch.where(rs[:, None], torch.zeros_like(v_xy), action[:, 0:2])
    action[:, 2] = torch.where(rs, 0.5 * up, action[:, 2])
    action[:, 3] = torch.where(rs, -torch.ones_like(h), action[:, 3])
    # LIFT: closed, straight up
    lf = phase == LIFT
    action[:, 0:2] = torch.where(lf[:, None], torch.zeros_like(v_xy), action[:, 0:2])
    action[:, 2] = torch.where(lf, up, action[:, 2])
    action[:, 3] = torch.where(lf, torch.ones_like(h), action[:, 3])
    if not cfg.wrist:
        return phase, action
    # the wrist: turn to the nearest face pair while approaching or recovering; hold still while the pads close
    # and while lifting (the cube then turns with the wrist)
    wz = (YAW_GAIN * yaw_err / dt).clamp(-cfg.max_yaw_rate, cfg.max_yaw_rate)
    wz = torch.where(g | lf, zero, wz)
    return phase, torch.cat([action[:, :3], wz[:, None], action[:, 3:]], 1)


def expert_action(priv: dict[str, Tensor], cfg: SimConfig) -> Tensor:
    """The expert's action ``B,cfg.action_dim`` for the given privileged state (see ``expert_phase_and_action``)."""
    return expert_phase_and_action(priv, cfg)[1]


def exploration_noise(action: Tensor, key: Tensor, steps: Tensor, std: float, max_speed: float,
                      scale: Tensor | None = None) -> Tensor:
    """The one exploration-noise rule for expert-driven steps: ``action`` (``B,A``) with each episode's own Gaussian
    velocity noise added to its first three components (vx, vy, vz, m/s) and clipped to ``max_speed``; a new tensor.

    The draw is the episode's, from its privileged ``key`` (``B``) and ``steps`` (``B``) under
    :data:`graspsim.rng.TAG_EXPERT_NOISE`, so it does not depend on the batch. Its std is ``std`` (m/s) times the
    per-scene ``scale`` (``B`` in [0, 1]; None = 1). Two callers choose the scale: :meth:`FSMExpert.perturb`
    (``collect --noise``) tapers it to zero near the target and during grasp, lift and recovery; the DAgger rollout
    (``dagger --expert-noise``) leaves it at 1 in every phase. A taper in DAgger's rollouts too would change the
    default pipeline's results (its iteration-0 data and loss, measured 2026-11-25), so that choice is kept."""
    noise = rng.normal(key, steps, rng.TAG_EXPERT_NOISE, 3).to(action.device)
    noise = noise * std if scale is None else noise * (std * scale)[:, None]
    out = action.clone()
    out[:, :3] = (out[:, :3] + noise).clamp(-max_speed, max_speed)
    return out


class FSMExpert:
    """Batched expert with a per-scene phase tensor and optional exploration noise.

    ``act(priv)`` returns the clean expert label ``B,cfg.action_dim`` (store this as the training label);
    ``perturb(action)`` adds Gaussian velocity noise for diverse demonstrations: std ``noise_std`` (m/s)
    while approaching high above the sphere, tapering linearly to zero when the fingertips are within
    ``NOISE_TAPER`` (m) of it, and none while grasping, lifting or recovering, so the noise diversifies
    the visited states without breaking the final alignment. The noise is each episode's own, drawn from
    the privileged ``key`` and ``steps`` of the last ``act`` (:mod:`graspsim.rng`).
    """

    NOISE_TAPER = 0.06

    def __init__(self, cfg: SimConfig | None = None, num_envs: int = 1, device: str | torch.device = "cpu",
                 noise_std: float = 0.0):
        finite_non_negative("", "noise_std", noise_std)
        self.cfg = cfg or SimConfig()
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.noise_std = float(noise_std)
        self.phase = torch.full((num_envs,), RESET, dtype=torch.long, device=self.device)
        self._noise_scale = torch.zeros((num_envs,), device=self.device)
        self._key: tuple[Tensor, Tensor] | None = None  # (key, steps) of the last act: the noise's source

    def act(self, priv: dict[str, Tensor]) -> Tensor:
        self.phase, action = expert_phase_and_action(priv, self.cfg)
        gap = (priv["tcp_pos"][:, 2] - priv["sphere_pos"][:, 2]).clamp_min(0.0)
        taper = (gap / self.NOISE_TAPER).clamp(0.0, 1.0)
        self._noise_scale = torch.where(self.phase == APPROACH, taper, torch.zeros_like(taper))
        self._key = (priv["key"], priv["steps"])
        return action

    def perturb(self, action: Tensor) -> Tensor:
        if self.noise_std == 0.0:
            return action
        if self._noise_scale.shape[0] != action.shape[0]:
            raise ValueError(f"perturb: action batch {action.shape[0]} does not match num_envs {self._noise_scale.shape[0]}")
        if self._key is None:
            raise ValueError("perturb: call act(privileged) first (the noise is drawn from its per-episode keys)")
        return exploration_noise(action, self._key[0], self._key[1], self.noise_std, self.cfg.max_speed,
                                 scale=self._noise_scale)
