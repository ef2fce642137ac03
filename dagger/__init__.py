"""Mask-driven closed-loop control: control net (``model``), inference wrapper and checkpoints (``policy``),
batched expert/learner rollouts (``rollout``), DAgger (``train``), closed-loop evaluation (``evaluate``) and
the end-to-end ``pipeline``. Modules are imported on demand (``bench`` lives here too)."""
