"""Each module of a multi-module batch steps through its own rows (docs/drmas.md §Per-module updates)."""

from __future__ import annotations

import numpy as np
import pytest
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from hgpo_rllib.algorithms.per_module_minibatches import PerModuleMiniBatches, minibatch_bounds


def team_batch(rows: dict[str, int]) -> MultiAgentBatch:
    return MultiAgentBatch(
        {mid: SampleBatch({"row": np.arange(n)}) for mid, n in rows.items()}, sum(rows.values())
    )


def steps_of(minibatches: PerModuleMiniBatches) -> list[dict[str, list[int]]]:
    return [{mid: b["row"].tolist() for mid, b in step.policy_batches.items()} for step in minibatches]


def test_each_module_takes_its_own_minibatches_each_row_once_per_epoch() -> None:
    minibatches = PerModuleMiniBatches(
        team_batch({"verifier": 10, "searcher": 3}),
        minibatch_size=4,
        minibatches_per_module=None,
        num_epochs=2,
    )
    assert minibatches.num_steps == 6
    steps = steps_of(minibatches)
    epoch = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [s["verifier"] for s in steps] == epoch + epoch
    # The searcher's 3 rows are one minibatch per epoch, not cycled up to 4 rows per step.
    assert [s.get("searcher") for s in steps] == [[0, 1, 2], [0, 1, 2], None, None, None, None]


def test_a_fixed_number_of_near_equal_minibatches_per_module() -> None:
    """Dr. MAS's adaptive mini-batch: the same step count whatever a module's rows (fewer rows than
    steps: one row per step)."""
    minibatches = PerModuleMiniBatches(
        team_batch({"verifier": 10, "buyer": 2}), minibatch_size=64, minibatches_per_module=3, num_epochs=1
    )
    steps = steps_of(minibatches)
    assert [s["verifier"] for s in steps] == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    assert [s.get("buyer") for s in steps] == [[0], [1], None]


@pytest.mark.parametrize(
    ("rows", "size", "parts", "bounds"),
    [
        (5, None, None, [0, 5]),
        (5, 5, None, [0, 5]),
        (5, 2, None, [0, 2, 4, 5]),
        (7, 64, 2, [0, 4, 7]),
        (0, 4, None, [0]),
    ],
)
def test_minibatch_bounds(rows: int, size: int | None, parts: int | None, bounds: list[int]) -> None:
    assert minibatch_bounds(rows, size, parts) == bounds
