"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.env_runner.metrics_callback` (metric keys in
:mod:`hgpo_rllib.columns`). Kept because checkpoints pickle this path."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.columns import ENV_ERROR_RATE, INVALID_ACTION_RATE, SCORE, SMOOTHED_SUFFIX, SUCCESS_RATE  # noqa: F401
from hgpo_rllib.env_runner.metrics_callback import (  # noqa: F401
    SMOOTHED_METRICS,
    EpisodeMetricsCallback,
    episode_weighted_means,
)

#: The callback's name before 0.2.0.
HGPOMetricsCallback = EpisodeMetricsCallback

warn_moved_module(__name__, "hgpo_rllib.env_runner.metrics_callback")
