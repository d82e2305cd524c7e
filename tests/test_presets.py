"""The tuned examples' run settings (hgpo_rllib.experiments.presets): the ``HGPO_*`` switches read in
one place (RunSettings), the flags of ``python tuned_examples/<file>.py``, the paper's GPU presets and
the run names."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest
from helpers import TUNED

from hgpo_rllib import HGPOConfig, cli
from hgpo_rllib.cli import scripts
from hgpo_rllib.experiments.experiment_file import load_experiment_file
from hgpo_rllib.experiments.memory_plan import MODEL_CONFIGS_DIR
from hgpo_rllib.experiments.presets import (
    ENV_VARS,
    RunSettings,
    apply_paper_preset,
    estimator_run_name,
)


@pytest.mark.parametrize(
    "example", ["hgpo_keychest.py", "hgpo_alfworld.py", "hgpo_webshop.py", "sweep_hgpo.py"]
)
def test_tuned_examples_define_a_valid_config(example: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HGPO_K", "4")
    monkeypatch.setenv("HGPO_ESTIMATOR", "gigpo")
    experiment = load_experiment_file(TUNED / example)
    experiment.config.validate()
    assert experiment.config.history_length == 4 and experiment.config.estimator == "gigpo"
    assert experiment.stop["training_iteration"] >= 1
    if example != "sweep_hgpo.py":
        assert experiment.name.endswith("k4_gigpo_alpha1.0_base0")


def test_tuned_example_flags_become_hgpo_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    """``python tuned_examples/x.py --flags`` sets the HGPO_* variables, then runs ``rllib train file``
    with the remaining flags; the file reads the variables."""
    for var in ("HGPO_PRESET", "HGPO_MODEL", "HGPO_ESTIMATOR", "HGPO_K", "HGPO_ALPHA", "HGPO_BASE_GROUP"):
        monkeypatch.delenv(var, raising=False)
    calls = []
    monkeypatch.setattr(scripts, "main", lambda argv: calls.append(argv) or 0)
    example = str(TUNED / "hgpo_keychest.py")
    flags = ["--estimator", "grpo", "-k", "3", "--alpha", "0.5", "--base-group", "--stop", '{"a": 1}']
    try:
        assert scripts.run_as_script(example, flags) == 0
        assert calls == [["train", "file", example, "--stop", '{"a": 1}']]
        config = load_experiment_file(example).config
    finally:
        for var in ("HGPO_ESTIMATOR", "HGPO_K", "HGPO_ALPHA", "HGPO_BASE_GROUP"):
            os.environ.pop(var, None)
    assert (config.estimator, config.history_length, config.length_weight_alpha, config.base_group) == (
        "grpo",
        3,
        0.5,
        True,
    )


def test_paper_preset_switch_builds_a_valid_gpu_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The architecture alone (the memory plan reads the model's sizes from it).
    shutil.copy(MODEL_CONFIGS_DIR / "qwen2.5-1.5b" / "config.json", tmp_path / "config.json")
    monkeypatch.setenv("HGPO_PRESET", "paper-1.5b")
    monkeypatch.setenv("HGPO_MODEL", str(tmp_path))
    experiment = load_experiment_file(TUNED / "hgpo_webshop.py")
    config = experiment.config
    config.validate()
    assert experiment.name == "webshop_paper-1.5b_k2_hgpo_alpha1.0_base0"
    assert config.model_config["model"] == str(tmp_path) and config.num_gpus_per_learner == 1
    assert (config.minibatch_size, config.micro_batch_size, config.lr) == (64, 4, 1e-6)
    assert experiment.stop == {"training_iteration": 160}
    monkeypatch.setenv("HGPO_MODEL", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"model_config\['model'\]=.*missing.*does not exist"):
        load_experiment_file(TUNED / "hgpo_webshop.py").config.validate()


def test_bad_hgpo_switch_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HGPO_K", "two")
    assert cli.main(["train", "file", str(TUNED / "hgpo_keychest.py")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad HGPO_* environment variable" in err


def test_paper_preset_matches_the_published_settings() -> None:
    settings = RunSettings(preset="paper-7b", model="/models/Qwen2.5-7B-Instruct", history_length=4)
    config = apply_paper_preset(HGPOConfig(), "webshop", settings)
    # 7B: full fine-tuning at the paper's lr, sharded over the two learners with offloaded shards.
    assert (config.group_size, config.groups_per_iteration, config.lr) == (8, 16, 1e-6)
    assert "lora" not in config.user_model_config()
    assert (config.learner_sharding, config.learner_offload) == ("fsdp", True)
    assert (config.minibatch_size, config.micro_batch_size, config.adv_mode) == (64, 2, "mean_norm")
    assert config.env_config["max_steps"] == 30 and config.history_length == 4
    assert (config.num_learners, config.num_gpus_per_learner, config.num_env_runners) == (2, 1, 2)
    assert config.num_envs_per_env_runner * config.num_env_runners == 128
    assert config.evaluation_num_env_runners == 1  # never in the driver: a GPU runner of its own
    assert config.evaluation_config["num_gpus_per_env_runner"] == 1
    assert config.model_config["torch_dtype"] == "bfloat16" and config.recompute_old_logp
    assert settings.run_name == "paper-7b_k4_hgpo_alpha1.0_base0"
    with pytest.raises(ValueError, match="HGPO_MODEL"):
        RunSettings(preset="paper-1.5b")


def test_run_settings_read_every_documented_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {
        "HGPO_PRESET": "rehearsal",
        "HGPO_MODEL": "/models/m",
        "HGPO_ESTIMATOR": "grpo",
        "HGPO_K": "4",
        "HGPO_ALPHA": "0.5",
        "HGPO_BASE_GROUP": "yes",
        "HGPO_WARM_START": "/ws",
        "HGPO_CACHE": "/cache",
        "HGPO_CRITIC": "/models/c",
        "HGPO_LLM_SHARING": "shared",
        "HGPO_NORMALIZE_BY": "trajectory",
    }
    assert sorted(ENV_VARS.values()) == sorted(values)
    assert set(ENV_VARS) == {f.name for f in dataclasses.fields(RunSettings)}
    for var, value in values.items():
        monkeypatch.setenv(var, value)
    settings = RunSettings.from_env()
    assert settings == RunSettings(
        preset="rehearsal",
        model="/models/m",
        estimator="grpo",
        history_length=4,
        alpha=0.5,
        base_group=True,
        warm_start="/ws",
        cache_dir="/cache",
        critic="/models/c",
        llm_sharing="shared",
        normalize_by="trajectory",
    )
    assert settings.run_name == "rehearsal_k4_grpo_alpha0.5_base1"
    for var in values:
        monkeypatch.delenv(var)
    assert RunSettings.from_env() == RunSettings()  # the CPU defaults
    assert (RunSettings().warm_start, RunSettings().cache_dir) == (None, None)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("HGPO_BASE_GROUP", "ture", r"HGPO_BASE_GROUP='ture' is not a boolean"),
        ("HGPO_BASE_GROUP", "2", r"HGPO_BASE_GROUP='2' is not a boolean"),
        ("HGPO_K", "two", r"invalid literal for int"),
        ("HGPO_ALPHA", "high", r"could not convert string to float"),
        ("HGPO_ESTIMATOR", "ppo", r"HGPO_ESTIMATOR / --estimator must be one of"),
        ("HGPO_PRESET", "paper-3b", r"HGPO_PRESET / --preset must be one of"),
        ("HGPO_LLM_SHARING", "some", r"HGPO_LLM_SHARING must be one of \('separate', 'shared'\)"),
        ("HGPO_NORMALIZE_BY", "group", r"HGPO_NORMALIZE_BY must be one of \('trajectory', 'agent'\)"),
    ],
)
def test_bad_switch_values_are_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=rf"bad HGPO_\* environment variable: .*{message}"):
        RunSettings.from_env()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", True), ("True", True), (" on ", True), ("no", False), ("", False), ("OFF", False)],
)
def test_base_group_switch_reads_the_usual_spellings(
    monkeypatch: pytest.MonkeyPatch, text: str, expected: bool
) -> None:
    monkeypatch.setenv("HGPO_BASE_GROUP", text)
    assert RunSettings.from_env().base_group is expected


def test_estimator_run_name_is_the_authors_naming() -> None:
    assert estimator_run_name(2, "hgpo", 1.0, False) == "k2_hgpo_alpha1.0_base0"
    assert estimator_run_name(4, "gigpo", 0.5, True) == "k4_gigpo_alpha0.5_base1"
    assert RunSettings(history_length=4, estimator="gigpo", alpha=0.5).run_name == "k4_gigpo_alpha0.5_base0"
    assert RunSettings(warm_start="none").run_name == "demo_k2_hgpo_alpha1.0_base0"  # never the real run's


def test_the_main_job_builds_nothing_when_its_file_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """``hgpo_alfworld.py`` defines ``prepare()`` for ``rllib train file`` to call; reading the file
    (``rllib train file``, ``python -m hgpo_rllib.memory``, this test) builds no warm start."""
    from hgpo_rllib.warm_start import cache

    built = []
    monkeypatch.setattr(cache, "build_warm_start", lambda *args: built.append(args))
    experiment = load_experiment_file(TUNED / "hgpo_alfworld.py")  # HGPO_WARM_START=none (conftest)
    assert callable(experiment.prepare)
    experiment.prepare()  # the random-init demo needs no warm start
    assert built == []


@pytest.mark.usefixtures("ray_session")
def test_the_sweep_runs_each_setting_once(tmp_path: Path) -> None:
    """Alpha is swept for HGPO only: GRPO and GiGPO ignore it, and a grid made 4 duplicate trials."""
    from ray import tune

    from hgpo_rllib.cli.train import tune_config

    experiment = load_experiment_file(TUNED / "sweep_hgpo.py")
    base = {k: experiment.config.to_dict()[k] for k in ("estimator", "history_length", "length_weight_alpha")}
    tuner = tune.Tuner(
        lambda config: tune.report({"done": True}),
        param_space={**base, **experiment.param_space},
        tune_config=tune_config(experiment, num_samples=1, max_concurrent_trials=None),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    )
    trials = [
        (r.config["estimator"], r.config["history_length"], r.config["length_weight_alpha"])
        for r in tuner.fit()
    ]
    assert sorted(trials) == sorted(
        (estimator, k, alpha)
        for k in (2, 4)
        for estimator, alpha in (("grpo", 1.0), ("gigpo", 1.0), ("hgpo", 0.0), ("hgpo", 1.0))
    )
