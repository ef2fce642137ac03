"""FSM expert reading privileged state, and the data-collection verbs (``collect``, ``inspect``).

The public names below are imported on first use (``from graspsim.expert import FSMExpert``). The verbs
``collect`` and ``inspect`` stay in their modules (``graspsim.expert.collect.collect``): a package attribute named like
a submodule would hide it.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "PHASES": "fsm", "FSMExpert": "fsm", "expert_action": "fsm", "expert_phase_and_action": "fsm",
    "exploration_noise": "fsm",
    "CollectConfig": "collect",
    "InspectConfig": "inspect", "contact_sheet": "inspect",
}
"""Public name -> the submodule that defines it."""

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
