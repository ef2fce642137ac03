"""A real SO-101 arm through LeRobot's own driver: the ``so101`` robot of ``graspsim deploy``.

>>> graspsim deploy --vision V.pt --policy P.pt --camera 0 --robot so101 --so101.port /dev/ttyACM0 \\
...     --so101.id my_arm --so101.dry-run --out runs/dry        # reads the arm, moves nothing, logs joint targets

The arm is driven by LeRobot's ``SO101Follower`` (``lerobot.robots.so_follower``), never by a serial protocol of
ours: LeRobot reads and writes the Feetech servos and converts their ticks with the user's calibration file into
degrees from the calibrated middle (arm joints) and 0-100 of the calibrated range (gripper). This adapter turns each
command of the nets, ``(vx, vy, vz[, wz], grip)`` in the simulator's world frame, into joint targets through the
shared IK layer (:class:`graspsim.robot.ik.CartesianIK`: straight-down gripper, yaw about the grasp point, targets
kept in the workspace square and the reachable band), limits each joint's change per tick, and sends them with
``send_action``. The senses come back from the joints it reads: the finger gap from the gripper position, the wrist
yaw from the forward kinematics, and table contact from the guarded move (the arm was commanded lower than it got).

Units: ``q`` (5,) arm joints in radians of the MuJoCo model (zero at the middle of each range, as LeRobot's
calibration puts it), converted per joint as ``q = sign * radians(deg) + offset`` (:class:`JointMap`; the SO-101's
"new calibration" model needs sign +1 and offset 0 on every joint); the moving jaw's angle from the gripper's 0-100
through the calibrated range (0 = closed).

Refused before anything moves (one-line ``ValueError``/``ImportError`` naming what to do): LeRobot missing or of an
untested version (:data:`TESTED_LEROBOT`), no ``--so101.port`` or a port that does not exist, no calibration file
for ``--so101.id`` (the ``lerobot-calibrate`` command is named), motors holding another calibration than the file,
a measured pose outside the model's joint ranges (a wrong calibration or sign), and, in ``deploy``, a control net
trained for another embodiment than ``so101``.

Faults while running raise :class:`So101Fault` from the method that met them; the robot loop then calls
:meth:`So101Robot.stop` before it reports the error: a bus read that fails or times out, a write the bus refuses, a
joint that does not follow its target, a gripper that does not move. ``stop()`` holds the measured joint positions
(the last good ones when the bus cannot be read) and never raises.
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from .interfaces import Outcome, Robot, Senses

log = logging.getLogger(__name__)

TESTED_LEROBOT = ("0.4.4",)
"""LeRobot versions this adapter was tested with (``lerobot.robots.so_follower`` against a mocked Feetech bus driving
the MuJoCo SO-101). 0.4.4 is the newest for Python 3.10-3.11; 0.5 and later need Python >= 3.12."""
INSTALL_HINT = ("pip install 'graspsim[so101]' (LeRobot 0.4.4 and the small packages its SO-101 driver imports; "
                "docs/so101_real_arm.md)")
ARM_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
"""LeRobot's motor names of the five arm joints, in the order of every ``q`` (the same names as the model's)."""
GRIPPER = "gripper"
LEROBOT_ROBOT_DIR = "so_follower"
"""Where LeRobot 0.4.x keeps SO-100/SO-101 follower calibrations under ``$HF_LEROBOT_CALIBRATION/robots``."""
OLD_ROBOT_DIR = "so101_follower"
"""The folder of calibrations written by LeRobot versions before 0.4 (named in an error when a file is there)."""


class So101Fault(RuntimeError):
    """A fault of the arm while running (bus, servo, gripper); the loop stops the robot first, then reports it."""


def require_lerobot(allow_untested: bool = False):
    """Import and return ``lerobot.robots.so_follower``; ImportError naming the install line when LeRobot (or a
    package its SO-101 driver imports) is missing, ValueError when its version is not in :data:`TESTED_LEROBOT`
    (unless ``allow_untested``)."""
    try:
        version = importlib.metadata.version("lerobot")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(f"the so101 robot drives the arm through LeRobot, which is not installed: {INSTALL_HINT}") \
            from None
    if version not in TESTED_LEROBOT and not allow_untested:
        raise ValueError(f"so101: LeRobot {version} is installed; this adapter was tested with LeRobot "
                         f"{', '.join(TESTED_LEROBOT)} only: {INSTALL_HINT}, or give --so101.untested-lerobot to try it")
    try:
        from lerobot.robots import so_follower
    except ImportError as e:
        raise ImportError(f"so101: LeRobot {version} is installed but its SO-101 driver cannot be imported ({e}): "
                          f"{INSTALL_HINT}") from None
    return so_follower


@dataclass(frozen=True)
class JointMap:
    """How LeRobot's calibrated degrees map onto the model's joint angles: ``q = sign * radians(deg) + offset``."""

    sign: Tuple[float, float, float, float, float] = (1.0, 1.0, 1.0, 1.0, 1.0)
    """Per arm joint (shoulder_pan, shoulder_lift, elbow_flex, wrist_flex, wrist_roll): +1 or -1."""
    offset: Tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)
    """Per arm joint: the model angle (rad) at LeRobot's calibrated middle."""
    gripper_open_at_100: bool = True
    """LeRobot's gripper 100 is the open end of its calibrated range (0 = closed), as LeRobot's SO-101 calibration
    records it when the jaw is moved from closed to open."""

    def __post_init__(self) -> None:
        for name in ("sign", "offset"):
            v = tuple(float(x) for x in getattr(self, name))
            if len(v) != 5 or not all(math.isfinite(x) for x in v):
                raise ValueError(f"JointMap.{name} must be 5 finite numbers (one per arm joint); got {v!r}")
            object.__setattr__(self, name, v)
        if any(s not in (1.0, -1.0) for s in self.sign):
            raise ValueError(f"JointMap.sign must hold +1 or -1 per joint; got {self.sign!r}")

    def to_model(self, deg) -> np.ndarray:
        """LeRobot degrees (5,) -> model radians (5,)."""
        return np.asarray(self.sign) * np.radians(np.asarray(deg, float)) + np.asarray(self.offset)

    def to_lerobot(self, q) -> np.ndarray:
        """Model radians (5,) -> LeRobot degrees (5,)."""
        return np.degrees((np.asarray(q, float) - np.asarray(self.offset)) / np.asarray(self.sign))


@dataclass(frozen=True)
class So101Config:
    """The SO-101 on LeRobot's driver (``--robot so101``); docs/so101_real_arm.md walks through a first run."""

    port: str = ""
    """Serial port of the arm's servo bus, e.g. /dev/ttyACM0 (lerobot-find-port names it)."""
    id: str = ""
    """The arm's LeRobot id, as given to lerobot-calibrate (--robot.id); its calibration file is ID.json."""
    calibration_dir: Optional[Path] = None
    """Folder of the calibration file (default LeRobot's: $HF_LEROBOT_CALIBRATION/robots/so_follower)."""
    dry_run: bool = False
    """Connect and read the arm but move nothing: every tick's joint targets are logged (and kept in
    ``So101Robot.log``); the senses come from the targets as if the arm had followed them."""
    speed: float = 1.0
    """Fraction of the nets' velocities actually sent (0 < speed <= 1), e.g. 0.3 for a first run at reduced speed;
    give a --time-limit longer by the same factor."""
    max_step_deg: float = 10.0
    """Largest change of an arm joint's target per tick (degrees from the measured position); also LeRobot's
    max_relative_target for the arm joints. The nets' fastest moves need about 5 (0.1 m/s) and 9 (the wrist at
    1.5 rad/s) at 10 Hz."""
    max_gripper_step: float = 30.0
    """Largest change of the gripper's target per tick (0-100 units); LeRobot's max_relative_target for the gripper."""
    start_height: float = 0.055
    """Height (m) of the grasp point above the table at each episode start (the so101 embodiment starts at 4.5-6.5 cm
    of its fingertips; a straight-down gripper reaches at most 9 cm)."""
    workspace: float = 0.1
    """Half-size (m) of the square, centred PAN_TO_CENTRE in front of the pan axis, that the grasp point keeps to."""
    max_height: float = 0.09
    """Highest grasp point (m) the IK is asked for (the straight-down reach ends there)."""
    contact_dz: float = 0.004
    """Table contact, the guarded move: the arm was commanded this much (m) lower than the grasp point got, with the
    TCP within ``press_height`` of the table."""
    press_height: float = 0.015
    """Height (m) of the TCP (the centre of the pads' lower edges, forward kinematics) below which a guarded move that
    is held back counts as contact (higher up, a target ahead of the arm is the servos' lag)."""
    contact_height: float = 0.003
    """A TCP at most this high (m) above the table plane by the forward kinematics counts as contact, as in the
    simulator (its contact_height)."""
    follow_limit_deg: float = 15.0
    """A joint further than this (degrees) from the IK's target for ``follow_ticks`` ticks in a row while the arm
    is not pressing on the table is a fault (a servo that does not follow)."""
    follow_ticks: int = 5
    """Ticks in a row a joint may lag its target by more than ``follow_limit_deg``."""
    gripper_stall_ticks: int = 10
    """Ticks the gripper may sit still (less than 1 unit of 0-100) far (more than 10 units) from its target before
    it counts as stalled; closing on an object is not a stall once the jaw has moved."""
    joint_map: JointMap = field(default_factory=JointMap)
    """Sign and offset of each joint between LeRobot's degrees and the model."""
    plausible_margin_deg: float = 10.0
    """At start, a measured joint outside the model's range by more than this (degrees) is refused (calibration or
    sign wrong)."""
    torque_off_at_exit: bool = False
    """On close: False keeps the servos holding the last pose (switch the arm off by hand); True is LeRobot's
    default, torque off, and the arm falls under its own weight."""
    untested_lerobot: bool = False
    """Run with a LeRobot version other than those tested (TESTED_LEROBOT)."""

    def __post_init__(self) -> None:
        for name in ("speed", "max_step_deg", "max_gripper_step", "start_height", "workspace", "max_height",
                     "contact_dz", "press_height", "contact_height", "follow_limit_deg", "plausible_margin_deg"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"So101Config.{name} must be a finite number above 0; got {v!r}")
        if self.speed > 1:
            raise ValueError(f"So101Config.speed is a fraction of the nets' velocities, 0 < speed <= 1; got {self.speed}")
        if self.start_height > self.max_height:
            raise ValueError(f"So101Config.start_height ({self.start_height} m) must be <= max_height "
                             f"({self.max_height} m)")
        for name in ("follow_ticks", "gripper_stall_ticks"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"So101Config.{name} must be a whole number >= 1; got {v!r}")
        if self.calibration_dir is not None:
            object.__setattr__(self, "calibration_dir", Path(self.calibration_dir))

    def check_ready(self) -> None:
        """ValueError naming the flag when the port or the id is missing (before LeRobot is touched)."""
        if not str(self.port).strip():
            raise ValueError("so101: give the arm's serial port, --so101.port /dev/ttyACM0 (lerobot-find-port names it)")
        if not str(self.id).strip():
            raise ValueError("so101: give the arm's LeRobot id, --so101.id ID (the --robot.id of lerobot-calibrate)")


def calibrate_command(cfg: So101Config) -> str:
    """The LeRobot command that writes the calibration file ``cfg`` looks for."""
    extra = f" --robot.calibration_dir={cfg.calibration_dir}" if cfg.calibration_dir is not None else ""
    return f"lerobot-calibrate --robot.type=so101_follower --robot.port={cfg.port} --robot.id={cfg.id}{extra}"


class So101Robot(Robot):
    """The SO-101 on LeRobot's ``SO101Follower`` (see the module docstring). ``follower``: an already built
    LeRobot follower (tests); default one built from ``cfg``. ``period`` (s): one control period, the IK's time step.
    ``max_speed`` (m/s per axis) and ``max_yaw_rate`` (rad/s): the nets' trained ranges; ``max_wrist_yaw`` (rad): how
    far the wrist may turn from its start either way, as in the simulator (whose nets keep asking to turn at its limit;
    unlimited, the IK's yaw target would run past the wrist's reach); ``finger_speed`` (m/s of pad gap): how fast the
    jaw's target moves towards closed or open, as in the simulator (LeRobot's gripper limit alone would let it jump
    by ``max_gripper_step`` a tick, twice as fast as the nets were trained with); ``open_gap`` (m): the pad gap of
    the open jaw, the trained embodiment's ``open_width`` (5 cm for ``so101``; the gap senses are fractions of it, as
    in the simulator). ``sleep``: waits between the steps
    of the homing move (tests pass a no-op)."""

    name = "so101"
    wrist = True
    embodiment = "so101"
    """The simulator embodiment a control net must have been trained for (deploy refuses others)."""

    def __init__(self, cfg: So101Config, *, period: float = 0.1, max_speed: float = 0.1, max_yaw_rate: float = 1.5,
                 max_wrist_yaw: float = 1.6, finger_speed: float = 0.2, open_gap: float = 0.05, follower=None,
                 kinematics=None,
                 sleep=time.sleep):
        self.cfg = cfg
        self.period = float(period)
        if not (math.isfinite(self.period) and self.period > 0):
            raise ValueError(f"So101Robot: period must be a positive number of seconds; got {period!r}")
        self.sleep = sleep
        self.log: list[tuple[str, dict]] = []
        """Dry run: every ("targets" | "stop" | "home", {joint: value}) the arm would have been sent."""
        self.follower = None
        self._connected = False
        if follower is None:
            cfg.check_ready()
            so_follower = require_lerobot(cfg.untested_lerobot)
            if not os.path.exists(cfg.port):
                raise ValueError(f"so101: serial port {cfg.port} does not exist (is the arm's USB cable in, and "
                                 "is it this port? lerobot-find-port names it)")
            follower = so_follower.SO101Follower(self.lerobot_config(so_follower))
        else:
            require_lerobot(cfg.untested_lerobot)
        self.follower = follower
        self._check_calibration_file()
        from .ik import CartesianIK, So101Kinematics

        self.kin = kinematics if kinematics is not None else So101Kinematics()
        self.ik = CartesianIK(self.kin, dt=self.period, max_speed=max_speed, max_yaw_rate=max_yaw_rate,
                              workspace=cfg.workspace, max_height=cfg.max_height, open_gap=open_gap)
        self.max_speed, self.max_yaw_rate = float(max_speed), float(max_yaw_rate)
        self.max_wrist_yaw = float(max_wrist_yaw)
        if not (math.isfinite(self.max_wrist_yaw) and self.max_wrist_yaw > 0):
            raise ValueError(f"So101Robot: max_wrist_yaw must be a positive number of radians; got {max_wrist_yaw!r}")
        if not (math.isfinite(finger_speed) and finger_speed > 0):
            raise ValueError(f"So101Robot: finger_speed must be a positive number of m/s; got {finger_speed!r}")
        self.jaw_step = self.kin.jaw_step(finger_speed, self.period)
        """Largest change (rad) of the jaw's target per tick."""
        self.jaw_cmd = self.ik.open_jaw
        """The jaw's target (rad, model), ramped at ``jaw_step`` a tick."""
        self.open_gap = float(self.kin.jaw_to_gap(self.ik.open_jaw))
        cal = self.follower.calibration[GRIPPER]
        span = (cal.range_max - cal.range_min) * 360.0 / 4095.0
        if not 30.0 <= span <= 200.0:
            raise ValueError(f"so101: the gripper's calibrated range is {span:.0f} degrees; an SO-101 jaw opens about "
                             f"110 degrees: calibrate again ({calibrate_command(cfg)})")
        self.jaw_closed = float(self.kin.model.jnt_range[self.kin.model.joint(GRIPPER).id, 0])
        """The moving jaw's angle (rad, model) at the closed end of its calibrated range (the model's lower limit)."""
        self.jaw_span = math.radians(span)
        self.tcp_drop = float(self.kin.geometry.tcp_below_grasp)
        """How far (m) the simulator's TCP, the centre of the pads' lower edges, lies below the grasp point."""
        self.q = np.zeros(5)
        """Last measured arm joints (rad, model)."""
        self.pct = 0.0
        """Last measured gripper (0-100)."""
        self.goal_q: np.ndarray | None = None
        self.goal_pct: float | None = None
        self.closed = False
        self.yaw0 = 0.0
        self.lag = np.zeros(5, int)
        self.still = 0
        self._last_pct = math.nan
        self.gripper_moved = False
        self.stalled = False
        self.checked_pose = False
        self.target_z = math.nan
        self._connect()

    # ------------------------------------------------------------------ LeRobot
    def lerobot_config(self, so_follower):
        """The ``SO101FollowerConfig`` of :attr:`cfg`: no cameras (ours are read apart), degrees, the per-tick limit
        as ``max_relative_target``, torque kept at exit unless asked."""
        c = self.cfg
        limit = {j: float(c.max_step_deg) for j in ARM_JOINTS}
        limit[GRIPPER] = float(c.max_gripper_step)
        return so_follower.SO101FollowerConfig(port=str(c.port), id=str(c.id), calibration_dir=c.calibration_dir,
                                               use_degrees=True, max_relative_target=limit,
                                               disable_torque_on_disconnect=bool(c.torque_off_at_exit))

    def _check_calibration_file(self) -> None:
        f = self.follower
        path = Path(f.calibration_fpath)
        if not path.is_file() or not f.calibration:
            old = path.parent.parent / OLD_ROBOT_DIR / path.name
            hint = (f"; an older LeRobot wrote {old}: copy it to {path}" if old.is_file() else "")
            raise ValueError(f"so101: no calibration file {path} for arm id {self.cfg.id!r}: calibrate the arm with "
                             f"LeRobot first, {calibrate_command(self.cfg)}{hint}")
        missing = [j for j in (*ARM_JOINTS, GRIPPER) if j not in f.calibration]
        if missing:
            raise ValueError(f"so101: calibration file {path} lacks {', '.join(missing)}: calibrate again, "
                             f"{calibrate_command(self.cfg)}")

    def _connect(self) -> None:
        """Connect without LeRobot's interactive calibration, refuse motors that hold another calibration than the
        file, then hold the present pose (torque is on after LeRobot's configure)."""
        f = self.follower
        try:
            f.connect(calibrate=False)
        except Exception as e:
            raise ValueError(f"so101: LeRobot could not connect to the arm on {self.cfg.port}: "
                             f"{type(e).__name__}: {' '.join(str(e).split())}") from None
        self._connected = True
        try:
            same = bool(f.bus.is_calibrated)
        except Exception as e:
            self.close()
            raise ValueError(f"so101: reading the motors' calibration failed: {type(e).__name__}: {e}") from None
        if not same:
            self.close()
            raise ValueError(f"so101: the motors hold another calibration than {f.calibration_fpath}: calibrate again "
                             f"({calibrate_command(self.cfg)}) or give the --so101.id of this arm")
        self._read()
        self._hold(self.q, self.pct)

    # ------------------------------------------------------------------ conversions
    def to_pct(self, jaw: float) -> float:
        """Moving jaw angle (rad, model) -> LeRobot's gripper 0-100."""
        pct = 100.0 * (float(jaw) - self.jaw_closed) / self.jaw_span
        pct = pct if self.cfg.joint_map.gripper_open_at_100 else 100.0 - pct
        return float(min(100.0, max(0.0, pct)))

    def to_jaw(self, pct: float) -> float:
        """LeRobot's gripper 0-100 -> moving jaw angle (rad, model)."""
        pct = float(pct) if self.cfg.joint_map.gripper_open_at_100 else 100.0 - float(pct)
        return self.jaw_closed + pct / 100.0 * self.jaw_span

    def action(self, q, pct: float) -> dict:
        """LeRobot action ``{"<joint>.pos": value}`` for model joints ``q`` (5,) rad and the gripper ``pct``."""
        deg = self.cfg.joint_map.to_lerobot(q)
        act = {f"{j}.pos": float(d) for j, d in zip(ARM_JOINTS, deg)}
        act[f"{GRIPPER}.pos"] = float(pct)
        return act

    # ------------------------------------------------------------------ bus access
    def _read(self) -> tuple[np.ndarray, float]:
        """Read the joints (LeRobot ``get_observation``): sets and returns (q (5,) rad, gripper 0-100); So101Fault
        when the bus read fails or times out or returns something else than finite numbers."""
        try:
            obs = self.follower.get_observation()
            deg = np.array([float(obs[f"{j}.pos"]) for j in ARM_JOINTS])
            pct = float(obs[f"{GRIPPER}.pos"])
        except Exception as e:
            raise So101Fault(f"reading the arm's joints failed: {type(e).__name__}: {' '.join(str(e).split())}") from e
        if not (np.isfinite(deg).all() and math.isfinite(pct)):
            raise So101Fault(f"the arm's joints read back as {deg.tolist()} and gripper {pct}")
        self.q, self.pct = self.cfg.joint_map.to_model(deg), pct
        return self.q, self.pct

    def _write(self, q, pct: float, kind: str) -> dict:
        """Send joint targets (or, in a dry run, log them); returns what LeRobot sent (after max_relative_target)."""
        act = self.action(q, pct)
        if self.cfg.dry_run:
            self.log.append((kind, act))
            log.info("so101 dry run %s: %s", kind, " ".join(f"{k[:-4]}={v:.1f}" for k, v in act.items()))
            return act
        try:
            return self.follower.send_action(act)
        except Exception as e:
            raise So101Fault(f"the arm refused the joint targets: {type(e).__name__}: {' '.join(str(e).split())}") from e

    def _hold(self, q, pct: float) -> None:
        """Hold ``q`` and ``pct``: written with the bus's own ``sync_write`` of Goal_Position, not ``send_action``,
        whose max_relative_target check reads the bus first (a hold is sent also when the bus cannot be read)."""
        self.goal_q, self.goal_pct = np.array(q, float), float(pct)
        act = self.action(q, pct)
        if self.cfg.dry_run:
            self.log.append(("stop", act))
            log.info("so101 dry run stop: %s", " ".join(f"{k[:-4]}={v:.1f}" for k, v in act.items()))
            return
        try:
            self.follower.bus.sync_write("Goal_Position", {k.removesuffix(".pos"): v for k, v in act.items()})
        except Exception as e:
            raise So101Fault(f"the arm refused the hold: {type(e).__name__}: {' '.join(str(e).split())}") from e

    # ------------------------------------------------------------------ the Robot interface
    def check_pose(self, q) -> None:
        """ValueError when the measured joints ``q`` (rad) lie outside the model's ranges by more than
        ``plausible_margin_deg``, or the grasp point is below the table: a calibration, sign or offset that does not
        match the model."""
        m = math.radians(self.cfg.plausible_margin_deg)
        bad = [f"{j} {math.degrees(v):.0f} deg (model {math.degrees(lo):.0f} to {math.degrees(hi):.0f})"
               for j, v, lo, hi in zip(ARM_JOINTS, q, self.kin.lower, self.kin.upper) if not lo - m <= v <= hi + m]
        if bad:
            raise ValueError(f"so101: the measured pose is not one the arm can have: {'; '.join(bad)}. Check the "
                             f"calibration ({calibrate_command(self.cfg)}) and --so101.joint-map")
        pos, _ = self.kin.grasp_pose(np.clip(q, self.kin.lower, self.kin.upper))
        if pos[2] < -0.05:
            raise ValueError(f"so101: the measured pose puts the grasp point {-pos[2] * 100:.0f} cm below the table: "
                             f"check the calibration ({calibrate_command(self.cfg)}) and --so101.joint-map")

    def home_pose(self) -> np.ndarray:
        """Arm joints (rad) of the episode start: grasp point above the workspace centre at ``start_height``,
        straight down, yaw 0."""
        res = self.kin.solve(np.array([0.0, 0.0, self.cfg.start_height]), 0.0, self.kin.home)
        if not res.ok:
            raise ValueError(f"so101: no straight-down pose at start_height {self.cfg.start_height} m")
        return res.q

    def start_episode(self, seed: int) -> None:
        """Move to the start pose (joint-space steps of at most ``max_step_deg`` per period), open the gripper."""
        q, _ = self._read()
        if not self.checked_pose:
            self.check_pose(q)
            self.checked_pose = True
        home = self.home_pose()
        open_pct = self.to_pct(self.ik.open_jaw)
        step = math.radians(self.cfg.max_step_deg) * self.cfg.speed
        cur = q.copy()
        n = int(math.ceil(float(np.abs(home - cur).max()) / step)) if step > 0 else 0
        for k in range(1, n + 1):
            cur = q + (home - q) * (k / n)
            self.goal_q, self.goal_pct = cur.copy(), open_pct
            self._write(cur, open_pct, "home")
            self.sleep(self.period)
            if not self.cfg.dry_run:
                self._read()
        self.goal_q, self.goal_pct = home.copy(), open_pct
        for _ in range(20):  # settle: wait for the servos to reach the start pose
            self._write(home, open_pct, "home")
            self.sleep(self.period)
            if self.cfg.dry_run:
                break
            q, pct = self._read()
            if np.abs(q - home).max() < math.radians(2.0) and abs(pct - open_pct) < 5.0:
                break
        else:
            raise So101Fault(f"the arm did not reach its start pose: joint errors "
                             f"{np.round(np.degrees(q - home), 1).tolist()} deg, gripper {self.pct:.0f} of {open_pct:.0f}")
        if self.cfg.dry_run:
            self.q, self.pct = home.copy(), open_pct
        self.ik.reset(self.q, self.to_jaw(self.pct))
        self.jaw_cmd = self.to_jaw(open_pct)
        _, self.yaw0 = self.kin.grasp_pose(self.q)
        self.closed = False
        self.lag[:] = 0
        self.still = 0
        self._last_pct = math.nan
        self.gripper_moved = False
        self.stalled = False
        self.target_z = math.nan

    def _measured(self) -> tuple[np.ndarray, float]:
        """The joints as read (a dry run: as if the arm had followed its last targets)."""
        if self.cfg.dry_run and self.goal_q is not None:
            self.q, self.pct = self.goal_q.copy(), float(self.goal_pct)
            return self.q, self.pct
        return self._read()

    def senses(self) -> Senses:
        q, pct = self._measured()
        pos, yaw = self.kin.grasp_pose(q)
        # the pads squeezed together read a negative gap on the jaw's table; the simulators report 0 (pads touching)
        gap = max(0.0, self.kin.jaw_to_gap(self.to_jaw(pct))) / self.open_gap
        contact = self.contact(pos)
        dyaw = yaw - self.yaw0
        g = np.array([gap, float(self.closed), float(contact), math.sin(dyaw), math.cos(dyaw)], np.float32)
        return Senses(g, self.tcp(pos))

    def tcp(self, pos) -> np.ndarray:
        """The simulator's TCP (3,) m, the centre of the pads' lower edges, for the grasp point ``pos`` of a
        straight-down gripper."""
        return np.asarray(pos, np.float64) - np.array([0.0, 0.0, self.tcp_drop])

    def contact(self, pos) -> bool:
        """The table-contact sense at the measured grasp point ``pos`` (3,) m: the TCP within ``contact_height``
        of the table, or the guarded move held back (commanded ``contact_dz`` lower than reached) with the TCP below
        ``press_height``."""
        tip = float(pos[2]) - self.tcp_drop
        held = math.isfinite(self.target_z) and self.target_z < float(pos[2]) - self.cfg.contact_dz
        return bool(tip <= self.cfg.contact_height or (held and tip <= self.cfg.press_height))

    def _check_following(self, q, pct: float) -> None:
        """So101Fault when a joint lags its target too long (not while pressing on the table) or the gripper sits
        still far from its target."""
        if self.cfg.dry_run or self.goal_q is None:
            return
        pos, _ = self.kin.grasp_pose(q)
        pressing = self.contact(pos)
        err = np.abs(np.degrees(q - self.ik.q))
        self.lag = np.where((err > self.cfg.follow_limit_deg) & (not pressing), self.lag + 1, 0)
        if (self.lag >= self.cfg.follow_ticks).any():
            j = int(np.argmax(self.lag))
            raise So101Fault(f"joint {ARM_JOINTS[j]} does not follow: {err[j]:.1f} deg from its target for "
                             f"{self.lag[j]} ticks")
        far = abs(pct - self.goal_pct) > 10.0
        moved = math.isfinite(self._last_pct) and abs(pct - self._last_pct) >= 1.0
        self._last_pct = pct
        self.gripper_moved = self.gripper_moved or moved
        holding = self.closed and self.gripper_moved  # closed on an object: the jaw moved, then stopped
        self.still = self.still + 1 if (far and not moved and not holding) else 0
        if self.still >= self.cfg.gripper_stall_ticks:
            self.stalled = True
            raise So101Fault(f"the gripper stalled at {pct:.0f} of 100 (target {self.goal_pct:.0f}) for "
                             f"{self.still} ticks")

    def send(self, command: np.ndarray) -> np.ndarray:
        """One period of ``command`` (4 or 5 floats) -> joint targets through the IK, each joint's change limited
        to ``max_step_deg`` from its measured position; returns the command after clipping and ``speed``."""
        cmd = np.asarray(command, np.float64).reshape(-1)
        if cmd.shape not in ((4,), (5,)) or not np.isfinite(cmd).all():
            raise ValueError(f"so101: a command is 4 or 5 finite numbers (vx, vy, vz[, wz], grip); got {cmd.tolist()}")
        s = self.cfg.speed
        v = np.clip(cmd[:3], -self.max_speed, self.max_speed) * s
        wz = float(np.clip(cmd[3], -self.max_yaw_rate, self.max_yaw_rate)) * s if len(cmd) == 5 else 0.0
        lim = self.max_wrist_yaw  # the yaw target stays within +/- max_wrist_yaw of the start, as in the simulator
        turn = float(np.clip(self.ik.yaw + wz * self.period - self.yaw0, -lim, lim))
        wz = (self.yaw0 + turn - self.ik.yaw) / self.period if len(cmd) == 5 else 0.0
        close = bool(cmd[-1] > 0)
        q, pct = self._measured()
        self._check_following(q, pct)
        if close and not self.closed:
            self.gripper_moved = False
        self.closed = close
        # the jaw's target moves at the nets' finger speed towards closed or open, as in the simulator
        # the pads stay off the table wherever the jaw passes this period, from where it is (measured) one step
        # towards its target: the moving pad swings lower half-closed than open, and a pad pressed on the table pins
        # the jaw (it would not open again: a gripper stall)
        self.jaw_cmd, span = self.ik.ramp_jaw(self.jaw_cmd, close, self.to_jaw(pct), self.jaw_step)
        t = self.ik.step(np.array([*v, wz, 1.0 if close else -1.0]), q, jaw_span=span)
        self.target_z = float(self.ik.target[2])
        step = math.radians(self.cfg.max_step_deg)
        goal = np.clip(t.q, q - step, q + step)
        goal_pct = self.to_pct(self.jaw_cmd)
        self.goal_q, self.goal_pct = goal, goal_pct
        self._write(goal, goal_pct, "targets")
        sent = [*v, wz, 1.0 if close else -1.0] if len(cmd) == 5 else [*v, 1.0 if close else -1.0]
        return np.asarray(sent, np.float32)

    def stop(self) -> None:
        """Hold the measured joint positions (the last good ones when the bus cannot be read); the gripper keeps
        its target, or holds where it is after a stall. Never raises."""
        try:
            q, pct = self._measured()
        except Exception as e:
            log.warning("so101 stop: %s; holding the last measured pose", e)
            q, pct = self.q, self.pct
        hold_pct = pct if (self.stalled or self.goal_pct is None) else self.goal_pct
        try:
            self._hold(q, hold_pct)
            self.ik.reset(q, self.to_jaw(pct))
            self.target_z = math.nan
        except Exception as e:
            log.error("so101 stop: could not send the hold: %s; switch the arm off if it moves", e)

    def outcome(self) -> Outcome:
        return Outcome(done=False, success=None)

    def workspace(self) -> tuple[np.ndarray, np.ndarray]:
        """The box of the TCP (``senses().tcp``): the workspace square, from the table up to ``max_height`` of the
        grasp point."""
        w = self.cfg.workspace
        return np.array([-w, -w, 0.0]), np.array([w, w, self.cfg.max_height - self.tcp_drop])

    def close(self) -> None:
        """Disconnect (torque kept unless ``torque_off_at_exit``); safe to call twice."""
        if self._connected and self.follower is not None:
            self._connected = False
            try:
                self.follower.disconnect()
            except Exception as e:
                log.warning("so101 close: %s: %s", type(e).__name__, e)


__all__ = ["ARM_JOINTS", "GRIPPER", "INSTALL_HINT", "JointMap", "So101Config", "So101Fault", "So101Robot",
           "TESTED_LEROBOT", "calibrate_command", "require_lerobot"]
