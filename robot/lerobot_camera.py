"""LeRobot's cameras as graspsim cameras: the camera a user already set up for LeRobot (``lerobot.cameras``: OpenCV,
Intel RealSense, ...) serves ``graspsim deploy`` and ``graspsim record`` unchanged.

>>> graspsim deploy ... --camera lerobot:opencv:/dev/video2:640x480@30 --robot so101 ...
>>> cam = LeRobotCamera(OpenCVCamera(OpenCVCameraConfig(index_or_path=0, width=640, height=480, fps=30)))

``--camera lerobot:KIND:SOURCE[:WxH@FPS]``: ``KIND`` is ``opencv`` (``SOURCE`` a device index, a /dev/video path or a
video file) or ``realsense`` (``SOURCE`` the serial number); the size and rate are LeRobot's ``width``, ``height``,
``fps`` (default: the camera's own). Frames are asked for in RGB. Our own OpenCV camera (``--camera 0``,
:class:`graspsim.robot.cameras.DeviceCamera`) needs no LeRobot.

``async_read`` hands over only a frame not handed over before (LeRobot's reader thread keeps the newest); its capture
time is the camera's ``latest_timestamp`` (``time.perf_counter()`` at capture, read right after the frame, so a frame
that arrived in between can make the age look up to one frame period younger), or the time of the read for a camera
without one. Its errors become ours:
``TimeoutError`` -> :class:`CameraTimeout`, anything else (an unplugged camera, a failed read) -> :class:`CameraError`
naming the camera; the robot loop stops the robot before it reports them.
"""

from __future__ import annotations

import re
import time

import numpy as np

from .interfaces import Camera, CameraError, CameraTimeout, Frame

PREFIX = "lerobot:"
KINDS = ("opencv", "realsense")
_SIZE = re.compile(r"^(\d+)x(\d+)(?:@(\d+(?:\.\d+)?))?$")


class LeRobotCamera(Camera):
    """A connected ``lerobot.cameras.Camera`` read through ``async_read`` (see the module docstring). ``connect``:
    connect it here (False when the caller already did)."""

    def __init__(self, camera, name: str | None = None, connect: bool = True):
        self.camera = camera
        self.name = name or f"lerobot:{camera}"
        self.k = 0
        if connect:
            try:
                camera.connect()
            except Exception as e:
                raise CameraError(f"camera {self.name}: LeRobot could not open it: {type(e).__name__}: "
                                  f"{' '.join(str(e).split())}") from None

    def read(self, timeout: float) -> Frame:
        try:
            img = self.camera.async_read(timeout_ms=1e3 * float(timeout))
        except TimeoutError as e:
            raise CameraTimeout(f"camera {self.name}: no new frame within {timeout:g} s ({e})") from None
        except Exception as e:
            raise CameraError(f"camera {self.name} failed (unplugged?): {type(e).__name__}: "
                              f"{' '.join(str(e).split())}") from None
        t = self._capture_time()
        if not isinstance(img, np.ndarray) or img.ndim != 3 or img.shape[2] < 3:
            raise CameraError(f"camera {self.name}: LeRobot returned {type(img).__name__} "
                              f"{getattr(img, 'shape', '')}; expected H,W,3")
        rgb = np.ascontiguousarray(img[..., :3]).astype(np.uint8, copy=False)
        self.k += 1
        return Frame(rgb, t, self.k - 1)

    def _capture_time(self) -> float:
        """``time.monotonic()`` at capture: from the camera's ``latest_timestamp`` (LeRobot's OpenCV and RealSense
        cameras stamp each frame with ``time.perf_counter()``) when it has one, else now."""
        now, stamp = time.monotonic(), getattr(self.camera, "latest_timestamp", None)
        if isinstance(stamp, (int, float)) and np.isfinite(stamp):
            age = time.perf_counter() - float(stamp)
            if 0.0 <= age < 10.0:
                return now - age
        return now

    def close(self) -> None:
        try:
            if getattr(self.camera, "is_connected", True):
                self.camera.disconnect()
        except Exception:  # closing an unplugged camera may fail; nothing is left to release
            pass


def parse_spec(src: str) -> tuple[str, str, dict]:
    """``lerobot:KIND:SOURCE[:WxH[@FPS]]`` -> (kind, source, {width, height, fps}); ValueError naming the spec."""
    body = src[len(PREFIX):]
    kind, _, rest = body.partition(":")
    size: dict = {}
    m = _SIZE.match(rest.rsplit(":", 1)[-1]) if ":" in rest else None
    if m:
        rest = rest.rsplit(":", 1)[0]
        size = {"width": int(m.group(1)), "height": int(m.group(2))}
        if m.group(3):
            size["fps"] = float(m.group(3)) if "." in m.group(3) else int(m.group(3))
    if kind not in KINDS or not rest:
        raise CameraError(f"camera {src!r}: expected lerobot:KIND:SOURCE[:WxH@FPS] with KIND one of "
                          f"{', '.join(KINDS)}, e.g. lerobot:opencv:0 or lerobot:opencv:/dev/video2:640x480@30")
    return kind, rest, size


def open_lerobot_camera(src: str) -> LeRobotCamera:
    """The LeRobot camera named by ``src`` (``lerobot:KIND:SOURCE[:WxH@FPS]``), connected; CameraError (a
    ValueError) naming ``src`` when LeRobot is missing, the spec is wrong or the camera does not open."""
    kind, source, size = parse_spec(src)
    try:
        if kind == "opencv":
            from lerobot.cameras.configs import ColorMode
            from lerobot.cameras.opencv import OpenCVCamera, OpenCVCameraConfig

            index = int(source) if source.isdigit() else source
            cam = OpenCVCamera(OpenCVCameraConfig(index_or_path=index, color_mode=ColorMode.RGB, **size))
        else:
            from lerobot.cameras.configs import ColorMode
            from lerobot.cameras.realsense import RealSenseCamera, RealSenseCameraConfig

            cam = RealSenseCamera(RealSenseCameraConfig(serial_number_or_name=source, color_mode=ColorMode.RGB,
                                                        **size))
    except ImportError as e:
        raise CameraError(f"camera {src!r} needs LeRobot's camera classes ({e}); pip install 'graspsim[so101]'"
                          + (" and pyrealsense2" if kind == "realsense" else "")) from None
    except Exception as e:
        raise CameraError(f"camera {src!r}: {type(e).__name__}: {' '.join(str(e).split())}") from None
    return LeRobotCamera(cam, name=src)


__all__ = ["KINDS", "LeRobotCamera", "PREFIX", "open_lerobot_camera", "parse_spec"]
