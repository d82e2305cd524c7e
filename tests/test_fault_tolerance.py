"""Nothing fails quietly: hung and failing env runners, a run whose every runner raises, a
non-finite loss, and the runner's task generator across state round trips (KeyChest, tiny model).

Faults are injected with an ``on_episode_start`` callback, which runs inside the env runners'
sampling, so a runner "hangs" (sleeps past ``sample_timeout_s``) or raises there.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import pytest
import ray
from test_algorithm import GROUP_SIZE, GROUPS, keychest_config

from hgpo_rllib.env_runner import TASK_GENERATOR

SAMPLE_TIMEOUT_S = 15.0
# The fault-injecting callbacks run in the env runners, which cannot import this test module.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module", autouse=True)
def ray_session() -> Any:
    ray.init(num_cpus=4, include_dashboard=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


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
        with pytest.raises(FloatingPointError, match=f"non-finite loss.*non-finite terms:.*{term}"):
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
