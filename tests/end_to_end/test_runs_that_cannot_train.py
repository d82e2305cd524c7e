"""A run that cannot start, or trains nothing, says so at once and exits non-zero (issue 62).

A trial that fails before its first result is not retried and its cause is the last line; a run
whose every episode ends in an environment error stops after ``ENV_ERROR_ITERATIONS`` iterations,
naming the env and its error; the iteration line shows env errors and the informative groups; a
``--stop`` count below 1 is refused before the run.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import pickle
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import TINY_MODEL, own_stderr, train_args, write_experiment
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from hgpo_rllib import cli
from hgpo_rllib.algorithms.runner_pool import ENV_ERROR_ITERATIONS, EnvErrorsOnly, RunnerPool
from hgpo_rllib.cli.console import ZERO_ADVANTAGE_ITERATIONS, UninformativeGroupsWarning, iteration_line
from hgpo_rllib.cli.stopping import RecurringTrialError, StopOnRecurringErrors, check_stop_criteria
from hgpo_rllib.cli.train import _incomplete_trials
from hgpo_rllib.connectors.learner.group_advantages import informative_groups
from hgpo_rllib.errors import error_line
from hgpo_rllib.evaluation import CheckpointPolicy
from hgpo_rllib.progress import IterationProgress

#: An env whose constructor raises (each call is counted in the file ``calls``).
BROKEN_ENV = """
from envs.keychest.env import KeyChestEnv

class BrokenEnv(KeyChestEnv):
    def __init__(self, max_steps=4, **kwargs):
        with open({calls!r}, "a") as file:
            file.write("built\\n")
        raise RuntimeError("no game server at localhost:1234")

config.environment(__file__ + ":BrokenEnv", env_config={{"max_steps": 4}})
config.rl_module(model_config={{**{model!r}, "tokenizer_corpus": list(COMMANDS)}})
"""

#: An env whose engine raises at every step: every episode ends truncated with ``info["env_error"]``.
FAILING_ENGINE = """
from envs.keychest.env import KeyChestEnv

class FlakyEnv(KeyChestEnv):
    def _execute(self, command):
        raise ConnectionError("the game server went away")

config.environment(__file__ + ":FlakyEnv", env_config={"max_steps": 4})
stop = {"training_iteration": 3}
"""


@pytest.mark.usefixtures("ray_session")
def test_a_run_that_cannot_start_fails_at_once_naming_its_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It retried 3 times (74 s) and ended with "stop key 'training_iteration' is not a metric", exit 2."""
    calls = tmp_path / "calls"
    path = write_experiment(tmp_path, BROKEN_ENV.format(calls=str(calls), model=TINY_MODEL))
    started = time.monotonic()
    assert cli.main(train_args(path, tmp_path / "out", "--max-failures", "3")) == 1
    assert time.monotonic() - started < 60
    err = own_stderr(capsys.readouterr().err)
    assert "is not a metric" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("rllib")]
    assert err.rstrip().endswith(line)
    assert line.startswith("rllib: trial failed: ") and "before its first iteration" in line, line
    assert "experiment.py:BrokenEnv" in line and "RuntimeError: no game server at localhost:1234" in line
    assert "not retried" in line
    assert calls.read_text().count("built") == 1  # no retry built it again


@pytest.mark.slow  # a CLI run (about 20 s); the default run has its parts' tests below
@pytest.mark.usefixtures("ray_session")
def test_a_run_whose_every_episode_ends_in_an_env_error_stops_naming_the_env(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It trained 2 iterations on nothing, printed ``errors: 0`` and exited 0."""
    path = write_experiment(tmp_path, FAILING_ENGINE)
    assert cli.main(train_args(path, tmp_path / "out", "--max-failures", "3")) == 1
    captured = capsys.readouterr()
    iterations = [line for line in captured.out.splitlines() if line.startswith("iter ")]
    err = own_stderr(captured.err)
    assert len(iterations) == ENV_ERROR_ITERATIONS - 1 and "env errors 100%" in iterations[0]
    (line,) = [line for line in err.splitlines() if line.startswith("rllib")]
    assert err.rstrip().endswith(line)
    assert f"every episode of the last {ENV_ERROR_ITERATIONS} iterations ended in an env error" in line
    assert "experiment.py:FlakyEnv" in line and "ConnectionError: the game server went away" in line
    assert "not retried" in line


def errored_episode(error: str | None) -> SingleAgentEpisode:
    """A finished one-step episode, ended by an env error when ``error`` is given."""
    step_info = {"env_error": error} if error else {}
    return SingleAgentEpisode(
        observations=["a", "b"],
        actions=["x"],
        rewards=[0.0],
        infos=[{}, step_info],
        truncated=True,
        len_lookback_buffer=0,
    )


def test_env_errors_stop_sampling_after_the_stated_number_of_iterations() -> None:
    pool = RunnerPool(SimpleNamespace(env="my_env.py:MyEnv"), IterationProgress(0))
    all_failed = [errored_episode("KeyError: 'x'"), errored_episode("ValueError: the last")]
    pool.count_env_errors(all_failed)
    pool.count_env_errors([errored_episode(None), errored_episode("KeyError: 'x'")])  # resets the count
    for _ in range(ENV_ERROR_ITERATIONS - 1):
        pool.count_env_errors(all_failed)
    with pytest.raises(EnvErrorsOnly) as raised:
        pool.count_env_errors(all_failed)
    assert str(raised.value) == (
        f"every episode of the last {ENV_ERROR_ITERATIONS} iterations ended in an env error of env "
        "'my_env.py:MyEnv'; the last: ValueError: the last"
    )
    pool.count_env_errors([])  # an iteration that sampled nothing is counted elsewhere


def test_a_trial_whose_last_iteration_only_had_env_errors_did_not_finish() -> None:
    """Below ``ENV_ERROR_ITERATIONS`` (a 1-iteration run) the run still exits non-zero."""
    result = SimpleNamespace(path="/r/trial", error=None, metrics={"env_runners": {"env_error_rate": 1.0}})
    assert _incomplete_trials([result]) == [
        "/r/trial: every episode of its last iteration ended in an env error (env_error_rate 1.0); "
        "see the env runners' warnings above"
    ]
    result.metrics["env_runners"]["env_error_rate"] = 0.5
    assert _incomplete_trials([result]) == []


def test_the_iteration_line_shows_env_errors_and_informative_groups() -> None:
    result = {
        "training_iteration": 3,
        "env_runners": {
            "env_error_rate": 0.15,
            "length_cut_rate_smoothed": 0.25,
            "prompt_cut_rate_smoothed": 0.5,
        },
        "learners": {"default_policy": {"num_informative_groups": 1, "num_groups": 3}},
    }
    assert iteration_line(result) == (
        "iter 3 | length-cut 25.0% | prompts cut 50.0% | env errors 15% | informative groups 1/3"
    )
    team = {"training_iteration": 1, "learners": {"__all_modules__": {"num_informative_groups": 0}}}
    team["learners"]["__all_modules__"]["num_groups"] = 2
    assert iteration_line(team) == "iter 1 | informative groups 0/2"


def test_a_trial_without_informative_groups_gets_a_warning_line(capsys: pytest.CaptureFixture[str]) -> None:
    warn = UninformativeGroupsWarning()
    trial = "trial_1"  # Tune's trial objects print their name

    def report(informative: int) -> None:
        result = {"learners": {"default_policy": {"num_informative_groups": informative, "num_groups": 4}}}
        warn.on_trial_result(iteration=0, trials=[trial], trial=trial, result=result)

    for _ in range(ZERO_ADVANTAGE_ITERATIONS - 1):
        report(0)
    report(2)
    for _ in range(ZERO_ADVANTAGE_ITERATIONS - 1):
        report(0)
    assert capsys.readouterr().out == ""
    report(0)
    report(0)  # once per run of such iterations
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(
        f"warning: no informative group in {ZERO_ADVANTAGE_ITERATIONS} iterations in a row "
    )


def test_informative_groups_are_those_with_a_non_zero_advantage() -> None:
    import numpy as np

    groups = ["a", "a", "b", "b", "c"]
    assert informative_groups(groups, np.array([0.0, 0.0, 0.5, -0.5, 0.0])) == 1
    assert informative_groups(groups, np.zeros(5)) == 0


BAD_STOPS = {
    "iteration-0": ({"training_iteration": 0}, "'training_iteration' must be >= 1"),
    "iteration-negative": ({"training_iteration": -1}, "'training_iteration' must be >= 1"),
    "iteration-fraction": ({"training_iteration": 0.5}, "'training_iteration' must be >= 1"),
    "timesteps-0": ({"timesteps_total": 0}, "'timesteps_total' must be >= 1"),
    "env-steps-0": ({"num_env_steps_sampled_lifetime": 0}, "'num_env_steps_sampled_lifetime' must be >= 1"),
    "nested-lifetime-0": (
        {"env_runners/num_episodes_lifetime": 0},
        "'env_runners/num_episodes_lifetime' must be >= 1",
    ),
    "time-0": ({"time_total_s": 0}, "'time_total_s' must be > 0"),
    "time-negative": ({"time_total_s": -5}, "'time_total_s' must be > 0"),
    "nan": ({"env_runners/success_rate": math.nan}, "must be a finite number"),
    "infinity": ({"training_iteration": math.inf}, "must be a finite number"),
}


@pytest.mark.parametrize("case", list(BAD_STOPS))
def test_a_stop_count_below_one_is_refused(case: str) -> None:
    """``{"training_iteration": 0}`` trained one iteration and exited 0."""
    stop, message = BAD_STOPS[case]
    with pytest.raises(ValueError, match=message):
        check_stop_criteria(stop)


def test_stop_criteria_that_mean_something_are_kept() -> None:
    check_stop_criteria({"training_iteration": 1, "time_total_s": 0.5, "env_runners/success_rate": 0})


def test_a_bad_stop_value_is_one_line_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_experiment(tmp_path)
    assert cli.main(train_args(path, tmp_path / "out", "--stop", '{"training_iteration": 0}')) == 2
    err = own_stderr(capsys.readouterr().err)
    assert err.count("\n") == 1 and err.startswith("rllib: error: stop criterion 'training_iteration'"), err
    assert not (tmp_path / "out").exists()


def test_an_error_line_is_the_innermost_cause_in_one_line() -> None:
    class ActorDied(Exception):
        """Ray's actor errors carry the creation error only as traceback text."""

        def __init__(self) -> None:
            super().__init__("The actor died\nTraceback ...\n  File x\nValueError: bad\nthing\n")
            self.error_msg = str(self)

    wrapped: Any = RuntimeError("outer")
    wrapped.cause = KeyError("inner")
    assert error_line(wrapped) == "KeyError: 'inner'"
    assert error_line(ActorDied()) == "ValueError: bad thing"


def test_an_env_that_cannot_be_built_for_the_tiny_tokenizer_is_one_error_naming_it(tmp_path: Path) -> None:
    """The tiny model's tokenizer is trained on texts the env plays on the driver: an env whose
    constructor raised ended the command with a traceback."""
    from hgpo_rllib import HGPOConfig

    env_file = tmp_path / "broken_env.py"
    env_file.write_text(
        "from envs.keychest.env import KeyChestEnv\n\n"
        "class BrokenEnv(KeyChestEnv):\n"
        "    def __init__(self, max_steps=4, **kwargs):\n"
        "        raise RuntimeError('no game server at localhost:1234')\n"
    )
    config = HGPOConfig().environment(f"{env_file}:BrokenEnv", env_config={"max_steps": 4})
    with pytest.raises(
        ValueError, match=r"broken_env.py:BrokenEnv.*RuntimeError: no game server at localhost:1234"
    ):
        config.validate()


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", "."])
def test_a_name_that_is_a_path_is_refused(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_experiment(tmp_path)
    assert cli.main(train_args(path, tmp_path / "out", name=name)) == 2
    err = own_stderr(capsys.readouterr().err)
    assert err.count("\n") == 1 and f"--name {name!r} is not a name" in err
    assert not (tmp_path / "out").exists() and not (tmp_path.parent / "x").exists()


def test_ctrl_c_before_the_run_exists_says_to_rerun_without_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hint after a Ctrl-C at start-up was "rerun with --resume", which found nothing to resume."""
    import hgpo_rllib.cli.tune_run as tune_run

    def interrupted(config: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tune_run, "check_trial_resources", interrupted)
    path = write_experiment(tmp_path)
    assert cli.main(train_args(path, tmp_path / "out", name=None)) == 130
    last = own_stderr(capsys.readouterr().err).strip().splitlines()[-1]
    assert last == "rllib: interrupted; the run had not started; rerun the same command (without --resume)"


def test_resume_takes_the_run_s_own_config_and_module_settings_but_no_others(tmp_path: Path) -> None:
    """A run started with --config (or --module) resumes with the same flags repeated; a change is
    refused (before, any --config with --resume was)."""
    from hgpo_rllib.cli.run_dirs import RUN_RECORD, check_resume
    from hgpo_rllib.run_records import write_record

    started = {"stop": {"training_iteration": 2}, "config": {"lr": 1e-5}, "module": ["planner.lr=1e-5"]}
    write_record(tmp_path / RUN_RECORD, started)
    check_resume(tmp_path, dict(started))  # the same command + --resume
    check_resume(tmp_path, {"stop": {"training_iteration": 2}})  # the printed resume command (no --config)
    with pytest.raises(ValueError, match=r"config was \{'lr': 1e-05\}, now \{'lr': 0\.001\}"):
        check_resume(tmp_path, {**started, "config": {"lr": 1e-3}})


#: The checkpoint writer fails as a full disk makes it: ENOSPC after part of the second checkpoint
#: (the one after iteration 2) is written.
DISK_FULL_AT_SECOND_CHECKPOINT = """
import errno, os
from pathlib import Path
from hgpo_rllib import HGPO

class DiskFullHGPO(HGPO):
    def save_checkpoint(self, checkpoint_dir):
        if self.iteration < 2:
            return super().save_checkpoint(checkpoint_dir)
        (Path(checkpoint_dir) / "half_written").write_bytes(b"0" * 1000)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), checkpoint_dir)

config.algo_class = DiskFullHGPO
stop = {"training_iteration": 3}
"""


#: A real full disk: a small tmpfs holds the run's storage, and the disk fills up (a file written
#: until ENOSPC) as the second checkpoint is saved, so Tune's copy of it to the storage fails.
FILL_THE_DISK_AT_SECOND_CHECKPOINT = """
import errno
from hgpo_rllib import HGPO

class FillingHGPO(HGPO):
    def save_checkpoint(self, checkpoint_dir):
        if self.iteration >= 2:
            with open({filler!r}, "ab", buffering=0) as filler:
                try:
                    while True:
                        filler.write(bytes(1 << 16))
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
        super().save_checkpoint(checkpoint_dir)

config.algo_class = FillingHGPO
stop = {{"training_iteration": 3}}
"""


@contextlib.contextmanager
def small_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``mount_point`` while the block runs; the test is skipped where
    mounting one is not permitted (not root, or a container without the capability)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


@pytest.mark.slow  # ~55 s each on 2 shared cores: a 2-iteration run; the unit test below runs by default
@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("disk", ["ENOSPC injected", "small tmpfs"])
def test_a_full_disk_while_saving_a_checkpoint_keeps_the_previous_one_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], disk: str
) -> None:
    """Issue 62, item 5: a full disk while a checkpoint is saved (an ENOSPC raised by the checkpoint
    writer, or a real full tmpfs under the run's storage when the test may mount one) ends the run
    with exit 1 and one line naming the full disk and the checkpoint that is kept (not retried: a
    full disk fails again), and that checkpoint still loads."""
    with contextlib.ExitStack() as stack:
        if disk == "small tmpfs":
            storage = stack.enter_context(small_tmpfs(tmp_path / "disk", "64m"))
            experiment = FILL_THE_DISK_AT_SECOND_CHECKPOINT.format(filler=str(storage / "filler"))
        else:
            storage, experiment = tmp_path, DISK_FULL_AT_SECOND_CHECKPOINT
        path = write_experiment(tmp_path, experiment)
        args = train_args(path, storage / "out", "--checkpoint-freq", "1", "--max-failures", "3")
        assert cli.main(args) == 1
        (trial,) = [d for d in (storage / "out" / "run").iterdir() if d.is_dir()]
        assert sorted(c.name for c in trial.glob("checkpoint_*")) == ["checkpoint_000000"]
        last = own_stderr(capsys.readouterr().err).strip().splitlines()[-1]
        assert re.fullmatch(
            rf"rllib: .*No space left on device.*; the checkpoint {re.escape(str(trial))}/checkpoint_000000 "
            r"\(iteration 1\) is kept: free space, then rerun with --resume",
            last,
        ), last
        if disk == "small tmpfs":  # Tune's copy of the next checkpoint stopped part way
            assert "the incomplete copy checkpoint_000001 was removed" in last
        policy = CheckpointPolicy(trial / "checkpoint_000000")
        assert policy.module is not None


@pytest.mark.parametrize("retries_left", [True, False])
def test_a_full_disk_is_not_retried_and_names_the_checkpoint_kept(tmp_path: Path, retries_left: bool) -> None:
    """The rule of the test above without a run: a trial whose error wraps an ENOSPC stops the run,
    with or without retries left, in one line naming the kept checkpoint, and the copy of the next
    one that the full disk cut short (which Tune never added to the trial) is removed and named."""
    error: Any = RuntimeError("Ray's wrapper of the trial's error")  # Ray keeps the original as cause
    error.cause = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/tmp/checkpoint_tmp")
    (tmp_path / "error.pkl").write_bytes(pickle.dumps(error))
    for number in range(3):  # the newest is the copy the full disk cut short, which Tune never added
        (tmp_path / "t" / f"checkpoint_00000{number}").mkdir(parents=True)
    kept = SimpleNamespace(
        checkpoint=SimpleNamespace(path=str(tmp_path / "t" / "checkpoint_000001")),
        metrics={"training_iteration": 4},
    )
    trial = SimpleNamespace(
        pickled_error_file=str(tmp_path / "error.pkl"),
        last_result={"training_iteration": 5},
        latest_checkpoint_result=kept,
    )
    callback = StopOnRecurringErrors()
    hook = callback.on_trial_recover if retries_left else callback.on_trial_error
    with pytest.raises(RecurringTrialError) as raised:
        hook(0, [trial], trial)
    assert str(raised.value).endswith(
        f"OSError: [Errno {errno.ENOSPC}] No space left on device: '/tmp/checkpoint_tmp'; the incomplete "
        f"copy checkpoint_000002 was removed; the checkpoint {tmp_path}/t/checkpoint_000001 (iteration 4) "
        "is kept: free space, then rerun with --resume"
    )
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["checkpoint_000000", "checkpoint_000001"]
