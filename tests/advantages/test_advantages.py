"""Golden-vector, worked-example and bad-input tests for ``hgpo_rllib.advantages``.

The golden files (``docs/hgpo_algorithm.md`` §8, "the spec") come from the reference verl-agent
code; each case is checked both
through the full pipeline (rewards -> returns/scores, penalty 0.1) and estimator-only (from the
stored float32 returns and scores), at the spec's tolerance. Numerically fragile cases are
checked against ``expected_advantage_exact_arith`` (quirk Q1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import golden_cases

from hgpo_rllib.advantages import (
    HGPOLevels,
    discounted_returns,
    gigpo_advantages,
    grpo_advantages,
    hgpo_advantages,
    hgpo_level_stats,
    step_returns_and_scores,
)

_cases = golden_cases


def _column(case: dict[str, Any], field: str) -> list[Any]:
    return [step[field] for step in case["steps"]]


def _expected(case: dict[str, Any]) -> np.ndarray:
    field = "expected_advantage_exact_arith" if case.get("numerically_fragile") else "expected_advantage"
    return np.array(_column(case, field))


def _inputs(case: dict[str, Any], source: str) -> tuple[np.ndarray, np.ndarray]:
    """(step_returns, episode_scores): recomputed from raw rewards, or as stored."""
    if source == "pipeline":
        return step_returns_and_scores(
            _column(case, "traj_id"),
            _column(case, "step_idx"),
            _column(case, "reward"),
            _column(case, "is_action_valid"),
            case["gamma"],
            invalid_penalty=0.1,
        )
    return np.array(_column(case, "step_return")), np.array(_column(case, "episode_score"))


def _run(estimator: str, case: dict[str, Any], source: str) -> np.ndarray:
    """Call our estimator with the golden options mapped to our keyword names."""
    returns, scores = _inputs(case, source)
    options = case["options"]
    groups, obs = _column(case, "group_id"), _column(case, "obs")
    if estimator == "grpo":
        return grpo_advantages(
            groups, scores, norm_by_std=options["norm_adv_by_std_in_grpo"], epsilon=options["epsilon"]
        )
    if estimator == "gigpo":
        return gigpo_advantages(
            groups,
            obs,
            returns,
            scores,
            mode=options["mode"],
            step_advantage_w=options["step_advantage_w"],
            epsilon=options["epsilon"],
        )
    return hgpo_advantages(
        groups,
        _column(case, "traj_id"),
        _column(case, "step_idx"),
        obs,
        returns,
        scores,
        history_length=options["history_length"],
        mode=options["mode"],
        alpha=options["length_weight_alpha"],
        base_group=options["base_group"],
        epsilon=options["epsilon"],
    )


GOLDEN_PARAMS = [
    pytest.param(estimator, case, source, id=f"{estimator}-{case['name']}-{source}")
    for estimator in ("grpo", "gigpo", "hgpo")
    for case in _cases(estimator)
    for source in ("pipeline", "estimator_only")
]


@pytest.mark.parametrize(("estimator", "case", "source"), GOLDEN_PARAMS)
def test_golden(estimator: str, case: dict[str, Any], source: str) -> None:
    expected = _expected(case)
    got = _run(estimator, case, source)
    assert got.dtype == np.float64
    assert np.all(np.abs(got - expected) <= 1e-4 * np.maximum(1.0, np.abs(expected))), (got, expected)


def test_golden_files_have_the_cases_we_rely_on() -> None:
    """Guards the parametrisation above against an empty or truncated golden set."""
    assert len(_cases("grpo")) >= 5 and len(_cases("gigpo")) >= 9 and len(_cases("hgpo")) >= 19
    assert any(case.get("numerically_fragile") for case in _cases("hgpo"))


@pytest.mark.parametrize("source", ["pipeline", "estimator_only"])
def test_fragile_case_gives_exact_zeros(source: str) -> None:
    """Q1: equal returns (9.025 = 10 * 0.95**2, not a float32 mean) contribute exactly 0."""
    (case,) = [case for case in _cases("hgpo") if case["name"] == "float32_equal_returns_k2_msn"]
    exact = _expected(case)
    got = _run("hgpo", case, source)
    assert np.any(np.array(_column(case, "expected_advantage"))[exact == 0.0] != 0.0)  # the reference's bug
    assert np.all(got[exact == 0.0] == 0.0)


def test_golden_step_returns_and_scores() -> None:
    """§1.1 pipeline reproduces the stored (float32) estimator inputs of every case."""
    for estimator in ("grpo", "gigpo", "hgpo"):
        for case in _cases(estimator):
            returns, scores = _inputs(case, "pipeline")
            np.testing.assert_allclose(returns, _column(case, "step_return"), rtol=2e-7, atol=1e-7)
            np.testing.assert_allclose(scores, _column(case, "episode_score"), rtol=2e-7, atol=1e-7)


# ----------------------------------------------------------------------------- worked example


def _nested_depths() -> dict[str, Any]:
    (case,) = [case for case in _cases("hgpo") if case["name"] == "nested_depths_k2_msn"]
    return case


def _hgpo_on(case: dict[str, Any], **options: Any) -> np.ndarray:
    returns, scores = _inputs(case, "estimator_only")
    return hgpo_advantages(
        _column(case, "group_id"),
        _column(case, "traj_id"),
        _column(case, "step_idx"),
        _column(case, "obs"),
        returns,
        scores,
        **options,
    )


def test_worked_example_section_4_5() -> None:
    """Step t0/B: items 1.50756 (d=1) and 1.41421 (d=2), weights 2 and 3 (spec §4.5)."""
    got = _hgpo_on(_nested_depths(), history_length=2)
    assert got[1] == pytest.approx((2 * 1.50756 + 3 * 1.41421) / (5 + 1e-6), abs=2e-5)


def test_paper_weighting_uses_k_plus_one() -> None:
    """Q2: the paper's weights for t0/B are 1 (k=0) and 2 (k=1) instead of 2 and 3."""
    got = _hgpo_on(_nested_depths(), history_length=2, weighting="paper")
    assert got[1] == pytest.approx((1 * 1.50756 + 2 * 1.41421) / (3 + 1e-6), abs=2e-5)


def test_paper_weighting_with_base_group_is_the_reference() -> None:
    """The base item takes the bottom slot L = 1 and the step levels move up (docstring)."""
    case = _nested_depths()
    paper = _hgpo_on(case, history_length=2, base_group=True, weighting="paper")
    np.testing.assert_array_equal(paper, _hgpo_on(case, history_length=2, base_group=True))
    assert not np.allclose(paper, _hgpo_on(case, history_length=2, base_group=False, weighting="paper"))


def test_weightings_agree_only_for_uniform_weights() -> None:
    case = _nested_depths()
    uniform = [_hgpo_on(case, alpha=0.0, weighting=weighting) for weighting in ("reference", "paper")]
    np.testing.assert_array_equal(*uniform)
    assert not np.allclose(_hgpo_on(case, weighting="paper"), _hgpo_on(case, weighting="reference"))


def test_member_at_group_mean_is_dropped_per_item() -> None:
    """Q1 + Q3: b's second step sits at the mean of {.1, .2, .3}, which float64 misses by
    3e-17; its level-1 item must still be dropped, leaving the (S, X) level alone."""
    assert (0.1 + 0.2 + 0.3) / 3 != 0.2
    trajs, steps = ["a", "a", "b", "b", "c", "c"], [0, 1] * 3
    obs = ["S", "X", "S", "X", "T", "X"]
    returns = np.array([0.7, 0.1, 0.7, 0.2, 0.9, 0.3])
    got = hgpo_advantages(["g"] * 6, trajs, steps, obs, returns, returns, history_length=1, mode="mean_norm")
    assert got[3] == pytest.approx(0.05 * 3 / (3 + 1e-6), rel=1e-12)
    assert got[4] == 0.0  # singleton at its only level


# ----------------------------------------------------------------------------- per-level view


def _levels_on(case: dict[str, Any], **options: Any) -> HGPOLevels:
    returns, _ = _inputs(case, "pipeline")  # gamma = 0.5: every return is exact
    columns = (_column(case, field) for field in ("group_id", "traj_id", "step_idx", "obs"))
    return hgpo_level_stats(*columns, returns, **options)


def test_level_stats_worked_example_section_4_5() -> None:
    """Step t0/B (row 1): level k=0 (key B) has 4 members and item 1.50756, k=1 (key A B) has
    3 and item 1.41421; at t = 1 it has no level k=2 (spec §4.5, which rounds away the eps)."""
    levels = _levels_on(_nested_depths(), history_length=2)
    assert levels.sizes.shape == levels.items.shape == (3, 21)
    assert levels.sizes[:, 1].tolist() == [4, 3, 0]
    # R = .25 in {.25, 0, .125, 0}: mean .09375, pop. variance .0107421875; in {.25, 0, 0}: 1/12, 1/72.
    by_hand = [0.15625 / (np.sqrt(0.0107421875) + 1e-6), (1 / 6) / (np.sqrt(1 / 72) + 1e-6)]
    np.testing.assert_allclose(levels.items[:2, 1], by_hand, rtol=1e-12)
    np.testing.assert_allclose(levels.items[:2, 1], [1.50756, 1.41421], atol=2e-5)
    assert np.isnan(levels.items[2, 1])


def test_level_stats_hand_counted_sizes_and_items() -> None:
    """Every group of §4.5 counted by hand; t0 = ABCD, t1 = ABCE, t2 = XBCDZ, t3 = YWCD, t4 = ABCD."""
    levels = _levels_on(_nested_depths(), history_length=2)
    # Per trajectory: k=0 keys (A)3 (B)4 (C)5 (D)4, rest alone; k=1 (AB)3 (BC)4 (CD)4;
    # k=2 (ABC)3 (BCD)3; 0 where t < k.
    expected = [
        [3, 4, 5, 4] + [3, 4, 5, 1] + [1, 4, 5, 4, 1] + [1, 1, 5, 4] + [3, 4, 5, 4],
        [0, 3, 4, 4] + [0, 3, 4, 1] + [0, 1, 4, 4, 1] + [0, 1, 1, 4] + [0, 3, 4, 4],
        [0, 0, 3, 3] + [0, 0, 3, 1] + [0, 0, 1, 3, 1] + [0, 0, 1, 1] + [0, 0, 3, 3],
    ]
    np.testing.assert_array_equal(levels.sizes, expected)
    np.testing.assert_array_equal(np.isnan(levels.items), levels.sizes < 2)  # no item, no group
    # t2/C (row 10) sits at the mean .25 of (C)'s returns {.5, 0, .25, .5, 0}: an item that
    # exists and is exactly 0 (the aggregation drops it), unlike the NaN of its k=2 singleton.
    assert levels.items[0, 10] == 0.0 and np.isnan(levels.items[2, 10])
    # mean_norm items are R - mean: t0/D (row 3) at k=0 is 1 - mean{1, .5, 1, 0} = .375.
    assert _levels_on(_nested_depths(), history_length=0, mode="mean_norm").items[0, 3] == 0.375


# ----------------------------------------------------------------------------- returns


def test_discounted_returns_interleaved_and_gaps() -> None:
    """Rows in any order; step_idx only orders a trajectory's rows (gaps are ignored)."""
    got = discounted_returns(["b", "a", "a", "b", "a"], [7, 2, 0, 3, 1], [5.0, 1.0, 0.0, 2.0, 0.0], 0.5)
    np.testing.assert_allclose(got, [5.0, 1.0, 0.25, 4.5, 0.5])


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_discounted_returns_extreme_gammas(gamma: float) -> None:
    rewards = np.arange(1.0, 41.0)
    got = discounted_returns(np.zeros(40, int), np.arange(40), rewards, gamma)
    np.testing.assert_allclose(got, rewards if gamma == 0.0 else rewards[::-1].cumsum()[::-1])


def test_step_returns_and_scores_penalty_is_not_discounted() -> None:
    """Q6: an invalid row loses 0.1 of its own return and score only."""
    returns, scores = step_returns_and_scores(["t"] * 3, [0, 1, 2], [0.0, 0.0, 1.0], [True, False, 1], 0.5)
    np.testing.assert_allclose(returns, [0.25, 0.5 - 0.1, 1.0])
    np.testing.assert_allclose(scores, [1.0, 0.9, 1.0])


# ----------------------------------------------------------------------------- edge cases


def test_empty_inputs_give_empty_outputs() -> None:
    assert discounted_returns([], [], [], 0.9).shape == (0,)
    assert all(part.shape == (0,) for part in step_returns_and_scores([], [], [], [], 0.9))
    assert grpo_advantages([], []).shape == (0,)
    assert gigpo_advantages([], [], [], []).shape == (0,)
    assert hgpo_advantages([], [], [], [], [], [], base_group=True).shape == (0,)
    levels = hgpo_level_stats([], [], [], [], [], history_length=3)
    assert levels.sizes.shape == levels.items.shape == (4, 0)


def test_keys_may_be_ints_strings_or_tuples() -> None:
    returns = np.array([1.0, 0.0, 0.5, 0.25])
    steps = [0, 1, 0, 1]
    as_str = hgpo_advantages(["g"] * 4, ["a", "a", "b", "b"], steps, ["x", "y", "x", "y"], returns, returns)
    as_int = hgpo_advantages(
        np.array([7] * 4), np.array([0, 0, 1, 1]), steps, np.array([3, 9, 3, 9]), returns, returns
    )
    as_big = hgpo_advantages(
        np.array([2**40] * 4),
        np.array([-(2**50), -(2**50), 2**50, 2**50]),
        steps,
        [(1, "x"), (2, "y"), (1, "x"), (2, "y")],
        returns,
        returns,
    )
    np.testing.assert_array_equal(as_str, as_int)
    np.testing.assert_array_equal(as_str, as_big)
    assert np.any(as_str != 0.0)


# ----------------------------------------------------------------------------- bad input

ROWS = {"traj_ids": ["a", "a"], "step_idx": [0, 1], "rewards": [0.0, 1.0]}
EST = {"group_ids": ["g", "g"], "obs": ["x", "x"], "step_returns": [0.0, 1.0], "episode_scores": [1.0, 1.0]}


def _hgpo_args(**override: Any) -> dict[str, Any]:
    args = {
        "group_ids": EST["group_ids"],
        "traj_ids": ["a", "b"],
        "step_idx": [0, 0],
        "obs": EST["obs"],
        "step_returns": EST["step_returns"],
        "episode_scores": EST["episode_scores"],
    }
    return args | override


def _level_args(**override: Any) -> dict[str, Any]:
    args = _hgpo_args(**override)
    del args["episode_scores"]
    return args


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: discounted_returns(["a"], [0, 1], [0.0, 1.0], 0.9), "step_idx"),
        (lambda: discounted_returns(["a", "a"], [0, 1], [0.0], 0.9), "rewards"),
        (lambda: discounted_returns(**ROWS, gamma=1.5), "gamma"),
        (lambda: discounted_returns(**ROWS, gamma=-0.1), "gamma"),
        (lambda: discounted_returns(ROWS["traj_ids"], [0, 1], [0.0, np.nan], 0.9), "rewards"),
        (lambda: discounted_returns(ROWS["traj_ids"], [0, 1], [np.inf, 0.0], 0.9), "rewards"),
        (lambda: discounted_returns(ROWS["traj_ids"], [1, 1], [0.0, 1.0], 0.9), "duplicate"),
        (lambda: discounted_returns(ROWS["traj_ids"], [0.0, 1.0], [0.0, 1.0], 0.9), "step_idx"),
        (lambda: discounted_returns(np.zeros((2, 1)), [0, 1], [0.0, 1.0], 0.9), "traj_ids"),
        (lambda: step_returns_and_scores(**ROWS, is_action_valid=[True], gamma=0.9), "is_action_valid"),
        (lambda: step_returns_and_scores(**ROWS, is_action_valid=[1, 2], gamma=0.9), "is_action_valid"),
        (
            lambda: step_returns_and_scores(
                **ROWS, is_action_valid=[1, 1], gamma=0.9, invalid_penalty=np.nan
            ),
            "invalid_penalty",
        ),
        (lambda: step_returns_and_scores(ROWS["traj_ids"], [0, 1], [0.0, -np.inf], [1, 1], 0.9), "rewards"),
        (lambda: grpo_advantages(["g"], [1.0, 2.0]), "episode_scores"),
        (lambda: grpo_advantages(["g", "g"], [1.0, np.nan]), "episode_scores"),
        (lambda: grpo_advantages(["g", "g"], [1.0, 2.0], epsilon=0.0), "epsilon"),
        (lambda: gigpo_advantages(**(EST | {"obs": ["x"]})), "obs"),
        (lambda: gigpo_advantages(**(EST | {"step_returns": [0.0, 1.0, 2.0]})), "step_returns"),
        (lambda: gigpo_advantages(**EST, mode="std_norm"), "mode"),
        (lambda: gigpo_advantages(**(EST | {"step_returns": [np.nan, 0.0]})), "step_returns"),
        (lambda: gigpo_advantages(**EST, step_advantage_w=np.inf), "step_advantage_w"),
        (lambda: gigpo_advantages(**EST, epsilon=-1e-6), "epsilon"),
        (lambda: gigpo_advantages(**(EST | {"obs": np.zeros((2, 3))})), "obs"),
        (lambda: hgpo_advantages(**_hgpo_args(traj_ids=["a"])), "traj_ids"),
        (lambda: hgpo_advantages(**_hgpo_args(episode_scores=[1.0])), "episode_scores"),
        (lambda: hgpo_advantages(**_hgpo_args(), mode="median"), "mode"),
        (lambda: hgpo_advantages(**_hgpo_args(), weighting="uniform"), "weighting"),
        (lambda: hgpo_advantages(**_hgpo_args(), history_length=-1), "history_length"),
        (lambda: hgpo_advantages(**_hgpo_args(), alpha=np.nan), "alpha"),
        (lambda: hgpo_advantages(**_hgpo_args(), epsilon=0.0), "epsilon"),
        (lambda: hgpo_advantages(**_hgpo_args(episode_scores=[np.inf, 0.0])), "episode_scores"),
        (lambda: hgpo_advantages(**_hgpo_args(traj_ids=["a", "a"])), "duplicate"),
        (
            lambda: hgpo_advantages(**_hgpo_args(traj_ids=["a", "a"], step_idx=[0, 1], group_ids=["g", "h"])),
            "group_ids",
        ),
        (lambda: hgpo_level_stats(**_level_args(step_returns=[0.0])), "step_returns"),
        (lambda: hgpo_level_stats(**_level_args(step_returns=[np.nan, 0.0])), "step_returns"),
        (lambda: hgpo_level_stats(**_level_args(), mode="median"), "mode"),
        (lambda: hgpo_level_stats(**_level_args(), history_length=-1), "history_length"),
        (lambda: hgpo_level_stats(**_level_args(), epsilon=0.0), "epsilon"),
        (lambda: hgpo_level_stats(**_level_args(traj_ids=["a", "a"])), "duplicate"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_unhashable_keys_raise_type_error_naming_the_argument() -> None:
    with pytest.raises(TypeError, match="obs"):
        gigpo_advantages(**(EST | {"obs": [["x"], ["x"]]}))
    with pytest.raises(TypeError, match="history_length"):
        hgpo_advantages(**_hgpo_args(), history_length=1.5)
    with pytest.raises(TypeError, match="history_length"):
        hgpo_level_stats(**_level_args(), history_length=1.5)
