"""Fake cameras and robot adapters for tests/test_deploy.py, loaded by ``module:Class`` as a user's would be."""

from __future__ import annotations

import threading
import time

import numpy as np

from graspsim.robot.cameras import CameraTimeout, Frame
from graspsim.robot.robots import DryRunRobot, Senses

EVENTS: list[tuple[str, list[float]]] = []
"""What the fake robots were asked to do, in order: ("send", command) / ("stop", ...)."""


class LoggingRobot(DryRunRobot):
    """Dry-run robot that also appends to the module's EVENTS (so an in-process CLI test can read them)."""

    name = "logging"

    def send(self, command):
        sent = super().send(command)
        EVENTS.append(("send", sent.tolist()))
        return sent

    def stop(self):
        super().stop()
        EVENTS.append(("stop", []))


class RaisingRobot(LoggingRobot):
    """Raises in its third send (a lost connection)."""

    name = "raising"

    def __init__(self):
        super().__init__()
        self.n = 0

    def send(self, command):
        self.n += 1
        if self.n == 3:
            raise ConnectionError("arm controller went away")
        return super().send(command)


class NoSendRobot:
    """Lacks most of the adapter interface."""

    def senses(self):
        return None


class RedDotCamera:
    """A grey table with a red-orange dot that moves; the capture time is now."""

    name = "red-dot"

    def __init__(self, age: float = 0.0):
        self.k, self.age = 0, age

    def read(self, timeout):
        img = np.full((64, 64, 3), 120, np.uint8)
        c = 20 + self.k % 20
        img[c:c + 4, 30:34] = (230, 70, 30)
        self.k += 1
        return Frame(img, time.monotonic() - self.age, self.k - 1)

    def close(self):
        pass


class StaleCamera(RedDotCamera):
    """Every frame was captured half a second ago."""

    name = "stale"

    def __init__(self):
        super().__init__(age=0.5)


class BlankCamera(RedDotCamera):
    """Frames without any target."""

    name = "blank"

    def read(self, timeout):
        self.k += 1
        return Frame(np.full((64, 64, 3), 120, np.uint8), time.monotonic(), self.k - 1)


class InterruptedCamera(RedDotCamera):
    """Ctrl-C arrives during the third read."""

    name = "interrupted"

    def read(self, timeout):
        if self.k == 2:
            raise KeyboardInterrupt
        return super().read(timeout)


class SilentCamera:
    """Never delivers a frame."""

    name = "silent"

    def read(self, timeout):
        raise CameraTimeout(f"silent: no new frame within {timeout:g} s")


# ------------------------------------------------------------------------------------------ faults of issue 38
STAMPS: list[tuple[str, float]] = []
"""("send" | "stop" | "blocked", time.monotonic()) of the timed fakes below, in order."""
RELEASE = threading.Event()
"""Set by a test's teardown to free a BlockingCamera's abandoned read."""


class TimedRobot(LoggingRobot):
    """LoggingRobot that also stamps every send and stop into STAMPS."""

    name = "timed"

    def send(self, command):
        STAMPS.append(("send", time.monotonic()))
        return super().send(command)

    def stop(self):
        STAMPS.append(("stop", time.monotonic()))
        super().stop()


class BlockingCamera(RedDotCamera):
    """Gives two frames, then its read blocks (until RELEASE, at most a minute), ignoring its timeout."""

    name = "blocking"

    def read(self, timeout):
        if self.k == 2:
            STAMPS.append(("blocked", time.monotonic()))
            RELEASE.wait(60.0)
        return super().read(timeout)


class SlowCamera(RedDotCamera):
    """Its third read takes 0.3 s (a USB hiccup), then it is fine again."""

    name = "slow"

    def read(self, timeout):
        if self.k == 2:
            STAMPS.append(("blocked", time.monotonic()))
            time.sleep(0.3)
        return super().read(timeout)


class _BadValueCamera(RedDotCamera):
    """Gives two good frames, then ``bad()`` from every read. Named by its module:Class spec."""

    name = None

    def read(self, timeout):
        if self.k >= 2:
            return self.bad()
        return super().read(timeout)


class NoneCamera(_BadValueCamera):
    def bad(self):
        return None


class TupleCamera(_BadValueCamera):
    def bad(self):
        return (np.zeros((64, 64, 3), np.uint8), time.monotonic())


class EmptyFrameCamera(_BadValueCamera):
    def bad(self):
        return Frame(np.zeros((0, 0, 3), np.uint8), time.monotonic(), self.k)


class FloatFrameCamera(_BadValueCamera):
    def bad(self):
        return Frame(np.zeros((64, 64, 3), np.float32), time.monotonic(), self.k)


class GreyFrameCamera(_BadValueCamera):
    def bad(self):
        return Frame(np.zeros((64, 64), np.uint8), time.monotonic(), self.k)


class NanTimeCamera(_BadValueCamera):
    def bad(self):
        return Frame(np.zeros((64, 64, 3), np.uint8), float("nan"), self.k)


class WallClockCamera(_BadValueCamera):
    """Stamps its frames with time.time(), another clock than time.monotonic()."""

    def bad(self):
        return Frame(np.zeros((64, 64, 3), np.uint8), time.time() + 1e6, self.k)


class RuntimeErrorCamera(RedDotCamera):
    """Raises RuntimeError (not a CameraError) in its third read."""

    name = "runtime-error"

    def read(self, timeout):
        if self.k == 2:
            raise RuntimeError("USB bus reset")
        return super().read(timeout)


class _BadValueRobot(LoggingRobot):
    """Two good ticks, then ``bad()`` from the method named by ``method``. Named by its module:Class spec."""

    name = None

    method = "send"

    def __init__(self):
        super().__init__()
        self.sends = 0

    def send(self, command):
        self.sends += 1
        if self.method == "send" and self.sends >= 3:
            EVENTS.append(("send", list(command)))
            return self.bad()
        return super().send(command)

    def senses(self):
        if self.method == "senses" and self.sends >= 2:
            return self.bad()
        return super().senses()

    def outcome(self):
        if self.method == "outcome" and self.sends >= 2:
            return self.bad()
        return super().outcome()


class TwoValueSendRobot(_BadValueRobot):
    def bad(self):
        return np.zeros(2, np.float32)


class NanSendRobot(_BadValueRobot):
    def bad(self):
        return np.full(4, np.nan, np.float32)


class ExitingRobot(_BadValueRobot):
    def bad(self):
        raise SystemExit(5)


class NoneSensesRobot(_BadValueRobot):
    method = "senses"

    def bad(self):
        return None


class TupleSensesRobot(_BadValueRobot):
    method = "senses"

    def bad(self):
        return (1.0, 0.0, 0.0)


class NanSensesRobot(_BadValueRobot):
    method = "senses"

    def bad(self):
        return Senses(np.array([np.nan, 0.0, 0.0], np.float32))


class NoneOutcomeRobot(_BadValueRobot):
    method = "outcome"

    def bad(self):
        return None


class BadWorkspaceRobot(LoggingRobot):
    name = None

    def workspace(self):
        return (np.zeros(3), np.zeros(2))


class WristRobot(LoggingRobot):
    """A dry-run arm with a wrist: 5 senses (the wrist angle integrated from the commanded yaw rates)."""

    name = "wrist"
    wrist = True

    def __init__(self):
        super().__init__(wrist=True)


class CalibratedWristRobot(WristRobot):
    """A wrist arm that reports its measured fingertip points (``POINTS``, fractions of the frame)."""

    name = "calibrated"
    POINTS = [0.5, 0.52, 0.5, 0.46]

    def fingertip(self):
        return list(self.POINTS)


class MiscalibratedWristRobot(CalibratedWristRobot):
    """Reports a fingertip point far outside any trained mount (the centre at the frame's left edge); logs
    ("start", []) when asked to start an episode (it would move to its home pose)."""

    name = "miscalibrated"
    POINTS = [0.02, 0.5, 0.5, 0.44]

    def start_episode(self, seed):
        EVENTS.append(("start", []))
        super().start_episode(seed)


class UncalibratedWristRobot(MiscalibratedWristRobot):
    """Has fingertip() but returns None."""

    name = "uncalibrated"

    def fingertip(self):
        return None
