"""The rules every transfer-set renderer draws by (pybullet's TinyRenderer, :mod:`graspsim.vision.foreign_render`, and
MuJoCo, :mod:`graspsim.vision.mujoco_transfer`): the target's hue band, the band distractors keep out of, and the
target kinds a set may hold. One module, so the two renderers cannot drift apart."""

from __future__ import annotations

import math

from graspsim import TargetConfig

TARGET_HUE = (-0.04, 0.06)  # default HSV hue band of the target (mod 1): red to orange
DISTRACTOR_HUE_MARGIN = 0.08  # distractor hues keep this distance from the target's band (as the simulator's)


def distractor_hue_gap(target_hue: tuple[float, float]) -> tuple[float, float]:
    """The hue band (mod 1) distractors never take: the target's band widened by the margin on each side."""
    lo, hi = (float(x) for x in target_hue)
    if not (math.isfinite(lo) and math.isfinite(hi) and -0.5 <= lo <= hi <= 1.0):
        raise ValueError(f"target_hue must be a (low, high) pair with -0.5 <= low <= high <= 1; got {target_hue!r}")
    if hi - lo + 2 * DISTRACTOR_HUE_MARGIN >= 0.9:
        raise ValueError(f"target_hue {target_hue!r} is too wide: it and its margin must leave hues for distractors")
    return lo - DISTRACTOR_HUE_MARGIN, hi + DISTRACTOR_HUE_MARGIN


def check_kinds(kinds, owner: str = "RenderTransferConfig") -> tuple[str, ...]:
    """The target kinds of ``kinds`` (names, or one string with commas: ``"sphere,cube"``) as a tuple; a ValueError
    of one line names an unknown kind and the known ones (those of ``graspsim.TargetConfig``)."""
    try:
        return TargetConfig(kinds=kinds).kinds
    except ValueError as e:
        raise ValueError(str(e).replace("TargetConfig.", f"{owner}.", 1)) from None


__all__ = ["DISTRACTOR_HUE_MARGIN", "TARGET_HUE", "check_kinds", "distractor_hue_gap"]
