"""Property tests (hypothesis) for ``hgpo_rllib.advantages``.

Random small batches (few groups, trajectories and observation symbols, so states, histories
and returns repeat) check: agreement with the per-row Python baseline of
``benchmarks/advantages.py`` (a direct transcription of the pseudo-code of the spec,
``docs/hgpo_algorithm.md`` §4.4) for every
option, invariance under row permutation, independence of groups, finiteness, the K = 0
case, the per-level view (sizes as the pseudo-code's clusters, items that re-aggregate to
``hgpo_advantages``), and the vectorised returns against the reference's naive per-row formula.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
from collections import defaultdict
from typing import Any

import numpy as np
from helpers import ROOT, SETTINGS, Batch, batches
from hypothesis import given
from hypothesis import strategies as st

from hgpo_rllib.advantages import (
    discounted_returns,
    gigpo_advantages,
    grpo_advantages,
    hgpo_advantages,
    hgpo_level_stats,
)

_spec = importlib.util.spec_from_file_location("benchmark_advantages", ROOT / "benchmarks" / "advantages.py")
assert _spec is not None and _spec.loader is not None
baseline = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = baseline  # dataclasses resolve annotations through sys.modules
_spec.loader.exec_module(baseline)

hgpo_options = st.fixed_dictionaries(
    {
        "history_length": st.integers(0, 4),
        "mode": st.sampled_from(["mean_norm", "mean_std_norm"]),
        "alpha": st.sampled_from([0.0, 1.0, 2.0]),
        "base_group": st.booleans(),
        "weighting": st.sampled_from(["reference", "paper"]),
    }
)
gigpo_options = st.fixed_dictionaries(
    {"mode": st.sampled_from(["mean_norm", "mean_std_norm"]), "step_advantage_w": st.sampled_from([0.5, 1.0])}
)


def _all_estimators(batch: Batch, options: dict[str, Any]) -> np.ndarray:
    """GRPO, GiGPO and HGPO advantages stacked, so one property covers the three."""
    return np.stack(
        [
            grpo_advantages(
                batch.group_ids, batch.episode_scores, norm_by_std=options["mode"] == "mean_std_norm"
            ),
            gigpo_advantages(
                batch.group_ids, batch.obs, batch.step_returns, batch.episode_scores, mode=options["mode"]
            ),
            hgpo_advantages(*batch, **options),
        ]
    )


@SETTINGS
@given(batches(), hgpo_options)
def test_hgpo_matches_per_row_baseline(batch: Batch, options: dict[str, Any]) -> None:
    expected = baseline.py_hgpo(*(list(column) for column in batch), **options)
    np.testing.assert_allclose(hgpo_advantages(*batch, **options), expected, rtol=1e-12, atol=1e-12)


@SETTINGS
@given(batches(), gigpo_options)
def test_gigpo_and_grpo_match_per_row_baseline(batch: Batch, options: dict[str, Any]) -> None:
    returns, scores = batch.step_returns.tolist(), batch.episode_scores.tolist()
    expected = baseline.py_gigpo(batch.group_ids, batch.obs, returns, scores, **options)
    got = gigpo_advantages(batch.group_ids, batch.obs, batch.step_returns, batch.episode_scores, **options)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    by_std = options["mode"] == "mean_std_norm"
    expected = baseline.py_episode_advantages(batch.group_ids, scores, by_std)
    np.testing.assert_allclose(
        grpo_advantages(batch.group_ids, scores, norm_by_std=by_std), expected, rtol=1e-12, atol=1e-12
    )


@SETTINGS
@given(batches(), hgpo_options, st.randoms(use_true_random=False))
def test_row_permutation_invariance(batch: Batch, options: dict[str, Any], rnd: Any) -> None:
    perm = np.array(rnd.sample(range(len(batch.obs)), len(batch.obs)))
    permuted = Batch(*(np.asarray(column)[perm] for column in batch))
    np.testing.assert_allclose(
        _all_estimators(permuted, options), _all_estimators(batch, options)[:, perm], rtol=1e-12, atol=1e-12
    )


@SETTINGS
@given(batches(max_groups=2), batches(max_groups=2), hgpo_options)
def test_adding_a_group_never_changes_another_group(
    batch: Batch, other: Batch, options: dict[str, Any]
) -> None:
    renamed = other._replace(
        group_ids=[f"new{g}" for g in other.group_ids], traj_ids=[f"new{t}" for t in other.traj_ids]
    )
    joined = Batch(
        *(np.concatenate([np.asarray(a), np.asarray(b)]) for a, b in zip(batch, renamed, strict=True))
    )
    np.testing.assert_allclose(
        _all_estimators(joined, options)[:, : len(batch.obs)],
        _all_estimators(batch, options),
        rtol=1e-12,
        atol=1e-12,
    )


@SETTINGS
@given(batches(), hgpo_options)
def test_outputs_are_finite_and_bounded(batch: Batch, options: dict[str, Any]) -> None:
    """An item is at most sqrt(n) (normalised, a group of n) or 2 max|value| (mean-centred) in size,
    and GRPO's one-row group passes its score through; GiGPO adds two items, HGPO averages items.
    A division by a near-zero std would break the bound."""
    advantages = _all_estimators(batch, options)
    n = len(batch.obs)
    assert advantages.shape == (3, n) and np.isfinite(advantages).all()
    values = 2 * (np.abs(batch.episode_scores).max() + np.abs(batch.step_returns).max())
    bound = values + (2 * np.sqrt(n) if options["mode"] == "mean_std_norm" else 0.0)
    assert (np.abs(advantages) <= bound + 1e-9).all()


def test_degenerate_batches_are_finite_and_exact() -> None:
    """All-singleton groups, all-equal returns and a one-trajectory group."""
    steps = list(range(5))
    singletons = Batch(["g"] * 5, ["t"] * 5, steps, list("ABCDE"), np.arange(5.0), np.full(5, 2.0))
    equal = Batch(
        ["g"] * 6,
        ["a", "b", "c"] * 2,
        [0, 0, 0, 1, 1, 1],
        list("AAABBB"),
        np.full(6, 9.025),
        np.full(6, 10.0),
    )
    one_traj = Batch(["g"] * 5, ["t"] * 5, steps, list("ABABA"), np.array([4.0, 3, 2, 1, 0]), np.full(5, 1.0))
    for options in ({"history_length": 2}, {"history_length": 4, "base_group": True, "mode": "mean_norm"}):
        for batch in (singletons, equal, one_traj):
            assert np.isfinite(_all_estimators(batch, {"mode": "mean_std_norm"} | options)).all()
        # No non-singleton level, and the base item is 0 because the episode scores are equal.
        np.testing.assert_array_equal(hgpo_advantages(*singletons, **options), 0.0)
        np.testing.assert_array_equal(hgpo_advantages(*equal, **options), 0.0)
    np.testing.assert_array_equal(grpo_advantages(equal.group_ids, equal.episode_scores), 0.0)
    # Revisits inside the only trajectory: A at t = 0, 2, 4 and B at t = 1, 3 form groups.
    assert np.all(hgpo_advantages(*one_traj, history_length=2) != 0.0)


@SETTINGS
@given(
    batches(),
    st.sampled_from([0.0, 1.0, 2.0]),
    st.sampled_from(["mean_norm", "mean_std_norm"]),
    st.sampled_from(["reference", "paper"]),
)
def test_history_length_zero_is_the_current_state_level(
    batch: Batch, alpha: float, mode: str, weighting: str
) -> None:
    """Spec §4.6: K = 0 is the anchor-state group alone, population std, weight L**alpha."""
    rows_by_state = defaultdict(list)
    for row, key in enumerate(zip(batch.group_ids, batch.obs, strict=True)):
        rows_by_state[key].append(row)
    weight = (1.0 if weighting == "paper" else 2.0) ** alpha
    expected = np.zeros(len(batch.obs))
    for rows in rows_by_state.values():
        values = batch.step_returns[rows]
        if len(rows) < 2:
            continue
        scale = statistics.pstdev(values) + 1e-6 if mode == "mean_std_norm" else 1.0
        item = (values - statistics.fmean(values)) / scale
        expected[rows] = np.where(item != 0.0, weight * item / (weight + 1e-6), 0.0)
    got = hgpo_advantages(*batch, history_length=0, alpha=alpha, mode=mode, weighting=weighting)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@SETTINGS
@given(batches(), st.integers(0, 4))
def test_level_sizes_are_the_pseudo_code_clusters(batch: Batch, history_length: int) -> None:
    """Spec §4.4 pseudo-code: (group, d, last d observations) -> rows; no item below 2 rows."""
    trajectories = defaultdict(list)
    for row, traj in enumerate(batch.traj_ids):
        trajectories[traj].append(row)
    clusters = defaultdict(list)
    for rows in trajectories.values():
        rows.sort(key=lambda row: batch.step_idx[row])
        for t, row in enumerate(rows):
            for depth in range(1, min(history_length, t) + 2):
                window = tuple(batch.obs[prev] for prev in rows[t - depth + 1 : t + 1])
                clusters[(batch.group_ids[row], depth, window)].append(row)
    expected = np.zeros((history_length + 1, len(batch.obs)), dtype=int)
    for (_, depth, _), rows in clusters.items():
        expected[depth - 1, rows] = len(rows)
    levels = hgpo_level_stats(*batch[:5], history_length=history_length)
    np.testing.assert_array_equal(levels.sizes, expected)
    np.testing.assert_array_equal(np.isnan(levels.items), expected < 2)


@SETTINGS
@given(batches(), hgpo_options)
def test_level_items_reaggregate_to_hgpo(batch: Batch, options: dict[str, Any]) -> None:
    """§4.4 on the per-level items (NaN: no item; 0.0: dropped) plus the base item gives
    hgpo_advantages: weight L**alpha with L = d + 1 (paper weighting without base: L = d)."""
    history_length, alpha, mode = options["history_length"], options["alpha"], options["mode"]
    levels = hgpo_level_stats(*batch[:5], history_length=history_length, mode=mode)
    offset = 0 if options["weighting"] == "paper" and not options["base_group"] else 1
    lengths = np.arange(1, history_length + 2) + offset
    items = levels.items
    if options["base_group"]:
        base = grpo_advantages(batch.group_ids, batch.episode_scores, norm_by_std=mode == "mean_std_norm")
        items, lengths = np.vstack([base, items]), np.concatenate([[1], lengths])
    weights = np.where(np.isnan(items) | (items == 0.0), 0.0, lengths[:, None] ** alpha)
    expected = np.where(weights > 0, weights * items, 0.0).sum(axis=0) / (weights.sum(axis=0) + 1e-6)
    np.testing.assert_allclose(hgpo_advantages(*batch, **options), expected, rtol=1e-12, atol=1e-12)


@SETTINGS
@given(
    st.lists(st.tuples(st.integers(0, 4), st.floats(-10, 10)), min_size=1, max_size=60),
    st.floats(0.0, 1.0),
    st.randoms(use_true_random=False),
)
def test_discounted_returns_equals_naive_per_row_formula(
    rows: list[tuple[int, float]], gamma: float, rnd: Any
) -> None:
    """The reference's O(N^2) helper (spec Q11): for every row, sum gamma^(j-t) r_j over the
    later rows of its trajectory."""
    traj = np.array([t for t, _ in rows])
    rewards = np.array([r for _, r in rows])
    steps = np.zeros(len(rows), dtype=int)
    for t in set(traj.tolist()):  # consecutive steps per trajectory, in shuffled row order
        members = np.flatnonzero(traj == t)
        steps[members] = rnd.sample(range(len(members)), len(members))
    expected = np.array(
        [
            sum(
                gamma ** (steps[j] - steps[i]) * rewards[j]
                for j in np.flatnonzero((traj == traj[i]) & (steps >= steps[i]))
            )
            for i in range(len(rows))
        ]
    )
    np.testing.assert_allclose(
        discounted_returns(traj, steps, rewards, gamma), expected, rtol=1e-9, atol=1e-9
    )
