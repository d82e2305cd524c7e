"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.connectors.module_to_env.text_actions`. Kept because
checkpoints pickle this path."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.connectors.module_to_env.text_actions import TextActionsToEnv  # noqa: F401

warn_moved_module(__name__, "hgpo_rllib.connectors.module_to_env.text_actions")
