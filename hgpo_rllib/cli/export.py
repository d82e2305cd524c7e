"""``rllib export CHECKPOINT DIR``: write the policy folder to share
(:mod:`~hgpo_rllib.evaluation.policy_folder`)."""

from __future__ import annotations

import argparse

from hgpo_rllib.evaluation.policy_folder import export_policy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rllib export``."""
    parser.add_argument("checkpoint", help="algorithm checkpoint dir (or a policy folder)")
    parser.add_argument("output", help="the policy folder to write (new or empty)")


def run(args: argparse.Namespace) -> int:
    out = export_policy(args.checkpoint, args.output)
    print(f"Policy folder written to {out}: safe to share (safetensors + JSON, no pickle)")
    return 0
