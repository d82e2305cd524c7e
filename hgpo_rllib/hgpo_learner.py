"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.algorithms.hgpo.hgpo_learner`."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.algorithms.hgpo.hgpo_learner import HGPOLearner  # noqa: F401

warn_moved_module(__name__, "hgpo_rllib.algorithms.hgpo.hgpo_learner")
