"""Where an HGPO iteration spends its time: sampling, advantage connector, update (CPU).

Why: the paper reports that HGPO's grouping adds well under a second to iterations of minutes
(docs/hgpo_algorithm.md §6); here the advantage connector (estimator + token batch) must stay below 1% of
an iteration. The phases come from the algorithm's unsmoothed per-iteration timers
(``iteration_seconds``) and the learner connector's own timers, averaged over the measured
iterations after one warm-up iteration. It profiles any experiment file's config.

Run: ``python benchmarks/iteration_profile.py [--experiment tuned_examples/hgpo_alfworld.py]
[--iterations 3]`` (default: the KeyChest tuned example); the table is kept in
``docs/results/iteration_profile_<experiment>.md``.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import ray

from hgpo_rllib import HGPOConfig
from hgpo_rllib.experiments.experiment_file import load_experiment_file

KEYCHEST = Path(__file__).resolve().parents[1] / "tuned_examples" / "hgpo_keychest.py"


def build_config(args: argparse.Namespace) -> HGPOConfig:
    return load_experiment_file(args.experiment).config


def profile(args: argparse.Namespace) -> dict[str, float]:
    """Mean seconds per phase over ``args.iterations`` iterations (after one warm-up)."""
    algo = build_config(args).build_algo()
    totals: dict[str, float] = defaultdict(float)
    try:
        algo.train()  # warm-up: first generate/forward calls, lazy imports
        for _ in range(args.iterations):
            result = algo.train()
            phases, learner = result["iteration_seconds"], result["learners"]["default_policy"]
            totals["iteration"] += result["time_this_iter_s"]
            totals["sampling"] += phases["sampling"]
            totals["learner update"] += phases["learner_update"]
            totals["advantage connector"] += learner["advantage_connector_s"]
            totals["estimator (part of it)"] += learner["advantage_estimator_s"]
            totals["reference log-probs"] += learner.get("reference_logp_s", 0.0)
            totals["weight sync"] += phases["weight_sync"]
            totals["step rows"] += learner["num_step_rows"]
    finally:
        algo.stop()
    return {k: v / args.iterations for k, v in totals.items()}


def print_table(means: dict[str, float]) -> str:
    iteration = means["iteration"]
    update = means["learner update"]
    rest = update - means["advantage connector"] - means["reference log-probs"]
    rows = [
        ("sampling (grouped rollouts)", means["sampling"]),
        ("learner update, total", update),
        ("  advantage connector", means["advantage connector"]),
        ("    of which the estimator", means["estimator (part of it)"]),
        ("  reference log-probs", means["reference log-probs"]),
        ("  forward/backward/optimiser", rest),
        ("weight sync", means["weight sync"]),
        ("iteration (wall)", iteration),
    ]
    lines = ["| phase | seconds | share |", "|---|---:|---:|"]
    lines += [f"| {name} | {seconds:.4f} | {100 * seconds / iteration:.3f}% |" for name, seconds in rows]
    share = 100 * means["advantage connector"] / iteration
    lines += [
        "",
        f"Step rows per iteration: {means['step rows']:.0f}. Advantage connector share: {share:.3f}% of "
        f"the iteration ({'OK' if share < 1 else 'ABOVE'} 1%).",
    ]
    table = "\n".join(lines)
    print(table)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default=str(KEYCHEST), help="experiment file defining `config`")
    parser.add_argument("--iterations", type=int, default=3)
    args = parser.parse_args()
    ray.init(num_cpus=4, include_dashboard=False)
    try:
        table = print_table(profile(args))
    finally:
        ray.shutdown()
    from results_file import write_result  # benchmarks/ is on sys.path when run as a script

    experiment = Path(args.experiment).stem
    title = f"Iteration profile of {experiment} ({args.iterations} iterations after a warm-up)"
    write_result(f"iteration_profile_{experiment}", title, table)


if __name__ == "__main__":
    main()
