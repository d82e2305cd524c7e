"""Episode metrics of text agents, logged on the env runners (results: ``env_runners/...``).

RLlib already reports episode return and length (``episode_return_mean``, ``episode_len_mean``).
This adds what the paper reports and what shows a policy's health (docs/hgpo_algorithm.md §7):
success rate overall and per task type, the share of format-invalid actions, the share of episodes
that an environment error ended (``info["env_error"]``, otherwise only a log warning, see
envs/common/text_env.py), and WebShop's score when the env reports one (``info["score"]``).
Evaluation runners log the same keys under ``evaluation/env_runners``.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

SUCCESS_RATE = "success_rate"
INVALID_ACTION_RATE = "invalid_action_rate"
ENV_ERROR_RATE = "env_error_rate"
SCORE = "score_mean"


class HGPOMetricsCallback(RLlibCallback):
    """Logs success, invalid-action rate, env-error rate and score of every finished episode (windowed means).

    To add callbacks of your own, keep this one: ``config.callbacks([HGPOMetricsCallback, Mine])``.
    """

    def on_episode_end(
        self, *, episode: SingleAgentEpisode, metrics_logger: Any = None, **kwargs: Any
    ) -> None:
        infos = list(episode.get_infos())
        last = infos[-1]
        won = float(bool(last.get("won", False)))
        steps = infos[1:]
        window = kwargs["env_runner"].config.metrics_num_episodes_for_smoothing
        metrics_logger.log_value(SUCCESS_RATE, won, window=window)
        env_error = float(any("env_error" in info for info in steps))
        metrics_logger.log_value(ENV_ERROR_RATE, env_error, window=window)
        task_type = last.get("task_type") or infos[0].get("task_type")
        if task_type:
            metrics_logger.log_value((f"{SUCCESS_RATE}_by_task", str(task_type)), won, window=window)
        if steps:
            invalid = sum(not info.get("is_action_valid", True) for info in steps) / len(steps)
            metrics_logger.log_value(INVALID_ACTION_RATE, invalid, window=window)
        if "score" in last:
            metrics_logger.log_value(SCORE, float(last["score"]), window=window)
