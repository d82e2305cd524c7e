"""HGPO's connector pieces: prompts (env-to-module), text actions (module-to-env), advantages and
reference log-probs (learner)."""

from hgpo_rllib.connectors.decode_actions import TextActionsToEnv
from hgpo_rllib.connectors.group_advantages import GroupAdvantages
from hgpo_rllib.connectors.history_window import HistoryWindowPrompt
from hgpo_rllib.connectors.reference_logp import ReferenceLogp

__all__ = ["GroupAdvantages", "HistoryWindowPrompt", "ReferenceLogp", "TextActionsToEnv"]
