"""Checks of ``benchmarks/table1.py``: each variant is its tuned example with the intended settings,
and the tables (per run, paired comparisons) are rebuilt from run files alone."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import benchmark_module

from hgpo_rllib import HiPERConfig
from hgpo_rllib.columns import INVALID_ACTION_RATE, SUCCESS_RATE
from hgpo_rllib.evaluation import policy_loading
from hgpo_rllib.evaluation.output_dir import reusable_episodes
from hgpo_rllib.evaluation.policy_loading import read_policy_settings
from hgpo_rllib.evaluation.protocol import evaluation_settings
from hgpo_rllib.run_records import read_record, write_record
from hgpo_rllib.warm_start import cache
from hgpo_rllib.warm_start.cache import find_warm_start, warm_start_recipe
from hgpo_rllib.warm_start.format import SFT_CONFIG
from hgpo_rllib.warm_start.sft_settings import SFTSettings

table1 = benchmark_module("table1")


@pytest.mark.parametrize(
    ("name", "estimator", "alpha", "weighting"),
    [
        ("GRPO", "grpo", None, None),
        ("GiGPO", "gigpo", None, None),
        ("HGPO K=2 a=1", "hgpo", 1.0, "reference"),
        ("HGPO K=2 adaptive", "hgpo", None, "adaptive"),
    ],
)
def test_each_alfworld_variant_is_its_example_with_its_settings(name, estimator, alpha, weighting) -> None:
    before = dict(os.environ)
    warm_start = find_warm_start(warm_start_recipe("alfworld", 2))
    config = table1.variant_config(table1.VARIANTS["alfworld"][name], warm_start)
    assert dict(os.environ) == before  # the switches do not leak into later runs
    assert config.estimator == estimator and config.history_length == 2
    assert config.lr == 1e-5 and config.kl_coeff == 0.05  # the CPU warm-start run
    if alpha is not None:
        assert config.length_weight_alpha == alpha
    if weighting is not None:
        assert config.weighting == weighting


def test_hiper_runs_its_own_example_and_k4_asks_for_its_own_warm_start() -> None:
    variants = table1.VARIANTS["alfworld"]
    hiper = table1.variant_config(variants["HiPER"], find_warm_start(warm_start_recipe("alfworld", 2)))
    assert isinstance(hiper, HiPERConfig)
    assert variants["HiPER"].warm_start_label == "K=2 plan_execute"
    with pytest.raises(ValueError, match="differs from the warm start's K=2"):
        table1.variant_config(variants["HGPO K=4 a=1"], find_warm_start(warm_start_recipe("alfworld", 2)))


def write_run(runs: Path, variant: str, seed: int | None, won: list[bool], weights: str = "abc") -> None:
    run_dir = runs / table1.run_name(variant, seed) / "eval"
    run_dir.mkdir(parents=True)
    settings = {
        "env": "alfworld",
        "variant": variant,
        "seed": seed,
        "iterations": None if seed is None else 6,
        "eval_episodes": None,
        "eval_max_steps": 50,
        "warm_start_weights": weights,
    }
    (run_dir.parent / "run.json").write_text(json.dumps(settings))
    if seed is not None:
        trained = {"iterations": 4 + seed, "wall_minutes": 20 + seed, "load_1min_median": 2.0 + seed / 10}
        (run_dir.parent / "trained.json").write_text(json.dumps(trained))
    games = [
        {
            "split": "eval_out_of_distribution",
            "policy": "checkpoint",
            "seed": 123,
            "task_seed": g,
            "task_type": "Pick",
            "won": w,
            "steps": 10,
            "invalid_rate": 0.0,
        }
        for g, w in enumerate(won)
    ]
    pd.DataFrame(games).to_csv(run_dir / "episodes.csv", index=False)
    per_seed = {
        "split": "eval_out_of_distribution",
        "policy": "checkpoint",
        "seed": 123,
        "success": 100 * sum(won) / len(won),
        "steps": 10.0,
        "invalid_rate": 0.05,  # the protocol's fraction; the table's rates are in %
        "Pick": 0.0,
    }
    pd.DataFrame([per_seed]).to_csv(run_dir / "per_seed.csv", index=False)


def test_tables_are_rebuilt_from_run_files(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs, "warm start (K=2)", None, [True, False, False, False])
    for seed in (0, 1, 2):
        write_run(runs, "GRPO", seed, [True, False, False, False])
        write_run(runs, "HGPO K=2 a=1", seed, [True, True, False, False])
        write_run(runs, "HiPER", seed, [True, True, True, False])
    table = table1.write_tables(tmp_path)
    assert "Paired differences" in table and "warm start (K=2)" in table
    paired = pd.read_csv(tmp_path / "comparisons.csv")
    # Each pair once, the later row against the baseline above it (no mirrored rows), and each
    # trained row against the warm start it started from.
    assert sorted(zip(paired["variant"], paired["baseline"], strict=True)) == [
        ("GRPO", "warm start (K=2)"),
        ("HGPO K=2 a=1", "GRPO"),
        ("HGPO K=2 a=1", "warm start (K=2)"),
        ("HiPER", "GRPO"),
        ("HiPER", "HGPO K=2 a=1"),
        ("HiPER", "warm start (K=2)"),
    ]
    (row,) = paired[(paired["variant"] == "HGPO K=2 a=1") & (paired["baseline"] == "GRPO")].to_dict("records")
    assert row["difference"] == 25.0 and row["seeds"] == 3 and row["sign_flip_p"] == 0.25
    assert row["sign_flip_floor"] == 0.25  # the test's smallest p at 3 seeds: it cannot separate at 5%
    (row,) = paired[paired["baseline"] == "HGPO K=2 a=1"].to_dict("records")
    assert row["difference"] == 25.0
    per_run = pd.read_csv(tmp_path / "per_run.csv")
    assert sorted(per_run["variant"].unique()) == ["GRPO", "HGPO K=2 a=1", "HiPER", "warm start (K=2)"]
    assert per_run.set_index(["variant", "seed"]).loc[("GRPO", 2), "iterations"] == 6
    assert (per_run["invalid_rate"] == 5.0).all()
    # Each figure with the minutes its iterations took and the load they ran under.
    header = (tmp_path / "table.md").read_text()
    assert "iterations per run 4-6 (20-22 minutes), under a machine load" in header
    assert "of 2.0-2.2." in header


def test_each_row_gains_over_the_warm_start_whose_weights_it_started_from(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs, "warm start (K=2)", None, [True, False, False, False], weights="k2")
    write_run(runs, "warm start (K=4)", None, [True, True, True, False], weights="k4")
    for seed, won in ((0, [True, True, False, False]), (1, [True, True, True, True])):
        write_run(runs, "HGPO K=2 a=1", seed, won, weights="k2")
        write_run(runs, "HGPO K=4 a=1", seed, won, weights="k4")
    write_run(runs, "GRPO", 0, [False] * 4, weights="rebuilt")  # its warm start is not in the folder
    table1.write_tables(tmp_path)
    paired = pd.read_csv(tmp_path / "comparisons.csv").set_index(["variant", "baseline", "measure"])
    # Seed 0 gains one game of four, seed 1 three over K=2's start; K=4's start won three of four.
    assert paired.loc[("HGPO K=2 a=1", "warm start (K=2)", "success"), "difference"] == 50.0
    assert paired.loc[("HGPO K=4 a=1", "warm start (K=4)", "success"), "difference"] == 0.0
    assert paired.loc[("HGPO K=4 a=1", "warm start (K=4)", "success"), "seeds"] == 2
    assert ("HGPO K=2 a=1", "warm start (K=4)", "success") not in paired.index
    # Level with K=2's row game for game, K=4's gains 50 points less over its own, stronger start;
    # GRPO's start is not in the folder, so nothing has a gain to compare with GRPO's.
    assert paired.loc[("HGPO K=4 a=1", "HGPO K=2 a=1", "success"), "difference"] == 0.0
    gain = paired.loc[("HGPO K=4 a=1", "HGPO K=2 a=1", "success gain")]
    assert (gain["difference"], gain["seeds"], gain["sign_flip_p"]) == (-50.0, 2, 0.5)
    assert not any(variant == "GRPO" for variant, _, _ in paired.index)
    assert set(paired.xs("success gain", level="measure").index) == {("HGPO K=4 a=1", "HGPO K=2 a=1")}


def test_the_headline_gives_each_training_seeds_success_in_seed_order(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs, "warm start (K=2)", None, [True, False, False, False])
    write_run(runs, "GRPO", 10, [True, False, False, False])  # its folder sorts before seed 2's
    write_run(runs, "GRPO", 2, [True, True, True, False])
    table1.write_tables(tmp_path)
    lines = (tmp_path / "table.md").read_text().splitlines()
    assert lines[4].startswith("### Success in %")
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in lines[8:10]}
    assert [cell.strip() for cell in rows["warm start (K=2)"]] == ["0", "25.0"]
    assert [cell.strip() for cell in rows["GRPO"]] == ["2", "50.0 ± 25.0 (75.0, 25.0)"]


def test_an_evaluated_run_is_skipped_and_a_lost_checkpoint_named(tmp_path: Path) -> None:
    """A committed run on a fresh clone: evaluated, so its missing checkpoint is not needed; a run
    trained elsewhere but not evaluated stops with what to do, not deep inside the evaluation."""
    write_run(tmp_path, "GRPO", 0, [True, False])
    run_dir = tmp_path / table1.run_name("GRPO", 0)
    assert table1.is_evaluated(run_dir, [123])
    assert not table1.is_evaluated(run_dir, [123, 456])  # a seed it has not played
    (run_dir / "eval" / "per_seed.csv").unlink()
    assert not table1.is_evaluated(run_dir, [123])
    (run_dir / "trained.json").write_text(json.dumps({"checkpoint": str(tmp_path / "gone")}))
    with pytest.raises(SystemExit, match=r"grpo-seed0 was trained, but its checkpoint .*gone.* delete"):
        table1.trained_checkpoint(run_dir)
    (tmp_path / "gone").mkdir()
    assert table1.trained_checkpoint(run_dir) == tmp_path / "gone"


def test_a_table_of_warm_starts_only_names_no_training_budget(tmp_path: Path) -> None:
    write_run(tmp_path / "runs", "warm start (K=2)", None, [True, False])
    table1.write_tables(tmp_path)
    header = (tmp_path / "table.md").read_text().splitlines()[2]
    assert header == "Warm start weights `abc`; all games per split and evaluation seed [123]."


def test_the_first_tables_wall_clock_budget_is_named(tmp_path: Path) -> None:
    """The first, 3-seed table trained for 10 minutes per run and recorded no load."""
    runs = tmp_path / "runs"
    write_run(runs, "warm start (K=2)", None, [True, False])
    write_run(runs, "GRPO", 0, [True, True])
    for run_file in runs.glob("*/run.json"):
        settings = json.loads(run_file.read_text())
        run_file.write_text(json.dumps(settings | {"minutes": None if settings["seed"] is None else 10.0}))
    (runs / table1.run_name("GRPO", 0) / "trained.json").write_text(json.dumps({"iterations": 6}))
    table1.write_tables(tmp_path)
    assert (
        (tmp_path / "table.md")
        .read_text()
        .splitlines()[2]
        .endswith("evaluation seed [123]. 10 training minutes per run.")
    )


def test_webshop_variants_start_from_the_given_warm_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hgpo_webshop.py with --warm-start: the warm start's env settings and K, mean_norm, free text
    (before, the CPU example ignored the warm start and trained a random-init tiny model)."""
    record = {**SFTSettings(env="webshop", episodes=1, history_length=4).record(), "finished": True}
    (tmp_path / SFT_CONFIG).write_text(json.dumps(record))
    config = table1.variant_config(table1.VARIANTS["webshop"]["GiGPO"], tmp_path)
    assert config.estimator == "gigpo" and config.history_length == 4 and config.adv_mode == "mean_norm"
    assert config.model_config["model"] == str(tmp_path.resolve())
    assert config.env_config == record["env_config"]
    gigpo = table1.VARIANTS["webshop"]["GiGPO"]
    assert table1.warm_start_for("webshop", gigpo, tmp_path) == tmp_path
    built = []  # without --warm-start: the shipped recipe's (built when the package ships none)
    monkeypatch.setattr(table1, "build_warm_start", lambda recipe: built.append(recipe) or tmp_path)
    assert table1.warm_start_for("webshop", gigpo, None) == tmp_path
    assert built == [warm_start_recipe("webshop")]


def test_evaluated_rows_need_no_warm_start_and_a_new_one_is_not_mixed_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh clone's committed K = 4 rows: evaluated, so neither their checkpoints nor their warm
    start (a build of about 2 hours) are needed; a run still to evaluate gets its warm start once, and a run
    begun from other warm start weights stops instead of joining the table."""
    out = tmp_path / "out"
    write_run(out / "runs", "warm start (K=4)", None, [True, False])
    write_run(out / "runs", "HGPO K=4 a=1", 0, [True, True])
    built: list[str] = []
    warm_start = tmp_path / "warm_start"
    warm_start.mkdir()
    (warm_start / "model.safetensors").write_bytes(b"weights")

    def build(env: str, variant: object, given: object) -> Path:
        built.append(variant.warm_start_label)
        return warm_start

    evaluated: list[str] = []
    reused: list[list[Path]] = []

    def evaluate(policy: Path, output: Path, reuse: list[Path], **_: object) -> None:
        evaluated.append(output.parent.name)
        reused.append(reuse)

    monkeypatch.setattr(table1, "warm_start_for", build)
    monkeypatch.setattr(table1, "train", lambda *args, **kwargs: None)
    monkeypatch.setattr(table1, "trained_checkpoint", lambda run_dir: run_dir)
    monkeypatch.setattr(table1, "evaluate", evaluate)
    monkeypatch.setattr(table1, "write_tables", lambda out: "")
    monkeypatch.setattr(table1.ray, "init", lambda **_: None)
    monkeypatch.setattr(table1.ray, "shutdown", lambda: None)  # the suite's shared Ray stays up
    command = ["table1.py", "--variants", "HGPO K=4 a=1", "--output", str(out), "--work-dir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [*command, "--seeds", "0"])
    table1.main()
    assert built == [] and evaluated == []
    monkeypatch.setattr(sys, "argv", [*command, "--seeds", "0", "1"])
    table1.main()
    assert built == ["K=4"] and evaluated == ["hgpo-k-4-a-1-seed1"]
    # The shipped warm starts' own evaluations are offered for reuse (the protocol copies only those
    # of the same settings: tests/evaluation/test_output_dir.py).
    assert table1.ROOT / "docs" / "results" / "alfworld_shipped_warm_start_eval_k4" in reused[0]
    settings = json.loads((out / "runs" / "hgpo-k-4-a-1-seed1" / "run.json").read_text())
    assert settings["warm_start_weights"] == table1.weights_digest(warm_start)
    (warm_start / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(SystemExit, match="hgpo-k-4-a-1-seed1 started from other warm start weights"):
        table1.main()


SMOLLM2_TABLE = "webshop_smollm2-135m-instruct"


@pytest.fixture
def model_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty warm-start cache, and a stand-in for SmolLM2's converted directory (a recipe of a base
    names its warm start after the base's sha256; converting the GGUF file would take a minute)."""
    monkeypatch.setattr(cache, "DEFAULT_CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(cache, "local_model_dir", lambda model, *args: tmp_path / "models" / model)
    monkeypatch.setattr(cache, "model_sha256", lambda directory: "0" * 64)
    return tmp_path / "cache"


def build_smollm2_warm_start() -> Path:
    """A finished (record-only) warm start of WebShop's recipe for SmolLM2, where the cache has it."""
    recipe = warm_start_recipe("webshop", 2, base=table1.SMOLLM2)
    warm_start = find_warm_start(recipe)
    warm_start.mkdir(parents=True)
    write_record(warm_start / SFT_CONFIG, {**SFTSettings(**recipe).record(), "finished": True})
    (warm_start / "adapter_model.safetensors").write_bytes(b"adapter")
    return warm_start


def test_the_real_models_rows_start_from_its_built_warm_start_and_never_build_it(model_cache: Path) -> None:
    """GRPO, GiGPO and HGPO K = 2, alpha 1 are hgpo_webshop.py --model (LoRA, mean_norm, 2 groups of 2)
    from WebShop's warm start for SmolLM2; a missing one stops in one line naming its build."""
    rows = table1.VARIANTS[SMOLLM2_TABLE]
    assert table1.DEFAULT_VARIANTS[SMOLLM2_TABLE] == ["GRPO", "HGPO K=2 a=1"]
    path = find_warm_start(warm_start_recipe("webshop", 2, base=table1.SMOLLM2))
    with pytest.raises(SystemExit) as stop:
        table1.warm_start_for("webshop", rows["GRPO"], None)
    assert str(stop.value) == (
        f"smollm2-135m-instruct's webshop warm start (K=2) is neither built at {path} nor shipped: build "
        "it first with `python scripts/ship_warm_start.py --env webshop --model smollm2-135m-instruct`"
    )
    assert not (model_cache / "warm_starts").exists()  # nothing was built
    warm_start = build_smollm2_warm_start()
    assert table1.warm_start_for("webshop", rows["GRPO"], None) == warm_start
    for name, estimator in (("GRPO", "grpo"), ("GiGPO", "gigpo"), ("HGPO K=2 a=1", "hgpo")):
        config = table1.variant_config(rows[name], warm_start)
        assert config.model_config["model"] == str(warm_start) and config.model_config["lora"] == {"r": 16}
        assert (config.estimator, config.history_length, config.length_weight_alpha) == (estimator, 2, 1.0)
        assert (config.adv_mode, config.lr, config.kl_coeff) == ("mean_norm", 5e-5, 0.0)
        assert (config.group_size, config.groups_per_iteration, config.env_config["max_steps"]) == (2, 2, 8)
    # The adapter's weights name the warm start (a LoRA warm start has no model.safetensors).
    assert table1.weights_digest(warm_start) == "ae1eae1d76e5b7c8"


def test_a_commands_sampling_replaces_the_examples_and_names_its_signal_check(model_cache: Path) -> None:
    """--group-size 4 --groups-per-iteration 4 --train-max-steps 15 --temperature 0.7: 16 envs of
    episodes of up to 15 steps sampled at 0.7; the rest of the example's config is kept."""
    warm_start = build_smollm2_warm_start()
    sampling = {"group_size": 4, "groups_per_iteration": 4, "max_steps": 15, "temperature": 0.7}
    config = table1.with_sampling(
        table1.variant_config(table1.VARIANTS[SMOLLM2_TABLE]["GRPO"], warm_start), sampling
    )
    assert (config.group_size, config.groups_per_iteration, config.num_envs_per_env_runner) == (4, 4, 16)
    # The algorithm owns the temperature and hands it to its module (validation refuses a module's own).
    assert "temperature" not in config.user_model_config()
    assert (config.env_config["max_steps"], config.temperature, config.model_config["temperature"]) == (
        15,
        0.7,
        0.7,
    )
    assert config.model_config["model"] == str(warm_start) and config.model_config["lora"] == {"r": 16}
    assert table1.signal_check_name(sampling) == "signal_check_size4_groups4_steps15_temp0.7"
    assert table1.signal_check_name({"groups_per_iteration": 8}) == "signal_check_groups8"
    assert table1.signal_check_name({}) == "signal_check"


def test_a_commands_engine_samples_the_runs_and_names_its_signal_check(model_cache: Path) -> None:
    """--inference-backend vllm: the runs' module samples with vLLM; its other settings are kept."""
    warm_start = build_smollm2_warm_start()
    sampling = {"groups_per_iteration": 6, "inference_backend": "vllm"}
    config = table1.with_sampling(
        table1.variant_config(table1.VARIANTS[SMOLLM2_TABLE]["GRPO"], warm_start), sampling
    )
    assert config.model_config["inference_backend"] == "vllm" and config.model_config["lora"] == {"r": 16}
    assert table1.signal_check_name(sampling) == "signal_check_groups6_vllm"


def test_the_warm_start_row_reuses_the_shipped_webshop_evaluation_from_any_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real model's warm-start row evaluates the shipped warm start as its shipping did (100 goals at
    15 steps, seed 123): the committed evaluation, which recorded its build tree's path, is reusable
    from this checkout, matched by the warm start's weights. Nothing is played, no model loaded."""
    shipped = table1.ROOT / "hgpo_rllib" / "warm_start" / "shipped" / "webshop-ca143eb9a6"
    base_sha256 = read_record(shipped / "hgpo_base.json")["base_sha256"]
    monkeypatch.setattr(cache, "DEFAULT_CACHE_DIR", tmp_path / "cache")  # nothing built: the shipped one
    # The base as the adapter records it (converting the GGUF file would take a minute).
    monkeypatch.setattr(cache, "local_model_dir", lambda model, *args: tmp_path / "models" / model)
    monkeypatch.setattr(cache, "model_sha256", lambda directory: base_sha256)
    warm_start = table1.warm_start_for("webshop", table1.VARIANTS[SMOLLM2_TABLE]["GRPO"], None)
    assert warm_start == shipped
    # What evaluate() records for table1's call: the folder's env settings under the table's step limit.
    env_config = {
        **read_policy_settings(warm_start)["env_config"],
        "max_steps": table1.EVAL_MAX_STEPS["webshop"],
    }
    settings = evaluation_settings("webshop", table1.EVAL_EPISODES[SMOLLM2_TABLE], env_config, warm_start)
    assert settings == {
        "env": "webshop",
        "episodes": 100,
        "env_config": {"max_steps": 15},
        "checkpoint": str(shipped),
        "policy_weights": "09d869e3b28a2bd8",
        "torch_dtype": None,
        "inference_backend": None,
    }
    evaluation = table1.ROOT / "docs" / "results" / "webshop_shipped_warm_start_eval_smollm2-135m-instruct"
    recorded = read_record(evaluation / "evaluation.json")
    assert recorded["checkpoint"] == "/work/ship/hgpo_rllib/warm_start/shipped/webshop-ca143eb9a6"
    shipping = sorted(table1.SHIPPING_EVALUATIONS.parent.glob(table1.SHIPPING_EVALUATIONS.name))
    assert evaluation in shipping
    reused = reusable_episodes(shipping, settings)
    assert set(reused["source"]) == {str(evaluation)}
    assert set(zip(reused["split"], reused["policy"], reused["seed"], strict=True)) == {
        ("test", "checkpoint", 123)
    }
    assert (len(reused), int(reused["won"].sum())) == (100, 19)


def test_the_real_models_table_keeps_its_own_folders_and_declares_its_reading_first(
    tmp_path: Path, model_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--model: runs under docs/results/table1/webshop_<model>/ and results/table1/webshop_<model>/,
    recording the model and its dtype; 100 test goals at 15 steps; before the first training run,
    the smallest difference 3 seeds x 100 goals can detect from the warm start's success (10%) and
    score; a later sitting in another dtype is refused, not pooled."""
    build_smollm2_warm_start()
    monkeypatch.setattr(table1, "cpu_dtype", lambda: "float32")  # what this machine computes in
    monkeypatch.setattr(table1, "RESULTS", tmp_path / "docs")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "docs" / SMOLLM2_TABLE
    trained: list[tuple[str, Path | None, bool]] = []

    def train(name, variant, seed, warm_start, iterations, run_dir, checkpoint, sampling, checkpoint_every):
        assert checkpoint_every == 1  # the default: a resume checkpoint every iteration
        trained.append((run_dir.name, checkpoint, (out / table1.DECLARED_READING).exists()))

    def evaluate(policy: Path, output: Path, episodes: int, env_config: dict, **_: object) -> None:
        assert (episodes, env_config) == (100, {"max_steps": 15})
        won = [g % 10 == 0 for g in range(episodes)]  # 10 of 100 goals
        games = pd.DataFrame(
            {"split": "test", "policy": "checkpoint", "seed": 123, "task_seed": range(episodes), "won": won}
        ).assign(score=[1.0 if w else 0.5 for w in won])
        output.mkdir(parents=True)
        games.to_csv(output / "episodes.csv", index=False)

    monkeypatch.setattr(table1, "train", train)
    monkeypatch.setattr(table1, "trained_checkpoint", lambda run_dir: run_dir)
    monkeypatch.setattr(table1, "evaluate", evaluate)
    monkeypatch.setattr(table1, "write_tables", lambda out: "")
    monkeypatch.setattr(table1.ray, "init", lambda **_: None)
    monkeypatch.setattr(table1.ray, "shutdown", lambda: None)
    monkeypatch.setattr(
        sys, "argv", ["table1.py", "--env", "webshop", "--model", table1.SMOLLM2, "--seeds", "0", "1", "2"]
    )
    table1.main()
    work = tmp_path / "results" / "table1" / SMOLLM2_TABLE
    assert trained == [
        (f"{run}-seed{seed}", work / f"{run}-seed{seed}", True)
        for seed in (0, 1, 2)
        for run in ("grpo", "hgpo-k-2-a-1")
    ]
    assert {p.name for p in (out / "runs").iterdir()} == {"warm-start-k-2", *(name for name, _, _ in trained)}
    settings = json.loads((out / "runs" / "hgpo-k-2-a-1-seed0" / "run.json").read_text())
    assert table1.without_weights(settings) == {
        "env": "webshop",
        "model": table1.SMOLLM2,
        "torch_dtype": "float32",
        "variant": "HGPO K=2 a=1",
        "seed": 0,
        "iterations": 6,
        "eval_episodes": 100,
        "eval_max_steps": 15,
    }
    # success: p = 0.1, 2.80 * sqrt(2 * 0.09 / 300) = 6.9 points; score 1 or 0.5: s2 = 0.0225, 3.4.
    reading = table1.declared_reading(out / "runs", "webshop", 3)
    assert reading.drop(columns=["warm start", "split"]).to_dict("records") == [
        {
            "measure": measure,
            "start": start,
            "seeds": 3,
            "games": 100,
            "minimum_detectable_difference": smallest,
            "sign_flip_floor": 0.25,
        }
        for measure, start, smallest in (("success", 10.0, 6.9), ("score", 55.0, 3.4))
    ]
    declared = (out / table1.DECLARED_READING).read_text()
    assert reading.to_markdown(index=False) in declared
    assert "cannot go below p = 0.25, so it cannot separate two rows at 5% here" in declared
    monkeypatch.setattr(table1, "cpu_dtype", lambda: "bfloat16")  # another default: not pooled
    with pytest.raises(SystemExit) as refused:
        table1.main()
    assert str(refused.value) == (
        f"{out / 'runs' / 'warm-start-k-2'} was run with other settings (torch_dtype was 'float32', now "
        f"'bfloat16'); choose another --output or the same settings{table1.CPU_DTYPE_HINT}"
    )


def test_the_tables_evaluations_play_in_the_dtype_and_engine_it_names(
    tmp_path: Path, model_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--eval-dtype/--eval-inference-backend reach every evaluation, the warm start's included, and
    each run records them: a later sitting without them is refused, not pooled."""
    build_smollm2_warm_start()
    monkeypatch.setattr(table1, "cpu_dtype", lambda: "float32")
    monkeypatch.setattr(table1, "RESULTS", tmp_path / "docs")
    monkeypatch.chdir(tmp_path)
    played: list[tuple[str, object, object]] = []

    def evaluate(policy: Path, output: Path, episodes: int, **kwargs: object) -> None:
        played.append((output.parent.name, kwargs["torch_dtype"], kwargs["inference_backend"]))
        games = {"split": "test", "policy": "checkpoint", "seed": 123, "task_seed": range(episodes)}
        output.mkdir(parents=True)
        pd.DataFrame(games).assign(won=False, score=0.5).to_csv(output / "episodes.csv", index=False)
        pd.DataFrame({"policy": ["checkpoint"], "seed": [123]}).to_csv(output / "per_seed.csv", index=False)

    monkeypatch.setattr(table1, "train", lambda *args, **kwargs: None)
    monkeypatch.setattr(table1, "trained_checkpoint", lambda run_dir: run_dir)
    monkeypatch.setattr(table1, "evaluate", evaluate)
    monkeypatch.setattr(table1, "write_tables", lambda out: "")
    monkeypatch.setattr(table1.ray, "init", lambda **_: None)
    monkeypatch.setattr(table1.ray, "shutdown", lambda: None)
    argv = ["table1.py", "--env", "webshop", "--model", table1.SMOLLM2, "--seeds", "0", "--variants", "GRPO"]
    monkeypatch.setattr(sys, "argv", [*argv, "--eval-dtype", "bfloat16", "--eval-inference-backend", "vllm"])
    table1.main()
    assert played == [("warm-start-k-2", "bfloat16", "vllm"), ("grpo-seed0", "bfloat16", "vllm")]
    settings = json.loads(
        (tmp_path / "docs" / SMOLLM2_TABLE / "runs" / "grpo-seed0" / "run.json").read_text()
    )
    assert (settings["eval_torch_dtype"], settings["eval_inference_backend"]) == ("bfloat16", "vllm")
    monkeypatch.setattr(sys, "argv", argv)  # the policies' own dtype and engine: other evaluations
    with pytest.raises(SystemExit, match="warm-start-k-2 was run with other settings") as refused:
        table1.main()
    assert "(eval_inference_backend was 'vllm', now None; eval_torch_dtype was 'bfloat16', now None);" in str(
        refused.value
    )
    assert table1.CPU_DTYPE_HINT not in str(refused.value)
    # "cpu" is recorded as the dtype it names here (bfloat16 above): a CPU without native bf16 would
    # play float32 and is refused, not pooled.
    monkeypatch.setattr(policy_loading, "cpu_dtype", lambda: "bfloat16")
    monkeypatch.setattr(sys, "argv", [*argv, "--eval-dtype", "cpu", "--eval-inference-backend", "vllm"])
    table1.main()
    assert len(played) == 2  # the same settings: evaluated already
    monkeypatch.setattr(policy_loading, "cpu_dtype", lambda: "float32")
    with pytest.raises(SystemExit, match=r"\(eval_torch_dtype was 'bfloat16', now 'float32'\)"):
        table1.main()


def write_signal_check(
    run_dir: Path, differing: list[int], success: list[float], groups_per_iteration: int = 2
) -> None:
    """A signal check's files: groups of 2, 11 minutes an iteration, loads 2 and 3; every group is
    informative (invalid-answer penalties set the others apart), the ``differing`` by their rewards."""
    run_dir.mkdir(parents=True, exist_ok=True)
    iterations = len(differing)
    curve = pd.DataFrame(
        {
            "iteration": range(1, iterations + 1),
            "minutes": [11.0 * (i + 1) for i in range(iterations)],
            "success": success,
            "informative_groups": [groups_per_iteration] * iterations,
            "reward_differing_groups": differing,
            "groups": [groups_per_iteration] * iterations,
            "load_1min": [2.0, 3.0][:iterations],
        }
    )
    curve.to_csv(run_dir / "curve.csv", index=False)
    trained = {"group_size": 2, "groups_per_iteration": groups_per_iteration}
    (run_dir / "trained.json").write_text(json.dumps(trained))


def test_the_signal_check_sizes_runs_for_30_informative_groups(tmp_path: Path) -> None:
    """1 of 4 groups differed: n groups per iteration see n / 4 informative groups, so 30 take
    ceil(120 / n) iterations of 11 * n / 2 minutes."""
    write_signal_check(tmp_path, [1, 0], [0.25, 0.0])
    curve = pd.read_csv(tmp_path / "curve.csv")
    sizing = table1.signal_sizing(curve, group_size=2, groups_per_iteration=2)
    assert (sizing["status"], sizing["differing_fraction"], sizing["success"]) == ("sized", 0.25, 12.5)
    assert (sizing["informative_groups"], sizing["reward_differing_groups"]) == (4, 1)
    assert (sizing["episodes"], sizing["minutes_per_iteration"], sizing["load_1min_median"]) == (8, 11.0, 2.5)
    columns = ("groups_per_iteration", "iterations", "episodes", "minutes_per_run")
    assert [tuple(plan[c] for c in columns) for plan in sizing["plans"]] == [
        (2, 60, 240, 660),
        (4, 30, 240, 660),
        (8, 15, 240, 660),
        (16, 8, 256, 704),
    ]
    assert sizing["plans"][3]["expected_informative_groups"] == 32.0
    assert (sizing["plans"][0]["hours_grpo_hgpo"], sizing["plans"][0]["hours_with_gigpo"]) == (66.0, 99.0)
    assert sizing["reason"] == "1 of 4 groups had differing rewards"
    below = table1.signal_sizing(curve.assign(success=[0.1, 0.0]), group_size=2, groups_per_iteration=2)
    assert below["reason"].endswith("training success 5.0% is below the warm-start target (10%)")
    blocked = table1.signal_sizing(curve.assign(reward_differing_groups=0, success=0.0), 2, 2)
    assert (blocked["status"], blocked["plans"]) == ("blocked", [])
    assert blocked["reason"] == (
        "no group of 4 had differing rewards (training success 0.0%, below the warm-start target of 10%)"
    )
    assert "**Blocked**: no group of 4" in table1.signal_report(blocked, "python benchmarks/table1.py")


def test_the_signal_check_trains_once_then_sizes_from_its_files(
    tmp_path: Path, model_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--signal-check trains GRPO from the warm start for 2 iterations without a checkpoint, at the
    sampling asked for; a rerun only sizes again, other sampling is checked in its own folder, and a
    check of other settings (another dtype) is refused, not mixed in."""
    build_smollm2_warm_start()
    out = tmp_path / "out"
    calls: list[tuple] = []

    def train(name, variant, seed, warm_start, iterations, run_dir, checkpoint, sampling) -> None:
        calls.append((name, variant, seed, iterations, run_dir, checkpoint, sampling))
        write_signal_check(run_dir, [1, 2], [0.25, 0.5], sampling["groups_per_iteration"])

    monkeypatch.setattr(table1, "train", train)
    monkeypatch.setattr(table1.ray, "init", lambda **_: None)
    monkeypatch.setattr(table1.ray, "shutdown", lambda: None)
    command = ["table1.py", "--env", "webshop", "--model", table1.SMOLLM2, "--output", str(out)]
    monkeypatch.setattr(sys, "argv", [*command, "--signal-check", "--groups-per-iteration", "4"])
    table1.main()
    table1.main()
    grpo = table1.VARIANTS[SMOLLM2_TABLE]["GRPO"]
    assert calls == [("GRPO", grpo, 0, 2, out / "signal_check_groups4", None, {"groups_per_iteration": 4})]
    sizing = json.loads((out / "signal_check_groups4.json").read_text())
    # 3 of 8 groups: 4 groups per iteration see 1.5 informative ones, 30 take 20 iterations.
    assert (sizing["reward_differing_groups"], sizing["groups"]) == (3, 8)
    assert sizing["plans"][0]["iterations"] == 20
    report = (out / "signal_check_groups4.md").read_text()
    assert "--model smollm2-135m-instruct --output" in report and "3 of 8 groups had differing" in report
    other = [
        "--signal-check",
        "--groups-per-iteration",
        "2",
        "--train-max-steps",
        "15",
        "--temperature",
        "0.7",
    ]
    monkeypatch.setattr(sys, "argv", [*command, *other])
    table1.main()
    sampling = {"groups_per_iteration": 2, "max_steps": 15, "temperature": 0.7}
    assert calls[1] == ("GRPO", grpo, 0, 2, out / "signal_check_groups2_steps15_temp0.7", None, sampling)
    assert (out / "signal_check_groups4.json").read_text() == json.dumps(sizing, indent=2)  # kept
    monkeypatch.setattr(table1, "cpu_dtype", lambda: "float16")  # another default: not mixed in
    with pytest.raises(SystemExit, match="signal_check_groups2_steps15_temp0.7 was run with other settings"):
        table1.main()


class Clock:
    """``time.perf_counter`` of a training whose every iteration takes 6 minutes."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def perf_counter(self) -> float:
        return self.seconds


class FakeAlgo:
    """An Algorithm's train/save/restore/stop, its state the iteration; Ctrl-C in the iteration
    ``interrupt_train`` or in the save after ``interrupt_save``; its learner reports HGPO's step
    grouping unless ``grouping`` is False (GRPO's)."""

    def __init__(
        self, clock: Clock, interrupt_train: int = 0, interrupt_save: int = 0, grouping: bool = True
    ) -> None:
        self.clock, self.interrupt_train, self.interrupt_save = clock, interrupt_train, interrupt_save
        self.grouping = grouping
        self.iteration = 0
        self.calls: list[tuple[str, int]] = []

    def train(self) -> dict:
        if self.iteration + 1 == self.interrupt_train:
            raise KeyboardInterrupt
        self.iteration += 1
        self.clock.seconds += 360
        runners = {SUCCESS_RATE: self.iteration / 10, "episode_len_mean": 5.0, INVALID_ACTION_RATE: 0.25}
        learner = {"num_informative_groups": 2, "num_groups": 4, "num_reward_differing_groups": 1}
        if self.grouping:
            learner |= {
                "level1_singleton_frac": self.iteration / 20,
                "level2_singleton_frac": 0.5,
                "all_levels_singleton_frac": self.iteration / 20,
                "level2_group_size_mean": 1.5,
            }
        return {
            "training_iteration": self.iteration,
            "env_runners": runners,
            "learners": {"default_policy": learner},
        }

    def save_to_path(self, path: str) -> None:
        self.calls.append(("save", self.iteration))
        Path(path).mkdir(parents=True, exist_ok=True)  # as RLlib's: into a folder already there
        if self.iteration == self.interrupt_save:
            raise KeyboardInterrupt  # before its state is written
        (Path(path) / "state.json").write_text(json.dumps({"iteration": self.iteration}))

    def restore_from_path(self, path: str) -> None:
        self.iteration = json.loads((Path(path) / "state.json").read_text())["iteration"]
        self.calls.append(("restore", self.iteration))

    def stop(self) -> None:
        self.calls.append(("stop", self.iteration))


class FakeConfig:
    """What train() reads of a config: its groups, step limit and temperature."""

    group_size, groups_per_iteration, env_config, temperature = 2, 2, {"max_steps": 8}, 0.6

    def reporting(self, **_: object) -> FakeConfig:
        return self

    def debugging(self, **_: object) -> FakeConfig:
        return self


@pytest.fixture
def fake_training(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """train() without Ray or models: :class:`FakeConfig`, 6 minutes an iteration, load 2."""
    clock = Clock()
    monkeypatch.setattr(table1, "variant_config", lambda variant, warm_start: FakeConfig())
    monkeypatch.setattr(table1, "time", clock)
    monkeypatch.setattr(table1.os, "getloadavg", lambda: (2.0, 1.0, 1.0))
    return clock


def train_grpo(out: Path, algo: FakeAlgo, monkeypatch: pytest.MonkeyPatch, checkpoint_every: int = 1) -> None:
    """table1.train() of GRPO seed 0 for 5 iterations into ``out/run`` and ``out/work/grpo-seed0``, from
    the warm start ``out/../warm``."""
    monkeypatch.setattr(table1, "build_algo", lambda config: algo)
    run_dir = out / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (run_dir / "run.json").exists():
        (run_dir / "run.json").write_text(json.dumps({"variant": "GRPO", "seed": 0, "iterations": 5}))
    grpo = table1.VARIANTS["alfworld"]["GRPO"]
    checkpoint = out / "work" / "grpo-seed0"
    table1.train(
        "GRPO", grpo, 0, out.parent / "warm", 5, run_dir, checkpoint, {}, checkpoint_every=checkpoint_every
    )


def test_an_interrupted_run_resumes_and_ends_as_an_uninterrupted_one(
    tmp_path: Path, fake_training: Clock, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Ctrl-C in iteration 3 of 5 keeps the resume checkpoint of iteration 2; the rerun restores it and
    trains 3 to 5: the same curve, trained.json and final checkpoint as a run never interrupted, its
    minutes summed over the sittings (6 a kept iteration), and no resume folder left."""
    whole = FakeAlgo(fake_training)
    train_grpo(tmp_path / "whole", whole, monkeypatch)
    assert whole.calls == [("save", 1), ("save", 2), ("save", 3), ("save", 4), ("save", 5), ("stop", 5)]
    first = FakeAlgo(fake_training, interrupt_train=3)
    with pytest.raises(KeyboardInterrupt):
        train_grpo(tmp_path / "cut", first, monkeypatch)
    resume = tmp_path / "cut" / "work" / "grpo-seed0.resume"
    assert [p.name for p in resume.iterdir()] == ["iteration_000002"]
    assert len(pd.read_csv(resume / "iteration_000002" / "curve.csv")) == 2
    fake_training.seconds += 3600  # the interrupted iteration's and the pause's time is not counted
    capsys.readouterr()
    second = FakeAlgo(fake_training)
    train_grpo(tmp_path / "cut", second, monkeypatch)
    assert capsys.readouterr().out == "resuming grpo-seed0 from iteration 3 of 5\n"
    assert first.calls == [("save", 1), ("save", 2), ("stop", 2)]
    assert second.calls == [("restore", 2), ("save", 3), ("save", 4), ("save", 5), ("stop", 5)]
    curve = pd.read_csv(tmp_path / "cut" / "run" / "curve.csv")
    assert curve["iteration"].tolist() == [1, 2, 3, 4, 5]
    assert curve["minutes"].tolist() == [6.0, 12.0, 18.0, 24.0, 30.0]
    assert curve["success"].tolist() == [0.1, 0.2, 0.3, 0.4, 0.5]
    grouping = ["level1_singleton_frac", "level2_singleton_frac", "all_levels_singleton_frac"]
    assert [column for column in curve if "singleton" in column or "level" in column] == grouping
    assert curve[grouping].to_numpy().tolist() == [[i / 20, 0.5, i / 20] for i in range(1, 6)]
    assert (tmp_path / "cut" / "run" / "curve.csv").read_text() == (
        tmp_path / "whole" / "run" / "curve.csv"
    ).read_text()
    trained = {
        run: json.loads((tmp_path / run / "run" / "trained.json").read_text()) for run in ("whole", "cut")
    }
    for run, record in trained.items():
        checkpoint = tmp_path / run / "work" / "grpo-seed0"
        assert record.pop("checkpoint") == str(checkpoint)
        assert json.loads((checkpoint / "state.json").read_text()) == {"iteration": 5}
        assert not (tmp_path / run / "work" / "grpo-seed0.resume").exists()
    assert trained["cut"] == trained["whole"]
    assert trained["cut"] == {
        "variant": "GRPO",
        "seed": 0,
        "iterations": 5,
        "group_size": 2,
        "groups_per_iteration": 2,
        "max_steps": 8,
        "temperature": 0.6,
        "informative_groups": 10,
        "reward_differing_groups": 5,
        "wall_minutes": 30.0,
        "load_1min_median": 2.0,
        "warm_start": str(tmp_path / "warm"),
    }


def test_an_estimator_without_step_groups_has_no_grouping_columns(
    tmp_path: Path, fake_training: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    train_grpo(tmp_path, FakeAlgo(fake_training, grouping=False), monkeypatch)
    curve = pd.read_csv(tmp_path / "run" / "curve.csv")
    assert len(curve) == 5 and not [column for column in curve if "singleton" in column]


def test_a_half_written_resume_checkpoint_is_ignored(
    tmp_path: Path, fake_training: Clock, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Ctrl-C inside the save after iteration 4 (every 2nd iteration saved) leaves its folder under a
    temporary name, iteration 2's still whole: the rerun goes on from 3. A temporary folder alone is no
    resume checkpoint, nor is one saved for another run folder (another --output, same --work-dir)."""
    first = FakeAlgo(fake_training, interrupt_save=4)
    with pytest.raises(KeyboardInterrupt):
        train_grpo(tmp_path, first, monkeypatch, checkpoint_every=2)
    resume = tmp_path / "work" / "grpo-seed0.resume"
    assert sorted(p.name for p in resume.iterdir()) == [".iteration_000004.partial", "iteration_000002"]
    assert len(pd.read_csv(tmp_path / "run" / "curve.csv")) == 4  # written before the save
    other = tmp_path / "other" / "run"
    other.mkdir(parents=True)
    (other / "run.json").write_text(json.dumps({"variant": "GRPO", "seed": 0, "iterations": 5}))
    grpo = table1.VARIANTS["alfworld"]["GRPO"]
    with pytest.raises(SystemExit, match=r"iteration_000002 was saved by another run \(.*/run, settings"):
        table1.train("GRPO", grpo, 0, tmp_path / "warm", 5, other, tmp_path / "work" / "grpo-seed0", {})
    capsys.readouterr()
    second = FakeAlgo(fake_training)
    train_grpo(tmp_path, second, monkeypatch, checkpoint_every=2)
    assert capsys.readouterr().out == "resuming grpo-seed0 from iteration 3 of 5\n"
    assert second.calls == [("restore", 2), ("save", 4), ("save", 5), ("stop", 5)]
    assert pd.read_csv(tmp_path / "run" / "curve.csv")["iteration"].tolist() == [1, 2, 3, 4, 5]
    assert not resume.exists()
    # Only a temporary folder (its marker never written): the run starts from iteration 1.
    (tmp_path / "run" / "trained.json").unlink()
    partial = resume / ".iteration_000003.partial"
    (partial / "algorithm").mkdir(parents=True)
    (partial / "algorithm" / "state.json").write_text(json.dumps({"iteration": 3}))
    third = FakeAlgo(fake_training)
    train_grpo(tmp_path, third, monkeypatch, checkpoint_every=2)
    assert capsys.readouterr().out == ""
    assert third.calls == [("save", 2), ("save", 4), ("save", 5), ("stop", 5)]
    assert json.loads((tmp_path / "run" / "trained.json").read_text())["iterations"] == 5
    assert not resume.exists()
