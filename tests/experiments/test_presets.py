"""The tuned examples' presets (hgpo_rllib.experiments.cpu, .paper): the paper's GPU presets, the
sweep, and the main job's file building nothing when read. The typed switches: test_settings.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import TUNED

from hgpo_rllib import HGPOConfig
from hgpo_rllib.experiments.experiment_file import load_experiment_file
from hgpo_rllib.experiments.memory_plan import MODEL_CONFIGS_DIR
from hgpo_rllib.experiments.naming import estimator_run_name
from hgpo_rllib.experiments.paper import apply_paper_preset
from hgpo_rllib.experiments.settings import RunSettings


@pytest.mark.parametrize(
    "example", ["hgpo_keychest.py", "hgpo_alfworld.py", "hgpo_webshop.py", "sweep_hgpo.py"]
)
def test_tuned_examples_define_a_valid_config(example: str) -> None:
    settings = {} if example == "sweep_hgpo.py" else {"history_length": 4, "estimator": "gigpo"}
    if example == "hgpo_alfworld.py":
        settings["warm_start"] = "none"
    experiment = load_experiment_file(TUNED / example, settings)
    experiment.config.validate()
    assert experiment.stop["training_iteration"] >= 1
    if example != "sweep_hgpo.py":
        assert experiment.config.history_length == 4 and experiment.config.estimator == "gigpo"
        assert experiment.run_name().endswith("k4_gigpo_alpha1.0_base0")


def test_paper_preset_switch_builds_a_valid_gpu_config(tmp_path: Path) -> None:
    # The architecture alone (the memory plan reads the model's sizes from it).
    shutil.copy(MODEL_CONFIGS_DIR / "qwen2.5-1.5b" / "config.json", tmp_path / "config.json")
    settings = {"preset": "paper-1.5b", "model": str(tmp_path)}
    experiment = load_experiment_file(TUNED / "hgpo_webshop.py", settings)
    config = experiment.config
    config.validate()
    assert experiment.run_name() == "webshop_paper-1.5b_k2_hgpo_alpha1.0_base0"
    assert config.model_config["model"] == str(tmp_path) and config.num_gpus_per_learner == 1
    assert (config.minibatch_size, config.micro_batch_size, config.lr) == (64, 4, 1e-6)
    assert experiment.stop == {"training_iteration": 160}
    missing = {**settings, "model": str(tmp_path / "missing")}
    with pytest.raises(ValueError, match=r"model_config\['model'\]=.*missing.* is neither a local"):
        load_experiment_file(TUNED / "hgpo_webshop.py", missing).config.validate()


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
    assert settings.name_tag == "paper-7b_"
    with pytest.raises(ValueError, match="--preset paper-1.5b needs --model"):
        RunSettings(preset="paper-1.5b")


def test_estimator_run_name_is_the_authors_naming() -> None:
    assert estimator_run_name(2, "hgpo", 1.0, False) == "k2_hgpo_alpha1.0_base0"
    assert estimator_run_name(4, "gigpo", 0.5, True) == "k4_gigpo_alpha0.5_base1"
    assert RunSettings(warm_start="none").name_tag == "demo_"  # never the real run's name
    assert RunSettings().name_tag == ""


def test_the_main_job_builds_nothing_when_its_file_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """``hgpo_alfworld.py`` defines ``prepare()`` for ``rllib train file`` to call; reading the file
    (``rllib train file``, ``rllib memory``, this test) builds no warm start."""
    from hgpo_rllib.warm_start import cache

    built = []
    monkeypatch.setattr(cache, "build_warm_start", lambda *args: built.append(args))
    experiment = load_experiment_file(TUNED / "hgpo_alfworld.py", {"warm_start": "none"})
    assert callable(experiment.prepare)
    experiment.prepare()  # the random-init demo needs no warm start
    assert built == []


@pytest.mark.usefixtures("ray_session")
def test_the_sweep_runs_each_setting_once(tmp_path: Path) -> None:
    """Alpha is swept for HGPO only: GRPO and GiGPO ignore it, and a grid made 4 duplicate trials."""
    from ray import tune

    from hgpo_rllib.cli.tune_run import tune_config

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
