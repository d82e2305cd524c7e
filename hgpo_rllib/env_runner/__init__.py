"""Grouped rollouts on the env runners (≈ ``rllib/env/``): the runner that samples whole rollout groups,
its env worker processes, and the episode metrics callback."""

from hgpo_rllib._imports import lazy_getattr

__all__ = ["EnvWorkerPool", "EpisodeMetricsCallback", "GroupedEnvRunner"]

__getattr__ = lazy_getattr(
    __name__,
    {
        "GroupedEnvRunner": "hgpo_rllib.env_runner.grouped_env_runner",
        "EnvWorkerPool": "hgpo_rllib.env_runner.env_pool",
        "EpisodeMetricsCallback": "hgpo_rllib.env_runner.metrics_callback",
    },
)
