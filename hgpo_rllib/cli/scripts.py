"""``python tuned_examples/<file>.py [flags]``: a tuned example run as a script, a thin alias of
``rllib train file <file> [flags]`` (the same typed settings, the same config)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from hgpo_rllib.cli import main


def run_as_script(example_file: str, argv: Sequence[str] | None = None) -> int:
    """``rllib train file example_file`` with ``argv`` (default: the script's own arguments)."""
    return main(["train", "file", example_file, *(sys.argv[1:] if argv is None else argv)])
