"""The user's entry points: ``rllib train file`` through Ray Tune (Tensorboard events, trial names,
no overwriting, resume), a 2-trial sweep, the tuned examples, and ``rllib evaluate``."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import ray
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from hgpo_rllib import cli
from hgpo_rllib.evaluation import evaluate
from hgpo_rllib.presets import RunSettings, apply_paper_preset

ROOT = Path(__file__).resolve().parents[1]
TUNED = ROOT / "tuned_examples"

EXPERIMENT = textwrap.dedent(
    """
    from ray import tune
    from envs.keychest.env import COMMANDS
    from hgpo_rllib import HGPOConfig

    config = (
        HGPOConfig()
        .environment("keychest", env_config={{"max_steps": 4}})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
        .rl_module(model_config={{
            "tiny_model": {{"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                           "num_attention_heads": 2, "num_key_value_heads": 1}},
            "tokenizer_vocab_size": 400,
            "action_vocabulary": list(COMMANDS),
            "constrain_to_admissible": True,
        }})
        .training(group_size=2, groups_per_iteration=2, max_new_tokens=1, max_prompt_tokens=160,
                  minibatch_size=8, micro_batch_size=8, lr=1e-3, kl_coeff=0.0)
        .debugging(seed=0)
    )
    stop = {{"training_iteration": 2}}
    {extra}
    """
)
TAGS = ("ray/tune/env_runners/success_rate", "ray/tune/learners/default_policy/advantage_mean")


@pytest.fixture(scope="module", autouse=True)
def ray_session() -> Any:
    ray.init(num_cpus=4, include_dashboard=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def write_experiment(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "experiment.py"
    path.write_text(EXPERIMENT.format(extra=extra))
    return path


def scalar_tags(trial_dir: Path) -> set[str]:
    events = list(trial_dir.glob("events.out.tfevents.*"))
    assert events, f"no Tensorboard event file in {trial_dir}"
    accumulator = EventAccumulator(str(events[0]))
    accumulator.Reload()
    return set(accumulator.Tags()["scalars"])


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ``rllib train file`` run of 2 iterations with a checkpoint at the end."""
    tmp = tmp_path_factory.mktemp("train")
    path = write_experiment(tmp)
    args = ["train", "file", str(path), "--storage-path", str(tmp / "results"), "--name", "run"]
    assert cli.main(args) == 0
    return tmp / "results" / "run"


def test_train_file_writes_tensorboard_events_and_a_checkpoint(trained_run: Path) -> None:
    (trial,) = [d for d in trained_run.iterdir() if d.is_dir()]
    assert trial.name.startswith("k2_hgpo_alpha1.0_base0_")
    assert set(TAGS) <= scalar_tags(trial)
    progress = pd.read_csv(trial / "progress.csv")
    assert progress["training_iteration"].tolist() == [1, 2]
    assert list(trial.glob("checkpoint_*/class_and_ctor_args.pkl"))


def test_existing_experiment_is_never_overwritten(trained_run: Path) -> None:
    experiment = trained_run.parent.parent / "experiment.py"
    before = sorted(p.name for p in trained_run.rglob("*"))
    args = ["train", "file", str(experiment), "--storage-path", str(trained_run.parent), "--name", "run"]
    assert cli.main(args) == 2
    assert sorted(p.name for p in trained_run.rglob("*")) == before


def test_resume_continues_a_crashed_run_from_its_checkpoint(tmp_path: Path) -> None:
    marker = tmp_path / "crashed"
    crash_once = f"""
    def crash_once(*, algorithm, result, **kwargs):
        if result["training_iteration"] == 3 and not __import__("os").path.exists({str(marker)!r}):
            open({str(marker)!r}, "w").close()
            raise RuntimeError("simulated crash")
    config.callbacks(on_train_result=crash_once)
    stop = {{"training_iteration": 4}}
    """
    path = write_experiment(tmp_path, textwrap.dedent(crash_once))
    args = ["train", "file", str(path), "--storage-path", str(tmp_path / "out"), "--name", "run",
            "--checkpoint-freq", "1", "--max-failures", "0"]
    assert cli.main(args) == 1 and marker.exists()  # the trial errored in iteration 3 (no retries)
    assert cli.main([*args, "--resume"]) == 0
    (trial,) = [d for d in (tmp_path / "out" / "run").iterdir() if d.is_dir()]
    iterations = pd.read_json(trial / "result.json", lines=True)["training_iteration"].tolist()
    assert iterations == [1, 2, 3, 4]  # the crashed 3rd reported nothing; 3 and 4 from checkpoint 2


def test_sweep_of_two_trials_each_writes_tensorboard_events(tmp_path: Path) -> None:
    path = write_experiment(tmp_path, 'param_space = {"history_length": tune.grid_search([1, 2])}')
    code = cli.main(
        ["train", "file", str(path), "--storage-path", str(tmp_path / "out"), "--name", "sweep",
         "--max-concurrent-trials", "1"]
    )
    assert code == 0
    trials = sorted(d for d in (tmp_path / "out" / "sweep").iterdir() if d.is_dir())
    assert [t.name.split("_hgpo")[0] for t in trials] == ["k1", "k2"]
    for trial in trials:
        assert set(TAGS) <= scalar_tags(trial)


def test_cli_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train", "file", str(tmp_path / "missing.py")]) == 2
    assert "not found" in capsys.readouterr().err
    bad = tmp_path / "bad.py"
    bad.write_text("config = 3\n")
    assert cli.main(["train", "file", str(bad)]) == 2
    assert "must define `config`" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["train", "file", str(bad), "--stop", "[1]"])


def test_config_flag_merges_settings_and_model_config_into_the_file(tmp_path: Path) -> None:
    experiment = cli.load_experiment_file(write_experiment(tmp_path))
    cli.apply_config_overrides(
        experiment.config,
        {"lr": 2e-3, "num_envs_per_env_runner": 8, "evaluation_interval": 3,
         "model_config": {"torch_dtype": "bfloat16", "tokenizer_vocab_size": 300}},
    )
    config = experiment.config
    assert (config.lr, config.num_envs_per_env_runner, config.evaluation_interval) == (2e-3, 8, 3)
    model_config = config._user_model_config()
    assert model_config["torch_dtype"] == "bfloat16" and model_config["tokenizer_vocab_size"] == 300
    assert model_config["constrain_to_admissible"] is True  # the file's other keys are kept
    assert model_config["tiny_model"]["hidden_size"] == 32
    config.validate()


def test_config_flag_rejects_unknown_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(write_experiment(tmp_path))
    assert cli.main(["train", "file", path, "--config", '{"lr": 1e-3, "learning_rate": 1}']) == 2
    err = capsys.readouterr().err
    assert "unknown setting(s) ['learning_rate']" in err and len(err.strip().splitlines()) == 1
    assert cli.main(["train", "file", path, "--config", '{"model_config": 3}']) == 2
    assert "model_config must be a JSON object" in capsys.readouterr().err
    assert cli.main(["train", "file", path, "--resume", "--config", '{"lr": 1e-3}']) == 2
    assert "resumed run" in capsys.readouterr().err


@pytest.mark.parametrize(
    "example", ["hgpo_keychest.py", "hgpo_alfworld.py", "hgpo_webshop.py", "sweep_hgpo.py"]
)
def test_tuned_examples_define_a_valid_config(example: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HGPO_K", "4")
    monkeypatch.setenv("HGPO_ESTIMATOR", "gigpo")
    experiment = cli.load_experiment_file(TUNED / example)
    experiment.config.validate()
    assert experiment.config.history_length == 4 and experiment.config.estimator == "gigpo"
    assert experiment.stop["training_iteration"] >= 1
    if example != "sweep_hgpo.py":
        assert experiment.name.endswith("k4_gigpo_alpha1.0_base0")


def test_paper_preset_matches_the_published_settings() -> None:
    from hgpo_rllib import HGPOConfig

    settings = RunSettings(preset="paper-7b", model="/models/Qwen2.5-7B-Instruct", history_length=4)
    config = apply_paper_preset(HGPOConfig(), "webshop", settings)
    assert (config.group_size, config.groups_per_iteration, config.lr) == (8, 16, 1e-6)
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


def test_evaluate_a_checkpoint_and_the_baselines(trained_run: Path, tmp_path: Path) -> None:
    (checkpoint,) = trained_run.glob("*/checkpoint_*")
    out = tmp_path / "eval"
    # The run trained with max_steps=4; the expert needs up to 6 steps, so evaluate with 10.
    summary = evaluate(
        checkpoint, env="keychest", seeds=[1, 2], episodes=6, output=out, env_config={"max_steps": 10}
    )
    assert list(summary["policy"]) == ["checkpoint", "expert", "random"]
    per_seed = pd.read_csv(out / "per_seed.csv")
    expert = per_seed[per_seed.policy == "expert"]
    assert (expert.success == 100).all() and (expert.steps <= 6).all()
    episodes = pd.read_csv(out / "episodes.csv")
    assert len(episodes) == 3 * 2 * 6 and episodes.steps.between(1, 10).all()
    assert (out / "summary.md").read_text().count("| checkpoint") == 3  # summary + 2 seed rows
    with pytest.raises(FileExistsError):
        evaluate(checkpoint, env="keychest", seeds=[1], episodes=1, output=out)


def test_evaluate_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ALFWorld only"):
        evaluate(None, env="keychest", split="in", output=tmp_path / "a")
    with pytest.raises(ValueError, match="unknown environment"):
        evaluate(None, env="chess", output=tmp_path / "b")
    with pytest.raises(FileNotFoundError, match="not an HGPO algorithm checkpoint"):
        evaluate(tmp_path, env="keychest", output=tmp_path / "c")


def test_main_job_alfworld_trains_two_iterations_via_rllib_train_file(tmp_path: Path) -> None:
    """The README's main command (CPU default) with a 2-iteration stop."""
    args = ["train", "file", str(TUNED / "hgpo_alfworld.py"), "--storage-path", str(tmp_path),
            "--stop", '{"training_iteration": 2}']
    assert cli.main(args) == 0
    (trial,) = [d for d in (tmp_path / "alfworld_k2_hgpo_alpha1.0_base0").iterdir() if d.is_dir()]
    results = pd.read_json(trial / "result.json", lines=True)
    assert results["training_iteration"].tolist() == [1, 2]
    runners = results["env_runners"].iloc[-1]
    assert runners["num_episodes"] == 8 and 1 <= runners["episode_len_mean"] <= 15
    assert set(TAGS) <= scalar_tags(trial)


@pytest.mark.slow  # two Tune runs of 5 actors each: 15.5 min on a loaded 2-core machine (load ~40)
def test_rehearsal_preset_trains_evaluates_checkpoints_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HGPO_PRESET=rehearsal`` on the main job: two DDP learners, bf16, an evaluation env runner,
    a checkpoint every iteration; a crash in iteration 3 is resumed from the checkpoint of iteration 2.
    The env runners use HF generate here (``--config``); the vLLM backend has tests of its own."""
    monkeypatch.setenv("HGPO_PRESET", "rehearsal")
    marker = tmp_path / "crashed"
    path = tmp_path / "rehearsal.py"
    path.write_text(textwrap.dedent(f"""
        import os, runpy
        example = runpy.run_path({str(TUNED / "hgpo_alfworld.py")!r})
        config, checkpoint_freq = example["config"], example["checkpoint_freq"]
        stop = {{"training_iteration": 3}}

        def crash_once(*, algorithm, result, **kwargs):
            if result["training_iteration"] == 3 and not os.path.exists({str(marker)!r}):
                open({str(marker)!r}, "w").close()
                raise RuntimeError("simulated crash")

        config.callbacks(on_train_result=crash_once)
    """))
    args = ["train", "file", str(path), "--storage-path", str(tmp_path / "out"), "--name", "run",
            "--max-failures", "0"]
    assert cli.main([*args, "--config", '{"model_config": {"inference_backend": "hf"}}']) == 1
    assert marker.exists()
    (trial,) = [d for d in (tmp_path / "out" / "run").iterdir() if d.is_dir()]
    assert len(list(trial.glob("checkpoint_*"))) == 2  # checkpoint_freq = 1 from the preset
    progress = pd.read_csv(trial / "progress.csv")  # (Tune appends other columns after a resume)
    assert progress["training_iteration"].tolist() == [1, 2]
    assert progress["evaluation/env_runners/num_episodes"].tolist() == [4, 4]  # the evaluation runner's
    assert cli.main([*args, "--resume"]) == 0
    results = pd.read_json(trial / "result.json", lines=True)
    assert results["training_iteration"].tolist() == [1, 2, 3]  # 3 from the checkpoint of 2
    assert results["evaluation"].iloc[-1]["env_runners"]["num_episodes"] == 4
    learners = results["learners"].iloc[-1]["default_policy"]
    assert learners["num_groups"] == 2 and learners["episodes_per_group_min"] == 2  # two learners' sum
    config = results["config"].iloc[-1]
    assert (config["num_learners"], config["evaluation_num_env_runners"]) == (2, 1)
    assert config["_model_config"]["torch_dtype"] == "bfloat16"
