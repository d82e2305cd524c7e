"""Sub-envs stepped in worker processes, so resets and steps of one wave run concurrently.

Text envs are pure Python and hold the GIL (an ALFWorld reset plans a new game for ~0.5 s), so
threads do not help; processes do. Gymnasium's ``AsyncVectorEnv`` steps every sub-env at once and
autoresets finished ones, which breaks lock-step groups where finished members must stay finished
while the others go on, so the pool is ours: sub-env ``i`` lives in worker ``i % num_workers``;
``reset``/``step`` take any subset of indices, send each worker its share in one message and wait for
all. Results do not depend on the number of workers (each env is deterministic in its reset seed and
actions). An exception in one env's call comes back as an :class:`EnvCrash` for that call (the env
is rebuilt on its next reset); a worker that dies (segfault, OOM kill) turns each of its pending
calls into one and is restarted with fresh envs. The runner ends such episodes as truncated with
``info["env_error"]``.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ray import cloudpickle

import envs


@dataclass(frozen=True)
class EnvCrash:
    """Stands in for the result of a call whose worker process died."""

    message: str


def _worker(conn: Connection, pickled_creator: bytes, env_config: dict[str, Any]) -> None:
    """Own some sub-envs (made on first use); serve ("reset", [(i, seed)]) and ("step", [(i, action)])."""
    creator = cloudpickle.loads(pickled_creator)
    sub_envs: dict[int, Any] = {}
    while True:
        try:
            command, calls = conn.recv()
        except EOFError:
            break
        if command == "close":
            break
        results = []
        for index, arg in calls:
            try:
                env = sub_envs.get(index)
                if env is None:
                    env = sub_envs[index] = creator(env_config)
                results.append(env.reset(seed=arg) if command == "reset" else env.step(arg))
            except Exception as exc:  # this env only: report it, rebuild it on next use
                sub_envs.pop(index, None)
                results.append(EnvCrash(f"{type(exc).__name__}: {exc}"))
        conn.send(results)
    for env in sub_envs.values():
        env.close()
    conn.close()


class EnvWorkerPool:
    """``num_workers`` processes that own sub-envs ``0 .. num_envs - 1`` (see the module docstring)."""

    def __init__(self, env_name: str, env_config: Mapping[str, Any], num_workers: int):
        if num_workers < 1:
            raise ValueError(f"num_env_workers={num_workers} is invalid: expected an int >= 1")
        # By value: a user's creator (registered with Tune from a script or experiment file) is not
        # importable in the worker processes, which are not Ray workers.
        self._pickled_creator = cloudpickle.dumps(envs.env_creator(env_name))
        self._env_config = dict(env_config)
        # forkserver: workers never inherit this process's threads (Ray, torch) or its model.
        self._ctx = mp.get_context("forkserver")
        self._workers: list[tuple[Any, Connection]] = [self._start() for _ in range(num_workers)]

    def _start(self) -> tuple[Any, Connection]:
        ours, theirs = self._ctx.Pipe()
        process = self._ctx.Process(
            target=_worker, args=(theirs, self._pickled_creator, self._env_config), daemon=True
        )
        process.start()
        theirs.close()
        return process, ours

    def reset(self, calls: Sequence[tuple[int, int]]) -> list[Any]:
        """(index, seed) pairs -> (obs, info) each, in order."""
        return self._run("reset", calls)

    def step(self, calls: Sequence[tuple[int, Any]]) -> list[Any]:
        """(index, action) pairs -> (obs, reward, terminated, truncated, info) or EnvCrash, in order."""
        return self._run("step", calls)

    def _run(self, command: str, calls: Sequence[tuple[int, Any]]) -> list[Any]:
        n = len(self._workers)
        shares: dict[int, list[int]] = {}
        for position, (index, _) in enumerate(calls):
            shares.setdefault(index % n, []).append(position)
        for worker, positions in shares.items():
            try:
                self._workers[worker][1].send((command, [calls[p] for p in positions]))
            except (BrokenPipeError, OSError):
                pass  # reported as a crash when the reply is read
        results: list[Any] = [None] * len(calls)
        for worker, positions in shares.items():
            process, conn = self._workers[worker]
            try:
                replies = conn.recv()
            except (EOFError, OSError):
                process.join(timeout=1)
                message = f"env worker process {worker} died (exit code {process.exitcode}) during {command}"
                replies = [EnvCrash(message)] * len(positions)
                conn.close()
                self._workers[worker] = self._start()
            for position, reply in zip(positions, replies, strict=True):
                results[position] = reply
        return results

    def close(self) -> None:
        for process, conn in self._workers:
            try:
                conn.send(("close", []))
            except (BrokenPipeError, OSError):
                pass
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
            conn.close()
        self._workers = []
