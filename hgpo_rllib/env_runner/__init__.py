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
    moved={
        "GROUP_ID": "hgpo_rllib.columns",
        "TASK_SEED": "hgpo_rllib.columns",
        "PROMPT_IDS": "hgpo_rllib.columns",
        "PROMPT_MASK": "hgpo_rllib.columns",
        "RESP_MASK": "hgpo_rllib.columns",
        "RESP_LOGP": "hgpo_rllib.columns",
        "ACTION_TEXT": "hgpo_rllib.columns",
        "NUM_GENERATED_TOKENS": "hgpo_rllib.columns",
        "GENERATED_TOKENS_PER_S": "hgpo_rllib.columns",
        "TASK_GENERATOR": "hgpo_rllib.columns",
        "group_id_of": "hgpo_rllib.columns",
    },
)
