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

``--model smollm2-135m-instruct`` (WebShop, issue 64): the real pretrained model's table, its own
folders (``docs/results/table1/webshop_smollm2-135m-instruct``, ``results/table1/...``). Its rows
(GRPO and HGPO K = 2, alpha 1 by default; GiGPO with ``--variants``) are the example's real-model CPU
run (``hgpo_webshop.py --model``: LoRA, mean_norm, 2 groups of 2, up to 8 steps), which starts from
the env's recipe for that base at K = 2, built in the cache or shipped, never built here: a missing
one stops in one line naming the command that builds it. Its evaluation is the warm start's shipping
check's: the first 100 task seeds of evaluation seed 123 (100 draws among the 500 test goals; the
episodes name each drawn ``goal_index``), score and success. ``--signal-check`` first trains the GRPO
row for 2 iterations from the warm start and sizes the runs from how many of its groups had
differing rewards (``signal_check[_<sampling>].md``/``.json``, a folder per sampling asked for);
``--group-size``, ``--groups-per-iteration``, ``--train-max-steps``, ``--temperature`` and
``--inference-backend`` then set the rows' (and the check's) sampling, recorded with each run. Before
the first training run, the table declares the smallest difference its seeds and games can detect
(``declared_reading.md``).

Resumable across sittings: each run writes its own small result files under ``<output>/runs/<run>/``
(``curve.csv``, ``trained.json``, the evaluation's ``episodes.csv`` ...) and its checkpoint under
``--work-dir``; a rerun skips what is finished (training, then each evaluation seed) and resumes a run
mid-training: every iteration (``--checkpoint-every N``: every N) a run saves a resume checkpoint
beside its final one (``<run>.resume/``, removed once trained), from which a rerun of the same command
goes on with the curve so far, ending with the files of an uninterrupted run. The tables
(``table.md``, ``per_run.csv``, ``comparisons.csv``: each variant against its own warm start and
against GRPO, GiGPO and HGPO K = 2, paired by training seed and game, and where the two started from
different warm starts their gains over them too, each sign-flip p beside the smallest one its seeds
allow, ``curves.csv``/``.png``) are rebuilt from the files of all runs so far; ``--tables-only``
rebuilds them and runs nothing (also for ``docs/results/alfworld_table1``, the first, 3-seed ALFWorld
table of ``benchmarks/alfworld_table1.py``, which this script replaces).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import ray  # noqa: E402
from ray.rllib.core import DEFAULT_MODULE_ID  # noqa: E402
from ray.tune.utils import flatten_dict  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from envs.alfworld.facts import ALFWORLD_FACTS  # noqa: E402
from hgpo_rllib.cli.console import informative_groups  # noqa: E402
from hgpo_rllib.columns import INVALID_ACTION_RATE, SUCCESS_RATE  # noqa: E402
from hgpo_rllib.evaluation import evaluate  # noqa: E402
from hgpo_rllib.evaluation.comparison import (  # noqa: E402
    GAME_KEYS,
    compare,
    minimum_detectable_difference,
    sign_flip_floor,
)
from hgpo_rllib.evaluation.policy_loading import PLAY_BACKENDS, PLAY_DTYPES, play_dtype  # noqa: E402
from hgpo_rllib.experiments.experiment_file import apply_config_overrides, load_experiment_file  # noqa: E402
from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.rl_module.model_sources import weights_digest  # noqa: E402
from hgpo_rllib.rl_module.models import cpu_dtype  # noqa: E402
from hgpo_rllib.run_records import changed_settings  # noqa: E402
from hgpo_rllib.warm_start.cache import (  # noqa: E402
    build_warm_start,
    find_warm_start,
    is_finished,
    warm_start_recipe,
)

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


def _hgpo(
    example: str, estimator: str, k: int, alpha: float = 1.0, model: str | None = None, **overrides: object
) -> Variant:
    settings = {"estimator": estimator, "history_length": k, "alpha": alpha}
    return Variant(example, settings | ({"model": model} if model else {}), k, overrides=overrides)


#: The real pretrained model of issue 64's WebShop table.
SMOLLM2 = "smollm2-135m-instruct"


def table_name(env: str, model: str | None) -> str:
    """A table's key and folder name: the env's, or with a real model ``<env>_<model>``, so that its
    runs never mix with the tiny model's."""
    return env if model is None else f"{env}_{model}"


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
    # The real model from its WebShop warm start (K = 2): the example's real-model CPU run (--model),
    # mean_norm as the paper's WebShop runs (docs/hgpo_algorithm.md).
    table_name("webshop", SMOLLM2): {
        "GRPO": _hgpo("hgpo_webshop.py", "grpo", 2, model=SMOLLM2),
        "GiGPO": _hgpo("hgpo_webshop.py", "gigpo", 2, model=SMOLLM2),
        "HGPO K=2 a=1": _hgpo("hgpo_webshop.py", "hgpo", 2, model=SMOLLM2),
    },
}
DEFAULT_VARIANTS = {
    "alfworld": ["GRPO", "GiGPO", "HGPO K=2 a=1", "HGPO K=4 a=1", "HiPER"],
    "webshop": ["GRPO", "GiGPO", "HGPO K=4 a=1"],
    # GRPO against HGPO first (issue 64); GiGPO if the budget allows.
    table_name("webshop", SMOLLM2): ["GRPO", "HGPO K=2 a=1"],
}
#: Evaluation episodes per split and seed by default: ALFWorld's whole splits, WebShop's test goals;
#: the real model's are its warm start's shipping check's (scripts/ship_warm_start.py), 100 goals.
EVAL_EPISODES = {"alfworld": None, "webshop": 500, table_name("webshop", SMOLLM2): 100}
#: Evaluation step limits: the paper's ALFWorld 50; WebShop 15, the low end of the authors' 15-30
#: (docs/hgpo_algorithm.md Q10), as the CPU warm starts train at 15.
EVAL_MAX_STEPS = {"alfworld": 50, "webshop": 15}
TITLES = {"alfworld": "ALFWorld", "webshop": "WebShop"}
SPLIT_NAMES = {"eval_in_distribution": "in", "eval_out_of_distribution": "out"}
#: What the other rows are paired against (each against the baselines above it in table order): the
#: paper's ranked pairs, and HiPER and HGPO K = 4 against HGPO K = 2.
BASELINES = ("GRPO", "GiGPO", "HGPO K=2 a=1")
#: The signal check (issue 64): the row it trains (its groups' rewards differ or not, whatever the
#: estimator), its iterations, its folder under the output, and what it sizes the runs for.
SIGNAL_VARIANT = "GRPO"
SIGNAL_ITERATIONS = 2
SIGNAL_CHECK = "signal_check"
#: The sampling a command may set instead of the example's (recorded with each run, and naming its
#: signal check's folder by these tags): episodes per group, groups per iteration, the training
#: episodes' step limit, the exploration temperature and the engine that samples them.
SAMPLING_TAGS = {
    "group_size": "size",
    "groups_per_iteration": "groups",
    "max_steps": "steps",
    "temperature": "temp",
    "inference_backend": "",
}
#: Informative groups (episodes' rewards that differ) each run should train on.
INFORMATIVE_GROUPS_TARGET = 30
#: The real model's warm-start target (issue 61): success in % on the evaluation goals.
WARM_START_TARGET = 10.0
#: Training seeds per row, and the compute for all rows (issue 64: GiGPO's row if it stays within).
TABLE_SEEDS = 3
TABLE_BUDGET_HOURS = 25
#: Groups per iteration the check's sizing offers, as multiples of the check's own.
SIGNAL_GROUP_MULTIPLES = (1, 2, 4, 8)
#: The reading declared before the runs (``declared_reading.md``).
DECLARED_READING = "declared_reading.md"


def without_weights(settings: dict[str, object]) -> dict[str, object]:
    """A run's settings but its warm start's weights digest, which is known only once the warm start
    is found (or built)."""
    return {k: v for k, v in settings.items() if k != "warm_start_weights"}


def run_name(variant: str, seed: int | None) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", variant.lower()).strip("-")
    return slug if seed is None else f"{slug}-seed{seed}"


def variant_config(variant: Variant, warm_start: Path):  # noqa: ANN201 (an RLlib AlgorithmConfig)
    """The variant's tuned example built with its settings and ``warm_start``, its overrides on top. A
    real model's example (``--model``) finds the warm start itself, by the same recipe as
    :func:`model_warm_start`."""
    settings = dict(variant.settings)
    if "model" not in settings:
        settings["warm_start"] = str(warm_start)
    config = load_experiment_file(TUNED / variant.example, settings).config
    return config.training(**variant.overrides) if variant.overrides else config


def model_warm_start(env: str, model: str, history_length: int) -> Path:
    """The env's recipe for the pretrained base ``model`` at ``history_length``, built in the cache
    or shipped; never built here (hours on 2 cores): one line naming the command that builds it."""
    found = find_warm_start(warm_start_recipe(env, history_length, base=model))
    if not is_finished(found):
        raise SystemExit(
            f"{model}'s {env} warm start (K={history_length}) is neither built at {found} nor shipped: "
            f"build it first with `python scripts/ship_warm_start.py --env {env} --model {model}`"
        )
    return found


def warm_start_for(env: str, variant: Variant, given: Path | None) -> Path:
    """A real model's: :func:`model_warm_start`; ALFWorld: the main job's recipe at the variant's K
    and answer format (shipped); WebShop: ``given`` (``--warm-start``), else ``WEBSHOP_WARM_START``
    (cached, or built now: none ships)."""
    if (model := variant.settings.get("model")) is not None:
        return model_warm_start(env, str(model), variant.history_length)
    if env == "alfworld":
        return build_warm_start(warm_start_recipe("alfworld", variant.history_length, variant.answer_format))
    return given or build_warm_start(warm_start_recipe("webshop"))


#: A run's resume checkpoints (issue 64: a real-model run outlasts a sitting) sit beside its final
#: checkpoint, in ``<checkpoint>.resume/``: ``iteration_<k>/`` holds the algorithm (``algorithm/``),
#: the curve's rows so far and, written last, :data:`RESUME_MARKER`.
RESUME_SUFFIX = ".resume"
RESUME_MARKER = "resume.json"


def build_algo(config):  # noqa: ANN001, ANN201 (an RLlib AlgorithmConfig and its Algorithm)
    """The algorithm ``config`` builds (tests put a stand-in here)."""
    return config.build_algo()


def resume_folder(checkpoint: Path) -> Path:
    return checkpoint.with_name(checkpoint.name + RESUME_SUFFIX)


def latest_resume_point(folder: Path) -> Path | None:
    """The newest complete resume checkpoint in ``folder``; None when there is none. One still under
    its temporary name, or without its marker (an interrupted save), is ignored."""
    complete = sorted(p for p in folder.glob("iteration_*") if (p / RESUME_MARKER).is_file())
    return complete[-1] if complete else None


def save_resume_point(
    algo,  # noqa: ANN001 (an RLlib Algorithm)
    folder: Path,
    records: list[dict[str, object]],
    marker: dict[str, object],
    minutes: Callable[[], float],
) -> None:
    """Save ``algo`` and the curve's ``records`` as ``folder/iteration_<k>``: written under a temporary
    name, the marker (``marker`` and the wall ``minutes()`` once saved) last, then renamed, so an
    interrupted save never looks complete; the previous one is removed only then."""
    point = folder / f"iteration_{len(records):06d}"
    partial = folder / f".{point.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    algo.save_to_path(str(partial / "algorithm"))
    pd.DataFrame(records).to_csv(partial / "curve.csv", index=False)
    (partial / RESUME_MARKER).write_text(json.dumps({**marker, "wall_minutes": minutes()}, indent=2))
    partial.rename(point)
    for older in folder.iterdir():
        if older != point:
            shutil.rmtree(older)


#: The learner's step-grouping statistics each curve row keeps, where its estimator groups steps
#: (GRPO does not): per level d the share of steps alone in their group (d = 1 the current-state
#: group, GiGPO's anchor group; HGPO's d = 2 .. K + 1 add the history window's records), and the
#: share alone at every level, whose HGPO advantage is 0 (docs/hgpo_algorithm.md §4.6).
STEP_GROUPING = re.compile(rf"learners/{DEFAULT_MODULE_ID}/(level\d+|all_levels)_singleton_frac")


def train(
    name: str,
    variant: Variant,
    seed: int,
    warm_start: Path,
    iterations: int,
    run_dir: Path,
    checkpoint: Path | None,
    sampling: dict[str, float | str],
    checkpoint_every: int = 1,
) -> None:
    """Train one (variant, seed) for ``iterations``; write its curve and (unless None) checkpoint.
    ``sampling``: the example's settings of :data:`SAMPLING_TAGS` that the command replaces.

    A run with a checkpoint saves a resume checkpoint every ``checkpoint_every`` iterations (but the
    last) and, when called again after an interruption, restores the newest complete one and goes on
    from the iteration after it with its curve: the final checkpoint, ``curve.csv`` and ``trained.json``
    are those of an uninterrupted run, the minutes summed over the sittings (the iterations trained
    after the last resume checkpoint are trained again, with fresh random draws). The resume
    checkpoints are removed once ``trained.json`` is written. One of other settings is never restored:
    :func:`check_run` stopped a run whose folder was begun with other settings before it trains, and a
    resume checkpoint names the run folder and settings it was saved for, a stop for any other (another
    ``--output`` on the same ``--work-dir``)."""
    config = with_sampling(variant_config(variant, warm_start), sampling)
    # Success per iteration: the window is one iteration's episodes, not the last 100.
    episodes_per_iteration = config.group_size * config.groups_per_iteration
    config.reporting(metrics_num_episodes_for_smoothing=episodes_per_iteration).debugging(seed=seed)
    run_file = run_dir / "run.json"
    owner = {
        "run_dir": str(run_dir.resolve()),
        "settings": json.loads(run_file.read_text()) if run_file.exists() else None,
    }
    resume = None if checkpoint is None else resume_folder(checkpoint)
    point = None if resume is None else latest_resume_point(resume)
    if point is not None:
        saved = json.loads((point / RESUME_MARKER).read_text())
        if {key: saved[key] for key in owner} != owner:
            raise SystemExit(
                f"{point} was saved by another run ({saved['run_dir']}, settings {saved['settings']}); "
                "choose another --work-dir, or delete it to train this run from its start"
            )
    algo = build_algo(config)
    records: list[dict[str, object]] = []
    minutes_before = 0.0
    try:
        if point is not None:
            algo.restore_from_path(str(point / "algorithm"))
            records = pd.read_csv(point / "curve.csv").to_dict("records")
            minutes_before = saved["wall_minutes"]
            pd.DataFrame(records).to_csv(run_dir / "curve.csv", index=False)  # rows after it: trained again
            print(f"resuming {run_name(name, seed)} from iteration {len(records) + 1} of {iterations}")
        start = time.perf_counter()

        def minutes() -> float:
            return minutes_before + (time.perf_counter() - start) / 60

        progress = tqdm(
            range(len(records), iterations),
            desc=run_name(name, seed),
            unit="it",
            leave=False,
            initial=len(records),
            total=iterations,
        )
        for _ in progress:
            result = algo.train()
            runners = result["env_runners"]
            # Of the groups trained on: those whose advantages are not all zero, and among them those
            # whose episodes' env returns differ (the others differ by invalid-answer penalties only).
            flat = flatten_dict(dict(result), delimiter="/")
            informative, trained = informative_groups(flat) or (0, 0)
            differing = int(flat.get(f"learners/{DEFAULT_MODULE_ID}/num_reward_differing_groups", 0))
            grouping = {
                key.rsplit("/", 1)[1]: value for key, value in flat.items() if STEP_GROUPING.fullmatch(key)
            }
            records.append(
                {
                    "variant": name,
                    "seed": seed,
                    "iteration": result["training_iteration"],
                    "minutes": minutes(),
                    "success": runners[SUCCESS_RATE],
                    "episode_len": runners["episode_len_mean"],
                    "invalid_rate": runners[INVALID_ACTION_RATE],
                    "informative_groups": informative,
                    "reward_differing_groups": differing,
                    "groups": trained,
                    **grouping,
                    # The machine's 1-minute load: the iterations' minutes depend on it.
                    "load_1min": os.getloadavg()[0],
                }
            )
            pd.DataFrame(records).to_csv(run_dir / "curve.csv", index=False)
            # The last iteration's state is the final checkpoint's, saved next.
            if resume is not None and len(records) < iterations and len(records) % checkpoint_every == 0:
                save_resume_point(algo, resume, records, owner, minutes)
        if checkpoint is not None:
            algo.save_to_path(str(checkpoint))
    finally:
        algo.stop()
    (run_dir / "trained.json").write_text(
        json.dumps(
            {
                "variant": name,
                "seed": seed,
                "iterations": len(records),
                "group_size": config.group_size,
                "groups_per_iteration": config.groups_per_iteration,
                "max_steps": config.env_config.get("max_steps"),
                "temperature": config.temperature,
                "informative_groups": sum(r["informative_groups"] for r in records),
                "reward_differing_groups": sum(r["reward_differing_groups"] for r in records),
                "wall_minutes": minutes(),
                "load_1min_median": float(pd.Series([r["load_1min"] for r in records]).median()),
                "warm_start": str(warm_start),
                "checkpoint": None if checkpoint is None else str(checkpoint),
            },
            indent=2,
        )
    )
    if resume is not None:
        shutil.rmtree(resume, ignore_errors=True)


def with_sampling(config, sampling: dict[str, float | str]):  # noqa: ANN001, ANN201 (an RLlib AlgorithmConfig)
    """``config`` with ``sampling`` (:data:`SAMPLING_TAGS`) in place of its own: the groups (and an
    env per episode of an iteration), the env's step limit, the policy's exploration temperature and
    its generation engine."""
    groups = {key: sampling[key] for key in ("group_size", "groups_per_iteration") if key in sampling}
    if groups:
        config.training(**groups)
        config.env_runners(num_envs_per_env_runner=config.group_size * config.groups_per_iteration)
    if "max_steps" in sampling:
        config.environment(env_config={**config.env_config, "max_steps": sampling["max_steps"]})
    if "temperature" in sampling:
        config.training(temperature=sampling["temperature"])
    if "inference_backend" in sampling:
        apply_config_overrides(config, {"model_config": {"inference_backend": sampling["inference_backend"]}})
    return config


def tagged(value: float | str) -> str:
    """A setting's value in a folder name: numbers in their short form (0.6, 15), names as they are."""
    return value if isinstance(value, str) else f"{value:g}"


def signal_check_name(sampling: dict[str, float | str]) -> str:
    """The folder (and report) name of a signal check at ``sampling``: ``signal_check`` with a tag per
    setting the command gave, e.g. ``signal_check_size4_groups4_steps15_temp0.7``."""
    return "_".join(
        [
            SIGNAL_CHECK,
            *(f"{tag}{tagged(sampling[key])}" for key, tag in SAMPLING_TAGS.items() if key in sampling),
        ]
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


#: What ``per_run.csv`` takes from a run's ``trained.json``.
TRAINED_COLUMNS = (
    "iterations",
    "wall_minutes",
    "load_1min_median",
    "informative_groups",
    "reward_differing_groups",
)


def per_run_table(runs_dir: Path) -> pd.DataFrame:
    """One row per (run, split): success (WebShop: and score), per-type and invalid-answer rates (all
    in %) averaged over the evaluation seeds, with the run's training iterations, their minutes, the
    median load they ran under and the groups they trained on that had non-zero advantages and
    differing rewards."""
    rows = []
    for per_seed_file in sorted(runs_dir.glob("*/eval/per_seed.csv")):
        info = json.loads((per_seed_file.parents[1] / "run.json").read_text())
        trained_file = per_seed_file.parents[1] / "trained.json"
        if trained_file.exists():
            trained = json.loads(trained_file.read_text())
            info |= {k: trained[k] for k in TRAINED_COLUMNS if k in trained}
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


def row_order(table_key: str, names: set[str]) -> list[str]:
    """Warm starts first, then the variants in their table order."""
    return sorted(n for n in names if n.startswith(WARM_START)) + [
        v for v in VARIANTS[table_key] if v in names
    ]


def measures(env: str) -> dict[str, str]:
    """What the rows are compared on (name: the episodes' column): success, and WebShop's score."""
    return {"success": "won", "score": "score"} if env == "webshop" else {"success": "won"}


def summary_table(per_run: pd.DataFrame, table_key: str) -> str:
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
        table = table.reindex(row_order(table_key, set(table.index)))
        tables.append(f"### `{split}` (rates in %)\n\n{table.to_markdown()}\n")
    return "\n".join(tables)


def headline_table(per_run: pd.DataFrame, table_key: str) -> str:
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
    return table.reindex(row_order(table_key, set(table.index))).to_markdown()


def evaluated_runs(runs_dir: Path) -> Iterator[tuple[dict, pd.DataFrame]]:
    """Each evaluated run's settings and the episodes its policy played (with its ``variant`` and
    warm start ``weights``; splits by their short names)."""
    for episodes_file in sorted(runs_dir.glob("*/eval/episodes.csv")):
        info = json.loads((episodes_file.parents[1] / "run.json").read_text())
        played = pd.read_csv(episodes_file)
        played = played[played["policy"] == "checkpoint"].assign(
            variant=info["variant"], weights=info.get("warm_start_weights")
        )
        played["split"] = played["split"].map(SPLIT_NAMES).fillna(played["split"])
        yield info, played


def paired_table(runs_dir: Path, env: str, table_key: str) -> pd.DataFrame:
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
    for info, played in evaluated_runs(runs_dir):
        if info["seed"] is None:
            warm_starts[info.get("warm_start_weights")] = played
        else:
            frames.append(played.assign(training_seed=info["seed"]))
    if not frames:
        return pd.DataFrame()
    episodes = pd.concat(frames, ignore_index=True)
    variants = row_order(table_key, set(episodes["variant"]))
    compared_on = measures(env)
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
        for name, value in compared_on.items()
        for frame, compared, baseline in pairs
    ]
    # Gains over the own start (each measure's, once), for rows whose start is not their baseline's.
    starts = [start for weights, start in warm_starts.items() if weights is not None]
    if starts:
        game = ["weights", *GAME_KEYS]
        with_start = episodes.merge(
            pd.concat(starts)[[*game, *compared_on.values()]], on=game, suffixes=("", "_start")
        )
        gains = {
            name: with_start.assign(gain=with_start[value].astype(float) - with_start[f"{value}_start"])
            for name, value in compared_on.items()
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


def plot_curves(curves: pd.DataFrame, path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant, group in curves.groupby("variant", sort=False):
        stats = group.groupby("iteration")["success"].mean()
        ax.plot(stats.index, stats.to_numpy(), marker="o", label=variant)
    ax.set(xlabel="training iteration", ylabel="training success (per iteration)", ylim=(0, 1.02))
    ax.set_title(f"{title} from the warm starts\nmean over training seeds")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def table_title(env: str, model: str | None) -> str:
    return TITLES[env] + (f", {model}" if model else "")


def declared_reading(runs_dir: Path, env: str, seeds: int) -> pd.DataFrame:
    """Per warm start, split and measure: what its evaluation scored, and the smallest difference two
    rows of ``seeds`` training seeds each can be told apart by on those games
    (:func:`~hgpo_rllib.evaluation.comparison.minimum_detectable_difference`, with the warm start's
    per-game variance: both rows start from it), beside the smallest sign-flip p those seeds allow."""
    rows = []
    for info, played in evaluated_runs(runs_dir):
        if info["seed"] is not None:
            continue
        for split, games in played.groupby("split", sort=False):
            for name, column in measures(env).items():
                values = games[column].astype(float)
                smallest = minimum_detectable_difference(values.var(ddof=0), seeds, len(values))
                rows.append(
                    {
                        "warm start": info["variant"],
                        "split": split,
                        "measure": name,
                        "start": round(100 * values.mean(), 1),
                        "seeds": seeds,
                        "games": len(values),
                        "minimum_detectable_difference": round(100 * smallest, 1),
                        "sign_flip_floor": sign_flip_floor(seeds),
                    }
                )
    return pd.DataFrame(rows)


def declare_reading(out: Path, env: str, seeds: int) -> None:
    """Write ``declared_reading.md`` from the evaluated warm starts, before any row trains."""
    reading = declared_reading(out / "runs", env, seeds)
    floor = sign_flip_floor(seeds)
    (out / DECLARED_READING).write_text(
        "# The reading declared before the runs\n\n"
        f"Each row trains {seeds} seeds and plays the warm start's games. A difference between two rows "
        "(points) is detected when its 95% paired bootstrap interval excludes 0; the smallest difference "
        "detected 80% of the time is `(z(0.975) + z(0.8)) * sqrt(2 * s2 / (seeds * games))` = "
        "`2.80 * sqrt(2 * s2 / (seeds * games))`, with s2 one game's variance of the measure under the "
        "warm start (`p * (1 - p)` for success at rate p). It counts the games' spread only: training "
        "seeds that disagree widen the interval, so it is a floor. The exact sign-flip test over "
        f"{seeds} seeds cannot go below p = {floor:g}"
        + (", so it cannot separate two rows at 5% here" if floor > 0.05 else "")
        + '. "Not separated" is a valid outcome.\n\n'
        + reading.to_markdown(index=False)
        + "\n"
    )


def signal_sizing(
    curve: pd.DataFrame,
    group_size: int,
    groups_per_iteration: int,
    target: int = INFORMATIVE_GROUPS_TARGET,
) -> dict:
    """How to size the runs from a signal check's ``curve`` (its iterations' ``groups``, the
    ``reward_differing_groups`` and ``informative_groups`` among them, ``success``, cumulative
    ``minutes``, ``load_1min``) at its group size and groups per iteration: the measured fraction f
    of groups whose env rewards differed (not those that only invalid-answer penalties set apart),
    and for each number n of groups per iteration (:data:`SIGNAL_GROUP_MULTIPLES` of the check's)
    the iterations ``ceil(target / (n f))`` that see ``target`` such groups in expectation, and their
    minutes: an iteration's minutes taken as the check's times n over its own groups (sampling and
    the update both grow with the episodes). Blocked where no group's rewards differed."""
    differing, groups = int(curve["reward_differing_groups"].sum()), int(curve["groups"].sum())
    minutes_per_iteration = float(curve["minutes"].iloc[-1]) / len(curve)
    success = 100 * float(curve["success"].mean())
    measured = {
        "iterations": len(curve),
        "group_size": group_size,
        "groups_per_iteration": groups_per_iteration,
        "episodes": len(curve) * group_size * groups_per_iteration,
        "success": round(success, 1),
        "informative_groups": int(curve["informative_groups"].sum()),
        "reward_differing_groups": differing,
        "groups": groups,
        "differing_fraction": round(differing / groups, 3) if groups else 0.0,
        "minutes_per_iteration": round(minutes_per_iteration, 1),
        "load_1min_median": round(float(curve["load_1min"].median()), 1),
    }
    below = success < WARM_START_TARGET
    if not differing:
        return {
            **measured,
            "status": "blocked",
            "reason": f"no group of {groups} had differing rewards (training success {success:.1f}%"
            + (f", below the warm-start target of {WARM_START_TARGET:g}%)" if below else ")"),
            "plans": [],
        }
    fraction = differing / groups
    plans = []
    for multiple in SIGNAL_GROUP_MULTIPLES:
        per_iteration = multiple * groups_per_iteration
        iterations = math.ceil(target / (per_iteration * fraction))
        minutes = iterations * minutes_per_iteration * multiple
        plans.append(
            {
                "group_size": group_size,
                "groups_per_iteration": per_iteration,
                "iterations": iterations,
                "episodes": iterations * per_iteration * group_size,
                "expected_informative_groups": round(iterations * per_iteration * fraction, 1),
                "minutes_per_run": round(minutes),
                "hours_grpo_hgpo": round(2 * TABLE_SEEDS * minutes / 60, 1),
                "hours_with_gigpo": round(3 * TABLE_SEEDS * minutes / 60, 1),
            }
        )
    reason = f"{differing} of {groups} groups had differing rewards"
    if below:
        reason += f"; training success {success:.1f}% is below the warm-start target ({WARM_START_TARGET:g}%)"
    return {**measured, "status": "sized", "reason": reason, "plans": plans}


def signal_report(sizing: dict, command: str) -> str:
    """``signal_check.md``: the measurement, then the sizing (or why the table is blocked)."""
    measured = {k: v for k, v in sizing.items() if k not in ("status", "reason", "plans")}
    lines = [
        "# Signal check: do the rows' groups have differing rewards?\n",
        f"{SIGNAL_VARIANT} from the warm start for {sizing['iterations']} iterations of "
        f"{sizing['groups_per_iteration']} groups of {sizing['group_size']} (`{command}`).\n",
        pd.DataFrame([measured]).to_markdown(index=False) + "\n",
    ]
    if sizing["status"] == "blocked":
        lines.append(f"**Blocked**: {sizing['reason']}. The table is not run from this warm start.\n")
        return "\n".join(lines)
    lines += [
        f"{sizing['reason']}. Runs that see at least {INFORMATIVE_GROUPS_TARGET} such groups "
        f"each, by groups per iteration (training minutes at the check's load; evaluations apart; "
        f"hours: {TABLE_SEEDS} seeds of GRPO and HGPO, and with GiGPO, against the ~"
        f"{TABLE_BUDGET_HOURS} h budget):\n",
        pd.DataFrame(sizing["plans"]).to_markdown(index=False) + "\n",
        "Another group size changes the fraction: check it with `--group-size`.\n",
    ]
    return "\n".join(lines)


def write_tables(out: Path) -> str:
    """``per_run.csv``, ``curves.csv``/``.png``, ``comparisons.csv`` and ``table.md`` from the run
    files under ``out/runs`` (the committed ones included); the table's markdown."""
    runs = out / "runs"
    settings = pd.DataFrame([json.loads(f.read_text()) for f in sorted(runs.glob("*/run.json"))])
    if settings.empty:
        raise SystemExit(f"{runs} holds no runs")
    env = settings["env"].iloc[0] if "env" in settings else "alfworld"  # the first table had one env
    model = settings["model"].iloc[0] if "model" in settings else None
    table_key, title = table_name(env, model), table_title(env, model)
    per_run = per_run_table(runs)
    per_run.to_csv(out / "per_run.csv", index=False)
    curve_files = sorted(runs.glob("*/curve.csv"))
    if curve_files:
        curves = pd.concat([pd.read_csv(f) for f in curve_files], ignore_index=True)
        curves.to_csv(out / "curves.csv", index=False)
        plot_curves(curves, out / "curves.png", title)
    paired = paired_table(runs, env, table_key)
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
        f"{headline_table(per_run, table_key)}\n\n{summary_table(per_run, table_key)}"
    )
    if not paired.empty:
        table += (
            "\n### Paired differences (points; 95% bootstrap interval over training seeds, then games; "
            "exact sign-flip p over the seeds, and the smallest p those seeds allow; a measure "
            "`... gain`: the row's gain over its own warm start minus the baseline's over its own)\n\n"
            + paired.to_markdown(index=False)
            + "\n"
        )
    if (out / DECLARED_READING).exists():
        table += f"\nThe reading declared before the runs: `{DECLARED_READING}`.\n"
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
        f"# {title} Table 1 in miniature\n\nWarm start weights `{values('warm_start_weights')}`; "
        f"{episodes} games per split "
        f"and evaluation seed {eval_seeds}.{load}\n\n{table}"
    )
    return table


def signal_check(
    out: Path,
    variant: Variant,
    seed: int,
    sampling: dict[str, float | str],
    common: dict[str, object],
    warm_start: Callable[[str], tuple[Path, str]],
    command: str,
) -> str:
    """Train ``variant`` (GRPO) from its warm start for :data:`SIGNAL_ITERATIONS` iterations into
    ``out/<name>/`` (:func:`signal_check_name`: one folder per sampling; no checkpoint; once: a rerun
    sizes again from its files), then write :func:`signal_sizing` to ``<name>.json`` and its report
    to ``<name>.md``."""
    name = signal_check_name(sampling)
    run_dir = out / name
    settings = {
        **common,
        "variant": SIGNAL_VARIANT,
        "seed": seed,
        "iterations": SIGNAL_ITERATIONS,
        **sampling,
    }
    saved = check_run(run_dir, settings)
    if not (run_dir / "trained.json").exists():
        path, settings["warm_start_weights"] = warm_start(variant.warm_start_label)
        start_run(run_dir, saved, settings)
        train(SIGNAL_VARIANT, variant, seed, path, SIGNAL_ITERATIONS, run_dir, None, sampling)
    trained = json.loads((run_dir / "trained.json").read_text())
    curve = pd.read_csv(run_dir / "curve.csv")
    sizing = signal_sizing(curve, trained["group_size"], trained["groups_per_iteration"])
    # The episodes' step limit and temperature (checks before they were recorded name none).
    sizing |= {key: trained[key] for key in ("max_steps", "temperature") if key in trained}
    (out / f"{name}.json").write_text(json.dumps(sizing, indent=2))
    report = signal_report(sizing, command)
    (out / f"{name}.md").write_text(report)
    return report


#: Why a real model's runs can differ in ``torch_dtype`` although no flag sets it.
CPU_DTYPE_HINT = (
    " (torch_dtype is this CPU's default: bfloat16 only where it multiplies bf16 natively, AVX512_BF16 "
    "or AMX, else float32; so go on with the table on such a CPU)"
)


def check_run(run_dir: Path, settings: dict[str, object]) -> dict[str, object] | None:
    """The settings a run in ``run_dir`` was begun with (None: a new run); a stop when they differ from
    ``settings`` (its warm start's weights apart, known once the warm start is found). Checked before
    :func:`train` goes on from a resume checkpoint, which names the run folder and settings it was
    saved for: one of other settings is never restored."""
    saved_file = run_dir / "run.json"
    saved = json.loads(saved_file.read_text()) if saved_file.exists() else None
    if saved is not None and (begun := without_weights(saved)) != settings:
        raise SystemExit(
            f"{run_dir} was run with other settings ({'; '.join(changed_settings(begun, settings))}); "
            "choose another --output or the same settings"
            + (CPU_DTYPE_HINT if begun.get("torch_dtype") != settings.get("torch_dtype") else "")
        )
    return saved


def start_run(run_dir: Path, saved: dict[str, object] | None, settings: dict[str, object]) -> None:
    """Record ``settings`` (with the warm start's weights) in ``run_dir``; a stop when the run was begun
    from other warm start weights."""
    if saved is not None and saved != settings:
        raise SystemExit(
            f"{run_dir} started from other warm start weights ({saved.get('warm_start_weights')}, "
            f"now {settings['warm_start_weights']}); choose another --output"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps(settings, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--env", default="alfworld", choices=list(TITLES))
    parser.add_argument(
        "--model",
        help=f"a real pretrained model's table ({SMOLLM2} on WebShop): its example's real-model CPU run "
        "from the env's warm start for it (built or shipped)",
    )
    parser.add_argument(
        "--warm-start",
        type=Path,
        help="WebShop: an `rllib sft --env webshop` directory (default: WEBSHOP_WARM_START, built once "
        "into the cache: none ships)",
    )
    parser.add_argument(
        "--iterations", type=int, default=6, help="training iterations per run (every run the same)"
    )
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=1,
        help="iterations between a run's resume checkpoints (a rerun goes on from the last)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="training seeds")
    parser.add_argument("--variants", nargs="+", help="default: the env's Table 1 rows")
    parser.add_argument("--group-size", type=int, help="episodes per group (default: the example's)")
    parser.add_argument(
        "--groups-per-iteration", type=int, help="groups per training iteration (default: the example's)"
    )
    parser.add_argument(
        "--train-max-steps", type=int, help="training episodes' step limit (default: the example's)"
    )
    parser.add_argument(
        "--temperature", type=float, help="the policy's exploration temperature (default: the module's, 1)"
    )
    parser.add_argument(
        "--inference-backend",
        choices=PLAY_BACKENDS,
        help="the engine that samples the training episodes (default: the example's own)",
    )
    parser.add_argument(
        "--signal-check",
        action="store_true",
        help=f"train {SIGNAL_VARIANT} from the warm start for {SIGNAL_ITERATIONS} iterations (the first "
        "seed) and size the runs from its informative groups; run no table",
    )
    parser.add_argument(
        "--eval-episodes",
        type=int,
        help="per split and seed (default: ALFWorld's splits, 500 goals; a real model's: 100)",
    )
    parser.add_argument("--eval-seeds", type=int, nargs="+", default=[123])
    parser.add_argument("--eval-max-steps", type=int, help="step limit (default: ALFWorld 50, WebShop 15)")
    parser.add_argument(
        "--eval-dtype",
        choices=PLAY_DTYPES,
        help="every policy of the table (warm start included) plays its evaluation in this dtype (rllib "
        "evaluate --dtype; default: each policy's own); recorded per run (cpu: as the dtype it names on this "
        "machine), so rows are never mixed",
    )
    parser.add_argument(
        "--eval-inference-backend",
        choices=PLAY_BACKENDS,
        help="and with this engine (rllib evaluate --inference-backend; default: each policy's own)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="result files (small; committed); default docs/results/table1/<env>[_<model>]",
    )
    parser.add_argument(
        "--work-dir", type=Path, help="checkpoints (large); default results/table1/<env>[_<model>]"
    )
    parser.add_argument(
        "--tables-only", action="store_true", help="rebuild the tables from --output's run files; run nothing"
    )
    args = parser.parse_args()
    env = args.env
    table = table_name(env, args.model)
    if table not in VARIANTS:
        parser.error(f"no Table 1 rows for --model {args.model} on {env}; tables: {list(VARIANTS)}")
    out = args.output or RESULTS / table
    if args.tables_only:
        print(write_tables(out))
        return
    variants = args.variants or DEFAULT_VARIANTS[table]
    if unknown := [v for v in variants if v not in VARIANTS[table]]:
        parser.error(f"no variant(s) {unknown} in the {table} table; choose from {list(VARIANTS[table])}")
    sizes = (
        args.iterations,
        args.checkpoint_every,
        args.eval_episodes,
        args.group_size,
        args.groups_per_iteration,
        args.train_max_steps,
    )
    if any(size is not None and size < 1 for size in sizes):
        parser.error(
            "--iterations, --checkpoint-every, --eval-episodes, --group-size, --groups-per-iteration and "
            "--train-max-steps must be > 0"
        )
    if args.temperature is not None and not args.temperature > 0:
        parser.error(f"--temperature must be > 0, got {args.temperature}")
    if args.warm_start is not None and table != "webshop":
        parser.error("--warm-start is the tiny model's WebShop table's; the others' warm starts are recipes")
    work = (args.work_dir or Path("results") / "table1" / table).resolve()
    eval_episodes = args.eval_episodes or EVAL_EPISODES[table]
    max_steps = args.eval_max_steps or EVAL_MAX_STEPS[env]
    # The runs' sampling where the command sets it (recorded only then: the committed runs have none).
    given = {
        "group_size": args.group_size,
        "groups_per_iteration": args.groups_per_iteration,
        "max_steps": args.train_max_steps,
        "temperature": args.temperature,
        "inference_backend": args.inference_backend,
    }
    sampling = {key: value for key, value in given.items() if value is not None}
    # How the policies play their evaluations, where the command sets it (recorded only then, as the
    # sampling): a warm start's shipped evaluation in its own dtype and engine is then played again.
    # "cpu" is recorded as the dtype it names on this machine: rows played on another CPU are not pooled.
    playing = {"torch_dtype": play_dtype(args.eval_dtype), "inference_backend": args.eval_inference_backend}
    played_as = {f"eval_{key}": value for key, value in playing.items() if value is not None}
    # A real model's runs record the dtype they compute in: runs of another default are not pooled.
    common = {"env": env, **({"model": args.model, "torch_dtype": cpu_dtype()} if args.model else {})}
    # Warm starts, one row each; then seed-major runs, so that a sitting that ends early leaves every
    # variant with as many seeds. A warm start is found (or built) only when a run still needs it: a
    # fresh clone's committed, evaluated rows must not start a build of hours (WebShop's does not ship).
    check = VARIANTS[table][SIGNAL_VARIANT]
    variant_of_label: dict[str, Variant] = {}
    for variant in [VARIANTS[table][name] for name in variants] + ([check] if args.signal_check else []):
        variant_of_label.setdefault(variant.warm_start_label, variant)
    warm_starts: dict[str, tuple[Path, str]] = {}  # label: the warm start and its weights digest

    def warm_start(label: str) -> tuple[Path, str]:
        if label not in warm_starts:
            found = warm_start_for(env, variant_of_label[label], args.warm_start)
            warm_starts[label] = found, weights_digest(found)
        return warm_starts[label]

    runs = [(f"{WARM_START} ({label})", None, label) for label in variant_of_label]
    runs += [(name, seed, VARIANTS[table][name].warm_start_label) for seed in args.seeds for name in variants]
    # A shipped warm start's own check (scripts/ship_warm_start.py) played the same games of its
    # split with the same seed: the protocol copies those instead of playing them again (matched by
    # the warm start's weights, so from any checkout).
    shipping_evaluations = sorted(SHIPPING_EVALUATIONS.parent.glob(SHIPPING_EVALUATIONS.name))
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        if args.signal_check:
            command = shlex.join(["python", "benchmarks/table1.py", *sys.argv[1:]])
            print(signal_check(out, check, args.seeds[0], sampling, common, warm_start, command))
            return
        for name, seed, label in tqdm(runs, desc="runs", unit="run"):
            variant = None if seed is None else VARIANTS[table][name]
            run_dir, checkpoint = out / "runs" / run_name(name, seed), work / run_name(name, seed)
            settings = {
                **common,
                "variant": name,
                "seed": seed,
                "iterations": None if seed is None else args.iterations,
                "eval_episodes": eval_episodes,
                "eval_max_steps": max_steps,
                **played_as,
                **({} if seed is None else sampling),
            }
            saved = check_run(run_dir, settings)
            if saved is not None and is_evaluated(run_dir, args.eval_seeds):
                continue  # its checkpoint, even its warm start, may be gone (a fresh clone's committed run)
            policy, settings["warm_start_weights"] = warm_start(label)
            start_run(run_dir, saved, settings)
            if variant is not None:
                if not (out / DECLARED_READING).exists():  # after the warm starts' evaluations
                    declare_reading(out, env, len(args.seeds))
                if not (run_dir / "trained.json").exists():
                    train(
                        name,
                        variant,
                        seed,
                        policy,
                        args.iterations,
                        run_dir,
                        checkpoint,
                        sampling,
                        checkpoint_every=args.checkpoint_every,
                    )
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
                **playing,
            )
    except KeyboardInterrupt:
        raise SystemExit(
            f"interrupted; finished runs and each run's last resume checkpoint are kept: rerun the same "
            f"command to go on ({out})"
        ) from None
    finally:
        ray.shutdown()
    print(write_tables(out))


if __name__ == "__main__":
    main()
