"""Minibatches of a multi-module batch in which each module steps through its own rows only.

RLlib's ``MiniBatchCyclicIterator`` gives every module ``minibatch_size`` rows in every minibatch,
repeating a smaller module's rows to fill it, and runs until the module with the most rows is
covered. In a team (docs/drmas.md) the roles' row counts differ several-fold (per WebShop game turn
one verifier turn, then one searcher or buyer turn), so a searcher with 10 rows trained on each of
them about six times per minibatch of 64, some rows once more than others, and took as many
optimiser steps as the verifier. Dr. MAS updates each agent's LLM on its own rows (docs/drmas.md
§Per-module updates): here module m takes ``num_epochs`` passes over its rows, each row once per
pass, in minibatches of at most ``minibatch_size`` rows, or in ``minibatches_per_module`` near-equal
ones (the authors' adaptive mini-batch: a fixed number of steps whatever the row count); step k
carries the modules that still have a k-th minibatch.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch


def minibatch_bounds(num_rows: int, minibatch_size: int | None, minibatches: int | None) -> list[int]:
    """Where one pass over ``num_rows`` rows is cut: ``minibatches`` near-equal parts (at most one
    per row) if given, else parts of ``minibatch_size`` rows (the last one shorter), else one part."""
    if minibatches:
        parts = min(minibatches, num_rows)
        return [int(b) for b in np.linspace(0, num_rows, parts + 1).round()]
    size = minibatch_size or num_rows
    return [*range(0, num_rows, size), num_rows] if num_rows else [0]


class PerModuleMiniBatches:
    """Iterates the minibatches of ``batch``, as many as its largest module's steps; a module absent
    from a step has no rows, no gradient and no optimiser step in it."""

    def __init__(
        self,
        batch: MultiAgentBatch,
        *,
        minibatch_size: int | None,
        minibatches_per_module: int | None,
        num_epochs: int,
        shuffle_batch_per_epoch: bool = False,
    ):
        self._batch = batch
        self._bounds = {
            mid: minibatch_bounds(len(rows), minibatch_size, minibatches_per_module)
            for mid, rows in batch.policy_batches.items()
        }
        self._num_epochs = num_epochs
        self._shuffle = shuffle_batch_per_epoch
        self.num_steps = max((num_epochs * (len(b) - 1) for b in self._bounds.values()), default=0)

    def _module_minibatches(self, module_id: str, rows: SampleBatch) -> Iterator[SampleBatch]:
        bounds = self._bounds[module_id]
        for _ in range(self._num_epochs):
            if self._shuffle:
                rows.shuffle()
            for start, end in zip(bounds[:-1], bounds[1:], strict=True):
                yield rows[start:end]

    def __iter__(self) -> Iterator[MultiAgentBatch]:
        modules = self._batch.policy_batches
        per_module = {mid: self._module_minibatches(mid, rows) for mid, rows in modules.items()}
        for _ in range(self.num_steps):
            step = {mid: rows for mid, it in per_module.items() if (rows := next(it, None)) is not None}
            yield MultiAgentBatch(step, len(self._batch))
