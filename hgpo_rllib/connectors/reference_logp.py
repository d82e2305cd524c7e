"""Learner connector: per-token log-probs of the frozen reference model, once per update.

The k3 KL term of the loss (docs/hgpo_algorithm.md §5) compares the policy with the frozen initial model.
Its log-probs do not change during an update, so they are computed here, without gradients, on the
whole batch in chunks of ``chunk_rows`` (bounded memory), before RLlib minibatches the rows.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.annotations import override

from hgpo_rllib.connectors.group_advantages import OPTIONAL_TOKEN_COLUMNS, REF_LOGP, TOKEN_COLUMNS


class ReferenceLogp(ConnectorV2):
    """Adds ``ref_logp`` ``[N, T]`` (float32 tensor) next to the token columns."""

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
        start = time.perf_counter()
        module = rl_module[DEFAULT_MODULE_ID].unwrapped()
        rows = batch[DEFAULT_MODULE_ID]
        n = len(rows[TOKEN_COLUMNS[0]])
        chunk = self.chunk_rows or n
        columns = [*TOKEN_COLUMNS, *(k for k in OPTIONAL_TOKEN_COLUMNS if k in rows)]
        with torch.no_grad():
            parts = [
                module.compute_ref_logp({k: rows[k][s : s + chunk] for k in columns})
                for s in range(0, n, chunk)
            ]
        rows[REF_LOGP] = torch.cat(parts).float()
        if metrics is not None:
            metrics.log_value((DEFAULT_MODULE_ID, "reference_logp_s"), time.perf_counter() - start, window=1)
        return batch
