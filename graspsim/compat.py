"""Compatibility with earlier releases, in one place: every entry names the release it may be dropped in.

``tests/test_compat.py`` fails once the package version reaches an entry's ``drop_in``, so no shim outlives its
promise silently. Importing this module changes nothing; :func:`moved_module` acts only when an old path is imported.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import NamedTuple


class Moved(NamedTuple):
    """A module that moved: the old import path keeps working, with a ``DeprecationWarning``, until ``drop_in``."""

    new: str
    """The module's import path now."""
    drop_in: str
    """The release whose code may delete the old path."""


MOVED_MODULES: dict[str, Moved] = {
    # 0.2.0: the robot stack left graspsim.dagger for its own package, graspsim.robot (folder robot/)
    "graspsim.dagger.cameras": Moved("graspsim.robot.cameras", "0.3.0"),
    "graspsim.dagger.robots": Moved("graspsim.robot.robots", "0.3.0"),
    "graspsim.dagger.robot_loop": Moved("graspsim.robot.loop", "0.3.0"),
    "graspsim.dagger.controller": Moved("graspsim.robot.controller", "0.3.0"),
    "graspsim.dagger.deploy": Moved("graspsim.robot.deploy", "0.3.0"),
    "graspsim.dagger.export": Moved("graspsim.robot.export", "0.3.0"),
    "graspsim.dagger.onnx_contract": Moved("graspsim.robot.onnx_contract", "0.3.0"),
    "graspsim.dagger.record": Moved("graspsim.robot.capture", "0.3.0"),
    # 0.2.0: the DAgger aggregate is no longer named like the graspsim.data package (the shipped photos)
    "graspsim.dagger.data": Moved("graspsim.dagger.aggregate", "0.3.0"),
}
"""Old module path -> where it lives now and when the old path goes."""


def moved_module(old: str) -> None:
    """Make the old module path ``old`` an alias of its new module, warning once per import.

    Called from the stub left at the old path; afterwards ``import old`` and ``from old import X`` give the new
    module's objects (the same module object, so patching one patches the other)."""
    entry = MOVED_MODULES[old]
    warnings.warn(f"{old} moved to {entry.new}; the old path goes in graspsim {entry.drop_in}: import {entry.new}",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(entry.new)
