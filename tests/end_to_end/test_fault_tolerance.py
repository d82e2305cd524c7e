"""Nothing fails quietly: hung and failing env runners, a run whose every runner raises, a
non-finite loss, and the runner's task generator across state round trips (KeyChest, tiny model).

Faults are injected with an ``on_episode_start`` callback, which runs inside the env runners'
sampling, so a runner "hangs" (sleeps past ``sample_timeout_s``) or raises there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import ray
from helpers import (
    GROUP_SIZE,
    GROUPS,
    ROOT,
    crash_once_lines,
    keychest_config,
    train_args,
    write_experiment,
)

from hgpo_rllib import cli
from hgpo_rllib.columns import TASK_GENERATOR

SAMPLE_TIMEOUT_S = 15.0
# The fault-injecting callbacks run in the env runners, which cannot import this test module.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.usefixtures("ray_session")


def hang_on_runner_1_raise_on_runner_2(*, env_runner: Any, **kwargs: Any) -> None:
    """Runner 1 sleeps far past the sampling timeout (until it is killed); runner 2 raises."""
    if env_runner.worker_index == 1 and not env_runner.config.in_evaluation:
        time.sleep(600)
    if env_runner.worker_index == 2:
        raise ValueError("simulated env failure on runner 2")


def raise_everywhere(**kwargs: Any) -> None:
    raise ValueError("simulated env failure everywhere")


def test_groups_of_a_hung_and_a_failing_runner_are_sampled_again_on_the_healthy_one() -> None:
    config = (
        keychest_config(remote_runners=3)
        .env_runners(sample_timeout_s=SAMPLE_TIMEOUT_S)
        .callbacks(on_episode_start=hang_on_runner_1_raise_on_runner_2)
    )
    algo = config.build_algo()
    try:
        start = time.monotonic()
        result = algo.train()
        assert time.monotonic() - start < SAMPLE_TIMEOUT_S + 60  # the hung runner was not awaited
        assert result["num_groups_sampled"] == GROUPS  # all groups, sampled by runner 3
        assert result["learners"]["default_policy"]["num_groups"] == GROUPS
        assert result["num_env_runner_failures"] == 2
        assert result["num_consecutive_failed_iterations"] == 0
        # The hung runner was killed and is restarting; the failing one is up, but sat out.
        assert 1 not in algo.env_runner_group.healthy_env_runner_ids()
        assert 2 in algo.env_runner_group.healthy_env_runner_ids()
    finally:
        algo.stop()


def test_every_runner_raising_stops_training_with_that_error() -> None:
    config = keychest_config(remote_runners=2).callbacks(on_episode_start=raise_everywhere)
    algo = config.build_algo()
    try:
        for failed in (1, 2):  # num_consecutive_env_runner_failures_tolerance=2 (HGPO's default)
            result = algo.train()
            assert result["num_groups_sampled"] == 0
            assert result["num_consecutive_failed_iterations"] == failed
            assert result["num_env_runner_failures"] == 2
        with pytest.raises(RuntimeError, match="(?s)3 incomplete iteration.*simulated env failure ever"):
            algo.train()
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("setting", "term"),
    [({"kl_coeff": 1e300}, r"kl_coeff \* kl"), ({"lr": 1e30}, r"logp \(the learner's log-probs\)")],
)
def test_non_finite_loss_stops_the_update_naming_the_terms(setting: dict[str, float], term: str) -> None:
    algo = keychest_config(remote_runners=0, num_epochs=3, **setting).build_algo()
    try:
        with pytest.raises(FloatingPointError, match=f"learner: non-finite loss.*non-finite terms:.*{term}"):
            for _ in range(3):
                algo.train()
    finally:
        algo.stop()


def test_runner_state_round_trip_keeps_the_task_generator_position() -> None:
    algo = keychest_config(remote_runners=0).build_algo()
    try:
        runner = algo.env_runner
        runner.sample(num_episodes=GROUP_SIZE)
        state = runner.get_state()
        seeds = runner._new_group_seeds(4)[1]
        assert runner.get_state()[TASK_GENERATOR] != state[TASK_GENERATOR]
        runner.set_state(state)
        assert runner._new_group_seeds(4)[1] == seeds  # the saved position, not the start
        fresh = np.random.default_rng(runner._seed).integers(0, 2**31 - 1, size=4).tolist()
        assert seeds != fresh
    finally:
        algo.stop()


def runner_generators(algo: Any) -> list[dict]:
    return algo.env_runner_group.foreach_env_runner(
        lambda er: er.get_state(components=TASK_GENERATOR)[TASK_GENERATOR], local_env_runner=False
    )


def test_checkpoints_keep_the_remote_runners_task_generators(tmp_path: Any) -> None:
    algo = keychest_config().build_algo()
    try:
        algo.train()
        saved = runner_generators(algo)
        assert saved[0]["num_groups_started"] == GROUPS
        path = algo.save_to_path(tmp_path / "checkpoint")
        algo.train()
        assert runner_generators(algo) != saved
        algo.restore_from_path(path)
        assert runner_generators(algo) == saved
    finally:
        algo.stop()


# ------------------------------------------------------------------------------ the CLI
def trial_iterations(experiment_dir: Path) -> list[int]:
    (trial,) = [d for d in experiment_dir.iterdir() if d.is_dir()]
    return pd.read_json(trial / "result.json", lines=True)["training_iteration"].tolist()


def train_with_every_runner_raising(tmp_path: Path, iterations: int) -> int:
    """``rllib train file`` of an experiment whose every episode start raises; its exit status."""
    raising = """
    def raise_everywhere(**kwargs):
        raise ValueError("simulated env failure everywhere")
    config.callbacks(on_episode_start=raise_everywhere)
    """
    path = write_experiment(tmp_path, textwrap.dedent(raising), stop_iteration=iterations)
    return cli.main(train_args(path, tmp_path / "out", "--max-failures", "0"))


@pytest.mark.slow  # a CLI run (about 20 s); the default run has the one whose runners sample nothing
def test_cli_exits_non_zero_when_every_runner_raises(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert train_with_every_runner_raising(tmp_path, iterations=5) == 1
    err = capsys.readouterr().err
    assert "rllib: trial failed" in err and "simulated env failure everywhere" in err


def test_cli_exits_non_zero_when_the_last_iteration_sampled_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One iteration, every runner raising: below the failure tolerance, yet nothing was trained."""
    assert train_with_every_runner_raising(tmp_path, iterations=1) == 1
    assert "sampled only 0 rollout group(s)" in capsys.readouterr().err


@pytest.mark.slow  # 40-100 s: seven iterations, a crash and Tune's retry
def test_crashed_trial_is_retried_from_the_default_checkpoint(tmp_path: Path) -> None:
    """No checkpoint flag: the default frequency (5) gives the retry a checkpoint to start from."""
    marker = tmp_path / "crashed"
    path = write_experiment(tmp_path, crash_once_lines(marker, 6), stop_iteration=7)
    assert cli.main(train_args(path, tmp_path / "out")) == 0 and marker.exists()
    assert trial_iterations(tmp_path / "out" / "run") == [1, 2, 3, 4, 5, 6, 7]  # 6, 7 after checkpoint 5


@pytest.mark.slow  # a second Ray cluster in a subprocess: minutes on a loaded 2-core machine
def test_killed_run_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    """``rllib train file`` in a subprocess, killed (SIGKILL, its whole process group) while its
    3rd iteration hangs (after Tune has saved its experiment state with checkpoint 2 in it);
    ``--resume`` goes on from checkpoint 2, not from iteration 0."""
    release, hanging = tmp_path / "release", tmp_path / "hanging"
    hang = f"""
    def hang_in_third(*, algorithm, result, **kwargs):
        if result["training_iteration"] == 3:
            open({str(hanging)!r}, "w").close()
        while result["training_iteration"] == 3 and not __import__("os").path.exists({str(release)!r}):
            __import__("time").sleep(1)
    config.callbacks(on_train_result=hang_in_third)
    """
    path = write_experiment(tmp_path, textwrap.dedent(hang), stop_iteration=5)
    args = train_args(path, tmp_path / "out", "--checkpoint-freq", "2")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "hgpo_rllib.cli", *args],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while not hanging.exists():  # checkpoint 2 was saved (and registered) before iteration 3 ran
            assert process.poll() is None and time.monotonic() < deadline, "iteration 3 never ran"
            time.sleep(1)
        assert list((tmp_path / "out" / "run").glob("*/checkpoint_000000"))
        # Tune saves its experiment state periodically (every 10 s or more): wait for a save after the hang
        while not any(
            state.stat().st_mtime > hanging.stat().st_mtime
            for state in (tmp_path / "out" / "run").glob("experiment_state-*.json")
        ):
            assert process.poll() is None and time.monotonic() < deadline, "no experiment state saved"
            time.sleep(0.5)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    release.touch()
    assert cli.main([*args, "--resume"]) == 0
    iterations = trial_iterations(tmp_path / "out" / "run")
    assert iterations[-3:] == [3, 4, 5] and iterations.count(1) == 1  # from checkpoint 2, not 0
