"""Dr. MAS on CPU: global vs agent-wise advantage normalisation on the WebShop team, GRPO and HGPO.

Why: Dr. MAS's claim (docs/drmas.md) is that one baseline for all agents gives some agent
systematically too large advantages and spikes the gradient norm, and that normalising each agent's
turns with its own group statistics removes the spikes and learns better. This benchmark trains
``tuned_examples/drmas_webshop.py`` (a verifier, a searcher and a buyer, one LLM per role, each
warm-started on its role's expert turns) with ``normalize_by="trajectory"`` (global) and ``"agent"``
(Dr. MAS), under GRPO and HGPO, for the same seeds and iterations, and records:

- per iteration: the team's training success and score, each module's gradient norm at every
  optimiser step (pre-clip, ``grad_norm_per_step``), and E[A^2] per agent on that iteration's
  batch under *both* normalisations (computed from the same sampled episodes by a callback, so the
  scales compare on identical data whichever rule trained the run);
- per run: the trained team's success and score on WebShop's test goals (``rllib evaluate``'s
  protocol, the same goals for every run), and each goal's score (``episodes.csv``), from which the
  summary pairs runs by training seed and goal: agent-wise against global under each estimator, HGPO
  against GRPO with one baseline (``hgpo_rllib.evaluation.comparison``: the mean difference, its
  bootstrap interval over seeds then goals, the exact sign-flip test over seeds).

A spike is an iteration whose largest pre-clip gradient norm (over the module's optimiser steps in
it) exceeds 3x the median of the module's per-iteration maxima in the run's earlier iterations
(from the third iteration on). Steps within one iteration see different groups' rows, some with
all-zero advantages, so their norms differ tenfold without any instability; comparing iterations
measures what the paper calls a spike. Writes ``curves.csv``, ``grad_norms.csv``, ``scales.csv``,
``evaluation.csv``, ``episodes.csv``, ``summary.md`` and ``curves.png`` to ``--output``; an existing
output is never overwritten, ``--resume`` keeps its complete runs and redoes the rest,
``--tables-only`` rebuilds the summary and plot of its finished runs. Missing warm starts are built
first (``rllib sft --env webshop_team --role R``; rerunning resumes them).

Run: ``python benchmarks/drmas_normalisation.py --warm-start ws_team --iterations 15 --output
results/drmas_normalisation [--resume]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import ray  # noqa: E402
from ray.rllib.callbacks.callbacks import RLlibCallback  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from envs import registry as envs  # noqa: E402
from hgpo_rllib.advantages.step_table import StepTable, estimate_advantages  # noqa: E402
from hgpo_rllib.evaluation.comparison import compare  # noqa: E402
from hgpo_rllib.evaluation.protocol import evaluate  # noqa: E402
from hgpo_rllib.experiments.experiment_file import load_experiment_file  # noqa: E402
from hgpo_rllib.experiments.teams import team_warm_start_config  # noqa: E402
from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.warm_start.trainer import train_warm_start  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "tuned_examples" / "drmas_webshop.py"
ENV, ENV_CONFIG = "webshop_team", {"max_steps": 6}
ESTIMATORS = ("grpo", "hgpo")
NORMALISATIONS = {"global": "trajectory", "agent-wise": "agent"}
SPIKE_FACTOR = 3.0
SCALE_KEY = "advantage_sq_mean_by_rule"
#: The result tables, one CSV each.
TABLES = ("curves", "grad_norms", "scales", "evaluation", "episodes")
#: The pairs the summary compares, (variant, baseline): Dr. MAS's question under each estimator, then
#: HGPO's own.
PAIRS = (
    ("grpo agent-wise", "grpo global"),
    ("hgpo agent-wise", "hgpo global"),
    ("hgpo global", "grpo global"),
)


class AdvantageScaleProbe(RLlibCallback):
    """On the env runner, after each sample: E[A^2] of each agent's turns under both normalisation
    rules, from the same episodes the learner will get (the run's other settings unchanged)."""

    def on_sample_end(self, *, env_runner: Any, metrics_logger: Any, samples: Any, **kwargs: Any) -> None:
        done = [episode for episode in samples if episode.is_done]
        if not done:
            return
        table = StepTable.from_episodes(done)
        agents = np.asarray(table.agent_ids)
        settings = env_runner.config.estimator_settings()
        for name, rule in NORMALISATIONS.items():
            rule_settings = dataclasses.replace(settings, normalize_by=rule)
            advantages = estimate_advantages(table, rule_settings).advantages
            for agent in dict.fromkeys(table.agent_ids):
                value = float((advantages[agents == agent] ** 2).mean())
                metrics_logger.log_value((SCALE_KEY, f"{agent}|{name}"), value, window=1)


def per_role(values: list[str], roles: tuple[str, ...], kind: type) -> dict[str, Any]:
    """``["3", "searcher=20"]`` -> every role 3 except the searcher's 20 (roles' turns differ in
    number and length, so each may want its own episodes and epochs)."""
    settings: dict[str, Any] = {}
    for value in values:
        role, _, number = value.rpartition("=")
        if role and role not in roles:
            raise SystemExit(f"unknown role {role!r} in {value!r}; the team's roles are {', '.join(roles)}")
        try:
            settings.update({r: kind(number) for r in ([role] if role else roles)})
        except ValueError:
            raise SystemExit(f"{value!r} is not a number or ROLE=number") from None
    if missing := [role for role in roles if role not in settings]:
        raise SystemExit(f"no value for role(s) {', '.join(missing)} in {values}")
    return settings


def ensure_warm_starts(
    warm_start: Path, episodes: list[str], epochs: list[str], train_on_prompt: list[str]
) -> None:
    """Each role's warm start (resumed or reused when already there); the roles in
    ``train_on_prompt`` also learn their prompts' tokens (``rllib sft --train-on-prompt``)."""
    roles = envs.env_class(ENV, ENV_CONFIG).ROLES
    role_episodes, role_epochs = per_role(episodes, roles, int), per_role(epochs, roles, float)
    for role in roles:
        train_warm_start(
            warm_start / role,
            env=ENV,
            episodes=role_episodes[role],
            epochs=role_epochs[role],
            train_on_prompt=role in train_on_prompt,
            env_config=ENV_CONFIG,
            role=role,
            reuse_finished=True,
        )


def running_median_spikes(iteration_maxima: list[float]) -> int:
    """Iterations whose largest gradient norm exceeds SPIKE_FACTOR x the median of the earlier
    iterations' largest norms (from the third iteration on)."""
    return sum(
        peak > SPIKE_FACTOR * np.median(iteration_maxima[:i])
        for i, peak in enumerate(iteration_maxima)
        if i >= 2
    )


def evaluation_scores(evaluation: Path) -> dict[str, float]:
    """A team's success and score on the test goals (percent, mean over evaluation seeds) from its
    ``rllib evaluate`` output."""
    per_seed = pd.read_csv(evaluation / "per_seed.csv")
    return {"test_success": per_seed["success"].mean(), "test_score": per_seed["score"].mean()}


def train_run(
    estimator: str,
    normalisation: str,
    seed: int,
    args: argparse.Namespace,
    progress: Callable[[dict[str, list[dict]]], None],
) -> dict[str, list[dict]]:
    """Train one run, save its checkpoint, evaluate it on test goals; every table's rows."""
    run_name = f"{estimator}_{normalisation}_{seed}"
    settings = {
        "warm_start": str(args.warm_start),
        "estimator": estimator,
        "normalize_by": NORMALISATIONS[normalisation],
        "llm_sharing": "separate",
    }
    config = load_experiment_file(EXAMPLE, settings).config
    config.debugging(seed=seed).callbacks([*_as_list(config.callbacks_class), AdvantageScaleProbe])
    run_id = {"estimator": estimator, "normalisation": normalisation, "seed": seed}
    tables: dict[str, list[dict]] = {name: [] for name in TABLES}
    algo = config.build_algo()
    start = time.perf_counter()
    try:
        for iteration in tqdm(range(1, args.iterations + 1), desc=f"{estimator} {normalisation} seed {seed}"):
            result = algo.train()
            runners = result["env_runners"]
            tables["curves"].append(
                {
                    **run_id,
                    "iteration": iteration,
                    "seconds": time.perf_counter() - start,
                    "success": runners["success_rate"],
                    "score": runners.get("score_mean", float("nan")),
                    "episode_return": runners["episode_return_mean"],
                    **{f"{phase}_s": s for phase, s in result.get("iteration_seconds", {}).items()},
                }
            )
            for module, learner in result["learners"].items():
                # The iteration's steps (RLlib hands a one-item series back as its item); absent
                # from RLlib's "__all_modules__" entry.
                norms = learner.get("grad_norm_per_step", [])
                for step, norm in enumerate(np.atleast_1d(norms)):
                    tables["grad_norms"].append(
                        {**run_id, "iteration": iteration, "module": module, "step": step, "grad_norm": norm}
                    )
            for key, value in runners.get(SCALE_KEY, {}).items():
                agent, rule = key.split("|")
                tables["scales"].append(
                    {
                        **run_id,
                        "iteration": iteration,
                        "agent": agent,
                        "rule": rule,
                        "advantage_sq_mean": value,
                    }
                )
            progress(tables)
        checkpoint = algo.save(str(args.output / "checkpoints" / run_name))
    finally:
        algo.stop()
    evaluation = args.output / "evaluation" / run_name
    evaluate(
        checkpoint.checkpoint.path, seeds=args.eval_seeds, episodes=args.eval_episodes, output=evaluation
    )
    tables["evaluation"].append({**run_id, **evaluation_scores(evaluation)})
    # "seed" names the run's training seed in every table; the evaluation's own seed is kept apart.
    episodes = pd.read_csv(evaluation / "episodes.csv").rename(columns={"seed": "eval_seed"})
    tables["episodes"] = episodes.assign(**run_id).to_dict("records")
    progress(tables)
    return tables


def evaluate_warm_start(args: argparse.Namespace) -> pd.DataFrame:
    """The warm-start team itself on the test goals, untrained (kept in ``warm_start_evaluation.csv``):
    the baseline the trained runs' scores are read against (``rllib evaluate`` of the team folder)."""
    path = args.output / "warm_start_evaluation.csv"
    if not path.exists():
        evaluation = args.output / "evaluation" / "warm_start"
        team = team_warm_start_config(args.warm_start)
        evaluate(
            args.warm_start,
            seeds=args.eval_seeds,
            episodes=args.eval_episodes,
            output=evaluation,
            team_config=team,
        )
        pd.DataFrame([evaluation_scores(evaluation)]).to_csv(path, index=False)
    return pd.read_csv(path)


def _as_list(callbacks: Any) -> list[Any]:
    return list(callbacks) if isinstance(callbacks, list | tuple) else [callbacks]


def summarize(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per (estimator, normalisation): medians over seeds of the run-level figures."""
    run_module = ["estimator", "normalisation", "seed", "module"]
    norms = tables["grad_norms"]
    per_run = norms.groupby(run_module, sort=False)["grad_norm"].agg(
        grad_norm_max="max", grad_norm_median="median"
    )
    iteration_maxima = norms.groupby([*run_module, "iteration"], sort=False)["grad_norm"].max()
    per_run["spikes"] = iteration_maxima.groupby(run_module, sort=False).agg(
        lambda s: running_median_spikes(list(s))
    )
    per_run = per_run.reset_index()
    per_run["max_over_median"] = per_run["grad_norm_max"] / per_run["grad_norm_median"]
    keys = ["estimator", "normalisation"]
    grad = per_run.groupby(keys, sort=False).agg(
        max_over_median=("max_over_median", "median"), spike_iterations_per_module_run=("spikes", "mean")
    )
    curves = tables["curves"]
    last = curves[curves["iteration"] > curves["iteration"].max() - 3]
    train = last.groupby(keys, sort=False).agg(train_success_last3=("success", "mean"))
    test = (
        tables["evaluation"]
        .groupby(keys, sort=False)
        .agg(test_success=("test_success", "mean"), test_score=("test_score", "mean"), runs=("seed", "count"))
    )
    scales = tables["scales"].pivot_table(index=keys, columns=["rule", "agent"], values="advantage_sq_mean")
    scales.columns = [f"E[A^2] {agent} ({rule})" for rule, agent in scales.columns]
    return pd.concat([test, train, grad, scales], axis=1).round(3).reset_index()


def paired_comparisons(episodes: pd.DataFrame) -> pd.DataFrame:
    """The :data:`PAIRS` on the test goals' scores (points of 100), paired by training seed and goal."""
    games = episodes.rename(columns={"seed": "training_seed", "eval_seed": "seed"}).assign(
        variant=episodes["estimator"] + " " + episodes["normalisation"]
    )
    return pd.concat(
        [compare(games, [variant], [baseline], value="score") for variant, baseline in PAIRS],
        ignore_index=True,
    )


def plot(tables: dict[str, pd.DataFrame], path: Path) -> None:
    """The team's training score per iteration (its reward: mean, min-max over seeds) and each
    module's gradient norms."""
    modules = list(dict.fromkeys(tables["grad_norms"]["module"]))
    fig, axes = plt.subplots(1, 1 + len(modules), figsize=(5 * (1 + len(modules)), 4))
    for (estimator, normalisation), group in tables["curves"].groupby(
        ["estimator", "normalisation"], sort=False
    ):
        stats = group.groupby("iteration")["score"].agg(["mean", "min", "max"])
        axes[0].plot(stats.index, stats["mean"], label=f"{estimator} {normalisation}")
        axes[0].fill_between(stats.index, stats["min"], stats["max"], alpha=0.15)
    axes[0].set(xlabel="training iteration", ylabel="team score (training goals)", ylim=(0, 1.02))
    axes[0].legend()
    norms = tables["grad_norms"].copy()
    norms["order"] = norms.groupby(["estimator", "normalisation", "seed", "module"]).cumcount()
    for axis, module in zip(axes[1:], modules, strict=True):
        mine = norms[norms["module"] == module]
        for (estimator, normalisation), group in mine.groupby(["estimator", "normalisation"], sort=False):
            stats = group.groupby("order")["grad_norm"].median()
            axis.plot(stats.index, stats.to_numpy(), label=f"{estimator} {normalisation}", lw=0.9)
        axis.set(xlabel="optimiser step", ylabel="pre-clip gradient norm (median over seeds)", yscale="log")
        axis.set_title(module)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def finished_runs(output: Path) -> dict[str, list[dict]]:
    """Every table's rows of the runs that finished (evaluated) in ``output``."""
    if not (output / "evaluation.csv").exists():
        return {name: [] for name in TABLES}
    finished = pd.read_csv(output / "evaluation.csv")[["estimator", "normalisation", "seed"]]
    return {name: pd.read_csv(output / f"{name}.csv").merge(finished).to_dict("records") for name in TABLES}


def write_tables(output: Path, done: dict[str, list[dict]]) -> str:
    """``curves.png`` and ``summary.md`` of the finished runs, the untrained warm start beside them."""
    frames = {name: pd.DataFrame(done[name]) for name in TABLES}
    plot(frames, output / "curves.png")
    baseline = pd.read_csv(output / "warm_start_evaluation.csv")
    summary = summarize(frames).to_markdown(index=False) + (
        f"\n\nWarm start, untrained, on the same test goals: success {baseline['test_success'].iloc[0]:.1f}, "
        f"score {baseline['test_score'].iloc[0]:.1f}.\n\n"
        "Test score differences (points), paired by training seed and goal; 95% bootstrap interval over "
        "seeds then goals; exact sign-flip p over the seeds:\n\n"
        + paired_comparisons(frames["episodes"]).to_markdown(index=False)
        + "\n"
    )
    (output / "summary.md").write_text(summary)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument(
        "--warm-start", type=Path, help="team warm starts, one folder per role (required to run)"
    )
    # 100 expert episodes, one epoch: 486 s for the three roles on 2 cores, too little for a team that
    # buys anything (docs/drmas.md, which gives the recipe used).
    parser.add_argument(
        "--warm-start-episodes", nargs="+", default=["100"], help="N for every role, ROLE=N for one"
    )
    parser.add_argument(
        "--warm-start-epochs", nargs="+", default=["1"], help="N for every role, ROLE=N for one"
    )
    parser.add_argument(
        "--warm-start-train-on-prompt",
        nargs="*",
        default=[],
        choices=envs.env_class(ENV, ENV_CONFIG).ROLES,
        help="roles whose warm start also learns its prompt (the buyer, which copies item ids from it)",
    )
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--estimators", nargs="+", default=list(ESTIMATORS), choices=ESTIMATORS)
    parser.add_argument("--eval-seeds", type=int, nargs="+", default=[123])
    parser.add_argument("--eval-episodes", type=int, default=32, help="test goals per evaluation seed")
    parser.add_argument("--output", type=Path, default=Path("results/drmas_normalisation"))
    parser.add_argument("--resume", action="store_true", help="continue an interrupted --output")
    parser.add_argument(
        "--tables-only",
        action="store_true",
        help="rebuild summary.md and curves.png of --output's finished runs",
    )
    args = parser.parse_args()
    args.output = args.output.resolve()
    if args.tables_only:
        print(write_tables(args.output, finished_runs(args.output)))
        return
    if args.warm_start is None:
        parser.error("--warm-start is required (unless --tables-only)")
    args.warm_start = args.warm_start.resolve()
    if args.resume:
        done = finished_runs(args.output)
    elif args.output.exists() and any(args.output.iterdir()):
        raise SystemExit(f"{args.output} already holds results; choose another --output or pass --resume")
    else:
        done = {name: [] for name in TABLES}
    args.output.mkdir(parents=True, exist_ok=True)
    ensure_warm_starts(
        args.warm_start, args.warm_start_episodes, args.warm_start_epochs, args.warm_start_train_on_prompt
    )
    complete = {(r["estimator"], r["normalisation"], r["seed"]) for r in done["evaluation"]}

    def save(current: dict[str, list[dict]]) -> None:
        for name in TABLES:
            pd.DataFrame(done[name] + current[name]).to_csv(args.output / f"{name}.csv", index=False)

    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        evaluate_warm_start(args)
        for seed in args.seeds:  # seeds outermost: an interrupted study has every variant's first seeds
            for estimator, normalisation in itertools.product(args.estimators, NORMALISATIONS):
                if (estimator, normalisation, seed) in complete:
                    continue
                tables = train_run(estimator, normalisation, seed, args, save)
                for name in TABLES:
                    done[name] += tables[name]
    except KeyboardInterrupt:
        raise SystemExit(
            f"interrupted; finished runs are kept: rerun with --resume --output {args.output}"
        ) from None
    print(write_tables(args.output, done))


if __name__ == "__main__":
    main()
