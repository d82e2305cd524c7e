"""Checks of the estimator bias study (``benchmarks/estimator_bias.py``): its exact dynamic
programme, its error decomposition, and a smoke run on a tiny configuration."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
from helpers import benchmark_module

study = benchmark_module("estimator_bias")


def test_true_advantages_average_to_zero_under_the_policy() -> None:
    pomdp = study.random_pomdp(np.random.default_rng(3))
    solution = study.solve(pomdp)
    advantages = solution.q - solution.v[:-1, ..., None]
    np.testing.assert_allclose(np.einsum("tpka,pa->tpk", advantages, pomdp.policy), 0.0, atol=1e-12)


def test_dynamic_programme_matches_monte_carlo_returns() -> None:
    """V_0(start) is the expected discounted return of a rollout (within 4 standard errors),
    and the exact baseline leaves returns unbiased given the step (oracle mean error ~ 0)."""
    pomdp = study.random_pomdp(np.random.default_rng(5))
    solution = study.solve(pomdp)
    data = study.sample(pomdp, solution, n_groups=2500, group_size=8, seed=(5,))
    start = data.oracle[data.step == 0]  # R_0 - V_0(start): Monte-Carlo return minus the DP value
    assert abs(start.mean()) <= 4 * start.std() / math.sqrt(len(start))
    assert start.std() > 0
    noise = data.oracle - data.true_advantage  # R_t - Q(h_t, a_t)
    assert abs(noise.mean()) <= 4 * noise.std() / math.sqrt(len(noise))


def test_decomposition_adds_up_and_separates_bias_from_noise() -> None:
    rng = np.random.default_rng(0)
    key = np.repeat(np.arange(50), 40)
    offsets = rng.normal(size=50)
    err = offsets[key] + rng.normal(scale=0.5, size=key.size)
    bias2, var, mse = study.decomposition(err, key, power=1.0)
    assert math.isclose(bias2 + var, mse, rel_tol=1e-12)
    assert math.isclose(bias2, np.mean(offsets**2), rel_tol=0.1)
    assert math.isclose(var, 0.25, rel_tol=0.1)


def test_smoke_run_writes_results_and_never_overwrites(tmp_path: Path) -> None:
    args = ["--quick", "--group-sizes", "4", "8", "--max-k", "2", "--output", str(tmp_path / "out")]
    first = study.main(args)
    assert first == tmp_path / "out"
    csv_text = (first / "study.csv").read_text()
    rows = list(csv.DictReader(csv_text.splitlines()))
    assert len(rows) == 2 * 2 * len(study.estimators(2))  # POMDPs x group sizes x estimators
    for row in rows:
        assert all(math.isfinite(float(row[m])) for m in study.METRICS if m != "corr")
        if row["estimator"] == "oracle R-V(h)":
            assert float(row["base_mse"]) == 0.0
    assert (first / "study.png").stat().st_size > 10_000

    second = study.main(args)
    assert second == tmp_path / "out-2"
    assert (first / "study.csv").read_text() == csv_text
