"""pybullet backend: the grasping task with a Franka Panda (``pybullet_data``) and contact physics.

``BulletGraspEnv`` has the API of :class:`graspsim.GraspEnv`; build it with
``graspsim.make_env("bullet", cfg, num_envs, device, seed)``.
"""

from .env import BulletGraspEnv

__all__ = ["BulletGraspEnv"]
