"""The paper's Table 1 in miniature (issue 30): GRPO, GiGPO, HGPO and HiPER on ALFWorld and WebShop, on CPU.

Run: ``python benchmarks/table1.py --env alfworld|webshop [--seeds 0 1 2 3 4] [--variants V ...]``.
Every variant is a tuned example's CPU run from a warm start (``tuned_examples/hgpo_<env>.py`` with
its estimator settings, ``tuned_examples/hiper_alfworld.py`` for HiPER): free text, 2 groups of 4,
lr 1e-5, KL 0.05 to the warm start, for the same number of training iterations (``--iterations``: a
wall-clock budget would buy fewer beside other work), once per training seed. ALFWorld's warm
starts come from the main job's recipe (``hgpo_rllib.warm_start.cache``) at each variant's K and
answer format; all three ship with the package (K = 2, K = 4 and HiPER's plan-execute format,
``hgpo_rllib/warm_start/shipped/``, used while the recipe matches), so ALFWorld's rows build
nothing. No WebShop warm start ships: WebShop's is ``WEBSHOP_WARM_START`` (K = 4), built once into
the cache when a run first needs it (hours on 2 cores), or an ``rllib sft --env webshop`` directory
(``--warm-start``; its K is every WebShop variant's). Each final checkpoint, and each warm start, is
then evaluated by ``rllib evaluate``'s protocol: by default once (evaluation seed 123) on every game
of both ALFWorld evaluation splits (140 in, 134 out of distribution), or WebShop's 500 test goals.

Resumable across sittings: each run writes its own small result files under ``<output>/runs/<run>/``
(``curve.csv``, ``trained.json``, the evaluation's ``episodes.csv`` ...) and its checkpoint under
``--work-dir``; a rerun skips what is finished (training, then each evaluation seed). The tables
(``table.md``, ``per_run.csv``, ``comparisons.csv``: each variant against its own warm start and
against GRPO, GiGPO and HGPO K = 2, paired by training seed and game, and where the two started from
different warm starts their gains over them too, ``curves.csv``/``.png``) are
rebuilt from the files of all runs so far; ``--tables-only`` rebuilds them and runs nothing (also for
``docs/results/alfworld_table1``, the first, 3-seed ALFWorld table of ``benchmarks/alfworld_table1.py``,
which this script replaces).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import ray  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from envs.alfworld.facts import ALFWORLD_FACTS  # noqa: E402
from hgpo_rllib.columns import INVALID_ACTION_RATE, SUCCESS_RATE  # noqa: E402
from hgpo_rllib.evaluation import evaluate  # noqa: E402
from hgpo_rllib.evaluation.comparison import GAME_KEYS, compare  # noqa: E402
from hgpo_rllib.experiments.experiment_file import load_experiment_file  # noqa: E402
from hgpo_rllib.warm_start.cache import build_warm_start, warm_start_recipe  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "table1"
TUNED = ROOT / "tuned_examples"
#: Where ``scripts/ship_warm_start.py`` writes each shipped warm start's evaluation.
SHIPPING_EVALUATIONS = ROOT / "docs" / "results" / "*_shipped_warm_start_eval*"
WARM_START = "warm start"
#: ALFWorld's success per task category, reported beside success.
ALFWORLD_CATEGORIES = ALFWORLD_FACTS.evaluation.categories


class Variant(NamedTuple):
    """A tuned example's CPU run from a warm start: its settings (the example's typed switches),
    config overrides on top, and the prompt the warm start must have learned (K, answer format)."""

    example: str
    settings: dict[str, object]
    history_length: int = 2
    answer_format: str | None = None
    overrides: dict[str, object] = {}

    @property
    def warm_start_label(self) -> str:
        return f"K={self.history_length}" + (f" {self.answer_format}" if self.answer_format else "")


def _hgpo(example: str, estimator: str, k: int, alpha: float = 1.0, **overrides: object) -> Variant:
    settings = {"estimator": estimator, "history_length": k, "alpha": alpha}
    return Variant(example, settings, k, overrides=overrides)


VARIANTS = {
    "alfworld": {
        "GRPO": _hgpo("hgpo_alfworld.py", "grpo", 2),
        "GiGPO": _hgpo("hgpo_alfworld.py", "gigpo", 2),
        "HGPO K=2 a=1": _hgpo("hgpo_alfworld.py", "hgpo", 2),
        "HGPO K=4 a=1": _hgpo("hgpo_alfworld.py", "hgpo", 4),
        "HiPER": Variant("hiper_alfworld.py", {"history_length": 2}, 2, "plan_execute"),
        # The first table's other HGPO settings (docs/results.md), not in issue 30's rows.
        "HGPO K=2 a=0": _hgpo("hgpo_alfworld.py", "hgpo", 2, alpha=0.0),
        "HGPO K=2 adaptive": _hgpo("hgpo_alfworld.py", "hgpo", 2, weighting="adaptive"),
    },
    # The paper's WebShop settings scaled to CPU: the example's mean_norm advantages, K = 4.
    "webshop": {
        "GRPO": _hgpo("hgpo_webshop.py", "grpo", 4),
        "GiGPO": _hgpo("hgpo_webshop.py", "gigpo", 4),
        "HGPO K=4 a=1": _hgpo("hgpo_webshop.py", "hgpo", 4),
    },
}
DEFAULT_VARIANTS = {
    "alfworld": ["GRPO", "GiGPO", "HGPO K=2 a=1", "HGPO K=4 a=1", "HiPER"],
    "webshop": ["GRPO", "GiGPO", "HGPO K=4 a=1"],
}
#: Evaluation episodes per split and seed by default: ALFWorld's whole splits, WebShop's test goals.
EVAL_EPISODES = {"alfworld": None, "webshop": 500}
#: Evaluation step limits: the paper's ALFWorld 50; WebShop 15, the low end of the authors' 15-30
#: (docs/hgpo_algorithm.md Q10), as the CPU warm starts train at 15.
EVAL_MAX_STEPS = {"alfworld": 50, "webshop": 15}
TITLES = {"alfworld": "ALFWorld", "webshop": "WebShop"}
SPLIT_NAMES = {"eval_in_distribution": "in", "eval_out_of_distribution": "out"}
#: What the other rows are paired against (each against the baselines above it in table order): the
#: paper's ranked pairs, and HiPER and HGPO K = 4 against HGPO K = 2.
BASELINES = ("GRPO", "GiGPO", "HGPO K=2 a=1")


def weights_digest(model_dir: Path) -> str:
    """What the warm start's weights are: a rebuilt warm start (fresh machine) may differ from the one
    the committed runs started from, and the table must not mix the two."""
    return hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()[:16]


def without_weights(settings: dict[str, object]) -> dict[str, object]:
    """A run's settings but its warm start's weights digest, which is known only once the warm start
    is found (or built)."""
    return {k: v for k, v in settings.items() if k != "warm_start_weights"}


def run_name(variant: str, seed: int | None) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", variant.lower()).strip("-")
    return slug if seed is None else f"{slug}-seed{seed}"


def variant_config(variant: Variant, warm_start: Path):  # noqa: ANN201 (an RLlib AlgorithmConfig)
    """The variant's tuned example built with its settings and ``warm_start``, its overrides on top."""
    settings = {**variant.settings, "warm_start": str(warm_start)}
    config = load_experiment_file(TUNED / variant.example, settings).config
    return config.training(**variant.overrides) if variant.overrides else config


def warm_start_for(env: str, variant: Variant, given: Path | None) -> Path:
    """ALFWorld: the main job's recipe at the variant's K and answer format (shipped); WebShop:
    ``given`` (``--warm-start``), else ``WEBSHOP_WARM_START`` (cached, or built now: none ships)."""
    if env == "alfworld":
        return build_warm_start(warm_start_recipe("alfworld", variant.history_length, variant.answer_format))
    return given or build_warm_start(warm_start_recipe("webshop"))


def train(
    name: str, variant: Variant, seed: int, warm_start: Path, iterations: int, run_dir: Path, checkpoint: Path
) -> None:
    """Train one (variant, seed) for ``iterations``; write its curve and checkpoint."""
    config = variant_config(variant, warm_start)
    # Success per iteration: the window is one iteration's episodes, not the last 100.
    episodes_per_iteration = config.group_size * config.groups_per_iteration
    config.reporting(metrics_num_episodes_for_smoothing=episodes_per_iteration).debugging(seed=seed)
    algo = config.build_algo()
    records, start = [], time.perf_counter()
    try:
        for _ in tqdm(range(iterations), desc=run_name(name, seed), unit="it", leave=False):
            result = algo.train()
            runners = result["env_runners"]
            records.append(
                {
                    "variant": name,
                    "seed": seed,
                    "iteration": result["training_iteration"],
                    "minutes": (time.perf_counter() - start) / 60,
                    "success": runners[SUCCESS_RATE],
                    "episode_len": runners["episode_len_mean"],
                    "invalid_rate": runners[INVALID_ACTION_RATE],
                    # The machine's 1-minute load: the iterations' minutes depend on it.
                    "load_1min": os.getloadavg()[0],
                }
            )
            pd.DataFrame(records).to_csv(run_dir / "curve.csv", index=False)
        algo.save_to_path(str(checkpoint))
    finally:
        algo.stop()
    (run_dir / "trained.json").write_text(
        json.dumps(
            {
                "variant": name,
                "seed": seed,
                "iterations": len(records),
                "wall_minutes": (time.perf_counter() - start) / 60,
                "load_1min_median": float(pd.Series([r["load_1min"] for r in records]).median()),
                "warm_start": str(warm_start),
                "checkpoint": str(checkpoint),
            },
            indent=2,
        )
    )


def is_evaluated(run_dir: Path, eval_seeds: Sequence[int]) -> bool:
    """The run's checkpoint has played every evaluation seed asked for (``rllib evaluate`` writes
    ``per_seed.csv`` once all its splits and seeds are played)."""
    per_seed = run_dir / "eval" / "per_seed.csv"
    if not per_seed.exists():
        return False
    played = pd.read_csv(per_seed)
    return set(eval_seeds) <= set(played.loc[played["policy"] == "checkpoint", "seed"])


def trained_checkpoint(run_dir: Path) -> Path:
    """The checkpoint a finished training run saved; a clear stop when it is gone (another machine's
    run whose evaluation did not finish)."""
    checkpoint = Path(json.loads((run_dir / "trained.json").read_text())["checkpoint"])
    if not checkpoint.exists():
        raise SystemExit(
            f"{run_dir.name} was trained, but its checkpoint {checkpoint} is gone and its evaluation is "
            f"unfinished: delete {run_dir} to train it again"
        )
    return checkpoint


def per_run_table(runs_dir: Path) -> pd.DataFrame:
    """One row per (run, split): success (WebShop: and score), per-type and invalid-answer rates (all
    in %) averaged over the evaluation seeds, with the run's training iterations, their minutes and the
    median load they ran under."""
    rows = []
    for per_seed_file in sorted(runs_dir.glob("*/eval/per_seed.csv")):
        info = json.loads((per_seed_file.parents[1] / "run.json").read_text())
        trained_file = per_seed_file.parents[1] / "trained.json"
        if trained_file.exists():
            trained = json.loads(trained_file.read_text())
            info |= {
                k: trained[k] for k in ("iterations", "wall_minutes", "load_1min_median") if k in trained
            }
        per_seed = pd.read_csv(per_seed_file)
        per_seed = per_seed[per_seed["policy"] == "checkpoint"]
        for split, group in per_seed.groupby("split"):
            columns = [
                c for c in ("success", "score", "steps", "invalid_rate", *ALFWORLD_CATEGORIES) if c in group
            ]
            means = group[columns].mean()
            if "invalid_rate" in means:  # the protocol's one fraction among percentages
                means["invalid_rate"] *= 100
            rows.append(
                {
                    **info,
                    "split": SPLIT_NAMES.get(split, split),
                    "eval_seeds": len(group),
                    **means.round(2).to_dict(),
                }
            )
    return pd.DataFrame(rows)


def row_order(env: str, names: set[str]) -> list[str]:
    """Warm starts first, then the variants in their table order."""
    return sorted(n for n in names if n.startswith(WARM_START)) + [v for v in VARIANTS[env] if v in names]


def summary_table(per_run: pd.DataFrame, env: str) -> str:
    """Mean ± std over training seeds, per variant and split (markdown)."""
    tables = []
    for split, part in per_run.groupby("split", sort=False):
        columns = [
            c for c in ("success", "score", *ALFWORLD_CATEGORIES, "steps", "invalid_rate") if c in part
        ]
        grouped = part.groupby("variant")
        spread = " ± " + grouped[columns].std(ddof=0).round(1).astype(str)
        spread = spread.where(grouped.size() > 1, "", axis=0)  # one run has no spread to show
        table = grouped[columns].mean().round(1).astype(str) + spread
        table.insert(0, "runs", grouped.size())
        table = table.reindex(row_order(env, set(table.index)))
        tables.append(f"### `{split}` (rates in %)\n\n{table.to_markdown()}\n")
    return "\n".join(tables)


def headline_table(per_run: pd.DataFrame, env: str) -> str:
    """Success per variant and split (markdown): mean ± std over training seeds, then each seed's value
    in seed order, as docs/table1.md quotes it."""

    def cell(values: pd.Series) -> str:
        if len(values) == 1:
            return f"{values.iloc[0]:.1f}"
        each = ", ".join(f"{v:.1f}" for v in values)
        return f"{values.mean():.1f} ± {values.std(ddof=0):.1f} ({each})"

    ordered = per_run.sort_values("seed", na_position="first")
    table = ordered.pivot_table(index="variant", columns="split", values="success", aggfunc=cell, sort=False)
    table = table.rename(columns=lambda split: f"`{split}` success")
    table.insert(0, "training seeds", ordered.groupby("variant")["seed"].nunique())
    return table.reindex(row_order(env, set(table.index))).to_markdown()


def paired_table(runs_dir: Path, env: str) -> pd.DataFrame:
    """Every trained variant against its own warm start (the one whose weights it started from) and
    against each baseline above it, per split, paired by training seed and game
    (``hgpo_rllib.evaluation.comparison``): the difference in success (WebShop: and score) in points,
    its bootstrap interval over seeds then games, and the exact sign-flip p-value over the seeds.

    The gain over the own warm start is the reading that rows from different warm starts (K = 4,
    HiPER's format) share with the K = 2 rows; the warm start played each game once, so its luck on a
    game is the same in every training seed's pair. Where a row and its baseline started from
    different warm starts, their gains are compared too (measure ``<measure> gain``: per game, the
    row's gain over its start minus the baseline's over its own), which takes the two starts'
    difference out of the comparison."""
    frames, warm_starts = [], {}
    for episodes_file in sorted(runs_dir.glob("*/eval/episodes.csv")):
        info = json.loads((episodes_file.parents[1] / "run.json").read_text())
        played = pd.read_csv(episodes_file)
        played = played[played["policy"] == "checkpoint"].assign(
            variant=info["variant"], weights=info.get("warm_start_weights")
        )
        played["split"] = played["split"].map(SPLIT_NAMES).fillna(played["split"])
        if info["seed"] is None:
            warm_starts[info.get("warm_start_weights")] = played
        else:
            frames.append(played.assign(training_seed=info["seed"]))
    if not frames:
        return pd.DataFrame()
    episodes = pd.concat(frames, ignore_index=True)
    variants = row_order(env, set(episodes["variant"]))
    measures = {"success": "won", "score": "score"} if env == "webshop" else {"success": "won"}
    pairs = []
    for variant in variants:
        runs = episodes[episodes["variant"] == variant]
        for weights, start in warm_starts.items():
            started_here = runs[runs["weights"] == weights]
            if weights is None or started_here.empty:
                continue
            seeds = started_here["training_seed"].unique()
            own = pd.concat([start.assign(training_seed=seed) for seed in seeds], ignore_index=True)
            pairs.append(
                (pd.concat([started_here, own], ignore_index=True), [variant], start["variant"].iloc[0])
            )
    pairs += [
        (episodes, variants[variants.index(baseline) + 1 :], baseline)
        for baseline in BASELINES
        if baseline in variants
    ]
    tables = [
        compare(frame, compared, [baseline], value).assign(measure=name)
        for name, value in measures.items()
        for frame, compared, baseline in pairs
    ]
    # Gains over the own start (each measure's, once), for rows whose start is not their baseline's.
    starts = [start for weights, start in warm_starts.items() if weights is not None]
    if starts:
        game = ["weights", *GAME_KEYS]
        with_start = episodes.merge(
            pd.concat(starts)[[*game, *measures.values()]], on=game, suffixes=("", "_start")
        )
        gains = {
            name: with_start.assign(gain=with_start[value].astype(float) - with_start[f"{value}_start"])
            for name, value in measures.items()
        }
        started_from = episodes.groupby("variant")["weights"].agg(frozenset)
        for baseline in (b for b in BASELINES if b in variants):
            others = [
                v
                for v in variants[variants.index(baseline) + 1 :]
                if started_from[v] != started_from[baseline]
            ]
            if others:
                tables += [
                    compare(frame, others, [baseline], "gain").assign(measure=f"{name} gain")
                    for name, frame in gains.items()
                ]
    return pd.concat(tables, ignore_index=True)


def plot_curves(curves: pd.DataFrame, path: Path, env: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant, group in curves.groupby("variant", sort=False):
        stats = group.groupby("iteration")["success"].mean()
        ax.plot(stats.index, stats.to_numpy(), marker="o", label=variant)
    ax.set(xlabel="training iteration", ylabel="training success (per iteration)", ylim=(0, 1.02))
    ax.set_title(f"{TITLES[env]} from the warm starts: mean over training seeds")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write_tables(out: Path) -> str:
    """``per_run.csv``, ``curves.csv``/``.png``, ``comparisons.csv`` and ``table.md`` from the run
    files under ``out/runs`` (the committed ones included); the table's markdown."""
    runs = out / "runs"
    settings = pd.DataFrame([json.loads(f.read_text()) for f in sorted(runs.glob("*/run.json"))])
    if settings.empty:
        raise SystemExit(f"{runs} holds no runs")
    env = settings["env"].iloc[0] if "env" in settings else "alfworld"  # the first table had one env
    per_run = per_run_table(runs)
    per_run.to_csv(out / "per_run.csv", index=False)
    curve_files = sorted(runs.glob("*/curve.csv"))
    if curve_files:
        curves = pd.concat([pd.read_csv(f) for f in curve_files], ignore_index=True)
        curves.to_csv(out / "curves.csv", index=False)
        plot_curves(curves, out / "curves.png", env)
    paired = paired_table(runs, env)
    paired.to_csv(out / "comparisons.csv", index=False)

    def label(value: object) -> str:
        # Only eval_episodes has missing values: None (JSON null) for a whole split.
        if pd.isna(value):
            return "all"
        return f"{value:g}" if isinstance(value, float) else str(value)

    def values(column: str) -> str:
        return " / ".join(dict.fromkeys(label(v) for v in settings[column]))

    eval_seeds = sorted(
        {int(seed) for f in runs.glob("*/eval/per_seed.csv") for seed in pd.read_csv(f)["seed"]}
    )
    table = (
        "### Success in % (mean ± std over training seeds, then each seed's value)\n\n"
        f"{headline_table(per_run, env)}\n\n{summary_table(per_run, env)}"
    )
    if not paired.empty:
        table += (
            "\n### Paired differences (points; 95% bootstrap interval over training seeds, then games; "
            "exact sign-flip p over the seeds; a measure `... gain`: the row's gain over its own warm "
            "start minus the baseline's over its own)\n\n" + paired.to_markdown(index=False) + "\n"
        )
    episodes = values("eval_episodes")
    load = ""
    if "minutes" in settings:  # the first table's wall-clock budget (no load was recorded)
        budgets = " / ".join(f"{m:g}" for m in settings["minutes"].dropna().unique())
        load = f" {budgets} training minutes per run."
    if "load_1min_median" in per_run:
        runs_trained = per_run.dropna(subset=["load_1min_median"]).drop_duplicates(["variant", "seed"])

        def span(column: str, spec: str) -> str:
            low, high = (format(runs_trained[column].agg(end), spec) for end in ("min", "max"))
            return low if low == high else f"{low}-{high}"

        minutes = (
            f" ({span('wall_minutes', '.0f')} minutes)"
            if "wall_minutes" in runs_trained and runs_trained["wall_minutes"].notna().all()
            else ""
        )
        load = (
            f" Training iterations per run {span('iterations', 'g')}{minutes}, under a machine load "
            f"(1-minute average, median per run) of {span('load_1min_median', '.1f')}."
        )
    (out / "table.md").write_text(
        f"# {TITLES[env]} Table 1 in miniature\n\nWarm start weights `{values('warm_start_weights')}`; "
        f"{episodes} games per split "
        f"and evaluation seed {eval_seeds}.{load}\n\n{table}"
    )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="alfworld", choices=list(VARIANTS))
    parser.add_argument(
        "--warm-start",
        type=Path,
        help="WebShop: an `rllib sft --env webshop` directory (default: WEBSHOP_WARM_START, built once "
        "into the cache: none ships)",
    )
    parser.add_argument(
        "--iterations", type=int, default=6, help="training iterations per run (every run the same)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="training seeds")
    parser.add_argument("--variants", nargs="+", help="default: the env's Table 1 rows")
    parser.add_argument(
        "--eval-episodes", type=int, help="per split and seed (default: ALFWorld's splits, 500 goals)"
    )
    parser.add_argument("--eval-seeds", type=int, nargs="+", default=[123])
    parser.add_argument("--eval-max-steps", type=int, help="step limit (default: ALFWorld 50, WebShop 15)")
    parser.add_argument(
        "--output", type=Path, help="result files (small; committed); default docs/results/table1/<env>"
    )
    parser.add_argument("--work-dir", type=Path, help="checkpoints (large); default results/table1/<env>")
    parser.add_argument(
        "--tables-only", action="store_true", help="rebuild the tables from --output's run files; run nothing"
    )
    args = parser.parse_args()
    env = args.env
    out = args.output or RESULTS / env
    if args.tables_only:
        print(write_tables(out))
        return
    variants = args.variants or DEFAULT_VARIANTS[env]
    if unknown := [v for v in variants if v not in VARIANTS[env]]:
        parser.error(f"no variant(s) {unknown} on {env}; choose from {list(VARIANTS[env])}")
    if args.iterations < 1 or (args.eval_episodes is not None and args.eval_episodes < 1):
        parser.error("--iterations and --eval-episodes must be positive")
    if args.warm_start is not None and env != "webshop":
        parser.error("--warm-start is WebShop's; ALFWorld's warm starts come from the main job's recipe")
    work = (args.work_dir or Path("results") / "table1" / env).resolve()
    eval_episodes = args.eval_episodes or EVAL_EPISODES[env]
    max_steps = args.eval_max_steps or EVAL_MAX_STEPS[env]
    # Warm starts, one row each; then seed-major runs, so that a sitting that ends early leaves every
    # variant with as many seeds. A warm start is found (or built) only when a run still needs it: a
    # fresh clone's committed, evaluated rows must not start a build of hours (WebShop's does not ship).
    variant_of_label: dict[str, Variant] = {}
    for name in variants:
        variant = VARIANTS[env][name]
        variant_of_label.setdefault(variant.warm_start_label, variant)
    warm_starts: dict[str, tuple[Path, str]] = {}  # label: the warm start and its weights digest
    runs = [(f"{WARM_START} ({label})", None, label) for label in variant_of_label]
    runs += [(name, seed, VARIANTS[env][name].warm_start_label) for seed in args.seeds for name in variants]
    # A shipped warm start's own check (scripts/ship_warm_start.py) played the same games of its
    # split with the same seed: the protocol copies those instead of playing them again.
    shipping_evaluations = sorted(SHIPPING_EVALUATIONS.parent.glob(SHIPPING_EVALUATIONS.name))
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        for name, seed, label in tqdm(runs, desc="runs", unit="run"):
            variant = None if seed is None else VARIANTS[env][name]
            run_dir, checkpoint = out / "runs" / run_name(name, seed), work / run_name(name, seed)
            run_dir.mkdir(parents=True, exist_ok=True)
            settings = {
                "env": env,
                "variant": name,
                "seed": seed,
                "iterations": None if seed is None else args.iterations,
                "eval_episodes": eval_episodes,
                "eval_max_steps": max_steps,
            }
            saved_file = run_dir / "run.json"
            saved = json.loads(saved_file.read_text()) if saved_file.exists() else None
            if saved is not None and without_weights(saved) != settings:
                raise SystemExit(
                    f"{run_dir} was run with other settings ({saved}); "
                    "choose another --output or the same settings"
                )
            if saved is not None and is_evaluated(run_dir, args.eval_seeds):
                continue  # its checkpoint, even its warm start, may be gone (a fresh clone's committed run)
            if label not in warm_starts:
                found = warm_start_for(env, variant_of_label[label], args.warm_start)
                warm_starts[label] = found, weights_digest(found)
            warm_start, settings["warm_start_weights"] = warm_starts[label]
            if saved is not None and saved != settings:
                raise SystemExit(
                    f"{run_dir} started from other warm start weights ({saved.get('warm_start_weights')}, "
                    f"now {settings['warm_start_weights']}); choose another --output"
                )
            saved_file.write_text(json.dumps(settings, indent=2))
            if variant is None:
                policy = warm_start
            else:
                if not (run_dir / "trained.json").exists():
                    train(name, variant, seed, warm_start, args.iterations, run_dir, checkpoint)
                policy = trained_checkpoint(run_dir)
            evaluate(
                policy,
                env=env,
                split="all" if env == "alfworld" else None,
                seeds=args.eval_seeds,
                episodes=eval_episodes,
                output=run_dir / "eval",
                baselines=(),
                env_config={"max_steps": max_steps},
                reuse=shipping_evaluations,
            )
    except KeyboardInterrupt:
        raise SystemExit(
            f"interrupted; finished runs are kept: rerun the same command to go on ({out})"
        ) from None
    finally:
        ray.shutdown()
    print(write_tables(out))


if __name__ == "__main__":
    main()
