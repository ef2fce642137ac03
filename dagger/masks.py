"""Where the control net's masks come from, shared by DAgger (:mod:`.train`), closed-loop evaluation
(:mod:`.evaluate`) and deploy: the simulator's exact mask or a segmentation net's prediction, and the check that a
vision checkpoint was trained on the target kinds a run's scenes hold.

Both DAgger and evaluation import from here, so neither imports the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from graspsim import SimConfig, runs

from .rollout import MaskFn, gt_masks, segmenter_masks


def make_mask_fn(masks: str, vision: Optional[Path], device: torch.device, precision: str = "auto") -> MaskFn:
    """``masks="gt"``: :func:`gt_masks` (the simulator's exact mask); ``"predicted"``: a
    :class:`graspsim.vision.infer.Segmenter` on ``obs["rgb"]`` loaded from ``vision`` onto ``device`` in ``precision``
    (``auto``, ``fp32`` or ``bf16``; :func:`.rollout.mask_precision` tells which it chose) (ValueError when ``vision``
    is None)."""
    if masks == "gt":
        return gt_masks
    if vision is None:
        raise ValueError("--masks predicted needs --vision CKPT")
    from graspsim.vision.infer import Segmenter

    return segmenter_masks(Segmenter.from_checkpoint(vision, device, precision=precision))


def check_vision_kinds(vision: Path, sim: SimConfig) -> None:
    """ValueError naming the vision checkpoint when it was trained for another embodiment than ``sim``'s, or ``sim``
    holds target kinds its net was not trained on."""
    from graspsim.vision.checkpoint import load_checkpoint

    config = load_checkpoint(vision).get("config")
    runs.check_embodiment(runs.trained_embodiment(config), sim.embodiment, f"vision checkpoint {vision}")
    runs.check_trained_kinds(runs.trained_kinds(config), sim.target.kinds, f"vision checkpoint {vision}")


__all__ = ["check_vision_kinds", "make_mask_fn"]
