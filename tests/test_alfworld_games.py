"""ALFWorld game generation without the engine: splits, determinism, ALFRED's placement rules."""

from __future__ import annotations

import random

import alfworld.gen.constants as alfred
import pytest

from envs.alfworld import games, logic, scenes
from envs.alfworld.games import OOD_FLOOR_PLANS, SPLITS, generate_game, goal_pool, split_of
from envs.alfworld.logic import TASK_TYPES


def test_all_120_floor_plans_load_with_unique_locations() -> None:
    numbers = scenes.floor_plan_numbers()
    assert len(numbers) == 120
    for number in numbers:
        plan = scenes.load_floor_plan(number)
        assert 1 <= len(plan.receptacles) <= scenes.MAX_RECEPTACLES
        assert len({r.location for r in plan.receptacles}) == len(plan.receptacles)
        assert len({r.id for r in plan.receptacles}) == len(plan.receptacles)
        assert plan.receptacle_types <= scenes.STATIC_RECEPTACLE_TYPES


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_every_split_has_every_task_type(split: str, task_type: str) -> None:
    assert goal_pool(split, task_type)


def test_splits_are_disjoint_by_floor_plan_and_goal() -> None:
    members = {split: set() for split in SPLITS}
    for split in SPLITS:
        for task_type in TASK_TYPES:
            for number, goals in goal_pool(split, task_type):
                assert (number in OOD_FLOOR_PLANS) == (split == "eval_out_of_distribution")
                members[split] |= {(number, g) for g in goals}
                assert all(split_of(number, g) == split for g in goals)
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1 :]:
            assert not members[a] & members[b], (a, b)
    in_dist = {n for n, _ in members["eval_in_distribution"]}
    assert in_dist <= {n for n, _ in members["train"]}  # new tasks in the training floor plans


def test_generated_tasks_of_different_splits_are_disjoint() -> None:
    tasks = {split: {generate_game(split, seed).task_id for seed in range(40)} for split in SPLITS}
    assert all(len(ids) == 40 for ids in tasks.values())
    assert not tasks["train"] & tasks["eval_in_distribution"]
    assert not tasks["train"] & tasks["eval_out_of_distribution"]
    assert not tasks["eval_in_distribution"] & tasks["eval_out_of_distribution"]


def test_generation_is_deterministic_and_seed_dependent() -> None:
    a, b = generate_game("train", 7), generate_game("train", 7)
    assert a == b and a.data == b.data
    assert generate_game("train", 8).task_id != a.task_id
    assert generate_game("train", 7, attempt=1).task_id != a.task_id
    assert generate_game("eval_in_distribution", 7).task_id != a.task_id
    only_heat = generate_game("train", 7, task_types=["pick_heat_then_place_in_recep"])
    assert only_heat.goal.task_type == "pick_heat_then_place_in_recep"


def test_unknown_split_and_task_type_are_rejected() -> None:
    with pytest.raises(ValueError, match="split"):
        generate_game("valid_seen", 0)
    with pytest.raises(ValueError, match="task_types"):
        generate_game("train", 0, task_types=["pick_and_place_with_movable_recep"])


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_placements_follow_alfred_rules(task_type: str) -> None:
    for seed in range(15):
        rng = random.Random(seed)
        number, goals = rng.choice(goal_pool("train", task_type))
        goal = rng.choice(goals)
        plan = scenes.load_floor_plan(number)
        placed = games._place_objects(rng, plan, goal)
        targets = [p for p in placed if p.object_type == goal.object_type]
        assert len(targets) >= (2 if task_type == "pick_two_obj_and_place" else 1)
        forbidden = {goal.parent_type, games.TOOLS.get(task_type, "")} - {""}
        assert all(p.receptacle.type not in forbidden for p in targets)
        for p in placed:
            if p.object_type in scenes.LAMP_TYPES:
                assert p.receptacle.type in scenes.LAMP_RECEPTACLE_TYPES
            else:
                assert p.object_type in alfred.VAL_RECEPTACLE_OBJECTS[p.receptacle.type]
        assert len(placed) - len(plan.lamp_types) <= games.MAX_OBJECTS
        if task_type == "look_at_obj_in_light":
            assert goal.toggle_type in {p.object_type for p in placed}


def test_generated_game_text_uses_the_json_2_1_1_grammar() -> None:
    game = generate_game("train", 3)
    assert "put {o} in/on {r}" in game.data["grammar"]
    assert "You arrive at {lend.name}." in game.data["grammar"]
    assert "move {o} to {r}" not in game.data["grammar"]
    assert "action help" not in game.data["grammar"] and "(:action help" not in game.data["pddl_domain"]
    assert logic.TASK_PLACEHOLDER not in game.data["grammar"]
    assert "(:goal" in game.data["pddl_problem"] and "#" not in game.data["pddl_problem"]
    assert set(logic.TASK_CATEGORY.values()) == {"Pick", "Look", "Clean", "Heat", "Cool", "Pick2"}
