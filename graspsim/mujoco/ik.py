"""Inverse kinematics for the SO-101 with a straight-down gripper: library code shared by the MuJoCo backend and a
real-arm adapter (it needs only the MJCF's kinematics, no rendering and no physics).

>>> kin = So101Kinematics()                       # loads the model once (about a second)
>>> res = kin.solve(np.array([0.0, 0.0, 0.03]), yaw=0.0, q0=kin.home)   # grasp point 3 cm above the workspace centre
>>> res.ok, res.pos_err, res.rot_err, res.iters   # (True, < 1e-4 m, < 1e-3 rad, a few)
>>> kin.grasp_pose(res.q)                         # back to (position (3,), yaw)
>>> ik = CartesianIK(kin, dt=0.1, max_speed=0.1, max_yaw_rate=1.5, workspace=0.1)
>>> ik.reset(q_measured, jaw)
>>> ik.step(np.array([vx, vy, vz, wz, grip]), q_measured)   # -> JointTargets(q (5,), jaw, clipped)

Frames and units: see :mod:`graspsim.mujoco.model` (world frame = the simulator's, arm base at ``BASE_POS``, pan
axis 0.19 m behind the workspace centre). ``q`` is the five arm joints of :data:`So101Kinematics.ARM_JOINTS` in
radians, zero at the middle of each joint's range (the MJCF's "new calibration"; LeRobot's calibrated degrees are
``degrees(q)``). ``yaw`` (rad) turns the straight-down gripper about the vertical through the grasp point; at 0 the
jaws close along world y (fixed jaw at +y) and the camera is in front of them (+x), as in the simulator's ``so101``
embodiment.

A straight-down gripper fixes the grasp point (3) and the gripper's axis (2; one of them holds by construction since
the three pitch axes are parallel) and the yaw (1): five joints, five independent constraints. :meth:`solve` runs
damped least squares on MuJoCo's Jacobians (``mj_jac``) from a warm start, joints kept within their limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from graspsim.mujoco.model import (
    ARM_JOINTS as _ARM_JOINTS, BASE_POS, DOWN, GRIPPER_BODY, JAW_JOINT, PAN_IN_BASE, arm_model, require_mujoco,
    so101_geometry,
)

_DOWN = DOWN  # the straight-down gripper at yaw 0 (graspsim.mujoco.model.DOWN)

REACH_HEIGHTS = np.arange(0.0, 0.0901, 0.01)
"""Grasp-point heights (m) of the reach band table (:data:`REACH_BAND`)."""


@dataclass
class IKResult:
    """One solve: ``q`` (5,) rad; ``ok`` when the pose is reached within the tolerances (and the joints within their
    limits); ``pos_err`` (m) and ``rot_err`` (rad) left; ``iters`` spent."""

    q: np.ndarray
    ok: bool
    pos_err: float
    rot_err: float
    iters: int


@dataclass
class JointTargets:
    """What :class:`CartesianIK` sends to the arm each control period: ``q`` (5,) arm joint targets (rad), ``jaw``
    the moving jaw's target angle (rad), ``clipped`` True when the Cartesian target was moved into the reachable band
    or the solve failed (then ``q`` is the last good solution)."""

    q: np.ndarray
    jaw: float
    clipped: bool


def _rot_z(yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _cross_sum(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """sum_i cross(A[:, i], B[:, i]) (3,): twice the small-angle rotation taking frame A to frame B."""
    return np.array([
        (A[1] * B[2] - A[2] * B[1]).sum(),
        (A[2] * B[0] - A[0] * B[2]).sum(),
        (A[0] * B[1] - A[1] * B[0]).sum(),
    ])


def _angle_of(R: np.ndarray) -> float:
    return float(math.acos(max(-1.0, min(1.0, (np.trace(R) - 1.0) / 2.0))))


class So101Kinematics:
    """Forward and inverse kinematics of the SO-101's grasp point (see the module docstring).

    ``base_pos``: where the arm's base body stands in the world frame (default :data:`graspsim.mujoco.model.BASE_POS`,
    pan axis 0.19 m behind the origin)."""

    ARM_JOINTS = _ARM_JOINTS
    POS_TOL = 1e-4
    """Solve tolerance on the grasp point (m)."""
    ROT_TOL = 1e-3
    """Solve tolerance on the orientation (rad)."""
    DAMPING = 1e-3
    MAX_ITERS = 100

    def __init__(self, base_pos=BASE_POS, model=None):
        self.mujoco = require_mujoco()
        self.model = model if model is not None else arm_model(base_pos)
        m = self.model
        self.data = self.mujoco.MjData(m)
        self.base_pos = np.asarray(m.body("base").pos, float).copy()
        self.pan_axis = self.base_pos[:2] + np.array([PAN_IN_BASE, 0.0])
        jids = [m.joint(n).id for n in self.ARM_JOINTS]
        self.qadr = np.array([m.jnt_qposadr[j] for j in jids])
        self.dadr = np.array([m.jnt_dofadr[j] for j in jids])
        self.lower = m.jnt_range[jids, 0].copy()
        self.upper = m.jnt_range[jids, 1].copy()
        self.jaw_adr = int(m.jnt_qposadr[m.joint(JAW_JOINT).id])
        self.body = m.body(GRIPPER_BODY).id
        geo = so101_geometry(m)
        self.geometry = geo
        self.grasp_local = np.array(geo.grasp_point)
        table = np.array(geo.jaw_table)
        top = int(np.argmax(table[:, 1])) + 1  # the widest opening: past it the moving pad swings away, not open
        self._jaw_angles, self._jaw_gaps = table[:top, 0], table[:top, 1]
        if np.any(np.diff(self._jaw_gaps) <= 0):
            raise RuntimeError("So101Kinematics: the measured jaw-angle -> gap table does not grow with the angle")
        depth = np.array(geo.jaw_depth)
        self._depth_angles, self._depths = depth[:, 0], depth[:, 1]
        self._jacp = np.zeros((3, m.nv))
        self._jacr = np.zeros((3, m.nv))
        self.home = np.zeros(5)
        res = self.solve(np.array([0.0, 0.0, 0.05]), 0.0, np.array([0.0, 0.0, 0.6, 1.0, -1.4]))
        if not res.ok:
            raise RuntimeError(f"So101Kinematics: no straight-down pose at the workspace centre "
                               f"(pos_err {res.pos_err})")
        self.home = res.q

    # ------------------------------------------------------------------ forward
    def _fk(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d = self.data
        d.qpos[self.qadr] = q
        self.mujoco.mj_kinematics(self.model, d)
        R = d.xmat[self.body].reshape(3, 3).copy()
        return d.xpos[self.body] + R @ self.grasp_local, R

    def grasp_pose(self, q) -> tuple[np.ndarray, float]:
        """Grasp point (3,) m in the world frame and gripper yaw (rad) for the arm joints ``q`` (5,) rad. The yaw is
        the angle about world z of the simulator gripper frame's x axis (the gripper body's y axis, towards the camera),
        from world x (meaningful when the gripper points down)."""
        q = self._check_q(q)
        p, R = self._fk(q)
        return p, float(math.atan2(R[1, 1], R[0, 1]))

    def tilt(self, q) -> float:
        """Angle (rad) between the gripper's roll axis and the vertical for joints ``q``."""
        _, R = self._fk(self._check_q(q))
        return float(math.acos(max(-1.0, min(1.0, R[2, 2]))))

    def _check_q(self, q) -> np.ndarray:
        q = np.asarray(q, dtype=float).reshape(-1)
        if q.shape != (5,) or not np.isfinite(q).all():
            raise ValueError(f"q must be 5 finite joint angles (rad) in the order {self.ARM_JOINTS}; got {q!r}")
        return q

    # ------------------------------------------------------------------ inverse
    def solve(self, pos, yaw: float, q0=None) -> IKResult:
        """Joints (5,) placing the grasp point at ``pos`` (3,) m (world) with the gripper straight down and turned by
        ``yaw`` (rad), by damped least squares from ``q0`` (the last solution; default :attr:`home`). ``ok`` is False
        when the tolerances are not met after ``MAX_ITERS`` (the pose is out of reach or beyond the joint limits)."""
        pos = np.asarray(pos, dtype=float).reshape(-1)
        if pos.shape != (3,) or not np.isfinite(pos).all():
            raise ValueError(f"pos must be 3 finite numbers (m); got {pos!r}")
        if not math.isfinite(float(yaw)):
            raise ValueError(f"yaw must be finite (rad); got {yaw!r}")
        q = self._check_q(self.home if q0 is None else q0).copy()
        q = np.clip(q, self.lower, self.upper)
        Rd = _rot_z(float(yaw)) @ _DOWN
        m, d = self.model, self.data
        lam2 = self.DAMPING ** 2
        pos_err = rot_err = float("inf")
        best, since = float("inf"), 0  # stop early once the error stalls (a target out of reach)
        it = 0
        for it in range(1, self.MAX_ITERS + 1):
            p, R = self._fk(q)
            ep = pos - p
            er = 0.5 * _cross_sum(R, Rd)
            pos_err = float(np.linalg.norm(ep))
            rot_err = _angle_of(R.T @ Rd)
            if pos_err < self.POS_TOL and rot_err < self.ROT_TOL:
                break
            err = pos_err + 0.05 * rot_err
            if err < 0.95 * best:
                best, since = err, 0
            else:
                since += 1
                if since >= 10:
                    break
            self.mujoco.mj_comPos(m, d)
            self.mujoco.mj_jac(m, d, self._jacp, self._jacr, p, self.body)
            J = np.vstack([self._jacp[:, self.dadr], self._jacr[:, self.dadr]])  # 6,5
            e = np.concatenate([ep, er])
            dq = J.T @ np.linalg.solve(J @ J.T + lam2 * np.eye(6), e)
            step = float(np.abs(dq).max())
            if step > 0.3:  # keep each step inside the region where the linearisation holds
                dq *= 0.3 / step
            q = np.clip(q + dq, self.lower, self.upper)
        p, R = self._fk(q)
        pos_err = float(np.linalg.norm(pos - p))
        rot_err = _angle_of(R.T @ Rd)
        ok = pos_err < self.POS_TOL and rot_err < self.ROT_TOL
        return IKResult(q=q, ok=bool(ok), pos_err=pos_err, rot_err=rot_err, iters=it)

    # ------------------------------------------------------------------ reach
    def radius(self, pos) -> float:
        """Horizontal distance (m) of ``pos`` from the shoulder-pan axis."""
        pos = np.asarray(pos, dtype=float)
        return float(np.hypot(pos[0] - self.pan_axis[0], pos[1] - self.pan_axis[1]))

    def band(self, height: float) -> tuple[float, float] | None:
        """(smallest, largest) radius from the pan axis (m) at which the grasp point can stand at ``height`` with
        the gripper straight down, whatever its yaw within +/- 45 degrees (:data:`REACH_BAND`, interpolated); None
        above the highest reachable height."""
        h = float(height)
        if h < REACH_HEIGHTS[0] or h > REACH_BAND_MAX_HEIGHT:
            return None
        lo = float(np.interp(h, REACH_HEIGHTS, REACH_BAND[:, 0]))
        hi = float(np.interp(h, REACH_HEIGHTS, REACH_BAND[:, 1]))
        return (lo, hi) if hi > lo else None

    def reachable(self, pos) -> bool:
        """Whether the grasp point can stand at ``pos`` (3,) m (world) with the gripper straight down at any yaw
        within +/- 45 degrees: inside the reach band at its height (:meth:`band`)."""
        pos = np.asarray(pos, dtype=float).reshape(-1)
        if pos.shape != (3,) or not np.isfinite(pos).all():
            raise ValueError(f"pos must be 3 finite numbers (m); got {pos!r}")
        b = self.band(pos[2])
        return b is not None and b[0] <= self.radius(pos) <= b[1]

    def clamp_to_band(self, pos, margin: float = 0.0) -> np.ndarray:
        """``pos`` moved to the nearest point of the reach band (shrunk by ``margin`` m): first the height down to
        the highest reachable one, then the radius into the band along the line from the pan axis."""
        p = np.asarray(pos, dtype=float).copy()
        p[2] = min(max(p[2], REACH_HEIGHTS[0]), REACH_BAND_MAX_HEIGHT - margin)
        lo, hi = self.band(p[2])
        lo, hi = lo + margin, hi - margin
        d = p[:2] - self.pan_axis
        r = float(np.hypot(*d))
        if r < 1e-9:
            d, r = np.array([1.0, 0.0]), 1.0
        r_new = min(max(r, lo), hi)
        p[:2] = self.pan_axis + d / r * r_new
        return p

    # ------------------------------------------------------------------ jaw
    def jaw_to_gap(self, jaw_rad: float) -> float:
        """Pad gap (m) at the jaw angle ``jaw_rad`` (measured table, linear interpolation; clamped at its ends)."""
        return float(np.interp(float(jaw_rad), self._jaw_angles, self._jaw_gaps))

    def pad_depth(self, jaw_a: float, jaw_b: float | None = None) -> float:
        """How far below the grasp point (m) the pads reach while the jaw is anywhere between ``jaw_a`` and ``jaw_b``
        (rad; default ``jaw_a`` alone): the deeper of the fixed pad's lower edge and the moving pad's lowest point."""
        lo, hi = sorted((float(jaw_a), float(jaw_a if jaw_b is None else jaw_b)))
        inside = (self._depth_angles > lo) & (self._depth_angles < hi)
        ends = np.interp([lo, hi], self._depth_angles, self._depths)
        deepest = max(ends.max(), self._depths[inside].max() if inside.any() else -np.inf)
        return float(max(deepest, self.geometry.tcp_below_grasp))

    def jaw_step(self, finger_speed: float, dt: float) -> float:
        """Jaw angle (rad) a servo target moving at ``finger_speed`` (m/s of pad gap) covers in ``dt`` seconds,
        through the slope of the jaw's gap table between closed and a 5 cm gap."""
        gaps = self._jaw_gaps
        near = (gaps > 0) & (gaps < 0.05)
        slope = float(np.polyfit(self._jaw_angles[near], gaps[near], 1)[0])
        return float(finger_speed) / slope * float(dt)

    def gap_to_jaw(self, gap_m: float) -> float:
        """Jaw angle (rad) that opens the pads to ``gap_m`` (the inverse of :meth:`jaw_to_gap`)."""
        return float(np.interp(float(gap_m), self._jaw_gaps, self._jaw_angles))


def measure_reach_band(kin: So101Kinematics, heights=REACH_HEIGHTS, yaws=(-math.pi / 4, 0.0, math.pi / 4),
                       step: float = 0.0025) -> np.ndarray:
    """Measure the reach band: for every height, the radii (from the pan axis, along +x) at which :meth:`solve`
    reaches the grasp point for every yaw in ``yaws``, scanned outward in ``step`` m with warm starts. Returns
    len(heights),2 (lowest, highest radius; NaN where none). Slow (seconds); :data:`REACH_BAND` holds its output."""
    out = np.full((len(heights), 2), np.nan)
    radii = np.arange(0.05, 0.40, step)
    for i, h in enumerate(heights):
        good = []
        q_last = {y: None for y in yaws}
        for r in radii:
            pos = np.array([kin.pan_axis[0] + r, kin.pan_axis[1], h])
            ok = True
            for y in yaws:
                best = None
                for q0 in (q_last[y], kin.home):
                    res = kin.solve(pos, y, q0)
                    if res.ok:
                        best = res
                        break
                if best is None:
                    ok = False
                else:
                    q_last[y] = best.q
            if ok:
                good.append(r)
        if good:
            out[i] = (min(good), max(good))
    return out


# Measured with ``measure_reach_band(So101Kinematics())`` (benchmarks/so101_geometry_mujoco.py measures it again):
# rows are REACH_HEIGHTS (0 to 9 cm; none reachable at 10 cm), columns (lowest, highest) radius from the pan axis in
# metres at which the grasp point is reached straight down for every yaw in {-45, 0, +45} degrees, each shrunk by
# one scan step (2.5 mm). The pure kinematics allow radii down to 6.5 cm near the table, but there the jaws would
# sweep the arm's own base (the IK checks no collisions): the inner edge is raised to MIN_RADIUS.
MIN_RADIUS = 0.11
_MEASURED_BAND = np.array([
    [0.0625, 0.2625], [0.0650, 0.2600], [0.0700, 0.2575], [0.0750, 0.2525], [0.0800, 0.2450],
    [0.0875, 0.2375], [0.0975, 0.2300], [0.1100, 0.2175], [0.1275, 0.2000], [0.1600, 0.1675],
])
REACH_BAND = np.stack([np.maximum(_MEASURED_BAND[:, 0] + 0.0025, MIN_RADIUS), _MEASURED_BAND[:, 1] - 0.0025], 1)
REACH_BAND_MAX_HEIGHT = 0.09


class CartesianIK:
    """The per-control-period layer: Cartesian velocity commands ``(vx, vy, vz, wz, grip)`` -> joint targets.

    Each :meth:`step` integrates the velocities (clipped to ``max_speed`` per axis and ``max_yaw_rate``) into a
    grasp-point target and a yaw, keeps the target inside the workspace square (``workspace`` half-size around the
    world origin, heights ``0``-``max_height``) and the reach band, and solves the IK warm-started from the last
    solution. ``grip`` > 0 closes the jaw (target ``close_gap``, below zero so the jaw squeezes what it holds), else
    opens it to ``open_gap``. The same layer serves the MuJoCo backend (:meth:`track` with its own integrated targets)
    and a real arm."""

    def __init__(self, kin: So101Kinematics, dt: float = 0.1, max_speed: float = 0.1, max_yaw_rate: float = 1.5,
                 workspace: float = 0.1, max_height: float = 0.09, open_gap: float = 0.04, close_gap: float = -0.01,
                 band_margin: float = 0.002):
        for name, v in (("dt", dt), ("max_speed", max_speed), ("max_yaw_rate", max_yaw_rate),
                        ("workspace", workspace), ("max_height", max_height), ("open_gap", open_gap)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"CartesianIK.{name} must be a finite number above 0; got {v!r}")
        self.kin = kin
        self.dt, self.max_speed, self.max_yaw_rate = float(dt), float(max_speed), float(max_yaw_rate)
        self.workspace, self.max_height = float(workspace), float(max_height)
        self.open_jaw = kin.gap_to_jaw(open_gap)
        self.close_jaw = kin.gap_to_jaw(close_gap)
        self.band_margin = float(band_margin)
        self.q = kin.home.copy()
        self.target, self.yaw = kin.grasp_pose(self.q)
        self.jaw = self.open_jaw

    def reset(self, q_measured, jaw: float) -> None:
        """Start from the measured joints ``q_measured`` (5,) rad and jaw angle ``jaw`` (rad): the target becomes the
        grasp pose they hold."""
        self.q = self.kin._check_q(q_measured).copy()
        self.target, self.yaw = self.kin.grasp_pose(self.q)
        self.jaw = float(jaw)

    def ramp_jaw(self, jaw_from: float, close: bool, jaw_now: float, step: float) -> tuple[float, tuple[float, float]]:
        """One tick of a jaw target ramped at ``step`` (rad a tick, :meth:`So101Kinematics.jaw_step`) from ``jaw_from``
        towards closed or open; returns (the new target, the ``jaw_span`` for :meth:`track`: from the measured
        ``jaw_now`` one step towards that target, where the pads must stay off the table this period)."""
        goal = self.close_jaw if close else self.open_jaw
        to = float(jaw_from) + float(np.clip(goal - jaw_from, -step, step))
        return to, (float(jaw_now), float(np.clip(to, jaw_now - step, jaw_now + step)))

    def step(self, action, q_measured=None, jaw_span: tuple[float, float] | None = None) -> JointTargets:
        """One control period of ``action`` (5,) = (vx, vy, vz m/s, wz rad/s, grip). ``q_measured`` (5,), when
        given, is only checked (the solve starts from the last solution, which the servos track). ``jaw_span``: the
        jaw angles (rad) it may pass through this period, as :meth:`track` takes them (a real arm: from the measured
        jaw to where it can get this period). Raises ValueError on a wrong shape or a non-finite value."""
        a = np.asarray(action, dtype=float).reshape(-1)
        if a.shape != (5,) or not np.isfinite(a).all():
            raise ValueError(f"action must be 5 finite numbers (vx, vy, vz, wz, grip); got {a!r}")
        if q_measured is not None:
            self.kin._check_q(q_measured)
        v = np.clip(a[:3], -self.max_speed, self.max_speed)
        wz = float(np.clip(a[3], -self.max_yaw_rate, self.max_yaw_rate))
        return self.track(self.target + v * self.dt, self.yaw + wz * self.dt, a[4] > 0, jaw_span)

    def track(self, pos, yaw: float, close: bool, jaw_span: tuple[float, float] | None = None) -> JointTargets:
        """Joint targets for the grasp-point target ``pos`` (3,) m and ``yaw`` (rad), the jaw closed when ``close``.
        The target is clamped to the workspace square and the reach band first (``clipped`` says so), and raised so
        no pad goes below the table (z = 0) while the jaw moves through ``jaw_span`` (rad; default from the last
        jaw target to the new one): closing, the moving jaw swings up to 4.5 mm below the fixed one."""
        p = np.asarray(pos, dtype=float).copy()
        w = self.workspace
        new_jaw = self.close_jaw if close else self.open_jaw
        span = (self.jaw, new_jaw) if jaw_span is None else jaw_span
        floor = self.kin.pad_depth(*span)
        p = np.array([min(max(p[0], -w), w), min(max(p[1], -w), w), min(max(p[2], floor), self.max_height)])
        inside = self.kin.band(p[2])
        m = self.band_margin
        clipped = inside is None or not (inside[0] + m <= self.kin.radius(p) <= inside[1] - m)
        if clipped:
            p = self.kin.clamp_to_band(p, self.band_margin)
        res = self.kin.solve(p, yaw, self.q)
        if res.ok:
            self.q, self.target, self.yaw = res.q, p, float(yaw)
        else:
            clipped = True
        self.jaw = new_jaw
        return JointTargets(q=self.q.copy(), jaw=self.jaw, clipped=bool(clipped))
