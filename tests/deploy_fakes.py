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
    """Ctrl-C arrives during the third read (the exception the command's SIGINT handler raises; a bare
    KeyboardInterrupt from an adapter while no signal arrived is the adapter's fault, see OwnInterruptRobot)."""

    name = "interrupted"

    def read(self, timeout):
        if self.k == 2:
            import signal

            from graspsim.interrupts import Stopped

            raise Stopped(signal.SIGINT)
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


# ------------------------------------------------------------------------------------------ faults of issue 55
FAKE_LOG = "GRASPSIM_FAKE_LOG"
"""Environment variable naming the file the FileLog fakes append their calls to (one per line: kind, time), so a test
can read what a robot in a subprocess was asked to do."""


def _file_log(kind: str) -> None:
    import os

    path = os.environ.get(FAKE_LOG)
    EVENTS.append((kind, []))
    if path:
        with open(path, "a") as f:
            f.write(f"{kind} {time.monotonic():.6f}\n")


class FileLogRobot(DryRunRobot):
    """Dry-run robot that logs send / stop / close to EVENTS and to the file named by $GRASPSIM_FAKE_LOG."""

    name = "file-log"

    def send(self, command):
        sent = super().send(command)
        _file_log("send")
        return sent

    def stop(self):
        super().stop()
        _file_log("stop")

    def close(self):
        _file_log("close")


class SlowStopRobot(FileLogRobot):
    """Its stop() takes 1.5 s (a controller that ramps down): logs stop_begin, then stop when it is done."""

    name = "slow-stop"

    def stop(self):
        _file_log("stop_begin")
        time.sleep(1.5)
        super().stop()


class SignalInSendRobot(FileLogRobot):
    """Its third send() logs the send, then sends its own process SIGTERM and returns 0.2 s later: a stop signal
    that lands inside the adapter after the command went out (and, with ``hang=True``, a send that never returns
    until a second signal)."""

    name = "signal-in-send"
    hang = False

    def __init__(self):
        super().__init__()
        self.sends = 0

    def send(self, command):
        import os
        import signal

        sent = super().send(command)
        self.sends += 1
        if self.sends == 3:
            os.kill(os.getpid(), signal.SIGTERM)
            t0 = time.monotonic()
            while self.hang or time.monotonic() - t0 < 0.2:  # the handler runs in here
                time.sleep(0.01)
                if self.hang and time.monotonic() - t0 > 60:
                    break
        return sent


class HangingSendRobot(SignalInSendRobot):
    """As :class:`SignalInSendRobot`, but its third send() then hangs (at most a minute)."""

    name = "hanging-send"
    hang = True


class HangingCloseCamera(RedDotCamera):
    """Its close() never returns (until RELEASE, at most a minute)."""

    name = "hanging-close"

    def close(self):
        EVENTS.append(("camera_close", []))
        RELEASE.wait(60.0)


class RaisingCloseRobot(FileLogRobot):
    name = "raising-close"

    def close(self):
        super().close()
        raise OSError("serial port already gone")


class FinalizerSignalRobot(FileLogRobot):
    """In its third send a SIGTERM arrives while Python runs a weakref callback (where Python discards the exception
    a signal handler raises), as in issue 55's pipeline case."""

    name = "finalizer-signal"

    def __init__(self):
        super().__init__()
        self.n = 0

    def send(self, command):
        import os
        import signal
        import weakref

        self.n += 1
        if self.n == 3:
            class Thing:
                pass

            def callback(_):
                os.kill(os.getpid(), signal.SIGTERM)
                t = time.monotonic()
                while time.monotonic() - t < 0.05:  # the handler runs here, inside the callback
                    pass

            thing = Thing()
            ref = weakref.ref(thing, callback)  # noqa: F841 (kept alive until the callback ran)
            del thing
        return super().send(command)


class _CustomStop(BaseException):
    """An adapter's own BaseException subclass."""


class BaseExceptionRobot(_BadValueRobot):
    def bad(self):
        raise _CustomStop("driver gave up")


class GeneratorExitRobot(_BadValueRobot):
    def bad(self):
        raise GeneratorExit


class OwnInterruptRobot(_BadValueRobot):
    """Raises KeyboardInterrupt itself (no Ctrl-C was pressed)."""

    def bad(self):
        raise KeyboardInterrupt


class ExitingConstructorRobot(LoggingRobot):
    def __init__(self):
        raise SystemExit(7)


class ExitingConstructorCamera(RedDotCamera):
    def __init__(self):
        raise SystemExit(9)


class MillimetreGapRobot(_BadValueRobot):
    method = "senses"

    def bad(self):
        return Senses(np.array([80.0, 0.0, 0.0], np.float32))


class ContactScaleRobot(_BadValueRobot):
    method = "senses"

    def bad(self):
        return Senses(np.array([1.0, 0.0, 12.5], np.float32))


class HugeTcpRobot(_BadValueRobot):
    method = "senses"

    def bad(self):
        return Senses(np.array([1.0, 0.0, 0.0], np.float32), np.array([1e30, 0.0, 0.0]))


class BoxWithoutTcpRobot(LoggingRobot):
    """Gives a workspace box, but its senses carry no fingertip position."""

    name = None

    def workspace(self):
        return np.array([-0.2, -0.2, 0.0]), np.array([0.2, 0.2, 0.3])


class TinyFrameCamera(_BadValueCamera):
    def bad(self):
        return Frame(np.zeros((1, 1, 3), np.uint8), time.monotonic(), self.k)


class StripFrameCamera(_BadValueCamera):
    def bad(self):
        return Frame(np.zeros((1, 10000, 3), np.uint8), time.monotonic(), self.k)


class FrozenCamera(RedDotCamera):
    """Gives its first frame again and again (a frozen driver): every frame is as old as the run."""

    name = "frozen"

    def read(self, timeout):
        if self.k == 0:
            self.first = super().read(timeout)
        time.sleep(0.001)
        return self.first


class FileLogCamera(RedDotCamera):
    """RedDotCamera that logs each read to the file named by $GRASPSIM_FAKE_LOG."""

    name = "file-log"

    def read(self, timeout):
        _file_log("read")
        return super().read(timeout)


class EmptyCamera(RedDotCamera):
    """A finite source that has no frame at all."""

    name = "empty"

    def read(self, timeout):
        from graspsim.robot.cameras import EndOfStream

        raise EndOfStream("empty: no frame left")
