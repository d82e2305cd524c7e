"""Where an HGPO iteration spends its time, on KeyChest with the tiny model (CPU).

Why: the paper reports that HGPO's grouping adds well under a second to iterations of minutes
(hgpo_algorithm.md §6); here the advantage connector (estimator + token batch) must stay below 1% of
an iteration. The phases come from the algorithm's unsmoothed per-iteration timers
(``iteration_seconds``) and the learner connector's own timers, averaged over the measured
iterations after one warm-up iteration.

Run from the repository root: ``python -m benchmarks.iteration_profile [--iterations 3] [--groups 8]``
(``python benchmarks/iteration_profile.py`` would import ``benchmarks/envs.py`` as ``envs``).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import ray

import envs  # noqa: F401 - registers the environments
from hgpo_rllib import HGPOConfig


def build_config(args: argparse.Namespace) -> HGPOConfig:
    return (
        HGPOConfig()
        .environment("keychest", env_config={"max_steps": args.max_steps})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=args.group_size * args.groups_per_wave)
        .training(
            estimator=args.estimator,
            group_size=args.group_size,
            groups_per_iteration=args.groups,
            max_new_tokens=args.max_new_tokens,
            max_prompt_tokens=512,
            minibatch_size=64,
            micro_batch_size=32,
            lr=1e-5,
        )
        .debugging(seed=0)
    )


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


def print_table(means: dict[str, float]) -> None:
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
    print(f"{'phase':32s} {'seconds':>9s} {'share':>8s}")
    for name, seconds in rows:
        print(f"{name:32s} {seconds:9.4f} {100 * seconds / iteration:7.2f}%")
    print(f"step rows per iteration: {means['step rows']:.0f}")
    share = 100 * means["advantage connector"] / iteration
    print(f"advantage connector share: {share:.3f}% of the iteration ({'OK' if share < 1 else 'ABOVE'} 1%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--groups", type=int, default=8, help="groups per iteration")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--groups-per-wave", type=int, default=4, help="groups stepped in lock-step")
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--estimator", default="hgpo", choices=("hgpo", "gigpo", "grpo"))
    args = parser.parse_args()
    ray.init(num_cpus=4, include_dashboard=False)
    try:
        print_table(profile(args))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
