"""CPU learning benchmark: GRPO vs GiGPO vs HGPO vs HiPER on KeyChest with the same tiny model and budget.

Run: ``python benchmarks/learning_keychest.py [--iterations N] [--seeds 0 1 2] [--variants V ...]``.
Every run is a tuned example's config with one setting and one seed: ``tuned_examples/hgpo_keychest.py``
with an estimator (HGPO K=2 alpha=1, HGPO K=2 alpha=0, HGPO K=2 with adaptive weights, GiGPO, GRPO;
HGPO K=2 alpha=1 with overlapped sampling), or ``tuned_examples/hiper_keychest.py`` (HiPER, K=2: the
same episodes, model size and step budget; with its critic as a separate model, as heads on the policy's
trunk, with the critic-free high level of docs/hiper.md, or without its KEEP penalties), or GRPO
answering in HiPER's plan-execute blocks (the format without HAE). Writes
``curves.csv`` (success per iteration, rewritten after every iteration), ``curves.png`` (mean with min-max
band over seeds) and ``summary.md`` (iterations and wall time to 80% / 90% success, final success).
An existing output directory is never overwritten; ``--resume`` continues one instead, keeping its
complete (variant, seed) runs and redoing the rest.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import ray  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from envs.keychest.env import PLAN_EXECUTE_BLOCKS  # noqa: E402
from hgpo_rllib.experiments.experiment_file import load_experiment_file  # noqa: E402
from hgpo_rllib.help_text import doc_summary

TUNED = Path(__file__).resolve().parents[1] / "tuned_examples"
HGPO, HIPER = TUNED / "hgpo_keychest.py", TUNED / "hiper_keychest.py"


class Variant(NamedTuple):
    """A tuned example and the settings on top of it."""

    example: Path
    training: dict[str, Any]
    model_config: dict[str, Any] = {}
    env_config: dict[str, Any] = {}


VARIANTS = {
    "HGPO K=2 a=1": Variant(HGPO, {"estimator": "hgpo", "history_length": 2, "length_weight_alpha": 1.0}),
    "HGPO K=2 a=0": Variant(HGPO, {"estimator": "hgpo", "history_length": 2, "length_weight_alpha": 0.0}),
    "HGPO K=2 adaptive": Variant(HGPO, {"estimator": "hgpo", "history_length": 2, "weighting": "adaptive"}),
    "GiGPO": Variant(HGPO, {"estimator": "gigpo", "history_length": 2}),
    "GRPO": Variant(HGPO, {"estimator": "grpo", "history_length": 2}),
    "HiPER K=2": Variant(HIPER, {"history_length": 2}),
}
# Overlapped sampling (issue 29): the next batch sampled during the update, one version stale.
VARIANTS["HGPO K=2 a=1 async"] = Variant(HGPO, {**VARIANTS["HGPO K=2 a=1"].training, "async_sampling": True})
# HiPER's critic as three heads on the policy's trunk (ours), and the critic-free high level (ours:
# HGPO's group baselines over segment starts, so the 128 episodes come as 16 groups of 8 like HGPO's).
VARIANTS["HiPER K=2 policy critic"] = Variant(HIPER, {"history_length": 2}, {"critic": "policy"})
VARIANTS["HiPER K=2 critic-free high"] = Variant(
    HIPER, {"history_length": 2, "high_level_baseline": "groups", "group_size": 8, "groups_per_iteration": 16}
)
# HiPER without its KEEP shaping (both KEEP penalties 0; the invalid-answer penalty as HGPO's): tells
# the shaping's effect on KeyChest (whose trap room ends an episode cheaply) from a defect.
VARIANTS["HiPER K=2 no KEEP penalties"] = Variant(
    HIPER, {"history_length": 2, "keep_penalty": 0.0, "keep_consistency_penalty": 0.0}
)
# GRPO answering in HiPER's plan-execute blocks (same vocabulary, answer length and validity rule as
# "HiPER K=2"): tells what the three-block format costs a random-init model from what HAE costs, since
# only the making of token advantages differs (GRPO: 16 groups of 8, no critic, no KEEP penalties,
# every response token gets its episode's advantage).
VARIANTS["GRPO plan-execute"] = Variant(
    HGPO,
    {"estimator": "grpo", "history_length": 2, "max_new_tokens": 4},
    {"action_vocabulary": list(PLAN_EXECUTE_BLOCKS)},
    {"answer_format": "plan_execute"},
)
THRESHOLDS = (0.8, 0.9)
LEARNER_KEYS = ("grad_norm_max", "clip_frac", "kl", "value_low_loss", "value_high_loss")
# Success is judged on a moving mean of this many iterations, so one lucky batch does not count.
SMOOTHING = 3


def run(variant: str, seed: int, iterations: int, progress: Callable[[list[dict]], None]) -> list[dict]:
    """Train one (variant, seed) and return its per-iteration records; ``progress`` gets the
    records so far after every iteration."""
    example, training, model_config, env_config = VARIANTS[variant]
    config = load_experiment_file(example).config.copy(copy_frozen=False)
    config.training(**training).debugging(seed=seed)
    if model_config:
        config.rl_module(model_config={**config.user_model_config(), **model_config})
    if env_config:
        config.environment(env_config={**config.env_config, **env_config})
    algo = config.build_algo()
    records, start = [], time.perf_counter()
    try:
        for iteration in tqdm(range(1, iterations + 1), desc=f"{variant} seed {seed}", leave=False):
            result = algo.train()
            learner = result["learners"]["default_policy"]
            records.append(
                {
                    "variant": variant,
                    "seed": seed,
                    "iteration": iteration,
                    "seconds": time.perf_counter() - start,
                    "success": result["env_runners"]["success_rate"],
                    "episode_len": result["env_runners"]["episode_len_mean"],
                    "invalid": result["env_runners"].get("invalid_action_rate", float("nan")),
                    # What a collapse is made of (NaN where the algorithm has no such term).
                    **{key: learner.get(key, float("nan")) for key in LEARNER_KEYS},
                }
            )
            progress(records)
    finally:
        algo.stop()
    return records


def _saver(path: Path, done: list[dict]) -> Callable[[list[dict]], None]:
    """Writes the finished runs plus the current run's records so far."""
    return lambda current: pd.DataFrame(done + current).to_csv(path, index=False)


def summarize(curves: pd.DataFrame) -> pd.DataFrame:
    """Per variant: median (over seeds) iterations and seconds to each threshold, final success."""
    rows = []
    for (variant, seed), run_curve in curves.groupby(["variant", "seed"], sort=False):
        smooth = run_curve["success"].rolling(SMOOTHING, min_periods=1).mean()
        row = {"variant": variant, "seed": seed, "final": run_curve["success"].tail(SMOOTHING).mean()}
        for threshold in THRESHOLDS:
            hit = run_curve[smooth.to_numpy() >= threshold]
            row[f"iters_to_{threshold:.0%}"] = hit["iteration"].iloc[0] if len(hit) else float("nan")
            row[f"sec_to_{threshold:.0%}"] = hit["seconds"].iloc[0] if len(hit) else float("nan")
        rows.append(row)
    per_run = pd.DataFrame(rows)
    reached = per_run.drop(columns="seed").groupby("variant", sort=False)
    table = reached.median().round(2)
    runs = reached.size().astype(str)  # per variant: its finished runs
    for threshold in THRESHOLDS:
        table[f"runs_reaching_{threshold:.0%}"] = (
            reached[f"iters_to_{threshold:.0%}"].count().astype(str) + "/" + runs
        )
    return table.reset_index()


def plot(curves: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant, group in curves.groupby("variant", sort=False):
        stats = group.groupby("iteration")["success"].agg(["mean", "min", "max"])
        ax.plot(stats.index, stats["mean"], label=variant)
        ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.2)
    ax.set(xlabel="training iteration", ylabel="success rate", ylim=(0, 1.02))
    ax.set_title("KeyChest, tiny random-init model (mean and min-max over seeds)")
    ax.axhline(0.9, color="grey", lw=0.8, ls="--")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--output", default="results/learning_keychest")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted --output")
    args = parser.parse_args()
    out = Path(args.output)
    records = []
    if args.resume and (out / "curves.csv").exists():
        done = pd.read_csv(out / "curves.csv")
        complete = done.groupby(["variant", "seed"])["iteration"].transform("max") == args.iterations
        records = done[complete].to_dict("records")
    elif out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} already holds results; choose another --output or pass --resume")
    out.mkdir(parents=True, exist_ok=True)
    finished = {(r["variant"], r["seed"]) for r in records}
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    for variant in args.variants:
        for seed in args.seeds:
            if (variant, seed) in finished:
                continue
            # Partial results survive: the curves so far, the current run's included, after every
            # iteration (--resume redoes an incomplete run from its start).
            records += run(
                variant,
                seed,
                args.iterations,
                _saver(out / "curves.csv", list(records)),
            )
    curves = pd.DataFrame(records)
    plot(curves, out / "curves.png")
    table = summarize(curves)
    (out / "summary.md").write_text(table.to_markdown(index=False) + "\n")
    print(table.to_markdown(index=False))


if __name__ == "__main__":
    main()
