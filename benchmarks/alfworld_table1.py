"""The paper's Table 1 in miniature: GRPO, GiGPO and HGPO on ALFWorld from one warm start, on CPU.

Run: ``python benchmarks/alfworld_table1.py [--warm-start DIR] [--minutes 10] [--seeds 0 1 2]``.
Every variant starts from the same ``rllib sft`` warm start (default: the main job's cached one,
built on first use) and trains with the main job's CPU settings (free text, 2 groups of 4, lr 1e-5,
KL 0.05 to the warm start) for the same wall-clock budget, once per training seed; then ``rllib
evaluate``'s protocol plays ``--eval-episodes`` games of each ALFWorld evaluation split (in and out of
distribution) for each evaluation seed (123, 456, 789). The warm start itself is evaluated the same way.

Resumable across sittings: each run writes its own small result files under
``docs/results/alfworld_table1/runs/<run>/`` (``curve.csv``, ``trained.json``, the evaluation's
``episodes.csv`` ...) and its checkpoint under ``--work-dir``; a rerun skips what is finished
(training, then each evaluation seed), and the tables (``table.md``, ``per_run.csv``,
``curves.csv``, ``curves.png``) are rebuilt from the committed files of all runs so far.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import ray  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from hgpo_rllib.columns import INVALID_ACTION_RATE, SUCCESS_RATE  # noqa: E402
from hgpo_rllib.evaluation import ALFWORLD_CATEGORIES, DEFAULT_SEEDS, evaluate  # noqa: E402
from hgpo_rllib.evaluation.comparison import compare  # noqa: E402
from hgpo_rllib.experiments.presets import warm_start_cpu_config  # noqa: E402
from hgpo_rllib.warm_start.cache import ALFWORLD_WARM_START, build_warm_start  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "alfworld_table1"
WARM_START = "warm start"
VARIANTS = {
    "GRPO": {"estimator": "grpo"},
    "GiGPO": {"estimator": "gigpo"},
    "HGPO K=2 a=1": {"estimator": "hgpo", "length_weight_alpha": 1.0},
    "HGPO K=2 a=0": {"estimator": "hgpo", "length_weight_alpha": 0.0},
    "HGPO K=2 adaptive": {"estimator": "hgpo", "weighting": "adaptive"},
}
SPLIT_NAMES = {"eval_in_distribution": "in", "eval_out_of_distribution": "out"}
BASELINES = ("GRPO", "GiGPO")


def weights_digest(model_dir: Path) -> str:
    """What the warm start's weights are: a rebuilt warm start (fresh machine) may differ from the one
    the committed runs started from, and the table must not mix the two."""
    return hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()[:16]


def run_name(variant: str, seed: int | None) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", variant.lower()).strip("-")
    return slug if seed is None else f"{slug}-seed{seed}"


def train(variant: str, seed: int, warm_start: Path, minutes: float, run_dir: Path, checkpoint: Path) -> None:
    """Train one (variant, seed) for ``minutes`` of wall time; write its curve and checkpoint."""
    config = warm_start_cpu_config(warm_start, {"history_length": 2, **VARIANTS[variant]})
    # Success per iteration: the window is one iteration's episodes, not the last 100.
    episodes_per_iteration = config.group_size * config.groups_per_iteration
    config.reporting(metrics_num_episodes_for_smoothing=episodes_per_iteration).debugging(seed=seed)
    algo = config.build_algo()
    records, start = [], time.perf_counter()
    try:
        with tqdm(total=round(minutes * 60), desc=run_name(variant, seed), unit="s", leave=False) as bar:
            while (elapsed := time.perf_counter() - start) < minutes * 60:
                result = algo.train()
                runners = result["env_runners"]
                records.append(
                    {
                        "variant": variant,
                        "seed": seed,
                        "iteration": result["training_iteration"],
                        "minutes": (time.perf_counter() - start) / 60,
                        "success": runners[SUCCESS_RATE],
                        "episode_len": runners["episode_len_mean"],
                        "invalid_rate": runners[INVALID_ACTION_RATE],
                    }
                )
                pd.DataFrame(records).to_csv(run_dir / "curve.csv", index=False)
                bar.update(round(time.perf_counter() - start - elapsed))
        algo.save_to_path(str(checkpoint))
    finally:
        algo.stop()
    (run_dir / "trained.json").write_text(
        json.dumps(
            {
                "variant": variant,
                "seed": seed,
                "minutes": minutes,
                "iterations": len(records),
                "warm_start": str(warm_start),
                "checkpoint": str(checkpoint),
            },
            indent=2,
        )
    )


def per_run_table(runs_dir: Path) -> pd.DataFrame:
    """One row per (run, split): success and per-type rates averaged over the evaluation seeds."""
    rows = []
    for per_seed_file in sorted(runs_dir.glob("*/eval/per_seed.csv")):
        info = json.loads((per_seed_file.parents[1] / "run.json").read_text())
        per_seed = pd.read_csv(per_seed_file)
        per_seed = per_seed[per_seed["policy"] == "checkpoint"]
        for split, group in per_seed.groupby("split"):
            means = group[["success", "steps", "invalid_rate", *ALFWORLD_CATEGORIES]].mean()
            rows.append(
                {
                    **info,
                    "split": SPLIT_NAMES.get(split, split),
                    "eval_seeds": len(group),
                    **means.round(2).to_dict(),
                }
            )
    return pd.DataFrame(rows)


def summary_table(per_run: pd.DataFrame) -> str:
    """Mean ± std over training seeds, per variant and split (markdown)."""
    columns = ["success", *ALFWORLD_CATEGORIES, "steps", "invalid_rate"]
    order = [WARM_START, *VARIANTS]
    tables = []
    for split in ("in", "out"):
        part = per_run[per_run["split"] == split]
        if part.empty:
            continue
        grouped = part.groupby("variant")
        spread = " ± " + grouped[columns].std(ddof=0).round(1).astype(str)
        spread = spread.where(grouped.size() > 1, "", axis=0)  # one run has no spread to show
        table = grouped[columns].mean().round(1).astype(str) + spread
        table.insert(0, "runs", grouped.size())
        table = table.reindex([v for v in order if v in table.index])
        tables.append(f"### `{split}` split (success and task types in %)\n\n{table.to_markdown()}\n")
    return "\n".join(tables)


def paired_table(runs_dir: Path) -> pd.DataFrame:
    """Every trained variant against GRPO and GiGPO, per split, paired by training seed and game
    (``hgpo_rllib.evaluation.comparison``): success difference in points, its bootstrap interval
    over seeds then games, and the exact sign-flip p-value over the seeds."""
    frames = []
    for episodes_file in sorted(runs_dir.glob("*/eval/episodes.csv")):
        info = json.loads((episodes_file.parents[1] / "run.json").read_text())
        if info["seed"] is None:  # the warm start: nothing to pair with
            continue
        played = pd.read_csv(episodes_file)
        played = played[played["policy"] == "checkpoint"]
        frames.append(played.assign(variant=info["variant"], training_seed=info["seed"]))
    if not frames:
        return pd.DataFrame()
    episodes = pd.concat(frames, ignore_index=True)
    episodes["split"] = episodes["split"].map(SPLIT_NAMES).fillna(episodes["split"])
    variants = [v for v in VARIANTS if v in set(episodes["variant"])]
    return compare(episodes, variants, [b for b in BASELINES if b in variants])


def plot_curves(curves: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant, group in curves.groupby("variant", sort=False):
        group = group.assign(minute=group["minutes"].round())
        stats = group.groupby("minute")["success"].mean().rolling(3, min_periods=1).mean()
        ax.plot(stats.index, stats.to_numpy(), label=variant)
    ax.set(
        xlabel="training minutes (2 CPU cores)",
        ylabel="training success (per iteration, smoothed)",
        ylim=(0, 1.02),
    )
    ax.set_title("ALFWorld from the warm start: mean over training seeds")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write_tables(out: Path) -> str:
    """``per_run.csv``, ``curves.csv``/``.png``, ``comparisons.csv`` and ``table.md`` from the run
    files under ``out/runs`` (the committed ones included); the table's markdown."""
    runs = out / "runs"
    per_run = per_run_table(runs)
    per_run.to_csv(out / "per_run.csv", index=False)
    curve_files = sorted(runs.glob("*/curve.csv"))
    if curve_files:
        curves = pd.concat([pd.read_csv(f) for f in curve_files], ignore_index=True)
        curves.to_csv(out / "curves.csv", index=False)
        plot_curves(curves, out / "curves.png")
    paired = paired_table(runs)
    paired.to_csv(out / "comparisons.csv", index=False)
    settings = pd.DataFrame([json.loads(f.read_text()) for f in sorted(runs.glob("*/run.json"))])
    trained = settings.dropna(subset=["seed"])

    def values(column: str, frame: pd.DataFrame = settings) -> str:
        return " / ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in dict.fromkeys(frame[column]))

    eval_seeds = sorted(
        {int(seed) for f in runs.glob("*/eval/per_seed.csv") for seed in pd.read_csv(f)["seed"]}
    )

    table = summary_table(per_run)
    if not paired.empty:
        table += (
            "\n### Paired differences (success, points; 95% bootstrap interval over training seeds, then "
            "games; exact sign-flip p over the seeds)\n\n" + paired.to_markdown(index=False) + "\n"
        )
    (out / "table.md").write_text(
        f"# ALFWorld Table 1 in miniature\n\nWarm start weights `{values('warm_start_weights')}`; "
        f"{values('minutes', trained)} training minutes per run; {values('eval_episodes')} games per split "
        f"and evaluation seed {eval_seeds}.\n\n{table}"
    )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-start", help="an `rllib sft` model directory (default: the main job's)")
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--eval-episodes", type=int, default=16, help="games per split and evaluation seed")
    parser.add_argument("--eval-seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    parser.add_argument("--eval-max-steps", type=int, default=50, help="ALFWorld step limit (paper: 50)")
    parser.add_argument("--output", default=str(RESULTS), help="result files (small; committed)")
    parser.add_argument("--work-dir", default="results/alfworld_table1", help="checkpoints (large)")
    parser.add_argument(
        "--tables-only", action="store_true", help="rebuild the tables from --output's run files; run nothing"
    )
    args = parser.parse_args()
    if args.tables_only:
        print(write_tables(Path(args.output)))
        return
    if args.minutes <= 0 or args.eval_episodes < 1:
        parser.error("--minutes and --eval-episodes must be positive")
    if args.warm_start:
        warm_start = Path(args.warm_start).resolve()
    else:
        warm_start = build_warm_start(ALFWORLD_WARM_START)
    out, work = Path(args.output), Path(args.work_dir)
    warm_start_weights = weights_digest(warm_start)
    # Seed-major, so that a sitting that ends early leaves every variant with as many seeds.
    runs = [(WARM_START, None), *((v, s) for s in args.seeds for v in args.variants)]
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        for variant, seed in tqdm(runs, desc="runs", unit="run"):
            name = run_name(variant, seed)
            run_dir, checkpoint = out / "runs" / name, (work / name).resolve()
            run_dir.mkdir(parents=True, exist_ok=True)
            settings = {
                "variant": variant,
                "seed": seed,
                "minutes": None if seed is None else args.minutes,
                "eval_episodes": args.eval_episodes,
                "eval_max_steps": args.eval_max_steps,
                "warm_start_weights": warm_start_weights,
            }
            saved = run_dir / "run.json"
            if saved.exists() and json.loads(saved.read_text()) != settings:
                raise SystemExit(
                    f"{run_dir} was run with other settings ({saved.read_text()}); "
                    "choose another --output or the same settings"
                )
            saved.write_text(json.dumps(settings, indent=2))
            if seed is None:
                policy = warm_start
            else:
                if not (run_dir / "trained.json").exists():
                    train(variant, seed, warm_start, args.minutes, run_dir, checkpoint)
                policy = Path(json.loads((run_dir / "trained.json").read_text())["checkpoint"])
            evaluate(
                policy,
                env="alfworld",
                split="all",
                seeds=args.eval_seeds,
                episodes=args.eval_episodes,
                output=run_dir / "eval",
                baselines=(),
                env_config={"max_steps": args.eval_max_steps},
            )
    finally:
        ray.shutdown()
    print(write_tables(out))


if __name__ == "__main__":
    main()
