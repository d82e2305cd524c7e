"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.rl_module.logprobs`."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.rl_module.logprobs import MASKED_LOGIT, token_logp_entropy  # noqa: F401

warn_moved_module(__name__, "hgpo_rllib.rl_module.logprobs")
