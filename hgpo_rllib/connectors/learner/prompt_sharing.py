"""Learner connector: how much the batch's prompts share, and (with ``share_prompt_prefixes``) rows
ordered by their tokens so that rows sharing a prompt fall into one micro-batch.

Runs after the advantage piece, on numpy, before RLlib minibatches the rows: the learner's passes then
compute each shared prefix once per micro-batch (:mod:`hgpo_rllib.rl_module.prefix_sharing`). The loss
is a token mean over each minibatch, so the order of rows within one does not change an update; which
rows share a minibatch does (as any row order would), and sorted rows put a group's rollouts of a step
together.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.utils.annotations import override

from hgpo_rllib.columns import NUM_ROW_TOKENS, TOKEN_COLUMNS
from hgpo_rllib.rl_module.prefix_sharing import real_sequences, sharing_stats, token_order


class PromptSharing(ConnectorV2):
    """Logs each module's :func:`~hgpo_rllib.rl_module.prefix_sharing.sharing_stats` and its rows'
    real tokens (``num_row_tokens``, for the algorithm's ``learner_tokens_per_s``); with ``reorder``
    first puts its rows in token order."""

    def __init__(
        self,
        input_observation_space: Any = None,
        input_action_space: Any = None,
        *,
        micro_batch_size: dict[str, int | None],
        reorder: bool,
        **kwargs: Any,
    ):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.micro_batch_size = micro_batch_size
        self.reorder = reorder

    @override(ConnectorV2)
    def __call__(self, *, rl_module: Any, batch: dict[str, Any], metrics: Any = None, **kwargs: Any) -> dict:
        for module_id, rows in batch.items():
            found = real_sequences(*(rows[k] for k in TOKEN_COLUMNS)) if self.reorder else None
            if found is not None:
                order = np.asarray(token_order(found[0]))
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
