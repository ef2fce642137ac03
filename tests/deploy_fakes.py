"""Fake cameras and robot adapters for tests/test_deploy.py, loaded by ``module:Class`` as a user's would be."""

from __future__ import annotations

import time

import numpy as np

from graspsim.dagger.cameras import CameraTimeout, Frame
from graspsim.dagger.robots import DryRunRobot

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
