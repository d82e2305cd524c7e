"""The ``rllib`` command: ``rllib train file <experiment.py>`` (:mod:`~hgpo_rllib.cli.train`), ``rllib
evaluate <checkpoint>`` (:mod:`~hgpo_rllib.cli.evaluate`), ``rllib sft`` (:mod:`~hgpo_rllib.cli.sft`),
``rllib export`` (:mod:`~hgpo_rllib.cli.export`), ``rllib models`` (:mod:`~hgpo_rllib.cli.models`) and
``rllib memory <experiment.py>`` (:mod:`~hgpo_rllib.cli.memory`).

RLlib 2.60 ships no CLI any more; this one is hgpo-rllib's own. Every user error (a bad flag, a bad
file, a bad setting) is one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from hgpo_rllib.torchvision_check import TorchvisionError, check_torchvision

try:  # before the commands' modules import transformers, which would fail with a long traceback
    check_torchvision()
except TorchvisionError as broken:
    sys.exit(f"rllib: {broken}")

from hgpo_rllib.cli import evaluate, export, memory, models, sft, train  # noqa: E402
from hgpo_rllib.cli.args import InterruptedWithHint, Parser, user_error  # noqa: E402
from hgpo_rllib.experiments.settings import refuse_removed_variables  # noqa: E402


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The ``rllib`` parser; for ``rllib train file X.py`` (in ``argv``) with the settings X.py
    declares, so that ``--help`` lists them and they parse as typed flags."""
    parser = Parser(
        prog="rllib",
        description="hgpo-rllib's command line (RLlib 2.60 ships none): train, evaluate, warm-start (sft), "
        "export and inspect LLM agents; `rllib <command> --help` for each",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train_cmd = commands.add_parser("train", help="train an algorithm")
    train_sub = train_cmd.add_subparsers(dest="source", required=True)
    train.add_arguments(
        train_sub.add_parser("file", help="train from a Python experiment file"), train.experiment_path(argv)
    )
    evaluate.add_arguments(commands.add_parser("evaluate", help="evaluate a checkpoint and the baselines"))
    sft.add_arguments(commands.add_parser("sft", help="warm-start a model on expert play"))
    export.add_arguments(commands.add_parser("export", help="write a checkpoint's policy folder to share"))
    models.add_arguments(
        commands.add_parser("models", help="list, prepare or remove models converted from GGUF")
    )
    memory.add_arguments(
        commands.add_parser(
            "memory", help="print an experiment's GPU memory plan (exit 1 if a role does not fit)"
        )
    )
    return parser


#: Each command's runner and the exceptions that are the user's errors (one line, exit 2).
_COMMANDS = {
    "train": (train.run, (OSError, ValueError)),
    "evaluate": (evaluate.run, (OSError, ValueError)),
    "sft": (sft.run, (OSError, ValueError, RuntimeError)),
    "export": (export.run, (OSError, ValueError)),
    "models": (models.run, (OSError, ValueError)),
    "memory": (memory.run, (OSError, ValueError)),
}


#: What to do after Ctrl-C, per command (each one's output resumes).
_RESUME_HINTS = {
    "train": "rerun the command with --resume to continue from the last checkpoint",
    "evaluate": "rerun the same command to resume (finished games are kept)",
    "sft": "rerun the same command to resume",
    "export": "nothing was written; rerun the same command",
    "models": "a conversion in progress is not kept; rerun the same command",
    "memory": "nothing was written; rerun the same command",
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        refuse_removed_variables(os.environ)
        parser = build_parser(argv)
    except (OSError, ValueError) as exc:  # a set HGPO_* variable, an experiment file that does not load
        return user_error(exc)
    args = parser.parse_args(argv)
    args.argv = argv  # for hints that repeat the command
    run, user_errors = _COMMANDS[args.command]
    try:
        return run(args)
    except user_errors as exc:
        return user_error(exc)
    except KeyboardInterrupt as exc:
        hint = exc.hint if isinstance(exc, InterruptedWithHint) else _RESUME_HINTS[args.command]
        print(f"\nrllib: interrupted; {hint}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
