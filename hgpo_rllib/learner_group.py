"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.algorithms.learner_group`. Kept because checkpoints
pickle this path."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.algorithms.learner_group import GroupShardingLearnerGroup, shard_whole_groups  # noqa: F401

warn_moved_module(__name__, "hgpo_rllib.algorithms.learner_group")
