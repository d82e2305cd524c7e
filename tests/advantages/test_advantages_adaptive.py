"""``weighting="adaptive"`` of ``hgpo_advantages``: per-step level weights from the batch itself.

Properties (hypothesis, on the random batches of ``test_advantages_properties``): the weights are
finite, >= 0 and sum to 1 over each step's shared levels; they re-aggregate the per-level items
to the advantage; row order does not matter; ``mean_norm`` advantages scale with the returns;
K = 0, and hierarchies whose levels are all the same group, reduce to the current-state item.
Hand-built cases check that the weights move to the deep level when it removes a real
difference in value and stay on the current-state level when it does not, and degenerate
batches give exact zeros.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import SETTINGS, Batch, batches
from hypothesis import given
from hypothesis import strategies as st

from hgpo_rllib.advantages import hgpo_advantages, hgpo_level_stats
from hgpo_rllib.advantages.adaptive import simplex_quadratic_min

adaptive_options = st.fixed_dictionaries(
    {"history_length": st.integers(0, 4), "mode": st.sampled_from(["mean_norm", "mean_std_norm"])}
)


def _adaptive(batch: Batch, **options: Any) -> np.ndarray:
    return hgpo_advantages(*batch, weighting="adaptive", **options)


@SETTINGS
@given(batches(), adaptive_options)
def test_weights_are_a_distribution_over_the_shared_levels(batch: Batch, options: dict[str, Any]) -> None:
    levels = hgpo_level_stats(*batch[:5], weighting="adaptive", **options)
    shared = levels.sizes >= 2
    assert np.isfinite(levels.weights).all()
    assert (levels.weights >= 0.0).all()
    np.testing.assert_array_equal(levels.weights[~shared], 0.0)
    np.testing.assert_array_equal(levels.base_weights, 0.0)
    sums = levels.weights.sum(axis=0)
    np.testing.assert_allclose(sums[shared[0]], 1.0, rtol=1e-12)
    np.testing.assert_array_equal(sums[~shared[0]], 0.0)


@SETTINGS
@given(batches(), adaptive_options)
def test_weights_reaggregate_the_items(batch: Batch, options: dict[str, Any]) -> None:
    levels = hgpo_level_stats(*batch[:5], weighting="adaptive", **options)
    expected = (levels.weights * np.nan_to_num(levels.items)).sum(axis=0)
    got = _adaptive(batch, **options)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@SETTINGS
@given(batches(), adaptive_options, st.randoms(use_true_random=False))
def test_row_permutation_invariance(batch: Batch, options: dict[str, Any], rnd: Any) -> None:
    perm = np.array(rnd.sample(range(len(batch.obs)), len(batch.obs)))
    permuted = Batch(*(np.asarray(column)[perm] for column in batch))
    np.testing.assert_allclose(
        _adaptive(permuted, **options), _adaptive(batch, **options)[perm], rtol=1e-9, atol=1e-9
    )


@SETTINGS
@given(batches(), st.integers(0, 4))
def test_mean_norm_advantages_scale_with_the_returns(batch: Batch, history_length: int) -> None:
    """The weights are scale-free: every term of the risk estimate scales with returns**2."""
    scaled = batch._replace(step_returns=4.0 * batch.step_returns)
    np.testing.assert_allclose(
        _adaptive(scaled, history_length=history_length, mode="mean_norm"),
        4.0 * _adaptive(batch, history_length=history_length, mode="mean_norm"),
        rtol=1e-9,
        atol=1e-9,
    )


@SETTINGS
@given(batches(), st.sampled_from(["mean_norm", "mean_std_norm"]))
def test_history_length_zero_is_the_current_state_item(batch: Batch, mode: str) -> None:
    """One level: weight 1 on its item, i.e. the reference's K = 0 without its eps shrinkage."""
    reference = hgpo_advantages(*batch, history_length=0, mode=mode, alpha=0.0)
    np.testing.assert_allclose(
        _adaptive(batch, history_length=0, mode=mode), reference * (1.0 + 1e-6), rtol=1e-12, atol=1e-12
    )


@SETTINGS
@given(batches(), st.integers(1, 4), st.sampled_from(["mean_norm", "mean_std_norm"]))
def test_identical_levels_reduce_to_the_current_state_item(
    batch: Batch, history_length: int, mode: str
) -> None:
    """Observations that name the step only make every level the same group: any weights summing
    to 1 then give the current-state item."""
    same_path = batch._replace(obs=[f"s{t}" for t in batch.step_idx])
    np.testing.assert_allclose(
        _adaptive(same_path, history_length=history_length, mode=mode),
        _adaptive(same_path, history_length=0, mode=mode),
        rtol=1e-9,
        atol=1e-12,
    )


def _aliased_batch(deep_values: bool) -> Batch:
    """8 trajectories X S or Y S (4 each) in one group; state S is aliased. With ``deep_values``
    the X paths succeed and the Y paths fail (history decides), otherwise each path has
    returns 1, 0, 1, 0 (history says nothing)."""
    rows = []
    for traj in range(8):
        first = "X" if traj < 4 else "Y"
        ret = float(traj < 4) if deep_values else float(traj % 2)
        rows += [("g", f"t{traj}", 0, first, ret), ("g", f"t{traj}", 1, "S", ret)]
    groups, trajs, steps, obs, returns = (list(column) for column in zip(*rows, strict=True))
    return Batch(groups, trajs, steps, obs, np.array(returns), np.array(returns))


def test_weight_moves_to_the_level_that_removes_aliasing() -> None:
    batch = _aliased_batch(deep_values=True)
    levels = hgpo_level_stats(*batch[:5], history_length=1, weighting="adaptive", mode="mean_norm")
    at_s = np.array(batch.obs) == "S"
    # Risk estimate 0.25 w1**2 + 2 * (8/7 * 0.25) * (w1 / 8 + w2 / 4): minimum at w1 = 1/7.
    np.testing.assert_allclose(levels.weights[1, at_s], 6 / 7, rtol=1e-6)
    # X S and Y S groups are pure, so the adaptive advantage at S is close to 0 while the
    # fixed weights keep crediting S with the difference made at step 0.
    adaptive = _adaptive(batch, history_length=1, mode="mean_norm")
    fixed = hgpo_advantages(*batch, history_length=1, mode="mean_norm")
    assert np.abs(adaptive[at_s]).max() < 0.1 < np.abs(fixed[at_s]).min()


def test_weight_stays_on_the_current_state_without_aliasing() -> None:
    batch = _aliased_batch(deep_values=False)
    levels = hgpo_level_stats(*batch[:5], history_length=1, weighting="adaptive", mode="mean_norm")
    at_s = np.array(batch.obs) == "S"
    np.testing.assert_allclose(levels.weights[0, at_s], 1.0, atol=1e-6)


def test_degenerate_batches_are_exact_zeros() -> None:
    steps = list(range(5))
    singletons = Batch(["g"] * 5, ["t"] * 5, steps, list("ABCDE"), np.arange(5.0), np.full(5, 2.0))
    equal = Batch(
        ["g"] * 6, ["a", "b", "c"] * 2, [0, 0, 0, 1, 1, 1], list("AAABBB"), np.full(6, 9.025), np.ones(6)
    )
    for batch in (singletons, equal):
        for mode in ("mean_norm", "mean_std_norm"):
            for history_length in (0, 2, 4):
                got = _adaptive(batch, history_length=history_length, mode=mode)
                np.testing.assert_array_equal(got, 0.0)
                weights = hgpo_level_stats(
                    *batch[:5], history_length=history_length, weighting="adaptive"
                ).weights
                assert np.isfinite(weights).all()


def test_base_group_is_refused_with_adaptive_weights() -> None:
    batch = _aliased_batch(deep_values=True)
    with pytest.raises(ValueError, match="base_group"):
        _adaptive(batch, base_group=True)
    with pytest.raises(ValueError, match="episode_scores"):
        hgpo_level_stats(*batch[:5], base_group=True)


@SETTINGS
@given(
    st.integers(1, 4).flatmap(
        lambda dim: st.tuples(
            st.lists(st.floats(-3, 3), min_size=dim * dim, max_size=dim * dim),
            st.lists(st.floats(-1, 1), min_size=dim, max_size=dim),
        )
    ),
    st.randoms(use_true_random=False),
)
def test_simplex_minimiser_beats_every_other_simplex_point(problem: Any, rnd: Any) -> None:
    flat, linear = problem
    dim = len(linear)
    factor = np.array(flat).reshape(dim, dim)
    gram, linear = factor @ factor.T, np.array(linear)
    weights = simplex_quadratic_min(gram, linear)
    assert np.isfinite(weights).all() and (weights >= 0).all()
    assert weights.sum() == pytest.approx(1.0)

    def objective(w: np.ndarray) -> float:
        return float(w @ gram @ w + 2 * linear @ w)

    scale = 1e-6 * (np.abs(gram).max() + np.abs(linear).max() + 1)
    points = list(np.eye(dim)) + [np.array([rnd.random() + 1e-3 for _ in range(dim)]) for _ in range(50)]
    for point in points:
        assert objective(weights) <= objective(point / point.sum()) + scale
