"""Playing the standard ALFWorld game files (a small game tree the tests build from generated games)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

from envs.alfworld.dataset import _alfworld_config, list_games
from envs.alfworld.engine import AlfredEngine
from envs.alfworld.env import ALFWorldEnv
from envs.alfworld.games import Game, generate_game
from envs.alfworld.logic import TASK_TYPES
from envs.alfworld.prompts import render_prompt
from envs.common.prompts import PromptContext

HEAT = "pick_heat_then_place_in_recep"


def write_game(root: Path, folder: str, game: Game, *, solvable: bool = True, tag: str = "") -> Path:
    """Write ``game`` as alfworld-download lays a game out: <split>/<task folder>/<trial>/..."""
    task_folder = f"{game.goal.name}{tag}-{game.floor_plan}"
    trial = root / "json_2.1.1" / folder / task_folder / "trial_T20190909_000000_000000"
    trial.mkdir(parents=True)
    (trial / "game.tw-pddl").write_text(json.dumps({**game.data, "solvable": solvable, "walkthrough": None}))
    goal = game.goal
    params = {
        "object_target": goal.object_type,
        "parent_target": goal.parent_type,
        "toggle_target": goal.toggle_type,
        "mrecep_target": "",
        "object_sliced": False,
    }
    traj = {"task_type": goal.task_type, "pddl_params": params, "scene": {"scene_num": game.floor_plan}}
    (trial / "traj_data.json").write_text(json.dumps(traj))
    return trial


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("alfworld_data")
    write_game(root, "train", generate_game("train", 0, ["pick_and_place_simple"]))
    write_game(root, "train", generate_game("train", 1, [HEAT]))
    write_game(root, "train", generate_game("train", 2, [HEAT]), solvable=False)  # filtered out
    write_game(root, "train", generate_game("train", 3, [HEAT]), tag="-movable")  # filtered out
    write_game(root, "valid_seen", generate_game("eval_in_distribution", 0))
    write_game(root, "valid_unseen", generate_game("eval_out_of_distribution", 0))
    return root


def first_observation(game: Game) -> str:
    engine = AlfredEngine()
    engine.load(game.data)
    return engine.reset().feedback


def test_data_dir_games_are_played_with_standard_split_names(data_dir: Path) -> None:
    env = ALFWorldEnv(split="train", data_dir=data_dir)
    assert env.source == "data" and env.num_games == 2
    obs0, info0 = env.reset(seed=0)
    obs1, info1 = env.reset(seed=1)
    assert env.reset(seed=2)[0] == obs0  # seed s plays game s mod n
    names = {info0["task_id"].split("/")[1], info1["task_id"].split("/")[1]}
    assert all("movable" not in n for n in names) and {info0["task_type"], info1["task_type"]} == {
        "pick_and_place_simple",
        HEAT,
    }
    for split, folder, generated in [
        ("eval_in_distribution", "valid_seen", generate_game("eval_in_distribution", 0)),
        ("eval_out_of_distribution", "valid_unseen", generate_game("eval_out_of_distribution", 0)),
    ]:
        obs, info = ALFWorldEnv(split=split, data_dir=data_dir).reset(seed=5)
        assert info["task_id"].startswith(f"{folder}/") and obs == first_observation(generated)


def test_a_split_is_alfworlds_own_listing_in_a_fixed_order_that_mixes_task_types(tmp_path: Path) -> None:
    kinds = TASK_TYPES[:3]
    for kind in kinds:
        for seed in range(4):
            game = generate_game("eval_out_of_distribution", seed, [kind])
            write_game(tmp_path, "valid_unseen", game, tag=f"{seed}")
    write_game(tmp_path, "valid_unseen", generate_game("eval_out_of_distribution", 0, [HEAT]), solvable=False)
    games = list_games(tmp_path, "eval_out_of_distribution", TASK_TYPES)
    loader = AlfredTWEnv(_alfworld_config(tmp_path, TASK_TYPES), train_eval="eval_out_of_distribution")
    assert sorted(games) == sorted(Path(p).parent for p in loader.game_files) and len(games) == 12
    assert games == list_games(tmp_path, "eval_out_of_distribution", list(reversed(TASK_TYPES)))
    assert list(games) != sorted(games)  # alfworld's order groups a task type together; ours mixes
    assert all(len({g.parent.name.split("-")[0] for g in games[i : i + 4]}) >= 2 for i in range(9))
    env = ALFWorldEnv(split="eval_out_of_distribution", data_dir=tmp_path)
    assert env.num_games == 12
    for seed in (0, 13):
        folder = games[seed % 12]
        assert env.reset(seed=seed)[1]["task_id"].endswith(f"{folder.parent.name}/{folder.name}")


def test_data_game_is_won_by_the_expert(data_dir: Path) -> None:
    env = ALFWorldEnv(split="train", data_dir=data_dir, task_types=[HEAT])
    assert len(env._data_games) == 1
    _, info = env.reset(seed=0)
    for command in env.expert_plan():
        assert command in info["admissible_actions"]
        _, reward, terminated, _, info = env.step(f"<think>go</think><action>{command}</action>")
    assert terminated and info["won"] and reward == 10.0 and info["task_category"] == "Heat"


def test_alfworld_data_env_var_selects_the_data(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALFWORLD_DATA", str(data_dir))
    assert ALFWorldEnv(split="eval_out_of_distribution").source == "data"
    assert ALFWorldEnv(split="eval_out_of_distribution", source="generated").source == "generated"
    monkeypatch.setenv("ALFWORLD_DATA", str(data_dir / "json_2.1.1"))  # no json_2.1.1 inside
    assert ALFWorldEnv(split="train").source == "generated"


def test_missing_data_gives_a_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match="json_2.1.1/valid_unseen.*alfworld-download"):
        ALFWorldEnv(split="eval_out_of_distribution", data_dir=tmp_path)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="game.tw-pddl"):
        ALFWorldEnv(split="train", source="data")


def test_older_json_2_1_1_game_files_are_played_as_is(tmp_path: Path) -> None:
    """Game files in the json_2.1.1 grammar (``put X in/on Y``, no ``help``) keep their own grammar."""
    game = generate_game("train", 4, ["pick_and_place_simple"], grammar="2.1.1")
    write_game(tmp_path, "train", game)
    env = ALFWorldEnv(split="train", data_dir=tmp_path)
    _, info = env.reset(seed=0)
    assert "'help'" not in render_prompt(
        PromptContext(info["task"], [], "obs", info["admissible_actions"], 0, 2)
    )
    plan = env.expert_plan()
    assert plan[-1].startswith("put ") and "in/on" in plan[-1]
    for command in plan:
        _, reward, terminated, _, info = env.step(f"<think>go</think><action>{command}</action>")
    assert terminated and reward == 10.0
