"""Episode files: robomimic-style HDF5, written crash-safely, read back as episodes or flat step arrays.

One module a concern:

- :mod:`~graspsim.dataset.format`: the layout (constants, :class:`Episode`, demo names, per-step signatures);
- :mod:`~graspsim.dataset.writer`: :class:`EpisodeWriter`, the crash-safe appending writer (parts, index, lock);
- :mod:`~graspsim.dataset.read`: :func:`read_episodes`, :func:`load_steps`, :func:`demo_attrs`, :func:`describe`;
- :mod:`~graspsim.dataset.repair`: :func:`repair` of a file with a damaged or missing part;
- :mod:`~graspsim.dataset.recorder`: :class:`EpisodeRecorder`, batched per-step tensors -> finished episodes;
- :mod:`~graspsim.dataset.join`: :func:`join` of per-rank files into one, by episode index;
- :mod:`~graspsim.dataset.lerobot`: :func:`~graspsim.dataset.lerobot.export_lerobot`, episode files as a
  LeRobotDataset v3.0 folder (needs the optional ``lerobot`` extra, so it is imported only from its own module).

Every public name of the other modules is importable from ``graspsim.dataset`` itself.
"""

from .format import (
    ACTIONS, CHUNK_FRAMES, DATA, DEMO_PREFIX, FORMAT, MASK, OBS, PARTS_SUFFIX, PRIVILEGED, RESERVED, Episode,
    demo_index, demo_name, parts_dir, repair_hint,
)
from ..runs import config_differences, flatten_config  # noqa: F401 (the resume rule lives in graspsim.runs)
from .read import demo_attrs, describe, load_steps, read_episodes
from .recorder import EpisodeRecorder
from .repair import repair
from .writer import EpisodeWriter
from .join import indexed_episodes, join

__all__ = [
    "ACTIONS", "CHUNK_FRAMES", "DATA", "DEMO_PREFIX", "FORMAT", "MASK", "OBS", "PARTS_SUFFIX", "PRIVILEGED", "RESERVED",
    "Episode", "EpisodeRecorder", "EpisodeWriter", "config_differences", "demo_attrs", "demo_index", "demo_name",
    "describe", "flatten_config", "indexed_episodes", "join", "load_steps", "parts_dir", "read_episodes", "repair", "repair_hint",
]
