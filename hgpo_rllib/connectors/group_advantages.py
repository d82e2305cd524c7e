"""Learner connector: complete episodes -> one token row per step with its group-relative advantage.

Same placement as PPO's GAE piece (docs/rllib_notes.md §3.2, §5.4): it sees the learner's whole batch of
complete rollout groups before RLlib minibatches it, which the estimators require (docs/hgpo_algorithm.md
§1.1 step 6, §9). The estimator itself is :mod:`hgpo_rllib.advantages`; this piece only gathers its
per-step inputs (group id, trajectory id, step index, raw anchor observation, reward, validity),
calls it, and lays the frozen sampling-time tokens out as a dynamically padded batch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from hgpo_rllib import advantages as adv
from hgpo_rllib.env_runner import PROMPT_IDS, PROMPT_MASK, RESP_LOGP, RESP_MASK, group_id_of
from hgpo_rllib.rl_module import ALLOWED_IDS

#: Token batch columns besides the runner's (the RLModule's ``_forward_train`` reads TOKEN_COLUMNS).
RESP_IDS = "resp_ids"
OLD_LOGP = "old_logp"
ADVANTAGES = "advantages"
REF_LOGP = "ref_logp"
TOKEN_COLUMNS = (PROMPT_IDS, PROMPT_MASK, RESP_IDS, RESP_MASK)
#: Present only when the module constrains generation to each step's admissible actions.
OPTIONAL_TOKEN_COLUMNS = (ALLOWED_IDS,)

ESTIMATORS = ("hgpo", "gigpo", "grpo")
ADV_MODES = adv._MODES  # the estimators' own lists, so validation cannot drift from them
WEIGHTINGS = adv._WEIGHTINGS

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class EstimatorSettings:
    """The advantage options of ``HGPOConfig.training()`` (docs/hgpo_algorithm.md §2-§4)."""

    estimator: str = "hgpo"
    gamma: float = 0.95
    invalid_action_penalty: float = 0.1
    history_length: int = 2
    adv_mode: str = "mean_std_norm"
    length_weight_alpha: float = 1.0
    base_group: bool = False
    weighting: str = "reference"
    step_advantage_w: float = 1.0


@dataclass
class StepTable:
    """Estimator inputs, one row per environment step; each episode's rows are contiguous, in order."""

    group_ids: list[str]
    traj_ids: list[str]
    step_idx: npt.NDArray[np.int64]
    obs: list[str]
    rewards: npt.NDArray[np.float64]
    is_action_valid: npt.NDArray[np.bool_]

    @classmethod
    def from_episodes(cls, episodes: Sequence[SingleAgentEpisode]) -> StepTable:
        group_ids: list[str] = []
        traj_ids: list[str] = []
        steps: list[range] = []
        obs: list[str] = []
        rewards: list[Any] = []
        valid: list[bool] = []
        for ep in episodes:
            if ep.t_started != 0 or not ep.is_done:
                raise ValueError(
                    f"episode {ep.id_} is not a complete episode (t_started={ep.t_started}, "
                    f"done={ep.is_done}); HGPO needs whole episodes from GroupedEnvRunner"
                )
            n = len(ep)
            group_ids += [group_id_of(ep)] * n
            traj_ids += [ep.id_] * n
            steps.append(range(n))
            obs += list(ep.get_observations())[:n]  # the anchor: the raw observation acted on
            rewards += list(ep.get_rewards())
            valid += [bool(info["is_action_valid"]) for info in list(ep.get_infos())[1:]]
        return cls(
            group_ids,
            traj_ids,
            np.fromiter((t for r in steps for t in r), np.int64, len(obs)),
            obs,
            np.asarray(rewards, dtype=np.float64),
            np.asarray(valid, dtype=bool),
        )


def estimator_inputs(table: StepTable, settings: EstimatorSettings) -> tuple[FloatArray, FloatArray]:
    """Step returns and episode scores of every row (docs/hgpo_algorithm.md §1.1)."""
    return adv.step_returns_and_scores(
        table.traj_ids,
        table.step_idx,
        table.rewards,
        table.is_action_valid,
        settings.gamma,
        invalid_penalty=settings.invalid_action_penalty,
    )


def compute_advantages(
    table: StepTable, settings: EstimatorSettings, step_returns: FloatArray, scores: FloatArray
) -> FloatArray:
    """One scalar advantage per row from the configured estimator of :mod:`hgpo_rllib.advantages`."""
    if settings.estimator == "grpo":
        return adv.grpo_advantages(table.group_ids, scores, norm_by_std=settings.adv_mode == "mean_std_norm")
    if settings.estimator == "gigpo":
        return adv.gigpo_advantages(
            table.group_ids,
            table.obs,
            step_returns,
            scores,
            mode=settings.adv_mode,
            step_advantage_w=settings.step_advantage_w,
        )
    if settings.estimator == "hgpo":
        return adv.hgpo_advantages(
            table.group_ids,
            table.traj_ids,
            table.step_idx,
            table.obs,
            step_returns,
            scores,
            history_length=settings.history_length,
            mode=settings.adv_mode,
            alpha=settings.length_weight_alpha,
            base_group=settings.base_group,
            weighting=settings.weighting,
        )
    raise ValueError(f"estimator must be one of {ESTIMATORS}, got {settings.estimator!r}")


def _mean(values: npt.NDArray[Any]) -> float:
    """Mean, NaN for no values (the key stays; RLlib's mean reduction skips NaN)."""
    return float(values.mean()) if values.size else float("nan")


def level_metrics(
    table: StepTable, step_returns: FloatArray, scores: FloatArray, settings: EstimatorSettings
) -> dict[str, float]:
    """History-level monitoring from the estimator's own grouping, :func:`adv.hgpo_level_stats`.

    Keys ``level{d}_*`` count from d = 1 (paper level k = d - 1, docs/hgpo_algorithm.md §4.2), so
    ``level1`` is the current-state group. For each level of HGPO (d = 1..K+1): mean group size
    and singleton fraction over the steps that have the level, and mean / std / mean |a| of the
    level's items (§4.3; exact-zero items included, singletons have none), and
    ``level{d}_weight_mean``, the level's mean weight in the step advantages (0 where a step has
    no item there, so with ``base_weight_mean`` under ``base_group`` they sum to the share of
    steps with any item): what the configured weighting, ``adaptive`` above all, chose. GiGPO gets the
    sizes of its anchor-state group only (its items use another std); GRPO has no levels.
    ``all_levels_singleton_frac``: steps with no shared group at any level, which get no step
    item (HGPO advantage 0 unless ``base_group``, §4.6). Undefined statistics are NaN.
    """
    if settings.estimator == "grpo":
        return {}
    hgpo = settings.estimator == "hgpo"
    levels = adv.hgpo_level_stats(
        table.group_ids,
        table.traj_ids,
        table.step_idx,
        table.obs,
        step_returns,
        episode_scores=scores,
        history_length=settings.history_length if hgpo else 0,
        mode=settings.adv_mode,
        alpha=settings.length_weight_alpha,
        base_group=hgpo and settings.base_group,
        weighting=settings.weighting if hgpo else "reference",
    )
    stats: dict[str, float] = {}
    columns = zip(levels.sizes, levels.items, levels.weights, strict=True)
    for depth, (sizes, items, weights) in enumerate(columns, start=1):
        present = sizes[sizes > 0]
        stats[f"level{depth}_group_size_mean"] = _mean(present)
        stats[f"level{depth}_singleton_frac"] = _mean(present == 1)
        if hgpo:
            items = items[~np.isnan(items)]
            stats[f"level{depth}_advantage_mean"] = _mean(items)
            stats[f"level{depth}_advantage_std"] = float(items.std()) if items.size else float("nan")
            stats[f"level{depth}_advantage_abs_mean"] = _mean(np.abs(items))
            stats[f"level{depth}_weight_mean"] = _mean(weights)
    if hgpo and settings.base_group:
        stats["base_weight_mean"] = _mean(levels.base_weights)
    stats["all_levels_singleton_frac"] = _mean((levels.sizes <= 1).all(axis=0))
    return stats


def _left_padded(rows: Sequence[np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Stack 1-D token arrays right-aligned into ``[N, longest]`` ids and a 0/1 mask."""
    lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    width = int(lengths.max(initial=1))
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    row_of = np.repeat(np.arange(len(rows)), lengths)
    col_of = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    col_of += np.repeat(width - lengths, lengths)
    ids[row_of, col_of] = np.concatenate(rows) if len(rows) else []
    mask[row_of, col_of] = 1
    return ids, mask


def token_rows(episodes: Sequence[SingleAgentEpisode], pad_id: int) -> dict[str, np.ndarray]:
    """Prompt/response tokens, masks and sampling log-probs of every step, dynamically padded.

    Prompts are left-padded to the batch's longest prompt; response columns that are padding in
    every row are trimmed (docs/rllib_notes.md §4, "Trim all-PAD columns").
    """
    prompts = [p for ep in episodes for p in ep.get_extra_model_outputs(PROMPT_IDS)]
    prompt_ids, prompt_mask = _left_padded(prompts, pad_id)
    resp_ids = np.stack([a for ep in episodes for a in ep.get_actions()]).astype(np.int64)
    resp_mask = np.stack([m for ep in episodes for m in ep.get_extra_model_outputs(RESP_MASK)])
    resp_logp = np.stack([lp for ep in episodes for lp in ep.get_extra_model_outputs(RESP_LOGP)])
    used = np.flatnonzero(resp_mask.any(axis=0))
    width = int(used[-1]) + 1 if used.size else 1
    optional = {}
    if episodes and ALLOWED_IDS in episodes[0].extra_model_outputs:
        allowed = [np.asarray(a) for ep in episodes for a in ep.get_extra_model_outputs(ALLOWED_IDS)]
        optional[ALLOWED_IDS] = np.full((len(allowed), max(len(a) for a in allowed)), -1, dtype=np.int64)
        for i, row in enumerate(allowed):
            optional[ALLOWED_IDS][i, : len(row)] = row
    return {
        **optional,
        PROMPT_IDS: prompt_ids,
        PROMPT_MASK: prompt_mask,
        RESP_IDS: resp_ids[:, :width],
        RESP_MASK: resp_mask[:, :width].astype(np.int64),
        OLD_LOGP: resp_logp[:, :width].astype(np.float32),
        WEIGHTS_SEQ_NO: np.asarray(
            [w for ep in episodes for w in ep.get_extra_model_outputs(WEIGHTS_SEQ_NO)], dtype=np.int64
        ),
    }


class GroupAdvantages(ConnectorV2):
    """Builds the learner's train batch (numpy) from complete rollout groups.

    Logs, under the module id: advantage statistics, rollout-group sizes, per-level history-group
    sizes, singleton fractions and item statistics (:func:`level_metrics`), and the estimator's
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
        table = StepTable.from_episodes(episodes)
        step_returns, scores = estimator_inputs(table, self.settings)
        advantages = compute_advantages(table, self.settings, step_returns, scores)
        estimator_s = time.perf_counter() - start
        module = rl_module[DEFAULT_MODULE_ID].unwrapped()
        rows = token_rows(episodes, module.tokenizer.pad_token_id)
        rows[ADVANTAGES] = advantages.astype(np.float32)
        batch[DEFAULT_MODULE_ID] = rows
        if metrics is not None:
            self._log_stats(metrics, table, episodes, step_returns, scores, advantages, estimator_s)
            metrics.log_value(
                (DEFAULT_MODULE_ID, "advantage_connector_s"), time.perf_counter() - start, window=1
            )
        return batch

    def _log_stats(
        self,
        metrics: Any,
        table: StepTable,
        episodes: Sequence[SingleAgentEpisode],
        step_returns: FloatArray,
        scores: FloatArray,
        advantages: FloatArray,
        estimator_s: float,
    ) -> None:
        _, per_group = np.unique([group_id_of(ep) for ep in episodes], return_counts=True)
        # Summed / min / max over learners: with several learners these show whether any of them
        # received a split rollout group.
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
            **level_metrics(table, step_returns, scores, self.settings),
        }
        for key, value in stats.items():
            metrics.log_value((DEFAULT_MODULE_ID, key), value, window=1)
