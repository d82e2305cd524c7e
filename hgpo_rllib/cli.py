"""The ``rllib`` command: ``rllib train file <experiment.py>``, ``rllib evaluate <checkpoint>`` and
``rllib sft`` (a warm start from expert play, :mod:`hgpo_rllib.sft`).

RLlib 2.60 ships no CLI any more; this one is hgpo-rllib's own.

An experiment file is a Python file that defines ``config`` (an ``AlgorithmConfig``) and optionally
``stop`` (a Tune stop dict) and ``param_space`` (a dict of Tune search spaces merged into the config),
the convention of RLlib's former ``rllib train file``. Training runs through Ray Tune, so every trial
writes Tensorboard event files, ``progress.csv`` and checkpoints under the storage path.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_STOP = {"training_iteration": 10}
#: Columns of Tune's progress table (result key -> header); keys a run does not report are left out.
PROGRESS_COLUMNS = {
    "training_iteration": "iter",
    "time_total_s": "total time (s)",
    "env_runners/success_rate": "success",
    "env_runners/episode_len_mean": "episode len",
    "env_runners/invalid_action_rate": "invalid actions",
    "env_runners/score_mean": "score",
    "env_runners/episode_return_mean": "return",
}


@dataclass
class Experiment:
    """What an experiment file defines."""

    config: Any
    stop: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_STOP))
    param_space: dict[str, Any] = field(default_factory=dict)
    name: str | None = None


def load_experiment_file(path: str | os.PathLike) -> Experiment:
    """Import an experiment file and read its ``config``, ``stop``, ``param_space`` and ``name``."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"experiment file not found: {file}")
    spec = importlib.util.spec_from_file_location(f"_hgpo_experiment_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import experiment file {file} (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = getattr(module, "config", None)
    if not isinstance(config, AlgorithmConfig):
        raise ValueError(f"{file} must define `config`, an AlgorithmConfig (got {type(config).__name__})")
    stop = getattr(module, "stop", None) or dict(DEFAULT_STOP)
    param_space = getattr(module, "param_space", None) or {}
    if not isinstance(stop, dict) or not isinstance(param_space, dict):
        raise ValueError(f"{file}: `stop` and `param_space` must be dicts")
    return Experiment(config, dict(stop), dict(param_space), getattr(module, "name", None))


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
    checkpoint_freq: int = 0,
    num_samples: int = 1,
    name: str | None = None,
    resume: bool = False,
    max_concurrent_trials: int | None = None,
):
    """Run an experiment through Ray Tune and return its ``ResultGrid``.

    An existing experiment directory is never overwritten: a new run of the same name goes to
    ``<name>_run2``, ``<name>_run3``, ...; ``resume=True`` continues the latest of them.
    """
    import ray
    from ray import tune

    import envs
    import hgpo_rllib.hgpo  # noqa: F401 - registers "HGPO" with Tune

    if checkpoint_freq < 0 or num_samples < 1:
        raise ValueError("checkpoint_freq must be >= 0 and num_samples >= 1")
    storage = Path(storage_path or os.environ.get("CHECKPOINTS_DIR") or Path.home() / "ray_results")
    storage = storage.expanduser().resolve()
    name = name or experiment.name or f"{experiment.config.algo_class.__name__}_{experiment.config.env}"
    runs = experiment_runs(storage, name)
    trainable = experiment.config.algo_class
    if not ray.is_initialized():
        ray.init(include_dashboard=False)
    envs.register_all()  # Ray's registry forgets names across ray.shutdown()/ray.init()
    if resume:
        if not runs:
            raise FileNotFoundError(f"nothing to resume: no experiment {name!r} under {storage}")
        latest = runs[max(runs)]
        print(f"Resuming {latest}")
        tuner = tune.Tuner.restore(str(latest), trainable=trainable, resume_errored=True)
        return tuner.fit()
    if runs:
        name = f"{name}_run{max(runs) + 1}"
    print(f"Results go to {storage / name}")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rllib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train_cmd = commands.add_parser("train", help="train an algorithm")
    train_sub = train_cmd.add_subparsers(dest="source", required=True)
    file_cmd = train_sub.add_parser("file", help="train from a Python experiment file")
    file_cmd.add_argument("path", help="Python file defining `config` (and optionally `stop`)")
    file_cmd.add_argument("--stop", type=_json_dict, help="Tune stop criteria as JSON")
    file_cmd.add_argument(
        "--storage-path", help="results directory (default: $CHECKPOINTS_DIR or ~/ray_results)"
    )
    file_cmd.add_argument("--name", help="experiment name (a sub-directory of the storage path)")
    file_cmd.add_argument("--checkpoint-freq", type=int, default=0, help="checkpoint every N iterations")
    file_cmd.add_argument("--num-samples", type=int, default=1, help="Tune samples of the param space")
    file_cmd.add_argument("--max-concurrent-trials", type=int, help="trials running at once")
    file_cmd.add_argument("--resume", action="store_true", help="continue the latest run of the experiment")

    eval_cmd = commands.add_parser("evaluate", help="evaluate a checkpoint and the baselines")
    eval_cmd.add_argument("checkpoint", nargs="?", help="algorithm checkpoint dir (omit: baselines only)")
    eval_cmd.add_argument("--env", required=True, choices=["alfworld", "webshop", "keychest"])
    eval_cmd.add_argument("--split", choices=["in", "out"], help="ALFWorld evaluation split")
    eval_cmd.add_argument("--seeds", type=int, nargs="+", default=[123, 456, 789])
    eval_cmd.add_argument("--episodes", type=int, default=32, help="episodes per seed and policy")
    eval_cmd.add_argument("--output", required=True, help="new directory for the CSV/Markdown tables")
    eval_cmd.add_argument(
        "--baselines", nargs="*", default=["expert", "random"], help="expert and/or random (none: '')"
    )
    eval_cmd.add_argument("--env-config", type=_json_dict, default={}, help="env settings as JSON")
    eval_cmd.add_argument("--batch-size", type=int, default=16, help="episodes played in lock-step")

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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "evaluate":
        try:
            return _evaluate(args)
        except (FileNotFoundError, FileExistsError, ValueError) as exc:
            print(f"rllib: error: {exc}", file=sys.stderr)
            return 2
    if args.command == "sft":
        from hgpo_rllib import sft

        try:
            return sft.run_from_args(args)
        except (FileExistsError, ValueError, RuntimeError) as exc:
            print(f"rllib: error: {exc}", file=sys.stderr)
            return 2
    if args.command == "train" and args.source == "file":
        try:
            experiment = load_experiment_file(args.path)
            results = train(
                experiment,
                stop=args.stop,
                storage_path=args.storage_path,
                checkpoint_freq=args.checkpoint_freq,
                num_samples=args.num_samples,
                name=args.name,
                resume=args.resume,
                max_concurrent_trials=args.max_concurrent_trials,
            )
        except (FileNotFoundError, FileExistsError, ValueError) as exc:
            print(f"rllib: error: {exc}", file=sys.stderr)
            return 2
        errors = [r.error for r in results if r.error]
        print(f"Finished {len(results)} trial(s) in {results.experiment_path}; errors: {len(errors)}")
        return 1 if errors else 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
