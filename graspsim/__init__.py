"""graspsim: batched wrist-camera grasping scenes as torch tensors (see ``graspsim.env``)."""

from .config import RandomizationConfig, SimConfig, TargetConfig
from .env import GRIPPER_DIM, OBS_KEYS, GraspEnv, observe, privileged
from .physics import FAILURE_NAMES, failure_cause, step
from .randomization import sample_scenes
from .render import RenderOutput, render
from .state import State

__all__ = [
    "FAILURE_NAMES", "GRIPPER_DIM", "OBS_KEYS", "GraspEnv", "RandomizationConfig", "RenderOutput", "SimConfig", "State",
    "TargetConfig", "failure_cause", "observe", "privileged", "render", "sample_scenes", "step",
]
__version__ = "0.1.0"


def make_env(backend: str = "torch", cfg: SimConfig | None = None, num_envs: int = 1, device: str = "cpu",
             seed: int = 0, **kwargs):
    """Build a batched environment: ``"torch"`` (:class:`GraspEnv`) or ``"bullet"`` (pybullet, Franka Panda).

    Both expose the same API: ``reset(env_ids=None, seed=None)``, ``step(action)``, ``privileged()``.
    """
    if backend == "torch":
        return GraspEnv(cfg, num_envs=num_envs, device=device, seed=seed, **kwargs)
    if backend == "bullet":
        from .bullet import BulletGraspEnv

        return BulletGraspEnv(cfg, num_envs=num_envs, device=device, seed=seed, **kwargs)
    raise ValueError(f"backend must be 'torch' or 'bullet'; got {backend!r}")


def _register_gym() -> None:
    """Add ``graspsim/WristGrasp-v0`` to gymnasium's registry, as gymnasium environment packages do on import, so
    ``import graspsim; gymnasium.make("graspsim/WristGrasp-v0")`` works. It only adds an entry to that registry
    (idempotent); the allocator, threads, logging and random state are left alone (tests/test_perf.py)."""
    try:
        from .gym_env import register
    except ImportError:  # gymnasium missing: the torch API still works
        return
    register()


_register_gym()
__all__ += ["make_env"]
