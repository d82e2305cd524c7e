"""``rllib evaluate [CHECKPOINT]``: the paper's evaluation protocol (:mod:`hgpo_rllib.evaluation`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hgpo_rllib.cli.args import count, json_dict
from hgpo_rllib.cli.quiet import hide_harmless_lines
from hgpo_rllib.evaluation.policy_loading import PLAY_BACKENDS, PLAY_DTYPES
from hgpo_rllib.evaluation.protocol import DEFAULT_SEEDS, evaluate
from hgpo_rllib.experiments.teams import team_warm_start_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rllib evaluate``."""
    parser.add_argument(
        "checkpoint",
        nargs="?",
        help="checkpoint, policy folder, warm start or team warm-start folder (omit: baselines only)",
    )
    parser.add_argument(
        "--env",
        help="alfworld, webshop, keychest, a registered name or module:Class (default: the checkpoint's; "
        "needed for a policy folder that names an env this process does not know: received folders run no "
        "code)",
    )
    parser.add_argument(
        "--split",
        help="the env's evaluation split choice (EvaluationFacts.splits); ALFWorld: in, out (default: "
        "eval_out_of_distribution) or all",
    )
    parser.add_argument("--seeds", type=count(0), nargs="+", default=list(DEFAULT_SEEDS))
    parser.add_argument(
        "--episodes",
        type=count(1),
        help="episodes per seed, policy and split (default: the whole split where the env has fixed "
        "games, as ALFWorld has, else 32)",
    )
    parser.add_argument(
        "--output", required=True, help="directory for the CSV/Markdown tables (rerun: resumes it)"
    )
    parser.add_argument(
        "--baselines",
        nargs="*",
        help="expert and/or random (default: both, the expert where the env has one; none: '')",
    )
    parser.add_argument(
        "--reuse",
        nargs="+",
        default=[],
        metavar="DIR",
        help="earlier --output directories: what they played with the same settings (other splits "
        "allowed) is copied instead of played again",
    )
    parser.add_argument("--env-config", type=json_dict, default={}, help="env settings as JSON")
    parser.add_argument(
        "--batch-size",
        type=count(1),
        default=16,
        help="episodes in flight at once, each generation call answering all of them; a finished "
        "episode's slot starts the next task at once (continuous batching; default 16)",
    )
    parser.add_argument(
        "--dtype",
        choices=PLAY_DTYPES,
        help="play the checkpoint in this dtype (default: its own, float32 for the shipped warm starts); "
        "cpu: bfloat16 where the CPU has it natively (AVX512_BF16, AMX: ~2.5x float32's matmuls), else "
        "float32; an evaluation in another dtype is another evaluation (--output, --reuse)",
    )
    parser.add_argument(
        "--inference-backend",
        choices=PLAY_BACKENDS,
        help="generate with HF generate or vLLM (default: the checkpoint's own engine; HF on a CPU); "
        "an evaluation with another engine is another evaluation (--output, --reuse)",
    )
    parser.add_argument(
        "--transcripts",
        action="store_true",
        help="also write each game played (not copied by --reuse) turn by turn, observation, answer and "
        "reward, to OUTPUT/transcripts/<policy>-seed<seed>[-<split>].jsonl",
    )
    parser.add_argument(
        "--samples",
        type=count(1),
        default=1,
        help="team checkpoints: episodes per task (k of avg@k and pass@k; default 1)",
    )


def run(args: argparse.Namespace) -> int:
    hide_harmless_lines()  # as `rllib train file` does (cli/quiet.py: each line with its reason)
    source = Path(args.checkpoint).expanduser() if args.checkpoint else None
    team = team_warm_start_config(source) if source is not None and source.is_dir() else None
    summary = evaluate(
        args.checkpoint,
        env=args.env,
        split=args.split,
        seeds=args.seeds,
        episodes=args.episodes,
        output=args.output,
        baselines=None if args.baselines is None else [b for b in args.baselines if b],
        env_config=args.env_config,
        batch_size=args.batch_size,
        samples=args.samples,
        team_config=team,
        reuse=args.reuse,
        torch_dtype=args.dtype,
        inference_backend=args.inference_backend,
        transcripts=args.transcripts,
    )
    print(summary.to_markdown(index=False))
    print(f"Tables written to {args.output}")
    return 0
