"""Paired comparisons of trained variants: which differences a CPU-sized study can resolve.

Training seeds dominate the spread of small runs, so a variant is compared with a baseline trained
with the same seeds and evaluated on the same games: per training seed, the mean over games of the
per-game difference (won or score). Two readings of those differences (docs/results.md, Table 1):

- :func:`bootstrap_interval`: a percentile interval of the mean difference that resamples training
  seeds, then each drawn seed's games (both sources of spread);
- :func:`sign_flip_p_value`: the exact sign-flip permutation test over the per-seed mean differences
  (under "no difference" each seed's difference is as likely negated). With n seeds its smallest
  two-sided p-value is 2 / 2**n (:func:`sign_flip_floor`): 0.0625 for 5 seeds, 0.25 for 3.

Before a study runs, :func:`minimum_detectable_difference` says which difference its seeds and games
can resolve at all. Pure numpy, pandas and scipy (no RLlib), as the estimators.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

#: The columns that name one game of an evaluation: the same in every run of a study.
GAME_KEYS = ("split", "seed", "task_seed")


def seed_paired_differences(
    variant: pd.DataFrame, baseline: pd.DataFrame, value: str = "won"
) -> dict[int, np.ndarray]:
    """Per training seed present in both, the per-game differences ``variant - baseline`` of
    ``value`` over the games both played. Each frame has a ``training_seed`` column, the
    :data:`GAME_KEYS` and ``value`` (one row per game and training seed)."""
    keys = ["training_seed", *GAME_KEYS]
    for name, frame in (("variant", variant), ("baseline", baseline)):
        if missing := [c for c in (*keys, value) if c not in frame.columns]:
            raise ValueError(f"the {name}'s episodes lack the column(s) {missing}")
        if frame.duplicated(keys).any():
            raise ValueError(f"the {name}'s episodes repeat a game of one training seed")
    paired = variant[[*keys, value]].merge(baseline[[*keys, value]], on=keys, suffixes=("", "_baseline"))
    difference = paired[value].astype(float) - paired[f"{value}_baseline"].astype(float)
    return {
        int(seed): difference[rows].to_numpy()
        for seed, rows in paired.groupby("training_seed").groups.items()
    }


def bootstrap_interval(
    differences: dict[int, np.ndarray],
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(mean, low, high): the mean over training seeds of their mean game difference, and its
    percentile interval when training seeds are resampled with replacement and then, independently for
    every drawn seed, its games."""
    if not differences or any(len(d) == 0 for d in differences.values()):
        raise ValueError("every training seed needs at least one paired game")
    rng = np.random.default_rng(seed)
    per_seed = list(differences.values())
    count = len(per_seed)
    # game_means[s][b, j]: seed s's games resampled for draw j of replicate b.
    game_means = np.stack(
        [d[rng.integers(0, len(d), (resamples, count, len(d)))].mean(axis=-1) for d in per_seed]
    )
    drawn = rng.integers(0, count, (resamples, count))
    replicates = game_means[drawn, np.arange(resamples)[:, None], np.arange(count)].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(replicates, [tail, 100 - tail])
    mean = float(np.mean([d.mean() for d in per_seed]))
    return mean, float(low), float(high)


def sign_flip_p_value(seed_means: np.ndarray) -> float:
    """Exact two-sided p-value of the sign-flip permutation test of a zero mean difference."""
    seed_means = np.asarray(seed_means, dtype=float)
    if seed_means.size == 0:
        raise ValueError("no seed differences to test")
    if seed_means.size == 1:
        return 1.0  # both signs of one difference reach its |mean| (scipy wants two samples)
    result = stats.permutation_test(
        (seed_means,), np.mean, permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
    )
    return float(min(1.0, result.pvalue))


def sign_flip_floor(seeds: int) -> float:
    """The smallest two-sided p-value the exact sign-flip test over ``seeds`` training seeds can give:
    2 / 2**seeds (all seeds one sign), 1.0 for one seed."""
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    return 2 / 2**seeds


def minimum_detectable_difference(
    variance: float, seeds: int, games: int, *, confidence: float = 0.95, power: float = 0.8
) -> float:
    """The smallest true mean difference a paired study of ``seeds`` training seeds x ``games`` games
    detects with probability ``power`` (its two-sided ``confidence`` interval excludes 0):
    ``(z(1 - (1 - confidence) / 2) + z(power)) * sqrt(2 * variance / (seeds * games))``, ``variance``
    being one game's variance of the measure under either policy (``p * (1 - p)`` for success at rate p).

    It is the normal approximation of :func:`bootstrap_interval` where the games alone spread the
    differences: training seeds that disagree widen the interval, and games that both rows win or lose
    together narrow it, so it is the floor a study states before it runs, not a promise."""
    if seeds < 1 or games < 1 or variance < 0:
        raise ValueError(f"need seeds, games >= 1 and variance >= 0, got {seeds}, {games}, {variance}")
    z = stats.norm.ppf(1 - (1 - confidence) / 2) + stats.norm.ppf(power)
    return float(z * np.sqrt(2 * variance / (seeds * games)))


def compare(
    episodes: pd.DataFrame,
    variants: list[str],
    baselines: list[str],
    value: str = "won",
    scale: float = 100.0,
) -> pd.DataFrame:
    """Each variant against each baseline, per split: the paired mean difference (times ``scale``:
    percentage points for ``won``), its bootstrap interval, the sign-flip p-value and the smallest p the
    test could give with those seeds (:func:`sign_flip_floor`). ``episodes`` has a
    ``variant`` column besides those of :func:`seed_paired_differences`."""
    rows = []
    for split, part in episodes.groupby("split", sort=False):
        for baseline in baselines:
            for variant in variants:
                if variant == baseline:
                    continue
                differences = seed_paired_differences(
                    part[part["variant"] == variant], part[part["variant"] == baseline], value
                )
                if not differences:
                    continue
                mean, low, high = bootstrap_interval(differences)
                rows.append(
                    {
                        "split": split,
                        "variant": variant,
                        "baseline": baseline,
                        "seeds": len(differences),
                        "games_per_seed": int(np.median([len(d) for d in differences.values()])),
                        "difference": round(scale * mean, 1),
                        "interval_low": round(scale * low, 1),
                        "interval_high": round(scale * high, 1),
                        "sign_flip_p": round(sign_flip_p_value([d.mean() for d in differences.values()]), 4),
                        "sign_flip_floor": round(sign_flip_floor(len(differences)), 4),
                    }
                )
    return pd.DataFrame(rows)
