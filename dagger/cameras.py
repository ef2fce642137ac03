"""Camera sources of the robot loop (``graspsim deploy``) and of ``graspsim record``: one small interface, several
sources. Write your own camera against :class:`Camera` here (``from graspsim.dagger.cameras import Camera, Frame``).

A camera gives the **latest frame with its capture time**:

>>> cam = open_camera("0")                 # OpenCV device 0; or "clip.mp4", "my_set/", "sim", "bullet", "pkg.mod:Cls"
>>> f = cam.read(timeout=2.0)             # Frame: rgb H,W,3 uint8, t (time.monotonic() at capture), index
>>> cam.close()

``read`` raises :class:`CameraTimeout` when no new frame arrives within ``timeout`` seconds, and
:class:`EndOfStream` when a finite source (video file, image folder) has no frame left. Sources:

========================= =====================================================================================
``SRC``                    source
========================= =====================================================================================
an integer (``0``)         OpenCV capture device; a background thread keeps only the newest frame
a video file               frames in order, one per ``read`` (capture time = time of the read)
a folder of images         replay in name order (``DIR`` or ``DIR/images``: :mod:`graspsim.vision.image_set`)
``sim`` / ``bullet``       the wrist camera of the simulated world that the robot ``sim`` / ``bullet`` moves
``module:Class``           a user's class: ``Class()`` with ``read(timeout) -> Frame`` and ``close()``
========================= =====================================================================================

Simulated cameras also give the exact target mask (``Frame.mask``), so a recording from them can be scored
with ``eval-real``.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

VIDEO_EXTENSIONS = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v")
SIM_CAMERAS = ("sim", "bullet")


class CameraError(ValueError):
    """A camera that cannot be opened or read."""


class CameraTimeout(CameraError):
    """No new frame within the timeout."""


class EndOfStream(Exception):
    """A finite source (video file, image folder) has given its last frame."""


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
    """Interface of a camera source (see the module docstring)."""

    name = "camera"

    def read(self, timeout: float) -> Frame:
        raise NotImplementedError

    def close(self) -> None:
        pass


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
    """The wrist camera of a simulated world (:class:`graspsim.dagger.robots.SimWorld`): renders its current scene."""

    def __init__(self, world):
        self.world = world
        self.name = world.backend
        self.k = 0

    def read(self, timeout: float) -> Frame:
        rgb, mask = self.world.render()
        self.k += 1
        return Frame(rgb, time.monotonic(), self.k - 1, mask)


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


def describe_sources() -> str:
    return ("an OpenCV device index (0), a video file (" + ", ".join(VIDEO_EXTENSIONS) + "), a folder of images, "
            "'sim', 'bullet', or module:Class")


def open_camera(src: str, world=None) -> Camera:
    """Open camera ``src`` (see the module docstring); ``world`` is the simulated world of a ``sim``/``bullet``
    camera. Raises :class:`CameraError` (a ValueError) naming the source when it is unknown or cannot be opened."""
    src = str(src).strip()
    if src in SIM_CAMERAS:
        if world is None or world.backend != src:
            raise CameraError(f"camera {src!r} shows the simulated world of robot {src!r}; use --robot {src}")
        return SimCamera(world)
    if src.lstrip("-").isdigit():
        return DeviceCamera(int(src))
    path = Path(src)
    if path.is_dir():
        return ImageFolderCamera(path)
    if path.is_file():
        if path.suffix.lower() in VIDEO_EXTENSIONS:
            return VideoCamera(path)
        raise CameraError(f"camera {src!r}: a file that is not a video ({', '.join(VIDEO_EXTENSIONS)})")
    if ":" in src and not path.exists():
        cls = load_class(src, "camera")
        try:
            cam = cls()
        except Exception as e:
            raise CameraError(f"camera {src!r}: {cls.__name__}() raised {type(e).__name__}: {e}") from None
        if not callable(getattr(cam, "read", None)):
            raise CameraError(f"camera {src!r}: {cls.__name__} has no read(timeout) method")
        cam.name = getattr(cam, "name", src) if isinstance(getattr(cam, "name", None), str) else src
        return cam
    raise CameraError(f"unknown camera {src!r}: no such file or folder; expected {describe_sources()}")


__all__ = ["Camera", "CameraError", "CameraTimeout", "DeviceCamera", "EndOfStream", "Frame", "ImageFolderCamera",
           "SimCamera", "VideoCamera", "describe_sources", "load_class", "open_camera"]
