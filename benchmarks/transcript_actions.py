"""How policies act, read from evaluation transcripts (``rllib evaluate --transcripts``).

Run: ``python benchmarks/transcript_actions.py NAME=DIR [NAME=DIR ...] --name RESULT``, each DIR an
evaluation output written with ``--transcripts``. Prints, per policy, its games, wins, turns, the share
of turns whose command the game had already executed, and the games that reached the env's step
limit; then each game's commands, one line per game, to read what those numbers count. Writes
``docs/results/<RESULT>.md``.

Why repeats: on a WebShop item page a chosen option does not show as chosen (the original's text
pages), so a policy whose prompt no longer holds the turn that chose it may choose it again, and
again (docs/table1.md, "What the policies do").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pandas as pd
from results_file import write_result

import envs
from envs.common.actions import parse_action
from hgpo_rllib.evaluation.output_dir import EVALUATION_RECORD, TRANSCRIPTS_DIR
from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.run_records import read_record


def read_games(directory: Path) -> list[dict[str, Any]]:
    """Every game of an evaluation output's transcripts, in task order."""
    files = sorted((directory / TRANSCRIPTS_DIR).glob("*.jsonl"))
    if not files:
        raise SystemExit(f"transcript_actions: {directory} has no transcripts: evaluate with --transcripts")
    games = [json.loads(line) for file in files for line in file.read_text().splitlines()]
    return sorted(games, key=lambda game: game["task_seed"])


def step_limit(directory: Path) -> int:
    """The step limit of the env the evaluation played (its settings record names env and config)."""
    record = read_record(directory / EVALUATION_RECORD)
    env = envs.make_env(record["env"], record["env_config"])
    try:
        return env.unwrapped.max_steps
    finally:
        env.close()


def commands(game: dict[str, Any]) -> list[str]:
    """The command of each turn's answer, as the env parsed it."""
    return [parse_action(turn["answer"]).command for turn in game["turns"]]


def repeats(game: dict[str, Any]) -> int:
    """Turns whose command an earlier turn of the game already executed."""
    taken = commands(game)
    return sum(command in taken[:turn] for turn, command in enumerate(taken))


def summary_row(name: str, games: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    turns = sum(len(game["turns"]) for game in games)
    repeated = sum(repeats(game) for game in games)
    return {
        "policy": name,
        "games": len(games),
        "won": sum(game["won"] for game in games),
        "turns": turns,
        "repeated turns": repeated,
        "repeated %": round(100 * repeated / turns, 1),
        f"games at the {limit}-step limit": sum(len(game["turns"]) >= limit for game in games),
    }


def game_line(game: dict[str, Any]) -> str:
    """``task seed, won/lost, score: command | command | ...`` (the first, the search, left out)."""
    outcome = "won" if game["won"] else "lost"
    return f"- {game['task_seed']} {outcome}, score {game['score']:.2f}: {' | '.join(commands(game)[1:])}"


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument(
        "outputs", nargs="+", metavar="NAME=DIR", help="a policy's name and its evaluation output"
    )
    parser.add_argument("--name", required=True, help="the result file: docs/results/<NAME>.md")
    args = parser.parse_args()
    named = [output.rpartition("=") for output in args.outputs]  # names such as "HGPO K=2" hold "="
    if any(not sep or not name for name, sep, _ in named):
        parser.error("each output is NAME=DIR")
    rows, lines = [], []
    for name, _, directory in named:
        games = read_games(Path(directory))
        rows.append(summary_row(name, games, step_limit(Path(directory))))
        lines += [f"\n### {name}\n", *map(game_line, games)]
    table = pd.DataFrame(rows).to_markdown(index=False)
    print(table)
    write_result(args.name, "How the policies act (evaluation transcripts)", table + "\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
