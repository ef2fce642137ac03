"""Names of the observation and privileged-state keys, defined once (imports nothing).

Observation dict (policy-visible, see :mod:`graspsim.env`): ``RGB`` B,3,H,W uint8; ``MASK`` B,H,W bool (exact
visible-target mask); ``GRIPPER`` B,3 float32 (the gripper's own senses). In episode files the same names are the
``obs/<key>`` arrays (time first: ``rgb`` T,H,W,3 uint8, ``mask`` T,H,W uint8 0/1, ``gripper`` T,3 float32).

``PRIVILEGED_KEYS`` are the true-state arrays that collect and DAgger store beside every step for analysis (never a
policy input): ``tcp_pos`` 3 m, ``sphere_pos`` 3 m, ``sphere_radius`` m, ``finger_width`` m, ``held`` bool (the
``sphere_*`` names describe the target of any kind: its centre and half-width). Scenes with the wrist (cubes or
cylinders in the mix) add ``WRIST_PRIVILEGED_KEYS``: ``target_kind`` int64 (``graspsim.state.TARGET_KIND_CODES``),
``target_half`` 3 m (half-extents), ``target_yaw`` rad and ``wrist_yaw`` rad.
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
WRIST_PRIVILEGED_KEYS = ("target_kind", "target_half", "target_yaw", "wrist_yaw")
"""Privileged arrays recorded besides ``PRIVILEGED_KEYS`` when the wrist turns (``SimConfig.wrist``)."""

FINGERTIP_SENSES = ("fingertip_x", "fingertip_y", "fingertip_up_x", "fingertip_up_y")
"""Names of the 4 fingertip senses that follow the wrist's sine and cosine when ``SimConfig.fingertip_pixels`` is on
(:func:`graspsim.env.fingertip_senses`): where the fingertip centre and a point 2 cm above it appear in the image."""


def privileged_keys(wrist: bool) -> tuple[str, ...]:
    """The privileged arrays recorded per step: ``PRIVILEGED_KEYS``, plus ``WRIST_PRIVILEGED_KEYS`` with the wrist."""
    return PRIVILEGED_KEYS + WRIST_PRIVILEGED_KEYS if wrist else PRIVILEGED_KEYS

__all__ = ["CONTROL_OBS_KEYS", "FINGERTIP_SENSES", "GRIPPER", "MASK", "OBS_KEYS", "PRIVILEGED_KEYS", "RGB", "WRIST_PRIVILEGED_KEYS",
           "privileged_keys"]
