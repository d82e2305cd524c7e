"""Checks of the Dr. MAS study's summary (``benchmarks/drmas_normalisation.py``): what it counts as
a gradient-norm spike, and which runs it pairs."""

from __future__ import annotations

import pandas as pd
from helpers import benchmark_module

study = benchmark_module("drmas_normalisation")

RUN = {"estimator": "grpo", "normalisation": "global", "seed": 0}


def tables(step_norms: list[list[float]]) -> dict[str, pd.DataFrame]:
    """One run of one module whose iteration i made the optimiser steps ``step_norms[i]``."""
    grad_norms = [
        {**RUN, "iteration": i + 1, "module": "buyer", "step": step, "grad_norm": norm}
        for i, norms in enumerate(step_norms)
        for step, norm in enumerate(norms)
    ]
    curves = [{**RUN, "iteration": i + 1, "success": 0.5} for i in range(len(step_norms))]
    return {
        "grad_norms": pd.DataFrame(grad_norms),
        "curves": pd.DataFrame(curves),
        "evaluation": pd.DataFrame([{**RUN, "test_success": 0.0, "test_score": 50.0}]),
        "scales": pd.DataFrame(
            [{**RUN, "iteration": 1, "agent": "buyer", "rule": "global", "advantage_sq_mean": 0.9}]
        ),
        "episodes": episodes({("grpo", "global"): [0.5, 0.5]}),
    }


def episodes(scores: dict[tuple[str, str], list[float]], seeds: tuple[int, ...] = (0,)) -> pd.DataFrame:
    """Test episodes of the runs ``(estimator, normalisation)``, each training seed scoring
    ``scores[run][goal]`` (plus the seed, so seeds differ) on the same goals."""
    return pd.DataFrame(
        [
            {
                "estimator": estimator,
                "normalisation": normalisation,
                "seed": seed,
                "split": "test",
                "eval_seed": 123,
                "task_seed": 1000 + goal,
                "score": score + seed / 100,
            }
            for (estimator, normalisation), goals in scores.items()
            for seed in seeds
            for goal, score in enumerate(goals)
        ]
    )


def test_runs_are_paired_by_training_seed_and_goal() -> None:
    """Agent-wise beats global by 0.1 on every goal of every seed under GRPO; HGPO's runs are
    absent, so only the GRPO pair is reported."""
    runs = episodes(
        {("grpo", "global"): [0.2, 0.4, 0.6], ("grpo", "agent-wise"): [0.3, 0.5, 0.7]}, seeds=(0, 1, 2)
    )
    table = study.paired_comparisons(runs)
    assert table[["variant", "baseline"]].values.tolist() == [["grpo agent-wise", "grpo global"]]
    row = table.iloc[0]
    assert (row["seeds"], row["games_per_seed"]) == (3, 3)
    assert row["difference"] == row["interval_low"] == row["interval_high"] == 10.0
    assert row["sign_flip_p"] == 0.25  # the smallest two-sided p three seeds allow


def test_variation_inside_iterations_is_not_a_spike() -> None:
    """Zero-advantage minibatches make a step's norm 10x smaller than its neighbours' every
    iteration; the iterations' peaks stay level, so nothing spikes."""
    summary = study.summarize(tables([[0.1, 1.0, 0.1, 1.2, 0.1]] * 6))
    assert summary["spike_iterations_per_module_run"].item() == 0
    assert summary["max_over_median"].item() == 12.0


def test_an_iteration_peak_above_three_times_the_earlier_median_is_a_spike() -> None:
    norms = [[1.0, 0.5], [1.1, 0.5], [0.9, 0.5], [4.0, 0.5], [1.0, 0.5], [3.5, 0.5]]
    # Iteration 4 peaks at 4.0 > 3 x median(1.0, 1.1, 0.9) = 3.0; iteration 6 at
    # 3.5 > 3 x median(1.0, 1.1, 0.9, 4.0, 1.0) = 3.0; the others stay below.
    assert study.running_median_spikes([1.0, 1.1, 0.9, 4.0, 1.0, 3.5]) == 2
    assert study.summarize(tables(norms))["spike_iterations_per_module_run"].item() == 2
    assert study.running_median_spikes([1.0, 4.0, 1.0]) == 0  # the first two iterations set the scale


def test_tables_only_rebuilds_the_summary_of_finished_runs(tmp_path) -> None:  # noqa: ANN001
    """A run still training or evaluating (in curves.csv, not in evaluation.csv) stays out of the
    summary and of its comparisons."""
    frames = tables([[1.0, 0.5]] * 3)
    frames["curves"]["score"] = 0.25
    unfinished = frames["curves"].assign(seed=1)
    frames["curves"] = pd.concat([frames["curves"], unfinished])
    agent_wise = frames["evaluation"].assign(normalisation="agent-wise")
    frames["evaluation"] = pd.concat([frames["evaluation"], agent_wise])
    frames["episodes"] = episodes(
        {("grpo", "global"): [0.5, 0.5], ("grpo", "agent-wise"): [0.75, 0.5]}, seeds=(0, 1)
    )
    for name, frame in frames.items():
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
    pd.DataFrame([{"test_success": 0.0, "test_score": 50.4}]).to_csv(
        tmp_path / "warm_start_evaluation.csv", index=False
    )
    done = study.finished_runs(tmp_path)
    assert {row["seed"] for row in done["curves"]} == {0}
    summary = study.write_tables(tmp_path, done)
    assert "score 50.4" in summary and (tmp_path / "curves.png").exists()
    assert "grpo agent-wise | grpo global" in " ".join(summary.split("sign-flip")[1].split())
    compared = study.paired_comparisons(pd.DataFrame(done["episodes"]))
    assert compared[["seeds", "difference"]].values.tolist() == [[1, 12.5]]
