"""The ALFWorld searcher (envs.alfworld.searcher), the demonstrator of the ALFWorld warm start: it reads
every task template, searches in a fixed order, decides from the prompt's window alone and wins real
games of every task type."""

from __future__ import annotations

import pytest

import envs
from envs.alfworld.logic import TASK_TYPES
from envs.alfworld.searcher import Searcher, Task, View, decide, parse_task
from hgpo_rllib.warm_start.format import response_text

ROOM = (
    "You are in the middle of a room. Looking quickly around you, you see a countertop 1, a drawer 3, "
    "a fridge 1, and a garbagecan 1.\n\nYour task is to: put some apple on fridge."
)
GO = ["go to countertop 1", "go to drawer 3", "go to fridge 1", "go to garbagecan 1"]


def view(task: str, window: list[tuple[str, str]], observation: str, admissible: list[str]) -> View:
    return View(parse_task(task), window, observation, admissible)


@pytest.mark.parametrize(
    ("text", "task"),
    [
        ("put some apple on fridge.", ("pick_and_place_simple", "apple", "fridge")),
        ("look at mug under the desklamp.", ("look_at_obj_in_light", "mug", "desklamp")),
        ("examine the keychain with the floorlamp.", ("look_at_obj_in_light", "keychain", "floorlamp")),
        ("clean some soapbar and put it in toilet.", ("pick_clean_then_place_in_recep", "soapbar", "toilet")),
        ("put a hot egg in countertop.", ("pick_heat_then_place_in_recep", "egg", "countertop")),
        ("put a cool tomato in diningtable.", ("pick_cool_then_place_in_recep", "tomato", "diningtable")),
        ("find two pen and put them in desk.", ("pick_two_obj_and_place", "pen", "desk")),
    ],
)
def test_the_searcher_reads_every_task_template(text: str, task: tuple[str, str, str]) -> None:
    assert parse_task(text) == Task(*task)
    with pytest.raises(ValueError, match="not an ALFWorld task"):
        parse_task("juggle three apples.")


def test_the_searcher_searches_in_a_fixed_order_from_where_it_stands() -> None:
    task = "put some apple on fridge."
    thought, command = decide(view(task, [], ROOM, GO))
    assert command == "go to countertop 1" and thought == "I need a apple. I start with the countertop 1."
    # Nothing here: the next receptacle that can hold an apple (a drawer cannot), by type then number.
    here = "You arrive at countertop 1. On the countertop 1, you see a knife 1."
    admissible = [a for a in GO if a != "go to countertop 1"] + ["take knife 1 from countertop 1"]
    thought, command = decide(view(task, [(ROOM, "go to countertop 1")], here, admissible))
    assert command == "go to fridge 1"
    assert "There is none at the countertop 1. Next I check the fridge 1" in thought
    # A closed receptacle is opened; an apple there is taken, with the wanted type said first.
    closed = [a for a in GO if a != "go to fridge 1"] + ["open fridge 1"]
    window = [(ROOM, "go to countertop 1"), (here, "go to fridge 1")]
    arrived = "You arrive at fridge 1. The fridge 1 is closed."
    assert decide(view(task, window, arrived, closed))[1] == "open fridge 1"
    opened = [a for a in GO if a != "go to fridge 1"] + ["close fridge 1", "take apple 2 from fridge 1"]
    window = [(here, "go to fridge 1"), (arrived, "open fridge 1")]
    thought, command = decide(view(task, window, "You open the fridge 1. In it, you see a apple 2.", opened))
    assert command == "take apple 2 from fridge 1"
    assert thought.startswith("I need a apple. The apple 2 is here")
    # After the last candidate the search starts over, and a failed command changes nothing.
    window = [(ROOM, "go to garbagecan 1"), ("You arrive at garbagecan 1.", "go to cabinet 9")]
    admissible = [a for a in GO if a != "go to garbagecan 1"]
    assert decide(view(task, window, "Nothing happens.", admissible))[1] == "go to countertop 1"


def test_the_searcher_decides_from_the_window_alone() -> None:
    """Two episodes whose last K steps read the same get the same decision (nothing older is used)."""
    searcher = Searcher(history_length=2)
    tail_observations = [
        "You arrive at garbagecan 1. On the garbagecan 1, you see nothing.",
        "You arrive at countertop 1. On the countertop 1, you see a knife 1.",
    ]
    tail_commands = ["go to garbagecan 1", "go to countertop 1"]
    admissible = [a for a in GO if a != "go to countertop 1"]
    decisions = {
        searcher.act(None, [ROOM, *older, *tail_observations], [*older_commands, *tail_commands], admissible)
        for older, older_commands in [
            ([], []),
            (["You arrive at drawer 3. The drawer 3 is closed."], ["go to drawer 3"]),
        ]
    }
    assert decisions == {
        ("I need a apple. There is none at the countertop 1. Next I check the fridge 1.", "go to fridge 1")
    }


def test_the_searcher_carries_treats_and_puts_at_the_first_target() -> None:
    task = "put a hot apple in countertop."
    took = "You pick up the apple 2 from the fridge 1."
    elsewhere = ["go to countertop 1", "go to countertop 2", "go to microwave 1", "examine apple 2"]
    window = [("You open the fridge 1.", "take apple 2 from fridge 1")]
    assert decide(view(task, window, took, elsewhere)) == (
        "I have the apple 2. I heat it at the microwave 1.",
        "go to microwave 1",
    )
    at_tool = ["go to countertop 1", "go to countertop 2", "examine apple 2", "heat apple 2 with microwave 1"]
    window = [("You open the fridge 1.", "take apple 2 from fridge 1"), (took, "go to microwave 1")]
    assert decide(view(task, window, "You arrive at microwave 1.", at_tool))[1] == (
        "heat apple 2 with microwave 1"
    )
    window = [(took, "go to microwave 1"), ("You arrive at microwave 1.", "heat apple 2 with microwave 1")]
    thought, command = decide(view(task, window, "You heat the apple 2 using the microwave 1.", elsewhere))
    assert command == "go to countertop 1" and thought.startswith("The apple 2 is hot")
    # At the target the move goes there, not to another receptacle that shares the spot.
    at_home = [
        "go to countertop 2",
        "go to microwave 1",
        "examine apple 2",
        "move apple 2 to garbagecan 1",
        "move apple 2 to countertop 1",
    ]
    window = [
        ("You arrive at microwave 1.", "heat apple 2 with microwave 1"),
        ("You heat the apple 2 using the microwave 1.", "go to countertop 1"),
    ]
    assert decide(view(task, window, "You arrive at countertop 1.", at_home))[1] == (
        "move apple 2 to countertop 1"
    )


def test_the_searcher_knows_what_it_carries_where_it_cannot_put_it() -> None:
    """No receptacle here takes a baseball bat, so only ``examine`` shows that the agent holds one."""
    task = "examine the baseballbat with the desklamp."
    admissible = ["examine baseballbat 1", "examine desk 1", "go to bed 1", "go to desk 2", "look"]
    window = [("You arrive at bed 1.", "take baseballbat 1 from bed 1"), ("You pick up ...", "go to desk 1")]
    thought, command = decide(view(task, window, "You arrive at desk 1.", admissible))
    assert command == "go to desk 2" and thought.startswith("I have the baseballbat 1 and need a desklamp")
    lamp_here = [*admissible, "use desklamp 1"]
    assert decide(view(task, window, "You arrive at desk 1.", lamp_here))[1] == "use desklamp 1"


def test_at_a_target_that_does_not_take_what_is_held_the_searcher_puts_it_down_or_moves_on() -> None:
    """DAgger labels states of the model's play: there it may carry an object of another type, which
    the target may not take (the engine then offers no put there)."""
    task = "put some apple on fridge."
    window = [
        ("You arrive at drawer 3.", "take baseballbat 1 from drawer 3"),
        ("You pick up ...", "go to fridge 1"),
    ]
    no_put = [a for a in GO if a != "go to fridge 1"] + ["examine baseballbat 1", "close fridge 1"]
    thought, command = decide(view(task, window, "You arrive at fridge 1.", no_put))
    assert command == "go to garbagecan 1"  # the next receptacle after the fridge 1, in search order
    assert thought == "The fridge 1 does not take the baseballbat 1, so I take it to the garbagecan 1."
    shared_spot = [*no_put, "move baseballbat 1 to countertop 1"]
    assert decide(view(task, window, "You arrive at fridge 1.", shared_spot))[1] == (
        "move baseballbat 1 to countertop 1"
    )


def test_the_searcher_finds_where_it_stands_when_its_window_names_no_place() -> None:
    """Off course (only failed commands in the window), the engine's ``examine R`` says where it stands."""
    task = "put some apple on fridge."
    window = [("Nothing happens.", "fly to the moon"), ("Nothing happens.", "take apple 9 from sinkbasin 1")]
    admissible = [a for a in GO if a != "go to countertop 1"] + ["examine countertop 1", "inventory"]
    here = view(task, window, "Nothing happens.", admissible)
    assert here.location() == "countertop 1"
    assert here.places() == ["countertop 1", "drawer 3", "fridge 1", "garbagecan 1"]
    assert decide(here)[1] == "go to fridge 1"


def test_a_pick_two_searcher_leaves_the_first_object_where_it_put_it() -> None:
    task = "find two apple and put them in fridge."
    window = [("You arrive at fridge 1.", "move apple 1 to fridge 1")]
    admissible = [a for a in GO if a != "go to fridge 1"] + ["take apple 1 from fridge 1"]
    put = "You move the apple 1 to the fridge 1."
    assert decide(view(task, window, put, admissible))[1] == "go to garbagecan 1"


@pytest.mark.slow  # 20-30 s of real games; the searcher's single decisions are tested above
def test_the_searcher_wins_real_games_of_every_task_type() -> None:
    env = envs.make_env("alfworld", {"split": "eval_out_of_distribution", "max_steps": 50})
    won: dict[str, list[bool]] = {}
    for seed in range(16):
        searcher = Searcher(history_length=2)
        observation, info = env.reset(seed=seed)
        observations, commands = [observation], []
        done = False
        while not done:
            thought, command = searcher.act(env, observations, commands, info["admissible_actions"])
            observation, _, terminated, truncated, info = env.step(response_text(thought, command))
            observations.append(observation)
            commands.append(info["command"])
            done = terminated or truncated
        won.setdefault(info["task_type"], []).append(info["won"] and info["is_action_valid"])
    assert set(won) == set(TASK_TYPES) and all(all(w) for w in won.values())
