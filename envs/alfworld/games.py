"""ALFWorld games generated from a seed, without the downloadable ALFWorld data.

A game is an ALFRED floor plan (:mod:`envs.alfworld.scenes`), a goal from alfworld's goal library
(``alfworld.gen.goal_library``: the PDDL goal and the task-text templates of the six task types)
and a random placement of the scene's objects in its receptacles, following ALFRED's constraints
(``alfworld.gen.constants``: which receptacle holds what, which objects can be heated, cooled,
cleaned or toggled, which room types each task type uses; a target never starts where the goal
wants it, nor in the sink/microwave/fridge that its task uses). The environment then checks that
the planner solves the game, and asks for the next attempt of the same game if not (same task type).

Splits, with ALFWorld's sizes and semantics (:data:`TASK_TYPE_COUNTS`):

* ``train``: the 116 training floor plans, any of their goals; task types drawn with the weights
  of ALFWorld's 3,553 training games; unbounded (every seed is a new game).
* ``eval_in_distribution`` (ALFWorld's ``valid_seen``): a fixed list of 140 games in the training
  floor plans, goals of the kinds training poses, new object placements and start poses (their own
  random stream), with valid_seen's task-type counts.
* ``eval_out_of_distribution`` (``valid_unseen``): a fixed list of 134 games in the four held-out
  floor plans :data:`OOD_FLOOR_PLANS` (never used elsewhere), with valid_unseen's task-type counts.

A fixed list is in a seeded order that mixes task types; game ``i`` of it is ``i mod n``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import alfworld.gen.constants as alfred
from alfworld.gen.goal_library import gdict

from envs.alfworld.logic import DEFAULT_GRAMMAR, TASK_TYPES, check_grammar, grammar_with_task, pddl_domain
from envs.alfworld.scenes import (
    LAMP_RECEPTACLE_TYPES,
    FloorPlan,
    Receptacle,
    floor_plan_numbers,
    load_floor_plan,
    pose_location,
)

SPLITS: tuple[str, ...] = ("train", "eval_in_distribution", "eval_out_of_distribution")
#: ALFRED's valid_unseen floor plans (the scenes of ALFWorld's eval_out_of_distribution games).
OOD_FLOOR_PLANS = frozenset({10, 219, 308, 424})
#: Games per task type (in TASK_TYPES order: Pick, Look, Clean, Heat, Cool, Pick2) of ALFWorld's
#: train (3,553), valid_seen (140) and valid_unseen (134) games. Train's are sampling weights; the
#: evaluation splits are fixed lists of exactly these counts.
TASK_TYPE_COUNTS: dict[str, tuple[int, ...]] = {
    "train": (790, 308, 650, 459, 533, 813),
    "eval_in_distribution": (35, 13, 27, 16, 25, 24),
    "eval_out_of_distribution": (24, 18, 31, 23, 21, 17),
}
FIXED_SPLITS = ("eval_in_distribution", "eval_out_of_distribution")
#: Receptacles ALFRED never uses as the target of a pick-two task.
PICK_TWO_EXCLUDED = frozenset({"CoffeeMachine", "ToiletPaperHanger", "HandTowelHolder"})
#: Bump when generation changes: the same seed then gives a different game.
GENERATOR_VERSION = 2
#: ALFRED's scene randomisation: up to 3 instances of each object type, up to 4 of the target.
MAX_INSTANCES = alfred.MAX_NUM_OF_OBJ_INSTANCES
MAX_TARGETS = alfred.PICKUP_REPEAT_MAX

#: Receptacle type a task uses as a tool (its target must not start there, nor be placed there).
TOOLS = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
_REQUIRED_PROPERTY = {
    "pick_clean_then_place_in_recep": "Cleanable",
    "pick_heat_then_place_in_recep": "Heatable",
    "pick_cool_then_place_in_recep": "Coolable",
}
#: Type names the domain's actions refer to, so every problem must declare them.
_DOMAIN_OTYPES = ("ButterKnife", "Knife")
_DOMAIN_RTYPES = ("Fridge", "Microwave", "SinkBasin")
_PROPERTIES = {p.lower(): p for p in ("Cleanable", "Heatable", "Coolable", "Sliceable")}


@dataclass(frozen=True)
class Goal:
    task_type: str
    object_type: str  #: ALFRED type of the object to move/examine, e.g. ``Apple``
    parent_type: str = ""  #: receptacle type it must end in ("" for look_at_obj_in_light)
    toggle_type: str = ""  #: lamp to turn on (look_at_obj_in_light only)

    @property
    def name(self) -> str:
        """ALFRED's task folder name minus the floor plan: ``pick_and_place_simple-Apple-None-Fridge``."""
        return f"{self.task_type}-{self.object_type}-None-{self.parent_type or self.toggle_type}"


@dataclass(frozen=True)
class Game:
    """One playable game: the ``game.tw-pddl`` content and what identifies the task."""

    data: dict[str, Any] = field(compare=False, repr=False)  #: pddl_domain, grammar, pddl_problem
    goal: Goal
    task_id: str  #: unique per task (floor plan + goal + initial placement), stable across processes
    floor_plan: int | None = None


def _holds(receptacle_type: str, object_type: str) -> bool:
    return object_type in alfred.VAL_RECEPTACLE_OBJECTS.get(receptacle_type, ())


def _has(kind: str, object_type: str) -> bool:
    """Whether objects of this type are Cleanable, Heatable, Coolable, Toggleable or Sliceable."""
    return object_type in alfred.VAL_ACTION_OBJECTS[kind]


def _goals(plan: FloorPlan, task_type: str) -> list[Goal]:
    """Every goal ALFRED could pose in this floor plan for this task type."""
    if plan.room not in alfred.GOALS_VALID[task_type]:
        return []
    tool = TOOLS.get(task_type, "")
    parents = plan.receptacle_types - {tool}
    if task_type == "pick_two_obj_and_place":
        parents -= PICK_TWO_EXCLUDED
    if tool and tool not in plan.receptacle_types:
        return []
    prop = _REQUIRED_PROPERTY.get(task_type)
    objects = sorted(t for t in plan.object_types if prop is None or _has(prop, t))
    if task_type == "look_at_obj_in_light":
        lamps = sorted(plan.lamp_types) if plan.receptacle_types & LAMP_RECEPTACLE_TYPES else []
        return [
            Goal(task_type, o, toggle_type=lamp)
            for o in objects
            if any(_holds(r, o) for r in plan.receptacle_types)
            for lamp in lamps
        ]
    return [
        Goal(task_type, o, parent_type=parent)
        for o in objects
        for parent in sorted(parents)
        if _holds(parent, o) and any(_holds(r, o) for r in plan.receptacle_types - {tool, parent})
    ]


def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    return split


@cache
def goal_pool(split: str, task_type: str) -> tuple[tuple[int, tuple[Goal, ...]], ...]:
    """(floor plan, its goals) pairs of a split for one task type, floor plans with no goal left out.

    ``train`` and ``eval_in_distribution`` share the training floor plans and their goals (ALFWorld's
    valid_seen poses goal kinds seen in training, with new placements)."""
    ood = _check_split(split) == "eval_out_of_distribution"
    pool = []
    for number in floor_plan_numbers():
        if (number in OOD_FLOOR_PLANS) != ood:
            continue
        goals = tuple(_goals(load_floor_plan(number), task_type))
        if goals:
            pool.append((number, goals))
    return tuple(pool)


@cache
def fixed_task_types(split: str) -> tuple[str, ...]:
    """The task type of each game of a fixed evaluation list, in its seeded (mixed) order."""
    if _check_split(split) not in FIXED_SPLITS:
        raise ValueError(f"{split!r} is not a fixed list; those are {FIXED_SPLITS}")
    order = [t for t, n in zip(TASK_TYPES, TASK_TYPE_COUNTS[split], strict=True) for _ in range(n)]
    random.Random(f"hgpo-alfworld/{split}/order").shuffle(order)
    return tuple(order)


@cache
def fixed_game_indices(split: str, task_types: tuple[str, ...] = TASK_TYPES) -> tuple[int, ...]:
    """Positions in the fixed list of ``split`` of its games of the given task types."""
    return tuple(i for i, t in enumerate(fixed_task_types(split)) if t in task_types)


def num_games(split: str, task_types: Sequence[str] = TASK_TYPES) -> int | None:
    """Games in a fixed evaluation list (restricted to ``task_types``); None for unbounded ``train``."""
    if _check_split(split) not in FIXED_SPLITS:
        return None
    return len(fixed_game_indices(split, tuple(sorted(task_types))))


def _pddl_name(alfred_id: str) -> str:
    """ALFRED ids in PDDL-safe form, as ALFRED writes them (``|`` -> ``_bar_`` and so on)."""
    for char, word in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        alfred_id = alfred_id.replace(char, word)
    return alfred_id


@dataclass(frozen=True)
class _Placement:
    object_id: str
    object_type: str
    receptacle: Receptacle


def _object_id(rng: random.Random, object_type: str, receptacle: Receptacle, taken: set[str]) -> str:
    x, y, z = (float(v) for v in receptacle.id.split("|")[1:4])
    while True:
        dx, dz = rng.uniform(-0.4, 0.4), rng.uniform(-0.4, 0.4)
        oid = f"{object_type}|{x + dx:+06.2f}|{y + 0.05:+06.2f}|{z + dz:+06.2f}"
        if oid not in taken:
            taken.add(oid)
            return oid


def _place_objects(rng: random.Random, plan: FloorPlan, goal: Goal) -> list[_Placement]:
    """Targets first (never where the goal or the task's tool would put them), then distractors."""
    avoid = {goal.parent_type, TOOLS.get(goal.task_type, "")} - {""}
    n_target = rng.randint(2 if goal.task_type == "pick_two_obj_and_place" else 1, MAX_TARGETS)
    others = sorted(plan.object_types - {goal.object_type})
    rng.shuffle(others)
    wanted = [(goal.object_type, n_target)] + [(t, rng.randint(1, MAX_INSTANCES)) for t in others]
    placements: list[_Placement] = []
    taken: set[str] = set()
    lamp_holders = [r for r in plan.receptacles if r.type in LAMP_RECEPTACLE_TYPES]
    for lamp in sorted(plan.lamp_types) if lamp_holders else ():
        r = rng.choice(lamp_holders)
        placements.append(_Placement(_object_id(rng, lamp, r, taken), lamp, r))
    for otype, count in wanted:
        banned = avoid if otype == goal.object_type else set()
        holders = [r for r in plan.receptacles if _holds(r.type, otype) and r.type not in banned]
        for _ in range(count if holders else 0):
            r = rng.choice(holders)
            placements.append(_Placement(_object_id(rng, otype, r, taken), otype, r))
    return placements


def _problem(name: str, plan: FloorPlan, goal: Goal, placements: Sequence[_Placement], start: str) -> str:
    n = _pddl_name
    otypes = sorted({p.object_type for p in placements} | set(_DOMAIN_OTYPES))
    rtypes = sorted(plan.receptacle_types | set(_DOMAIN_RTYPES))
    locations = sorted({r.location for r in plan.receptacles} | {start})
    objects = (
        ["agent1 - agent"]
        + [f"{n(p.object_id)} - object" for p in placements]
        + [f"{n(r.id)} - receptacle" for r in plan.receptacles]
        + [f"{n(loc)} - location" for loc in locations]
        + [f"{t}Type - otype" for t in otypes]
        + [f"{t}Type - rtype" for t in rtypes]
    )
    init = [f"(atLocation agent1 {n(start)})"]
    for r in plan.receptacles:
        init.append(f"(receptacleType {n(r.id)} {r.type}Type)")
        init.append(f"(receptacleAtLocation {n(r.id)} {n(r.location)})")
        if r.type in alfred.OPENABLE_CLASS_SET:
            init.append(f"(openable {n(r.id)})")
    init += [f"(canContain {rt}Type {ot}Type)" for rt in rtypes for ot in otypes if _holds(rt, ot)]
    for p in placements:
        oid = n(p.object_id)
        init += [
            f"(objectType {oid} {p.object_type}Type)",
            f"(inReceptacle {oid} {n(p.receptacle.id)})",
            f"(objectAtLocation {oid} {n(p.receptacle.location)})",
        ]
        if _has("Toggleable", p.object_type):
            init.append(f"(toggleable {oid})")
        else:
            init.append(f"(pickupable {oid})")
        init += [f"({pred} {oid})" for pred, kind in _PROPERTIES.items() if _has(kind, p.object_type)]
    pddl_goal = gdict[goal.task_type]["pddl"].format(
        obj=goal.object_type, recep=goal.parent_type, toggle=goal.toggle_type, mrecep=""
    )
    sep = "\n        "
    return (
        f"(define (problem {name})\n    (:domain alfred)\n    (:objects{sep}{sep.join(objects)}\n    )\n"
        f"    (:init{sep}{sep.join(init)}\n    )\n{pddl_goal.replace('#', '-')}"
    )


def task_description(rng: random.Random, goal: Goal) -> str:
    """The task text, from one of alfworld's two templates for the task type."""
    template = rng.choice(gdict[goal.task_type]["templates"])
    obj, recep, toggle = goal.object_type.lower(), goal.parent_type.lower(), goal.toggle_type.lower()
    return template.format(obj=obj, recep=recep, toggle=toggle, mrecep="")


def _task_type(split: str, seed: int, task_types: Sequence[str]) -> tuple[str, str]:
    """(task type, the key of the game's random stream): a fixed list's entry ``seed mod n``, or
    for ``train`` a draw weighted like ALFWorld's training games."""
    if split in FIXED_SPLITS:
        indices = fixed_game_indices(split, tuple(sorted(task_types)))
        index = indices[seed % len(indices)]
        return fixed_task_types(split)[index], f"{split}/{index}"
    types = sorted(task_types)
    weights = [TASK_TYPE_COUNTS[split][TASK_TYPES.index(t)] for t in types]
    rng = random.Random(f"hgpo-alfworld/v{GENERATOR_VERSION}/{split}/{seed}/task_type")
    return rng.choices(types, weights)[0], f"{split}/{seed}"


def generate_game(
    split: str,
    seed: int,
    task_types: Sequence[str] = TASK_TYPES,
    attempt: int = 0,
    grammar: str = DEFAULT_GRAMMAR,
) -> Game:
    """The game of ``(split, seed)``; ``attempt`` > 0 gives the fallbacks used if it is unsolvable
    (same task type; for a fixed list, same entry)."""
    _check_split(split)
    check_grammar(grammar)
    unknown = set(task_types) - set(TASK_TYPES)
    if isinstance(task_types, str) or not task_types or unknown:
        raise ValueError(f"task_types must be a non-empty subset of {TASK_TYPES}, got {list(task_types)}")
    task_type, key = _task_type(split, seed, task_types)
    rng = random.Random(f"hgpo-alfworld/v{GENERATOR_VERSION}/{key}/{attempt}")
    pool = goal_pool(split, task_type)
    if not pool:
        raise ValueError(f"split {split!r} has no floor plan for task type {task_type!r}")
    number, goals = rng.choice(pool)
    goal = rng.choice(goals)
    plan = load_floor_plan(number)
    placements = _place_objects(rng, plan, goal)
    taken = {r.location for r in plan.receptacles}
    while True:
        x, z = rng.choice(plan.grid)
        start = pose_location(x, z, 90 * rng.randrange(4), 30)
        if start not in taken:
            break
    task_id = hashlib.sha256(
        repr((number, goal.name, sorted((p.object_id, p.receptacle.id) for p in placements), start)).encode()
    ).hexdigest()[:16]
    data = {
        "pddl_domain": pddl_domain(grammar),
        "grammar": grammar_with_task(task_description(rng, goal), grammar),
        "pddl_problem": _problem(f"hgpo_{task_id}", plan, goal, placements, start),
    }
    return Game(data=data, goal=goal, task_id=task_id, floor_plan=number)
