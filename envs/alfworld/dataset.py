"""The standard ALFWorld game files, as ``alfworld-download`` lays them out, listed by alfworld itself.

``<root>/json_2.1.1/{train,valid_seen,valid_unseen}/<task folder>/<trial>/`` holds ``game.tw-pddl``
(domain, grammar with the task text, problem) and ``traj_data.json`` (task type and targets).
The games of a split are collected by alfworld's own ``AlfredTWEnv.collect_game_files`` (no
movable-receptacle or sliced tasks, the requested task types only, ``"solvable": true``), then
put in a fixed seeded order so that consecutive games mix task types (alfworld lists them in
directory-walk order, where neighbours share a task type).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from alfworld.agents.environment.alfred_tw_env import TASK_TYPES as ALFWORLD_TASK_IDS
from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

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


def _alfworld_config(root: Path, task_types: Sequence[str]) -> dict:
    """The parts of alfworld's ``base_config.yaml`` that ``AlfredTWEnv.collect_game_files`` reads."""
    ids = {name: number for number, name in ALFWORLD_TASK_IDS.items()}
    base = root / GAMES_DIR
    return {
        "env": {"goal_desc_human_anns_prob": 0, "task_types": sorted(ids[t] for t in task_types)},
        "dataset": {
            "data_path": str(base / DATA_SPLITS["train"]),
            "eval_id_data_path": str(base / DATA_SPLITS["eval_in_distribution"]),
            "eval_ood_data_path": str(base / DATA_SPLITS["eval_out_of_distribution"]),
            "num_train_games": -1,
            "num_eval_games": -1,
        },
    }


@cache
def _list_games(root: Path, split: str, task_types: tuple[str, ...]) -> tuple[Path, ...]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        loader = AlfredTWEnv(_alfworld_config(root, task_types), train_eval=split)
    games = sorted(Path(path).parent for path in loader.game_files)
    random.Random(f"hgpo-alfworld/data/{split}").shuffle(games)
    return tuple(games)


def list_games(root: str | os.PathLike[str], split: str, task_types: Sequence[str]) -> tuple[Path, ...]:
    """The playable game folders of ``split`` in their fixed seeded order; raises with the expected
    layout if there are none."""
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
