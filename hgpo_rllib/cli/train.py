"""``rllib train file <experiment.py>``: run an experiment file through Ray Tune.

Every trial writes Tensorboard event files, ``progress.csv`` and checkpoints under the storage path:
every ``checkpoint_freq`` iterations (default 5), at the end, and when Ctrl-C or SIGTERM stops the
run. A trial that crashes is retried from its last checkpoint (``--max-failures``, default 3), and
``--resume`` continues an interrupted experiment from its trials' last checkpoints (the newest one
that loads). An existing experiment directory is never overwritten.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib.util
import os
import shlex
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS
from ray.tune.search.basic_variant import BasicVariantGenerator

import envs
from hgpo_rllib.cli.args import InterruptedWithHint, count, json_dict, user_error
from hgpo_rllib.cli.console import LINE_COLUMNS, IterationLines, UninformativeGroupsWarning
from hgpo_rllib.cli.quiet import WORKER_SETUP_HOOK, hide_harmless_lines
from hgpo_rllib.cli.result_files import result_file_callbacks
from hgpo_rllib.cli.stopping import (
    CheckpointThenStop,
    MetricStopper,
    RecurringTrialError,
    StopOnRecurringErrors,
    StopSignals,
    check_stop_criteria,
    criteria_met,
    unknown_stop_keys,
    what_was_saved,
)
from hgpo_rllib.cli.tensorboard_layout import TensorboardLayout
from hgpo_rllib.columns import ENV_ERROR_RATE, NUM_CONSECUTIVE_FAILED_ITERATIONS, NUM_GROUPS_SAMPLED
from hgpo_rllib.errors import error_line
from hgpo_rllib.experiments.experiment_file import (
    DEFAULT_CHECKPOINT_FREQ,
    Experiment,
    apply_config_overrides,
    apply_module_overrides,
    check_param_space,
    declared_settings,
    import_experiment_module,
    load_experiment_file,
)
from hgpo_rllib.experiments.naming import estimator_run_name
from hgpo_rllib.experiments.settings import add_setting_arguments, declared_values
from hgpo_rllib.run_records import changed_settings, read_record, write_record

DEFAULT_MAX_FAILURES = 3
#: What ``rllib train file`` started a run with, in its experiment directory (checked by --resume).
RUN_RECORD = "rllib_train_args.json"


def _check_resume(experiment_dir: Path, record: dict[str, Any]) -> None:
    """``--resume`` continues the run as it was started: Tune would silently ignore a new stop,
    checkpoint frequency or experiment file, so a change is refused instead."""
    saved = experiment_dir / RUN_RECORD
    if not saved.is_file():
        return  # a run started before run records existed
    changed = changed_settings(read_record(saved), record, keys=record)
    if changed:
        raise ValueError(
            f"--resume cannot change a run's settings ({'; '.join(changed)}); resume with the original "
            "flags and file, or start a new run with --name"
        )


def trial_name(trial: Any) -> str:
    """Name a trial from its settings, as the authors' scripts do (e.g. ``k2_hgpo_alpha1.0_base0_<id>``);
    other algorithms by their name and K (``hiper_k2_<id>``)."""
    cfg = trial.config
    if "estimator" not in cfg:
        return f"{trial.trainable_name.lower()}_k{cfg.get('history_length', '?')}_{trial.trial_id}"
    name = estimator_run_name(
        cfg.get("history_length", "?"),
        cfg.get("estimator", "hgpo"),
        cfg.get("length_weight_alpha", "?"),
        cfg.get("base_group", False),
    )
    return f"{name}_{trial.trial_id}"


def _logger_callbacks(project: str) -> list[Any]:
    """Weights & Biases through Tune's own integration when ``WANDB_API_KEY`` is set."""
    if not os.environ.get("WANDB_API_KEY"):
        return []
    if importlib.util.find_spec("wandb") is None:
        print("WANDB_API_KEY is set but `wandb` is not installed; logging to Tensorboard only.")
        return []
    from ray.air.integrations.wandb import WandbLoggerCallback

    return [WandbLoggerCallback(project=project)]


def experiment_runs(storage: Path, name: str) -> dict[int, Path]:
    """The runs of experiment ``name`` under ``storage`` by number: 1 is ``name``, n is ``name_run<n>``."""
    runs = {1: storage / name} if (storage / name).exists() else {}
    for path in storage.glob(f"{glob.escape(name)}_run*"):
        suffix = path.name[len(name) + len("_run") :]
        if suffix.isdigit():
            runs[int(suffix)] = path
    return dict(sorted(runs.items()))


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


def claim_experiment_dir(storage: Path, name: str) -> Path:
    """Create the directory of a new run of ``name``: ``name``, else ``name_run<n>`` after the latest
    run; a directory another run creates meanwhile is skipped, never shared."""
    runs = experiment_runs(storage, name)
    number = max(runs, default=0) + 1
    while True:
        path = storage / (name if number == 1 else f"{name}_run{number}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            number += 1


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


def check_run_name(name: str) -> None:
    """An experiment name is one folder under the storage path, never a path of its own."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"--name {name!r} is not a name: give one folder name, without '/' or '..'")


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
            _check_resume(latest, record)
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


def _incomplete_trials(results: Any) -> list[str]:
    """Trials that reached their stop while their last iterations trained on nothing, so that the
    algorithm did not raise: too few groups sampled (below
    ``num_consecutive_env_runner_failures_tolerance``), or every episode of the last iteration ended
    in an env error (below ``ENV_ERROR_ITERATIONS``). A run that trains nothing must not exit 0."""
    messages = []
    for result in results:
        metrics = result.metrics or {}
        if result.error:
            continue
        failed = int(metrics.get(NUM_CONSECUTIVE_FAILED_ITERATIONS) or 0)
        if failed:
            messages.append(
                f"{result.path}: its last {failed} iteration(s) sampled only "
                f"{int(metrics.get(NUM_GROUPS_SAMPLED) or 0)} rollout group(s), fewer than configured; "
                "see the env runners' errors above and num_groups_sampled in progress.csv"
            )
        error_rate = (metrics.get(ENV_RUNNER_RESULTS) or {}).get(ENV_ERROR_RATE)
        if error_rate == 1.0:
            messages.append(
                f"{result.path}: every episode of its last iteration ended in an env error "
                f"({ENV_ERROR_RATE} 1.0); see the env runners' warnings above"
            )
    return messages


def experiment_path(argv: Sequence[str]) -> str | None:
    """The experiment file of an ``rllib train file X.py ...`` command line: the first ``.py``
    argument after ``file`` (None for another command), read before parsing so that the file's own
    settings can join the parser."""
    if list(argv[:2]) != ["train", "file"]:
        return None
    return next((a for a in argv[2:] if a.endswith(".py") and not a.startswith("-")), None)


def add_arguments(parser: argparse.ArgumentParser, path: str | None = None) -> None:
    """The options of ``rllib train file``, and the settings the experiment file ``path`` declares
    (its module is kept in ``args.experiment_module``, imported once)."""
    parser.add_argument("path", help="Python file defining `experiment(settings)` or `config`")
    parser.add_argument("--stop", type=json_dict, help="Tune stop criteria as JSON")
    parser.add_argument("--config", type=json_dict, help="settings merged into the file's config, as JSON")
    parser.add_argument(
        "--module",
        action="append",
        default=[],
        metavar="MODULE.KEY=VALUE",
        help="a setting of one module (repeatable): a model_config key (model, lora, ...) or an "
        "algorithm setting (lr, micro_batch_size, ...), e.g. --module planner.lr=1e-5; VALUE is JSON "
        "or text; a single-agent config's module is default_policy",
    )
    parser.add_argument(
        "--storage-path", help="results directory (default: $CHECKPOINTS_DIR or ~/ray_results)"
    )
    parser.add_argument("--name", help="experiment name (a sub-directory of the storage path)")
    parser.add_argument(
        "--checkpoint-freq",
        type=count(0),
        help=f"checkpoint every N iterations and at the end (default: the file's `checkpoint_freq`, "
        f"else {DEFAULT_CHECKPOINT_FREQ}; 0: at the end only)",
    )
    parser.add_argument(
        "--max-failures",
        type=count(0),
        default=DEFAULT_MAX_FAILURES,
        help="retries of a crashed trial, each from its last checkpoint (Tune FailureConfig)",
    )
    parser.add_argument("--num-samples", type=count(1), default=1, help="Tune samples of the param space")
    parser.add_argument("--max-concurrent-trials", type=count(1), help="trials running at once")
    parser.add_argument("--resume", action="store_true", help="continue the latest run of the experiment")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="Tune's progress tables and full results on the console"
    )
    if path is None or not Path(path).is_file():
        return  # a missing file is reported when the command runs
    module = import_experiment_module(path)
    declared = declared_settings(module)
    parser.set_defaults(experiment_module=module, declared_settings=declared)
    add_setting_arguments(parser, declared, path)


def resume_command(argv: list[str]) -> str:
    """The command line that resumes the run started by ``rllib`` + ``argv`` (a resumed run keeps
    its config, so ``--config`` and ``--module`` are left out; the file's settings stay)."""
    kept, skip = [], False
    for arg in argv:
        if skip or arg == "--resume":
            skip = False
            continue
        if arg in ("--config", "--module") or arg.startswith(("--config=", "--module=")):
            skip = "=" not in arg
            continue
        kept.append(arg)
    return shlex.join(["rllib", *kept, "--resume"])


def run(args: argparse.Namespace) -> int:
    """``rllib train file``: 0 when every trial finished, 1 when one failed (user errors raise)."""
    module = getattr(args, "experiment_module", None)
    values = declared_values(args, getattr(args, "declared_settings", ()))
    experiment = load_experiment_file(args.path, values, module=module)
    overrides = {"config": args.config} if args.config else {}
    if args.module:
        overrides["module"] = args.module
    if args.config:
        apply_config_overrides(experiment.config, args.config)
    if args.module:
        apply_module_overrides(experiment.config, args.module)
    try:
        outcome = train(
            experiment,
            stop=args.stop,
            storage_path=args.storage_path,
            checkpoint_freq=args.checkpoint_freq,
            max_failures=args.max_failures,
            num_samples=args.num_samples,
            name=args.name,
            resume=args.resume,
            max_concurrent_trials=args.max_concurrent_trials,
            verbose=args.verbose,
            overrides=overrides,
        )
    except RecurringTrialError as exc:
        print(f"rllib: trial failed: {exc}", file=sys.stderr)
        return 1
    results, stop_signal = outcome
    stop = args.stop or experiment.stop
    if stop_signal is not None:
        # Ray's workers report being stopped as the driver disconnects: before the last line, not after.
        ray.shutdown()
        print(
            f"rllib: {signal.Signals(stop_signal).name}: the run stopped early, "
            f"{what_was_saved(results)}; it continues with: {resume_command(args.argv)}",
            file=sys.stderr,
        )
        return 128 + stop_signal
    # A failed trial's metrics are Tune's bookkeeping only: its error comes first, not the stop keys.
    finished = [r for r in results if not r.error]
    bad_keys = sorted({m for r in finished if r.metrics for m in unknown_stop_keys(stop, r.metrics)})
    if bad_keys:
        return user_error(ValueError("; ".join(bad_keys)))
    errors = [f"{r.path}: {error_line(r.error)}" for r in results if r.error] + _incomplete_trials(results)
    errors += [
        f"{r.path}: ended before its stop criteria {stop} were met"
        for r in finished
        if not criteria_met(stop, r.metrics or {})
    ]
    for error in errors:
        print(f"rllib: trial failed: {error}", file=sys.stderr)
    print(f"Finished {len(results)} trial(s) in {results.experiment_path}; errors: {len(errors)}")
    return 1 if errors else 0
