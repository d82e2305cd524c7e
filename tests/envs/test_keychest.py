"""KeyChest: determinism, the memory-only aliasing, difficulty, garbage input, prompt and corpus."""

from __future__ import annotations

import copy
import random
import re
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import envs  # noqa: F401 - registers hgpo/KeyChest-v0
from envs.common.actions import normalize_command
from envs.common.prompts import PromptContext
from envs.keychest.env import (
    MAX_OPTIMAL_STEPS,
    NOTHING_HAPPENS,
    OPEN_CHEST,
    ROOM_NAMES,
    TAKE_KEY,
    TASK,
    TRAP_TEXT,
    WIN_REWARD,
    KeyChestEnv,
)
from envs.keychest.prompts import TAG_INSTRUCTION, render_prompt, tokenizer_corpus

SEEDS = range(200)
Policy = Callable[[gym.Env, dict[str, Any]], str]


def _make(**kwargs: Any) -> gym.Env:
    return gym.make("hgpo/KeyChest-v0", **kwargs)


def _play(env: gym.Env, seed: int | None, policy: Policy) -> list[dict[str, Any]]:
    """Run one episode; return one record per step (observation acted on, action, outcome)."""
    obs, info = env.reset(seed=seed)
    steps = []
    done = False
    while not done:
        action = policy(env, info)
        next_obs, reward, terminated, truncated, next_info = env.step(action)
        steps.append(
            {
                "obs": obs,
                "admissible": info["admissible_actions"],
                "action": action,
                "reward": reward,
                "terminated": terminated,
                "won": next_info["won"],
            }
        )
        obs, info, done = next_obs, next_info, terminated or truncated
    return steps


def _expert(env: gym.Env, info: dict[str, Any]) -> str:
    return env.unwrapped.expert_plan()[0]


def _random_policy(rng: random.Random) -> Policy:
    return lambda env, info: rng.choice(info["admissible_actions"])


# ------------------------------------------------------------------------------------------ reset


def test_reset_with_a_seed_is_deterministic_and_layouts_vary() -> None:
    env_a, env_b = _make(), _make()
    firsts = set()
    for seed in SEEDS:
        obs_a, info_a = env_a.reset(seed=seed)
        obs_b, info_b = env_b.reset(seed=seed)
        assert (obs_a, info_a) == (obs_b, info_b)
        assert env_a.unwrapped.layout == env_b.unwrapped.layout
        firsts.add(obs_a)
    assert len(firsts) > 50


def test_reset_without_a_seed_draws_from_np_random() -> None:
    def layouts(env: gym.Env) -> list[Any]:
        env.reset(seed=7)
        drawn = []
        for _ in range(20):
            env.reset()
            drawn.append(env.unwrapped.layout)
        return drawn

    first, second = layouts(_make()), layouts(_make())
    assert first == second
    assert len({repr(layout) for layout in first}) > 10


def test_first_observation_is_a_room_and_info_has_the_contract_keys() -> None:
    obs, info = _make().reset(seed=3)
    assert re.fullmatch(r"You are in the \w+\. Exits: [a-z, ]+\.( You see a (chest|key)\.)?", obs)
    assert set(info) == {
        "task",
        "task_type",
        "admissible_actions",
        "is_action_valid",
        "won",
        "command",
        "step",
    }
    assert (info["task"], info["task_type"], info["command"], info["won"]) == (TASK, "keychest", "", False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_rooms": 1}, r"num_rooms must be an int in \[2, \d+\], got 1"),
        ({"num_rooms": len(ROOM_NAMES) + 1}, rf"num_rooms must be .*, got {len(ROOM_NAMES) + 1}"),
        ({"num_rooms": True}, r"num_rooms must be .*, got True"),
        ({"num_layouts": 0}, r"num_layouts must be None or an int >= 1, got 0"),
        ({"max_steps": 0}, r"max_steps must be a positive int, got 0"),
    ],
)
def test_bad_options_are_rejected(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KeyChestEnv(**kwargs)


def test_reset_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="no reset options"):
        KeyChestEnv().reset(options={"layout": 1})


def test_gymnasium_env_checker_passes() -> None:
    """Only two warnings do not apply: gym.make's OrderEnforcing wrapper, and no fps for text."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(_make(render_mode="ansi"))
    unexpected = [
        str(w.message)
        for w in caught
        if "different from the unwrapped" not in str(w.message) and "render fps" not in str(w.message)
    ]
    assert unexpected == []


# ------------------------------------------------------------------------------------ expert plan


@pytest.mark.parametrize("num_rooms", range(2, len(ROOM_NAMES) + 1))
def test_expert_plan_wins_within_six_steps(num_rooms: int) -> None:
    env = _make(num_rooms=num_rooms)
    for seed in SEEDS:
        steps = _play(env, seed, _expert)
        assert 4 <= len(steps) <= MAX_OPTIMAL_STEPS
        assert all(step["action"] in step["admissible"] for step in steps)
        assert [step["reward"] for step in steps] == [0.0] * (len(steps) - 1) + [WIN_REWARD]
        assert steps[-1]["won"] and steps[-1]["terminated"]


def _can_win_within(env: gym.Env, admissible: list[str], depth: int) -> bool:
    """Exhaustive search over admissible command sequences, independent of ``expert_plan``."""
    for command in admissible:
        trial = copy.deepcopy(env)
        _, _, terminated, truncated, info = trial.step(command)
        if info["won"] or (
            not (terminated or truncated)
            and depth > 1
            and _can_win_within(trial, info["admissible_actions"], depth - 1)
        ):
            return True
    return False


def test_expert_plan_is_optimal() -> None:
    env = KeyChestEnv()
    for seed in range(25):
        _, info = env.reset(seed=seed)
        plan = env.expert_plan()
        assert not _can_win_within(env, info["admissible_actions"], len(plan) - 1)


def test_expert_plan_wins_from_any_reachable_state() -> None:
    rng = random.Random(0)
    env = KeyChestEnv(max_steps=30)
    for seed in SEEDS:
        _, info = env.reset(seed=seed)
        for _ in range(rng.randrange(6)):
            *_, terminated, _, info = env.step(rng.choice([*info["admissible_actions"], "dance"]))
            if terminated:
                assert env.expert_plan() == []
                break
        else:
            for command in env.expert_plan():
                *_, info = env.step(command)
            assert info["won"]


# -------------------------------------------------------------------------------- the memory probe


def test_chest_room_reads_the_same_without_and_with_the_key() -> None:
    """Each solution meets the same chest-room observation twice; only the history tells which."""
    env = _make()
    for seed in SEEDS:
        steps = _play(env, seed, _expert)
        final = steps[-1]
        assert final["action"] == OPEN_CHEST
        earlier = [step for step in steps[:-1] if step["obs"] == final["obs"]]
        assert earlier, "the chest room is passed without the key first"
        assert earlier[0]["admissible"] == final["admissible"]
        assert earlier[0]["action"].startswith("go ")
        take = [step["action"] for step in steps].index(TAKE_KEY)
        assert steps.index(earlier[0]) < take


def test_opening_the_chest_without_the_key_loses() -> None:
    env = _make()
    for seed in range(50):
        _, info = env.reset(seed=seed)
        while OPEN_CHEST not in info["admissible_actions"]:
            *_, info = env.step(env.unwrapped.expert_plan()[0])
        obs, reward, terminated, truncated, info = env.step(OPEN_CHEST)
        assert (obs, reward, terminated, truncated, info["won"]) == (TRAP_TEXT, 0.0, True, False, False)
        assert info["admissible_actions"] == []


def test_carrying_the_key_shows_nowhere() -> None:
    rng = random.Random(1)
    env = KeyChestEnv(max_steps=40)
    seen_pickups = 0
    for seed in range(300):
        steps = _play(env, seed, _random_policy(rng))
        actions = [step["action"] for step in steps]
        if TAKE_KEY in actions:
            seen_pickups += 1
            for step in steps[actions.index(TAKE_KEY) + 1 :]:
                assert "key" not in step["obs"] and TAKE_KEY not in step["admissible"]
    assert seen_pickups > 30


def test_random_policy_rarely_wins() -> None:
    rng = random.Random(0)
    env = KeyChestEnv()
    env.reset(seed=0)
    wins = sum(_play(env, None, _random_policy(rng))[-1]["won"] for _ in range(2000))
    assert 0.01 <= wins / 2000 <= 0.10


def test_episode_truncates_at_max_steps() -> None:
    env = _make(max_steps=10)
    env.reset(seed=0)
    for step in range(1, 11):
        _, _, terminated, truncated, info = env.step("wait")
        assert (terminated, truncated, info["step"]) == (False, step == 10, step)
    with pytest.raises(RuntimeError):
        env.step("wait")


# ----------------------------------------------------------------------------------- garbage input

GARBAGE = [
    "",
    " ",
    "x" * 100_000,
    "<action>",
    "<action>take key",
    "</action><action>",
    "\x00\x01\x1b[2J",
    "\u202e\ufeff\u200b",
    "🔑 🗝",
    "открыть сундук",
    "取钥匙",
    "take key" * 3,
    "go up",
    "inventory",
    "<think></think><action>inventory</action>",
]


def _assert_unchanged(env: gym.Env, admissible: list[str], action: str) -> None:
    plan, layout = env.unwrapped.expert_plan(), env.unwrapped.layout
    obs, reward, terminated, truncated, info = env.step(action)
    assert (obs, reward, terminated, truncated) == (NOTHING_HAPPENS, 0.0, False, False)
    assert info["admissible_actions"] == admissible
    assert env.unwrapped.expert_plan() == plan and env.unwrapped.layout is layout


@pytest.mark.parametrize("require_tags", [False, True])
@pytest.mark.parametrize("action", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_changes_nothing(action: str, require_tags: bool) -> None:
    env = _make(require_tags=require_tags)
    env.reset(seed=11)
    *_, info = env.step("<think></think><action>" + env.unwrapped.expert_plan()[0] + "</action>")
    _assert_unchanged(env, info["admissible_actions"], action)


@settings(max_examples=200, deadline=None)
@given(st.text(), st.integers(0, 30))
def test_any_inadmissible_text_changes_nothing(action: str, seed: int) -> None:
    env = KeyChestEnv()
    _, info = env.reset(seed=seed)
    if normalize_command(action) not in info["admissible_actions"]:
        _assert_unchanged(env, info["admissible_actions"], action)


def test_require_tags_needs_the_reference_format() -> None:
    env = _make(require_tags=True)
    _, info = env.reset(seed=5)
    command = env.unwrapped.expert_plan()[0]
    _, _, _, _, info = env.step(command)
    assert not info["is_action_valid"] and info["command"] == command
    steps = _play(env, 5, lambda env, info: f"<think>go</think><action>{_expert(env, info)}</action>")
    assert steps[-1]["won"]


# -------------------------------------------------------------------------------- prompt and corpus


def _prompts(history_length: int, require_tags: bool, seeds: range) -> list[str]:
    """Render the prompt of every step of expert and random episodes, as the trainer would."""
    rng = random.Random(2)
    env = KeyChestEnv(max_steps=20)
    prompts = []
    for seed in seeds:
        for policy in (_expert, _random_policy(rng)):
            history: list[tuple[str, str]] = []
            obs, info = env.reset(seed=seed)
            done = False
            while not done:
                prompts.append(
                    render_prompt(
                        PromptContext(
                            TASK, history, obs, info["admissible_actions"], len(history), history_length
                        ),
                        require_tags=require_tags,
                    )
                )
                action = policy(env, info)
                history.append((obs, action))
                obs, _, terminated, truncated, info = env.step(action)
                done = terminated or truncated
    return prompts


def test_prompt_layout() -> None:
    history = [
        ("You are in the hall. Exits: east.", "go east"),
        ("Nothing happens.", "dance"),
        ("You are in the attic. Exits: west.", "go west"),
    ]
    prompt = render_prompt(
        PromptContext(TASK, history, "You are in the hall. Exits: east.", ["go east"], 3, 2)
    )
    assert prompt == (
        f"Task: {TASK}\nHistory:\n"
        "[Observation 2: 'Nothing happens.', Action 2: 'dance']\n"
        "[Observation 3: 'You are in the attic. Exits: west.', Action 3: 'go west']\n"
        "Now: You are in the hall. Exits: east.\nActions: go east"
    )
    assert (
        render_prompt(PromptContext(TASK, history, "o", ["a", "b"], 3, 0))
        == f"Task: {TASK}\nNow: o\nActions: a | b"
    )
    assert render_prompt(PromptContext(TASK, [], "o", ["a"], 0, 2), require_tags=True).endswith(
        TAG_INSTRUCTION
    )


def test_prompt_tells_the_aliased_chest_room_apart_only_through_history() -> None:
    env = _make()
    steps = _play(env, 4, _expert)
    history = [(step["obs"], step["action"]) for step in steps]
    first = next(i for i, step in enumerate(steps) if step["obs"] == steps[-1]["obs"])
    last = len(steps) - 1

    def prompt(i: int, k: int) -> str:
        return render_prompt(PromptContext(TASK, history[:i], steps[i]["obs"], steps[i]["admissible"], i, k))

    assert prompt(first, 0) == prompt(last, 0)
    assert prompt(first, 2) != prompt(last, 2)


@pytest.mark.parametrize("history_length", [2, 3])
def test_prompts_are_short(history_length: int) -> None:
    words = [len(prompt.split()) for prompt in _prompts(history_length, False, range(30))]
    assert sum(words) / len(words) < 80 and max(words) < 100


@pytest.mark.parametrize("pattern", [r"\S+", r"\w+|[^\w\s]"], ids=["whitespace", "word-punct"])
def test_tokenizer_corpus_covers_every_prompt(pattern: str) -> None:
    vocab = {token for text in tokenizer_corpus() for token in re.findall(pattern, text)}
    for history_length in (0, 3):
        for require_tags in (False, True):
            for prompt in _prompts(history_length, require_tags, range(20)):
                assert set(re.findall(pattern, prompt)) <= vocab, prompt


def test_num_layouts_draws_maps_from_a_fixed_pool() -> None:
    env = gym.make("hgpo/KeyChest-v0", num_layouts=3)
    maps = set()
    for seed in range(60):
        env.reset(seed=seed)
        maps.add(repr(env.unwrapped.layout))
    assert len(maps) == 3
    other = gym.make("hgpo/KeyChest-v0", num_layouts=3)
    other.reset(seed=7)
    env.reset(seed=7)
    assert repr(other.unwrapped.layout) == repr(env.unwrapped.layout)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="num_layouts"):
            gym.make("hgpo/KeyChest-v0", num_layouts=bad)
