"""How a run stops: its stop criteria, checked against the metrics it really reports, the signals
(Ctrl-C, SIGTERM) that end it early but resumably, and the errors that retrying would only repeat.

Tune's stop dict only warns about a key the results lack, and then trains forever; a typo in
``--stop`` must instead end the run with the key named and its closest metric. A signal lets each
running trial finish its iteration and save a checkpoint, then ends the run the way Tune's own
SIGUSR1 does (trials stopped, experiment state saved, ``--resume`` continues from those checkpoints);
the command exits with 128 + the signal's number. A second signal stops at once (``--resume`` then
continues from each trial's last periodic checkpoint).
"""

from __future__ import annotations

import difflib
import errno
import math
import os
import pickle
import re
import shutil
import signal
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.experiment import Trial
from ray.tune.result import (
    AUTO_RESULT_KEYS,
    EPISODES_TOTAL,
    SHOULD_CHECKPOINT,
    TIME_TOTAL_S,
    TIMESTEPS_TOTAL,
    TRAINING_ITERATION,
)
from ray.tune.utils import flatten_dict

from hgpo_rllib.algorithms.runner_pool import EnvErrorsOnly
from hgpo_rllib.errors import error_chain, error_line

#: The signals that end a run resumably.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


#: Tune's counters, and RLlib's ``*_lifetime`` ones: a threshold below 1 is met by the first result.
COUNT_KEYS = (TRAINING_ITERATION, TIMESTEPS_TOTAL, EPISODES_TOTAL)
#: Tune's run time: a threshold <= 0 is met by the first result.
TIME_KEYS = (TIME_TOTAL_S,)


def check_stop_criteria(stop: Mapping[str, Any]) -> None:
    """Refuse before the run a criterion that is not a finite number, a count (iterations, steps,
    episodes) below 1 or a run time <= 0 (met by the first result: the run would train one iteration
    and exit 0), or a top-level key that is a near miss of one of Tune's own result keys
    (``training_iteraton``); nested keys are checked against the first result (:class:`MetricStopper`)."""
    for key, value in stop.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"stop criterion {key!r} must be a finite number, got {value!r}")
        if (key in COUNT_KEYS or key.rsplit("/", 1)[-1].endswith("_lifetime")) and value < 1:
            raise ValueError(f"stop criterion {key!r} must be >= 1 (a count), got {value!r}")
        if key in TIME_KEYS and value <= 0:
            raise ValueError(f"stop criterion {key!r} must be > 0 (seconds), got {value!r}")
        if "/" not in key and key not in AUTO_RESULT_KEYS:
            close = difflib.get_close_matches(key, AUTO_RESULT_KEYS, n=1, cutoff=0.8)
            if close:
                raise ValueError(f"unknown stop key {key!r}: did you mean {close[0]!r}?")


#: Metrics reported only on some iterations (evaluation runs every ``evaluation_interval``).
OCCASIONAL_PREFIXES = ("evaluation/",)


def unknown_stop_keys(stop: Mapping[str, Any], metrics: Mapping[str, Any]) -> list[str]:
    """One message per stop key that ``metrics`` (a result, nested or flat) do not report; keys
    of metrics that only some iterations report (:data:`OCCASIONAL_PREFIXES`) are not judged."""
    flat = flatten_dict(dict(metrics), delimiter="/")
    messages = []
    for key in stop:
        if key not in flat and not key.startswith(OCCASIONAL_PREFIXES):
            close = difflib.get_close_matches(key, list(flat), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            messages.append(f"stop key {key!r} is not a metric of this run{hint}")
    return messages


def criteria_met(stop: Mapping[str, Any], metrics: Mapping[str, Any]) -> bool:
    """Whether any criterion is reached (Tune's rule: the metric >= its threshold)."""
    flat = flatten_dict(dict(metrics), delimiter="/")
    return any(_reached(flat.get(key), value) for key, value in stop.items())


def _reached(metric: Any, threshold: float) -> bool:
    try:
        return float(metric) >= threshold
    except (TypeError, ValueError):  # not reported (None) or not a number
        return False


class MetricStopper(tune.Stopper):
    """Tune's stop dict, except that a key the results lack stops the trial at its first result
    (the CLI then names the key) instead of letting it train forever."""

    def __init__(self, criteria: Mapping[str, Any]):
        self.criteria = dict(criteria)

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return bool(unknown_stop_keys(self.criteria, result)) or criteria_met(self.criteria, result)

    def stop_all(self) -> bool:
        return False


#: Set by the first stop signal; read by :class:`CheckpointThenStop` (a module-level event, since
#: Tune restores a resumed run's callbacks from its pickled settings, not from the objects we pass).
STOP_REQUESTED = threading.Event()


class StopSignals:
    """While active, the first SIGINT or SIGTERM sets :data:`STOP_REQUESTED` (the trials checkpoint
    after their current iteration, then :class:`CheckpointThenStop` stops the run); a second one
    stops at once (KeyboardInterrupt). ``received`` is the first signal's number. Needs
    ``TUNE_DISABLE_SIGINT_HANDLER=1`` so Tune keeps SIGINT to us."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        STOP_REQUESTED.clear()
        if threading.current_thread() is threading.main_thread():  # only it may handle signals
            self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        STOP_REQUESTED.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        tune_listens = signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, signal.SIG_IGN, None)
        if self.received is not None or not tune_listens:
            self.received = self.received or signum
            raise KeyboardInterrupt
        self.received = signum
        name = signal.Signals(signum).name
        print(
            f"\n{name}: each trial finishes its iteration and saves a checkpoint, then the run stops "
            "(send it again to stop at once)",
            flush=True,
        )
        STOP_REQUESTED.set()


def checkpoint_iteration(result: Any) -> int | None:
    """The iteration of a Tune result's latest checkpoint (the metrics Tune kept beside it)."""
    for checkpoint, metrics in reversed(result.best_checkpoints or []):
        if checkpoint.path == result.checkpoint.path:
            return metrics.get("training_iteration")
    return None


def what_was_saved(results: Any) -> str:
    """What the trials of a run stopped by a signal kept, for the line that tells how to resume: a
    trial still starting when the signal came (Tune had not begun its first iteration) has no
    checkpoint and ``--resume`` starts it from its first iteration."""
    trials = list(results)
    saved = [checkpoint_iteration(r) for r in trials if r.checkpoint is not None]
    if not saved:
        return "no iteration had finished, so nothing was saved; it starts again from the beginning"
    iterations = "/".join(str(i) for i in sorted({i for i in saved if i is not None}))
    unsaved = len(trials) - len(saved)
    kept = f"checkpointed after iteration {iterations}" if iterations else "checkpointed"
    if unsaved:
        kept += f"; {unsaved} of {len(trials)} trials had not finished an iteration and start again"
    return kept


class CheckpointThenStop(tune.Callback):
    """After a stop signal, each running trial's next result asks Tune for a checkpoint (Tune lets
    callbacks mark a result ``should_checkpoint``); once every running trial has saved one, Tune's
    own graceful stop (SIGUSR1) ends the run, so ``--resume`` loses no finished iteration."""

    def __init__(self) -> None:
        self._saved: set[str] = set()
        self._stopping = False

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        if STOP_REQUESTED.is_set():
            result[SHOULD_CHECKPOINT] = True

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
        if STOP_REQUESTED.is_set():
            self._saved.add(trial.trial_id)

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        if not STOP_REQUESTED.is_set() or self._stopping:
            return
        running = [t for t in trials if t.status == Trial.RUNNING]  # saving ones included: wait
        if all(t.trial_id in self._saved for t in running):
            self._stopping = True
            os.kill(os.getpid(), signal.SIGUSR1)


class RecurringTrialError(RuntimeError):
    """A trial failed with an error that a retry from its last checkpoint would repeat."""


#: Trial errors that recur on retry: a non-finite loss (the learner's FloatingPointError) comes back
#: with the checkpoint's weights and the same settings, and an env that failed every episode of
#: several iterations (:class:`~hgpo_rllib.algorithms.runner_pool.EnvErrorsOnly`) with the same env.
RECURRING_ERRORS: tuple[type[BaseException], ...] = (FloatingPointError, EnvErrorsOnly)
#: A full disk or quota (an ``OSError`` of one of these): a retry writes to the same disk, so the run
#: stops at once, naming the checkpoint it keeps.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class StopOnRecurringErrors(tune.Callback):
    """Ends the run at a trial's first recurring error instead of retrying it ``--max-failures``
    times: one of :data:`RECURRING_ERRORS`, or any error before the trial's first result (building
    its module, tokenizer, engine or envs: a retry builds the same). Tune asks before each retry
    (``on_trial_recover``; ``on_trial_error`` when none is left), and the raised
    :class:`RecurringTrialError` ends ``Tuner.fit``. A full disk (:data:`DISK_FULL_ERRNOS`) recurs
    too: its line names the checkpoint that is kept."""

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._stop_if_recurring(trial)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        if not _started(trial) or _disk_full(_latest_error(trial)):
            self._stop_if_recurring(trial)

    @staticmethod
    def _stop_if_recurring(trial: Any) -> None:
        error = _latest_error(trial)
        if not _started(trial):
            raise RecurringTrialError(
                f"{trial} failed while starting, before its first iteration: {error_line(error)}; "
                "not retried (it would recur)"
            )
        full = _disk_full(error)
        if full is not None:
            removed = "".join(
                f"the incomplete copy {name} was removed; " for name in _remove_incomplete_checkpoints(trial)
            )
            raise RecurringTrialError(f"{trial}: {error_line(full)}; {removed}{_kept_checkpoint(trial)}")
        recurring = [e for e in error_chain(error) if isinstance(e, RECURRING_ERRORS)]
        if recurring:
            cause = recurring[-1]  # the innermost: the learner's own error, not Ray's wrapper
            raise RecurringTrialError(
                f"{trial}: {type(cause).__name__}: {cause}; not retried (it would recur)"
            )


def _disk_full(error: BaseException | None) -> OSError | None:
    """The full-disk error (:data:`DISK_FULL_ERRNOS`) in ``error``'s chain, else None."""
    full = [e for e in error_chain(error) if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS]
    return full[-1] if full else None


def _remove_incomplete_checkpoints(trial: Any) -> list[str]:
    """Delete the trial's checkpoint directories that Tune never added to it: a full disk stops
    Tune's copy of a checkpoint into the trial's storage part way, and the copy stays (Tune adds a
    checkpoint only once its copy is complete, so these are exactly the directories numbered after
    the trial's latest checkpoint). Local storage only; their names."""
    latest = trial.latest_checkpoint_result
    trial_dir = Path(latest.checkpoint.path).parent if latest is not None else getattr(trial, "path", None)
    if trial_dir is None or not Path(trial_dir).is_dir():
        return []
    kept = _checkpoint_number(Path(latest.checkpoint.path).name) if latest is not None else -1
    removed = []
    for path in sorted(Path(trial_dir).iterdir()):
        number = _checkpoint_number(path.name)
        if number is not None and number > (kept if kept is not None else math.inf) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed


def _checkpoint_number(name: str) -> int | None:
    """n of Tune's ``checkpoint_<n>`` directory names."""
    match = re.fullmatch(r"checkpoint_(\d+)", name)
    return int(match.group(1)) if match else None


def _kept_checkpoint(trial: Any) -> str:
    """What a trial stopped by a full disk keeps: Tune writes a checkpoint in a new directory and adds
    it to the trial only once complete, so the trial's latest checkpoint is whole and loads."""
    latest = trial.latest_checkpoint_result
    if latest is None:
        return "no checkpoint had been written: free space, then run it again"
    iteration = latest.metrics.get(TRAINING_ITERATION)
    return (
        f"the checkpoint {latest.checkpoint.path} (iteration {iteration}) is kept: free space, then "
        "rerun with --resume"
    )


def _latest_error(trial: Any) -> BaseException | None:
    """The error Tune has just recorded for the trial: its pickle in the trial's local directory,
    written by this process (``get_pickled_error`` reads the storage copy, synced only later, so
    not yet for a trial that failed before its first result)."""
    path = trial.pickled_error_file
    if path is None or not Path(path).is_file():
        return trial.get_pickled_error()
    with Path(path).open("rb") as file:
        return pickle.load(file)


def _started(trial: Any) -> bool:
    """Whether the trial has reported a result (a resumed one: in an earlier run)."""
    return TRAINING_ITERATION in (trial.last_result or {})
