"""The ``graspsim record`` verb's library: capture frames from a camera into an image set (a labelling source).

>>> graspsim record --camera 0 --out my_set --frames 200 --hz 5          # my_set/images/frame_0000.png ...

``record`` writes frames as an image set (:mod:`graspsim.vision.image_set`: ``images/``), plus ``frames.csv`` (file,
capture time relative to the first frame, frame age at the write). A source that ends before ``--frames`` (a video,
an image folder) gives fewer frames, with a warning that says how many. Ctrl-C or a camera failure keeps the frames
captured until then (and ends with exit 130 or the camera's error), whatever the camera raised; a frame that is not
H,W,3 uint8 is such an error, and so is a ``read`` that has not returned ``--frame-timeout`` + 0.5 s after it
started (the watchdog of :class:`graspsim.robot.cameras.CameraReader`). Under torchrun record is refused.
``--overwrite`` replaces the earlier set as a whole, so no frame of a longer earlier recording is left among the new
ones. The labelling aid for such a set, ``graspsim propose-masks``, is :mod:`graspsim.vision.proposals`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from graspsim import interrupts
from graspsim.distributed import single_process
from graspsim.validate import finite_non_negative, finite_positive, int_in

from .cameras import (SIM_CAMERAS, CameraError, CameraReader, EndOfStream, check_source, close_camera, device_index,
                      open_camera, square_crop)

log = logging.getLogger(__name__)

ONE_PROCESS = "open the same camera and write the same --out"
"""What every rank of a torchrun job would do (why record refuses to run under torchrun)."""
MAX_FRAMES = 1_000_000
"""Largest --frames (a million PNGs is already hours of capture and tens of GB)."""
MAX_HZ = 1000.0
"""Largest --hz (cameras give 5-120 frames per second)."""
FRAMES_CSV = "frames.csv"
FRAMES_FIELDS = ("image", "t_s", "age_ms")
"""Columns of ``frames.csv``: the frame's file name, capture time (s) after the first frame, its age (ms) when
written."""


@dataclass(frozen=True)
class RecordConfig:
    """Capture frames from a camera into an eval-real image folder."""

    camera: str
    """Camera: an OpenCV device index, a video file, an image folder, or module:Class."""
    out: Path
    """Output folder: images/ and frames.csv."""
    frames: int = 100
    """Frames to capture (fewer if a finite source ends first)."""
    hz: float = 5.0
    """Capture rate (Hz); 0 = as fast as the camera gives frames."""
    frame_timeout: float = 2.0
    """Seconds to wait for a frame before giving up with an error."""
    square: bool = False
    """Keep each frame's centred square (what deploy gives nets trained for the SO-101, whose wrist image is the square
    crop of a wider sensor), so that the labelled set shows what those nets see; off: the whole frame."""
    overwrite: bool = False
    """Write into a non-empty --out."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))
        int_in("RecordConfig", "frames", self.frames, 1, MAX_FRAMES)
        finite_non_negative("RecordConfig", "hz", self.hz, unit="Hz")
        if self.hz > MAX_HZ:
            raise ValueError(f"RecordConfig.hz must be at most {MAX_HZ:g} Hz (0 = as fast as the camera gives frames); "
                             f"got {self.hz!r}")
        finite_positive("RecordConfig", "frame_timeout", self.frame_timeout, unit="s")
        single_process("record", ONE_PROCESS)
        check_source(self.camera, "--camera")  # '' would replay the PNGs of the current folder
        if self.camera.strip() in SIM_CAMERAS:
            raise ValueError("RecordConfig: record a real camera; simulated frames come from 'graspsim deploy --record'")
        device_index(self.camera, "--camera")  # a bad device number is refused before OpenCV sees it


def record(cfg: RecordConfig) -> dict:
    """Capture up to ``cfg.frames`` frames; returns ``{"frames": n, "asked": cfg.frames, "ended": why, "folder": ...}``
    with ``ended`` one of ``done``, ``camera_ended`` (a finite source ran out), ``interrupted`` or ``camera_failed``.
    Ctrl-C and a camera error are raised again once the frames captured before them are in place."""
    from graspsim.vision.image_set import ImageSetWriter

    writer = ImageSetWriter(cfg.out, overwrite=cfg.overwrite, masks=False, meta_file=FRAMES_CSV,
                            meta_fields=FRAMES_FIELDS, meta_key=None)
    cam = open_camera(cfg.camera)
    reader = CameraReader(cam)
    try:
        with contextlib.ExitStack() as ending:  # from the capture's end until the frames are in place: signals held
            with writer:
                ended, stopped_by = _capture(reader, cfg, writer)
                ending.enter_context(interrupts.shielded("the recorded frames were being kept"))
                if not len(writer):  # nothing captured: leave --out as it was
                    raise stopped_by or CameraError(f"{reader.who} gave no frame: its source ended before the first "
                                                    f"(--camera {cfg.camera})")
    finally:  # a camera still blocked in a read is left open (closing it could block too)
        with interrupts.shielded("the camera was being closed"):
            close_camera(cam, reader, 0.1 if reader.hung else (1.0 if reader.in_flight else cfg.frame_timeout + 0.5))
    n, images = len(writer), writer.out / "images"
    if ended == "done":
        log.info("record: %d frames into %s", n, images)
    else:
        why = {"camera_ended": "the camera's source ended", "interrupted": "interrupted",
               "camera_failed": f"the camera failed ({stopped_by})"}[ended]
        log.warning("record: %s after %d of the %d frames asked for (--frames); they are in %s", why, n, cfg.frames,
                    images)
    if stopped_by is not None:
        raise stopped_by
    return {"frames": n, "asked": cfg.frames, "ended": ended, "folder": str(writer.out)}


def _capture(reader: CameraReader, cfg: RecordConfig, writer) -> tuple[str, BaseException | None]:
    """Read frames at ``cfg.hz`` through ``reader`` into ``writer`` (an open image-set writer, a ``frames.csv`` row
    per frame); returns how the capture ended (done, camera_ended, interrupted, camera_failed) and the Ctrl-C or
    camera error that ended it (any exception of the camera becomes a CameraError naming it)."""
    from graspsim.vision.image_set import PNG, frame_stem

    period = 1.0 / cfg.hz if cfg.hz > 0 else 0.0
    next_t = time.monotonic()
    t_first = None
    for _ in range(cfg.frames):
        try:
            interrupts.check()  # a stop signal whose exception was lost (or held while a frame was written) ends here
            if period:
                time.sleep(max(0.0, next_t - time.monotonic()))
                next_t += period
            try:
                f = reader.read(cfg.frame_timeout)
            except (EndOfStream, KeyboardInterrupt, CameraError):
                raise
            except BaseException as e:  # a user's camera may raise anything: the frames so far are kept
                raise CameraError(f"{reader.who} raised {type(e).__name__}: {e}") from None
            t_first = f.t if t_first is None else t_first
            name = frame_stem(len(writer)) + PNG  # the writer's own name for this frame
            with interrupts.shielded("a frame was being written"):  # a frame and its row are written whole
                rgb = square_crop(f.rgb) if cfg.square else f.rgb
                writer.add(rgb, meta={"image": name, "t_s": f"{f.t - t_first:.4f}",
                                      "age_ms": f"{1e3 * (time.monotonic() - f.t):.2f}"})
        except EndOfStream:
            return "camera_ended", None
        except KeyboardInterrupt as e:
            interrupts.taken()
            return "interrupted", e
        except CameraError as e:
            return "camera_failed", e
    return "done", None


__all__ = ["RecordConfig", "record"]
