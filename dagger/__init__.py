"""Mask-driven closed-loop control trained by DAgger: the control net (``model``), its inference wrapper and
checkpoints (``policy``), batched expert/learner rollouts (``rollout``), DAgger (``train``), closed-loop evaluation
(``evaluate``) and the end-to-end ``pipeline``.

The robot stack (cameras, robots, the deploy loop, the deployable controller, ONNX export) lives in
:mod:`graspsim.robot`; the old module paths here (``graspsim.dagger.robots``, ``graspsim.dagger.cameras``, ...) still
import for one release and warn (:mod:`graspsim.compat`)."""
