"""graspsim: batched wrist-camera grasping scenes as torch tensors (see ``graspsim.env``)."""

from .config import RandomizationConfig, SimConfig
from .env import OBS_KEYS, GraspEnv, observe, privileged
from .physics import FAILURE_NAMES, failure_cause, step
from .randomization import sample_scenes
from .render import RenderOutput, render
from .state import State

__all__ = [
    "FAILURE_NAMES", "OBS_KEYS", "GraspEnv", "RandomizationConfig", "RenderOutput", "SimConfig", "State",
    "failure_cause", "observe", "privileged", "render", "sample_scenes", "step",
]
__version__ = "0.1.0"
