"""An evaluation's throughput (issue 63 item 6): each policy's episodes, seconds of play, episodes per
hour and generated tokens per second, counted from what this process played."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hgpo_rllib.evaluation import throughput as module
from hgpo_rllib.evaluation.throughput import THROUGHPUT_RECORD, Throughput


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """``time.perf_counter`` of the module, reading the readings the test appends."""
    readings: list[float] = []
    monkeypatch.setattr(module.time, "perf_counter", lambda: readings.pop(0))
    return readings


def test_rates_are_counted_from_the_plays_timed_here(clock: list[float], tmp_path: Path) -> None:
    tokens = [100]
    throughput = Throughput(batch_size=4, token_counts={"checkpoint": lambda: tokens[0]})

    def play_checkpoint() -> list[int]:
        tokens[0] += 300
        return [1, 2, 3]

    clock.extend([10.0, 40.0, 50.0, 62.0])
    throughput.timed("checkpoint", play_checkpoint)  # 3 episodes, 300 tokens in 30 s
    throughput.timed("random", lambda: [1, 2])  # 2 episodes in 12 s, no tokens
    assert throughput.record() == {
        "batch_size": 4,
        "policies": {
            "checkpoint": {
                "episodes": 3,
                "play_seconds": 30.0,
                "episodes_per_hour": 360.0,
                "generated_tokens": 300,
                "generated_tokens_per_s": 10.0,
            },
            "random": {
                "episodes": 2,
                "play_seconds": 12.0,
                "episodes_per_hour": 600.0,
                "generated_tokens": None,
                "generated_tokens_per_s": None,
            },
        },
    }
    clock.extend([100.0, 190.0])  # a second seed of the checkpoint: 1 episode in 90 s
    throughput.timed("checkpoint", lambda: [1])
    checkpoint = throughput.played["checkpoint"]
    assert (checkpoint.episodes, checkpoint.seconds, checkpoint.episodes_per_hour) == (4, 120.0, 120.0)
    assert throughput.lines() == [
        "- checkpoint: 4 episodes in 120.0 s of play, 120.0 episodes per hour, 300 generated tokens (2.5/s)",
        "- random: 2 episodes in 12.0 s of play, 600.0 episodes per hour",
    ]
    throughput.write(tmp_path)
    assert json.loads((tmp_path / THROUGHPUT_RECORD).read_text()) == throughput.record()


def test_excluded_seconds_are_left_out_of_the_play_being_timed(clock: list[float]) -> None:
    throughput = Throughput(batch_size=2)

    def play_after_loading() -> list[int]:
        throughput.exclude(20.0)  # a team's runner starting inside its first play
        return [1, 2, 3, 4]

    clock.extend([0.0, 60.0, 60.0, 100.0])
    throughput.timed("checkpoint", play_after_loading)
    assert throughput.played["checkpoint"].seconds == 40.0
    throughput.timed("checkpoint", lambda: [1])  # the exclusion does not carry over to the next play
    assert throughput.played["checkpoint"].seconds == 80.0


def test_a_run_that_played_nothing_says_so() -> None:
    throughput = Throughput(batch_size=16)
    assert throughput.record() == {"batch_size": 16, "policies": {}}
    assert throughput.lines() == ["- nothing played in this run: every episode was saved before or copied"]
