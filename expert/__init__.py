"""FSM expert reading privileged state, and the data-collection verbs."""

from .fsm import PHASES, FSMExpert, expert_action, expert_phase_and_action, exploration_noise

__all__ = ["PHASES", "FSMExpert", "expert_action", "expert_phase_and_action", "exploration_noise"]
