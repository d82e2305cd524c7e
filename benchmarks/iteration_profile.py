"""Where an HGPO iteration spends its time: sampling, advantage connector, update (CPU); and the
learner's shared-prompt path against the unshared one, in one run.

Why: the paper reports that HGPO's grouping adds well under a second to iterations of minutes
(docs/hgpo_algorithm.md §6); here the advantage connector (estimator + token batch) must stay below 1% of
an iteration. The learner update dominates: ``--paths both`` measures it with and without
``share_prompt_prefixes`` (each distinct prompt prefix computed once per micro-batch, docs/throughput.md)
on the same machine, one after the other, and reports how much the batches share. The phases come from
the algorithm's unsmoothed per-iteration timers (``iteration_seconds``) and the learner connector's own
timers, averaged over the measured iterations after one warm-up iteration. It profiles any experiment
file's config.

Run: ``python benchmarks/iteration_profile.py [--experiment tuned_examples/hgpo_alfworld.py]
[--iterations 3] [--paths old|new|both]`` (default: the KeyChest tuned example, the unshared path);
the table is kept in ``docs/results/iteration_profile_<experiment>.md``.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import ray

from hgpo_rllib import HGPOConfig
from hgpo_rllib.experiments.experiment_file import load_experiment_file

KEYCHEST = Path(__file__).resolve().parents[1] / "tuned_examples" / "hgpo_keychest.py"
#: The learner's two paths: rows as they are, or shared prompt prefixes computed once.
PATHS = {"old": False, "new": True}
#: Learner metrics reported as means over the measured iterations (prompt_sharing.sharing_stats).
SHARING = (
    "duplicate_prompt_row_frac",
    "long_shared_prefix_row_frac",
    "prompt_tokens_shareable_frac",
    "learner_tokens_computed_frac",
    "learner_padding_frac",
)


def build_config(args: argparse.Namespace, shared: bool) -> HGPOConfig:
    return (
        load_experiment_file(args.experiment)
        .config.copy(copy_frozen=False)
        .training(share_prompt_prefixes=shared)
    )


def profile(args: argparse.Namespace, shared: bool) -> dict[str, float]:
    """Mean seconds per phase (and sharing fractions) over ``args.iterations`` iterations (after one
    warm-up)."""
    algo = build_config(args, shared).build_algo()
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
            totals["old log-probs"] += learner.get("old_logp_s", 0.0)
            totals["reference log-probs"] += learner.get("reference_logp_s", 0.0)
            totals["weight sync"] += phases["weight_sync"]
            totals["step rows"] += learner["num_step_rows"]
            for name in SHARING:
                totals[name] += learner.get(name, float("nan"))
    finally:
        algo.stop()
    return {k: v / args.iterations for k, v in totals.items()}


def print_table(runs: dict[str, dict[str, float]]) -> str:
    """One column per path (and their ratio when both ran)."""
    names = list(runs)
    rows = [
        ("sampling (grouped rollouts)", "sampling"),
        ("learner update, total", "learner update"),
        ("  advantage connector", "advantage connector"),
        ("    of which the estimator", "estimator (part of it)"),
        ("  old log-probs (no grad)", "old log-probs"),
        ("  reference log-probs (no grad)", "reference log-probs"),
        ("  forward/backward/optimiser", "rest"),
        ("weight sync", "weight sync"),
        ("iteration (wall)", "iteration"),
    ]
    for means in runs.values():
        means["rest"] = (
            means["learner update"]
            - means["advantage connector"]
            - means["old log-probs"]
            - means["reference log-probs"]
        )
    header = "| phase | " + " | ".join(f"{n} path: seconds | share" for n in names)
    ratio = len(names) == 2
    lines = [header + (" | new / old |" if ratio else " |")]
    lines.append("|---|" + "---:|---:|" * len(names) + ("---:|" if ratio else ""))
    for label, key in rows:
        cells = [f"{runs[n][key]:.4f} | {100 * runs[n][key] / runs[n]['iteration']:.3f}%" for n in names]
        last = f" {runs['new'][key] / runs['old'][key]:.3f} |" if ratio and runs["old"][key] else ""
        lines.append(f"| {label} | " + " | ".join(cells) + " |" + (last or (" - |" if ratio else "")))
    lines += ["", "| learner batch (mean per iteration) | " + " | ".join(f"{n} path" for n in names) + " |"]
    lines.append("|---|" + "---:|" * len(names))
    for name in ("step rows", *SHARING):
        lines.append(f"| {name} | " + " | ".join(f"{runs[n][name]:.3f}" for n in names) + " |")
    first = runs[names[0]]
    share = 100 * first["advantage connector"] / first["iteration"]
    lines += [
        "",
        f"Advantage connector share: {share:.3f}% of the iteration ({'OK' if share < 1 else 'ABOVE'} 1%).",
    ]
    table = "\n".join(lines)
    print(table)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default=str(KEYCHEST), help="experiment file defining `config`")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument(
        "--paths",
        choices=["old", "new", "both"],
        default="old",
        help="the learner's unshared rows (old), shared prompt prefixes (new), or both in turn",
    )
    args = parser.parse_args()
    names = list(PATHS) if args.paths == "both" else [args.paths]
    ray.init(num_cpus=4, include_dashboard=False)
    try:
        table = print_table({name: profile(args, PATHS[name]) for name in names})
    finally:
        ray.shutdown()
    from results_file import write_result  # benchmarks/ is on sys.path when run as a script

    experiment = Path(args.experiment).stem
    paths = "old and new paths" if args.paths == "both" else f"{args.paths} path"
    title = f"Iteration profile of {experiment} ({args.iterations} iterations after a warm-up, {paths})"
    suffix = "" if args.paths == "old" else f"_{args.paths}_paths"
    write_result(f"iteration_profile_{experiment}{suffix}", title, table)


if __name__ == "__main__":
    main()
