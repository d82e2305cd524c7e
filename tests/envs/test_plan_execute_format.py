"""HiPER's plan-execute answer format (docs/hiper.md, "The plan-execute answer format"): the parser and
its validity rule, the envs' ``answer_format`` setting, the per-step infos HAE reads, the subgoal the
history-window connector carries, and the three envs' prompts. Fast: no Ray cluster, no model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

import envs
from envs.alfworld.prompts import render_prompt as alfworld_prompt
from envs.common.actions import (
    MALFORMED_TAIL_CHARS,
    MAX_COMMAND_CHARS,
    SUBGOAL_INFO,
    SWITCH_INFO,
    ParsedAction,
    current_subgoal,
    normalize_command,
    parse_action,
    parse_plan_execute,
)
from envs.common.prompts import PromptContext
from envs.common.text_env import TextEnv
from envs.keychest.prompts import render_prompt as keychest_prompt
from envs.webshop.prompts import render_prompt as webshop_prompt
from hgpo_rllib.advantages.hae import parse_switch
from hgpo_rllib.columns import SUBGOAL_TEXT, SWITCH_TEXT
from hgpo_rllib.connectors.env_to_module.history_window import prompt_connector

PLAN = {"answer_format": "plan_execute"}


def answer(switch: str, subgoal: str, action: str) -> str:
    return f"<switch>{switch}</switch>\n<subgoal>{subgoal}</subgoal>\n<action>{action}</action>"


# ------------------------------------------------------------------------------------------ the parser


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (answer("KEEP", "find the key", "Go  North"), ParsedAction("go north", True, "KEEP", "find the key")),
        (answer("SWITCH", "open it", "open chest"), ParsedAction("open chest", True, "SWITCH", "open it")),
        # surrounding whitespace is not part of the switch or subgoal text
        (answer(" \nKEEP\t", "  a b  ", "x"), ParsedAction("x", True, "KEEP", "a b")),
        # the switch text must be exactly KEEP or SWITCH
        (answer("keep", "s", "x"), ParsedAction("x", False, "keep", "s")),
        (answer("Switch", "s", "x"), ParsedAction("x", False, "Switch", "s")),
        (answer("KEEP.", "s", "x"), ParsedAction("x", False, "KEEP.", "s")),
        (answer("", "s", "x"), ParsedAction("x", False, "", "s")),
        # an empty subgoal is still a subgoal block
        (answer("SWITCH", "", "x"), ParsedAction("x", True, "SWITCH", "")),
        # any tag pair missing
        ("<subgoal>s</subgoal><action>x</action>", ParsedAction("x", False, None, "s")),
        ("<switch>KEEP</switch><action>x</action>", ParsedAction("x", False, "KEEP", None)),
        (  # no </action>: the tail is the command, never executed
            "<switch>KEEP</switch><subgoal>s</subgoal><action>x",
            ParsedAction("><subgoal>s</subgoal><action>x", False, "KEEP", "s"),
        ),
        ("<switch>KEEP<subgoal>s</subgoal><action>x</action>", ParsedAction("x", False, None, "s")),
        ("<SWITCH>KEEP</SWITCH><subgoal>s</subgoal><action>x</action>", ParsedAction("x", False, None, "s")),
        # the action tags match in any case, as in the think-action format; the order is free
        ("<ACTION>x</ACTION><subgoal>s</subgoal><switch>KEEP</switch>", ParsedAction("x", True, "KEEP", "s")),
        # CJK anywhere makes it invalid
        (answer("SWITCH", "找钥匙", "x"), ParsedAction("x", False, "SWITCH", "找钥匙")),
        (answer("SWITCH", "s", "x") + "好", ParsedAction("x", False, "SWITCH", "s")),
        # the think-action format is not this one
        ("<think>t</think><action>x</action>", ParsedAction("x", False)),
        ("", ParsedAction("", False)),
        ("garbage ]]><<//switch>", ParsedAction("garbage ]]><<//switch>", False)),
        (None, ParsedAction("", False)),
        (42, ParsedAction("42", False)),
    ],
)
def test_parse_plan_execute_examples(output: Any, expected: ParsedAction) -> None:
    assert parse_plan_execute(output) == expected


def test_a_malformed_answer_keeps_its_tail_as_the_command() -> None:
    output = "<switch>KEEP</switch><subgoal>s</subgoal> I will now " + "really " * 20 + "<action>go"
    parsed = parse_plan_execute(output)
    assert not parsed.is_valid and parsed.command == normalize_command(output.lower()[-MALFORMED_TAIL_CHARS:])


def test_ten_thousand_character_answers() -> None:
    long_subgoal = "find the key " * 800
    parsed = parse_plan_execute(answer("SWITCH", long_subgoal, "go north"))
    assert parsed.is_valid and parsed.subgoal == long_subgoal.strip() and parsed.command == "go north"
    long_action = parse_plan_execute(answer("KEEP", "s", "go " * 4000))
    assert long_action.is_valid and len(long_action.command) <= MAX_COMMAND_CHARS
    garbage = parse_plan_execute("<switch>" * 2000)
    assert garbage == ParsedAction(normalize_command(("<switch>" * 2000)[-MALFORMED_TAIL_CHARS:]), False)


_PIECES = st.sampled_from(
    [
        "<switch>",
        "</switch>",
        "<subgoal>",
        "</subgoal>",
        "<action>",
        "</action>",
        "KEEP",
        "SWITCH",
        "中",
        "\n",
    ]
)
_ANY_TEXT = st.one_of(st.text(), st.lists(st.one_of(_PIECES, st.text(max_size=6)), max_size=14).map("".join))


@given(_ANY_TEXT)
def test_parse_plan_execute_never_raises_and_is_valid_only_when_well_formed(output: str) -> None:
    parsed = parse_plan_execute(output)
    assert isinstance(parsed.command, str) and len(parsed.command) <= MAX_COMMAND_CHARS
    if parsed.is_valid:
        assert parsed.switch in ("KEEP", "SWITCH") and parsed.subgoal is not None
        assert "</action>" in output.lower() and "中" not in output


@pytest.mark.parametrize(
    ("switch", "env_valid", "hae_switch"),
    [("KEEP", True, False), ("SWITCH", True, True), ("keep", False, False), ("maybe", False, True)],
)
def test_hae_reads_the_recorded_switch_with_its_own_laxer_rule(
    switch: str, env_valid: bool, hae_switch: bool
) -> None:
    """The env's validity needs KEEP or SWITCH exactly; HAE's boundary rule counts any non-KEEP
    text as SWITCH (docs/hiper.md quirk 6), so both read the same recorded text."""
    parsed = parse_plan_execute(answer(switch, "s", "x"))
    assert parsed.is_valid is env_valid and parse_switch(parsed.switch) is hae_switch
    assert parse_switch(parse_plan_execute("<action>x</action>").switch) is False  # missing: KEEP


# ----------------------------------------------------------------------------------------- the envs


@pytest.fixture(scope="module", params=sorted(envs.ENV_SPECS))
def plan_env(request: pytest.FixtureRequest) -> Iterator[tuple[str, TextEnv]]:
    """Each built-in env (name, env) playing the plan-execute format, built once per module."""
    env = envs.make_env(request.param, PLAN)
    yield request.param, env.unwrapped
    env.close()


INVALID_ANSWERS = [
    answer("keep", "s", "{}"),
    "<switch>SWITCH</switch><action>{}</action>",
    answer("SWITCH", "找到", "{}"),
    "<think>t</think><action>{}</action>",
    "complete garbage {}",
    "x" * 10_000 + "{}",
]


def test_any_string_is_legal_and_an_invalid_one_changes_nothing(plan_env: tuple[str, TextEnv]) -> None:
    _, env = plan_env
    env.reset(seed=3)
    command = env.expert_action()
    observation, reward, terminated, _, info = env.step(answer("SWITCH", "start", command))
    assert info["is_action_valid"] and info["command"] == normalize_command(command)
    expected = (observation, reward, terminated, info["admissible_actions"])

    _, reset_info = env.reset(seed=3)
    assert (reset_info[SWITCH_INFO], reset_info[SUBGOAL_INFO]) == (None, None)
    for bad in INVALID_ANSWERS:
        observation, reward, terminated, truncated, info = env.step(bad.format(command))
        assert not info["is_action_valid"] and reward == 0.0 and not (terminated or truncated)
        assert observation == env._observation_unchanged()
        assert info["admissible_actions"] == reset_info["admissible_actions"]
    observation, reward, terminated, _, info = env.step(answer("SWITCH", "start", command))
    assert (observation, reward, terminated, info["admissible_actions"]) == expected


def test_each_step_records_the_switch_and_subgoal_text() -> None:
    env = envs.make_env("keychest", PLAN)
    env.reset(seed=0)
    info = env.step(answer(" SWITCH ", " get the key ", "go north"))[4]
    assert (info[SWITCH_INFO], info[SUBGOAL_INFO], info["is_action_valid"]) == ("SWITCH", "get the key", True)
    info = env.step("<switch>keep</switch><action>go north</action>")[4]
    assert (info[SWITCH_INFO], info[SUBGOAL_INFO], info["is_action_valid"]) == ("keep", None, False)
    assert (SWITCH_TEXT, SUBGOAL_TEXT) == (SWITCH_INFO, SUBGOAL_INFO)  # one spelling for the learner side


def test_the_think_action_format_is_unchanged() -> None:
    """The default format: no plan infos, and a plan-execute answer is just an invalid think-action one."""
    env = envs.make_env("keychest", {"require_tags": True})
    _, reset_info = env.reset(seed=0)
    info = env.step(answer("SWITCH", "s", "go north"))[4]
    assert SWITCH_INFO not in info and SUBGOAL_INFO not in reset_info
    assert env.unwrapped.answer_format == "think_action"
    assert info["is_action_valid"] is parse_action(answer("SWITCH", "s", "go north")).is_valid is False


@pytest.mark.parametrize("env", sorted(envs.ENV_SPECS))
def test_the_setting_is_checked_with_the_other_env_settings(env: str) -> None:
    envs.check_env_config(env, PLAN)
    envs.check_env_config(env, {**PLAN, "require_tags": True})
    with pytest.raises(ValueError, match=r"answer_format must be one of \('think_action', 'plan_execute'\)"):
        envs.check_env_config(env, {"answer_format": "hiper"})
    with pytest.raises(ValueError, match=r"require_tags=False is invalid with answer_format='plan_execute'"):
        envs.check_env_config(env, {**PLAN, "require_tags": False})


# ---------------------------------------------------------------------------- the carried subgoal


def _infos(*steps: tuple[str, str | None, bool]) -> list[dict[str, Any]]:
    reset = {"is_action_valid": True, SWITCH_INFO: None, SUBGOAL_INFO: None}
    return [reset] + [{"is_action_valid": v, SWITCH_INFO: s, SUBGOAL_INFO: g} for s, g, v in steps]


def test_the_current_subgoal_is_the_latest_valid_turns() -> None:
    assert current_subgoal(_infos()) is None
    assert current_subgoal(_infos(("SWITCH", "find key", True))) == "find key"
    assert current_subgoal(_infos(("SWITCH", "find key", True), ("KEEP", "find key", True))) == "find key"
    replaced = _infos(("SWITCH", "find key", True), ("KEEP", "find key", True), ("SWITCH", "open", True))
    assert current_subgoal(replaced) == "open"
    # an invalid turn is void: a lower-case keep, a missing subgoal
    assert current_subgoal(_infos(("SWITCH", "find key", True), ("keep", "other", False))) == "find key"
    assert current_subgoal(_infos(("SWITCH", "find key", True), ("SWITCH", None, False))) == "find key"
    assert current_subgoal(_infos(("keep", "x", False))) is None
    # HiPER shows the previous turn's text: a KEEP that rewords the subgoal shows the new words
    assert current_subgoal(_infos(("SWITCH", "find key", True), ("KEEP", "get key", True))) == "get key"
    assert current_subgoal([{"is_action_valid": True, "command": "go"}]) is None  # think-action infos


def _subgoal_line(prompt: str) -> str:
    """The subgoal a prompt shows (ALFWorld and WebShop: "Your current subgoal is: ...", KeyChest:
    "Subgoal: ...")."""
    lines = [
        line for line in prompt.splitlines() if line.startswith(("Your current subgoal is: ", "Subgoal: "))
    ]
    assert len(lines) == 1, prompt
    return lines[0].split(": ", 1)[1]


def test_the_connector_carries_the_subgoal_into_every_envs_prompt(plan_env: tuple[str, TextEnv]) -> None:
    name, env = plan_env
    connector = prompt_connector(name, PLAN, 2)
    assert connector.render_kwargs == PLAN
    observation, info = env.reset(seed=0)
    episode = SingleAgentEpisode()
    episode.add_env_reset(observation=observation, infos=info)
    script = [
        (answer("SWITCH", "scout the area", env.expert_action()), "scout the area"),
        ("<switch>keep</switch><subgoal>junk</subgoal><action>look</action>", "scout the area"),  # invalid
        (answer("KEEP", "scout the area", "look"), "scout the area"),
        (answer("SWITCH", "a second plan", "look"), "a second plan"),
    ]
    shown = [_subgoal_line(connector.prompt_text(episode))]
    for text, _ in script:
        observation, reward, terminated, truncated, info = env.step(text)
        episode.add_env_step(observation, 0, reward, infos=info, terminated=terminated, truncated=truncated)
        shown.append(_subgoal_line(connector.prompt_text(episode)))
    assert shown == ["None"] + [subgoal for _, subgoal in script]


# ------------------------------------------------------------------------------------------ the prompts

RENDERERS = {"alfworld": alfworld_prompt, "webshop": webshop_prompt, "keychest": keychest_prompt}


@pytest.mark.parametrize("env", sorted(RENDERERS))
@pytest.mark.parametrize(("step", "history_length"), [(0, 2), (2, 2), (2, 0)])
def test_each_envs_prompt_shows_the_subgoal_and_explains_the_tags(
    env: str, step: int, history_length: int
) -> None:
    render = RENDERERS[env]
    history = [("obs one", "go north"), ("obs two", "go south")][:step]
    context = PromptContext("the task", history, "obs now", ["go north", "look"], step, history_length)
    first = render(context, answer_format="plan_execute")
    assert _subgoal_line(first) == "None"
    later = render(replace(context, current_subgoal="reach {the} kitchen"), answer_format="plan_execute")
    assert _subgoal_line(later) == "reach {the} kitchen"  # braces in the subgoal are text, not fields
    for tag in ("<switch>KEEP or SWITCH</switch>", "<subgoal>", "<action>", "KEEP", "SWITCH"):
        assert tag in first
    assert "<think>" not in first and first.replace("None", "reach {the} kitchen") == later
    # the think-action prompt is the one it was: no subgoal, whatever the context holds
    assert render(context) == render(replace(context, current_subgoal="x"))
    assert "subgoal" not in render(context).lower() and render(
        context, answer_format="think_action"
    ) == render(context)
    with pytest.raises(ValueError, match=r"answer_format must be one of"):
        render(context, answer_format="plan")


def test_the_default_prompt_of_a_users_env_speaks_both_formats() -> None:
    context = PromptContext("the task", [], "o1", ["x"], 0, 2, current_subgoal="do x")
    assert envs.default_prompt(context).endswith(envs.common.prompts.DEFAULT_TEMPLATE_INSTRUCTION)
    assert _subgoal_line(envs.default_prompt(context, answer_format="plan_execute")) == "do x"
