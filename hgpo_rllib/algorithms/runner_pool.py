"""Fault-tolerant use of the env runners: whole rollout groups dealt out, and blocking weight syncs.

RLlib's ``EnvRunnerGroup.sync_weights`` does not wait (``timeout_seconds=0.0``) and drops remote errors,
and its sampling helpers return whatever came back. A group-relative estimator needs every group of an
iteration complete and sampled with one set of weights (docs/rllib_notes.md §5.2; the weight sync:
§3.5), and a failure must never pass quietly (docs/reliability.md): a runner that raises, dies or hangs
loses its share of groups, which is dealt again to the others; a hung runner is killed (Ray restarts
it); the weight sync waits for every runner and fails the iteration with the error of one that raises;
too many incomplete iterations in a row raise with the runners' errors.

With overlapped sampling (``async_sampling``) the same dealing runs in a driver thread while the
learner updates (:meth:`RunnerPool.start_sampling`): the thread only waits on runner calls; what it
could not deliver is sampled again in the main thread by :meth:`RunnerPool.finish_sampling`, where
restarted runners may be awaited (their restore reads the learner's weights).

A batch's sampling is a phase of the algorithm's progress line (:mod:`hgpo_rllib.progress`): each
runner call reports its episodes and tokens to the phase's board as it goes.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import ray

import envs
from hgpo_rllib.columns import (
    NUM_CONSECUTIVE_FAILED_ITERATIONS,
    NUM_ENV_RUNNER_FAILURES,
    TASK_GENERATOR,
)
from hgpo_rllib.env_runner.metrics_callback import episode_outcome
from hgpo_rllib.progress import SAMPLING, IterationProgress, ProgressTicket

logger = logging.getLogger(__name__)


#: Iterations in a row whose every episode an environment error ended, after which training stops
#: (:class:`EnvErrorsOnly`): their rewards, and so their advantages, are all 0; it trains nothing.
ENV_ERROR_ITERATIONS = 2


class EnvErrorsOnly(RuntimeError):
    """Every episode of :data:`ENV_ERROR_ITERATIONS` iterations in a row ended in an env error."""


@dataclasses.dataclass
class RunnerReply:
    """What a call on an env runner returns; an exception travels as its formatted traceback, so
    the driver can name the root cause (RLlib only logs the errors of failed runner calls)."""

    worker_index: int
    episodes: list = dataclasses.field(default_factory=list)
    metrics: dict | None = None
    task_generator: dict | None = None
    error: str | None = None


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


def sample_on_runner(
    env_runner: Any, num_episodes: int, progress: ProgressTicket | None = None
) -> RunnerReply:
    """Runs on an env runner: sample whole groups (counting them into ``progress``); return them
    with the runner's metrics and task-generator position (kept by the driver, see
    :meth:`RunnerPool.push_task_generators`)."""
    try:
        with env_runner.reporting_progress(progress):
            episodes = env_runner.sample(num_episodes=num_episodes)
        metrics = env_runner.get_metrics()
    except Exception as exc:  # reported to the driver, which samples the groups elsewhere
        return RunnerReply(env_runner.worker_index, error=_describe(exc))
    generator = env_runner.get_state(components=TASK_GENERATOR)[TASK_GENERATOR]
    return RunnerReply(env_runner.worker_index, episodes, metrics, generator)


def set_weights_on_runner(env_runner: Any, state: dict) -> RunnerReply:
    """Runs on an env runner: load new weights; an exception comes back as text."""
    try:
        env_runner.set_state(state)
    except Exception as exc:
        return RunnerReply(env_runner.worker_index, error=_describe(exc))
    return RunnerReply(env_runner.worker_index)


def deal(num_groups: int, worker_ids: Sequence[int]) -> dict[int, int]:
    """Groups per runner, as even as possible; runners with no group are left out."""
    base, extra = divmod(num_groups, len(worker_ids))
    shares = {i: base + (k < extra) for k, i in enumerate(worker_ids)}
    return {i: n for i, n in shares.items() if n}


class RunnerPool:
    """The algorithm's view of its env runners: sampling whole groups, syncing weights, counting failures.

    It keeps each remote runner's last task-generator position (so a restarted or restored runner
    plays new tasks, not the ones it already played) and the count of incomplete iterations in a row.
    """

    def __init__(self, config: Any, progress: IterationProgress):
        self.config = config
        self.progress = progress
        self.task_generators: dict[int, dict] = {}
        self.consecutive_failed_iterations = 0
        self.consecutive_env_error_iterations = 0
        self._background: _BackgroundSampling | None = None

    @property
    def sampling_in_background(self) -> bool:
        return self._background is not None

    def sample_batch(
        self, runners: Any, restore: Callable[[Any], list[int]]
    ) -> tuple[list[RunnerReply], list[str]]:
        """:meth:`sample_groups` of ``groups_per_iteration`` groups, shown as a sampling phase."""
        with self.progress.phase(SAMPLING, self._batch_episodes) as ticket:
            return self.sample_groups(runners, restore, progress=ticket)

    @property
    def _batch_episodes(self) -> int:
        return self.config.groups_per_iteration * self.config.group_size

    def start_sampling(self, runners: Any) -> None:
        """Start sampling ``groups_per_iteration`` groups in a driver thread (the runners' current
        weights), a sampling phase until :meth:`finish_sampling` collects them."""
        if self._background is not None:
            raise RuntimeError("a background sampling is already under way")
        ticket = self.progress.begin(SAMPLING, self._batch_episodes)
        self._background = _BackgroundSampling(
            lambda: self.sample_groups(runners, restore=None, progress=ticket), ticket
        )

    def finish_sampling(
        self, runners: Any, restore: Callable[[Any], list[int]]
    ) -> tuple[list[RunnerReply], list[str]]:
        """Wait for the background sampling, then sample what it could not deliver here (awaiting
        restarted runners if none is left); returns all replies and failures, as :meth:`sample_groups`."""
        background, self._background = self._background, None
        if background is None:
            raise RuntimeError("no background sampling is under way")
        try:
            replies, failures = background.result()
            delivered = sum(len(reply.episodes) for reply in replies) // self.config.group_size
            missing = self.config.groups_per_iteration - delivered
            if missing:
                more, more_failures = self.sample_groups(
                    runners, restore, num_groups=missing, progress=background.progress
                )
                replies, failures = replies + more, failures + more_failures
        finally:
            self.progress.end(background.progress)
        return replies, failures

    def sample_groups(
        self,
        runners: Any,
        restore: Callable[[Any], list[int]] | None,
        num_groups: int | None = None,
        progress: ProgressTicket | None = None,
    ) -> tuple[list[RunnerReply], list[str]]:
        """Deal ``num_groups`` (default ``groups_per_iteration``) groups to the healthy runners and
        sample them in parallel, their counts reported into ``progress``.

        A runner that raises, dies or exceeds ``sample_timeout_s`` loses its share, which is dealt
        again to the other runners until the batch is complete. A runner that raised sits out the
        rest of the iteration; dead and hung (killed) ones are restarted by Ray. With no runner
        left, this waits for restarted ones (``restore``, at most ``env_runner_restore_timeout_s``;
        ``restore=None``: it does not wait). Returns the successful replies and one line per failure
        (the root cause).
        """
        group_size = self.config.group_size
        needed = self.config.groups_per_iteration if num_groups is None else num_groups
        if runners.num_remote_env_runners() == 0:
            reply = sample_on_runner(runners.local_env_runner, needed * group_size, progress)
            return ([reply], []) if reply.error is None else ([], [f"local env runner: {reply.error}"])
        replies: list[RunnerReply] = []
        failures: list[str] = []
        usable = runners.healthy_env_runner_ids()
        raised: set[int] = set()
        deadline = time.monotonic() + self.config.env_runner_restore_timeout_s
        while needed:
            if not usable:
                if restore is None:
                    break
                restarted = self._wait_for_restarted_runners(runners, restore, deadline)
                usable = [i for i in restarted if i not in raised]
                if not usable:
                    break
            shares = deal(needed, usable)
            ids = list(shares)
            answers = runners.foreach_env_runner(
                func=[sample_on_runner] * len(ids),
                kwargs=[{"num_episodes": shares[i] * group_size, "progress": progress} for i in ids],
                local_env_runner=False,
                remote_worker_ids=ids,
                timeout_seconds=self.config.sample_timeout_s,
            )
            by_index = {answer.worker_index: answer for answer in answers}
            for i, answer in by_index.items():
                if answer.error is None:
                    replies.append(answer)
                    needed -= shares[i]
                    self.task_generators[i] = answer.task_generator
            failed = [i for i in ids if i not in by_index or by_index[i].error is not None]
            failures += self._runner_failures(runners, failed, by_index, "sampling", take_out_raised=False)
            raised.update(i for i in failed if i in by_index)
            usable = [i for i in usable if i not in failed]
        return replies, failures

    def _wait_for_restarted_runners(
        self, runners: Any, restore: Callable[[Any], list[int]], deadline: float
    ) -> list[int]:
        """Poll ``restore`` (RLlib's ``restore_env_runners``) until a restarted runner is back (then
        return the healthy runners) or the deadline passes (then []); [] at once if none is restarting."""
        while self.config.restart_failed_env_runners and time.monotonic() < deadline:
            if runners.num_healthy_remote_env_runners() == runners.num_remote_env_runners():
                return []  # nobody is restarting: the healthy ones all failed in this iteration
            if restore(runners):
                return runners.healthy_env_runner_ids()
            time.sleep(1.0)
        return []

    def sync_weights(self, runners: Any, state: dict | ray.ObjectRef, metrics: Any) -> None:
        """Send ``state`` (or the state an object reference holds) to every env runner and wait for
        all of them. A runner that raises fails the iteration with its error; one that dies or hangs
        is taken out of service and re-synced before it samples again."""
        if runners.local_env_runner is not None:
            runners.local_env_runner.set_state(ray.get(state) if isinstance(state, ray.ObjectRef) else state)
        ids = runners.healthy_env_runner_ids()
        if not ids:
            return
        ref = state if isinstance(state, ray.ObjectRef) else ray.put(state)
        answers = runners.foreach_env_runner(
            func=set_weights_on_runner,
            kwargs={"state": ref},
            local_env_runner=False,
            remote_worker_ids=ids,
            timeout_seconds=self.config.sample_timeout_s,
        )
        by_index = {answer.worker_index: answer for answer in answers}
        failed = [i for i in ids if i not in by_index or by_index[i].error is not None]
        failures = self._runner_failures(runners, failed, by_index, "weight sync", take_out_raised=True)
        metrics.log_value(NUM_ENV_RUNNER_FAILURES, len(failures), reduce="sum")
        errors = [f"env runner {i}: {by_index[i].error}" for i in failed if i in by_index]
        if errors:
            raise RuntimeError(
                "the weight sync failed, the env runners would sample with stale weights:\n"
                + "\n".join(errors)
            )
        for failure in failures:
            logger.warning("%s", failure)

    def _runner_failures(
        self,
        runners: Any,
        failed: list[int],
        answers: dict[int, RunnerReply],
        call: str,
        *,
        take_out_raised: bool,
    ) -> list[str]:
        """Describe each failed runner call; take hung runners (and, if asked, those that raised)
        out of service.

        Such a runner is killed and marked unhealthy: no call queues behind a hung one, and RLlib's
        ``restore_env_runners`` re-syncs the restarted actor (weights, connectors and task generator)
        before it samples again. A dead runner is already unhealthy. EnvRunnerGroup has no public call
        for this; its FaultTolerantActorManager (an RLlib DeveloperAPI) has.
        """
        manager = runners._worker_manager
        lines = []
        for i in failed:
            if i in answers:
                lines.append(f"env runner {i}: {call} raised:\n{answers[i].error}")
                if not take_out_raised:
                    continue
            elif manager.is_actor_healthy(i):
                limit = self.config.sample_timeout_s
                lines.append(f"env runner {i}: no {call} reply within sample_timeout_s={limit} s")
            else:
                lines.append(f"env runner {i}: its actor died during {call} (see the runner's log)")
                continue
            manager.set_actor_state(i, healthy=False)
            ray.kill(manager.actors()[i], no_restart=False)
        return lines

    def count_failures(self, num_groups: int, failures: list[str], metrics: Any) -> None:
        """Log this iteration's failures; raise after too many incomplete iterations in a row."""
        metrics.log_value(NUM_ENV_RUNNER_FAILURES, len(failures), reduce="sum")
        if num_groups == self.config.groups_per_iteration:
            self.consecutive_failed_iterations = 0
        else:
            self.consecutive_failed_iterations += 1
        failed = self.consecutive_failed_iterations
        metrics.log_value(NUM_CONSECUTIVE_FAILED_ITERATIONS, failed, window=1)
        if not failed:
            for failure in failures:
                logger.warning("recovered (groups sampled again elsewhere) from %s", failure)
            return
        causes = "\n".join(failures) or "no healthy env runner was left to sample on"
        tolerance = self.config.num_consecutive_env_runner_failures_tolerance
        summary = (
            f"{num_groups} of {self.config.groups_per_iteration} rollout groups sampled, "
            f"{failed} incomplete iteration(s) in a row (tolerated: "
            f"num_consecutive_env_runner_failures_tolerance={tolerance}); the env runners' errors:\n{causes}"
        )
        if failed > tolerance:
            raise RuntimeError(summary)
        logger.warning(summary)

    def count_env_errors(self, episodes: Sequence[Any]) -> None:
        """Raise :class:`EnvErrorsOnly`, naming the env and its last error, when every episode of
        :data:`ENV_ERROR_ITERATIONS` sampled batches in a row ended in an env error."""
        errors = [episode_outcome(episode).env_error for episode in episodes]
        if not errors or None in errors:
            self.consecutive_env_error_iterations = 0
            return
        self.consecutive_env_error_iterations += 1
        if self.consecutive_env_error_iterations >= ENV_ERROR_ITERATIONS:
            raise EnvErrorsOnly(
                f"every episode of the last {ENV_ERROR_ITERATIONS} iterations ended in an env error of env "
                f"{envs.env_name(self.config.env)!r}; the last: {errors[-1]}"
            )

    def push_task_generators(self, runners: Any, worker_ids: Sequence[int]) -> None:
        """Give the (restarted or restored) runners their last known task-generator positions."""
        ids = [i for i in worker_ids if i in self.task_generators]
        if ids:
            runners.foreach_env_runner(
                func="set_state",
                kwargs=[{"state": {TASK_GENERATOR: self.task_generators[i]}} for i in ids],
                local_env_runner=False,
                remote_worker_ids=ids,
                timeout_seconds=self.config.sample_timeout_s,
            )


class _BackgroundSampling:
    """A sampling call run in a daemon thread (a Ctrl-C or a stop need not wait for it); its result,
    or the exception it raised, is handed over by :meth:`result`; ``progress``: its phase's ticket."""

    def __init__(
        self, sample: Callable[[], tuple[list[RunnerReply], list[str]]], progress: ProgressTicket | None
    ):
        self.progress = progress
        self._outcome: tuple[list[RunnerReply], list[str]] | BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(sample,), name="hgpo-sampling", daemon=True)
        self._thread.start()

    def _run(self, sample: Callable[[], tuple[list[RunnerReply], list[str]]]) -> None:
        try:
            self._outcome = sample()
        except BaseException as exc:  # re-raised in the caller's thread
            self._outcome = exc

    def result(self) -> tuple[list[RunnerReply], list[str]]:
        self._thread.join()
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        assert self._outcome is not None
        return self._outcome
