"""The user's entry points: ``rllib train file`` through Ray Tune (Tensorboard events, trial names,
no overwriting, resume), a 2-trial sweep, the tuned examples, and ``rllib evaluate``."""

from __future__ import annotations

import re
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


def test_a_second_run_goes_to_a_new_directory_and_shows_success_in_the_table(
    trained_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = trained_run.parent.parent / "experiment.py"
    before = sorted(p.name for p in trained_run.rglob("*"))
    capsys.readouterr()
    args = ["train", "file", str(experiment), "--storage-path", str(trained_run.parent), "--name", "run",
            "--stop", '{"training_iteration": 1}']
    assert cli.main(args) == 0
    assert sorted(p.name for p in trained_run.rglob("*")) == before
    second = trained_run.parent / "run_run2"
    assert cli.experiment_runs(trained_run.parent, "run") == {1: trained_run, 2: second}
    (trial,) = [d for d in second.iterdir() if d.is_dir()]
    assert pd.read_csv(trial / "progress.csv")["training_iteration"].tolist() == [1]
    table = capsys.readouterr().out
    for header in ("success", "episode len", "invalid actions"):
        assert re.search(rf"\|\s+{header}\s+\|", table), table[-3000:]


def test_experiment_runs_are_numbered(tmp_path: Path) -> None:
    for name in ("exp", "exp_run2", "exp_run10", "exp_runx", "exp2", "other"):
        (tmp_path / name).mkdir()
    runs = cli.experiment_runs(tmp_path, "exp")
    assert runs == {1: tmp_path / "exp", 2: tmp_path / "exp_run2", 10: tmp_path / "exp_run10"}
    assert cli.experiment_runs(tmp_path, "missing") == {}


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
            "--checkpoint-freq", "1"]
    assert cli.main(args) == 1 and marker.exists()  # the trial errored in iteration 3
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
