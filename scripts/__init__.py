"""The ``graspsim`` command-line interface, installed as ``graspsim.cli`` (thin verbs over library functions).

``graspsim <verb>`` and ``python -m graspsim.cli <verb>`` run :func:`main`. Users write adapters and scripts against
the library (``graspsim.dagger``, ``graspsim.vision``, ...), never against the modules of this package.
"""

from .cli import main

__all__ = ["main"]
