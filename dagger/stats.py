"""Small statistics shared by the evaluation and the robot loop's summary."""

from __future__ import annotations

import math


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval (low, high), as fractions in [0, 1], of a success rate of ``k`` in ``n`` episodes;
    (nan, nan) when ``n`` is 0."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


__all__ = ["wilson"]
