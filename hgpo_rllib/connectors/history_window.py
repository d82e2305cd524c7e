"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.connectors.env_to_module.history_window`. Kept because
checkpoints pickle this path."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.connectors.env_to_module.history_window import (  # noqa: F401
    HistoryWindowPrompt,
    PromptRenderer,
    episode_prompt_text,
)

warn_moved_module(__name__, "hgpo_rllib.connectors.env_to_module.history_window")
