"""The compatibility table: old module paths still import (with a warning naming the new one) until the release
each entry names, and no entry outlives that release."""

import importlib
import sys
import warnings

import pytest

import graspsim
from graspsim.compat import MOVED_MODULES


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_moved_module_imports_with_a_warning_naming_the_new_path(old):
    new = MOVED_MODULES[old].new
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(new)
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert any(new in m and old in m for m in messages), messages


def test_old_robot_paths_give_the_same_classes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from graspsim.dagger.cameras import Camera as OldCamera
        from graspsim.dagger.robots import Robot as OldRobot
    from graspsim.robot import Camera, Robot

    assert OldRobot is Robot and OldCamera is Camera


def test_no_compatibility_entry_outlives_its_release():
    now = _version(graspsim.__version__)
    stale = {old: e.drop_in for old, e in MOVED_MODULES.items() if now >= _version(e.drop_in)}
    assert not stale, f"graspsim {graspsim.__version__}: delete these old paths (and their stubs): {stale}"
