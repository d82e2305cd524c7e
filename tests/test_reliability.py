"""Nothing lost, nothing run that you did not write, nothing that fails quietly (issue 25's audit).

Each test names the audit's finding it covers. Output directories are never clobbered (1, 2), a
directory is written by one job at a time (4), resumed runs keep one row per iteration (3), a killed
vLLM runner's weights do not stay in /dev/shm (5), shared policies load without pickle (6), stop keys,
resources and checkpoints are checked with one clear error (8, 9, 11), and interrupted runs exit with
the signal's status and resume (7, 14). Settings checks live in test_validation.py and
test_env_contract.py (12, 13, 15).
"""

from __future__ import annotations

import json
import os
import pickle
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import DATA, ROOT, keychest_config, write_experiment

from hgpo_rllib import cli, load_policy
from hgpo_rllib.cli.result_files import OneRowPerIterationCsv, OneRowPerIterationJson
from hgpo_rllib.cli.stopping import MetricStopper, unknown_stop_keys
from hgpo_rllib.cli.train import check_trial_resources, claim_experiment_dir, experiment_runs
from hgpo_rllib.evaluation.policy_loading import POLICY_RECORD, say_pickle_trust_once
from hgpo_rllib.run_records import exclusive_directory
from hgpo_rllib.warm_start.demonstrations import read_played_episodes

CHECKPOINT = DATA / "checkpoints" / "keychest_hgpo_0.1.0"
#: Tests that load the committed checkpoint: it was saved by 0.1.0, so its pickles name moved modules.
OLD_PATHS = pytest.mark.filterwarnings(r"ignore:hgpo_rllib\.\S+ moved to:DeprecationWarning")


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A copy of the committed KeyChest checkpoint (tests must not write into tests/data)."""
    return Path(shutil.copytree(CHECKPOINT, tmp_path / "checkpoint"))


def evaluate_args(output: Path, *extra: str) -> list[str]:
    return [
        "evaluate",
        "--env",
        "keychest",
        "--seeds",
        "1",
        "--episodes",
        "1",
        "--output",
        str(output),
        *extra,
    ]


# ---------------------------------------------------------------------- 1, 2: user files are kept
def test_evaluate_refuses_a_directory_of_other_files_and_deletes_none_of_them(tmp_path: Path) -> None:
    """Finding 1: a user's ``thesis.tmp`` in --output was deleted before the refusal."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.tmp").write_text("two years of work")
    assert cli.main(evaluate_args(out, "--baselines", "random")) == 2
    assert (out / "thesis.tmp").read_text() == "two years of work"
    assert sorted(p.name for p in out.iterdir()) == ["thesis.tmp"]


def test_sft_refuses_a_directory_of_other_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Finding 2: ``rllib sft --output`` replaced a user's model files and exited 0."""
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text('{"mine": true}')
    (out / "model.safetensors").write_bytes(b"my weights")
    args = ["sft", "--env", "keychest", "--episodes", "1", "--output", str(out)]
    assert cli.main(args) == 2
    assert "already holds other files" in capsys.readouterr().err
    assert (out / "config.json").read_text() == '{"mine": true}'
    assert (out / "model.safetensors").read_bytes() == b"my weights"


# ---------------------------------------------------------------------- 4: one writer per directory
def test_a_directory_being_written_by_another_process_is_refused_until_that_process_dies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 4: two ``rllib sft`` into one directory both exited 0 with interleaved files."""
    out = tmp_path / "model"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from pathlib import Path\n"
            "from hgpo_rllib.run_records import exclusive_directory\n"
            f"with exclusive_directory(Path({str(out)!r}), 'rllib sft'):\n"
            "    print('locked', flush=True); time.sleep(120)",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        args = ["sft", "--env", "keychest", "--episodes", "1", "--output", str(out)]
        assert cli.main(args) == 2
        assert "is being written by another" in capsys.readouterr().err
        assert not (out / "demonstrations.jsonl").exists()
    finally:
        holder.kill()  # SIGKILL: the lock goes with the process
        holder.wait()
    with exclusive_directory(out, "test"):
        pass


def test_a_demonstrations_file_cut_short_by_a_crash_resumes(tmp_path: Path) -> None:
    """Finding 11: a truncated last line blocked ``rllib sft`` resume with an unnamed JSON error."""
    path = tmp_path / "demonstrations.jsonl"
    path.write_text('{"task_seed": 1, "won": true}\n{"task_seed": 2, "wo')
    assert list(read_played_episodes(path)) == [1]
    assert path.read_text() == '{"task_seed": 1, "won": true}\n'
    path.write_text('{"task_seed": 1}\nnot json\n{"task_seed": 3}\n')
    with pytest.raises(ValueError, match=r"demonstrations.jsonl line 2 is not JSON"):
        read_played_episodes(path)


# ---------------------------------------------------------------------- 3: one row per iteration
def test_result_files_keep_one_row_per_iteration_when_a_trial_resumes_from_an_older_checkpoint(
    tmp_path: Path,
) -> None:
    """Finding 3: after --resume, progress.csv rows had more fields than its header, and result.json
    repeated the iterations after the checkpoint."""

    class Trial:  # what the loggers read of a Tune trial
        local_path, config, checkpoint = str(tmp_path), {"lr": 0.1}, None

        def init_local_path(self) -> None:
            pass

    trial = Trial()

    def result(iteration: int, **extra: float) -> dict:
        return {"training_iteration": iteration, "env_runners": {"success_rate": iteration / 10}, **extra}

    loggers = [OneRowPerIterationJson(), OneRowPerIterationCsv()]
    for iteration in (1, 2, 3, 4):
        for logger in loggers:
            logger.log_trial_result(iteration, trial, result(iteration))
    # Resumed from checkpoint 2 in a new process: iterations 3 and 4 again, with a new metric.
    loggers = [OneRowPerIterationJson(), OneRowPerIterationCsv()]
    for iteration in (3, 4, 5):
        for logger in loggers:
            logger.log_trial_start(trial)
            logger.log_trial_result(iteration, trial, result(iteration, num_restores=1.0))
    rows = pd.read_json(tmp_path / "result.json", lines=True)
    assert rows["training_iteration"].tolist() == [1, 2, 3, 4, 5]
    progress = pd.read_csv(tmp_path / "progress.csv")
    assert progress["training_iteration"].tolist() == [1, 2, 3, 4, 5]
    assert progress["env_runners/success_rate"].tolist() == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert progress["num_restores"].isna().tolist() == [True, True, False, False, False]
    assert json.loads((tmp_path / "params.json").read_text()) == {"lr": 0.1}


# ---------------------------------------------------------------------- 5: /dev/shm after SIGKILL
def test_weight_directories_of_dead_runners_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    """Finding 5: each SIGKILLed vLLM runner left a full copy of the weights in /dev/shm."""
    from hgpo_rllib.rl_module.vllm_generation import _weights_dir_prefix, remove_orphaned_weight_dirs

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = tmp_path / f"{_weights_dir_prefix(dead.pid)}abc"
    live = tmp_path / f"{_weights_dir_prefix()}def"
    other_host = tmp_path / f"hgpo-vllm-elsewhere-{dead.pid}-ghi"
    for path in (orphan, live, other_host):
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"\0" * 16)
    assert remove_orphaned_weight_dirs(tmp_path) == [orphan]
    assert not orphan.exists() and live.exists() and other_host.exists()


# ---------------------------------------------------------------------- 6: a policy format without pickle
@OLD_PATHS
def test_an_exported_policy_folder_loads_and_acts_without_unpickling_anything(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 6: checkpoints (pickles) were what people shared; a policy folder runs no code."""
    folder = tmp_path / "policy"
    say_pickle_trust_once.cache_clear()  # said once per process: maybe already by an earlier test
    assert cli.main(["export", str(checkpoint), str(folder)]) == 0
    assert "trust" in capsys.readouterr().err  # reading the checkpoint itself unpickles: said once
    names = {p.name for p in folder.iterdir()}
    assert {POLICY_RECORD, "config.json", "model.safetensors"} <= names
    assert not [n for n in names if n.endswith((".pkl", ".pt", ".bin", ".pth", ".partial"))]
    assert json.loads((folder / POLICY_RECORD).read_text())["env_class"] == "envs.keychest.env:KeyChestEnv"

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a policy folder must load without unpickling")

    for target, name in ((pickle, "load"), (pickle, "loads"), (torch, "load")):
        monkeypatch.setattr(target, name, refuse)
    policy = load_policy(folder)
    env = policy.make_env()
    observation, info = env.reset(seed=3)
    for _ in range(3):
        action = policy.act(observation, info)
        assert isinstance(action, str)
        observation, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    assert cli.main(evaluate_args(tmp_path / "eval", str(folder), "--baselines", "")) == 0
    assert "trust" not in capsys.readouterr().err
    assert len(pd.read_csv(tmp_path / "eval" / "episodes.csv")) == 1
    assert cli.main(["export", str(checkpoint), str(folder)]) == 2  # never over an existing folder


# ---------------------------------------------------------------------- 11: corrupt files, one error
@OLD_PATHS
def test_a_truncated_checkpoint_or_settings_file_is_one_error_naming_it(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ctor = checkpoint / "class_and_ctor_args.pkl"
    ctor.write_bytes(ctor.read_bytes()[:100])
    assert cli.main(evaluate_args(tmp_path / "a", str(checkpoint), "--baselines", "")) == 2
    err = capsys.readouterr().err
    assert "cannot be loaded" in err and str(checkpoint) in err and err.count("\n") <= 2
    folder = tmp_path / "warm"
    folder.mkdir()
    (folder / "hgpo_sft.json").write_text("{}")
    assert cli.main(evaluate_args(tmp_path / "b", str(folder), "--baselines", "")) == 2
    assert "hgpo_sft.json lacks" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# ---------------------------------------------------------------------- 12, 13: checked before writing
@OLD_PATHS
def test_evaluate_refuses_a_bad_env_config_or_another_env_before_writing_anything(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert cli.main(evaluate_args(out, "--env-config", '{"num_room": 3}', "--baselines", "random")) == 2
    assert "did you mean 'num_rooms'" in capsys.readouterr().err and not out.exists()
    args = ["evaluate", str(checkpoint), "--env", "webshop", "--output", str(out), "--baselines", ""]
    assert cli.main(args) == 2
    assert "trained on keychest; evaluate it with --env keychest" in capsys.readouterr().err
    assert not out.exists()


def test_sft_refuses_a_bad_env_config_before_writing_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model"
    args = ["sft", "--env", "keychest", "--episodes", "1", "--output", str(out), "--env-config"]
    assert cli.main([*args, '{"max_step": 3}']) == 2
    assert "did you mean 'max_steps'" in capsys.readouterr().err
    assert not out.exists()


# ---------------------------------------------------------------------- 8, 9, 15: the run's settings
def test_a_stop_key_typo_is_refused_naming_the_metric(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 8: ``training_iteraton`` trained forever after one warning."""
    path = write_experiment(tmp_path)
    args = ["train", "file", str(path), "--storage-path", str(tmp_path / "out"), "--stop"]
    assert cli.main([*args, '{"training_iteraton": 2}']) == 2
    assert "did you mean 'training_iteration'" in capsys.readouterr().err
    assert cli.main([*args, '{"training_iteration": "2"}']) == 2
    assert not (tmp_path / "out").exists()
    # A nested key is checked against the first result: the trial stops there, the CLI names it.
    stopper = MetricStopper({"env_runners/sucess_rate": 0.9})
    result = {"training_iteration": 1, "env_runners": {"success_rate": 0.5}}
    assert stopper("trial", result)
    assert unknown_stop_keys(stopper.criteria, result) == [
        "stop key 'env_runners/sucess_rate' is not a metric of this run; "
        "did you mean 'env_runners/success_rate'?"
    ]
    assert not MetricStopper({"env_runners/success_rate": 0.9})("trial", result)
    assert MetricStopper({"training_iteration": 1})("trial", result)


@pytest.mark.usefixtures("ray_session")
def test_a_trial_needing_more_cpus_than_the_cluster_has_is_refused() -> None:
    """Finding 9: the trial stayed PENDING forever, silently (the test cluster has 4 CPUs)."""
    check_trial_resources(keychest_config(remote_runners=2))
    with pytest.raises(ValueError, match=r"needs 6 CPU .* has 4 CPU"):
        check_trial_resources(keychest_config(remote_runners=5))


@pytest.mark.slow  # a full CLI run (about a minute on 2 cores)
def test_an_error_that_would_recur_is_not_retried(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Finding 10: a non-finite loss was retried --max-failures times before the run failed."""
    path = write_experiment(tmp_path)
    args = ["train", "file", str(path), "--storage-path", str(tmp_path / "out"), "--name", "run"]
    assert cli.main([*args, "--config", '{"kl_coeff": 1e300}', "--max-failures", "3"]) == 1
    err = capsys.readouterr().err
    assert "FloatingPointError: learner: non-finite loss" in err and "not retried (it would recur)" in err


def test_runs_of_one_name_never_share_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 15: a second simultaneous run of a name failed with [Errno 17]; names with glob
    characters hid later runs from --resume."""
    name = "sweep[lr*]?"
    assert claim_experiment_dir(tmp_path, name) == tmp_path / name
    assert claim_experiment_dir(tmp_path, name) == tmp_path / f"{name}_run2"
    assert list(experiment_runs(tmp_path, name)) == [1, 2]
    # Another process claims run 3 between our listing and our mkdir: we take run 4.
    (tmp_path / f"{name}_run3").mkdir()
    monkeypatch.setattr("hgpo_rllib.cli.train.experiment_runs", lambda storage, name: {1: None, 2: None})
    assert claim_experiment_dir(tmp_path, name) == tmp_path / f"{name}_run4"


def test_the_keychest_example_refuses_settings_it_cannot_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 15: ``hgpo_keychest.py`` silently ignored ``HGPO_MODEL``."""
    from hgpo_rllib.experiments.experiment_file import load_experiment_file

    monkeypatch.setenv("HGPO_MODEL", "/models/Qwen2.5-1.5B-Instruct")
    with pytest.raises(
        ValueError, match=r"HGPO_MODEL and HGPO_WARM_START \(other than 'none'\) do not apply"
    ):
        load_experiment_file(ROOT / "tuned_examples" / "hgpo_keychest.py")


# ---------------------------------------------------------------------- 7, 14: signals
def interrupt_in_iteration(tmp_path: Path, sig: signal.Signals, iteration: int) -> tuple[list[str], int, str]:
    """``rllib train file`` in a subprocess, sent ``sig`` during ``iteration`` (slowed down by 6 s),
    after the checkpoint of the iteration before; the command line, its exit status and stderr."""
    resumed = tmp_path / "resumed"
    slow = f"""
    def slow_down(*, algorithm, result, **kwargs):
        if result["training_iteration"] == {iteration} and not __import__("os").path.exists({str(resumed)!r}):
            __import__("time").sleep(6)
    config.callbacks(on_train_result=slow_down)
    stop = {{"training_iteration": 3}}
    """
    path = write_experiment(tmp_path, textwrap.dedent(slow))
    args = ["train", "file", str(path), "--storage-path", str(tmp_path / "out"), "--name", "run"]
    args += ["--checkpoint-freq", "1", "--config", '{"lr": 0.001}']
    log = tmp_path / "stderr.txt"
    with log.open("w") as err, open(os.devnull, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "hgpo_rllib.cli", *args],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            start_new_session=True,
            stdout=out,
            stderr=err,
        )
        try:
            deadline = time.monotonic() + 180
            while not list((tmp_path / "out" / "run").glob(f"*/checkpoint_{iteration - 2:06d}")):
                assert process.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "the run wrote no checkpoint in time"
                time.sleep(0.2)
            time.sleep(2)
            process.send_signal(sig)
            process.wait(timeout=120)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    resumed.touch()
    return args, process.returncode, log.read_text()


def resume_as_told(err: str, signal_name: str) -> int:
    """Run the resume command that the interrupted run printed (one line, after ``rllib:``)."""
    (hint,) = [line for line in err.splitlines() if line.startswith(f"rllib: {signal_name}")]
    command = shlex.split(hint.split("with: ", 1)[1])
    assert command[0] == "rllib" and "--config" not in command and command[-1] == "--resume"
    return cli.main(command[1:])


def trial_rows(experiment_dir: Path) -> tuple[list[int], list[int]]:
    (trial,) = [d for d in experiment_dir.iterdir() if d.is_dir()]
    result = pd.read_json(trial / "result.json", lines=True)["training_iteration"].tolist()
    progress = pd.read_csv(trial / "progress.csv")["training_iteration"].tolist()
    return result, progress


@pytest.mark.usefixtures("ray_session")  # the resume runs in this process: no second Ray start
def test_ctrl_c_exits_130_with_how_to_resume_and_resume_finishes_the_run(tmp_path: Path) -> None:
    """Findings 7 and 3: Ctrl-C printed ``errors: 0`` and exited 0 at iteration 2 of 6; resumed
    rows were repeated and misaligned."""
    args, status, err = interrupt_in_iteration(tmp_path, signal.SIGINT, iteration=2)
    assert status == 130, err[-3000:]
    assert "Traceback" not in err
    # Finding 15: Ray wrote its authentication token readable by every user.
    ray_home = Path(os.environ["HOME"]) / ".ray"
    assert stat.S_IMODE(ray_home.stat().st_mode) == 0o700
    assert stat.S_IMODE((ray_home / "auth_token").stat().st_mode) == 0o600
    assert resume_as_told(err, "SIGINT") == 0
    assert trial_rows(tmp_path / "out" / "run") == ([1, 2, 3], [1, 2, 3])


@pytest.mark.slow  # a second run in a subprocess, like the Ctrl-C test's
@pytest.mark.usefixtures("ray_session")
def test_sigterm_exits_143_and_the_run_resumes(tmp_path: Path) -> None:
    """Finding 14: SIGTERM made Ray abort (status 134, a stack dump)."""
    args, status, err = interrupt_in_iteration(tmp_path, signal.SIGTERM, iteration=2)
    assert status == 143, err[-3000:]
    assert "Traceback" not in err and "Aborted" not in err
    assert resume_as_told(err, "SIGTERM") == 0
    assert trial_rows(tmp_path / "out" / "run") == ([1, 2, 3], [1, 2, 3])
