"""Where an ALFWorld warm start goes wrong: its commands on its own states, against the searcher's.

Run: ``python benchmarks/alfworld_step_accuracy.py MODEL_DIR [--split S] [--episodes 32]``.
The model plays ``--episodes`` games of the split as ``rllib evaluate`` plays them (its own prompts,
sampling at its ``eval_temperature``); at every step the searcher (``envs/alfworld/searcher.py``),
which decides from the prompt alone, names the command it would give in that state. The table gives,
per kind of the searcher's command (go, open, take, ...), how often the model's command was the same,
and the success rate of the games. An episode needs every ``take`` right, so one kind far below the
others explains a low success rate where the overall agreement does not.
"""

from __future__ import annotations

import argparse
from collections import Counter

import pandas as pd
from results_file import write_result  # benchmarks/ is on sys.path when run as a script

from envs.alfworld.searcher import Searcher
from envs.common.actions import parse_action
from hgpo_rllib.evaluation import CheckpointPolicy, EpisodeSlot, play
from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.warm_start.demonstrations import demonstrator_answer


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("model_dir", help="an `rllib sft` model directory or an HGPO checkpoint")
    parser.add_argument("--split", default="eval_out_of_distribution")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--seed", type=int, default=123, help="sampling seed")
    args = parser.parse_args()
    policy = CheckpointPolicy(args.model_dir, env_config={"split": args.split}).reseed(args.seed)
    searcher = Searcher(policy.config.history_length)
    right, total = Counter(), Counter()

    def labelled(slots: list[EpisodeSlot]) -> list[str]:
        answers = policy(slots)
        for slot, answer in zip(slots, answers, strict=True):
            wanted = demonstrator_answer(searcher, slot)[1]
            kind = wanted.split()[0]
            total[kind] += 1
            right[kind] += parse_action(answer).command == wanted
        return answers

    records = play("alfworld", policy.env_config, labelled, list(range(args.episodes)), desc="games")
    rows = [
        {"searcher's command": kind, "states": total[kind], "model = searcher": right[kind] / total[kind]}
        for kind in sorted(total, key=total.get, reverse=True)
    ]
    rows.append(
        {
            "searcher's command": "all",
            "states": sum(total.values()),
            "model = searcher": sum(right.values()) / sum(total.values()),
        }
    )
    table = pd.DataFrame(rows).to_markdown(index=False, floatfmt=".0%")
    won = sum(r["won"] for r in records)
    summary = f"{table}\n\nGames won: {won} of {len(records)} ({won / len(records):.0%})."
    print(summary)
    name = args.model_dir.rstrip("/").split("/")[-1]
    write_result(
        f"alfworld_step_accuracy_{name}",
        f"`{name}` on its own states against the searcher "
        f"({args.split}, {args.episodes} games, sampling seed {args.seed})",
        summary,
    )


if __name__ == "__main__":
    main()
