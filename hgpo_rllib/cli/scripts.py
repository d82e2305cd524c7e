"""``python tuned_examples/<file>.py [flags]``: a tuned example run as a script, through the same CLI."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from hgpo_rllib.advantages import ESTIMATORS, NORMALIZE_BY
from hgpo_rllib.cli import main
from hgpo_rllib.experiments.presets import ENV_VARS, LLM_SHARING, PRESETS


def run_as_script(example_file: str, argv: Sequence[str] | None = None) -> int:
    """Flags become the tuned example's ``HGPO_*`` variables (its documented switches), then the file runs
    through ``rllib train file``, so both ways of running it build the same config."""
    parser = argparse.ArgumentParser(description=f"Train {os.path.basename(example_file)}")
    parser.add_argument("--preset", choices=PRESETS)
    parser.add_argument("--model", help="local Hugging Face model directory (paper presets)")
    parser.add_argument("--estimator", choices=ESTIMATORS)
    parser.add_argument("-k", "--history-length", type=int)
    parser.add_argument("--alpha", type=float)
    parser.add_argument("--base-group", action="store_const", const="1")
    parser.add_argument(
        "--warm-start", help="an `rllib sft` model directory, or 'none' for the random-init demo"
    )
    parser.add_argument("--critic", help="HiPER's critic: a local model directory (paper presets)")
    parser.add_argument("--llm-sharing", choices=LLM_SHARING, help="multi-agent systems: LLMs per role")
    parser.add_argument("--normalize-by", choices=NORMALIZE_BY, help="multi-agent systems: baselines")
    args, rest = parser.parse_known_args(argv)
    fields = (
        "preset",
        "model",
        "estimator",
        "history_length",
        "alpha",
        "base_group",
        "warm_start",
        "critic",
        "llm_sharing",
        "normalize_by",
    )
    for field in fields:
        value = getattr(args, field)
        if value is not None:
            os.environ[ENV_VARS[field]] = str(value)
    return main(["train", "file", example_file, *rest])
