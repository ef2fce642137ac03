"""Mask-driven closed-loop control: control net (``model``), inference wrapper and checkpoints (``policy``),
batched expert/learner rollouts (``rollout``), DAgger (``train``), closed-loop evaluation (``evaluate``) and
the end-to-end ``pipeline``. Modules are imported on demand (``bench`` lives here too).

On a robot: the deployable controller (``controller``), the ONNX contract (``onnx_contract``) and its writer
(``export``), the Camera and Robot interfaces with the built-in adapters (``cameras``, ``robots``: write your own
adapters against these), the fixed-rate tick (``robot_loop``), the ``deploy`` run and the ``record`` capture."""
