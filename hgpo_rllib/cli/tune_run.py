"""The Tune run behind ``rllib train file``: a local Ray, the experiment's trials with their
callbacks, stop and checkpoint settings, and SIGINT/SIGTERM turned into Tune's resumable stop."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune.search.basic_variant import BasicVariantGenerator

import envs
from hgpo_rllib.cli.args import InterruptedWithHint
from hgpo_rllib.cli.console import LINE_COLUMNS, IterationLines, UninformativeGroupsWarning
from hgpo_rllib.cli.quiet import WORKER_SETUP_HOOK, hide_harmless_lines
from hgpo_rllib.cli.result_files import result_file_callbacks
from hgpo_rllib.cli.run_dirs import (
    RUN_RECORD,
    check_resume,
    check_run_name,
    claim_experiment_dir,
    experiment_runs,
    trial_name,
)
from hgpo_rllib.cli.stopping import (
    CheckpointThenStop,
    MetricStopper,
    RecurringTrialError,
    StopOnRecurringErrors,
    StopSignals,
    check_stop_criteria,
)
from hgpo_rllib.cli.tensorboard_layout import TensorboardLayout
from hgpo_rllib.experiments.experiment_file import Experiment, check_param_space
from hgpo_rllib.run_records import write_record

DEFAULT_MAX_FAILURES = 3


def _logger_callbacks(project: str) -> list[Any]:
    """Weights & Biases through Tune's own integration when ``WANDB_API_KEY`` is set."""
    if not os.environ.get("WANDB_API_KEY"):
        return []
    if importlib.util.find_spec("wandb") is None:
        print("WANDB_API_KEY is set but `wandb` is not installed; logging to Tensorboard only.")
        return []
    from ray.air.integrations.wandb import WandbLoggerCallback

    return [WandbLoggerCallback(project=project)]


def _start_ray(quiet: bool = True) -> None:
    """Start a local Ray (``quiet``: its workers hide :mod:`~hgpo_rllib.cli.quiet`'s harmless lines).
    Its authentication token (``~/.ray/auth_token``, which Ray writes with the default umask) is a key
    to the cluster: its folder and the file are made readable by the owner only."""
    ray_home = Path.home() / ".ray"
    ray_home.mkdir(mode=0o700, parents=True, exist_ok=True)
    ray_home.chmod(0o700)
    runtime_env = {"worker_process_setup_hook": WORKER_SETUP_HOOK} if quiet else None
    ray.init(include_dashboard=False, runtime_env=runtime_env)
    token = ray_home / "auth_token"
    if token.is_file():
        token.chmod(0o600)


def check_trial_resources(config: Any) -> None:
    """Refuse a trial that needs more CPUs or GPUs than the Ray cluster has (Tune would leave it
    PENDING forever, silently)."""
    needed = config.algo_class.default_resource_request(config).required_resources
    available = ray.cluster_resources()
    short = {k: v for k, v in needed.items() if v > available.get(k, 0) + 1e-9}
    if short:
        wants = ", ".join(f"{v:g} {k}" for k, v in needed.items() if v)
        has = ", ".join(f"{available.get(k, 0):g} {k}" for k in short)
        raise ValueError(
            f"one trial needs {wants} (the driver, {config.num_env_runners} env runner(s) and "
            f"{config.num_learners} learner(s)) but this Ray cluster has {has}: lower num_env_runners "
            "or num_cpus_per_env_runner (or the GPUs asked for), or run on a larger cluster"
        )


def tune_config(
    experiment: Experiment, num_samples: int, max_concurrent_trials: int | None
) -> tune.TuneConfig:
    """How Tune makes an experiment's trials: ``num_samples`` samples of its ``param_space``, each of
    its ``points_to_evaluate`` being one sample, crossed with the grids."""
    return tune.TuneConfig(
        search_alg=BasicVariantGenerator(points_to_evaluate=experiment.points_to_evaluate or None),
        num_samples=max(num_samples, len(experiment.points_to_evaluate)),
        trial_name_creator=trial_name,
        trial_dirname_creator=trial_name,
        max_concurrent_trials=max_concurrent_trials,
    )


def _progress_reporter() -> Any:
    """Tune's legacy console table with the iteration line's numbers (``-v``)."""
    columns = {"training_iteration": "iter"} | {key: label for label, key, _ in LINE_COLUMNS}
    return tune.CLIReporter(metric_columns=columns, max_report_frequency=10)


@contextlib.contextmanager
def _not_started_yet(resume: bool) -> Iterator[None]:
    """A Ctrl-C before a new run's directory exists: there is nothing to resume, so the hint says to
    rerun the same command (a resumed run's Ctrl-C keeps the usual hint)."""
    try:
        yield
    except InterruptedWithHint:
        raise
    except KeyboardInterrupt:
        if resume:
            raise
        raise InterruptedWithHint(
            "the run had not started; rerun the same command (without --resume)"
        ) from None


def train(
    experiment: Experiment,
    *,
    stop: dict[str, Any] | None = None,
    storage_path: str | None = None,
    checkpoint_freq: int | None = None,
    max_failures: int = DEFAULT_MAX_FAILURES,
    num_samples: int = 1,
    name: str | None = None,
    resume: bool = False,
    max_concurrent_trials: int | None = None,
    verbose: bool = False,
    overrides: dict[str, Any] | None = None,
):
    """Run an experiment through Ray Tune; returns its ``ResultGrid`` and the signal (SIGINT,
    SIGTERM) that interrupted it, or None.

    An existing experiment directory is never overwritten: a new run of the same name goes to
    ``<name>_run2``, ``<name>_run3``, ...; ``resume=True`` continues the latest of them.
    ``checkpoint_freq`` None takes the experiment file's; a checkpoint is always written at the end.
    The console shows one line per iteration (``verbose``: Tune's tables and full results too).
    """
    if checkpoint_freq is None:
        checkpoint_freq = experiment.checkpoint_freq
    if not isinstance(checkpoint_freq, int) or checkpoint_freq < 0 or max_failures < 0 or num_samples < 1:
        raise ValueError(
            f"checkpoint_freq must be an int >= 0 (got {checkpoint_freq!r}), max_failures >= 0 "
            f"(got {max_failures}) and num_samples >= 1 (got {num_samples})"
        )
    storage = Path(storage_path or os.environ.get("CHECKPOINTS_DIR") or Path.home() / "ray_results")
    storage = storage.expanduser().resolve()
    name = name or experiment.run_name() or f"{experiment.config.algo_class.__name__}_{experiment.config.env}"
    check_run_name(name)
    runs = experiment_runs(storage, name)
    trainable = experiment.config.algo_class
    stop = stop or experiment.stop
    check_stop_criteria(stop)
    with _not_started_yet(resume):
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # Tune's newer output ignores verbose=0
        if not verbose:
            hide_harmless_lines()
        if not ray.is_initialized():
            _start_ray(quiet=not verbose)
        envs.register_all()  # Ray's registry forgets names across ray.shutdown()/ray.init()
        if isinstance(experiment.config.env, str):
            envs.register_with_tune(experiment.config.env)  # a gym.register in the file: to the trials
        record = {
            "stop": stop,
            "checkpoint_freq": checkpoint_freq,
            "num_samples": num_samples,
            "experiment_file_sha256": experiment.source_sha256,
        }
        if experiment.settings:  # the file's typed settings: --resume must give the same
            record["settings"] = experiment.settings
        record.update(overrides)  # --config / --module: a resume may repeat them, not change them
        if resume:
            if not runs:
                raise FileNotFoundError(f"nothing to resume: no experiment {name!r} under {storage}")
            latest = runs[max(runs)]
            check_resume(latest, record)
            print(f"Resuming {latest}")
            tuner = tune.Tuner.restore(str(latest), trainable=trainable, resume_errored=True)
            return _fit(tuner)
        check_param_space(experiment.config, experiment.param_space)
        for point in experiment.points_to_evaluate:
            check_param_space(experiment.config, point)
        if experiment.prepare is not None:
            try:
                experiment.prepare()  # e.g. the main job's warm-start build
            except KeyboardInterrupt:
                raise InterruptedWithHint(
                    "the run had not started; rerun the same command (without --resume): what its "
                    "preparation finished is kept"
                ) from None
        experiment.config.copy(copy_frozen=False).validate()  # fail here, not inside a trial
        check_trial_resources(experiment.config)
    experiment_dir = claim_experiment_dir(storage, name)
    write_record(experiment_dir / RUN_RECORD, record)
    print(f"Results go to {experiment_dir}")
    param_space = experiment.config.copy(copy_frozen=False)
    if experiment.param_space:
        param_space = {**param_space.to_dict(), **experiment.param_space}
    tuner = tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune_config(experiment, num_samples, max_concurrent_trials),
        run_config=tune.RunConfig(
            name=experiment_dir.name,
            storage_path=str(storage),
            stop=MetricStopper(stop),
            progress_reporter=_progress_reporter() if verbose else None,
            verbose=3 if verbose else 0,
            callbacks=[
                *([] if verbose else [IterationLines()]),
                UninformativeGroupsWarning(),
                TensorboardLayout(),
                *result_file_callbacks(),
                StopOnRecurringErrors(),
                CheckpointThenStop(),
                *_logger_callbacks(project=name),
            ],
            failure_config=tune.FailureConfig(max_failures=max_failures),
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_frequency=checkpoint_freq, checkpoint_at_end=True
            ),
        ),
    )
    return _fit(tuner)


def _fit(tuner: tune.Tuner) -> tuple[Any, int | None]:
    """``tuner.fit()`` with SIGINT and SIGTERM turned into Tune's resumable stop."""
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"  # SIGINT is ours (StopSignals) while fitting
    # Tune writes its experiment state (which checkpoint each trial resumes from) every 10 s or
    # more; every second instead, so a killed driver loses no registered checkpoint.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
    with StopSignals() as signals:
        try:
            results = tuner.fit()
        except Exception as exc:  # Tune re-raises a callback's error as the text of its traceback
            marker = f"{RecurringTrialError.__name__}: "
            if marker not in str(exc):
                raise
            raise RecurringTrialError(str(exc).split(marker)[-1].strip()) from None
    return results, signals.received
