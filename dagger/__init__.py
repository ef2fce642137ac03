"""Mask-driven closed-loop control trained by DAgger: the control net (``model``), its inference wrapper and
checkpoints (``policy``), batched expert/learner rollouts (``rollout``), DAgger (``train``), closed-loop evaluation
(``evaluate``) and the end-to-end ``pipeline``.

The robot stack (cameras, robots, the deploy loop, the deployable controller, ONNX export) lives in
:mod:`graspsim.robot`; the old module paths here (``graspsim.dagger.robots``, ``graspsim.dagger.cameras``, ...) still
import for one release and warn (:mod:`graspsim.compat`).

The public names below are imported on first use (``from graspsim.dagger import DaggerConfig, run_dagger``). The
function ``rollout`` stays in its module (``graspsim.dagger.rollout.rollout``): a package attribute named like a
submodule would hide it."""

from __future__ import annotations

from graspsim.lazy import lazy_names

_LAZY = {
    "ControlNet": "model", "ControlNetConfig": "model",
    "MaskPolicy": "policy",
    "RolloutResult": "rollout", "gt_masks": "rollout", "segmenter_masks": "rollout", "mask_precision": "rollout",
    "make_mask_fn": "masks",
    "Aggregate": "aggregate",
    "DaggerConfig": "train", "run_dagger": "train",
    "EvalSimConfig": "evaluate", "evaluate_sim": "evaluate",
    "PipelineConfig": "pipeline", "run_pipeline": "pipeline", "PRESETS": "pipeline", "KIND_BUDGETS": "pipeline",
    "run_bench": "throughput",
}
"""Public name -> the submodule that defines it."""

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
