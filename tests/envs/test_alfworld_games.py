"""ALFWorld game generation without the engine: splits, determinism, ALFRED's placement rules."""

from __future__ import annotations

import json
import random
from collections import Counter

import alfworld.gen.constants as alfred
import pytest

from envs.alfworld import games, logic, scenes
from envs.alfworld.games import OOD_FLOOR_PLANS, SPLITS, generate_game, goal_pool
from envs.alfworld.logic import TASK_TYPES
from envs.alfworld.real_rooms import REAL_RECEPTACLE_COUNTS


def test_all_120_floor_plans_load() -> None:
    numbers = scenes.floor_plan_numbers()
    assert len(numbers) == 120
    for number in numbers:
        plan = scenes.load_floor_plan(number)
        assert len({r.id for r in plan.receptacles}) == len(plan.receptacles) >= 1
        assert plan.receptacle_types <= scenes.STATIC_RECEPTACLE_TYPES
        layout = json.loads((scenes._LAYOUTS / f"FloorPlan{number}-openable.json").read_text())
        assert set(layout) <= {r.id for r in plan.receptacles}  # the layout's receptacles all stay
        counts = Counter(r.type for r in plan.receptacles)
        if number in REAL_RECEPTACLE_COUNTS:
            assert counts == REAL_RECEPTACLE_COUNTS[number]
        else:  # each count is one that real rooms of the same type have (or the layout's own, if more)
            samples = scenes.real_count_samples(plan.room)
            for rtype, count in counts.items():
                layout_count = sum(scenes._receptacle_type(rid) == rtype for rid in layout)
                assert count in samples.get(rtype, (1,)) or count == layout_count


def test_real_room_sizes_of_the_held_out_floor_plans() -> None:
    """Floor plan 10 has 25 receptacles in the real game (6 cabinets, 4 stove burners), 308 has 18."""
    plan = scenes.load_floor_plan(10)
    types = Counter(r.type for r in plan.receptacles)
    assert len(plan.receptacles) == 25 and types["Cabinet"] == 6 and types["StoveBurner"] == 4
    assert len(scenes.load_floor_plan(308).receptacles) == 18
    # receptacles sharing an interaction pose share a location, as in the real games
    assert len({r.location for r in plan.receptacles}) < len(plan.receptacles)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_every_split_has_every_task_type(split: str, task_type: str) -> None:
    """Each pool holds distinct floor plans, each with at least one goal, every goal of this task type
    and posed as ALFRED poses it (a lamp for look tasks, a target receptacle otherwise)."""
    pool = goal_pool(split, task_type)
    numbers = [number for number, _ in pool]
    assert numbers and len(set(numbers)) == len(numbers) and set(numbers) <= set(scenes.floor_plan_numbers())
    assert all(goals and len(set(goals)) == len(goals) for _, goals in pool)
    goals = [goal for _, plan_goals in pool for goal in plan_goals]
    assert len(goals) >= 20  # the smallest pool (look_at_obj_in_light out of distribution) has 26
    assert {goal.task_type for goal in goals} == {task_type}
    if task_type == "look_at_obj_in_light":
        assert all(goal.toggle_type and not goal.parent_type for goal in goals)
    else:
        assert all(goal.parent_type and not goal.toggle_type for goal in goals)


def test_held_out_floor_plans_are_only_in_the_out_of_distribution_split() -> None:
    for split in SPLITS:
        for task_type in TASK_TYPES:
            numbers = {number for number, _ in goal_pool(split, task_type)}
            assert (numbers <= OOD_FLOOR_PLANS) == (split == "eval_out_of_distribution")
            assert numbers & OOD_FLOOR_PLANS or split != "eval_out_of_distribution"
    # valid_seen semantics: the same floor plans and goal kinds as training
    for task_type in TASK_TYPES:
        assert goal_pool("eval_in_distribution", task_type) == goal_pool("train", task_type)


@pytest.mark.parametrize(
    ("split", "counts"),
    [
        ("eval_in_distribution", (35, 13, 27, 16, 25, 24)),
        ("eval_out_of_distribution", (24, 18, 31, 23, 21, 17)),
    ],
)
def test_fixed_lists_have_alfworlds_task_type_counts(split: str, counts: tuple[int, ...]) -> None:
    n = sum(counts)
    assert games.num_games(split) == n and games.num_games("train") is None
    types = [generate_game(split, seed).goal.task_type for seed in range(n)]
    assert Counter(types) == dict(zip(TASK_TYPES, counts, strict=True))
    assert generate_game(split, n + 5).task_id == generate_game(split, 5).task_id  # game i mod n
    assert len({generate_game(split, seed).task_id for seed in range(n)}) == n
    for start in range(n - 31):  # any 32 consecutive games mix task types
        assert len(set(types[start : start + 32])) >= 3
    # a task-type filter keeps the same games, fewer of them
    heat = "pick_heat_then_place_in_recep"
    only_heat = [generate_game(split, s, [heat]).task_id for s in range(counts[3])]
    assert only_heat == [generate_game(split, s).task_id for s in range(n) if types[s] == heat]
    assert games.num_games(split, [heat]) == counts[3]


def test_training_task_types_are_weighted_like_alfworlds_train_set() -> None:
    types = Counter(games._task_type("train", seed, TASK_TYPES)[0] for seed in range(20_000))
    expected = dict(zip(TASK_TYPES, games.TASK_TYPE_COUNTS["train"], strict=True))
    total = sum(expected.values())
    for task_type, count in expected.items():
        assert abs(types[task_type] / 20_000 - count / total) < 0.015, task_type


def test_in_distribution_games_are_new_placements_of_training_goals() -> None:
    train = {generate_game("train", seed).task_id for seed in range(60)}
    held_out = [generate_game("eval_in_distribution", seed) for seed in range(40)]
    assert not train & {g.task_id for g in held_out}
    for game in held_out:
        assert game.floor_plan not in OOD_FLOOR_PLANS
        assert game.goal in dict(goal_pool("train", game.goal.task_type))[game.floor_plan]
    ood = [generate_game("eval_out_of_distribution", seed) for seed in range(40)]
    assert {g.floor_plan for g in ood} <= OOD_FLOOR_PLANS


def test_pick_two_goals_avoid_the_receptacles_alfred_excludes() -> None:
    for split in SPLITS:
        for _, goals in goal_pool(split, "pick_two_obj_and_place"):
            assert not {g.parent_type for g in goals} & games.PICK_TWO_EXCLUDED
    pick_goals = [g for _, goals in goal_pool("train", "pick_and_place_simple") for g in goals]
    assert any(g.parent_type in games.PICK_TWO_EXCLUDED for g in pick_goals)


def test_generation_is_deterministic_and_seed_dependent() -> None:
    a, b = generate_game("train", 7), generate_game("train", 7)
    assert a == b and a.data == b.data
    assert generate_game("train", 8).task_id != a.task_id
    assert generate_game("train", 7, attempt=1).task_id != a.task_id
    assert generate_game("train", 7, attempt=1).goal.task_type == a.goal.task_type
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
        assert (2 if task_type == "pick_two_obj_and_place" else 1) <= len(targets) <= games.MAX_TARGETS
        forbidden = {goal.parent_type, games.TOOLS.get(task_type, "")} - {""}
        assert all(p.receptacle.type not in forbidden for p in targets)
        for p in placed:
            if p.object_type in scenes.LAMP_TYPES:
                assert p.receptacle.type in scenes.LAMP_RECEPTACLE_TYPES
            else:
                assert p.object_type in alfred.VAL_RECEPTACLE_OBJECTS[p.receptacle.type]
        others = Counter(p.object_type for p in placed if p.object_type != goal.object_type)
        assert max(others.values(), default=0) <= games.MAX_INSTANCES
        if task_type == "look_at_obj_in_light":
            assert goal.toggle_type in {p.object_type for p in placed}


def test_generated_games_use_the_0_4_2_grammar_by_default() -> None:
    game = generate_game("train", 3)
    assert "move {o} to {r}" in game.data["grammar"] and "put {o} in/on {r}" not in game.data["grammar"]
    assert "You arrive at {r.name}." in game.data["grammar"] and "action help" in game.data["grammar"]
    assert "(:action help" in game.data["pddl_domain"]
    assert logic.TASK_PLACEHOLDER not in game.data["grammar"]
    assert "(:goal" in game.data["pddl_problem"] and "#" not in game.data["pddl_problem"]
    assert set(logic.TASK_CATEGORY.values()) == {"Pick", "Look", "Clean", "Heat", "Cool", "Pick2"}


def test_the_json_2_1_1_grammar_stays_an_option() -> None:
    game = generate_game("train", 3, grammar="2.1.1")
    assert game.task_id == generate_game("train", 3).task_id  # same task, other words
    assert "put {o} in/on {r}" in game.data["grammar"]
    assert "You arrive at {lend.name}." in game.data["grammar"]
    assert "move {o} to {r}" not in game.data["grammar"]
    assert "action help" not in game.data["grammar"] and "(:action help" not in game.data["pddl_domain"]
    with pytest.raises(ValueError, match="grammar"):
        generate_game("train", 3, grammar="0.4")
