"""Discounted returns and episode scores, the estimators' inputs (docs/hgpo_algorithm.md §1.1)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hgpo_rllib.advantages.grouping import (
    FloatArray,
    Keys,
    finite_column,
    flag_column,
    n_rows,
    reverse_linear_scan,
    trajectory_layout,
    unit_interval,
)


def _returns_and_totals(
    traj_ids: Keys, step_idx: npt.ArrayLike, rewards: npt.ArrayLike, gamma: float
) -> tuple[FloatArray, FloatArray]:
    """Discounted returns and trajectory reward totals, both aligned with the input rows."""
    unit_interval(gamma, "gamma")
    rewards_arr = finite_column(rewards, "rewards")
    layout = trajectory_layout(traj_ids, step_idx)
    rewards_sorted = rewards_arr[layout.order]
    returns = np.empty_like(rewards_arr)
    # R_t = r_t + gamma * R_{t+1} within each trajectory (§1.1 step 1).
    returns[layout.order] = reverse_linear_scan(
        rewards_sorted, np.full(len(rewards_sorted), gamma), layout.remaining
    )
    totals = np.empty_like(rewards_arr)
    totals[layout.order] = np.bincount(layout.traj, weights=rewards_sorted)[layout.traj]
    return returns, totals


def discounted_returns(
    traj_ids: Keys, step_idx: npt.ArrayLike, rewards: npt.ArrayLike, gamma: float
) -> FloatArray:
    """Discounted return-to-go of every row within its trajectory (§1.1 step 1).

    Rows may come in any order; the result is aligned with the input rows.
    """
    n_rows(traj_ids=traj_ids, step_idx=step_idx, rewards=rewards)
    return _returns_and_totals(traj_ids, step_idx, rewards, gamma)[0]


def step_returns_and_scores(
    traj_ids: Keys,
    step_idx: npt.ArrayLike,
    rewards: npt.ArrayLike,
    is_action_valid: npt.ArrayLike,
    gamma: float,
    invalid_penalty: float = 0.1,
) -> tuple[FloatArray, FloatArray]:
    """Estimator inputs from raw env data, the trainer glue of §1.1.

    ``step_returns`` is the discounted return minus ``invalid_penalty`` on invalid rows (the
    penalty is applied after discounting and not propagated, quirk Q6); ``episode_scores`` is
    the trajectory's total env reward minus the same per-row penalty.
    """
    n_rows(traj_ids=traj_ids, step_idx=step_idx, rewards=rewards, is_action_valid=is_action_valid)
    if not np.isfinite(invalid_penalty):
        raise ValueError(f"invalid_penalty must be finite, got {invalid_penalty!r}")
    valid = flag_column(is_action_valid, "is_action_valid")
    returns, totals = _returns_and_totals(traj_ids, step_idx, rewards, gamma)
    penalty = invalid_penalty * ~valid
    return returns - penalty, totals - penalty
