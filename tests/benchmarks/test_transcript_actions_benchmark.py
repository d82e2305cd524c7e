"""Checks of ``benchmarks/transcript_actions.py``: what it counts in evaluation transcripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import benchmark_module

bench = benchmark_module("transcript_actions")


def answer(command: str) -> str:
    return f"<think>t</think><action>{command}</action>"


def transcripts(directory: Path, games: list[dict]) -> Path:
    """An evaluation output of KeyChest at 3 steps holding ``games`` as its transcripts."""
    (directory / "transcripts").mkdir(parents=True)
    (directory / "evaluation.json").write_text(
        json.dumps({"env": "keychest", "env_config": {"max_steps": 3}})
    )
    lines = "".join(json.dumps(game) + "\n" for game in games)
    (directory / "transcripts" / "checkpoint-seed1.jsonl").write_text(lines)
    return directory


def test_a_repeat_is_a_command_the_game_already_executed(tmp_path: Path) -> None:
    """Game 7 takes "look" twice (the second in other case and spacing: the env's command is the same)
    and reaches the 3-step limit; game 5 wins in one turn. 1 of 4 turns repeats."""
    looped = [answer("look"), answer("go north"), answer(" LOOK ")]
    games = [
        {"task_seed": 7, "won": False, "score": 0.0, "turns": [{"answer": a} for a in looped]},
        {"task_seed": 5, "won": True, "score": 1.0, "turns": [{"answer": answer("open chest")}]},
    ]
    directory = transcripts(tmp_path, games)
    read = bench.read_games(directory)
    assert [game["task_seed"] for game in read] == [5, 7]
    assert bench.summary_row("p", read, bench.step_limit(directory)) == {
        "policy": "p",
        "games": 2,
        "won": 1,
        "turns": 4,
        "repeated turns": 1,
        "repeated %": 25.0,
        "games at the 3-step limit": 1,
    }
    assert bench.game_line(read[1]) == "- 7 lost, score 0.00: go north | look"


def test_an_output_without_transcripts_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="has no transcripts: evaluate with --transcripts"):
        bench.read_games(tmp_path)
