"""``weighting="adaptive"`` of ``hgpo_advantages``: per-step level weights from the batch itself.

Properties (hypothesis, on the random batches of ``test_advantages_properties``): the weights are
finite, >= 0 and sum to 1 over each step's shared levels; they re-aggregate the per-level items
to the advantage; row order does not matter; ``mean_norm`` advantages scale with the returns;
K = 0, and hierarchies whose levels are all the same group, reduce to the current-state item.
Hand-built cases check that the weights move to the deep level when it removes a real
difference in value and stay on the current-state level when it does not; two worked examples,
their arithmetic written out, give the exact sizes, items, weights and advantages (one with revisits,
whose own-trajectory members move the weights); degenerate batches give exact zeros.
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
    # X S and Y S groups are pure (x2 = 0), so the adaptive advantage at S is w1 x1 = 1/7 * (+-1/2)
    # while the fixed weights keep crediting S with the difference made at step 0: x1 = +-1/2 (the
    # reference drops the zero item x2; its eps moves it by < 1e-6).
    won = np.array(batch.step_returns)[at_s] == 1.0
    adaptive = _adaptive(batch, history_length=1, mode="mean_norm")
    np.testing.assert_allclose(adaptive[at_s], np.where(won, 1 / 14, -1 / 14), rtol=1e-6)
    fixed = hgpo_advantages(*batch, history_length=1, mode="mean_norm")
    np.testing.assert_allclose(fixed[at_s], np.where(won, 0.5, -0.5), rtol=1e-6)


def test_weight_stays_on_the_current_state_without_aliasing() -> None:
    batch = _aliased_batch(deep_values=False)
    levels = hgpo_level_stats(*batch[:5], history_length=1, weighting="adaptive", mode="mean_norm")
    at_s = np.array(batch.obs) == "S"
    np.testing.assert_allclose(levels.weights[0, at_s], 1.0, atol=1e-6)


def _two_step_batch(paths: list[str], returns: list[float]) -> Batch:
    """One group, one trajectory per path of 2 observations, the trajectory's return at both steps."""
    rows = [
        ("g", f"t{i}", step, path[step], ret)
        for i, (path, ret) in enumerate(zip(paths, returns, strict=True))
        for step in (0, 1)
    ]
    groups, trajs, steps, obs, step_returns = (list(column) for column in zip(*rows, strict=True))
    return Batch(groups, trajs, steps, obs, np.array(step_returns), np.array(step_returns))


#: Two worked examples at K = 1, by hand (docs/results.md, "Adaptive level weights"). The steps at
#: t = 1 share 2 levels (D = 2): the current state S (level 1) and the pair (previous observation, S)
#: (level 2), groups of 2 here; the steps at t = 0 share level 1 only and get weight 1 on it.
#: With x_d = R - m_d (m_d: the level-d group's mean), s2 the unbiased variance of the level-1 group
#: and c_d of its n_d members from the step's own trajectory, the class D = 2 minimises
#: f(w) = w'Gw + 2h'w on w1 + w2 = 1, G = mean of x x' over its steps, h = mean of s2 c_d / n_d.
WORKED = {
    # Paths XS, XS, YS, YS with returns 4, 2, 2, 0. Level 1 at S: {4, 2, 2, 0}, m1 = 2,
    # x1 = (2, 0, 0, -2), s2 = (4 + 0 + 0 + 4) / 3 = 8/3. Level 2: XS {4, 2}, m2 = 3; YS {2, 0}, m2 = 1;
    # x2 = (1, -1, 1, -1). G = [[8, 4], [4, 4]] / 4 = [[2, 1], [1, 1]] (sum x1 x2 = 2 + 0 + 0 + 2).
    # c = 1, n = (4, 2): h = 8/3 (1/4, 1/2) = (2/3, 4/3).
    # f = 2 w1^2 + 2 w1 w2 + w2^2 + 2 (2/3 w1 + 4/3 w2) = w1^2 + 1 + 8/3 - 4/3 w1  (w2 = 1 - w1)
    # f' = 2 w1 - 4/3 = 0: w = (2/3, 1/3). At S: A = 2/3 x1 + 1/3 x2 = (5/3, -1/3, 1/3, -5/3).
    # At t = 0: X {4, 2} and Y {2, 0}, A = x1 = (1, -1, 1, -1).
    "no revisits": (
        ["XS", "XS", "YS", "YS"],
        [4.0, 2.0, 2.0, 0.0],
        (2 / 3, 1 / 3),
        [[2, 4, 2, 4, 2, 4, 2, 4], [0, 2, 0, 2, 0, 2, 0, 2]],
        [[1, 2, -1, 0, 1, 0, -1, -2], [np.nan, 1, np.nan, -1, np.nan, 1, np.nan, -1]],
        [1, 5 / 3, -1, -1 / 3, 1, 1 / 3, -1, -5 / 3],
    ),
    # Paths SS, SS, XS, XS with returns 1, 3, 0, 1: the SS trajectories visit S twice (c1 = 2).
    # Level 1 at S: {1, 1, 3, 3, 0, 1}, m1 = 3/2, s2 = (1/4 + 1/4 + 9/4 + 9/4 + 9/4 + 1/4) / 5 = 3/2.
    # At t = 1: x1 = (-1/2, 3/2, -3/2, -1/2); level 2: SS {1, 3}, m2 = 2; XS {0, 1}, m2 = 1/2;
    # x2 = (-1, 1, -1/2, 1/2). sum x1^2 = 5, sum x1 x2 = 1/2 + 3/2 + 3/4 - 1/4 = 5/2, sum x2^2 = 5/2:
    # G = [[5/4, 5/8], [5/8, 5/8]]. h1 = 3/2 * mean(2/6, 2/6, 1/6, 1/6) = 3/8, h2 = 3/2 * 1/2 = 3/4.
    # f = 5/8 w1^2 + 5/8 + 3/2 - 3/4 w1, f' = 5/4 w1 - 3/4 = 0: w = (3/5, 2/5) (with c1 = 1 it would
    # be 4/5). At t = 1: A = 3/5 x1 + 2/5 x2 = (-7/10, 13/10, -11/10, -1/10).
    # At t = 0: S (level 1 above), x1 = (-1/2, 3/2); X {0, 1}, x1 = (-1/2, 1/2).
    "revisits": (
        ["SS", "SS", "XS", "XS"],
        [1.0, 3.0, 0.0, 1.0],
        (3 / 5, 2 / 5),
        [[6, 6, 6, 6, 2, 6, 2, 6], [0, 2, 0, 2, 0, 2, 0, 2]],
        [[-0.5, -0.5, 1.5, 1.5, -0.5, -1.5, 0.5, -0.5], [np.nan, -1, np.nan, 1, np.nan, -0.5, np.nan, 0.5]],
        [-0.5, -0.7, 1.5, 1.3, -0.5, -1.1, 0.5, -0.1],
    ),
}


@pytest.mark.parametrize("case", list(WORKED))
def test_worked_examples_by_hand(case: str) -> None:
    paths, returns, (w1, w2), sizes, items, advantages = WORKED[case]
    batch = _two_step_batch(paths, returns)
    levels = hgpo_level_stats(*batch[:5], history_length=1, weighting="adaptive", mode="mean_norm")
    np.testing.assert_array_equal(levels.sizes, sizes)
    np.testing.assert_array_equal(levels.items, items)  # nan: the t = 0 steps have no level 2
    # Rows alternate t = 0, t = 1. The solver's ridge (1e-10, relative) moves the weights by ~1e-10.
    np.testing.assert_allclose(levels.weights, [[1, w1] * 4, [0, w2] * 4], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(_adaptive(batch, history_length=1, mode="mean_norm"), advantages, rtol=1e-9)


def test_simplex_minimiser_on_a_boundary_by_hand() -> None:
    """G = I, h = (1, -1): on w1 + w2 = 1, f = 2 w1^2 + 2 w1 - 1 is least at w1 = -1/2, off the
    simplex, so the minimum is on its edge w1 = 0: exactly (0, 1). The interior case: G = [[2, 1], [1, 1]],
    h = (2/3, 4/3) from the first worked example, gives (2/3, 1/3)."""
    np.testing.assert_array_equal(simplex_quadratic_min(np.eye(2), np.array([1.0, -1.0])), [0.0, 1.0])
    interior = simplex_quadratic_min(np.array([[2.0, 1.0], [1.0, 1.0]]), np.array([2 / 3, 4 / 3]))
    np.testing.assert_allclose(interior, [2 / 3, 1 / 3], rtol=1e-9)


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
