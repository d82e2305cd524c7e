"""Tests of the pieces every text env shares: action parsing, history format, spaces, base class, registry."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from helpers import run_python
from hypothesis import given
from hypothesis import strategies as st

import envs
from envs.common.actions import (
    ANSWER_FORMATS,
    MALFORMED_TAIL_CHARS,
    MAX_COMMAND_CHARS,
    PLAN_EXECUTE,
    THINK_ACTION,
    ParsedAction,
    normalize_command,
    parse_action,
    parse_plan_execute,
)
from envs.common.prompts import format_history
from envs.common.spaces import TextSpace
from envs.common.text_env import Observation, TextEnv
from envs.keychest.env import KeyChestEnv

# ---------------------------------------------------------------------------------------- parse_action

# Text with the characters that matter to the parser: tags, CJK, control characters, any unicode.
_TAGS = st.sampled_from(["<think>", "</think>", "<action>", "</action>", "<ACTION>", "中", "\x00", "\n"])
_ANY_TEXT = st.one_of(
    st.text(),
    st.lists(st.one_of(_TAGS, st.text(max_size=8)), max_size=12).map("".join),
    st.builds(lambda unit, n: unit * n, st.text(min_size=1, max_size=3), st.integers(1, 50_000)),
)


@given(_ANY_TEXT, st.booleans())
def test_parse_action_never_raises_and_bounds_the_command(output: str, require_tags: bool) -> None:
    parsed = parse_action(output, require_tags=require_tags)
    assert isinstance(parsed.command, str) and isinstance(parsed.is_valid, bool)
    assert len(parsed.command) <= MAX_COMMAND_CHARS
    assert normalize_command(parsed.command) == parsed.command  # already normalised
    assert not re.search(r"[\x00-\x1f\x7f]", parsed.command)
    if require_tags and parsed.is_valid:
        assert "<think>" in output.lower() and "</action>" in output.lower()


@given(_ANY_TEXT)
def test_parse_action_without_tags_takes_the_whole_output(output: str) -> None:
    parsed = parse_action(output, require_tags=False)
    if "<action>" not in output.lower():
        assert parsed.command == normalize_command(output)
        malformed = re.search(r"[\u4e00-\u9fff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", output)
        assert parsed.is_valid == (malformed is None and len(output.strip()) <= MAX_COMMAND_CHARS)


@pytest.mark.parametrize(
    ("output", "require_tags", "command", "is_valid"),
    [
        ("<think>k</think><action>Take  Key</action>", True, "take key", True),
        ("<think>k</think>\n<ACTION> go\tnorth </ACTION>", True, "go north", True),
        ("<action>take key</action>", True, "take key", False),  # no <think> block
        ("<think>钥匙</think><action>take key</action>", True, "take key", False),  # CJK
        ("take key", True, "take key", False),
        ("take key", False, "take key", True),
        ("<action>open chest</action> and more", False, "open chest", True),
        (
            "</action><think></think><action>go east</action>",
            True,
            "go east",
            True,
        ),  # first </action> after <action>
        ("", False, "", True),
    ],
)
def test_parse_action_examples(output: str, require_tags: bool, command: str, is_valid: bool) -> None:
    assert parse_action(output, require_tags=require_tags) == ParsedAction(command, is_valid)


def test_parse_action_keeps_the_tail_of_a_malformed_output() -> None:
    output = "I think I should " + "really " * 20 + "<action>take key"
    parsed = parse_action(output)
    assert not parsed.is_valid
    assert parsed.command == normalize_command(output.lower()[-MALFORMED_TAIL_CHARS:])


@pytest.mark.parametrize(
    ("output", "require_tags", "expected"),
    [
        (None, True, ParsedAction("", False)),
        (None, False, ParsedAction("", True)),
        (42, False, ParsedAction("42", True)),
        (42, True, ParsedAction("42", False)),  # no tags: the malformed tail, not executed
        (b"take key", False, ParsedAction("b'take key'", True)),  # str() of the bytes, as any object
    ],
)
def test_parse_action_accepts_non_strings(output: Any, require_tags: bool, expected: ParsedAction) -> None:
    assert parse_action(output, require_tags=require_tags) == expected


# -------------------------------------------------------------------------------------- format_history


def _records(n: int) -> list[tuple[str, str]]:
    return [(f"obs{i}", f"act{i}") for i in range(1, n + 1)]


def test_format_history_shows_the_last_k_with_absolute_numbers() -> None:
    text, shown = format_history(_records(5), 2)
    assert shown == 2
    assert text == "[Observation 4: 'obs4', Action 4: 'act4']\n[Observation 5: 'obs5', Action 5: 'act5']"


@given(st.integers(0, 30), st.integers(0, 40))
def test_format_history_numbering(n: int, k: int) -> None:
    text, shown = format_history(_records(n), k)
    assert shown == min(n, k)
    lines = text.split("\n") if text else []
    assert len(lines) == shown
    for line, step in zip(lines, range(n - shown + 1, n + 1), strict=True):
        assert line == f"[Observation {step}: 'obs{step}', Action {step}: 'act{step}']"


def test_format_history_rejects_negative_k() -> None:
    with pytest.raises(ValueError, match="history_length"):
        format_history(_records(3), -1)


# ------------------------------------------------------------------------------------------- TextSpace


def test_text_space_accepts_any_string_within_length() -> None:
    space = TextSpace(max_length=5)
    assert "中\x00 é!" in space and "" in space
    assert "123456" not in space and 3 not in space and b"ab" not in space


def test_vector_env_batches_text_as_object_arrays_that_rllib_unbatches_whole() -> None:
    from ray.rllib.utils.spaces.space_utils import unbatch

    vec = gym.vector.SyncVectorEnv([lambda: gym.make("hgpo/KeyChest-v0") for _ in range(3)])
    obs, infos = vec.reset(seed=[1, 2, 3])
    singles = [gym.make("hgpo/KeyChest-v0").reset(seed=s)[0] for s in (1, 2, 3)]
    assert isinstance(obs, np.ndarray) and obs.dtype == object and obs.shape == (3,)
    assert unbatch(obs) == singles
    first_actions = [actions[0] for actions in infos["admissible_actions"]]
    obs, rewards, terminated, truncated, infos = vec.step(["garbage", *first_actions[1:]])
    assert obs.dtype == object and obs.shape == (3,)
    assert unbatch(obs)[0] == "Nothing happens."
    assert all(isinstance(o, str) and len(o) > 1 for o in unbatch(obs))
    assert list(infos["command"]) == ["garbage", *first_actions[1:]]
    vec.close()


# ------------------------------------------------------------------------------------------- TextEnv


class _BrokenEngine(TextEnv):
    """A one-command game whose engine raises on "crash"."""

    def __init__(self) -> None:
        super().__init__(max_steps=5, require_tags=False)
        self.rebuilds = 0

    def _start_episode(self, seed: int | None, options: dict[str, Any]) -> tuple[Observation, str, str]:
        return Observation("start", ["crash"]), "task", "broken"

    def _execute(self, command: str) -> Observation:
        if command == "crash":
            raise RuntimeError("engine died")
        return Observation("ok", ["crash"])

    def _observation_unchanged(self) -> str:
        return "Nothing happens."

    def _rebuild(self) -> None:
        self.rebuilds += 1


def test_engine_error_truncates_blocks_further_steps_and_rebuilds_on_reset() -> None:
    env = _BrokenEngine()
    env.reset()
    assert env.step("fine")[0] == "ok"
    obs, reward, terminated, truncated, info = env.step("crash")
    assert truncated and not terminated and info["env_error"] == "RuntimeError: engine died"
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("fine")
    env.reset()
    assert env.rebuilds == 1
    assert env.step("fine")[0] == "ok"


def test_a_non_text_action_is_a_type_error_naming_its_type() -> None:
    """Issue 25, finding 15: a non-string action was silently turned into text and played."""
    env = KeyChestEnv()
    env.reset(seed=0)
    for action in (None, 42, b"take key", ["take key"]):
        with pytest.raises(TypeError, match=f"a str\\), got {type(action).__name__}"):
            env.step(action)
    assert env.step(np.str_("look"))[4]["step"] == 1  # numpy text is text


@pytest.mark.parametrize(
    ("env", "env_config", "message"),
    [
        (
            "keychest",
            {"num_room": 3},
            r"KeyChestEnv has no setting 'num_room' \(did you mean 'num_rooms'\?\)",
        ),
        ("keychest", {"num_rooms": 1}, r"num_rooms must be an int in \[2, "),
        ("keychest", {"require_tags": "no"}, r"require_tags must be True, False or None"),
        ("keychest", {"max_steps": 0}, r"max_steps must be a positive int"),
        ("alfworld", {"split": "eval"}, r"split must be one of"),
        ("alfworld", {"task_types": "pick"}, r"task_types must be a non-empty subset"),
        ("webshop", {"goal_sampling": "best"}, r"goal_sampling must be one of"),
        ("webshop", {"max_stepz": 3}, r"did you mean 'max_steps'"),
        ("webshop", ["split"], r"env_config must be a dict"),
    ],
)
def test_env_config_is_checked_without_building_the_env(env: str, env_config: Any, message: str) -> None:
    """Issue 25, finding 12: a bad env_config failed inside a trial, 198 lines later. The same check
    runs when the env is built, so the two cannot disagree."""
    with pytest.raises(ValueError, match=message):
        envs.check_env_config(env, env_config)
    if isinstance(env_config, dict):
        with pytest.raises((ValueError, TypeError)):
            envs.make_env(env, env_config)


@pytest.mark.parametrize("env", sorted(envs.ENV_SPECS))
def test_the_default_and_documented_env_configs_pass_the_check(env: str) -> None:
    envs.check_env_config(env, {})
    envs.check_env_config(env, {"max_steps": 7, "require_tags": False, "render_mode": "ansi"})


# ------------------------------------------------------------------------------------------- registry


@pytest.mark.parametrize("spec", list(envs.ENV_SPECS.values()), ids=lambda s: s.name)
def test_every_gym_id_is_registered(spec: envs.registry.EnvSpec) -> None:
    assert gym.spec(spec.gym_id).entry_point == spec.entry_point
    assert envs.get_env_spec(spec.gym_id) is envs.get_env_spec(spec.name) is spec


def test_gym_make_keychest_passes_options() -> None:
    env = gym.make("hgpo/KeyChest-v0", max_steps=7, num_rooms=3)
    assert isinstance(env.unwrapped, KeyChestEnv)
    assert (env.unwrapped.max_steps, env.unwrapped.num_rooms) == (7, 3)


_REGISTRY_CHECK = """
from ray.tune.registry import ENV_CREATOR, _global_registry
import envs
assert all(_global_registry.contains(ENV_CREATOR, n) for n in ("alfworld", "webshop", "keychest"))
env = _global_registry.get(ENV_CREATOR, "keychest")({"max_steps": 4})
assert type(env).__name__ == "KeyChestEnv" and env.max_steps == 4
"""


def test_tune_registry_has_every_env_after_import() -> None:
    """In a fresh process: Ray's registry forgets entries across ray.shutdown()/init() in this one."""
    run_python(_REGISTRY_CHECK, timeout=120)


def test_keychest_prompt_and_corpus_come_from_the_registry() -> None:
    from envs.keychest.prompts import render_prompt, tokenizer_corpus

    assert envs.get_prompt_renderer("keychest") is render_prompt
    assert envs.get_tokenizer_corpus("hgpo/KeyChest-v0") == tokenizer_corpus()


@pytest.mark.parametrize("lookup", [envs.get_env_spec, envs.make_env, envs.get_prompt_renderer])
def test_unknown_env_name_is_a_clear_value_error(lookup: Any) -> None:
    with pytest.raises(
        ValueError, match=r"unknown environment 'cartpole'; the built-in ones: alfworld \(hgpo/ALFWorld-v0\)"
    ):
        lookup("cartpole")


class CoinEnv(TextEnv):
    """A user's own env: say "heads" to win."""

    default_require_tags = False

    def __init__(self, max_steps: int = 2, require_tags: bool | None = None) -> None:
        super().__init__(max_steps=max_steps, require_tags=require_tags)

    def _start_episode(self, seed: int | None, options: dict[str, Any]) -> tuple[Observation, str, str]:
        return Observation("A coin.", ["heads", "tails"]), "say heads", "coin"

    def _execute(self, command: str) -> Observation:
        won = command == "heads"
        return Observation(f"You said {command}.", [], reward=float(won), terminated=True, won=won)

    def _observation_unchanged(self) -> str:
        return "Nothing happens."


class TemplatedCoinEnv(CoinEnv):
    """The same, with its own prompt template (the hook)."""

    @staticmethod
    def render_prompt(context: envs.PromptContext) -> str:
        return f"{context.task}: {context.observation} ({' | '.join(context.admissible_actions)})"


@pytest.fixture
def coin_names() -> Any:
    """``coin`` registered with Tune and ``test/Coin-v0`` with Gymnasium, as a user's script would."""
    from ray.tune.registry import register_env

    register_env("coin", lambda env_config: CoinEnv(**env_config))
    gym.register("test/Coin-v0", entry_point=CoinEnv)
    yield
    gym.registry.pop("test/Coin-v0", None)


@pytest.mark.usefixtures("coin_names")
@pytest.mark.parametrize("name", ["coin", "test/Coin-v0", f"{__name__}:CoinEnv", f"{__file__}:CoinEnv"])
def test_a_users_env_resolves_by_every_name_rllib_users_give_it(name: str) -> None:
    from hgpo_rllib import HGPOConfig
    from hgpo_rllib.evaluation import play, random_policy

    env = envs.make_env(name, {"max_steps": 3}).unwrapped
    assert type(env).__name__ == "CoinEnv" and env.max_steps == 3  # a file path imports its own copy
    assert envs.env_class(name).__name__ == "CoinEnv"
    assert envs.get_prompt_renderer(name) is envs.default_prompt
    corpus = envs.get_tokenizer_corpus(name)  # from seeded random episodes
    assert {"say heads", "A coin.", "heads", "tails"} <= set(corpus) and len(corpus) == len(set(corpus))
    assert "You said heads." in corpus and "You said tails." in corpus
    config = HGPOConfig().environment(name).env_runners(num_envs_per_env_runner=8)
    config.validate()
    assert config.model_config["tokenizer_corpus"] == corpus
    records = play(name, {}, random_policy(0), range(20))
    assert {r["task_type"] for r in records} == {"coin"} and all(r["steps"] == 1 for r in records)
    assert 0 < sum(r["won"] for r in records) < 20  # random among heads and tails


def test_a_users_prompt_template_and_settings_checks_are_used() -> None:
    from hgpo_rllib import HGPOConfig

    name = f"{__name__}:TemplatedCoinEnv"
    context = envs.PromptContext("say heads", [], "A coin.", ["heads", "tails"], 0, 2)
    assert envs.get_prompt_renderer(name)(context) == "say heads: A coin. (heads | tails)"
    assert HGPOConfig().environment(name).prompt_connector().render_prompt is TemplatedCoinEnv.render_prompt
    with pytest.raises(
        ValueError, match=r"TemplatedCoinEnv has no setting 'max_step' \(did you mean 'max_steps'"
    ):
        HGPOConfig().environment(name, env_config={"max_step": 3}).validate()


def test_the_default_prompt_shows_task_window_observation_and_actions() -> None:
    history = [("o1", "a1"), ("o2", "a2"), ("o3", "a3")]
    prompt = envs.default_prompt(envs.PromptContext("the task", history, "o4", ["x", "y"], 3, 2))
    assert prompt.splitlines()[:5] == [
        "Your task is to: the task",
        "Prior to this step, you have already taken 3 step(s). Below are the most recent 2 observations "
        "and the corresponding actions you took:",
        "[Observation 2: 'o2', Action 2: 'a2']",
        "[Observation 3: 'o3', Action 3: 'a3']",
        "You are now at step 4 and your current observation is: o4",
    ]
    assert "Your admissible actions of the current situation are: ['x', 'y']." in prompt
    first = envs.default_prompt(envs.PromptContext("the task", [], "o1", [], 0, 2))
    assert "Prior to this step" not in first and "admissible" not in first


def test_an_env_that_is_not_a_text_env_is_refused_in_one_line() -> None:
    from hgpo_rllib import HGPOConfig

    with pytest.raises(ValueError, match=r"not a subclass of envs.common.text_env.TextEnv"):
        HGPOConfig().environment("gymnasium.envs.classic_control:CartPoleEnv").validate()


# Each a malformed answer in every env, role and format: 1 MB of a real command, a NUL byte alone,
# and a NUL byte in the free text (think or subgoal) of an answer that is otherwise well-formed.
MALFORMED_ANSWERS: dict[str, Callable[[str], str]] = {
    "1 MB": lambda well_formed: "take key " * 120_000,
    "NUL byte": lambda well_formed: "\x00",
    "NUL byte in a well-formed answer": lambda well_formed: re.sub(
        "</(think|subgoal)>", "\x00\\g<0>", well_formed, count=1
    ),
}
WELL_FORMED = {
    THINK_ACTION: "<think>The expert's move.</think><action>{}</action>",
    PLAN_EXECUTE: "<switch>KEEP</switch><subgoal>win</subgoal><action>{}</action>",
}


@pytest.mark.parametrize("answer_format", ANSWER_FORMATS)
@pytest.mark.parametrize("env_name", sorted(envs.ENV_SPECS))
def test_every_env_counts_a_huge_or_nul_byte_answer_invalid(env_name: str, answer_format: str) -> None:
    """One meaning of invalid_rate (docs/environments.md): KeyChest took a 1 MB or NUL-byte answer as
    a valid command that moved nothing, ALFWorld and WebShop counted it invalid."""
    env = envs.make_env(env_name, {"max_steps": 3, "answer_format": answer_format})
    parse = parse_plan_execute if answer_format == PLAN_EXECUTE else parse_action
    valid = {}
    try:
        for name, malformed in MALFORMED_ANSWERS.items():
            env.reset(seed=0)
            well_formed = WELL_FORMED[answer_format].format(env.unwrapped.expert_action())
            assert parse(well_formed).is_valid  # only what MALFORMED_ANSWERS does makes it invalid
            valid[name] = env.step(malformed(well_formed))[4]["is_action_valid"]
    finally:
        env.close()
    assert valid == dict.fromkeys(MALFORMED_ANSWERS, False)


@pytest.mark.parametrize("env_name", sorted(envs.TEAM_ENV_SPECS))
def test_every_team_role_counts_a_huge_or_nul_byte_answer_invalid(env_name: str) -> None:
    """The same rule for the roles of every team env: the first role's (a planner's or verifier's
    tagged answer) and the executor's (bare commands allowed in KeyChest's team)."""
    env = envs.make_env(env_name)
    valid = {}
    for name, malformed in MALFORMED_ANSWERS.items():
        observations, _ = env.reset(seed=0)
        (first,) = observations
        valid[name] = env.step({first: malformed(env.expert_action(first))})[4][first]["is_action_valid"]
    assert valid == dict.fromkeys(MALFORMED_ANSWERS, False)
