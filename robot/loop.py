"""The robot loop: one tick per control period, camera -> controller -> robot, with its safety stops and tick log.

:func:`graspsim.robot.deploy.deploy` runs episodes of this loop through the one rollout driver
(:func:`graspsim.rollout.run_episodes`): :class:`RobotEnv` is the driver's env over a robot adapter (batch 1; it
only ends episodes), :class:`TickHooks` does the ticks. One tick (:meth:`TickHooks.act`) is these steps, in order:

======================= ========================================= =================================================
step                    in                                        out
======================= ========================================= =================================================
:meth:`Pacer.wait`      the clock                                 tick start t0 (s)
:func:`capture`         camera, robot                             :class:`Frame`, :class:`Senses`; t1
:func:`decide`          controller, frame, gripper 3, frame age s :class:`Decision` (stale: :func:`stale_decision`)
:func:`guard_workspace` decision, fingertip 3 (m), box            command 4 (cut at the box), stop reason
:func:`send`            robot, command 4                          what was sent 4; t3
:meth:`TickStats.add`   stage times (ms), stop reason             latencies, stop and overrun counts
:meth:`TickLog.add`     frame, decision, command, sent, times     a ``ticks.csv`` row (+ the recorded frame)
======================= ========================================= =================================================

Camera and adapter calls go through :func:`guarded`, which turns whatever they raise (``SystemExit``,
``GeneratorExit``, an adapter's own ``BaseException`` and a ``KeyboardInterrupt`` no signal caused included) into
:class:`DeployError` naming the part, its class and the method; what they return is checked
(:func:`graspsim.robot.cameras.check_frame`, :func:`check_senses` with the senses' units, :func:`check_sent`,
:func:`check_outcome`, :func:`check_workspace`), so a bad value is a DeployError of the same kind. The caller stops
the robot first (:func:`stop_first`, shielded from further stop signals) and then reports. Every tick starts by
checking the stop flag (:func:`graspsim.interrupts.check`), so a signal whose exception was lost still ends the run
before the next command; a camera whose frames stay stale for :data:`FROZEN_SECONDS` ends it too.

**Threads.** The camera is read by a :class:`graspsim.robot.cameras.CameraReader` (one worker thread); every
robot adapter method is called from the thread that runs the loop. The **capture watchdog**
(:func:`capture_deadlines`): when a tick's read has not returned after :data:`STALE_PERIODS` control periods (the
age at which its frame would be stale anyway), the robot is sent ``stop()``; when it has not returned after
``--frame-timeout`` + :data:`graspsim.robot.cameras.WATCHDOG_GRACE` s, the run ends with an error naming the
camera and that deadline.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import math
import time
from typing import Callable, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from graspsim import FAILURE_NAMES, interrupts
from graspsim.rollout import Finished, Hooks

from .cameras import (WATCHDOG_GRACE, Camera, CameraError, CameraReader, EndOfStream, Frame, describe_value,
                      part_name)
from .controller import Controller, Decision
from .robots import Outcome, Senses

log = logging.getLogger(__name__)

STALE_PERIODS = 2.0
"""A frame older than this many control periods is stale."""
STAGES = ("capture", "vision", "control", "decision", "send", "tick")
"""Timed stages: capture (camera read + senses), vision, control, decision (frame in -> command out: resize,
vision, control, safety rules), send, tick (capture to send)."""
CSV_FIELDS = ("episode", "tick", "image", "frame_age_ms", "gap", "close_sense", "contact",
              "act_vx", "act_vy", "act_vz", "act_grip", "cmd_vx", "cmd_vy", "cmd_vz", "cmd_grip",
              "sent_vx", "sent_vy", "sent_vz", "sent_grip", "visible", "mask_px", "stop",
              "capture_ms", "vision_ms", "control_ms", "decision_ms", "send_ms", "tick_ms")
"""Columns of ``ticks.csv``, one row per tick."""
WRIST_CSV_FIELDS = CSV_FIELDS[:7] + ("wrist_sin", "wrist_cos") + tuple(
    f for c in CSV_FIELDS[7:] for f in ((c[:-4] + "wz", c) if c.endswith("_grip") else (c,)))
"""Columns of ``ticks.csv`` when the control net turns the wrist: the wrist angle's sine and cosine among the senses,
and the yaw rate (rad/s) before each vector's grip."""
TICKS_CSV = "ticks.csv"
GAP_RANGE = (-0.1, 1.5)
"""Gripper gap senses accepted (finger gap / open gap: 0 closed, 1 open; a little beyond for encoder noise). A value
outside is a sense in other units (mm, m) and is refused."""
BIT_TOLERANCE = 0.01
"""How far the close-command and contact senses (0/1) may lie from 0 or 1."""
MAX_TCP = 10.0
"""Largest fingertip coordinate accepted (m): an arm's reach is about 1 m; 1e30 or millimetres are refused."""
FROZEN_SECONDS = 2.0
"""A camera whose every frame has been stale (older than two periods) for this long (and at least
:data:`FROZEN_TICKS` ticks) is taken for frozen: the run ends with an error (the robot was sent zero velocity on
each of those ticks, then ``stop()``)."""
FROZEN_TICKS = 10


class DeployError(ValueError):
    """A fault during the run (camera, adapter); the robot has been sent a stop first."""


# ------------------------------------------------------------------------------------------ faults
def guarded(robot, camera=None) -> Callable:
    """``guard(what, fn, *args)``: call a camera (``what`` = "camera") or adapter method (``what`` = its name); any
    exception from it, ``SystemExit``, ``GeneratorExit`` and an adapter's own ``BaseException`` subclasses included,
    becomes a DeployError naming the part, its class and the method, e.g. ``robot adapter 'my-arm' (MyArm.send)
    raised ConnectionError: ...`` (the caller stops the robot before reporting it). EndOfStream and the user's
    Ctrl-C or stop signal pass through; a KeyboardInterrupt that an adapter raised itself while no signal arrived
    (under the command, which routes the signals, :func:`graspsim.interrupts.installed`) is the adapter's fault."""
    def guard(what: str, fn, *args):
        try:
            return fn(*args)
        except (EndOfStream, DeployError):
            raise
        except KeyboardInterrupt as e:
            if _users_interrupt(e):
                raise
            raise DeployError(f"{_part(what)} raised KeyboardInterrupt{_said(e)} while no Ctrl-C or stop signal "
                              "had arrived") from None
        except CameraError as e:
            raise DeployError(str(e)) from None
        except BaseException as e:  # anything an adapter raises, SystemExit and GeneratorExit included
            raise DeployError(f"{_part(what)} raised {type(e).__name__}{_said(e)}") from None

    def _part(what: str) -> str:
        return part_name(camera, "camera", "read") if what == "camera" else adapter_name(robot, what)
    return guard


def _said(e: BaseException) -> str:
    return f": {e}" if str(e) else ""


def _users_interrupt(e: BaseException) -> bool:
    """Whether a KeyboardInterrupt is the user's (a signal arrived, or nobody routes the signals so Python's own
    Ctrl-C cannot be told apart) rather than one an adapter raised itself."""
    return (isinstance(e, interrupts.Stopped) or not interrupts.installed()
            or interrupts.requested() is not None)


def adapter_name(robot, method: str) -> str:
    """``robot adapter 'name' (Class.method)``, how errors name an adapter call."""
    return part_name(robot, "robot adapter", method)


def _vector(x, n: int) -> np.ndarray | None:
    """``x`` as ``n`` finite float64, or None when it is not that."""
    try:
        v = np.asarray(x, np.float64).reshape(-1)
    except (TypeError, ValueError):
        return None
    return v if v.shape == (n,) and np.isfinite(v).all() else None


def check_senses(senses, robot, width: int = 3) -> Senses:
    """``senses`` if ``robot.senses()`` returned a usable :class:`Senses` (``gripper`` ``width`` finite floats: 3, or
    5 with the wrist; ``tcp`` None or 3 finite floats in m); else DeployError naming the adapter and what it
    returned."""
    who = adapter_name(robot, "senses")
    if not hasattr(senses, "gripper"):
        raise DeployError(f"{who} returned {describe_value(senses)}; expected Senses(gripper={width} floats, "
                          "tcp=None or 3 floats in m)")
    if _vector(senses.gripper, width) is None:
        wrist = ", sin and cos of the wrist angle" if width == 5 else ""
        raise DeployError(f"{who} returned gripper senses {describe_value(senses.gripper)} "
                          f"{_short(senses.gripper)}; expected {width} finite floats (gap, close command, contact{wrist})")
    g = _vector(senses.gripper, width)
    bad = _sense_units(g)
    if bad:
        raise DeployError(f"{who} returned gripper senses {_short(senses.gripper)}: {bad}; give the gap as finger "
                          "gap / open gap (0 closed, 1 open) and the close command and contact as 0 or 1 (docs/deploy.md)")
    tcp = getattr(senses, "tcp", None)
    if tcp is not None:
        v = _vector(tcp, 3)
        if v is None:
            raise DeployError(f"{who} returned a fingertip position {_short(tcp)}; expected None or 3 finite floats (m)")
        if np.abs(v).max() > MAX_TCP:
            raise DeployError(f"{who} returned a fingertip position {_short(tcp)}: beyond {MAX_TCP:g} m of the "
                              "origin; give it in metres in the frame of workspace()")
    return senses


def _sense_units(g: np.ndarray) -> str:
    """What is wrong with gripper senses ``g`` (3 or 5 finite floats) as units go, "" when nothing."""
    lo, hi = GAP_RANGE
    if not lo <= g[0] <= hi:
        return f"the gap {g[0]:.6g} is outside {lo:g}..{hi:g} (a fraction of the open gap, not mm or m)"
    for i, name in ((1, "close command"), (2, "contact")):
        if min(abs(g[i]), abs(g[i] - 1.0)) > BIT_TOLERANCE:
            return f"the {name} {g[i]:.6g} is not 0 or 1"
    if len(g) == 5 and abs(g[3] ** 2 + g[4] ** 2 - 1.0) > 0.05:
        return f"the wrist's sine and cosine ({g[3]:.4g}, {g[4]:.4g}) are not those of one angle"
    return ""


def check_sent(sent, command: np.ndarray, robot) -> np.ndarray:
    """What ``robot.send(command)`` says it sent, as float32 of the command's width (4, or 5 with the wrist):
    ``command`` when it returned None, else its finite values; DeployError naming the adapter for anything else (2
    values would leave ``ticks.csv`` columns empty)."""
    if sent is None:
        return command
    v = _vector(sent, len(command))
    if v is None:
        layout = "vx, vy, vz m/s, wz rad/s, grip" if len(command) == 5 else "vx, vy, vz m/s, grip"
        raise DeployError(f"{adapter_name(robot, 'send')} returned {describe_value(sent)} {_short(sent)}; expected "
                          f"the {len(command)} values it sent ({layout}) or None")
    return v.astype(np.float32)


def check_outcome(out, robot) -> Outcome:
    """``out`` if ``robot.outcome()`` returned a usable :class:`Outcome` (``done`` a bool, ``success`` a bool or
    None, ``reason`` a str); else DeployError naming the adapter."""
    who = adapter_name(robot, "outcome")
    if not all(hasattr(out, k) for k in ("done", "success", "reason")):
        raise DeployError(f"{who} returned {describe_value(out)}; expected Outcome(done, success, reason)")
    bools = (bool, np.bool_)
    if not isinstance(out.done, bools) or not (out.success is None or isinstance(out.success, bools)):
        raise DeployError(f"{who} returned done={out.done!r}, success={out.success!r}; expected done a bool and "
                          "success a bool or None")
    if not isinstance(out.reason, str):
        raise DeployError(f"{who} returned reason={out.reason!r}; expected a str")
    return out


def check_workspace(box, robot):
    """``box`` if ``robot.workspace()`` returned None or (low 3, high 3) finite floats in m with low < high; else
    DeployError naming the adapter."""
    if box is None:
        return None
    try:
        lo, hi = box
    except (TypeError, ValueError):
        lo = hi = None
    lo, hi = _vector(lo, 3), _vector(hi, 3)
    if lo is None or hi is None or not (lo < hi).all():
        raise DeployError(f"{adapter_name(robot, 'workspace')} returned {describe_value(box)} {_short(box)}; "
                          "expected None or (low, high): 3 finite floats each (m), low < high")
    return lo, hi


def _short(x) -> str:
    text = repr(x.tolist() if isinstance(x, np.ndarray) else x)
    return text if len(text) <= 60 else text[:57] + "..."


def stop_first(robot) -> str:
    """Send the robot a stop, shielded from further stop signals (a second Ctrl-C is held until it returns, with a
    warning); returns a note for the error message (saying so when the stop fails too)."""
    with interrupts.shielded("the robot was being stopped"):
        try:
            robot.stop()
            return "the robot was sent a stop command"
        except BaseException as e:  # whatever the adapter raises, the run still reports and writes its summary
            log.error("robot stop failed: %s%s", type(e).__name__, _said(e))
            return f"sending the robot a stop FAILED too ({type(e).__name__}{_said(e)}); stop the arm by hand"


# ------------------------------------------------------------------------------------------ the robot as an env
class RobotEnv:
    """The env protocol of :mod:`graspsim.rollout` over a robot adapter, batch 1, so deploy episodes run through the
    one rollout driver. The hooks send the commands; ``step`` only ends the episode where the robot says so or at
    ``max_ticks``."""

    num_envs = 1
    device = torch.device("cpu")

    def __init__(self, robot, max_ticks: int, guard: Callable, cfg=None):
        self.robot, self.max_ticks, self.guard = robot, max_ticks, guard
        self.cfg = cfg
        """The SimConfig the nets were trained in (the protocol's ``cfg``; None when the caller has none)."""
        self.ticks = 0
        self.end = ""
        self.success_known = False

    @contextlib.contextmanager
    def rendering(self, on: bool):
        yield self

    def reset(self, env_ids: Tensor | Sequence[int] | None = None, seeds: Sequence[int] | None = None) -> dict:
        self.guard("start_episode", self.robot.start_episode, int(seeds[0]) if seeds else 0)
        self.ticks, self.end = 0, ""
        return {}

    def observe(self) -> dict:
        return {}

    def step(self, action: Tensor) -> tuple[dict, Tensor, Tensor, dict]:
        self.ticks += 1
        out = check_outcome(self.guard("outcome", self.robot.outcome), self.robot)
        done = bool(out.done) or self.ticks >= self.max_ticks
        success = bool(out.success) if out.done else False
        reason = out.reason if out.done else "time_limit"
        code = FAILURE_NAMES.index(reason) if reason in FAILURE_NAMES else FAILURE_NAMES.index("timeout")
        self.end = reason if done else ""
        self.success_known = out.success is not None
        info = {"success": torch.tensor([success]), "failure": torch.tensor([code])}
        return {}, torch.zeros(1), torch.tensor([done]), info

    def privileged(self) -> dict:
        return {"steps": torch.tensor([self.ticks])}

    def close(self) -> None:
        """Nothing to release: deploy closes the robot and the camera itself."""


# ------------------------------------------------------------------------------------------ the steps of a tick
class Pacer:
    """Fixed-rate ticks: :meth:`wait` sleeps until the next tick is due and records the interval between tick
    starts (s). ``period`` 0 = no waiting."""

    def __init__(self, period: float, clock=time.perf_counter, sleep=time.sleep):
        self.period, self.clock, self.sleep = period, clock, sleep
        self.intervals: list[float] = []
        self.restart()

    def restart(self) -> None:
        """At an episode start: the first tick starts at once."""
        self.next_t: Optional[float] = None
        self.last_start: Optional[float] = None

    def wait(self) -> float:
        """Sleep to the next tick; returns its start time (clock s)."""
        now = self.clock()
        if self.period > 0 and self.next_t is not None and now < self.next_t:
            self.sleep(self.next_t - now)
            now = self.clock()
        if self.last_start is not None:
            self.intervals.append(now - self.last_start)
        self.last_start = now
        # the next tick is due one period after this one was due (sleep overshoot does not accumulate); after an
        # overrun of more than a period it starts at once, without a burst of ticks to catch up
        due = (now if self.next_t is None else self.next_t) + self.period
        self.next_t = due if due >= now else now
        return now


def capture_deadlines(period: float, frame_timeout: float) -> tuple[float, float]:
    """The capture watchdog's deadlines (s after a tick's camera read started): ``(stop_after, give_up_after)``.
    After ``stop_after`` = :data:`STALE_PERIODS` ``period`` s (the age at which a frame is stale anyway; at period 0,
    no separate stop) the robot is sent ``stop()``; after ``give_up_after`` = ``frame_timeout`` +
    :data:`graspsim.robot.cameras.WATCHDOG_GRACE` s the run ends."""
    give_up = frame_timeout + WATCHDOG_GRACE
    return (min(STALE_PERIODS * period, give_up) if period > 0 else give_up), give_up


def capture(reader: CameraReader, robot, guard: Callable, timeout: float, stall_after: float | None = None,
            on_stall: Callable[[], None] | None = None) -> tuple[Frame, Senses]:
    """The camera's latest frame (its ``read`` waiting at most ``timeout`` s, watched by ``reader``: ``on_stall``
    after ``stall_after`` s) and the robot's senses, both checked."""
    frame = guard("camera", reader.read, timeout, stall_after, on_stall)
    senses = check_senses(guard("senses", robot.senses), robot, 5 if getattr(robot, "wrist", False) else 3)
    return frame, senses


def stale_decision(closed: bool, wrist: bool = False) -> Decision:
    """The decision for a frame too old to act on: zero velocity, the gripper kept as it is, ``stop=stale_frame``,
    no net outputs (NaN action, empty mask, NaN stage times)."""
    still = [0.0] * (4 if wrist else 3)  # the velocity, and with the wrist its yaw rate
    return Decision(command=np.array([*still, 1.0 if closed else -1.0], np.float32),
                    action=np.full(len(still) + 1, np.nan, np.float32), mask=np.zeros((1, 1), bool), visible=False,
                    stop="stale_frame", times_ms={"vision": math.nan, "control": math.nan})


def decide(ctl: Controller, frame: Frame, gripper: np.ndarray, age: float, period: float) -> Decision:
    """The controller's decision on ``frame`` (rgb H,W,3 uint8) and ``gripper`` (3 float32), unless the frame is
    older (``age`` s) than :data:`STALE_PERIODS` control periods (``period`` s; 0 = no stale check)."""
    if period > 0 and age > STALE_PERIODS * period:
        return stale_decision(ctl.closed, getattr(ctl, "wrist", False))
    return ctl.decide(frame.rgb, gripper)


def workspace_guard(vel: np.ndarray, tcp: np.ndarray | None, box, period: float) -> tuple[np.ndarray, bool]:
    """Cut velocity components that would carry the fingertip ``tcp`` (3, m) out of ``box`` = (low 3, high 3)
    within ``period`` s: at most the distance to the face per period, zero at or beyond it. Returns (velocity,
    whether anything was cut)."""
    if tcp is None or box is None:
        return vel, False
    lo, hi = (np.asarray(b, np.float64) for b in box)
    tcp = np.asarray(tcp, np.float64)
    up = np.maximum(hi - tcp, 0.0) / period
    down = -np.maximum(tcp - lo, 0.0) / period
    out = np.clip(vel.astype(np.float64), down, up).astype(np.float32)
    return out, bool((np.abs(out - vel) > 1e-9).any())


def guard_workspace(d: Decision, tcp: np.ndarray | None, box, period: float) -> tuple[np.ndarray, str]:
    """The command to send (4 float32, 5 with the wrist) and the tick's stop reason: the decision's command with its
    velocity cut at the workspace ``box`` (:func:`workspace_guard`); ``stop=workspace`` when that cut and no other
    stop holds."""
    command = d.command.copy()
    command[:3], cut = workspace_guard(command[:3], tcp, box, period)
    return command, d.stop or ("workspace" if cut else "")


def send(robot, guard: Callable, command: np.ndarray) -> np.ndarray:
    """Execute ``command`` (4 float32, 5 with the wrist); returns what the adapter says it sent (as wide; the command
    if it says nothing; checked by :func:`check_sent`)."""
    return check_sent(guard("send", robot.send, command), command, robot)


# ------------------------------------------------------------------------------------------ statistics and log
class TickStats:
    """Stage times (ms) of every tick, stop counts, overruns and capture stalls (reads that outlasted the watchdog's
    stop deadline, each answered by ``stop()``)."""

    def __init__(self, period: float):
        self.period = period
        self.times: dict[str, list[float]] = {s: [] for s in STAGES}
        self.stops: dict[str, int] = {}
        self.overruns = 0
        self.stalls = 0

    def add(self, ms: dict, stop: str, ep_stops: dict, tick_s: float, where: str) -> None:
        """Record one tick: ``ms`` stage -> ms (NaN = not run), its ``stop`` reason (counted here and in
        ``ep_stops``); an overrun (the tick's ``tick_s`` seconds longer than the period) is counted and warned about
        (``where`` names the tick)."""
        if stop:
            self.stops[stop] = self.stops.get(stop, 0) + 1
            ep_stops[stop] = ep_stops.get(stop, 0) + 1
        for k, v in ms.items():
            if not math.isnan(v):
                self.times[k].append(v)
        if self.period > 0 and tick_s > self.period:
            self.overruns += 1
            if self.overruns <= 5 or self.overruns % 100 == 0:
                log.warning("overrun: %s took %.1f ms, the period is %.1f ms (%d overruns so far)",
                            where, ms["tick"], 1e3 * self.period, self.overruns)


def latency_stats(values: list[float]) -> dict:
    """p50, p99, mean, max (ms) and count of one stage's times."""
    if not values:
        return {"p50": None, "p99": None, "mean": None, "max": None, "n": 0}
    a = np.asarray(values)
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "mean": float(a.mean()),
            "max": float(a.max()), "n": int(a.size)}


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def tick_row(episode: int, tick: int, image: str, age: float, gripper: np.ndarray, d: Decision,
             command: np.ndarray, sent: np.ndarray, stop: str, ms: dict) -> dict:
    """One ``ticks.csv`` row (:data:`CSV_FIELDS`; :data:`WRIST_CSV_FIELDS` with the wrist): ``age`` s, ``gripper`` 3
    (5), vectors of 4 (5), ``ms`` stage times."""
    row = {"episode": episode, "tick": tick, "image": image, "frame_age_ms": _fmt(1e3 * age),
           "gap": _fmt(gripper[0]), "close_sense": _fmt(gripper[1]), "contact": _fmt(gripper[2]),
           "visible": int(d.visible), "mask_px": int(d.mask.sum()), "stop": stop}
    wrist = len(command) == 5
    if wrist:
        row["wrist_sin"], row["wrist_cos"] = _fmt(gripper[3]), _fmt(gripper[4])
    names = ("vx", "vy", "vz", "wz", "grip") if wrist else ("vx", "vy", "vz", "grip")
    for prefix, vec in (("act", d.action), ("cmd", command), ("sent", sent)):
        for name, v in zip(names, vec):
            row[f"{prefix}_{name}"] = _fmt(float(v))
    for k, v in ms.items():
        row[f"{k}_ms"] = _fmt(v)
    return row


class TickLog:
    """The rows of ``ticks.csv``; with a recording (an open :class:`graspsim.vision.image_set.ImageSetWriter`), also
    every frame (and its exact mask where the camera knows it) and the rows streamed into the recording as they
    come, so an interrupted run keeps what it recorded."""

    def __init__(self, recording=None, wrist: bool = False):
        self.rows: list[dict] = []
        self.recording = recording
        self.fields = WRIST_CSV_FIELDS if wrist else CSV_FIELDS
        self.file = None
        if recording is not None:
            self.file = open(recording.folder / TICKS_CSV, "w", newline="")
            self.writer = csv.DictWriter(self.file, self.fields)
            self.writer.writeheader()

    def record_frame(self, frame: Frame, episode: int, tick: int) -> str:
        """Write the frame into the recording; returns its file name ("" without a recording)."""
        if self.recording is None:
            return ""
        mask = frame.mask if self.recording.masks else None
        return self.recording.add(frame.rgb, mask, stem=f"ep{episode:03d}_t{tick:04d}") + ".png"

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if self.file is not None:
            self.writer.writerow(row)
            self.file.flush()

    def text(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, self.fields)
        w.writeheader()
        w.writerows(self.rows)
        return buf.getvalue()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def read_fingertip(ctl: Controller, robot, guard: Callable, allow_none: bool = False) -> None:
    """Give the controller the adapter's ``fingertip()`` points (checked by :meth:`Controller.set_fingertip`).
    DeployError naming the adapter when it raises, returns None (unless ``allow_none``: a simulated robot knows its
    points only once a scene is built) or returns values that are no fingertip points or lie outside the trained
    range."""
    who = adapter_name(robot, "fingertip")
    points = guard("fingertip", robot.fingertip)  # an adapter that raises: a DeployError already
    if points is None:
        if allow_none:
            return
        raise DeployError(f"{who} returned None; return the 4 fingertip points x0 y0 x1 y1 (fractions of the frame), "
                          "or drop the method and give --fingertip")
    try:
        ctl.set_fingertip(points, who)
    except ValueError as e:  # values that are no fingertip points, or outside the trained range
        raise DeployError(str(e)) from None


# ------------------------------------------------------------------------------------------ the hooks
class TickHooks(Hooks):
    """One tick per driver step (see the module docstring). ``warmup`` untimed decisions on a blank frame before
    the first tick; ``fallback_period`` (s) is the workspace guard's horizon at ``period`` 0."""

    def __init__(self, camera: Camera, robot, controller: Controller, env: RobotEnv, guard: Callable,
                 tick_log: TickLog, *, period: float, fallback_period: float, frame_timeout: float, warmup: int,
                 progress: bool, clock=time.perf_counter, sleep=time.sleep, reader: CameraReader | None = None,
                 adapter_fingertip: bool = False):
        self.camera, self.robot, self.ctl, self.env, self.guard = camera, robot, controller, env, guard
        self.reader = reader if reader is not None else CameraReader(camera)
        self.stall_after, self.give_up_after = capture_deadlines(period, frame_timeout)
        self.log = tick_log
        self.period, self.horizon = period, period or fallback_period
        self.frame_timeout, self.warmup, self.progress = frame_timeout, warmup, progress
        self.adapter_fingertip = adapter_fingertip
        """Ask the adapter's ``fingertip()`` at each episode start (a net with fingertip senses, no --fingertip)."""
        self.clock = clock
        self.pacer = Pacer(period, clock, sleep)
        self.stats = TickStats(period)
        self.episodes: list[dict] = []
        self.episode = -1
        self.tick = 0
        self.box = None
        self.warmed = False
        self.ep_stops: dict[str, int] = {}
        self.stale_run = 0
        """Stale ticks in a row (:meth:`_frozen`)."""
        self.stale_ticks = 0

    # ---------------------------------------------------------------- episode boundaries
    def on_start(self, slots, episodes) -> None:
        if not self.warmed:
            blank = np.zeros((self.ctl.image_size, self.ctl.image_size, 3), np.uint8)
            for _ in range(self.warmup):
                self.ctl.decide(blank, np.array([1.0, 0.0, 0.0, 0.0, 1.0][:self.ctl.gripper_dim], np.float32))
            if callable(getattr(self.robot, "workspace", None)):
                self.box = check_workspace(self.guard("workspace", self.robot.workspace), self.robot)
            self.warmed = True
        self.ctl.reset()
        if self.adapter_fingertip:
            read_fingertip(self.ctl, self.robot, self.guard)
        self.episode = int(episodes[0])
        self.tick = 0
        self.pacer.restart()
        self.ep_stops = {}

    def on_end(self, fin: Finished) -> None:
        with interrupts.shielded("the robot was being stopped at an episode end"):
            self.guard("stop", self.robot.stop)
        interrupts.check()  # a signal held meanwhile ends the run now
        self.close_episode(self.env.end or "time_limit", bool(fin.success[0]), int(fin.steps[0]))

    def close_episode(self, end: str, success: bool, ticks: int) -> None:
        """Add the open episode's outcome to :attr:`episodes` (nothing when no episode is open)."""
        if self.episode < len(self.episodes):  # no episode open (it never started, or it was closed already)
            return
        known = self.env.success_known
        self.episodes.append({"episode": self.episode, "seed": None, "ticks": ticks,
                              "success": success if known else None, "end": end, "stops": dict(self.ep_stops)})
        if self.adapter_fingertip:  # the adapter's points may differ between episodes
            self.episodes[-1]["fingertip"] = list(self.ctl.fingertip)
        if self.progress:
            log.info("episode %d: %s after %d ticks%s", self.episode, end, ticks,
                     f" (stops {self.ep_stops})" if self.ep_stops else "")

    # ---------------------------------------------------------------- one tick
    def act(self, obs, active):
        interrupts.check()  # a stop signal whose exception was lost still ends the run before this tick
        t0 = self.pacer.wait()
        interrupts.check()
        frame, senses = capture(self.reader, self.robot, self.guard, self.frame_timeout, self.stall_after,
                                self._stalled)
        t1 = self.clock()
        if self.box is not None and getattr(senses, "tcp", None) is None:
            raise DeployError(f"{adapter_name(self.robot, 'senses')} gives no fingertip position (Senses.tcp) but "
                              f"{adapter_name(self.robot, 'workspace')} gives a box, which could then never be "
                              "enforced; return the fingertip position (m) from senses(), or None from workspace()")
        gripper = np.asarray(senses.gripper, np.float32).reshape(-1)[:self.ctl.gripper_dim]  # a sphere net: 3 of 5
        age = time.monotonic() - frame.t
        d = decide(self.ctl, frame, gripper, age, self.period)
        self._frozen(d, age)
        command, stop = guard_workspace(d, getattr(senses, "tcp", None), self.box, self.horizon)
        t2 = self.clock()
        # A first stop signal from here on waits until the command's ticks.csv row is written (then it ends the
        # run): one that landed inside the adapter's send() used to cut the call short wherever it was (after the
        # command went out, the row was lost; inside a driver's transaction, the bus could be left mid-exchange).
        # A second signal still interrupts a send() that hangs.
        with interrupts.shielded("a command was being sent", firm=False):
            sent = send(self.robot, self.guard, command)
            t3 = None
            try:
                t3 = self.clock()
                self.stats.add(self._ms(t0, t1, t2, t3, d), stop, self.ep_stops, t3 - t0,
                               f"tick {self.tick} of episode {self.episode}")
            finally:  # the command went out: its row is written even when a second signal lands meanwhile
                with interrupts.shielded("writing the row of the command just sent"):
                    t3 = self.clock() if t3 is None else t3
                    image = self.log.record_frame(frame, self.episode, self.tick)
                    self.log.add(tick_row(self.episode, self.tick, image, age, gripper, d, command, sent, stop,
                                          self._ms(t0, t1, t2, t3, d)))
        self.tick += 1
        interrupts.check()  # a signal held since send() ends the run now, before the adapter is asked anything else
        return torch.from_numpy(sent[None].astype(np.float32))

    @staticmethod
    def _ms(t0: float, t1: float, t2: float, t3: float, d: Decision) -> dict[str, float]:
        """A tick's stage times (ms) from its clock readings: start, frame and senses in, decision made, sent."""
        return {"capture": 1e3 * (t1 - t0), "vision": d.times_ms["vision"], "control": d.times_ms["control"],
                "decision": 1e3 * (t2 - t1), "send": 1e3 * (t3 - t2), "tick": 1e3 * (t3 - t0)}

    def _frozen(self, d: Decision, age: float) -> None:
        """Count stale ticks in a row; DeployError naming the camera once they span :data:`FROZEN_SECONDS` (and
        :data:`FROZEN_TICKS` ticks): a camera that gives only old frames (a frozen driver, a wrong clock)."""
        if d.stop != "stale_frame":
            self.stale_run = 0
            return
        self.stale_run += 1
        self.stale_ticks += 1
        if self.stale_run >= max(FROZEN_TICKS, FROZEN_SECONDS / self.period):
            raise DeployError(f"{self.reader.who}: every frame of the last {self.stale_run} ticks "
                              f"({self.stale_run * self.period:.1f} s) was older than {STALE_PERIODS:g} control "
                              f"periods (the newest {age:.2f} s old): the camera looks frozen, or its frame times "
                              "are not time.monotonic() at capture")

    def _stalled(self) -> None:
        """The watchdog's first deadline passed with the camera's read still running: stop the robot now (from this
        thread), count it, warn (the first 5 and every 100th)."""
        with interrupts.shielded("the robot was being stopped (capture watchdog)"):
            self.guard("stop", self.robot.stop)
        self.stats.stalls += 1
        if self.stats.stalls <= 5 or self.stats.stalls % 100 == 0:
            log.warning("%s took longer than %.0f ms (tick %d of episode %d): the robot was sent a stop; the run "
                        "ends if it takes longer than %.2f s (%d stalls so far)", self.reader.who,
                        1e3 * self.stall_after, self.tick, self.episode, self.give_up_after, self.stats.stalls)


__all__ = ["CSV_FIELDS", "WRIST_CSV_FIELDS", "DeployError", "Pacer", "RobotEnv", "STAGES", "STALE_PERIODS", "TickHooks", "TickLog",
           "TickStats", "adapter_name", "capture", "capture_deadlines", "check_outcome", "check_senses", "check_sent",
           "check_workspace", "decide", "guard_workspace", "guarded", "latency_stats", "read_fingertip", "send", "stale_decision",
           "stop_first", "tick_row", "workspace_guard"]
