"""Connector pieces by pipeline (≈ ``rllib/connectors/``): each step's prompt (``env_to_module``), the
generated text to the env (``module_to_env``), and the learner's token batch, advantages and frozen
log-probs (``learner``)."""

from hgpo_rllib._imports import lazy_getattr

__all__ = ["GroupAdvantages", "HistoryWindowPrompt", "RecomputeOldLogp", "ReferenceLogp", "TextActionsToEnv"]

__getattr__ = lazy_getattr(
    __name__,
    {
        "HistoryWindowPrompt": "hgpo_rllib.connectors.env_to_module.history_window",
        "TextActionsToEnv": "hgpo_rllib.connectors.module_to_env.text_actions",
        "GroupAdvantages": "hgpo_rllib.connectors.learner.group_advantages",
        "RecomputeOldLogp": "hgpo_rllib.connectors.learner.frozen_logp",
        "ReferenceLogp": "hgpo_rllib.connectors.learner.frozen_logp",
    },
)
