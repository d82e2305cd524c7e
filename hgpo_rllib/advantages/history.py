"""HGPO's hierarchy of history groups (docs/hgpo_algorithm.md §4.2-§4.3, paper §4): level d groups a
step with every step of its rollout group whose last d observations are identical."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from hgpo_rllib.advantages.grouping import (
    FloatArray,
    GroupAdvantage,
    IntArray,
    Keys,
    Layout,
    group_advantages,
    intern_keys,
    pair_codes,
    trajectory_layout,
)


class History(NamedTuple):
    """HGPO's grouping inputs with the rows sorted by (trajectory, step) (§4.2)."""

    layout: Layout
    group: IntArray  # group code of each sorted row
    obs: IntArray  # observation code of each sorted row
    n_obs: int  # bound of the observation codes
    n_group: int  # bound of the group codes
    returns: FloatArray  # step return of each sorted row


def sorted_history(
    group_ids: Keys, traj_ids: Keys, step_idx: npt.ArrayLike, obs: Keys, returns: FloatArray
) -> History:
    """Intern the keys and sort the rows; a trajectory split over two groups is an error."""
    group, n_group = intern_keys(group_ids, "group_ids")
    observation, n_obs = intern_keys(obs, "obs")
    layout = trajectory_layout(traj_ids, step_idx)
    order = layout.order
    group_sorted = group[order]
    if (group_sorted[1:] != group_sorted[:-1])[layout.pos[1:] > 0].any():
        raise ValueError("group_ids: every trajectory must lie in a single group")
    return History(layout, group_sorted, observation[order], n_obs, n_group, returns[order])


class Level(NamedTuple):
    """One history level d as :func:`history_levels` visits it."""

    depth: int  # d = paper's k + 1
    rows: IntArray  # visited sorted rows: the level-d rows whose level-(d-1) group is shared
    key: IntArray  # level-d group code of each visited row
    group: GroupAdvantage  # items of the visited rows (population std, §4.3)


def history_levels(history: History, history_length: int, by_std: bool, epsilon: float) -> Iterator[Level]:
    """Levels d = 1 .. history_length + 1, shallowest first: the one grouping of §4.2-4.3.

    Level d refines level d-1 by the observation d-1 steps back, so groups are nested and
    only rows whose level-(d-1) group has >= 2 members are visited at level d: every other
    row with t >= d-1 is alone in its level-d group. Stops early once no row is left.
    """
    rows = np.arange(len(history.obs))
    key = pair_codes(history.group, history.obs, history.n_obs)
    for depth in range(1, history_length + 2):
        if depth > 1:
            deep_enough = history.layout.pos[rows] >= depth - 1
            rows, key = rows[deep_enough], key[deep_enough]
            key = pair_codes(key, history.obs[rows - (depth - 1)], history.n_obs)
        if rows.size == 0:
            return
        group = group_advantages(key, history.returns[rows], ddof=0, by_std=by_std, epsilon=epsilon)
        yield Level(depth, rows, key, group)
        rows, key = rows[group.shared], key[group.shared]


class Hierarchy(NamedTuple):
    """Every level of every sorted row as ``(K + 1, N)`` arrays; array row k is level d = k + 1."""

    sizes: IntArray  # members of the row's level group: 1 alone, 0 where the step has no such level
    items: FloatArray  # the row's item where its group is shared (sizes >= 2), else 0
    means: FloatArray | None  # mean return of the row's group where shared, else 0 (adaptive only)
    spreads: FloatArray | None  # unbiased variance of the row's group where shared, else 0 (adaptive)
    selves: FloatArray | None  # members of the row's group from its own trajectory (adaptive)


def collect_hierarchy(
    history: History, history_length: int, by_std: bool, epsilon: float, moments: bool
) -> Hierarchy:
    """Collect :func:`history_levels` into arrays; with ``moments`` also each shared group's
    mean, unbiased variance and members from the row's own trajectory (:func:`adaptive_weights`)."""
    n_levels, n = history_length + 1, len(history.obs)
    # Rows that have level d but are not visited there are singletons (see history_levels).
    sizes = (history.layout.pos >= np.arange(n_levels)[:, None]).astype(np.int64)
    items = np.zeros((n_levels, n))
    means = np.zeros((n_levels, n)) if moments else None
    spreads = np.zeros((n_levels, n)) if moments else None
    selves = np.ones((n_levels, n)) if moments else None
    n_traj = int(history.layout.traj.max()) + 1
    for level in history_levels(history, history_length, by_std, epsilon):
        k, group = level.depth - 1, level.group
        sizes[k, level.rows] = group.count[level.key]
        shared_rows, shared_keys = level.rows[group.shared], level.key[group.shared]
        items[k, shared_rows] = group.value[group.shared]
        if means is not None and spreads is not None and selves is not None:
            means[k, shared_rows] = group.mean[shared_keys]
            spreads[k, shared_rows] = group.sq_dev[shared_keys] / (group.count[shared_keys] - 1)
            same = pair_codes(shared_keys, history.layout.traj[shared_rows], n_traj)
            selves[k, shared_rows] = np.bincount(same)[same]
    return Hierarchy(sizes, items, means, spreads, selves)
