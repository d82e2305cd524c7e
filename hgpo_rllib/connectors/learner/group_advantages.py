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
from ray.rllib.core import ALL_MODULES, DEFAULT_MODULE_ID
from ray.rllib.utils.annotations import override

from hgpo_rllib.advantages.step_table import (
    Estimate,
    EstimatorSettings,
    StepTable,
    estimate_advantages,
    level_metrics,
    team_agent_episodes,
)
from hgpo_rllib.columns import ADVANTAGES, group_id_of
from hgpo_rllib.connectors.learner.token_rows import token_rows
from hgpo_rllib.rl_module.apis import TokenPolicyAPI


class GroupAdvantages(ConnectorV2):
    """Builds the learner's train batch (numpy) from complete rollout groups.

    Logs, under the module id: advantage statistics, rollout-group sizes, how many groups are
    informative (:func:`informative_groups`) and how many of them because their episodes' env
    returns differ (:func:`reward_differing_groups`), per-level history-group sizes, singleton fractions and
    item statistics (:func:`~hgpo_rllib.advantages.step_table.level_metrics`), and the estimator's
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
        episodes: Sequence[Any],
        metrics: Any = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        start = time.perf_counter()
        table = StepTable.from_episodes(episodes)
        estimate = estimate_advantages(table, self.settings)
        estimator_s = time.perf_counter() - start
        for module_id, (module_episodes, selected) in self._rows_by_module(episodes, table).items():
            module: TokenPolicyAPI = rl_module[module_id].unwrapped()
            rows = token_rows(module_episodes, module.pad_token_id)
            rows[ADVANTAGES] = estimate.advantages[selected].astype(np.float32)
            batch[module_id] = rows
        if metrics is not None:
            self._log_stats(metrics, episodes, table, estimate, estimator_s)
            metrics.log_value(
                (self._stats_key(table), "advantage_connector_s"), time.perf_counter() - start, window=1
            )
        return batch

    @staticmethod
    def _rows_by_module(episodes: Sequence[Any], table: StepTable) -> dict[str, tuple[list[Any], Any]]:
        """Each module's episodes (single-agent episodes, in the table's row order) and its rows of the
        table: every row for one module, or each role's turns for the module it maps to."""
        if table.module_ids is None:
            return {DEFAULT_MODULE_ID: (list(episodes), slice(None))}
        agents = [agent for _, agent in team_agent_episodes(episodes)]
        module_of_row = np.asarray(table.module_ids)
        return {
            module_id: ([a for a in agents if a.module_id == module_id], module_of_row == module_id)
            for module_id in dict.fromkeys(table.module_ids)
        }

    @staticmethod
    def _stats_key(table: StepTable) -> str:
        """Where the batch-wide statistics go: the module's, or all modules' in a multi-agent batch."""
        return DEFAULT_MODULE_ID if table.module_ids is None else ALL_MODULES

    def _log_stats(
        self, metrics: Any, episodes: Sequence[Any], table: StepTable, estimate: Estimate, estimator_s: float
    ) -> None:
        key = self._stats_key(table)
        _, per_group = np.unique([group_id_of(ep) for ep in episodes], return_counts=True)
        # Summed / min / max over learners: with several learners these show whether any of them
        # received a split rollout group.
        advantages = estimate.advantages
        for name, value, reduce in (
            ("num_groups", len(per_group), "sum"),
            ("num_informative_groups", informative_groups(table.group_ids, estimate.advantages), "sum"),
            (
                "num_reward_differing_groups",
                reward_differing_groups(table.group_ids, table.traj_ids, table.rewards),
                "sum",
            ),
            ("num_step_rows", len(advantages), "sum"),
            ("episodes_per_group_min", int(per_group.min()), "min"),
            ("episodes_per_group_max", int(per_group.max()), "max"),
        ):
            metrics.log_value((key, name), value, reduce=reduce, window=1)
        stats = {
            **advantage_stats(advantages),
            "advantage_estimator_s": estimator_s,
            **level_metrics(estimate, self.settings),
        }
        for name, value in stats.items():
            metrics.log_value((key, name), value, window=1)
        if table.agent_ids is not None:  # Dr. MAS: each agent's rows and advantage scale (E[A^2])
            agent_of_row = np.asarray(table.agent_ids)
            module_of_row = np.asarray(table.module_ids)
            # Under each module its own rows of the agent: a mapping may send one agent to several.
            for agent, module_id in dict.fromkeys(zip(table.agent_ids, table.module_ids, strict=True)):
                mine = (agent_of_row == agent) & (module_of_row == module_id)
                metrics.log_value(
                    (module_id, f"agent_{agent}_num_step_rows"), int(mine.sum()), reduce="sum", window=1
                )
                for name, value in advantage_stats(advantages[mine]).items():
                    metrics.log_value((module_id, f"agent_{agent}_{name}"), value, window=1)


def informative_groups(group_ids: Sequence[str], advantages: np.ndarray) -> int:
    """Rollout groups with a non-zero advantage: the others (every episode the same return, e.g. all
    failed) teach the policy nothing from the reward."""
    return len(set(np.asarray(group_ids)[advantages != 0]))


def reward_differing_groups(group_ids: Sequence[str], traj_ids: Sequence[str], rewards: np.ndarray) -> int:
    """Rollout groups whose episodes' env returns differ (some won, some not): the task's own signal.
    :func:`informative_groups` also counts groups where only invalid-answer penalties differ."""
    returns: dict[str, float] = {}
    group_of: dict[str, str] = {}
    for group, trajectory, reward in zip(group_ids, traj_ids, rewards, strict=True):
        returns[trajectory] = returns.get(trajectory, 0.0) + float(reward)
        group_of[trajectory] = group
    totals: dict[str, set[float]] = {}
    for trajectory, total in returns.items():
        totals.setdefault(group_of[trajectory], set()).add(total)
    return sum(len(group_totals) > 1 for group_totals in totals.values())


def advantage_stats(advantages: np.ndarray) -> dict[str, float]:
    """Summary of a set of advantages (``advantage_sq_mean`` is E[A^2], the scale Dr. MAS compares)."""
    return {
        "advantage_mean": float(advantages.mean()),
        "advantage_std": float(advantages.std()),
        "advantage_abs_mean": float(np.abs(advantages).mean()),
        "advantage_sq_mean": float((advantages**2).mean()),
        "advantage_min": float(advantages.min()),
        "advantage_max": float(advantages.max()),
        "advantage_zero_frac": float((advantages == 0).mean()),
    }
