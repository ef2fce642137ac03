"""Camera sources of the robot loop (``graspsim deploy``) and of ``graspsim record``: one small interface, several
sources. Write your own camera against :class:`Camera` here (``from graspsim.robot.cameras import Camera, Frame``).

A camera gives the **latest frame with its capture time**:

>>> cam = open_camera("0")                 # OpenCV device 0; or "clip.mp4", "my_set/", "sim", "bullet", "pkg.mod:Cls"
>>> f = cam.read(timeout=2.0)             # Frame: rgb H,W,3 uint8, t (time.monotonic() at capture), index
>>> cam.close()

``read`` raises :class:`CameraTimeout` when no new frame arrives within ``timeout`` seconds, and
:class:`EndOfStream` when a finite source (video file, image folder) has no frame left. ``deploy`` and ``record``
call ``read`` through a :class:`CameraReader`: from one worker thread, with a watchdog, so that a ``read`` that
never returns cannot hang the thread that drives the robot, and every frame is checked (:func:`check_frame`).
Sources:

========================= =====================================================================================
``SRC``                    source
========================= =====================================================================================
an integer (``0``)         OpenCV capture device; a background thread keeps only the newest frame
a video file               frames in order, one per ``read`` (capture time = time of the read)
a folder of images         replay in name order (``DIR`` or ``DIR/images``: :mod:`graspsim.vision.image_set`)
``sim`` / ``bullet``       the wrist camera of the simulated world that the robot ``sim`` / ``bullet`` moves
``lerobot:KIND:SOURCE``    a LeRobot camera (``lerobot:opencv:0``, ``lerobot:realsense:SERIAL``; :mod:`.lerobot_camera`)
``module:Class``           a user's class: ``Class()`` with ``read(timeout) -> Frame`` and ``close()``
========================= =====================================================================================

Simulated cameras also give the exact target mask (``Frame.mask``), so a recording from them can be scored
with ``eval-real``.
"""

from __future__ import annotations

import importlib
import logging
import queue
import re
import threading
import time
from pathlib import Path

import numpy as np

from graspsim.vision.image_set import square_crop  # re-exported: cameras and record cut frames with it

from .interfaces import (FUTURE_TOLERANCE, MAX_ASPECT, MIN_FRAME_SIDE, Camera, CameraError,  # noqa: F401 (re-exported)
                         CameraTimeout, Frame, check_frame, describe_value, part_name)

log = logging.getLogger(__name__)

VIDEO_EXTENSIONS = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v")
SIM_CAMERAS = ("sim", "bullet", "mujoco")
MAX_DEVICE_INDEX = 255
"""Largest OpenCV device index accepted (Linux numbers /dev/video0..255). Negative or larger numbers are refused
before OpenCV sees them: it crashes on some (``-1``) and raises on others."""
WATCHDOG_GRACE = 0.5
"""Seconds a camera's ``read(timeout)`` may run past its ``timeout`` before the watchdog of :class:`CameraReader`
declares the camera hung (a camera that honours its timeout has raised :class:`CameraTimeout` by then)."""
CLOSE_TIMEOUT = 5.0
"""Seconds a camera's or robot's ``close()`` may take at the end of a run (:func:`close_within`); one still running
then is abandoned in its daemon thread, named in a warning, and the process exits all the same."""
_INTEGER = re.compile(r"[+-]?[0-9]+")


class CameraHung(CameraError):
    """A camera's ``read`` did not return within its timeout plus :data:`WATCHDOG_GRACE`."""


class EndOfStream(Exception):
    """A finite source (video file, image folder) has given its last frame."""


class CameraReader:
    """Calls ``camera.read(timeout)`` in one worker thread (a daemon named ``graspsim-camera``, the same thread for
    every read), so that the caller's thread never blocks in a camera for longer than the watchdog allows: robot
    adapters are only ever called from the caller's thread, also when a camera hangs. Each read waits for
    ``stall_after`` s, then calls ``on_stall`` once (deploy: ``robot.stop()``) and waits on until ``hung_after``
    s, then raises :class:`CameraHung`; see :meth:`read`. Returned frames are checked by :func:`check_frame`;
    exceptions of the camera (also Ctrl-C and :class:`EndOfStream`) are raised in the caller's thread."""

    def __init__(self, camera):
        self.camera = camera
        self.who = part_name(camera, "camera", "read")
        self._requests: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self.in_flight = False
        """A read was started and its result not taken (True after a hang or an interruption)."""
        self.hung = False
        """The watchdog gave up on a read (:class:`CameraHung`)."""
        self._thread = threading.Thread(target=self._work, name="graspsim-camera", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            timeout = self._requests.get()
            if timeout is None:
                return
            try:
                result = (True, self.camera.read(timeout))
            except BaseException as e:  # handed to the caller's thread, whatever it is
                result = (False, e)
            self._results.put(result)

    def read(self, timeout: float, stall_after: float | None = None, on_stall=None) -> Frame:
        """The camera's next frame: ``camera.read(timeout)`` (``timeout`` s), waited for at most ``timeout`` +
        :data:`WATCHDOG_GRACE` s; ``on_stall()`` is called once when it has not returned after ``stall_after`` s
        (None: never). CameraHung when it does not return in time; the read is then abandoned in its thread."""
        hung_after = timeout + WATCHDOG_GRACE
        if self.in_flight:  # an earlier read never returned: do not queue another behind it
            raise CameraHung(f"{self.who} is still blocked in an earlier read")
        self._requests.put(timeout)
        self.in_flight = True
        t0 = time.monotonic()
        try:
            ok, value = self._results.get(timeout=min(stall_after, hung_after) if stall_after else hung_after)
        except queue.Empty:
            if on_stall is not None and stall_after and stall_after < hung_after:
                on_stall()
            try:
                ok, value = self._results.get(timeout=max(0.0, hung_after - (time.monotonic() - t0)))
            except queue.Empty:
                self.hung = True
                raise CameraHung(f"{self.who} did not return within {hung_after:g} s (its timeout {timeout:g} s + "
                                 f"{WATCHDOG_GRACE:g} s grace): the capture watchdog gave up on it") from None
        self.in_flight = False
        if not ok:
            raise value
        return check_frame(value, self.who)

    def close(self, wait: float = 1.0) -> bool:
        """End the worker, once a read in flight has returned (waiting for it at most ``wait`` s); returns whether
        the camera is free to be closed (False: a read is still running in it)."""
        self._requests.put(None)
        self._thread.join(timeout=wait if self.in_flight else max(wait, 1.0))
        return not self._thread.is_alive()


def close_camera(camera, reader: CameraReader | None, wait: float = 1.0, close_timeout: float | None = None) -> bool:
    """``camera.close()`` once ``reader`` is done with it (waiting for a read in flight at most ``wait`` s, with a
    warning when that may take more than a second); a camera still blocked in a read is left alone (closing it could
    block as well), with a warning. ``close()`` itself is given ``close_timeout`` s (default :data:`CLOSE_TIMEOUT`,
    :func:`close_within`). Returns whether the camera was closed."""
    if reader is not None:
        if reader.in_flight and wait > 1.0:
            log.warning("%s has not returned yet; waiting up to %.1f s for it before closing the camera", reader.who,
                        wait)
        if not reader.close(wait):
            log.warning("%s is still blocked; it was not closed", reader.who)
            return False
    close = getattr(camera, "close", None)
    if not callable(close):
        return True
    return close_within(close, CLOSE_TIMEOUT if close_timeout is None else close_timeout,
                        part_name(camera, "camera", "close"))


def close_within(close, seconds: float, who: str) -> bool:
    """Call ``close()`` in a daemon thread and wait for it at most ``seconds``; returns whether it returned. One still
    running then is abandoned (a warning names ``who``, e.g. ``camera 'x' (MyCam.close)``), so a hanging driver
    cannot keep the process from exiting; an exception from it is logged as a warning naming ``who``."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            close()
        except BaseException as e:  # whatever the adapter raises: reported below, never lost silently
            failure.append(e)

    t = threading.Thread(target=run, name="graspsim-close", daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        log.warning("%s did not return within %g s; it was abandoned (the process exits without waiting for it)",
                    who, seconds)
        return False
    if failure:
        e = failure[0]
        log.warning("%s raised %s%s", who, type(e).__name__, f": {e}" if str(e) else "")
    return True


def check_source(src: str, flag: str = "--camera") -> str:
    """``src`` stripped; CameraError naming ``flag`` when it is empty (an empty path is the current folder, whose
    images would be replayed as if they were a camera)."""
    src = str(src).strip()
    if not src:
        raise CameraError(f"{flag} is empty; give {describe_sources()}")
    return src


def _bgr_to_rgb(img: np.ndarray) -> np.ndarray:
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, -1)
    return np.ascontiguousarray(img[..., 2::-1]) if img.shape[2] >= 3 else np.repeat(img[..., :1], 3, -1)


class ImageFolderCamera(Camera):
    """Replays a folder of PNG/JPEG frames in name order (``folder`` or ``folder/images``), read by the image-set
    module (:mod:`graspsim.vision.image_set`)."""

    def __init__(self, folder: str | Path):
        from graspsim.vision.image_set import images_folder, list_images

        folder = images_folder(folder)
        try:
            self.files = list_images(folder)
        except (OSError, ValueError) as e:
            raise CameraError(f"camera {folder}: {e}") from None
        self.name = f"folder:{folder}"
        self.k = 0

    def read(self, timeout: float) -> Frame:
        from graspsim.vision.image_set import read_image

        if self.k >= len(self.files):
            raise EndOfStream(f"{self.name}: all {len(self.files)} frames replayed")
        try:
            rgb = read_image(self.files[self.k])
        except (OSError, ValueError) as e:  # a damaged or vanished frame: the camera failed
            raise CameraError(f"{self.name}: {e}") from None
        self.k += 1
        return Frame(rgb, time.monotonic(), self.k - 1)


class VideoCamera(Camera):
    """A video file, one frame per read."""

    def __init__(self, path: str | Path):
        import cv2

        self.cap = cv2.VideoCapture(str(path))
        if not self.cap.isOpened():
            raise CameraError(f"camera {path}: OpenCV cannot open this video file")
        self.name = f"video:{path}"
        self.k = 0

    def read(self, timeout: float) -> Frame:
        ok, img = self.cap.read()
        if not ok:
            if self.k == 0:
                raise CameraError(f"{self.name}: the video holds no readable frame")
            raise EndOfStream(f"{self.name}: end of video after {self.k} frames")
        self.k += 1
        return Frame(_bgr_to_rgb(img), time.monotonic(), self.k - 1)

    def close(self) -> None:
        self.cap.release()


class DeviceCamera(Camera):
    """An OpenCV capture device; a thread grabs continuously and keeps the newest frame and its time, so a read
    never returns a frame that waited in the driver's buffer."""

    def __init__(self, index: int):
        import cv2

        self.cap = cv2.VideoCapture(int(index))
        if not self.cap.isOpened():
            raise CameraError(f"camera {index}: OpenCV cannot open capture device {index} (is it connected, "
                              "and is it the right index?)")
        self.name = f"device:{index}"
        self._cond = threading.Condition()
        self._latest: Frame | None = None
        self._served = -1
        self._running = True
        self._thread = threading.Thread(target=self._grab, name=f"camera-{index}", daemon=True)
        self._thread.start()

    def _grab(self) -> None:
        k = 0
        while self._running:
            ok, img = self.cap.read()
            t = time.monotonic()
            if not ok:
                time.sleep(0.005)
                continue
            with self._cond:
                self._latest = Frame(_bgr_to_rgb(img), t, k)
                self._cond.notify_all()
            k += 1

    def read(self, timeout: float) -> Frame:
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._latest is None or self._latest.index == self._served:
                left = deadline - time.monotonic()
                if left <= 0 or not self._cond.wait(left):
                    raise CameraTimeout(f"{self.name}: no new frame within {timeout:g} s")
            self._served = self._latest.index
            return self._latest

    def close(self) -> None:
        self._running = False
        self._thread.join(timeout=1.0)
        self.cap.release()


class SimCamera(Camera):
    """The wrist camera of a simulated world (:class:`graspsim.robot.robots.SimWorld`): renders its current scene."""

    def __init__(self, world):
        self.world = world
        self.name = world.backend
        self.k = 0

    def read(self, timeout: float) -> Frame:
        rgb, mask = self.world.render()
        self.k += 1
        return Frame(rgb, time.monotonic(), self.k - 1, mask)


class SensorCamera(SimCamera):
    """The MuJoCo world's wrist camera over its whole 16:9 sensor (:meth:`graspsim.mujoco.MujocoGraspEnv.sensor_view`,
    with the scene's blur and noise): wide frames such as a real SO-101 camera gives, whose centred square is the
    ``mujoco`` camera's image. For checking ``deploy --frame-crop`` (``benchmarks/so101_wide_camera.py``); no mask."""

    def __init__(self, world):
        if not callable(getattr(world.env, "sensor_view", None)):
            raise ValueError(f"SensorCamera: the {world.backend!r} world has no whole-sensor view (MuJoCo only)")
        super().__init__(world)
        self.name = f"{world.backend}-sensor"

    def read(self, timeout: float) -> Frame:
        rgb = self.world.env.sensor_view(0)
        self.k += 1
        return Frame(rgb, time.monotonic(), self.k - 1)


def load_class(spec: str, what: str):
    """Import ``module:Class`` and return the class; ValueError naming the spec when that fails."""
    mod_name, _, cls_name = spec.partition(":")
    if not mod_name or not cls_name:
        raise ValueError(f"{what} {spec!r}: expected module:Class")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:  # an import error of the user's module, whatever its type
        raise ValueError(f"{what} {spec!r}: cannot import module {mod_name!r} ({type(e).__name__}: {e})") from None
    cls = getattr(mod, cls_name, None)
    if cls is None:
        raise ValueError(f"{what} {spec!r}: module {mod_name!r} has no attribute {cls_name!r}")
    return cls


def construct(spec: str, what: str, error: type[Exception] = ValueError):
    """``(instance, class)`` of a user's adapter class ``spec`` (``module:Class``, :func:`load_class`) built with no
    arguments. Whatever its constructor raises (SystemExit and a user's own BaseException too; Ctrl-C passes) becomes
    one ``error`` line naming the class."""
    cls = load_class(spec, what)
    try:
        return cls(), cls
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        raise error(f"{what} {spec!r}: {cls.__name__}() raised {type(e).__name__}: {e}") from None


def device_index(src: str, flag: str = "--camera") -> int | None:
    """The OpenCV device index ``src`` names (an integer 0..:data:`MAX_DEVICE_INDEX`), None when ``src`` is not an
    integer (a path, URL, ``sim``, ``module:Class``); ValueError naming ``flag`` for other integers."""
    src = str(src).strip()
    if not _INTEGER.fullmatch(src):
        return None
    n = int(src)
    if not 0 <= n <= MAX_DEVICE_INDEX:
        raise CameraError(f"{flag} {src}: an OpenCV device index is a whole number from 0 to {MAX_DEVICE_INDEX}; "
                          f"or give a video file, an image folder, 'sim', 'bullet' or module:Class")
    return n


def describe_sources() -> str:
    return ("an OpenCV device index (0), a video file (" + ", ".join(VIDEO_EXTENSIONS) + "), a folder of images, "
            "'sim', 'bullet', a LeRobot camera (lerobot:opencv:0), or module:Class")


def open_camera(src: str, world=None) -> Camera:
    """Open camera ``src`` (see the module docstring); ``world`` is the simulated world of a ``sim``/``bullet``
    camera. Raises :class:`CameraError` (a ValueError) naming the source when it is unknown or cannot be opened."""
    src = check_source(src)
    if src in SIM_CAMERAS:
        if world is None or world.backend != src:
            raise CameraError(f"camera {src!r} shows the simulated world of robot {src!r}; use --robot {src}")
        return SimCamera(world)
    if src.startswith("lerobot:"):  # a LeRobot camera class (robot/lerobot_camera.py)
        from .lerobot_camera import open_lerobot_camera

        return open_lerobot_camera(src)
    index = device_index(src)
    if index is not None:
        return DeviceCamera(index)
    path = Path(src)
    if path.is_dir():
        return ImageFolderCamera(path)
    if path.is_file():
        if path.suffix.lower() in VIDEO_EXTENSIONS:
            return VideoCamera(path)
        raise CameraError(f"camera {src!r}: a file that is not a video ({', '.join(VIDEO_EXTENSIONS)})")
    if ":" in src and not path.exists():
        cam, cls = construct(src, "camera", CameraError)
        if not callable(getattr(cam, "read", None)):
            raise CameraError(f"camera {src!r}: {cls.__name__} has no read(timeout) method")
        cam.name = getattr(cam, "name", src) if isinstance(getattr(cam, "name", None), str) else src
        return cam
    raise CameraError(f"unknown camera {src!r}: no such file or folder; expected {describe_sources()}")


__all__ = ["Camera", "CameraError", "CameraHung", "CameraReader", "CameraTimeout", "CLOSE_TIMEOUT", "DeviceCamera", "EndOfStream",
           "Frame", "ImageFolderCamera", "MAX_DEVICE_INDEX", "SensorCamera", "SimCamera", "VideoCamera", "WATCHDOG_GRACE",
           "MAX_ASPECT", "MIN_FRAME_SIDE", "check_frame", "check_source", "close_camera", "close_within", "describe_sources", "describe_value", "device_index", "load_class",
           "open_camera", "part_name", "square_crop"]
