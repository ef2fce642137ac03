"""The two interfaces of the robot stack, as code: a camera gives :class:`Frame` s (:class:`Camera`), a robot adapter
takes commands and reports :class:`Senses` and an :class:`Outcome` (:class:`Robot`), with the checks the loop applies to
what they return (:func:`check_frame`).

The sources and adapters the project ships live in :mod:`graspsim.robot.cameras` and :mod:`graspsim.robot.robots`,
which re-export the camera's names and the robot's (``from graspsim.robot.cameras import Camera, Frame``; ``from
graspsim.robot import Robot, Camera``). The adapters that need an optional package (LeRobot's cameras, the SO-101
on LeRobot's driver) take the interfaces from here, so ``open_camera`` and ``open_robot`` can import them on demand
without an import circle. The tables of methods and their units are in those two modules' docstrings and in
docs/deploy.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

FUTURE_TOLERANCE = 1.0
"""Seconds a frame's capture time may lie ahead of ``time.monotonic()`` (clock jitter of a driver) before it is
refused as taken from another clock (``time.time()`` would make every frame look fresh)."""
MIN_FRAME_SIDE = 16
"""Smallest frame side accepted (px): the nets see 64-96 px, and a frame of a few pixels holds nothing to act on."""
MAX_ASPECT = 4.0
"""Largest ratio of a frame's long side to its short side (cameras give 4:3 to 32:9); a 1x10000 frame is no image."""


class CameraError(ValueError):
    """A camera that cannot be opened or read."""


class CameraTimeout(CameraError):
    """No new frame within the timeout."""


@dataclass
class Frame:
    rgb: np.ndarray
    """H,W,3 uint8 RGB."""
    t: float
    """time.monotonic() when the frame was captured."""
    index: int
    """Running number of the frame from this source."""
    mask: np.ndarray | None = None
    """H,W bool exact target mask where the source knows it (simulated cameras), else None."""


class Camera:
    """Interface of a camera source (the sources' table: :mod:`graspsim.robot.cameras`)."""

    name = "camera"

    def read(self, timeout: float) -> Frame:
        raise NotImplementedError

    def close(self) -> None:
        pass


def part_name(part, kind: str, method: str) -> str:
    """How errors name a camera or adapter call: ``camera 'name' (Class.read)``."""
    name = getattr(part, "name", None)
    named = f" {name!r}" if isinstance(name, str) else ""
    return f"{kind}{named} ({type(part).__name__}.{method})"


def describe_value(x) -> str:
    """A short description of a value an adapter returned, for error messages."""
    if x is None:
        return "None"
    if isinstance(x, np.ndarray):
        return f"an array of shape {x.shape} {x.dtype}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)}"
    return f"a {type(x).__name__}"


def check_frame(frame, who: str) -> Frame:
    """``frame`` if it is a usable frame (``rgb`` H,W,3 uint8 with H, W >= 1; ``t`` a finite capture time in
    ``time.monotonic()`` seconds, not ahead of now by more than :data:`FUTURE_TOLERANCE`); else CameraError naming
    ``who`` (e.g. ``camera 'x' (MyCam.read)``) and what it returned."""
    if not (hasattr(frame, "rgb") and hasattr(frame, "t")):
        raise CameraError(f"{who} returned {describe_value(frame)}; expected a graspsim.robot.cameras.Frame "
                          "(rgb H,W,3 uint8, t = time.monotonic() at capture)")
    rgb = frame.rgb
    if not (isinstance(rgb, np.ndarray) and rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3
            and rgb.shape[0] > 0 and rgb.shape[1] > 0):
        four = isinstance(rgb, np.ndarray) and rgb.ndim == 3 and rgb.shape[2] == 4
        hint = ("; for an RGBA (or BGRA) frame give its colour channels in the order red, green, blue, without "
                "alpha (rgb[..., :3], or rgb[..., 2::-1] for BGRA)") if four else ""
        raise CameraError(f"{who} returned a frame whose rgb is {describe_value(rgb)}; expected H,W,3 uint8 RGB "
                          f"(H, W >= 1){hint}")
    h, w = rgb.shape[:2]
    if min(h, w) < MIN_FRAME_SIDE or max(h, w) > MAX_ASPECT * min(h, w):
        raise CameraError(f"{who} returned a {w}x{h} frame; expected at least {MIN_FRAME_SIDE} px a side and at most "
                          f"{MAX_ASPECT:g}:1 between the sides (a camera image, not a strip or a few pixels)")
    try:
        t = float(frame.t)
    except (TypeError, ValueError):
        raise CameraError(f"{who} returned a frame time {frame.t!r}; expected time.monotonic() at capture "
                          "(s)") from None
    if not math.isfinite(t):
        raise CameraError(f"{who} returned a frame time of {t}; expected time.monotonic() at capture (s) (a "
                          "non-finite time would switch off the stale-frame check)")
    ahead = t - time.monotonic()
    if ahead > FUTURE_TOLERANCE:
        raise CameraError(f"{who} returned a frame time {ahead:.3g} s ahead of time.monotonic(); give "
                          "time.monotonic() at capture (time.time() is another clock)")
    return frame


ROBOT_METHODS = ("start_episode", "senses", "send", "stop", "outcome")


@dataclass
class Senses:
    gripper: np.ndarray
    """3 float32: finger gap / open gap, last close command 0/1, table contact 0/1."""
    tcp: np.ndarray | None = None
    """3 float: fingertip centre (m) where the adapter knows it (forward kinematics), else None."""


@dataclass
class Outcome:
    done: bool = False
    success: bool | None = None
    """None where the adapter cannot tell (a real arm without a success sensor)."""
    reason: str = ""
    """e.g. success, timeout, missed_grasp, pushed_away, dropped (simulated robots)."""


class Robot:
    """Interface of a robot adapter (the methods' table: :mod:`graspsim.robot.robots`)."""

    name = "robot"
    wrist = False
    """True when the adapter turns the wrist: 5 gripper senses, and 5-float commands from a wrist-turning net."""

    def start_episode(self, seed: int) -> None:
        pass

    def senses(self) -> Senses:
        raise NotImplementedError

    def send(self, command: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def stop(self) -> None:
        pass

    def outcome(self) -> Outcome:
        return Outcome()

    def workspace(self) -> tuple[np.ndarray, np.ndarray] | None:
        return None

    def close(self) -> None:
        pass


__all__ = ["Camera", "CameraError", "CameraTimeout", "FUTURE_TOLERANCE", "Frame", "MAX_ASPECT", "MIN_FRAME_SIDE",
           "Outcome", "ROBOT_METHODS", "Robot", "Senses", "check_frame", "describe_value", "part_name"]
