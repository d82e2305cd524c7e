"""Learner connectors: per-token log-probs that stay fixed during an update, computed once.

Both run without gradients on the whole batch in chunks of ``chunk_rows`` (bounded memory), before
RLlib minibatches the rows (docs/hgpo_algorithm.md §5):

* :class:`ReferenceLogp`: the frozen initial model's, for the k3 KL term;
* :class:`RecomputeOldLogp`: the policy's own before the update, the PPO ratio's denominator, as
  verl recomputes them on the training engine. The sampler's (vLLM, another dtype or kernel) differ
  slightly, which would make the first minibatch's ratio differ from 1 and clip spuriously; they are
  kept as ``sampler_logp`` for the ``logp_gap_vs_sampler`` metric. With a gap threshold
  (``recompute_old_logp="auto"``) the pass is skipped where the sampler's matched the learner's in
  the last update: they are then the old policy's (float32 HF sampling: ~3e-6 per token). Rows the
  update will not compute (the learner's ``computed_rows``: ``skip_zero_advantage_rows``) are left
  out of it and keep the sampler's log-probs, which no loss reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.utils.annotations import override

from hgpo_rllib.columns import (
    OLD_LOGP,
    OLD_LOGP_FROM_SAMPLER_KEY,
    OPTIONAL_TOKEN_COLUMNS,
    REF_LOGP,
    SAMPLER_LOGP,
    TOKEN_COLUMNS,
)


def logp_in_chunks(
    score: Callable[[dict[str, Any]], torch.Tensor],
    rows: dict[str, Any],
    chunk_rows: int | None,
    index: torch.Tensor | None = None,
) -> torch.Tensor:
    """``score`` (token rows -> per-row tensors: [n, T] log-probs, or a critic's [n, T, 3] values) over
    ``rows`` (those at ``index`` only, if given) in chunks, without gradients, as float32."""
    columns = [*TOKEN_COLUMNS, *(k for k in OPTIONAL_TOKEN_COLUMNS if k in rows)]
    if index is not None:
        rows = {k: rows[k][index] for k in columns}
    n = len(rows[TOKEN_COLUMNS[0]])
    chunk = chunk_rows or n
    with torch.no_grad():
        parts = [score({k: rows[k][s : s + chunk] for k in columns}) for s in range(0, n, chunk)]
    return torch.cat(parts).float()


class _ChunkedLogp(ConnectorV2):
    """Base of the two: one timed no-grad pass over each module's rows; subclasses fill the columns."""

    #: Learner metric (seconds of this pass).
    timer_key: str = ""

    def __init__(
        self,
        input_observation_space: Any = None,
        input_action_space: Any = None,
        *,
        chunk_rows: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.chunk_rows = chunk_rows

    @override(ConnectorV2)
    def __call__(
        self, *, rl_module: Any, batch: dict[str, Any], episodes: Any, metrics: Any = None, **kwargs: Any
    ) -> dict:
        for module_id, rows in batch.items():  # one module, or one per role of a multi-agent system
            start = time.perf_counter()
            ran = self.fill(module_id, rl_module[module_id].unwrapped(), rows)
            if ran and metrics is not None:
                metrics.log_value((module_id, self.timer_key), time.perf_counter() - start, window=1)
        return batch

    def fill(self, module_id: str, module: Any, rows: dict[str, Any]) -> bool:
        """Add the pass's columns to ``rows``; False where the pass was not needed (no timer then)."""
        raise NotImplementedError


class ReferenceLogp(_ChunkedLogp):
    """Adds ``ref_logp`` ``[N, T]`` (float32 tensor) next to the token columns."""

    timer_key = "reference_logp_s"

    def fill(self, module_id: str, module: Any, rows: dict[str, Any]) -> bool:
        rows[REF_LOGP] = logp_in_chunks(module.compute_ref_logp, rows, self.chunk_rows)
        return True


class RecomputeOldLogp(_ChunkedLogp):
    """Moves the sampler's ``old_logp`` to ``sampler_logp`` and puts the learner's own in its place.

    They come from the same forward as training's (same chunks of ``chunk_rows`` = the micro-batch
    size, same compute dtype), so before the first optimiser step the ratio is exactly 1. Where the
    update is a single optimiser step (one epoch over at most ``single_step_rows`` rows: one
    minibatch), the training forward itself runs on the old policy: the pass is skipped and the loss
    takes its own log-probs, detached, as the old ones (``old_logp`` is left out of the batch).

    With ``gap_threshold`` (``recompute_old_logp="auto"``) the sampler's log-probs stay ``old_logp``
    and the pass is skipped where the module's last measured ``logp_gap_vs_sampler`` (the learner
    sets :attr:`last_gaps` after each update) is at most the threshold; it runs on the first update
    and wherever the gap exceeded it. Each update logs the choice (``old_logp_from_sampler``).

    ``computed_rows`` (module id, rows -> a boolean mask of the rows the update computes, or None for
    all): the pass scores only those, in chunks of each minibatch's own rows where ``spans`` (row
    count -> the minibatches' cuts, or None) knows them, so that the chunks stay the training
    micro-batches; the other rows keep the sampler's log-probs.
    """

    timer_key = "old_logp_s"

    def __init__(
        self,
        *args: Any,
        single_step_rows: float = 0,
        gap_threshold: float | None = None,
        computed_rows: Callable[[str, dict[str, Any]], torch.Tensor | None] | None = None,
        spans: Callable[[int], list[int] | None] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.single_step_rows = single_step_rows
        self.gap_threshold = gap_threshold
        self.computed_rows = computed_rows
        self.spans = spans
        #: Each module's mean absolute log-prob gap (learner - sampler, per token) in the last update
        #: that measured one; the same on every learner (the learner reduces it over all of them).
        self.last_gaps: dict[str, float] = {}

    @override(ConnectorV2)
    def __call__(
        self, *, rl_module: Any, batch: dict[str, Any], episodes: Any, metrics: Any = None, **kwargs: Any
    ) -> dict:
        batch = super().__call__(
            rl_module=rl_module, batch=batch, episodes=episodes, metrics=metrics, **kwargs
        )
        if self.gap_threshold is not None and metrics is not None:
            for module_id, rows in batch.items():
                from_sampler = float(OLD_LOGP in rows and SAMPLER_LOGP not in rows)
                metrics.log_value((module_id, OLD_LOGP_FROM_SAMPLER_KEY), from_sampler, window=1)
        return batch

    def remember_gaps(
        self, gaps: dict[str, float], module_ids: Sequence[str] | None = None, device: Any = "cpu"
    ) -> None:
        """An update's gaps by module, for the next update's decision (with a threshold). With
        ``module_ids`` (all the learner's modules; several learners, each calling this) the largest
        gap any learner measured, one all-reduce on ``device`` (the learner's), so all decide alike:
        sharded learners must (their pass is a collective)."""
        if self.gap_threshold is None:
            return
        if module_ids is not None:
            values = [gaps.get(mid, -1.0) for mid in module_ids]  # -1: not measured on this learner
            largest = torch.tensor(values, dtype=torch.float64, device=device)
            torch.distributed.all_reduce(largest, op=torch.distributed.ReduceOp.MAX)
            gaps = {mid: gap for mid, gap in zip(module_ids, largest.tolist(), strict=True) if gap != -1.0}
        self.last_gaps.update(gaps)

    def sampler_matches(self, module_id: str) -> bool:
        """Whether the sampler's log-probs stand for the old policy's: a threshold is set and the
        module's last gap (none before its first update) is at most it."""
        gap = self.last_gaps.get(module_id)
        return self.gap_threshold is not None and gap is not None and gap <= self.gap_threshold

    def fill(self, module_id: str, module: Any, rows: dict[str, Any]) -> bool:
        if len(rows[OLD_LOGP]) <= self.single_step_rows:
            rows[SAMPLER_LOGP] = rows.pop(OLD_LOGP)
            return False
        if self.sampler_matches(module_id):
            return False
        rows[SAMPLER_LOGP] = rows.pop(OLD_LOGP)

        def score(chunk: dict[str, Any]) -> torch.Tensor:
            return module.forward_train(chunk)["logp"]

        computed = self.computed_rows(module_id, rows) if self.computed_rows else None
        if computed is None:
            rows[OLD_LOGP] = logp_in_chunks(score, rows, self.chunk_rows)
        else:
            rows[OLD_LOGP] = self._computed_logp(score, rows, computed)
        return True

    def _computed_logp(
        self, score: Callable[[dict[str, Any]], torch.Tensor], rows: dict[str, Any], computed: torch.Tensor
    ) -> torch.Tensor:
        """The learner's log-probs of the ``computed`` rows, minibatch by minibatch; the sampler's
        elsewhere."""
        old_logp = rows[SAMPLER_LOGP].float().clone()
        num_rows = len(old_logp)
        bounds = (self.spans(num_rows) if self.spans else None) or [0, num_rows]
        for start, end in zip(bounds, bounds[1:], strict=False):
            index = torch.nonzero(computed[start:end]).squeeze(-1) + start
            if len(index):
                old_logp[index] = logp_in_chunks(score, rows, self.chunk_rows, index)
        return old_logp
