"""Where an HGPO iteration spends its time: sampling, advantage connector, the learner's passes (CPU);
and the learner's levers against each other, one variant after the other in one run.

Why: the paper reports that HGPO's grouping adds well under a second to iterations of minutes
(docs/hgpo_algorithm.md §6); here the advantage connector (estimator + token batch) must stay below 1% of
an iteration. The learner update dominates, and ``--variants`` measures its levers on the same machine,
one after the other (docs/throughput.md): the path before them (``baseline``: float32, no
prefill-once, no shared prefixes, no buckets, every row computed), the default in float32 (``float32``:
bf16's share where the CPU has it natively), rows as they come (``plain``), sorted by length inside each
minibatch (``buckets``, the default), shared prompt prefixes computed once (``shared``), the rows of zero
advantage computed too (``noskip``, against the default that leaves them out), and, with two epochs, the
old-log-prob pass on every update (``recompute``) against the sampler's log-probs where they matched
(``auto``). Per variant: the phases' seconds (the algorithm's unsmoothed ``iteration_seconds``
and the learner connector's timers), what the passes computed (FLOPs, tokens per real token, padding)
and whether the old log-probs were the sampler's, averaged over the measured iterations after warm-up
ones. It profiles any experiment file's config (``--model``, ``-k``: the file's settings; ``--config``:
settings merged into its config) and records the CPU and the load before and after.

Run: ``python benchmarks/iteration_profile.py [--experiment tuned_examples/hgpo_alfworld.py]
[--model smollm2-135m-instruct] [-k 2] [--iterations 3] [--variants plain buckets shared recompute
auto]`` (default: the KeyChest tuned example as configured); the table is kept in
``docs/results/iteration_profile_<experiment>[_<model>][_<variants>].md``.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import ray
from machine import cpu_line, uptime
from results_file import RESULTS_DIR, write_result  # benchmarks/ is on sys.path as a script

from hgpo_rllib import HGPOConfig
from hgpo_rllib.cli.args import count, json_dict
from hgpo_rllib.experiments.experiment_file import apply_config_overrides, load_experiment_file
from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.rl_module.config import LLMModuleConfig

KEYCHEST = Path(__file__).resolve().parents[1] / "tuned_examples" / "hgpo_keychest.py"
#: Settings of each variant, merged over the experiment's own as ``--config`` is ("default": none;
#: ``model_config`` key by key). ``baseline`` is the path before issue 63's levers: float32, each copy
#: of a group's prompt prefilled, rows as they come, no shared prefixes, the rows of zero advantage
#: computed; ``float32`` is the default with float32 instead of the CPU's dtype (bf16's share where
#: the CPU has it natively); ``vllm`` samples with vLLM's CPU build instead of HF ``generate``.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "baseline": {
        "share_prompt_prefixes": False,
        "length_buckets": False,
        "skip_zero_advantage_rows": False,
        "model_config": {"torch_dtype": "float32", "share_prompt_prefill": False},
    },
    "float32": {"model_config": {"torch_dtype": "float32"}},
    "vllm": {"model_config": {"inference_backend": "vllm"}},
    "plain": {"share_prompt_prefixes": False, "length_buckets": False},
    "buckets": {"share_prompt_prefixes": False, "length_buckets": True},
    "shared": {"share_prompt_prefixes": True},
    "noskip": {"skip_zero_advantage_rows": False},
    "recompute": {"num_epochs": 2, "recompute_old_logp": True},
    "auto": {"num_epochs": 2, "recompute_old_logp": "auto"},
}
#: Learner metrics reported as means over the measured iterations that report them
#: (prompt_sharing.sharing_stats, the FLOP meter, the old-log-prob pass, the loss): an update whose rows
#: all carry advantage 0 computes no pass (``skip_zero_advantage_rows``), so it has no FLOP rate,
#: padding or log-prob gap, and the table says over how many iterations each mean is.
LEARNER = (
    "num_row_tokens",
    "learner_flops",
    "duplicate_prompt_row_frac",
    "prompt_tokens_shareable_frac",
    "learner_tokens_computed_frac",
    "learner_padding_frac",
    "learner_rows_skipped_frac",
    "learner_tokens_skipped_frac",
    "old_logp_from_sampler",
    "logp_gap_vs_sampler",
    "num_optimizer_steps",
)
#: All policies' learner rates against the machine's matmul rate (docs/throughput.md, "The machine's limit").
ALL_MODULES = ("learner_gflops_per_s", "matmul_gflops_per_s", "learner_peak_fraction")
#: (label, key) of the phase rows, in seconds.
PHASES = (
    ("sampling (grouped rollouts)", "sampling"),
    ("learner update, total", "learner update"),
    ("  advantage connector", "advantage connector"),
    ("    of which the estimator", "estimator (part of it)"),
    ("  old log-probs (no grad)", "old log-probs"),
    ("  reference log-probs (no grad)", "reference log-probs"),
    ("  forward/backward/optimiser", "rest"),
    ("weight sync", "weight sync"),
    ("iteration (wall)", "iteration"),
)


def build_config(args: argparse.Namespace, variant: str) -> HGPOConfig:
    """The experiment file's config with ``args``' settings and ``--config``, then the variant's."""
    settings = {"model": args.model, "history_length": args.history_length}
    given = {name: value for name, value in settings.items() if value is not None}
    config = load_experiment_file(args.experiment, given).config.copy(copy_frozen=False)
    apply_config_overrides(config, args.config or {})
    apply_config_overrides(config, VARIANTS[variant])
    return config


def reported_means(reported: dict[str, list[float]]) -> dict[str, float]:
    """Each metric's mean over the iterations that reported it (NaN: not reported), and under
    ``"<metric> iterations"`` their number."""
    means = {}
    for name, values in reported.items():
        present = [value for value in values if not math.isnan(value)]
        means[name] = sum(present) / len(present) if present else math.nan
        means[f"{name} iterations"] = len(present)
    return means


def profile(args: argparse.Namespace, config: HGPOConfig) -> dict[str, float]:
    """Mean seconds per phase and learner metrics of ``config`` over ``args.iterations`` iterations
    after ``args.warmup`` ones (first generate/forward calls, lazy imports; ``auto``'s first pass)."""
    algo = config.build_algo()
    totals: dict[str, float] = defaultdict(float)
    reported: dict[str, list[float]] = defaultdict(list)
    try:
        for _ in range(args.warmup):
            algo.train()
        for _ in range(args.iterations):
            result = algo.train()
            phases, learner = result["iteration_seconds"], result["learners"]["default_policy"]
            totals["iteration"] += result["time_this_iter_s"]
            totals["sampling"] += phases["sampling"]
            totals["learner update"] += phases["learner_update"]
            totals["advantage connector"] += learner["advantage_connector_s"]
            totals["estimator (part of it)"] += learner["advantage_estimator_s"]
            for name, key in (("old log-probs", "old_logp_s"), ("reference log-probs", "reference_logp_s")):
                seconds = learner.get(key, 0.0)
                totals[name] += 0.0 if math.isnan(seconds) else seconds  # NaN: the pass did not run
            totals["weight sync"] += phases["weight_sync"]
            totals["step rows"] += learner["num_step_rows"]
            for name in LEARNER:
                reported[name].append(learner.get(name, math.nan))
            for name in ALL_MODULES:
                reported[name].append(result["learners"]["__all_modules__"].get(name, math.nan))
    finally:
        algo.stop()
    means = {k: v / args.iterations for k, v in totals.items()}
    means.update(reported_means(reported), iterations=args.iterations)
    means["rest"] = means["learner update"] - sum(
        means[k] for k in ("advantage connector", "old log-probs", "reference log-probs")
    )
    return means


def metric_cell(run: dict[str, float], key: str) -> str:
    """A learner metric's mean, with the number of iterations it is over where not all reported it."""
    counted, iterations = run.get(f"{key} iterations"), run.get("iterations")
    partial = counted is not None and iterations is not None and counted < iterations
    return f"{run[key]:.6g}" + (f" ({counted:g} of {iterations:g} iterations)" if partial else "")


def print_table(runs: dict[str, dict[str, float]]) -> str:
    """One column per variant: seconds, share of the iteration and the ratio to the first variant."""
    names = list(runs)
    first = runs[names[0]]
    lines = ["| phase | " + " | ".join(f"{n}: s (share, x {names[0]})" for n in names) + " |"]
    lines.append("|---|" + "---:|" * len(names))
    for label, key in PHASES:
        cells = []
        for name in names:
            value = runs[name][key]
            ratio = f", {value / first[key]:.3f}x" if first[key] and name != names[0] else ""
            cells.append(f"{value:.4f} ({100 * value / runs[name]['iteration']:.2f}%{ratio})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "| learner batch (mean per iteration) | " + " | ".join(names) + " |"]
    lines.append("|---|" + "---:|" * len(names))
    for key in ("step rows", *LEARNER, *ALL_MODULES):
        lines.append(f"| {key} | " + " | ".join(metric_cell(runs[n], key) for n in names) + " |")
    share = 100 * first["advantage connector"] / first["iteration"]
    lines += [
        "",
        f"Advantage connector share: {share:.3f}% of the iteration ({'OK' if share < 1 else 'ABOVE'} 1%).",
    ]
    table = "\n".join(lines)
    print(table)
    return table


def result_name(args: argparse.Namespace) -> str:
    """``iteration_profile_<experiment>[_<model>][_<variants>]`` (the KeyChest default: no suffix)."""
    parts = [Path(args.experiment).stem]
    if args.model:
        parts.append(Path(args.model).name)
    if args.variants != ["default"]:
        parts += args.variants
    return "_".join(["iteration_profile", *parts])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--experiment", default=str(KEYCHEST), help="experiment file defining `config`")
    parser.add_argument("--model", help="the experiment file's --model (e.g. smollm2-135m-instruct)")
    parser.add_argument("-k", "--history-length", type=count(0), help="the experiment file's -k")
    parser.add_argument("--config", type=json_dict, help="settings merged into the file's config, as JSON")
    parser.add_argument("--iterations", type=count(1), default=3, help="measured iterations per variant")
    parser.add_argument("--warmup", type=count(0), default=1, help="iterations before the measured ones")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=["default"],
        help="learner variants, run one after the other: "
        + "; ".join(f"{k} {v}" for k, v in VARIANTS.items()),
    )
    parser.add_argument("--output", type=Path, help="folder of the result file (default docs/results)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    args = parse_args(argv)
    before = uptime()
    ray.init(num_cpus=4, include_dashboard=False)
    try:
        configs = {name: build_config(args, name) for name in args.variants}
        runs = {name: profile(args, config) for name, config in configs.items()}
    finally:
        ray.shutdown()
    table = print_table(runs)
    machine = f"CPU: {cpu_line()}\n\n`uptime` before: {before}\n\n`uptime` after: {uptime()}\n\n"
    title = (
        f"Iteration profile of {Path(args.experiment).stem}"
        f"{f' with {args.model}' if args.model else ''} ({args.iterations} iterations after "
        f"{args.warmup} warm-up, variants: {', '.join(args.variants)})"
    )
    variants = "\n".join(
        f"- `{name}`: {VARIANTS[name] or 'the experiment as configured'} (torch_dtype "
        f"{configs[name].user_model_config().get('torch_dtype', LLMModuleConfig.torch_dtype)})"
        for name in runs
    )
    write_result(result_name(args), title, f"{machine}{variants}\n\n{table}", args.output or RESULTS_DIR)
    return runs


if __name__ == "__main__":
    main()
