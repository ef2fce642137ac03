"""Names of the observation and privileged-state keys, defined once (imports nothing).

Observation dict (policy-visible, see :mod:`graspsim.env`): ``RGB`` B,3,H,W uint8; ``MASK`` B,H,W bool (exact
visible-target mask); ``GRIPPER`` B,3 float32 (the gripper's own senses). In episode files the same names are the
``obs/<key>`` arrays (time first: ``rgb`` T,H,W,3 uint8, ``mask`` T,H,W uint8 0/1, ``gripper`` T,3 float32).

``PRIVILEGED_KEYS`` are the true-state arrays that collect and DAgger store beside every step for analysis (never a
policy input): ``tcp_pos`` 3 m, ``sphere_pos`` 3 m, ``sphere_radius`` m, ``finger_width`` m, ``held`` bool.
"""

RGB = "rgb"
MASK = "mask"
GRIPPER = "gripper"
OBS_KEYS = (RGB, MASK, GRIPPER)
"""Every key of the observation dict, in this order."""
CONTROL_OBS_KEYS = (MASK, GRIPPER)
"""What the control net reads (the learner's mask and the gripper senses), e.g. from an episode file."""
PRIVILEGED_KEYS = ("tcp_pos", "sphere_pos", "sphere_radius", "finger_width", "held")
"""Privileged arrays recorded per step by collect and DAgger (a subset of :func:`graspsim.env.privileged`)."""

__all__ = ["CONTROL_OBS_KEYS", "GRIPPER", "MASK", "OBS_KEYS", "PRIVILEGED_KEYS", "RGB"]
