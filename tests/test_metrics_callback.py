"""The episode metrics callback (hgpo_rllib.env_runner.metrics_callback): smoothed metrics over the last
episodes across iterations, weighted by each iteration's episodes."""

from __future__ import annotations

from types import SimpleNamespace

from hgpo_rllib.env_runner.metrics_callback import EpisodeMetricsCallback, episode_weighted_means


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
