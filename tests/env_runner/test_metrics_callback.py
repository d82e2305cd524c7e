"""The episode metrics callback (hgpo_rllib.env_runner.metrics_callback): smoothed metrics over the last
episodes across iterations, weighted by each iteration's episodes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hgpo_rllib.columns import INVALID_ACTION_RATE, LENGTH_CUT, LENGTH_CUT_RATE, PROMPT_CUT, PROMPT_CUT_RATE
from hgpo_rllib.env_runner.metrics_callback import (
    EpisodeMetricsCallback,
    episode_outcome,
    episode_weighted_means,
)


def test_episode_weighted_means_weigh_iterations_by_their_episodes_and_skip_missing_values() -> None:
    means = episode_weighted_means(
        [
            (8, {"success_rate": 0.5, "score_mean": float("nan")}),
            (24, {"success_rate": 0.0, "score_mean": 0.25}),
        ]
    )
    assert means == {"success_rate": 0.125, "score_mean": 0.25}
    assert episode_weighted_means([]) == {}


def test_smoothed_metrics_cover_the_last_window_of_episodes_across_iterations() -> None:
    callback = EpisodeMetricsCallback()
    algorithm = SimpleNamespace(config=SimpleNamespace(metrics_num_episodes_for_smoothing=16))
    smoothed = []
    for success in (1.0, 0.0, 0.5, 0.25):
        runners = {"num_episodes": 8, "success_rate": success, "episode_len_mean": 10 * success}
        result = {"env_runners": runners}
        callback.on_train_result(algorithm=algorithm, result=result, metrics_logger=None)
        assert result["env_runners"]["success_rate"] == success  # the per-iteration value stays
        smoothed.append(result["env_runners"]["success_rate_smoothed"])
    assert smoothed == [1.0, 0.5, 0.25, 0.375]  # the last 16 episodes = the last 2 iterations
    assert result["env_runners"]["episode_len_mean_smoothed"] == 3.75
    empty = {"env_runners": {"num_episodes": 0}}  # an iteration without finished episodes changes nothing
    callback.on_train_result(algorithm=algorithm, result=empty, metrics_logger=None)
    assert empty == {"env_runners": {"num_episodes": 0}}


def _episode(valid: list[bool], flags: dict[str, list[bool]]) -> Any:
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    episode = SingleAgentEpisode()
    episode.add_env_reset(observation="o", infos={"task_type": "t"})
    for t, ok in enumerate(valid):
        episode.add_env_step(
            "o",
            "a",
            0.0,
            infos={"is_action_valid": ok, "won": False},
            terminated=t == len(valid) - 1,
            extra_model_outputs={key: values[t] for key, values in flags.items()},
        )
    return episode


def test_length_cut_and_cut_prompts_are_their_own_shares_of_turns_apart_from_invalid() -> None:
    logged: dict[str, list[float]] = {}
    logger = SimpleNamespace(log_value=lambda key, value, **kw: logged.setdefault(key, []).append(value))
    runner = SimpleNamespace(config=SimpleNamespace(metrics_num_episodes_for_smoothing=4))
    flags = {LENGTH_CUT: [True, False, False, True], PROMPT_CUT: [False, False, True, True]}
    episode = _episode([False, True, True, False], flags)
    outcome = episode_outcome(episode)
    assert (outcome.invalid_rate, outcome.length_cut_rate, outcome.prompt_cut_rate) == (0.5, 0.5, 0.5)
    callback = EpisodeMetricsCallback()
    callback.on_episode_end(episode=episode, metrics_logger=logger, env_runner=runner)
    invalid_only = _episode([False, True], {LENGTH_CUT: [False, False], PROMPT_CUT: [False, False]})
    callback.on_episode_end(episode=invalid_only, metrics_logger=logger, env_runner=runner)
    assert logged[INVALID_ACTION_RATE] == [0.5, 0.5]
    assert logged[LENGTH_CUT_RATE] == [0.5, 0.0] and logged[PROMPT_CUT_RATE] == [0.5, 0.0]
    # An episode recorded without the flags (evaluation rollouts, older runs) reports none.
    before = episode_outcome(_episode([True], {}))
    assert before.length_cut_rate is None and before.prompt_cut_rate is None
