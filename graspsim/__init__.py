"""graspsim: batched wrist-camera grasping scenes as torch tensors (see ``graspsim.env``).

The names below are imported on first use (``graspsim.GraspEnv``, ``from graspsim import SimConfig``), so that
``import graspsim.cli`` does not import torch: the ``graspsim`` command is then inside its own error handling
(Ctrl-C gives one line, not a traceback) before the seconds that importing torch takes.
"""

from __future__ import annotations

import types

from .lazy import lazy_names

_LAZY = {
    "RandomizationConfig": "config", "SimConfig": "config", "TargetConfig": "config",
    "EMBODIMENTS": "embodiment", "Embodiment": "embodiment",
    "GRIPPER_DIM": "env", "OBS_KEYS": "env", "GraspEnv": "env", "observe": "env", "privileged": "env",
    "FAILURE_NAMES": "physics", "failure_cause": "physics", "step": "physics",
    "GraspEnvProtocol": "protocol",
    "sample_scenes": "randomization",
    "RuntimeConfig": "runtime",
    "Hooks": "rollout", "run_episodes": "rollout",
    "episode_seeds": "seeds",
    "BenchConfig": "bench",
    "RenderOutput": "render", "render": "render",
    "State": "state",
}
"""Public name -> the submodule that defines it."""

__all__ = sorted(_LAZY) + ["make_env"]
__version__ = "0.2.0"
GYM_ENV_ID = "graspsim/WristGrasp-v0"
"""The gymnasium id of the single-scene environment (:mod:`graspsim.gym_env`)."""


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


class _Package(types.ModuleType):
    """Keeps ``graspsim.render`` the render function: importing the submodule ``graspsim.render`` binds the module
    to that attribute of its package, which the eager imports of earlier versions bound back to the function."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and name in _LAZY and _LAZY[name] == name and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


import sys as _sys  # noqa: E402

_sys.modules[__name__].__class__ = _Package


def make_env(backend: str = "torch", cfg=None, num_envs: int = 1, device: str = "cpu", seed: int = 0, **kwargs):
    """Build a batched environment: ``"torch"`` (:class:`GraspEnv`), ``"bullet"`` (pybullet, Franka Panda) or
    ``"mujoco"`` (MuJoCo, the SO-101 through its IK layer; the optional extra ``graspsim[mujoco]``).

    Both expose the same API: ``reset(env_ids=None, seed=None)``, ``step(action)``, ``privileged()``.
    """
    if backend == "torch":
        from .env import GraspEnv

        return GraspEnv(cfg, num_envs=num_envs, device=device, seed=seed, **kwargs)
    if backend == "bullet":
        from .bullet import BulletGraspEnv

        return BulletGraspEnv(cfg, num_envs=num_envs, device=device, seed=seed, **kwargs)
    if backend == "mujoco":
        from .mujoco.env import MujocoGraspEnv

        return MujocoGraspEnv(cfg, num_envs=num_envs, device=device, seed=seed, **kwargs)
    raise ValueError(f"backend must be 'torch', 'bullet' or 'mujoco'; got {backend!r}")


def _register_gym() -> None:
    """Add ``graspsim/WristGrasp-v0`` to gymnasium's registry, as gymnasium environment packages do on import, so
    ``import graspsim; gymnasium.make("graspsim/WristGrasp-v0")`` works. It only adds an entry to that registry
    (idempotent; the environment's module, and torch, are imported when the environment is made); the allocator,
    threads, logging and random state are left alone (tests/test_perf.py)."""
    try:
        import gymnasium as gym
    except ImportError:  # gymnasium missing: the torch API still works
        return
    if GYM_ENV_ID not in gym.registry:
        gym.register(id=GYM_ENV_ID, entry_point="graspsim.gym_env:WristGraspEnv",
                     vector_entry_point="graspsim.gym_env:WristGraspVectorEnv", max_episode_steps=None)


_register_gym()
