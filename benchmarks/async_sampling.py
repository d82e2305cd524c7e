"""Overlapped sampling against the synchronous loop, in one run: iterations per hour and the overlap bound.

Why: with ``async_sampling=True`` the env runners sample the next iteration's groups while the
learner trains (docs/throughput.md), so an iteration takes about max(S, L) instead of S + L, where S
is the synchronous run's sampling seconds and L its learner seconds (update and weight sync). To
measure the overlap rather than two jobs fighting for the same cores, the learner (in the driver:
the CPU configs have no learner actor) is pinned to one core and the env runner, with its env
processes, to another (``os.sched_setaffinity``, what ``taskset`` does), each with one torch
thread. Both modes run the same experiment file, one after the other, one warm-up iteration each,
then ``--iterations`` measured ones (medians). Target (issue 29): the async run reaches at least 80%
of the bound (S + L) / max(S, L). Iterations differ in step rows (episode lengths), so the table
also gives seconds per 100 step rows and the speed-up on that basis.

Run: ``python benchmarks/async_sampling.py [--experiment tuned_examples/hgpo_alfworld.py]
[--iterations 2] [--cores 0 1]``; the table is kept in ``docs/results/async_sampling_<experiment>.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import psutil
import ray
import torch
from results_file import write_result

from hgpo_rllib.experiments.experiment_file import load_experiment_file
from hgpo_rllib.help_text import doc_summary

ALFWORLD = Path(__file__).resolve().parents[1] / "tuned_examples" / "hgpo_alfworld.py"
MODES = {"synchronous": False, "async_sampling": True}


def pin(pid: int, core: int) -> None:
    """Pin a process and its children (env worker processes) to one core."""
    process = psutil.Process(pid)
    for each in (process, *process.children(recursive=True)):
        each.cpu_affinity([core])


def pin_runner(env_runner: object, core: int) -> int:
    """Runs on the env runner: one torch thread, the runner and its env processes on ``core``."""
    torch.set_num_threads(1)
    pin(os.getpid(), core)
    return os.getpid()


def measure(experiment: Path, async_sampling: bool, iterations: int, cores: tuple[int, int]) -> dict:
    """Median seconds per iteration and per phase over ``iterations`` after one warm-up."""
    config = load_experiment_file(experiment).config.copy(copy_frozen=False)
    algo = config.training(async_sampling=async_sampling).build_algo()
    learner_core, runner_core = cores
    torch.set_num_threads(1)
    pin(os.getpid(), learner_core)
    algo.env_runner_group.foreach_env_runner(
        lambda runner: pin_runner(runner, runner_core), local_env_runner=False
    )
    rows = []
    try:
        algo.train()  # warm-up (and, async, the first batch sampled ahead)
        for i in range(iterations):
            start = time.perf_counter()
            result = algo.train()
            phases, learner = result["iteration_seconds"], result["learners"]["default_policy"]
            seconds = time.perf_counter() - start
            rows.append(
                {
                    "iteration": seconds,
                    "sampling": phases["sampling"],
                    "learner": phases["learner_update"] + phases["weight_sync"],
                    "step_rows": learner["num_step_rows"],
                    "per_100_rows": 100 * seconds / learner["num_step_rows"],
                    "staleness": learner["policy_staleness"],
                }
            )
            print(f"  {'async' if async_sampling else 'sync'} iteration {i + 1}/{iterations}: {rows[-1]}")
    finally:
        algo.stop()
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def table(runs: dict[str, dict]) -> str:
    sync, overlapped = runs["synchronous"], runs["async_sampling"]
    sampling, learner = sync["sampling"], sync["learner"]
    bound = (sampling + learner) / max(sampling, learner)
    speedup = sync["iteration"] / overlapped["iteration"]
    per_row_speedup = sync["per_100_rows"] / overlapped["per_100_rows"]
    lines = [
        "| mode | s / iteration | sampling wait s | learner s (update + sync) | step rows | s / 100 rows "
        "| iterations / h | staleness |",
        "|--|--|--|--|--|--|--|--|",
    ]
    for name, run in runs.items():
        lines.append(
            f"| {name} | {run['iteration']:.1f} | {run['sampling']:.1f} | {run['learner']:.1f} | "
            f"{run['step_rows']:.0f} | {run['per_100_rows']:.1f} | {3600 / run['iteration']:.1f} | "
            f"{run['staleness']:.0f} |"
        )
    lines += [
        "",
        f"Overlap bound (S + L) / max(S, L) from the synchronous run: ({sampling:.1f} + {learner:.1f}) / "
        f"{max(sampling, learner):.1f} = **{bound:.2f}x**; measured iterations per hour async / sync = "
        f"**{speedup:.2f}x**, i.e. **{speedup / bound:.0%} of the bound** (target: at least 80%); "
        f"of the possible gain (bound - 1) it realises {(speedup - 1) / (bound - 1):.0%}. Iterations "
        f"differ in size (episode lengths), so per step row: {per_row_speedup:.2f}x, "
        f"{per_row_speedup / bound:.0%} of the bound.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--experiment", type=Path, default=ALFWORLD)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--cores", type=int, nargs=2, default=(0, 1), metavar=("LEARNER", "RUNNER"))
    args = parser.parse_args()
    ray.init(include_dashboard=False)
    runs = {}
    for name, async_sampling in MODES.items():
        print(f"{name}: 1 warm-up + {args.iterations} iterations")
        runs[name] = measure(args.experiment, async_sampling, args.iterations, tuple(args.cores))
    text = table(runs)
    print(text)
    write_result(
        f"async_sampling_{args.experiment.stem}",
        f"Overlapped sampling: {args.experiment.name}, learner and runner on one core each",
        text,
    )


if __name__ == "__main__":
    main()
