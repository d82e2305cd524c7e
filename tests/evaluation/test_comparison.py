"""Paired comparisons (``hgpo_rllib.evaluation.comparison``): the sign-flip test against an
enumeration written out here, the bootstrap against its two sources of spread, the pairing."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from hgpo_rllib.evaluation.comparison import (
    bootstrap_interval,
    compare,
    minimum_detectable_difference,
    seed_paired_differences,
    sign_flip_floor,
    sign_flip_p_value,
)


def enumerated_sign_flip(values: list[float]) -> float:
    """Two-sided p: the share of the 2**n sign patterns whose |mean| reaches the observed one."""
    observed = abs(np.mean(values))
    flips = list(itertools.product((1, -1), repeat=len(values)))
    hits = sum(
        abs(np.mean([s * v for s, v in zip(signs, values, strict=True)])) >= observed - 1e-12
        for signs in flips
    )
    return hits / len(flips)


@pytest.mark.parametrize(
    "values", [[0.1, 0.2, 0.05, 0.3, 0.15], [0.1, -0.2, 0.05, 0.3, -0.15], [0.0, 0.1, -0.1], [0.3]]
)
def test_sign_flip_is_the_exact_enumeration(values: list[float]) -> None:
    assert sign_flip_p_value(np.array(values)) == pytest.approx(enumerated_sign_flip(values))


def test_five_seeds_all_better_cannot_reach_p_below_0_0625() -> None:
    assert sign_flip_p_value(np.array([0.1, 0.2, 0.3, 0.4, 0.5])) == pytest.approx(2 / 32)


def test_the_sign_flip_floor_is_the_p_of_seeds_all_of_one_sign() -> None:
    assert [sign_flip_floor(n) for n in (1, 3, 5)] == [1.0, 0.25, 0.0625]
    assert sign_flip_floor(3) == sign_flip_p_value(np.array([0.1, 0.2, 0.3]))
    with pytest.raises(ValueError, match="seeds must be >= 1"):
        sign_flip_floor(0)


def test_minimum_detectable_difference_of_3_seeds_and_100_goals() -> None:
    """At 10% success: (1.960 + 0.842) * sqrt(2 * 0.09 / 300) = 6.86 points at 80% power, 4.80 at
    50% (the interval just excludes 0); 4 times the games halve it."""
    assert minimum_detectable_difference(0.09, 3, 100) == pytest.approx(0.068625, abs=1e-6)
    assert minimum_detectable_difference(0.09, 3, 100, power=0.5) == pytest.approx(0.048009, abs=1e-6)
    assert minimum_detectable_difference(0.09, 3, 400) == pytest.approx(0.068625 / 2, abs=1e-6)
    assert minimum_detectable_difference(0.0, 3, 100) == 0.0  # a start that never wins: no spread
    with pytest.raises(ValueError, match="need seeds, games >= 1"):
        minimum_detectable_difference(0.09, 0, 100)


def test_bootstrap_interval_reflects_game_and_seed_spread() -> None:
    same = {s: np.full(20, 0.25) for s in range(5)}  # no spread at all: a point
    assert bootstrap_interval(same) == pytest.approx((0.25, 0.25, 0.25))
    rng = np.random.default_rng(1)
    games_only = {s: rng.choice([-1.0, 0.0, 1.0], 40) for s in range(5)}
    mean, low, high = bootstrap_interval(games_only)
    assert low < mean < high
    # Seeds that differ widely widen the interval beyond what the games alone give.
    shifted = {s: d + (s - 2) * 0.5 for s, d in games_only.items()}
    _, wide_low, wide_high = bootstrap_interval(shifted)
    assert wide_high - wide_low > 1.5 * (high - low)


def episodes(variant: str, won: dict[int, list[bool]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "variant": variant,
                "training_seed": seed,
                "split": "out",
                "seed": 123,
                "task_seed": game,
                "won": w,
            }
            for seed, results in won.items()
            for game, w in enumerate(results)
        ]
    )


def test_differences_pair_by_training_seed_and_game() -> None:
    variant = episodes("HGPO", {0: [True, True, False], 1: [False, True, True]})
    baseline = episodes("GRPO", {0: [False, True, False], 1: [False, False, True], 2: [True, True, True]})
    differences = seed_paired_differences(variant, baseline)
    assert set(differences) == {0, 1}  # seed 2 has no variant run
    np.testing.assert_array_equal(differences[0], [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(differences[1], [0.0, 1.0, 0.0])
    table = compare(pd.concat([variant, baseline]), ["HGPO"], ["GRPO"])
    assert table.loc[0, "difference"] == pytest.approx(100 / 3, abs=0.05)
    assert table.loc[0, "sign_flip_p"] == pytest.approx(0.5)  # two seeds, both +1/3: 2 of 4 patterns
    assert table.loc[0, "sign_flip_floor"] == 0.5  # the smallest p two seeds allow: this one


def test_a_repeated_game_is_refused() -> None:
    variant = episodes("HGPO", {0: [True, True]})
    with pytest.raises(ValueError, match="repeat a game"):
        seed_paired_differences(pd.concat([variant, variant]), variant)
