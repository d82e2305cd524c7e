"""The ``rllib`` command: ``rllib train file <experiment.py>``, ``rllib evaluate <checkpoint>`` and
``rllib sft`` (a warm start from expert play, :mod:`hgpo_rllib.sft`).

RLlib 2.60 ships no CLI any more; this one is hgpo-rllib's own.

An experiment file is a Python file that defines ``config`` (an ``AlgorithmConfig``) and optionally
``stop`` (a Tune stop dict) and ``param_space`` (a dict of Tune search spaces merged into the config),
the convention of RLlib's former ``rllib train file``, and optionally ``checkpoint_freq``. Training
runs through Ray Tune, so every trial writes Tensorboard event files, ``progress.csv`` and checkpoints
under the storage path: every ``checkpoint_freq`` iterations (default 5) and at the end. A trial
that crashes is retried from its last checkpoint (``--max-failures``, default 3), and ``--resume``
continues an interrupted experiment from its trials' last checkpoints.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import hashlib
import importlib.util
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

DEFAULT_STOP = {"training_iteration": 10}
DEFAULT_CHECKPOINT_FREQ = 5
DEFAULT_MAX_FAILURES = 3
#: What ``rllib train file`` started a run with, in its experiment directory (checked by --resume).
RUN_RECORD = "rllib_train_args.json"
#: Columns of Tune's progress table (result key -> header); keys a run does not report are left out.
#: ``*_smoothed``: over the last ``metrics_num_episodes_for_smoothing`` episodes (hgpo_rllib/callbacks.py).
PROGRESS_COLUMNS = {
    "training_iteration": "iter",
    "time_total_s": "total time (s)",
    "env_runners/success_rate_smoothed": "success",
    "env_runners/success_rate": "success (iter)",
    "env_runners/episode_len_mean_smoothed": "episode len",
    "env_runners/invalid_action_rate_smoothed": "invalid actions",
    "env_runners/score_mean_smoothed": "score",
    "env_runners/episode_return_mean_smoothed": "return",
}


@dataclass
class Experiment:
    """What an experiment file defines."""

    config: Any
    stop: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_STOP))
    param_space: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    checkpoint_freq: int = DEFAULT_CHECKPOINT_FREQ
    source_sha256: str | None = None  # of the experiment file: --resume refuses an edited one


def load_experiment_file(path: str | os.PathLike) -> Experiment:
    """Import an experiment file and read its ``config``, ``stop``, ``param_space``, ``name`` and
    ``checkpoint_freq``."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"experiment file not found: {file}")
    spec = importlib.util.spec_from_file_location(f"_hgpo_experiment_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import experiment file {file} (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: report where it failed, in one line
        raise ValueError(f"{_failing_line(exc, file)}: {type(exc).__name__}: {exc}") from exc
    config = getattr(module, "config", None)
    if not isinstance(config, AlgorithmConfig):
        raise ValueError(f"{file} must define `config`, an AlgorithmConfig (got {type(config).__name__})")
    stop = getattr(module, "stop", None) or dict(DEFAULT_STOP)
    param_space = getattr(module, "param_space", None) or {}
    if not isinstance(stop, dict) or not isinstance(param_space, dict):
        raise ValueError(f"{file}: `stop` and `param_space` must be dicts")
    checkpoint_freq = getattr(module, "checkpoint_freq", DEFAULT_CHECKPOINT_FREQ)
    if not isinstance(checkpoint_freq, int) or checkpoint_freq < 0:
        raise ValueError(f"{file}: `checkpoint_freq` must be an int >= 0, got {checkpoint_freq!r}")
    sha256 = hashlib.sha256(file.read_bytes()).hexdigest()
    name = getattr(module, "name", None)
    return Experiment(config, dict(stop), dict(param_space), name, checkpoint_freq, sha256)


def apply_config_overrides(config: Any, overrides: dict[str, Any]) -> None:
    """``--config``: settings (attributes of the config) merged into the file's ``config`` in place.

    ``model_config`` is merged key by key into the file's model_config (not replaced); other
    settings go through ``AlgorithmConfig.update_from_dict`` (so ``evaluation_*`` keys and
    ``env_config`` take RLlib's own paths).
    """
    known = {k for k in vars(config) if not k.startswith("_")} | {"model_config"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"--config: unknown setting(s) {unknown}; expected attributes of {type(config).__name__}, "
            "e.g. lr, num_env_runners, model_config"
        )
    model_config = overrides.get("model_config", {})
    if not isinstance(model_config, dict):
        raise ValueError(f"--config: model_config must be a JSON object, got {model_config!r}")
    config.update_from_dict({k: v for k, v in overrides.items() if k != "model_config"})
    if model_config:
        current = config._model_config  # the user's, without the algorithm's auto-included keys
        current = dict(current) if isinstance(current, dict) else dataclasses.asdict(current)
        config.rl_module(model_config={**current, **model_config})


def _failing_line(exc: BaseException, file: Path) -> str:
    """``file:line`` of the innermost frame in ``file`` (a SyntaxError carries its own line)."""
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        return f"{file}:{exc.lineno}"
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == file]
    return f"{file}:{lines[-1]}" if lines else str(file)


def check_param_space(config: Any, param_space: dict[str, Any]) -> None:
    """Every ``param_space`` key must be a setting of ``config``: Tune would silently add a typo
    (``histroy_length``) as a new attribute and run every trial with the default."""
    known = set(config.to_dict())
    for key in param_space:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"param_space key {key!r} is not a setting of {type(config).__name__}{hint}")


def _check_resume(experiment_dir: Path, record: dict[str, Any]) -> None:
    """``--resume`` continues the run as it was started: Tune would silently ignore a new stop,
    checkpoint frequency or experiment file, so a change is refused instead."""
    saved = experiment_dir / RUN_RECORD
    if not saved.is_file():
        return  # a run started before run records existed
    previous = json.loads(saved.read_text())
    changed = [f"{k} was {previous.get(k)!r}, now {v!r}" for k, v in record.items() if previous.get(k) != v]
    if changed:
        raise ValueError(
            f"--resume cannot change a run's settings ({'; '.join(changed)}); resume with the original "
            "flags and file, or start a new run with --name"
        )

def trial_name(trial: Any) -> str:
    """Name a trial from its settings, as the authors' scripts do (e.g. ``k2_hgpo_alpha1.0_base0``)."""
    cfg = trial.config
    name = (
        f"k{cfg.get('history_length', '?')}_{cfg.get('estimator', 'hgpo')}"
        f"_alpha{cfg.get('length_weight_alpha', '?')}_base{int(bool(cfg.get('base_group', False)))}"
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
    for path in storage.glob(f"{name}_run*"):
        suffix = path.name[len(name) + len("_run") :]
        if suffix.isdigit():
            runs[int(suffix)] = path
    return dict(sorted(runs.items()))


def _progress_reporter() -> Any:
    """Tune's legacy console table with our columns (the newer console output takes no column list)."""
    from ray import tune

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    return tune.CLIReporter(metric_columns=dict(PROGRESS_COLUMNS), max_report_frequency=10)


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
):
    """Run an experiment through Ray Tune and return its ``ResultGrid``.

    An existing experiment directory is never overwritten: a new run of the same name goes to
    ``<name>_run2``, ``<name>_run3``, ...; ``resume=True`` continues the latest of them.
    ``checkpoint_freq`` None takes the experiment file's; a checkpoint is always written at the end.
    """
    import ray
    from ray import tune

    import envs
    import hgpo_rllib.hgpo  # noqa: F401 - registers "HGPO" with Tune

    if checkpoint_freq is None:
        checkpoint_freq = experiment.checkpoint_freq
    if not isinstance(checkpoint_freq, int) or checkpoint_freq < 0 or max_failures < 0 or num_samples < 1:
        raise ValueError(
            f"checkpoint_freq must be an int >= 0 (got {checkpoint_freq!r}), max_failures >= 0 "
            f"(got {max_failures}) and num_samples >= 1 (got {num_samples})"
        )
    storage = Path(storage_path or os.environ.get("CHECKPOINTS_DIR") or Path.home() / "ray_results")
    storage = storage.expanduser().resolve()
    name = name or experiment.name or f"{experiment.config.algo_class.__name__}_{experiment.config.env}"
    runs = experiment_runs(storage, name)
    trainable = experiment.config.algo_class
    if not ray.is_initialized():
        ray.init(include_dashboard=False)
    envs.register_all()  # Ray's registry forgets names across ray.shutdown()/ray.init()
    record = json.loads(json.dumps(
        {"stop": stop or experiment.stop, "checkpoint_freq": checkpoint_freq, "num_samples": num_samples,
         "experiment_file_sha256": experiment.source_sha256}, default=repr,
    ))
    if resume:
        if not runs:
            raise FileNotFoundError(f"nothing to resume: no experiment {name!r} under {storage}")
        latest = runs[max(runs)]
        _check_resume(latest, record)
        print(f"Resuming {latest}")
        tuner = tune.Tuner.restore(str(latest), trainable=trainable, resume_errored=True)
        return tuner.fit()
    if runs:
        name = f"{name}_run{max(runs) + 1}"
    check_param_space(experiment.config, experiment.param_space)
    experiment.config.copy(copy_frozen=False).validate()  # fail here, not inside a trial
    experiment_dir = storage / name
    experiment_dir.mkdir(parents=True)
    (experiment_dir / RUN_RECORD).write_text(json.dumps(record, indent=2))
    print(f"Results go to {experiment_dir}")
    param_space = experiment.config.copy(copy_frozen=False)
    if experiment.param_space:
        param_space = {**param_space.to_dict(), **experiment.param_space}
    tuner = tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(
            num_samples=num_samples,
            trial_name_creator=trial_name,
            trial_dirname_creator=trial_name,
            max_concurrent_trials=max_concurrent_trials,
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=str(storage),
            stop=stop or experiment.stop,
            progress_reporter=_progress_reporter(),
            callbacks=_logger_callbacks(project=name),
            failure_config=tune.FailureConfig(max_failures=max_failures),
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_frequency=checkpoint_freq, checkpoint_at_end=True
            ),
        ),
    )
    return tuner.fit()


def _json_dict(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object, e.g. '{\"training_iteration\": 5}'")
    return value


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line on stderr, exit status 2 (as every other user error)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an int >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rllib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train_cmd = commands.add_parser("train", help="train an algorithm")
    train_sub = train_cmd.add_subparsers(dest="source", required=True)
    file_cmd = train_sub.add_parser("file", help="train from a Python experiment file")
    file_cmd.add_argument("path", help="Python file defining `config` (and optionally `stop`)")
    file_cmd.add_argument("--stop", type=_json_dict, help="Tune stop criteria as JSON")
    file_cmd.add_argument(
        "--config", type=_json_dict, help="settings merged into the file's config, as JSON"
    )
    file_cmd.add_argument(
        "--storage-path", help="results directory (default: $CHECKPOINTS_DIR or ~/ray_results)"
    )
    file_cmd.add_argument("--name", help="experiment name (a sub-directory of the storage path)")
    file_cmd.add_argument(
        "--checkpoint-freq", type=_count(0),
        help=f"checkpoint every N iterations and at the end (default: the file's `checkpoint_freq`, "
        f"else {DEFAULT_CHECKPOINT_FREQ}; 0: at the end only)",
    )
    file_cmd.add_argument(
        "--max-failures", type=_count(0), default=DEFAULT_MAX_FAILURES,
        help="retries of a crashed trial, each from its last checkpoint (Tune FailureConfig)",
    )
    file_cmd.add_argument("--num-samples", type=_count(1), default=1, help="Tune samples of the param space")
    file_cmd.add_argument("--max-concurrent-trials", type=_count(1), help="trials running at once")
    file_cmd.add_argument("--resume", action="store_true", help="continue the latest run of the experiment")

    eval_cmd = commands.add_parser("evaluate", help="evaluate a checkpoint and the baselines")
    eval_cmd.add_argument("checkpoint", nargs="?", help="algorithm checkpoint dir (omit: baselines only)")
    eval_cmd.add_argument("--env", required=True, choices=["alfworld", "webshop", "keychest"])
    eval_cmd.add_argument(
        "--split", choices=["in", "out", "all"],
        help="ALFWorld evaluation split: eval_in_distribution, eval_out_of_distribution (default) or both",
    )
    eval_cmd.add_argument("--seeds", type=_count(0), nargs="+", default=[123, 456, 789])
    eval_cmd.add_argument(
        "--episodes", type=_count(1),
        help="episodes per seed, policy and split (default: the whole ALFWorld split, else 32)",
    )
    eval_cmd.add_argument(
        "--output", required=True, help="directory for the CSV/Markdown tables (rerun: resumes it)"
    )
    eval_cmd.add_argument(
        "--baselines", nargs="*", default=["expert", "random"], help="expert and/or random (none: '')"
    )
    eval_cmd.add_argument("--env-config", type=_json_dict, default={}, help="env settings as JSON")
    eval_cmd.add_argument("--batch-size", type=_count(1), default=16, help="episodes played in lock-step")

    from hgpo_rllib import sft

    sft.add_arguments(commands.add_parser("sft", help="warm-start a model on expert play"), _json_dict)
    return parser


def _evaluate(args: argparse.Namespace) -> int:
    from hgpo_rllib.evaluation import evaluate

    summary = evaluate(
        args.checkpoint,
        env=args.env,
        split=args.split,
        seeds=args.seeds,
        episodes=args.episodes,
        output=args.output,
        baselines=[b for b in args.baselines if b],
        env_config=args.env_config,
        batch_size=args.batch_size,
    )
    print(summary.to_markdown(index=False))
    print(f"Tables written to {args.output}")
    return 0


def _incomplete_trials(results: Any) -> list[str]:
    """Trials that reached their stop while their last iterations sampled too few groups to train
    (below ``num_consecutive_env_runner_failures_tolerance``, so the algorithm did not raise): a
    run that trains nothing must not exit 0."""
    messages = []
    for result in results:
        metrics = result.metrics or {}
        failed = int(metrics.get("num_consecutive_failed_iterations") or 0)
        if not result.error and failed:
            messages.append(
                f"{result.path}: its last {failed} iteration(s) sampled only "
                f"{int(metrics.get('num_groups_sampled') or 0)} rollout group(s), fewer than configured; "
                "see the env runners' errors above and num_groups_sampled in progress.csv"
            )
    return messages


def _user_error(exc: Exception) -> int:
    """One line on stderr, exit status 2."""
    message = str(exc).replace("\n", " ")
    print(f"rllib: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "evaluate":
        try:
            return _evaluate(args)
        except (OSError, ValueError) as exc:
            return _user_error(exc)
    if args.command == "sft":
        from hgpo_rllib import sft

        try:
            return sft.run_from_args(args)
        except (OSError, ValueError, RuntimeError) as exc:
            return _user_error(exc)
    if args.command == "train" and args.source == "file":
        try:
            experiment = load_experiment_file(args.path)
            if args.config:
                if args.resume:
                    raise ValueError("--config cannot change a resumed run (it keeps its own config)")
                apply_config_overrides(experiment.config, args.config)
            results = train(
                experiment,
                stop=args.stop,
                storage_path=args.storage_path,
                checkpoint_freq=args.checkpoint_freq,
                max_failures=args.max_failures,
                num_samples=args.num_samples,
                name=args.name,
                resume=args.resume,
                max_concurrent_trials=args.max_concurrent_trials,
            )
        except (OSError, ValueError) as exc:
            return _user_error(exc)
        errors = [r.error for r in results if r.error] + _incomplete_trials(results)
        for error in errors:
            print(f"rllib: trial failed: {error}", file=sys.stderr)
        print(f"Finished {len(results)} trial(s) in {results.experiment_path}; errors: {len(errors)}")
        return 1 if errors else 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
