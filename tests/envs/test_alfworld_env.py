"""The ALFWorld environment on generated games: expert wins, determinism, robustness, contract."""

from __future__ import annotations

import random
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from textworld.envs.pddl import textgen

import envs  # noqa: F401 - registers hgpo/ALFWorld-v0
from envs.alfworld import engine
from envs.alfworld.env import NOTHING_HAPPENS, WIN_REWARD, ALFWorldEnv
from envs.alfworld.logic import TASK_CATEGORY, TASK_TYPES


def tagged(command: str) -> str:
    return f"<think>The plan says so.</think><action>{command}</action>"


def make(**kwargs) -> ALFWorldEnv:
    return ALFWorldEnv(**{"split": "train", "max_steps": 50, "source": "generated", **kwargs})


def play_expert(env: ALFWorldEnv, seed: int) -> dict:
    """Follow expert_plan() through step(); check every command is admissible; return the last info."""
    _, info = env.reset(seed=seed)
    assert not info["won"]
    plan = env.expert_plan()
    assert plan, "a fresh game needs at least one command"
    for i, command in enumerate(plan):
        assert command in info["admissible_actions"], (command, info["admissible_actions"])
        if i == 1:  # replanning mid-episode gives the rest of a plan from the current state
            assert env.expert_plan()[0] in info["admissible_actions"]
        _, reward, terminated, truncated, info = env.step(tagged(command))
        assert info["is_action_valid"] and info["is_action_admissible"] and not truncated
        assert terminated == (i == len(plan) - 1)
        assert reward == (WIN_REWARD if terminated else 0.0)
    assert info["won"] and env.expert_plan() == []
    return info


def run_expert_games(task_type: str, seeds: range, split: str = "train") -> set[str]:
    """Win one game per seed with the expert; return the games' task ids."""
    env = make(task_types=[task_type], split=split)
    task_ids = set()
    for seed in seeds:
        info = play_expert(env, seed)
        assert info["task_type"] == task_type and info["task_category"] == TASK_CATEGORY[task_type]
        task_ids.add(info["task_id"])
    return task_ids


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_expert_plan_wins_every_task_type(task_type: str) -> None:
    run_expert_games(task_type, range(2))
    run_expert_games(task_type, range(1), split="eval_out_of_distribution")


def test_expert_transcript_speaks_the_0_4_2_grammar() -> None:
    env = make(task_types=["pick_and_place_simple"])
    _, info = env.reset(seed=4)
    assert "help" not in info["admissible_actions"]
    plan = env.expert_plan()
    assert plan[-1].startswith("move ") and " to " in plan[-1] and not any("in/on" in c for c in plan)
    for command in plan:
        observation, _, _, _, info = env.step(tagged(command))
        if command.startswith("go to "):
            assert observation.startswith(f"You arrive at {command.removeprefix('go to ')}.")
        if command.startswith("take "):  # holding an object: `move` it to a receptacle here
            moves = [a for a in info["admissible_actions"] if a.startswith("move ")]
            assert moves and all(" to " in a for a in moves)
    assert info["won"]


def test_help_is_playable_but_never_listed() -> None:
    env = make()
    _, info = env.reset(seed=1)
    observation, reward, terminated, _, info = env.step(tagged("help"))
    assert "Available commands:" in observation and "move (object) to (receptacle)" in observation
    assert not info["is_action_admissible"] and "help" not in info["admissible_actions"]
    assert reward == 0.0 and not terminated


def test_json_2_1_1_grammar_is_an_option() -> None:
    env = make(grammar="2.1.1", task_types=["pick_and_place_simple"])
    _, info = env.reset(seed=4)
    plan = env.expert_plan()
    assert plan[-1].startswith("put ") and "in/on" in plan[-1]
    observation, *_ = env.step(tagged(plan[0]))
    assert observation.startswith("You arrive at loc ")
    assert env.step(tagged("help"))[0] == NOTHING_HAPPENS
    with pytest.raises(ValueError, match="grammar"):
        make(grammar="2.1.2")


@pytest.mark.slow
@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_expert_plan_wins_ten_games_per_task_type(task_type: str) -> None:
    assert len(run_expert_games(task_type, range(10))) == 10  # ten different games, all won


def test_memoized_text_parsing_plays_exactly_as_textworld(monkeypatch: pytest.MonkeyPatch) -> None:
    def transcript() -> list:
        env = make(task_types=["pick_heat_then_place_in_recep"])
        _, info = env.reset(seed=3)
        rng, steps = random.Random(0), []
        for _ in range(6):
            command = rng.choice(info["admissible_actions"])
            observation, *_, info = env.step(tagged(command))
            steps.append((command, observation, info["admissible_actions"]))
        return steps

    memoized = transcript()
    for name, original in engine.TEXTGEN_PARSERS.items():
        monkeypatch.setattr(textgen, name, original)
    assert transcript() == memoized


def test_gymnasium_make_and_same_seed_gives_same_task() -> None:
    env = gym.make("hgpo/ALFWorld-v0", split="eval_out_of_distribution", max_steps=50, source="generated")
    obs_a, info_a = env.reset(seed=11)
    _, info_b = env.reset(seed=12)
    obs_c, info_c = env.reset(seed=11)
    fresh_obs, fresh_info = make(split="eval_out_of_distribution").reset(seed=11)
    assert obs_a == obs_c == fresh_obs
    assert info_a["task"] == info_c["task"] == fresh_info["task"]
    assert info_a["task_id"] == info_c["task_id"] == fresh_info["task_id"]
    assert info_b["task_id"] != info_a["task_id"]
    assert obs_a.startswith("-= Welcome to TextWorld, ALFRED! =-") and "Your task is to: " in obs_a
    assert obs_a.endswith(info_a["task"]) and info_a["task"].endswith(".")
    assert info_a["admissible_actions"] and all(isinstance(a, str) for a in info_a["admissible_actions"])


def test_reset_without_seed_follows_the_first_seed() -> None:
    def task_ids(first_seed: int) -> list[str]:
        env = make()
        return [env.reset(seed=first_seed)[1]["task_id"]] + [env.reset()[1]["task_id"] for _ in range(3)]

    three = task_ids(3)
    assert task_ids(3) == three  # the same first seed, the same sequence of games
    assert len(set(three)) == 4  # unseeded resets move on to new games
    assert task_ids(4) != three


GARBAGE = [
    "",
    "x" * 100_000,
    "<think>" + "y" * 100_000 + "</think><action>go to nowhere</action>",
    "<action>look</action>",  # no <think>: format-invalid, not executed
    "<think>a</think><action>look",  # broken tag
    "<think>a</think></action>look<action>",
    "\x00\x01\x1b[31m\x7f<think>\x00</think><action>\x00\x07</action>",
    "<think>好</think><action>look</action>",  # CJK: invalid by the reference rule
    "<think>ok</think><action>🙂 go to ☃ 1</action>",  # well-formed, not admissible
    "<think>ok</think><action>" + "take " * 20_000 + "</action>",
    "<think>ok</think><action>open fridge 1; drop table</action>",
]


def test_garbage_actions_never_raise_and_leave_the_state_unchanged() -> None:
    env = make(max_steps=len(GARBAGE) + 20)
    _, info = env.reset(seed=5)
    plan, admissible = env.expert_plan(), info["admissible_actions"]
    for action in GARBAGE:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs == NOTHING_HAPPENS and reward == 0.0 and not terminated and not truncated
        assert not info["is_action_admissible"] and not info["won"]
        assert info["admissible_actions"] == admissible
        assert env.expert_plan() == plan
    assert [env.step(a)[4]["is_action_valid"] for a in GARBAGE[7:]] == [False, True, True, True]
    for command in plan:  # the game is still exactly where it started
        _, reward, terminated, _, info = env.step(tagged(command))
    assert terminated and info["won"] and reward == WIN_REWARD


def test_step_limit_truncates() -> None:
    env = make(max_steps=2)
    env.reset(seed=1)
    assert env.step(tagged("look"))[3] is False
    _, _, terminated, truncated, _ = env.step(tagged("inventory"))
    assert truncated and not terminated
    with pytest.raises(RuntimeError):
        env.step(tagged("look"))


def test_engine_exception_truncates_and_next_reset_rebuilds(monkeypatch: pytest.MonkeyPatch) -> None:
    env = make()
    first_obs, _ = env.reset(seed=2)
    broken = env._engine

    def explode(command: str):
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(broken, "step", explode)
    obs, reward, terminated, truncated, info = env.step(tagged("look"))
    assert truncated and not terminated and reward == 0.0
    assert "engine exploded" in info["env_error"] and info["admissible_actions"] == []
    obs, info = env.reset(seed=2)
    assert env._engine is not broken and obs == first_obs
    assert env.step(tagged(env.expert_plan()[0]))[4]["is_action_admissible"]


def test_gymnasium_env_checker_passes() -> None:
    env = gym.make("hgpo/ALFWorld-v0", split="train", max_steps=5, source="generated", render_mode="ansi")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    # The one check that does not apply: "No render fps was declared". ``render_fps`` paces
    # human/rgb_array rendering (video recorders); a text env renders "ansi" strings only.
    complaints = [str(w.message) for w in caught if "WARN" in str(w.message)]  # gymnasium's logger.warn
    assert [c for c in complaints if "render fps" not in c] == []
    assert env.unwrapped.render() == env.unwrapped._current.text


def test_constructor_validates_arguments() -> None:
    with pytest.raises(ValueError, match="split"):
        make(split="valid_seen")
    with pytest.raises(ValueError, match="source"):
        make(source="download")
    with pytest.raises(ValueError, match="task_types"):
        make(task_types="pick_and_place_simple")
    with pytest.raises(ValueError, match="options"):
        make().reset(seed=0, options={"task_type": "pick_and_place_simple"})
    with pytest.raises(RuntimeError):
        make().expert_plan()
