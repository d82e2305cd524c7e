"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.connectors.learner.frozen_logp`."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.columns import SAMPLER_LOGP  # noqa: F401
from hgpo_rllib.connectors.learner.frozen_logp import RecomputeOldLogp, ReferenceLogp, logp_in_chunks  # noqa: F401

warn_moved_module(__name__, "hgpo_rllib.connectors.learner.frozen_logp")
