"""Learner connector: how much the batch's prompts share, and the rows' order for the learner's
micro-batches: token order with ``share_prompt_prefixes`` (rows sharing a prompt fall into one
micro-batch), else length order inside each minibatch with ``length_buckets``.

Runs after the advantage piece, on numpy, before RLlib minibatches the rows: the learner's passes then
compute each shared prefix once per micro-batch (:mod:`hgpo_rllib.rl_module.prefix_sharing`), or pad
each micro-batch to about its own rows' length. The loss is a token mean over each minibatch, so the
order of rows within one does not change an update (float rounding aside). Token order changes which
rows share a minibatch (as any row order would), and sorted rows put a group's rollouts of a step
together; length order moves rows only inside the spans the learner's minibatches cut
(``length_spans``), so every minibatch keeps its rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.utils.annotations import override

from hgpo_rllib.columns import NUM_ROW_TOKENS, PROMPT_MASK, RESP_MASK, TOKEN_COLUMNS
from hgpo_rllib.rl_module.prefix_sharing import real_sequences, sharing_stats, token_order


def length_order(lengths: np.ndarray, spans: Sequence[int]) -> np.ndarray:
    """Row indices sorted by ``lengths`` inside each span ``[spans[i], spans[i + 1])`` (stable: equal
    lengths keep their order); the spans themselves stay where they are."""
    return np.concatenate(
        [
            start + np.argsort(lengths[start:end], kind="stable")
            for start, end in zip(spans, spans[1:], strict=False)
        ]
        or [np.arange(len(lengths))]
    )


class PromptSharing(ConnectorV2):
    """Logs each module's :func:`~hgpo_rllib.rl_module.prefix_sharing.sharing_stats` and its rows'
    real tokens (``num_row_tokens``, for the algorithm's ``learner_tokens_per_s``); with ``reorder``
    first puts its rows in token order, else with ``length_spans`` (rows -> the minibatches' cuts, or
    None where none holds) in length order inside each span."""

    def __init__(
        self,
        input_observation_space: Any = None,
        input_action_space: Any = None,
        *,
        micro_batch_size: dict[str, int | None],
        reorder: bool,
        length_spans: Callable[[int], Sequence[int] | None] | None = None,
        **kwargs: Any,
    ):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.micro_batch_size = micro_batch_size
        self.reorder = reorder
        self.length_spans = length_spans

    @override(ConnectorV2)
    def __call__(self, *, rl_module: Any, batch: dict[str, Any], metrics: Any = None, **kwargs: Any) -> dict:
        for module_id, rows in batch.items():
            order = self._order(rows)
            if order is not None:
                batch[module_id] = rows = {key: value[order] for key, value in rows.items()}
            tokens = [rows[k] for k in TOKEN_COLUMNS]
            if metrics is not None:
                micro = self.micro_batch_size.get(module_id)
                pair_cost = rl_module[module_id].unwrapped().attention_pair_cost if self.reorder else None
                for name, value in sharing_stats(*tokens, micro, pair_cost).items():
                    metrics.log_value((module_id, name), value, window=1)
                real = int(np.asarray(tokens[1]).sum() + np.asarray(tokens[3]).sum())
                metrics.log_value((module_id, NUM_ROW_TOKENS), real, reduce="sum", window=1)
        return batch

    def _order(self, rows: dict[str, Any]) -> np.ndarray | None:
        """The rows' new order, or None to keep theirs."""
        if self.reorder:
            found = real_sequences(*(rows[k] for k in TOKEN_COLUMNS))
            return None if found is None else np.asarray(token_order(found[0]))
        if self.length_spans is None:
            return None
        lengths = np.asarray(rows[PROMPT_MASK]).sum(axis=1) + np.asarray(rows[RESP_MASK]).sum(axis=1)
        spans = self.length_spans(len(lengths))
        return None if spans is None else length_order(lengths, spans)
