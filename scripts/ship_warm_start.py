"""Build the CPU main job's warm start (if the cache has none), ship it inside the package in bf16,
and evaluate the shipped copy on ALFWorld's 134 ``eval_out_of_distribution`` games.

    python scripts/ship_warm_start.py --cache ~/.cache/hgpo_rllib

Resumable: the build and the evaluation both continue where an interrupted run stopped.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hgpo_rllib.warm_start.cache import alfworld_recipe, build_warm_start
from hgpo_rllib.warm_start.shipping import describe, ship_warm_start

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None, help="the cache to build in (default: ~/.cache)")
    parser.add_argument("-k", "--history-length", type=int, default=2)
    parser.add_argument("--seed", type=int, default=123, help="evaluation seed (one pass over the split)")
    parser.add_argument(
        "--output",
        type=Path,
        default=ROOT / "docs" / "results" / "alfworld_shipped_warm_start_eval",
        help="where the evaluation's tables go",
    )
    args = parser.parse_args()
    recipe = alfworld_recipe(args.history_length)
    built = build_warm_start(recipe, args.cache, use_shipped=False)
    command = "python scripts/ship_warm_start.py" + (
        f" -k {args.history_length}" if args.history_length != 2 else ""
    )
    shipped = ship_warm_start(
        recipe,
        built,
        evaluation={"env": "alfworld", "split": "out", "seeds": [args.seed]},
        output=args.output,
        build_command=command,
    )
    print(describe(shipped))


if __name__ == "__main__":
    main()
