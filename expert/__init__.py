"""FSM expert reading privileged state, and the data-collection verbs (``collect``, ``inspect``).

The public names below are imported on first use (``from graspsim.expert import FSMExpert``). The verbs
``collect`` and ``inspect`` stay in their modules (``graspsim.expert.collect.collect``): a package attribute named like
a submodule would hide it.
"""

from __future__ import annotations

from graspsim.lazy import lazy_names

_LAZY = {
    "PHASES": "fsm", "FSMExpert": "fsm", "expert_action": "fsm", "expert_phase_and_action": "fsm",
    "exploration_noise": "fsm",
    "CollectConfig": "collect",
    "InspectConfig": "inspect", "contact_sheet": "inspect",
}
"""Public name -> the submodule that defines it."""

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
