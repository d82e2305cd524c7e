"""GRPO, GiGPO and HGPO advantages (docs/hgpo_algorithm.md §2-§4; HGPO paper §4).

Rows are environment steps in any order (trajectories may be interleaved); ``step_idx`` only
orders the rows of one trajectory. Ids and observations are any hashable keys; integer numpy arrays
take a fast path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from hgpo_rllib.advantages.adaptive import adaptive_weights
from hgpo_rllib.advantages.grouping import (
    ADV_MODES,
    WEIGHTINGS,
    FloatArray,
    IntArray,
    Keys,
    check_epsilon,
    check_history_length,
    check_option,
    episode_advantages,
    finite_column,
    group_advantages,
    intern_keys,
    n_rows,
    pair_codes,
)
from hgpo_rllib.advantages.history import Hierarchy, collect_hierarchy, sorted_history
from hgpo_rllib.advantages.multi_agent import agent_group_ids, per_agent_view

#: ``normalize_by`` of the step-level estimators: per trajectory (single agent), or per agent (Dr. MAS).
NORMALIZE_BY = ("trajectory", "agent")


def _by_agent(normalize_by: str, agent_ids: Keys | None, n: int) -> bool:
    """Whether to re-key the batch per agent; refuses a bad option or missing / misaligned agent ids."""
    check_option(normalize_by, NORMALIZE_BY, "normalize_by")
    if normalize_by == "trajectory":
        return False
    if agent_ids is None:
        raise ValueError("normalize_by='agent' needs agent_ids (one per row)")
    n_rows(rows=np.zeros(n), agent_ids=agent_ids)
    return True


def _fixed_weights(
    items: FloatArray, base: FloatArray | None, alpha: float, offset: int, epsilon: float
) -> tuple[FloatArray, FloatArray]:
    """Weights ``L**alpha / (sum L**alpha + eps)`` over the non-zero items (§4.4, Q2, Q3):
    L = d + offset for level d and L = 1 for the base item. Returns (level weights, base weight)."""
    lengths = (np.arange(1, len(items) + 1, dtype=np.float64) + offset) ** alpha
    raw = np.where(items != 0.0, lengths[:, None], 0.0)
    base_raw = np.zeros(items.shape[1]) if base is None else (base != 0.0).astype(np.float64)
    total = raw.sum(axis=0) + base_raw + epsilon
    return raw / total, base_raw / total


def grpo_advantages(
    group_ids: Keys, episode_scores: npt.ArrayLike, *, norm_by_std: bool = True, epsilon: float = 1e-6
) -> FloatArray:
    """GRPO as in verl-agent (§2): episode score normalised within its group.

    Statistics are over step rows (length-weighted, Q5) with the unbiased std; a one-row group
    uses mean 0 and std 1. ``norm_by_std=False`` is the Dr.GRPO variant (no division).
    """
    n = n_rows(group_ids=group_ids, episode_scores=episode_scores)
    check_epsilon(epsilon)
    scores = finite_column(episode_scores, "episode_scores")
    if n == 0:
        return scores
    group, _ = intern_keys(group_ids, "group_ids")
    return episode_advantages(group, scores, norm_by_std, epsilon)


def gigpo_advantages(
    group_ids: Keys,
    obs: Keys,
    step_returns: npt.ArrayLike,
    episode_scores: npt.ArrayLike,
    *,
    mode: str = "mean_norm",
    step_advantage_w: float = 1.0,
    epsilon: float = 1e-6,
    normalize_by: str = "trajectory",
    agent_ids: Keys | None = None,
) -> FloatArray:
    """GiGPO (§3): episode advantage + w * step advantage of the anchor-state group.

    The step group is all rows of the same group id with an identical observation (revisits
    inside one trajectory included); its statistics use the unbiased std, and a one-row step
    group contributes 0. ``mode`` selects division by the std for both terms. ``normalize_by="agent"``
    (Dr. MAS, multi-agent batches with ``agent_ids``): every group is per agent; the returns and
    scores must come from :func:`~hgpo_rllib.advantages.multi_agent.per_agent_view`.
    """
    n = n_rows(group_ids=group_ids, obs=obs, step_returns=step_returns, episode_scores=episode_scores)
    if _by_agent(normalize_by, agent_ids, n):
        group_ids = agent_group_ids(group_ids, agent_ids)
    check_option(mode, ADV_MODES, "mode")
    check_epsilon(epsilon)
    if not np.isfinite(step_advantage_w):
        raise ValueError(f"step_advantage_w must be finite, got {step_advantage_w!r}")
    returns = finite_column(step_returns, "step_returns")
    scores = finite_column(episode_scores, "episode_scores")
    if n == 0:
        return returns
    by_std = mode == "mean_std_norm"
    group, _ = intern_keys(group_ids, "group_ids")
    observation, n_obs = intern_keys(obs, "obs")
    step_group = pair_codes(group, observation, n_obs)
    step = group_advantages(step_group, returns, ddof=1, by_std=by_std, epsilon=epsilon).value
    return episode_advantages(group, scores, by_std, epsilon) + step_advantage_w * step


class _WeightedHierarchy(NamedTuple):
    """The levels of :func:`hgpo_advantages` and their weights, rows sorted by (trajectory, step)."""

    order: IntArray
    levels: Hierarchy
    weights: FloatArray  # (K + 1, N) weight of each level's item in the step's advantage
    base: FloatArray | None  # base item of each row (``base_group``)
    base_weight: FloatArray  # its weight, 0 without ``base_group``


def _weighted_hierarchy(
    group_ids: Keys,
    traj_ids: Keys,
    step_idx: npt.ArrayLike,
    obs: Keys,
    returns: FloatArray,
    scores: FloatArray | None,
    *,
    history_length: int,
    mode: str,
    alpha: float,
    base_group: bool,
    weighting: str,
    epsilon: float,
) -> _WeightedHierarchy:
    """The shared core of :func:`hgpo_advantages` and :func:`hgpo_level_stats` (non-empty input)."""
    by_std = mode == "mean_std_norm"
    history = sorted_history(group_ids, traj_ids, step_idx, obs, returns)
    order = history.layout.order
    adaptive = weighting == "adaptive"
    levels = collect_hierarchy(history, history_length, by_std, epsilon, moments=adaptive)
    base = None
    if base_group:
        assert scores is not None
        base = episode_advantages(history.group, scores[order], by_std, epsilon)
    if adaptive:
        return _WeightedHierarchy(
            order, levels, adaptive_weights(levels, history.returns), None, np.zeros(len(order))
        )
    offset = 0 if weighting == "paper" and not base_group else 1
    weights, base_weight = _fixed_weights(levels.items, base, alpha, offset, epsilon)
    return _WeightedHierarchy(order, levels, weights, base, base_weight)


def _checked_hierarchy(
    group_ids: Keys,
    traj_ids: Keys,
    step_idx: npt.ArrayLike,
    obs: Keys,
    step_returns: npt.ArrayLike,
    episode_scores: npt.ArrayLike | None,
    *,
    history_length: int,
    mode: str,
    alpha: float,
    base_group: bool,
    weighting: str,
    epsilon: float,
) -> tuple[int, _WeightedHierarchy | None]:
    """Validate HGPO's inputs and options and build its weighted hierarchy: (number of levels, the
    hierarchy, or None for an empty batch). ``episode_scores`` is needed only with ``base_group``."""
    columns: dict[str, object] = {
        "group_ids": group_ids,
        "traj_ids": traj_ids,
        "step_idx": step_idx,
        "obs": obs,
        "step_returns": step_returns,
    }
    if episode_scores is not None:
        columns["episode_scores"] = episode_scores
    n = n_rows(**columns)
    history_length = _check_hgpo_options(mode, alpha, base_group, weighting, epsilon, history_length)
    if base_group and episode_scores is None:
        raise ValueError("episode_scores are required with base_group=True (the base item scores episodes)")
    returns = finite_column(step_returns, "step_returns")
    scores = None if episode_scores is None else finite_column(episode_scores, "episode_scores")
    if n == 0:
        return history_length + 1, None
    core = _weighted_hierarchy(
        group_ids,
        traj_ids,
        step_idx,
        obs,
        returns,
        scores,
        history_length=history_length,
        mode=mode,
        alpha=alpha,
        base_group=base_group,
        weighting=weighting,
        epsilon=epsilon,
    )
    return history_length + 1, core


def _check_hgpo_options(
    mode: str, alpha: float, base_group: bool, weighting: str, epsilon: float, history_length: int
) -> int:
    """Validate HGPO's options (§4.1); returns K as an int."""
    check_option(mode, ADV_MODES, "mode")
    check_option(weighting, WEIGHTINGS, "weighting")
    check_epsilon(epsilon)
    if not np.isfinite(alpha):
        raise ValueError(f"alpha must be finite, got {alpha!r}")
    if base_group and weighting == "adaptive":
        raise ValueError(
            "base_group=True does not combine with weighting='adaptive': the base item scores the "
            "episode, not the step's return, so its bias against the history levels is undefined"
        )
    return check_history_length(history_length)


def hgpo_advantages(
    group_ids: Keys,
    traj_ids: Keys,
    step_idx: npt.ArrayLike,
    obs: Keys,
    step_returns: npt.ArrayLike,
    episode_scores: npt.ArrayLike,
    *,
    history_length: int = 2,
    mode: str = "mean_std_norm",
    alpha: float = 1.0,
    base_group: bool = False,
    weighting: str = "reference",
    epsilon: float = 1e-6,
    normalize_by: str = "trajectory",
    agent_ids: Keys | None = None,
) -> FloatArray:
    """HGPO (§4): weighted mix of advantages from a hierarchy of history groups.

    Level d = 1 .. history_length + 1 of a step groups it with every step of the same group id
    whose last d observations (current one included, never crossing the trajectory start)
    are identical. Each level with >= 2 members gives the item ``(R - mean) / (pop_std + eps)``
    (``mean_norm``: ``R - mean``); ``base_group`` adds the episode advantage of
    :func:`grpo_advantages` as a bottom item. A step with no item gets 0.

    ``weighting`` chooses the weights:

    - ``"reference"`` (default, matches the verl-agent code and the golden vectors): items that
      are exactly 0 are dropped (per item, Q3; see the module docstring for the exact-zero rule)
      and the rest averaged with weights ``L**alpha / (sum L**alpha + eps)``, L = d + 1 for
      level d and L = 1 for the base item (quirk Q2).
    - ``"paper"``: the same with the paper's Eq. 7 weights (k + 1)**alpha over levels k = 0..K,
      i.e. L = d. With ``base_group=True`` the base item is taken as the bottom level of the
      hierarchy (L = 1) and the step levels move up one (L = d + 1), which coincides with
      ``"reference"``: the code's offset is exactly room reserved for that base item.
    - ``"adaptive"`` (ours, not in the paper): the steps with the same number of shared levels
      get the simplex weights that minimise an unbiased estimate of their baseline's
      mean-squared error against the step value, from the batch itself
      (:func:`~hgpo_rllib.advantages.adaptive.adaptive_weights`); ``alpha`` is unused, zero
      items are kept, the weights of a step sum to 1, and ``base_group`` is refused.

    :func:`hgpo_level_stats` exposes the per-level groups, items and weights behind the result.

    ``normalize_by="agent"`` (Dr. MAS, multi-agent batches with ``agent_ids``): each agent's turns of a
    trajectory form their own sub-trajectory, so every level's groups (and the history) are per
    agent; the returns and scores must come from
    :func:`~hgpo_rllib.advantages.multi_agent.per_agent_view`.
    """
    if _by_agent(normalize_by, agent_ids, n_rows(group_ids=group_ids, traj_ids=traj_ids)):
        view = per_agent_view(group_ids, traj_ids, agent_ids, step_idx, np.zeros(len(group_ids)))
        group_ids, traj_ids, step_idx = view.group_ids, view.traj_ids, view.step_idx
    _, core = _checked_hierarchy(
        group_ids,
        traj_ids,
        step_idx,
        obs,
        step_returns,
        episode_scores,
        history_length=history_length,
        mode=mode,
        alpha=alpha,
        base_group=base_group,
        weighting=weighting,
        epsilon=epsilon,
    )
    return np.zeros(0) if core is None else _advantages(core)


def _advantages(core: _WeightedHierarchy) -> FloatArray:
    """The weighted sum of each step's items (§4.4), aligned with the input rows."""
    sorted_advantages = np.einsum("ij,ij->j", core.weights, core.levels.items)
    if core.base is not None:
        sorted_advantages += core.base_weight * core.base
    advantages = np.empty(len(core.order))
    advantages[core.order] = sorted_advantages
    return advantages


@dataclass(frozen=True)
class HGPOLevels:
    """The hierarchy behind :func:`hgpo_advantages`, level by level (§4.2-§4.4).

    The level arrays have shape ``(K + 1, N)``, columns aligned with the input rows; row ``k`` is
    the paper's level k (code depth d = k + 1): k = 0 the current-state group, k = K the whole
    memory window. Meant for monitoring how much each level contributes.

    - ``sizes[k, i]``: members of row i's level-k group; 1 for a singleton, 0 where the step
      has no level k (fewer than k earlier steps).
    - ``items[k, i]``: row i's level-k item, ``(R - mean) / (pop_std + eps)`` (``mean_norm``:
      ``R - mean``); NaN where there is no item (no level k, or a singleton group). An item
      of exactly 0.0 is a member at its group's mean (exact-zero rule, module docstring): it
      exists but the fixed weightings drop it (§4.4 step 2, Q3), so 0.0 and NaN are kept apart.
    - ``weights[k, i]``: the weight of that item in row i's advantage (0 where it has none or it
      is dropped); ``base_weights[i]`` the base item's (0 without ``base_group``). So
      ``hgpo_advantages = sum_k weights * items + base_weights * base item`` (NaN items count 0).
    - ``advantages[i]``: that sum, the very array :func:`hgpo_advantages` returns (so a caller who
      wants both the advantages and the levels builds the hierarchy once).
    """

    sizes: IntArray
    items: FloatArray
    weights: FloatArray
    base_weights: FloatArray
    advantages: FloatArray


def hgpo_level_stats(
    group_ids: Keys,
    traj_ids: Keys,
    step_idx: npt.ArrayLike,
    obs: Keys,
    step_returns: npt.ArrayLike,
    *,
    episode_scores: npt.ArrayLike | None = None,
    history_length: int = 2,
    mode: str = "mean_std_norm",
    alpha: float = 1.0,
    base_group: bool = False,
    weighting: str = "reference",
    epsilon: float = 1e-6,
) -> HGPOLevels:
    """Per-level group sizes, items and weights of HGPO (§4.2-§4.4), with the advantages themselves.

    Runs the very grouping and weighting of :func:`hgpo_advantages` (same inputs and options;
    ``episode_scores`` is needed only with ``base_group``). With ``history_length=0`` the single
    level is GiGPO's anchor-state group (§3), so its sizes serve GiGPO too; its items use
    the population std of HGPO, not GiGPO's unbiased one.
    """
    n_levels, core = _checked_hierarchy(
        group_ids,
        traj_ids,
        step_idx,
        obs,
        step_returns,
        episode_scores,
        history_length=history_length,
        mode=mode,
        alpha=alpha,
        base_group=base_group,
        weighting=weighting,
        epsilon=epsilon,
    )
    if core is None:
        empty = np.zeros((n_levels, 0))
        return HGPOLevels(empty.astype(np.int64), empty, empty, np.zeros(0), np.zeros(0))
    levels, order = core.levels, core.order
    sizes, items = np.empty_like(levels.sizes), np.empty_like(levels.items)
    weights, base_weights = np.empty_like(core.weights), np.empty_like(core.base_weight)
    sizes[:, order], items[:, order] = levels.sizes, np.where(levels.sizes >= 2, levels.items, np.nan)
    weights[:, order], base_weights[order] = core.weights, core.base_weight
    return HGPOLevels(sizes, items, weights, base_weights, _advantages(core))
