"""The standard ALFWorld game files, as ``alfworld-download`` lays them out.

``<root>/json_2.1.1/{train,valid_seen,valid_unseen}/<task folder>/<trial>/`` holds ``game.tw-pddl``
(domain, grammar with the task text, problem) and ``traj_data.json`` (task type and targets).
Games are filtered exactly as ``AlfredTWEnv.collect_game_files`` does: no movable-receptacle or
sliced tasks, the requested task types only, and ``"solvable": true`` in the game file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from envs.alfworld.games import Game, Goal

#: Our split names -> ALFWorld's folders.
DATA_SPLITS = {
    "train": "train",
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
}
GAMES_DIR = "json_2.1.1"


def has_game_files(root: str | os.PathLike[str]) -> bool:
    return (Path(root) / GAMES_DIR).is_dir()


@cache
def _list_games(root: Path, split: str, task_types: tuple[str, ...]) -> tuple[Path, ...]:
    base = root / GAMES_DIR / DATA_SPLITS[split]
    games = []
    for traj_path in sorted(base.glob("**/traj_data.json")):
        folder = traj_path.parent
        game_path = folder / "game.tw-pddl"
        name = str(folder.relative_to(base))
        if "movable" in name or "Sliced" in name or not game_path.is_file():
            continue
        if json.loads(traj_path.read_text())["task_type"] not in task_types:
            continue
        if json.loads(game_path.read_text()).get("solvable"):
            games.append(folder)
    return tuple(games)


def list_games(root: str | os.PathLike[str], split: str, task_types: Sequence[str]) -> tuple[Path, ...]:
    """The playable game folders of ``split``, sorted; raises with the expected layout if none."""
    if split not in DATA_SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {tuple(DATA_SPLITS)}")
    root = Path(root).expanduser().resolve()
    games = _list_games(root, split, tuple(sorted(task_types)))
    if not games:
        raise FileNotFoundError(
            f"no playable ALFWorld games for split {split!r} (task types {sorted(task_types)}) under "
            f"{root / GAMES_DIR / DATA_SPLITS[split]}; expected <task folder>/<trial>/game.tw-pddl with "
            f'"solvable": true next to traj_data.json, as written by `alfworld-download` '
            f"(or use the generated games: source='generated')"
        )
    return games


def load_game(folder: Path) -> Game:
    traj = json.loads((folder / "traj_data.json").read_text())
    params = traj["pddl_params"]
    goal = Goal(
        traj["task_type"],
        params["object_target"],
        parent_type=params.get("parent_target") or "",
        toggle_type=params.get("toggle_target") or "",
    )
    task_id = f"{folder.parent.parent.name}/{folder.parent.name}/{folder.name}"
    return Game(
        data=json.loads((folder / "game.tw-pddl").read_text()),
        goal=goal,
        task_id=task_id,
        floor_plan=traj.get("scene", {}).get("scene_num"),
    )
