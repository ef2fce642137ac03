"""The IK layer for joint-space arms, where the robot stack's users look for it: the SO-101's straight-down inverse
kinematics (:class:`So101Kinematics`) and the per-period command-to-joint-targets step (:class:`CartesianIK`) that
:class:`graspsim.robot.so101.So101Robot` drives the real arm with.

>>> from graspsim.robot.ik import CartesianIK, So101Kinematics
>>> ik = CartesianIK(So101Kinematics(), dt=0.1, max_speed=0.1, max_yaw_rate=1.5, workspace=0.07)

The code lives in :mod:`graspsim.mujoco.ik`: the MuJoCo backend, on the simulator floor, moves the same arm through
it, and that floor imports nothing above it (docs/architecture.md). These are the same objects, not copies; the
needs are the ``mujoco`` extra (the arm's model for the kinematics, no rendering or physics).
"""

from __future__ import annotations

from graspsim.mujoco.ik import (
    REACH_BAND, REACH_BAND_MAX_HEIGHT, CartesianIK, IKResult, JointTargets, So101Kinematics, measure_reach_band,
)

__all__ = ["REACH_BAND", "REACH_BAND_MAX_HEIGHT", "CartesianIK", "IKResult", "JointTargets", "So101Kinematics",
           "measure_reach_band"]
