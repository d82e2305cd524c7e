"""The user's entry points: ``rllib train file`` through Ray Tune (Tensorboard events, trial names,
no overwriting, resume), a 2-trial sweep, the tuned examples, and ``rllib evaluate``."""

from __future__ import annotations

import gc
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers import (
    TUNED,
    crash_once_lines,
    crashing_tuned_example,
    own_stderr,
    play_interrupted_after,
    train_args,
    write_experiment,
)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from envs.alfworld.facts import ALFWORLD_FACTS
from hgpo_rllib import cli
from hgpo_rllib.cli.quiet import hide_harmless_lines
from hgpo_rllib.cli.run_dirs import experiment_runs
from hgpo_rllib.cli.tensorboard_layout import LAYOUT
from hgpo_rllib.connectors.env_to_module.history_window import HistoryWindowPrompt
from hgpo_rllib.evaluation import CheckpointPolicy, evaluate, protocol
from hgpo_rllib.evaluation.rollout import task_seeds
from hgpo_rllib.experiments.experiment_file import apply_config_overrides, load_experiment_file
from hgpo_rllib.rl_module.tokenizer import build_tiny_tokenizer

pytestmark = pytest.mark.usefixtures("ray_session")

TAGS = ("ray/tune/env_runners/success_rate", "ray/tune/learners/default_policy/advantage_mean")


def scalar_tags(trial_dir: Path) -> set[str]:
    assert list(trial_dir.glob("events.out.tfevents.*")), f"no Tensorboard event file in {trial_dir}"
    accumulator = EventAccumulator(str(trial_dir))  # all of the run's event files
    accumulator.Reload()
    return set(accumulator.Tags()["scalars"])


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ``rllib train file`` run of 2 iterations with a checkpoint at the end."""
    tmp = tmp_path_factory.mktemp("train")
    assert cli.main(train_args(write_experiment(tmp), tmp / "results")) == 0
    return tmp / "results" / "run"


def test_train_file_writes_tensorboard_events_and_a_checkpoint(trained_run: Path) -> None:
    (trial,) = [d for d in trained_run.iterdir() if d.is_dir()]
    assert trial.name.startswith("k2_hgpo_alpha1.0_base0_")
    assert set(TAGS) <= scalar_tags(trial)
    (layout,) = trial.glob("events.out.tfevents.*.layout")  # Tensorboard's Custom Scalars dashboard
    accumulator = EventAccumulator(str(layout))
    accumulator.Reload()
    assert "custom_scalars__config__" in accumulator.Tags()["tensors"]
    patterns = [re.compile(tag) for charts in LAYOUT.values() for tags in charts.values() for tag in tags]
    shown = {tag for tag in scalar_tags(trial) if any(pattern.match(tag) for pattern in patterns)}
    prefix = "ray/tune/"
    watched = ["env_runners/success_rate", "env_runners/episode_len_mean", "env_runners/invalid_action_rate"]
    watched += ["learners/default_policy/entropy", "learners/default_policy/level1_group_size_mean"]
    assert {prefix + tag for tag in [*watched, "iteration_seconds/sampling"]} <= shown
    progress = pd.read_csv(trial / "progress.csv")
    assert progress["training_iteration"].tolist() == [1, 2]
    assert list(trial.glob("checkpoint_*/class_and_ctor_args.pkl"))


def test_a_second_run_goes_to_a_new_directory_and_prints_a_line_per_iteration(
    trained_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = trained_run.parent.parent / "experiment.py"
    before = sorted(p.name for p in trained_run.rglob("*"))
    capsys.readouterr()
    assert cli.main(train_args(experiment, trained_run.parent, "--stop", '{"training_iteration": 1}')) == 0
    assert sorted(p.name for p in trained_run.rglob("*")) == before
    second = trained_run.parent / "run_run2"
    assert experiment_runs(trained_run.parent, "run") == {1: trained_run, 2: second}
    (trial,) = [d for d in second.iterdir() if d.is_dir()]
    assert pd.read_csv(trial / "progress.csv")["training_iteration"].tolist() == [1]
    out = capsys.readouterr().out.splitlines()
    (line,) = [line for line in out if line.startswith("iter ")]
    assert re.fullmatch(
        r"iter 1 \| success \d+\.\d% \| return \S+ \| ep len \S+ \| invalid \S+% \| .*\| s \S+", line
    )
    assert len(out) <= 4, out  # where results go, the iteration, the end; the full result only in files


def test_ray_workers_exit_on_sigterm_without_a_traceback_from_finalizers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ray raises SystemExit on SIGTERM; landing in a finalizer it printed "Exception ignored in"
    with a traceback at every shutdown. Only that case is dropped: other finalizer errors show."""

    class Exits:
        def __del__(self) -> None:
            raise SystemExit(1)

    class Fails:
        def __del__(self) -> None:
            raise ValueError("a real bug in a finalizer")

    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    hide_harmless_lines()
    Exits()
    Fails()
    gc.collect()
    # This process's lines only: the workers of the session's Ray (started by the test fixture, not by
    # the CLI) have no hook.
    err = own_stderr(capsys.readouterr().err)
    assert "SystemExit" not in err
    assert "ValueError: a real bug in a finalizer" in err


def test_workers_load_models_without_progress_bars() -> None:
    """Ray forwards a worker's output line by line: a "Loading weights" bar would print a line per
    redraw. The workers' setup hook turns Hugging Face's bars off before transformers loads."""
    code = (
        "from hgpo_rllib.cli.quiet import WORKER_SETUP_HOOK, quiet_worker\n"
        "assert WORKER_SETUP_HOOK.endswith('.quiet_worker')\n"
        "quiet_worker()\n"
        "from transformers.utils import logging\n"
        "print(logging.is_progress_bar_enabled())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_experiment_runs_are_numbered(tmp_path: Path) -> None:
    for name in ("exp", "exp_run2", "exp_run10", "exp_runx", "exp2", "other"):
        (tmp_path / name).mkdir()
    runs = experiment_runs(tmp_path, "exp")
    assert runs == {1: tmp_path / "exp", 2: tmp_path / "exp_run2", 10: tmp_path / "exp_run10"}
    assert experiment_runs(tmp_path, "missing") == {}


# The default run resumes runs in test_fault_injection.py (a signal) and retries crashed trials in
# test_fault_tolerance.py; this --resume of an errored trial is slow (about a minute).
@pytest.mark.slow
def test_resume_continues_a_crashed_run_from_its_checkpoint(tmp_path: Path) -> None:
    marker = tmp_path / "crashed"
    path = write_experiment(tmp_path, crash_once_lines(marker, 3), stop_iteration=4)
    args = train_args(path, tmp_path / "out", "--checkpoint-freq", "1", "--max-failures", "0")
    assert cli.main(args) == 1 and marker.exists()  # the trial errored in iteration 3 (no retries)
    assert cli.main([*args, "--resume"]) == 0
    (trial,) = [d for d in (tmp_path / "out" / "run").iterdir() if d.is_dir()]
    iterations = pd.read_json(trial / "result.json", lines=True)["training_iteration"].tolist()
    assert iterations == [1, 2, 3, 4]  # the crashed 3rd reported nothing; 3 and 4 from checkpoint 2


@pytest.mark.slow  # two trials (about 30 s); test_presets.py checks the sweep's trials without training
def test_sweep_of_two_trials_each_writes_tensorboard_events(tmp_path: Path) -> None:
    path = write_experiment(tmp_path, 'param_space = {"history_length": tune.grid_search([1, 2])}')
    assert cli.main(train_args(path, tmp_path / "out", "--max-concurrent-trials", "1", name="sweep")) == 0
    trials = sorted(d for d in (tmp_path / "out" / "sweep").iterdir() if d.is_dir())
    assert [t.name.split("_hgpo")[0] for t in trials] == ["k1", "k2"]
    for trial in trials:
        assert set(TAGS) <= scalar_tags(trial)


def run_cli(args: list[str]) -> int:
    """``cli.main`` as the shell sees it: argparse's usage errors exit through SystemExit."""
    try:
        return cli.main(args)
    except SystemExit as exc:
        return int(exc.code)


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "experiment.py"
    path.write_text(text)
    return path


def _train(tmp_path: Path, extra: str = "", *, file: str | None = None) -> list[str]:
    """``rllib train file`` into ``tmp_path / "o"`` of the tiny experiment plus ``extra`` lines, or of
    a file that holds only ``file``."""
    path = write_experiment(tmp_path, extra) if file is None else _file(tmp_path, file)
    return train_args(path, tmp_path / "o", name=None)


def _evaluate(output: Path, *extra: str, env: str = "keychest", episodes: int = 1) -> list[str]:
    """``rllib evaluate`` of the expert on ``env``, ``episodes`` per seed, into ``output``, plus ``extra``."""
    flags = ["--env", env, "--baselines", "expert", "--episodes", str(episodes), "--output", str(output)]
    return ["evaluate", *flags, *extra]


USER_ERRORS = {
    "missing-file": (
        lambda t: train_args(t / "missing.py", t / "o", name=None),
        r"experiment file not found",
    ),
    "no-config": (lambda t: _train(t, file="config = 3\n"), r"must define `config`"),
    "syntax-error": (
        lambda t: _train(t, file="x = 1\nconfig = (\n"),
        r"experiment\.py:2: SyntaxError: '\(' was never closed",
    ),
    "training-keyword-typo": (
        lambda t: _train(t, "config.training(histroy_length=2)"),
        r"experiment\.py:\d+: TypeError: .*unexpected keyword argument 'histroy_length'",
    ),
    "param-space-typo": (
        lambda t: _train(t, 'param_space = {"histroy_length": [2, 4]}'),
        r"param_space key 'histroy_length' is not a setting of HGPOConfig; did you mean 'history_length'\?",
    ),
    "infinite-kl": (
        lambda t: _train(t, 'config.training(kl_coeff=float("inf"))'),
        r"HGPOConfig: kl_coeff=inf is invalid",
    ),
    "stop-not-an-object": (
        lambda t: [*_train(t, file=""), "--stop", "[1]"],
        r"--stop: expected a JSON object",
    ),
    "zero-samples": (lambda t: [*_train(t, file=""), "--num-samples", "0"], r">= 1, got 0"),
    "memory-missing-file": (lambda t: ["memory", str(t / "missing.py")], r"experiment file not found"),
    "output-is-a-file": (lambda t: _evaluate(_file(t, "not a directory")), r"experiment\.py is a file"),
    "negative-seed": (lambda t: _evaluate(t / "o", "--seeds", "-1"), r"--seeds: expected an integer >= 0"),
    "duplicate-seeds": (lambda t: _evaluate(t / "o", "--seeds", "1", "1"), r"seeds must be distinct"),
    "batch-size-0": (lambda t: _evaluate(t / "o", "--batch-size", "0"), r"--batch-size: .*>= 1, got 0"),
    "split-without-choices": (
        lambda t: _evaluate(t / "o", "--split", "in"),
        r"--split applies to envs with split choices .*, not keychest",
    ),
    # Issue 62's adversarial probes (bad values that were accepted, or ended in a traceback).
    "stop-iteration-0": (
        lambda t: [*_train(t), "--stop", '{"training_iteration": 0}'],
        r"stop criterion 'training_iteration' must be >= 1",
    ),
    "stop-iteration-negative": (
        lambda t: [*_train(t), "--stop", '{"training_iteration": -1}'],
        r"stop criterion 'training_iteration' must be >= 1",
    ),
    "name-is-a-path": (lambda t: [*_train(t), "--name", "../../x"], r"--name '\.\./\.\./x' is not a name"),
    "train-batch-size-negative": (
        lambda t: _train(t, "config.training(train_batch_size=-5)"),
        r"train_batch_size=-5 is invalid: expected an int >= 1",
    ),
    "seed-negative": (
        lambda t: _train(t, "config.debugging(seed=-1)"),
        r"seed=-1 is invalid: expected None or an int >= 0",
    ),
    "gpus-negative": (
        lambda t: _train(t, "config.learners(num_gpus_per_learner=-1)"),
        r"num_gpus_per_learner=-1 is invalid",
    ),
    "smoothing-0": (
        lambda t: _train(t, "config.reporting(metrics_num_episodes_for_smoothing=0)"),
        r"metrics_num_episodes_for_smoothing=0 is invalid",
    ),
    "evaluation-interval-negative": (
        lambda t: _train(t, "config.evaluation(evaluation_interval=-1)"),
        r"evaluation_interval=-1 is invalid",
    ),
    "env-module-not-importable": (
        lambda t: _evaluate(t / "o", env="nosuchmod.sub:Env"),
        r"'nosuchmod\.sub:Env': cannot import nosuchmod\.sub \(ModuleNotFoundError",
    ),
    "corrupt-tokenizer": (
        lambda t: _train(t, _model_line(_model_dir(t, {"tokenizer.json": '{"model": 3}'}))),
        r"model/tokenizer\.json: the tokenizer cannot be loaded from it \(KeyError",
    ),
    "truncated-tokenizer": (
        lambda t: _train(t, _model_line(_model_dir(t, {"tokenizer.json": "{"}))),
        r"model/tokenizer\.json is not valid JSON",
    ),
    "broken-chat-template": (
        lambda t: _train(t, _model_line(_model_dir(t, {"chat_template.jinja": "{% if %}"}))),
        r"model/chat_template\.jinja: the chat template cannot render a user turn \(TemplateSyntaxError",
    ),
}


def _model_dir(tmp_path: Path, broken: dict[str, str]) -> Path:
    """A model directory (config.json, a small tokenizer and chat template) with ``broken`` files."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"max_position_embeddings": 8192}')
    tokenizer = build_tiny_tokenizer(["go north", "take key"], 300)
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tokenizer.save_pretrained(model)
    for name, text in broken.items():
        (model / name).write_text(text)
    return model


def _model_line(model: Path) -> str:
    return f"config.rl_module(model_config={{'model': {str(model)!r}}})"


@pytest.mark.parametrize("command", [[], ["evaluate"], ["sft"], ["export"], ["models"], ["memory"]])
def test_help_is_text_not_a_docstring_cut_mid_sentence(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--help`` shows sentences, not a module docstring's first line with its reST roles."""
    with pytest.raises(SystemExit) as done:
        cli.main([*command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: rllib {' '.join(command)}".rstrip())
    assert not re.search(r":(mod|func|class|data):`|``", text), text


@pytest.mark.parametrize("case", list(USER_ERRORS))
def test_user_errors_are_one_line_and_exit_status_2(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_args, message = USER_ERRORS[case]
    assert run_cli(make_args(tmp_path)) == 2
    err = own_stderr(capsys.readouterr().err)
    assert err.count("\n") == 1 and err.startswith("rllib"), err
    assert re.search(message, err), err
    assert "_validate_config" not in err  # RLlib's advice to code, cut from the command's line
    assert not (tmp_path / "o").exists()  # nothing was written


def test_resume_refuses_changed_flags_or_file(trained_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    experiment = trained_run.parent.parent / "experiment.py"
    args = train_args(experiment, trained_run.parent, "--resume")
    before = sorted(p.name for p in trained_run.rglob("*"))
    assert cli.main([*args, "--stop", '{"training_iteration": 5}']) == 2
    # the latest run of "run" (the second-run test may have added run_run2, stopped at 1)
    assert re.search(
        r"stop was \{'training_iteration': [12]\}, now \{'training_iteration': 5\}", capsys.readouterr().err
    )
    assert cli.main([*args, "--checkpoint-freq", "3"]) == 2
    assert "checkpoint_freq was 5, now 3" in capsys.readouterr().err
    edited = experiment.with_name("edited.py")
    edited.write_text(experiment.read_text() + "\n# edited\n")
    args[2] = str(edited)
    assert cli.main(args) == 2
    assert "experiment_file_sha256 was" in capsys.readouterr().err
    assert sorted(p.name for p in trained_run.rglob("*")) == before


def test_config_flag_merges_settings_and_model_config_into_the_file(tmp_path: Path) -> None:
    experiment = load_experiment_file(write_experiment(tmp_path))
    apply_config_overrides(
        experiment.config,
        {
            "lr": 2e-3,
            "num_envs_per_env_runner": 8,
            "evaluation_interval": 3,
            "model_config": {"torch_dtype": "bfloat16", "tokenizer_vocab_size": 300},
        },
    )
    config = experiment.config
    assert (config.lr, config.num_envs_per_env_runner, config.evaluation_interval) == (2e-3, 8, 3)
    model_config = config.user_model_config()
    assert model_config["torch_dtype"] == "bfloat16" and model_config["tokenizer_vocab_size"] == 300
    assert model_config["constrain_to_admissible"] is True  # the file's other keys are kept
    assert model_config["tiny_model"]["hidden_size"] == 32
    config.validate()


def test_config_flag_rejects_unknown_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train = train_args(write_experiment(tmp_path), tmp_path / "out", name=None)
    assert cli.main([*train, "--config", '{"lr": 1e-3, "learning_rate": 1}']) == 2
    err = capsys.readouterr().err
    assert "unknown setting(s) ['learning_rate']" in err and len(err.strip().splitlines()) == 1
    assert cli.main([*train, "--config", '{"model_config": 3}']) == 2
    assert "model_config must be a JSON object" in capsys.readouterr().err
    # --resume takes the run's own --config repeated (tests/end_to_end/test_runs_that_cannot_train.py);
    # here there is no run to resume, which is one line too.
    assert cli.main([*train, "--resume", "--config", '{"lr": 1e-3}']) == 2
    assert "nothing to resume: no experiment 'HGPO_keychest'" in capsys.readouterr().err


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
    played = json.loads((out / "throughput.json").read_text())
    assert played["batch_size"] == 16 and list(played["policies"]) == ["checkpoint", "expert", "random"]
    for policy in played["policies"].values():
        assert policy["episodes"] == 2 * 6
        assert policy["play_seconds"] > 0 and policy["episodes_per_hour"] > 0  # arithmetic: test_throughput
    trained, expert = played["policies"]["checkpoint"], played["policies"]["expert"]
    assert trained["generated_tokens"] >= episodes[episodes.policy == "checkpoint"].steps.sum()  # >= 1 a step
    assert expert["generated_tokens"] is None and expert["generated_tokens_per_s"] is None
    assert (
        "## Played in this run (batch size 16)\n\n- checkpoint: 12 episodes in "
        in (out / "summary.md").read_text()
    )
    with pytest.raises(FileExistsError):
        evaluate(checkpoint, env="keychest", seeds=[1], episodes=1, output=out)


def test_evaluate_keeps_finished_seeds_after_a_crash_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "eval"
    settings = {"env": "keychest", "seeds": [1, 2], "episodes": 3, "output": out}
    play = protocol.play
    partial = out / ".episodes.csv.partial"  # where an atomic write of episodes.csv starts

    def crash_on_seed_2(*args: Any, desc: str, **kwargs: Any) -> Any:
        if desc == "random seed 2":
            partial.write_text("half-written")  # as a full disk would leave it
            raise OSError("No space left on device")
        return play(*args, desc=desc, **kwargs)

    monkeypatch.setattr(protocol, "play", crash_on_seed_2)
    with pytest.raises(OSError, match="No space left"):
        evaluate(None, **settings)
    done = pd.read_csv(out / "episodes.csv")
    assert sorted({(p, s) for p, s in zip(done.policy, done.seed, strict=True)}) == [
        ("expert", 1),
        ("expert", 2),
        ("random", 1),
    ]
    played = []

    def record(*args: Any, desc: str, **kwargs: Any) -> Any:
        played.append(desc)
        return play(*args, desc=desc, **kwargs)

    monkeypatch.setattr(protocol, "play", record)
    summary = evaluate(None, **settings)
    assert played == ["random seed 2"]  # the rerun only plays what is missing
    # The rerun's own atomic write of episodes.csv replaced the half-written file.
    assert list(summary.policy) == ["expert", "random"] and not partial.exists()
    assert sorted(p.name for p in out.iterdir()) == [
        "episodes.csv",
        "evaluation.json",
        "per_seed.csv",
        "summary.csv",
        "summary.md",
        "throughput.json",
    ]
    # The rerun counts only what it played: random's seed 2, not the 9 episodes saved before.
    assert {
        p: v["episodes"] for p, v in json.loads((out / "throughput.json").read_text())["policies"].items()
    } == {"random": 3}
    episodes = pd.read_csv(out / "episodes.csv")
    assert len(episodes) == 2 * 2 * 3
    pd.testing.assert_frame_equal(episodes.iloc[: len(done)], done)  # kept as they were
    another = r"holds results of another evaluation \(episodes was 3, now 4\)"
    with pytest.raises(FileExistsError, match=another):
        evaluate(None, **{**settings, "episodes": 4})


def test_evaluate_resumes_an_interrupted_seed_at_its_first_unfinished_game(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "eval"
    settings = {"env": "keychest", "seeds": [1, 2], "episodes": 5, "output": out, "baselines": ["random"]}
    calls: list[tuple[Any, list[int]]] = []
    monkeypatch.setattr(protocol, "play", play_interrupted_after(2, of_pass="random seed 2", calls=calls))
    with pytest.raises(KeyboardInterrupt):
        evaluate(None, **settings)
    (games,) = out.glob(".games-*")
    kept = [json.loads(line) for line in games.read_text().splitlines()]
    assert games.name == ".games-random-seed2.jsonl" and len(kept) == 2
    assert set(pd.read_csv(out / "episodes.csv").seed) == {1}  # seed 2 is not in the table yet
    calls.clear()
    evaluate(None, **settings)
    seed_2_tasks = task_seeds(2, 5)
    ((desc, tasks),) = calls  # seed 1 is not played again, nor seed 2's two finished games
    assert desc == "random seed 2 (2 of 5 games saved before)"
    (played,) = json.loads((out / "throughput.json").read_text())["policies"].values()
    assert played["episodes"] == 3  # this run's games, not the 2 saved before it nor seed 1's
    assert tasks == [t for t in seed_2_tasks if t not in {game["task_seed"] for game in kept}]
    episodes = pd.read_csv(out / "episodes.csv")
    seed_2 = episodes[episodes.seed == 2]
    assert list(seed_2.task_seed) == seed_2_tasks  # in task order, as an uninterrupted run writes them
    for game in kept:  # the games played before the interruption, as they were
        row = seed_2[seed_2.task_seed == game["task_seed"]].iloc[0]
        assert (row.won, row.steps) == (game["won"], game["steps"])
    assert not list(out.glob(".games-*"))


def test_rllib_evaluate_alfworld_split_has_per_task_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval"
    env_config = {"source": "generated", "max_steps": 50}
    args = _evaluate(out, "--split", "out", "--seeds", "1", "2", env="alfworld", episodes=2)
    assert cli.main([*args, "--env-config", json.dumps(env_config), "--batch-size", "3"]) == 0
    assert "Played in this run (batch size 3):\n- expert: 4 episodes in " in capsys.readouterr().out
    recorded = json.loads((out / "evaluation.json").read_text())
    assert recorded["env_config"] == env_config and recorded["splits"] == ["eval_out_of_distribution"]
    per_seed = pd.read_csv(out / "per_seed.csv")
    assert (per_seed.split == "eval_out_of_distribution").all()
    assert list(per_seed.columns) == [
        "split",
        "policy",
        "seed",
        "success",
        "steps",
        "invalid_rate",
        "length_cut_rate",
        "prompt_cut_rate",
        "Pick",
        "Look",
        "Clean",
        "Heat",
        "Cool",
        "Pick2",
    ]
    assert (per_seed.success == 100).all()
    assert per_seed.length_cut_rate.isna().all() and per_seed.prompt_cut_rate.isna().all()  # no LLM
    episodes = pd.read_csv(out / "episodes.csv")
    for _, row in per_seed.iterrows():  # each played category's column is its success rate (the expert: 100)
        played = set(episodes[episodes.seed == row.seed].task_type)
        categories = ALFWORLD_FACTS.evaluation.categories
        assert played and all(row[c] == 100 if c in played else np.isnan(row[c]) for c in categories)
    assert re.search(r"\| expert +\| 100.0 ± 0.0 +\|", (out / "summary.md").read_text())


def test_checkpoint_prompts_and_env_share_one_env_config(trained_run: Path) -> None:
    (checkpoint,) = trained_run.glob("*/checkpoint_*")
    policy = CheckpointPolicy(checkpoint, env_config={"require_tags": True})
    assert policy.env_config == {"max_steps": 4, "require_tags": True}
    (prompt,) = [c for c in policy.prompt_pipeline.connectors if isinstance(c, HistoryWindowPrompt)]
    assert prompt.render_kwargs == {"require_tags": True}
    assert CheckpointPolicy(checkpoint).env_config == {"max_steps": 4}


def test_evaluate_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--split applies to envs with split choices"):
        evaluate(None, env="keychest", split="in", output=tmp_path / "a")
    with pytest.raises(ValueError, match="unknown environment"):
        evaluate(None, env="chess", output=tmp_path / "b")
    not_a_checkpoint = (
        r"is not an algorithm checkpoint \(no class_and_ctor_args.pkl\) nor a policy folder "
        r"\(no hgpo_policy.json or hgpo_sft.json\)"
    )
    with pytest.raises(FileNotFoundError, match=not_a_checkpoint):
        evaluate(tmp_path, env="keychest", output=tmp_path / "c")
    missing = tmp_path / "checkpoint_000003"
    with pytest.raises(
        FileNotFoundError, match=f"^{missing} does not exist: expected an algorithm checkpoint"
    ):
        evaluate(missing, env="keychest", output=tmp_path / "d")
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()


def test_main_job_alfworld_trains_two_iterations_via_rllib_train_file(tmp_path: Path) -> None:
    """The README's main command (CPU default) with a 2-iteration stop."""
    # --warm-start none: the random-init demo (a run of the shipped warm start is slower)
    args = train_args(TUNED / "hgpo_alfworld.py", tmp_path, "--warm-start", "none", name=None)
    assert cli.main([*args, "--stop", '{"training_iteration": 2}']) == 0
    (trial,) = [d for d in (tmp_path / "alfworld_demo_k2_hgpo_alpha1.0_base0").iterdir() if d.is_dir()]
    results = pd.read_json(trial / "result.json", lines=True)
    assert results["training_iteration"].tolist() == [1, 2]
    runners = results["env_runners"].iloc[-1]
    assert runners["num_episodes"] == 8 and 1 <= runners["episode_len_mean"] <= 15
    assert set(TAGS) <= scalar_tags(trial)


# Two Tune runs of 5 actors each (vLLM env runners when vllm is installed): 108 s on an idle 2-core machine.
@pytest.mark.slow  # 167 s; the main job test below is the default end-to-end run
def test_rehearsal_preset_trains_evaluates_checkpoints_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--preset rehearsal`` on the main job: two DDP learners, bf16, an evaluation env runner,
    a checkpoint every iteration; a crash in iteration 3 is resumed from the checkpoint of iteration 2
    (``--resume`` with the same settings). The env runners use HF generate here (``--config``); the vLLM
    backend has tests of its own."""
    path, marker = crashing_tuned_example(tmp_path, "hgpo_alfworld.py", stop_iteration=3, crash_at=3)
    args = train_args(path, tmp_path / "out", "--preset", "rehearsal", "--max-failures", "0")
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


def test_vllms_chat_template_warmup_warning_is_hidden(caplog: pytest.LogCaptureFixture) -> None:
    """vLLM's engine starts without a tokenizer (the module gives it token ids), so its chat-template
    warm-up logs a warning with a traceback at every start; nothing else from that logger is hidden."""
    hide_harmless_lines()
    logger = logging.getLogger("vllm.renderers.base")
    with caplog.at_level(logging.WARNING, logger="vllm.renderers.base"):
        logger.warning("Chat template warmup failed", exc_info=True)
        logger.warning("Chat template missing")
    assert [record.getMessage() for record in caplog.records] == ["Chat template missing"]
