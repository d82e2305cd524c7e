"""Progress lines inside long iterations (hgpo_rllib/progress.py): what the runners and learners count,
the line the driver prints from it and when it prints. That a remote runner's and the learner's counts
reach the line on Ray is checked in tests/end_to_end/test_algorithm.py's two-iteration run."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.minibatch_utils import MiniBatchCyclicIterator, MiniBatchDummyIterator

from hgpo_rllib.algorithms.per_module_minibatches import PerModuleMiniBatches
from hgpo_rllib.algorithms.text_agent_learner import planned_minibatches
from hgpo_rllib.progress import (
    EPISODES,
    LEARNING,
    MINIBATCHES,
    MINIBATCHES_DONE,
    PASSES,
    SAMPLING,
    TOKENS,
    IterationProgress,
    ProgressBoard,
    ProgressTicket,
    Reporter,
    SamplingCounts,
    learning_text,
    reported_minibatches,
    sampling_text,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class LocalBoard:
    """Stands in for the board's actor handle: ``report.remote(...)`` reports at once, in process."""

    def __init__(self) -> None:
        self.board = ProgressBoard()
        self.report = SimpleNamespace(remote=self.board.report)


def local_progress(interval_s: float, clock: FakeClock, lines: list[str] | None = None) -> IterationProgress:
    return IterationProgress(
        interval_s,
        clock=clock,
        start_board=LocalBoard,
        read_board=lambda board, ids: board.board.read(ids),
        write=(lines if lines is not None else []).append,
    )


# ------------------------------------------------------------------------------ the texts
def test_the_sampling_text_sums_the_runners_and_divides_by_the_phase_seconds() -> None:
    counts = [{EPISODES: 3, TOKENS: 1000}, {EPISODES: 2, TOKENS: 234}]
    assert (
        sampling_text(counts, 8, 30.1) == "sampling: 5/8 episodes, 1,234 tokens generated, 41 tokens/s, 30 s"
    )
    assert sampling_text([], 8, 30.0) == "sampling: 0/8 episodes, 0 tokens generated, 0 tokens/s, 30 s"


@pytest.mark.parametrize(
    ("done", "expected"),
    [
        (0, "learning: pass 1/2, minibatch 1/6, 120 s"),
        (2, "learning: pass 1/2, minibatch 3/6, 120 s"),
        (3, "learning: pass 2/2, minibatch 4/6, 120 s"),
        (6, "learning: pass 2/2, minibatch 6/6, 120 s"),
    ],
)
def test_the_learning_text_names_the_pass_and_minibatch_under_way(done: int, expected: str) -> None:
    counts = [{MINIBATCHES: 6, MINIBATCHES_DONE: done, PASSES: 2}]
    assert learning_text(counts, 120.4) == expected


def test_before_its_first_minibatch_the_learner_prepares_the_batch() -> None:
    assert learning_text([], 30.0) == "learning: preparing the batch, 30 s"


# ------------------------------------------------------------------------------ reporting
def test_a_reporter_sends_at_most_every_second_unless_something_finished() -> None:
    board, clock = LocalBoard(), FakeClock()
    reporter = Reporter(ProgressTicket(board, 1), "runner", clock)
    reporter.send({TOKENS: 5})
    clock.now += 0.5
    reporter.send({TOKENS: 9})  # too soon: not sent
    assert board.board.read([1]) == {1: [{TOKENS: 5}]}
    reporter.send({EPISODES: 1, TOKENS: 9}, at_once=True)
    assert board.board.read([1]) == {1: [{EPISODES: 1, TOKENS: 9}]}
    clock.now += 1.0
    reporter.send({EPISODES: 1, TOKENS: 20})
    assert board.board.read([1]) == {1: [{EPISODES: 1, TOKENS: 20}]}


def test_each_sampling_call_of_a_runner_counts_on_its_own() -> None:
    board = LocalBoard()
    first, second = SamplingCounts(ProgressTicket(board, 1), 1), SamplingCounts(ProgressTicket(board, 1), 1)
    first.add(episodes=2, tokens=40)
    second.add(episodes=1, tokens=10)
    counts = board.board.read([1])[1]
    assert sampling_text(counts, 4, 10.0) == "sampling: 3/4 episodes, 50 tokens generated, 5 tokens/s, 10 s"


def test_the_learner_reports_each_minibatch_after_its_step() -> None:
    board = LocalBoard()
    reporter = Reporter(ProgressTicket(board, 1), "learner")
    seen = []
    for minibatch in reported_minibatches(["a", "b", "c"], 3, 1, reporter):
        seen.append((minibatch, board.board.read([1])[1][0][MINIBATCHES_DONE]))
    assert seen == [("a", 0), ("b", 1), ("c", 2)]
    assert board.board.read([1])[1] == [{MINIBATCHES: 3, PASSES: 1, MINIBATCHES_DONE: 3}]


def test_the_board_forgets_ended_phases() -> None:
    board = ProgressBoard()
    board.report(1, "a", {EPISODES: 1})
    board.report(2, "b", {EPISODES: 2})
    assert board.read([2]) == {2: [{EPISODES: 2}]}
    assert board.read([1, 2]) == {1: [], 2: [{EPISODES: 2}]}


def _batch(**rows: int) -> MultiAgentBatch:
    return MultiAgentBatch({m: SampleBatch({"x": np.arange(n)}) for m, n in rows.items()}, max(rows.values()))


@pytest.mark.parametrize(
    ("iterator", "expected"),
    [
        (MiniBatchDummyIterator(_batch(p=5), minibatch_size=None), 1),
        (
            MiniBatchCyclicIterator(
                _batch(p=24), num_epochs=2, minibatch_size=10, shuffle_batch_per_epoch=False
            ),
            5,
        ),
        (
            MiniBatchCyclicIterator(
                _batch(p=10, q=3), num_epochs=1, minibatch_size=4, shuffle_batch_per_epoch=False
            ),
            3,
        ),
        (
            MiniBatchCyclicIterator(
                _batch(p=24),
                num_epochs=1,
                minibatch_size=8,
                shuffle_batch_per_epoch=False,
                num_total_minibatches=7,
            ),
            7,
        ),
        (
            PerModuleMiniBatches(
                _batch(p=10, q=3), minibatch_size=4, minibatches_per_module=None, num_epochs=2
            ),
            6,
        ),
    ],
)
def test_the_learner_plans_as_many_minibatches_as_its_iterator_yields(iterator: Any, expected: int) -> None:
    assert planned_minibatches(iterator) == expected == sum(1 for _ in iterator)


# ------------------------------------------------------------------------------ the driver's line
def test_the_line_shows_every_phase_under_way_from_the_counts() -> None:
    clock = FakeClock()
    progress = local_progress(30.0, clock)
    with progress.iteration(3):
        sampling = progress.begin(SAMPLING, 8)
        assert sampling is not None
        clock.now += 10.0
        SamplingCounts(sampling, 1).add(episodes=5, tokens=1234)
        learning = progress.begin(LEARNING)
        assert learning is not None
        clock.now += 20.0
        assert progress.line() == (
            "iter 3 sampling: 5/8 episodes, 1,234 tokens generated, 41 tokens/s, 30 s; "
            "learning: preparing the batch, 20 s"
        )
        progress.end(sampling)
        reporter = learning.reporter("learner")
        reporter.send({MINIBATCHES: 6, MINIBATCHES_DONE: 2, PASSES: 2}, at_once=True)
        assert progress.line() == "iter 3 learning: pass 1/2, minibatch 3/6, 20 s"
        progress.end(learning)
        assert progress.line() is None  # between phases (the weight sync): nothing


def test_a_short_iteration_prints_nothing_and_a_long_one_a_line_per_interval() -> None:
    lines: list[str] = []
    progress = IterationProgress(
        0.05, start_board=LocalBoard, read_board=lambda board, ids: board.board.read(ids), write=lines.append
    )
    with progress.iteration(1), progress.phase(SAMPLING, 4):
        time.sleep(0.01)
    assert lines == []
    with progress.iteration(2), progress.phase(LEARNING):
        time.sleep(0.3)
    assert 2 <= len(lines) <= 6
    assert all(re.fullmatch(r"iter 2 learning: preparing the batch, 0 s", line) for line in lines)


def test_an_interval_of_zero_starts_no_board_and_prints_nothing() -> None:
    started: list[Any] = []
    lines: list[str] = []
    progress = IterationProgress(0, start_board=lambda: started.append(1), write=lines.append)
    with progress.iteration(1), progress.phase(SAMPLING, 4) as ticket:
        assert ticket is None
    assert started == [] and lines == []


# ------------------------------------------------------------------------------ the setting
def test_the_interval_is_a_reporting_setting_of_30_s() -> None:
    """Its validation is with the others' (tests/algorithms/test_validation.py)."""
    from hgpo_rllib import HGPOConfig

    assert HGPOConfig().progress_interval_s == 30.0
    assert HGPOConfig().reporting(progress_interval_s=5).progress_interval_s == 5
