"""Helpers for tests that write small labelled frame folders (images/ + masks/) and tiny vision nets."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from graspsim.vision.model import SegNetConfig

TINY = SegNetConfig(base_channels=4, max_channels=8, depth=2)


def write_png(path: Path, img: np.ndarray) -> None:
    """Write ``img`` (H,W or H,W,3 BGR uint8) as PNG, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, buf = cv2.imencode(".png", img)
    assert ok
    path.write_bytes(buf.tobytes())
