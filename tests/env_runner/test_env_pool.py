"""The env worker pool (hgpo_rllib.env_runner.env_pool): sub-envs reset and stepped in worker processes,
as in the runner's own process, and a crashed worker ends only its own episodes."""

from __future__ import annotations

import os
import signal

import torch
from helpers import GROUP_SIZE, keychest_config

import envs
from hgpo_rllib.env_runner import GroupedEnvRunner
from hgpo_rllib.env_runner.env_pool import EnvCrash, EnvWorkerPool


def test_env_pool_matches_in_process_envs_and_isolates_a_crashed_worker() -> None:
    config = {"max_steps": 10, "num_rooms": 5}
    calls = [(i, 100 + i // 2) for i in range(4)]
    local = [envs.make_env("keychest", config) for _ in range(4)]
    want = [env.reset(seed=seed) for env, (_, seed) in zip(local, calls, strict=True)]
    pool = EnvWorkerPool("keychest", config, num_workers=2)
    try:
        got = pool.reset(calls)
        assert [obs for obs, _ in got] == [obs for obs, _ in want]
        actions = [(i, info["admissible_actions"][0]) for i, (_, info) in enumerate(want)]
        want_steps = [local[i].step(a) for i, a in actions]
        got_steps = pool.step(actions)
        assert [s[:4] for s in got_steps] == [s[:4] for s in want_steps]
        # Kill worker 1 (envs 1 and 3): only their calls fail, and the pool restarts the worker.
        os.kill(pool._workers[1][0].pid, signal.SIGKILL)
        pool._workers[1][0].join()
        results = pool.step([(0, "look"), (1, "look")])
        assert not isinstance(results[0], EnvCrash)
        assert isinstance(results[1], EnvCrash) and "died" in results[1].message
        assert pool.reset([calls[1]])[0][0] == want[1][0]  # a fresh env in the restarted worker
    finally:
        pool.close()


def test_runner_with_env_workers_samples_the_same_groups_and_ends_only_a_crashed_episode() -> None:
    def sample(workers: int, crash: bool = False) -> list:
        torch.manual_seed(0)
        config = keychest_config(remote_runners=0).env_runners(num_env_workers=workers)
        runner = GroupedEnvRunner(config=config, worker_index=1)
        try:
            if crash:  # the first step kills the worker of env 1 (and env 3): only those episodes end
                pool_step = runner._env_pool().step

                def step_then_crash(calls: list) -> list:
                    if not getattr(runner, "_crashed", False):
                        runner._crashed = True
                        os.kill(runner._pool._workers[1][0].pid, signal.SIGKILL)
                        runner._pool._workers[1][0].join()
                    return pool_step(calls)

                runner._pool.step = step_then_crash
            return runner.sample(num_episodes=2 * GROUP_SIZE)
        finally:
            runner.stop()

    def summary(episodes: list) -> list:
        return [
            (ep.get_observations(0), [a.tolist() for a in ep.get_actions()], list(ep.get_rewards()))
            for ep in episodes
        ]

    in_process = sample(0)
    assert summary(sample(2)) == summary(in_process)
    crashed = sample(2, crash=True)
    ended = [i for i, ep in enumerate(crashed) if "env_error" in ep.get_infos(-1)]
    assert ended == [1, 3] and all(crashed[i].is_truncated and len(crashed[i]) == 1 for i in ended)
    assert all(len(crashed[i]) == len(in_process[i]) for i in (0, 2))
