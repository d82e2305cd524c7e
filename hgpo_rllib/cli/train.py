"""``rllib train file <experiment.py>``: run an experiment file through Ray Tune.

Every trial writes Tensorboard event files, ``progress.csv`` and checkpoints under the storage path:
every ``checkpoint_freq`` iterations (default 5), at the end, and when Ctrl-C or SIGTERM stops the
run. A trial that crashes is retried from its last checkpoint (``--max-failures``, default 3), and
``--resume`` continues an interrupted experiment from its trials' last checkpoints (the newest one
that loads). An existing experiment directory is never overwritten.

This module holds the command's options and the status it reports; its Tune run is
:mod:`~hgpo_rllib.cli.tune_run`, its directories and run record :mod:`~hgpo_rllib.cli.run_dirs`.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS

from hgpo_rllib.cli.args import count, json_dict, user_error
from hgpo_rllib.cli.stopping import RecurringTrialError, criteria_met, unknown_stop_keys, what_was_saved
from hgpo_rllib.cli.tune_run import DEFAULT_MAX_FAILURES, train
from hgpo_rllib.columns import ENV_ERROR_RATE, NUM_CONSECUTIVE_FAILED_ITERATIONS, NUM_GROUPS_SAMPLED
from hgpo_rllib.errors import error_line
from hgpo_rllib.experiments.experiment_file import (
    DEFAULT_CHECKPOINT_FREQ,
    apply_config_overrides,
    apply_module_overrides,
    declared_settings,
    import_experiment_module,
    load_experiment_file,
)
from hgpo_rllib.experiments.settings import add_setting_arguments, declared_values


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
