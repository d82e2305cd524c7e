"""Build a warm start's recipe (if the cache has none), ship it inside the package in bf16, and
evaluate the shipped copy: ALFWorld's (the CPU main job's at ``-k`` and ``--answer-format``) on the
134 ``eval_out_of_distribution`` games, WebShop's (K = 4, ``envs/webshop/facts.py``) on its first 100
test goals; with ``--model`` the env's recipe for that pretrained base (a LoRA adapter, K = 2).

    python scripts/ship_warm_start.py --cache ~/.cache/hgpo_rllib [--env webshop] [--model NAME] \
        [--eval-dtype cpu --eval-inference-backend vllm]

Resumable: the build and the evaluation both continue where an interrupted run stopped.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import envs
from hgpo_rllib.evaluation.policy_loading import PLAY_BACKENDS, PLAY_DTYPES
from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.warm_start.cache import build_warm_start, warm_start_recipe
from hgpo_rllib.warm_start.shipping import describe, ship_warm_start

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--cache", type=Path, default=None, help="the cache to build in (default: ~/.cache)")
    parser.add_argument("--env", choices=["alfworld", "webshop"], default="alfworld")
    parser.add_argument("-k", "--history-length", type=int, default=2, help="ALFWorld's K (WebShop's is 4)")
    parser.add_argument("--answer-format", choices=envs.ANSWER_FORMATS, help="ALFWorld's answer format")
    parser.add_argument(
        "--model",
        help="the warm start of this pretrained base instead (the env's WarmStartFacts.base_recipes)",
    )
    parser.add_argument("--seed", type=int, default=123, help="evaluation seed (one pass over the split)")
    parser.add_argument(
        "--eval-dtype",
        choices=PLAY_DTYPES,
        help="the evaluation plays in this dtype (rllib evaluate --dtype; default: the warm start's own)",
    )
    parser.add_argument(
        "--eval-inference-backend",
        choices=PLAY_BACKENDS,
        help="and with this engine (rllib evaluate --inference-backend; default: the warm start's own)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="where the evaluation's tables go (default docs/results/<env>_shipped_warm_start_eval, "
        "suffixed with K and the answer format where they are not the defaults)",
    )
    args = parser.parse_args()
    command, name = "python scripts/ship_warm_start.py", f"{args.env}_shipped_warm_start_eval"
    if args.env == "webshop":
        if args.history_length != 2 or args.answer_format:
            parser.error("WebShop's warm starts have their own K and answer format")
        recipe, command = warm_start_recipe("webshop", base=args.model), f"{command} --env webshop"
        evaluation = {
            "env": "webshop",
            "seeds": [args.seed],
            "episodes": 100,
            "env_config": {"max_steps": 15},
        }
    else:
        recipe = warm_start_recipe("alfworld", args.history_length, args.answer_format, args.model)
        if args.history_length != 2:
            command, name = f"{command} -k {args.history_length}", f"{name}_k{args.history_length}"
        if args.answer_format:
            command, name = f"{command} --answer-format {args.answer_format}", f"{name}_{args.answer_format}"
        evaluation = {"env": "alfworld", "split": "out", "seeds": [args.seed]}
    if args.model:
        command, name = f"{command} --model {args.model}", f"{name}_{args.model}"
    playing = (
        ("--eval-dtype", "torch_dtype", args.eval_dtype),
        ("--eval-inference-backend", "inference_backend", args.eval_inference_backend),
    )
    for flag, key, value in playing:
        if value:  # in the evaluation's settings record: a rerun without the flag never mixes them
            command, name, evaluation[key] = f"{command} {flag} {value}", f"{name}_{value}", value
    try:
        built = build_warm_start(recipe, args.cache, use_shipped=False)
        shipped = ship_warm_start(
            recipe,
            built,
            evaluation=evaluation,
            output=args.output or ROOT / "docs" / "results" / name,
            build_command=command,
        )
    except KeyboardInterrupt:
        raise SystemExit(f"interrupted; the build and the evaluation resume: rerun `{command}`") from None
    print(describe(shipped))


if __name__ == "__main__":
    main()
