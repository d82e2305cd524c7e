"""How dense the generated ALFWorld rooms are, next to the real ALFWorld rooms we know.

Run: ``.venv/bin/python benchmarks/alfworld_rooms.py``. Prints a table per room type and writes it to
``docs/results/alfworld_rooms.md``. Receptacles: every floor plan of the room type (a floor plan's
receptacles are fixed). Objects: the objects of generated training games, whose placement is drawn
per game. Real figures: the real rooms of :mod:`envs.alfworld.real_rooms` (receptacles only; object
counts of real games are not in any file available offline).
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from envs.alfworld import games, scenes
from envs.alfworld.real_rooms import REAL_RECEPTACLE_COUNTS
from hgpo_rllib.help_text import doc_summary

ROOMS = ("Kitchen", "LivingRoom", "Bedroom", "Bathroom")
#: Receptacle totals of real floor plans reported without per-type counts.
OTHER_REAL_TOTALS = {25: 25}
OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "alfworld_rooms.md"


def _mean_max(values: list[int]) -> str:
    return f"{statistics.mean(values):.1f} / {max(values)}" if values else "n/a"


def main(n_games: int) -> str:
    receptacles: dict[str, list[int]] = defaultdict(list)
    for number in scenes.floor_plan_numbers():
        plan = scenes.load_floor_plan(number)
        receptacles[plan.room].append(len(plan.receptacles))
    objects: dict[str, list[int]] = defaultdict(list)
    for seed in range(n_games):
        game = games.generate_game("train", seed)
        room = scenes.room_of(game.floor_plan)
        objects[room].append(game.data["pddl_problem"].count(" - object"))
    real: dict[str, list[int]] = defaultdict(list)
    for number, counts in REAL_RECEPTACLE_COUNTS.items():
        real[scenes.room_of(number)].append(sum(counts.values()))
    rows = [
        "| Room type | Receptacles, generated (mean / max over floor plans) | Receptacles, real (mean / max; "
        "rooms known) | Objects per game, generated (mean / max) |",
        "|---|---|---|---|",
    ]
    for room in ROOMS:
        rows.append(
            f"| {room} | {_mean_max(receptacles[room])} | {_mean_max(real[room])} ({len(real[room])}) | "
            f"{_mean_max(objects[room])} |"
        )
    named = []
    for number in (10, 308, 25):
        ours = len(scenes.load_floor_plan(number).receptacles)
        truth = (
            sum(REAL_RECEPTACLE_COUNTS[number].values())
            if number in REAL_RECEPTACLE_COUNTS
            else (OTHER_REAL_TOTALS[number])
        )
        named.append(f"| {number} | {ours} | {truth} |")
    text = "\n".join(
        [
            "# ALFWorld room density: generated vs real",
            "",
            f"`python benchmarks/alfworld_rooms.py --games {n_games}`. Objects: {n_games} generated training "
            "games (all placements of a game; real object counts are not available offline).",
            "",
            *rows,
            "",
            "In every known real room, the layout file's count of each receptacle type is at most the real "
            "count, so the layouts are lower bounds: some kitchens are large (floor plan 9's layout alone "
            "lists 48 receptacles, 28 of them cabinets), which is why the generated kitchen mean exceeds "
            "the mean of the four known real kitchens.",
            "",
            "| Floor plan | Receptacles, generated | Receptacles, real |",
            "|---|---|---|",
            *named,
            "",
        ]
    )
    print(text)
    OUTPUT.write_text(text)
    return text


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--games", type=int, default=400, help="generated training games (object counts)")
    main(parser.parse_args().games)
