"""Small statistics shared by the closed-loop evaluation, the robot loop's summary and ``eval-real``."""

from __future__ import annotations

import math


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval (low, high), as fractions in [0, 1], of a rate of ``k`` in ``n`` trials (episodes that
    succeed, target-free frames that fire); ``z`` = 1.96 gives 95 %. (nan, nan) when ``n`` is 0. Unlike resampling,
    it stays wide where the rate is 0 or 1 (0 of 256 gives 0 to 0.0148)."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


__all__ = ["wilson"]
