"""Learner connector: complete episodes -> one token row per step with its group-relative advantage.

Same placement as PPO's GAE piece (docs/rllib_notes.md §3.2, §5.4): it sees the learner's whole batch of
complete rollout groups before RLlib minibatches it, which the estimators require (docs/hgpo_algorithm.md
§1.1 step 6, §9). The estimator itself is :mod:`hgpo_rllib.advantages` (run on the batch's
:class:`~hgpo_rllib.advantages.step_table.StepTable`); this piece only calls it and lays the frozen
sampling-time tokens out as a dynamically padded batch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override

from hgpo_rllib.advantages.step_table import (
    Estimate,
    EstimatorSettings,
    StepTable,
    estimate_advantages,
    level_metrics,
)
from hgpo_rllib.columns import ADVANTAGES, group_id_of
from hgpo_rllib.connectors.learner.token_rows import token_rows
from hgpo_rllib.rl_module.apis import TokenPolicyAPI


class GroupAdvantages(ConnectorV2):
    """Builds the learner's train batch (numpy) from complete rollout groups.

    Logs, under the module id: advantage statistics, rollout-group sizes, per-level history-group
    sizes, singleton fractions and item statistics
    (:func:`~hgpo_rllib.advantages.step_table.level_metrics`), and the estimator's
    wall time.
    """

    def __init__(
        self,
        input_observation_space: Any = None,
        input_action_space: Any = None,
        *,
        settings: EstimatorSettings,
        **kwargs: Any,
    ):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.settings = settings

    @override(ConnectorV2)
    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: Sequence[SingleAgentEpisode],
        metrics: Any = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        start = time.perf_counter()
        estimate = estimate_advantages(StepTable.from_episodes(episodes), self.settings)
        estimator_s = time.perf_counter() - start
        module: TokenPolicyAPI = rl_module[DEFAULT_MODULE_ID].unwrapped()
        rows = token_rows(episodes, module.pad_token_id)
        rows[ADVANTAGES] = estimate.advantages.astype(np.float32)
        batch[DEFAULT_MODULE_ID] = rows
        if metrics is not None:
            self._log_stats(metrics, episodes, estimate, estimator_s)
            metrics.log_value(
                (DEFAULT_MODULE_ID, "advantage_connector_s"), time.perf_counter() - start, window=1
            )
        return batch

    def _log_stats(
        self, metrics: Any, episodes: Sequence[SingleAgentEpisode], estimate: Estimate, estimator_s: float
    ) -> None:
        _, per_group = np.unique([group_id_of(ep) for ep in episodes], return_counts=True)
        # Summed / min / max over learners: with several learners these show whether any of them
        # received a split rollout group.
        advantages = estimate.advantages
        for key, value, reduce in (
            ("num_groups", len(per_group), "sum"),
            ("num_step_rows", len(advantages), "sum"),
            ("episodes_per_group_min", int(per_group.min()), "min"),
            ("episodes_per_group_max", int(per_group.max()), "max"),
        ):
            metrics.log_value((DEFAULT_MODULE_ID, key), value, reduce=reduce, window=1)
        stats = {
            "advantage_mean": float(advantages.mean()),
            "advantage_std": float(advantages.std()),
            "advantage_abs_mean": float(np.abs(advantages).mean()),
            "advantage_min": float(advantages.min()),
            "advantage_max": float(advantages.max()),
            "advantage_zero_frac": float((advantages == 0).mean()),
            "advantage_estimator_s": estimator_s,
            **level_metrics(estimate, self.settings),
        }
        for key, value in stats.items():
            metrics.log_value((DEFAULT_MODULE_ID, key), value, window=1)
