"""``rllib export CHECKPOINT DIR``: write the policy folder to share
(:mod:`~hgpo_rllib.evaluation.policy_folder`): safetensors, JSON and tokenizer files only."""

from __future__ import annotations

import argparse

from hgpo_rllib.evaluation.policy_folder import export_policy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rllib export``."""
    parser.add_argument("checkpoint", help="algorithm checkpoint dir (or a policy folder)")
    parser.add_argument("output", help="the policy folder to write (new or empty)")
    parser.add_argument(
        "--env",
        help="the env (name, module:Class or file.py:Class) of a policy folder that names one this process "
        "does not know: received folders run no code (default: the checkpoint's)",
    )
    parser.add_argument(
        "--format",
        choices=("folder", "gguf"),
        default="folder",
        help="gguf: the folder also holds the policy as a GGUF file in the format of the GGUF file its "
        "model was converted from (docs/models.md)",
    )
    parser.add_argument(
        "--gguf-type",
        choices=("f16", "q8_0"),
        default="f16",
        help="the GGUF file's weight type (default f16)",
    )


def run(args: argparse.Namespace) -> int:
    gguf_type = args.gguf_type if args.format == "gguf" else None
    out = export_policy(args.checkpoint, args.output, env=args.env, gguf_type=gguf_type)
    # What was written, not a verdict on it: the weights and settings are the source's.
    print(f"Policy folder written to {out} (safetensors, JSON and tokenizer files; no pickle)")
    return 0
