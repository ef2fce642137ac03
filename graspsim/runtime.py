"""Where and how a verb runs: one config shared by every verb that simulates or trains.

``collect``, ``train-vision``, ``dagger``, ``eval-sim``, ``pipeline``, ``eval-real``, ``calibrate``, ``show``,
``export-dataset`` and ``deploy`` each hold a :class:`RuntimeConfig` in their field ``runtime`` (one meaning in every
verb; deploy's torch|onnx choice is its ``inference``). Its flags carry no prefix (``--device``, ``--threads``,
``--dist-timeout``, ``--progress/--no-progress``), and in a run folder's ``config.json`` they sit under the key ``runtime``
(``runtime.threads`` ...). Run folders written before these settings were grouped keep them at the top level;
:func:`graspsim.runs.check_resume` reads such folders as if they were grouped.

>>> with cfg.runtime.job("dagger") as ctx:      # threads set, torchrun joined (a job of one without it)
...     dev = distributed.local_device(cfg.runtime.device)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import tyro

from . import distributed
from .validate import boolean, check_device, finite_positive, int_in


@dataclass(frozen=True)
class RuntimeConfig:
    """Device, CPU threads, torchrun timeout and progress display of a run."""

    device: str = "cpu"
    """Torch device: cpu, cuda, cuda:N or mps."""
    threads: int = 0
    """torch.set_num_threads (0 = leave the default)."""
    dist_timeout: float = distributed.DEFAULT_TIMEOUT
    """Under torchrun: seconds a collective waits for the other processes before the job fails (ignored on one
    process; rank 0 alone joins datasets and writes reports while the others wait, so allow for that)."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        int_in("RuntimeConfig", "threads", self.threads, 0, MAX_THREADS)
        finite_positive("RuntimeConfig", "dist_timeout", self.dist_timeout, unit="s")
        boolean("RuntimeConfig", "progress", self.progress)
        check_device("RuntimeConfig", self.device)

    @contextlib.contextmanager
    def job(self, what: str) -> Iterator[distributed.Context]:
        """Set the thread count, then run the block as a :func:`graspsim.distributed.job` named ``what``."""
        if self.threads:
            import torch

            torch.set_num_threads(self.threads)
        with distributed.job(self.device, self.dist_timeout, what) as ctx:
            yield ctx


Runtime = tyro.conf.OmitArgPrefixes[RuntimeConfig]
"""The type of a verb config's ``runtime`` field: flags without the ``runtime.`` prefix."""

MAX_THREADS = 256
"""Largest --threads: more threads than any CPU here has cores only adds waiting (and 1000 of them take seconds to
start)."""
RUNTIME_KEYS = ("device", "threads", "dist_timeout", "progress")
"""The settings :class:`RuntimeConfig` groups (top-level keys in older run folders' configs)."""

__all__ = ["RUNTIME_KEYS", "Runtime", "RuntimeConfig"]
