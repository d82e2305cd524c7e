"""Turn-based team envs (issue 28, docs/drmas.md): routing, invalid outputs, rewards, ends, settings,
prompts, registration, and RLlib's own episode and env-creation path taking them."""

from __future__ import annotations

import functools
import importlib
import itertools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest
from ray.rllib.env.env_context import EnvContext
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.vector.registration import make_vec
from ray.rllib.utils.pre_checks.env import check_multiagent_environments
from ray.tune.registry import ENV_CREATOR, _global_registry

import envs
from envs.alfworld.logic import TASK_TYPES
from envs.alfworld.team import ALFWorldTeamEnv
from envs.common.planner_executor import EXECUTOR, PLANNER
from envs.common.prompts import PromptContext
from envs.common.team_env import ALL, TeamEpisode, TeamTextEnv, play_team
from envs.keychest.env import CHEST_SUBGOAL, KEY_SUBGOAL, NOTHING_HAPPENS, WIN_REWARD
from envs.keychest.team import KeyChestTeamEnv
from envs.keychest.team import render_prompt as keychest_prompt
from envs.webshop.data import CATALOG_DIR
from envs.webshop.team import BUYER, SEARCHER, VERIFIER, WebShopTeamEnv
from envs.webshop.team import render_prompt as webshop_prompt


def tagged(command: str) -> str:
    return f"<think>t</think><action>{command}</action>"


def subgoal(text: str) -> str:
    return f"<think>t</think><subgoal>{text}</subgoal>"


def verdict(word: str) -> str:
    return f"<think>t</think><verify>{word}</verify>"


def turn(env: TeamTextEnv, role: str, output: str) -> tuple[dict[str, Any], ...]:
    """One step by ``role``, which must be the role whose turn it is."""
    assert env._next == role, f"it is {env._next}'s turn, not {role}'s"
    return env.step({role: output})


def next_role(result: tuple[dict[str, Any], ...]) -> str:
    (role,) = result[0]
    return role


@pytest.fixture(scope="module")
def webshop() -> WebShopTeamEnv:
    return WebShopTeamEnv(data_dir=CATALOG_DIR)


# ------------------------------------------------------------------------------ planner and executor
def test_the_planner_is_asked_at_start_after_a_report_and_after_replan_every_turns() -> None:
    env = KeyChestTeamEnv(replan_every=3)
    observations, infos = env.reset(seed=0)  # the cellar, one exit: north
    assert observations == {PLANNER: "You are in the cellar. Exits: north."}
    assert (infos[PLANNER]["admissible_actions"], infos[PLANNER]["subgoal"]) == ([], None)

    result = turn(env, PLANNER, subgoal("Find the key"))
    assert next_role(result) == EXECUTOR and result[1] == {PLANNER: 0.0}
    executor = result[4][EXECUTOR]
    assert (
        executor["team_context"] == (("planner", "find the key"),) and executor["subgoal"] == "find the key"
    )
    assert executor["admissible_actions"] == ["go north"] and result[0][EXECUTOR] == observations[PLANNER]

    result = turn(env, EXECUTOR, tagged("go north"))
    assert next_role(result) == EXECUTOR and result[4][EXECUTOR]["game_step"] == 1
    assert result[4][EXECUTOR]["team_context"] == ()  # a game step clears the team context
    result = turn(env, EXECUTOR, tagged("go south") + "<report>done</report>")
    assert next_role(result) == PLANNER and set(result[4]) == {PLANNER, EXECUTOR}
    planner = result[4][PLANNER]
    assert planner["team_context"] == (("executor", "done"),) and planner["report"] == "done"
    assert (planner["step"], planner["command"], planner["game_step"]) == (1, "find the key", 2)
    assert result[0][PLANNER] == "You are in the cellar. Exits: north."  # the executor's action ran

    turn(env, PLANNER, subgoal("go north"))
    result = turn(env, EXECUTOR, tagged("go north") + "<report>failed</report>")
    assert next_role(result) == PLANNER and result[4][PLANNER]["team_context"] == (("executor", "failed"),)

    turn(env, PLANNER, subgoal("wander"))
    for _ in range(2):  # invalid turns (an unknown report word) count too
        assert next_role(turn(env, EXECUTOR, tagged("go south") + "<report>later</report>")) == EXECUTOR
    result = turn(env, EXECUTOR, tagged("go south"))
    assert next_role(result) == PLANNER and result[4][PLANNER]["report"] is None  # replan_every=3 reached
    assert [env._turns[PLANNER], env._turns[EXECUTOR]] == [3, 6]


def test_invalid_outputs_are_reported_at_once_and_change_nothing() -> None:
    env = KeyChestTeamEnv(require_tags=True, replan_every=10)
    observations, _ = env.reset(seed=0)
    state = (env.game._state, env.game_step, env.game.expert_plan())
    result = turn(env, PLANNER, "<subgoal>no think tags</subgoal>")
    assert result[4][PLANNER]["is_action_valid"] is False and result[4][EXECUTOR]["subgoal"] is None
    assert next_role(result) == EXECUTOR  # an invalid plan lets the executor go on

    bad_outputs = [
        "go north",  # bare: invalid with require_tags=True
        tagged("go north") + "<report>maybe</report>",  # an unknown report word
        "<think>t</think><action>go north",  # unclosed tag
        "<think>找到</think><action>go north</action>",  # CJK
    ]
    for bad in bad_outputs:
        result = turn(env, EXECUTOR, bad)
        info = result[4][EXECUTOR]
        assert info["is_action_valid"] is False and info["game_step"] == 0, bad
        assert result[0] == {EXECUTOR: observations[PLANNER]} and result[1] == {EXECUTOR: 0.0}
        assert (env.game._state, env.game_step, env.game.expert_plan()) == state
    assert env.game._steps == 0  # the game never saw them

    result = turn(env, EXECUTOR, tagged("go north"))
    assert result[4][EXECUTOR]["is_action_valid"] and result[0][EXECUTOR] != observations[PLANNER]


def test_an_unknown_command_is_valid_and_the_game_answers_it() -> None:
    """Format validity is the role's tag rule; what the game makes of a command is the game's."""
    env = KeyChestTeamEnv()
    env.reset(seed=0)
    turn(env, PLANNER, subgoal("x"))
    result = turn(env, EXECUTOR, "dance")  # KeyChest's bare commands are valid by default
    assert result[0] == {EXECUTOR: NOTHING_HAPPENS} and result[4][EXECUTOR]["is_action_valid"]
    assert result[4][EXECUTOR]["game_step"] == 1


@pytest.mark.parametrize("seed", range(8))
def test_the_expert_team_wins_keychest_and_both_roles_get_the_reward(seed: int) -> None:
    env = KeyChestTeamEnv()
    episode = play_team(env, seed=seed)
    *middle, last = episode.steps
    assert all(step[2] == {next(iter(step[0])): 0.0} for step in middle)  # 0 per turn, to the actor
    _, observations, rewards, terminateds, truncateds, infos = last
    assert rewards == {PLANNER: WIN_REWARD, EXECUTOR: WIN_REWARD}
    assert terminateds == {ALL: True, PLANNER: True, EXECUTOR: True}
    assert truncateds == {ALL: False, PLANNER: False, EXECUTOR: False}
    assert set(observations) == {PLANNER, EXECUTOR}
    assert all(info["won"] and info["score"] == 1.0 for info in infos.values())
    assert all(info["is_action_valid"] for step in episode.steps for info in step[5].values())
    subgoals = [c.current_subgoal for c in episode.contexts if c.role == EXECUTOR]
    assert subgoals[0] == KEY_SUBGOAL and subgoals[-1] == CHEST_SUBGOAL
    assert [c.role for c in episode.contexts].count(PLANNER) == 2  # one per phase


def test_max_turns_ends_the_episode_truncated_and_every_role_that_acted_gets_the_outcome() -> None:
    env = KeyChestTeamEnv(max_turns=3)
    env.reset(seed=0)
    turn(env, PLANNER, "no tags")
    turn(env, EXECUTOR, tagged("go north"))
    observations, rewards, terminateds, truncateds, infos = turn(env, EXECUTOR, tagged("go south"))
    assert truncateds == {ALL: True, PLANNER: True, EXECUTOR: True} and not terminateds[ALL]
    assert rewards == {PLANNER: 0.0, EXECUTOR: 0.0}
    assert observations == dict.fromkeys((PLANNER, EXECUTOR), "You are in the cellar. Exits: north.")
    assert infos[PLANNER]["is_action_valid"] is False and infos[EXECUTOR]["step"] == 2
    with pytest.raises(RuntimeError, match="the episode is over"):
        env.step({EXECUTOR: "go north"})


def test_the_games_max_steps_truncate_the_team() -> None:
    env = KeyChestTeamEnv(max_steps=2)
    assert env.max_turns == 6
    env.reset(seed=0)
    turn(env, PLANNER, subgoal("walk"))
    turn(env, EXECUTOR, "go north")
    _, rewards, terminateds, truncateds, _ = turn(env, EXECUTOR, "go south")
    assert truncateds[ALL] and not terminateds[ALL] and rewards == {PLANNER: 0.0, EXECUTOR: 0.0}


def test_an_engine_exception_ends_the_episode_truncated_with_env_error() -> None:
    env = KeyChestTeamEnv()
    env.reset(seed=0)
    turn(env, PLANNER, subgoal("x"))

    def broken(command: str) -> None:
        raise OSError("engine crashed")

    env.game._execute = broken
    observations, rewards, terminateds, truncateds, infos = turn(env, EXECUTOR, "go north")
    assert truncateds[ALL] and truncateds[PLANNER] and not terminateds[ALL]
    assert rewards == {PLANNER: 0.0, EXECUTOR: 0.0} and set(observations) == {PLANNER, EXECUTOR}
    assert all(info["env_error"] == "OSError: engine crashed" for info in infos.values())
    del env.game._execute
    observations, infos = env.reset(seed=1)  # the game rebuilds; the team plays on
    assert PLANNER in observations and "env_error" not in infos[PLANNER]


def test_the_step_api_refuses_callers_bugs() -> None:
    env = KeyChestTeamEnv()
    with pytest.raises(RuntimeError, match="call reset"):
        env.step({PLANNER: "x"})
    env.reset(seed=0)
    with pytest.raises(
        ValueError, match="it is the planner's turn: expected only its action, got \\['executor'\\]"
    ):
        env.step({EXECUTOR: "go north"})
    with pytest.raises(TypeError, match="a str"):
        env.step({PLANNER: 3})


# ------------------------------------------------------------------------------------------ WebShop
def test_webshop_routing_by_the_verdict(webshop: WebShopTeamEnv) -> None:
    observations, infos = webshop.reset(options={"goal_index": 0})
    assert list(observations) == [VERIFIER] and infos[VERIFIER]["admissible_actions"] == ["yes", "no"]

    result = turn(webshop, VERIFIER, verdict("no"))
    assert next_role(result) == SEARCHER and result[4][SEARCHER]["team_context"] == (("verifier", "no"),)
    assert result[4][SEARCHER]["admissible_actions"] == ["search[<your query>]", "click[search]"]
    query = webshop.game.current_goal["instruction_text"]
    result = turn(webshop, SEARCHER, tagged(f"search[{query}]"))
    assert next_role(result) == VERIFIER and result[4][VERIFIER]["game_step"] == 1
    results_page = result[0][VERIFIER]

    result = turn(webshop, VERIFIER, "I think we can buy now.")  # unparseable: routed as yes, invalid
    assert next_role(result) == BUYER and result[4][VERIFIER]["is_action_valid"] is False
    buyer_actions = result[4][BUYER]["admissible_actions"]
    assert buyer_actions and all(action.startswith("click[") for action in buyer_actions)

    result = turn(webshop, BUYER, tagged("search[something else]"))  # the buyer may not search
    assert result[4][BUYER]["is_action_valid"] is False and result[0] == {VERIFIER: results_page}
    assert webshop.game_step == 1 and webshop.game.session.observation == results_page
    assert result[4][VERIFIER]["team_context"] == (("buyer", "search[something else]"),)

    item = f"click[{webshop.game.current_goal['asin'].lower()}]"
    assert item in buyer_actions
    turn(webshop, VERIFIER, verdict("yes"))
    result = turn(webshop, BUYER, tagged(item))
    assert result[4][BUYER]["is_action_valid"] and result[4][VERIFIER]["game_step"] == 2

    # on the item page the searcher may look but not choose options or buy
    result = turn(webshop, VERIFIER, verdict("no"))
    searcher_actions = result[4][SEARCHER]["admissible_actions"]
    option = next(t for t, c in webshop.game.session.page.clickables.items() if c.kind == "option")
    assert "click[description]" in searcher_actions and "click[buy now]" not in searcher_actions
    assert f"click[{option}]" not in searcher_actions
    item_page = result[0][SEARCHER]
    result = turn(webshop, SEARCHER, tagged("click[buy now]"))
    assert result[4][SEARCHER]["is_action_valid"] is False and result[0] == {VERIFIER: item_page}
    turn(webshop, VERIFIER, verdict("no"))
    result = turn(webshop, SEARCHER, tagged(f"click[{option}]"))
    assert result[4][SEARCHER]["is_action_valid"] is False and webshop.game_step == 2
    turn(webshop, VERIFIER, verdict("no"))
    result = turn(webshop, SEARCHER, tagged("click[description]"))
    assert result[4][SEARCHER]["is_action_valid"] and webshop.game_step == 3


def test_webshop_skips_the_searcher_on_the_last_game_turn() -> None:
    env = WebShopTeamEnv(data_dir=CATALOG_DIR, max_steps=2)
    env.reset(options={"goal_index": 1})
    turn(env, VERIFIER, verdict("no"))
    turn(env, SEARCHER, tagged("search[shorts]"))
    result = turn(env, VERIFIER, verdict("no"))  # game step 1 of 2: the last one
    assert next_role(result) == BUYER and result[4][VERIFIER]["is_action_valid"]
    observations, rewards, terminateds, truncateds, infos = turn(env, BUYER, tagged("click[next >]"))
    assert truncateds[ALL] and not terminateds[ALL]
    assert rewards == dict.fromkeys((VERIFIER, SEARCHER, BUYER), 0.0) and len(observations) == 3
    assert infos[BUYER]["score"] == 0.0


@pytest.mark.parametrize("goal_index", [0, 1])
def test_the_expert_team_buys_the_goal_and_every_role_gets_the_reward(
    webshop: WebShopTeamEnv, goal_index: int
) -> None:
    episode = play_team(webshop, options={"goal_index": goal_index})
    _, _, rewards, terminateds, _, infos = episode.steps[-1]
    assert rewards == dict.fromkeys((VERIFIER, SEARCHER, BUYER), 1.0) and terminateds[ALL]  # the score
    assert all(info["won"] and info["score"] == 1.0 for info in infos.values())
    roles = [c.role for c in episode.contexts]
    assert roles[:4] == [VERIFIER, SEARCHER, VERIFIER, BUYER] and roles[-1] == BUYER
    assert infos[BUYER]["command"] == "click[buy now]"


def test_webshop_prompts_show_each_roles_tags_and_team_context(webshop: WebShopTeamEnv) -> None:
    episode = play_team(webshop, options={"goal_index": 0})
    by_role = {c.role: webshop_prompt(c) for c in reversed(episode.contexts)}  # each role's first prompt
    assert "<verify>yes</verify>" in by_role[VERIFIER] and "<action>" not in by_role[VERIFIER]
    assert "search[your query]" in by_role[SEARCHER] and "- verifier: no" in by_role[SEARCHER]
    assert "click[buy now]" in by_role[BUYER] and "- verifier: yes" in by_role[BUYER]
    assert "Your admissible actions of the current situation are: ['yes', 'no']." in by_role[VERIFIER]
    first_results = episode.contexts[2]  # the verifier after the search: one game step of history
    assert "[Observation 1: ''Search'', Action 1: 'search[" in webshop_prompt(first_results)


# ------------------------------------------------------------------------------------------ ALFWorld
def test_the_expert_team_wins_alfworld() -> None:
    env = ALFWorldTeamEnv(source="generated", max_steps=30, task_types=["pick_and_place_simple"])
    episode = play_team(env, seed=2)  # a short game (4 commands) keeps the file fast
    _, _, rewards, terminateds, _, infos = episode.steps[-1]
    assert rewards == {PLANNER: 10.0, EXECUTOR: 10.0} and terminateds[ALL] and infos[EXECUTOR]["won"]
    executor_turns = [step for step in episode.steps if EXECUTOR in step[0]]
    reports = [step[0][EXECUTOR].endswith("<report>done</report>") for step in executor_turns]
    planner_turns = [c for c in episode.contexts if c.role == PLANNER]
    assert len(planner_turns) == sum(reports) >= 2  # one plan per phase: at start, then after each done
    assert all(info["is_action_valid"] for step in episode.steps for info in step[5].values())
    executor_context = next(c for c in episode.contexts if c.role == EXECUTOR)
    prompt = envs.get_prompt_renderer("alfworld_team")(executor_context)
    assert f"Your current subgoal is: {executor_context.current_subgoal}" in prompt
    assert "<report>done</report>" in prompt and "- planner: " in prompt


@pytest.mark.slow
@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_the_expert_team_wins_every_alfworld_task_type(task_type: str) -> None:
    env = ALFWorldTeamEnv(source="generated", task_types=[task_type])
    for seed in range(2):
        rewards = play_team(env, seed=seed).steps[-1][2]
        assert rewards == {PLANNER: 10.0, EXECUTOR: 10.0}, (task_type, seed)


# ------------------------------------------------------------------------------------- prompts
def test_planner_and_executor_prompts() -> None:
    env = KeyChestTeamEnv()
    episode = play_team(env, seed=0)
    planner_again = [c for c in episode.contexts if c.role == PLANNER][1]
    prompt = keychest_prompt(planner_again)
    assert "You are the planner" in prompt and "<subgoal> </subgoal>" in prompt
    assert "- executor: done" in prompt and f"The current subgoal is: {KEY_SUBGOAL}" in prompt
    assert "Your admissible actions" not in prompt  # the planner has none
    executor = keychest_prompt(episode.contexts[1])
    assert "You are the executor" in executor and "<action> </action>" in executor
    assert f"- planner: {KEY_SUBGOAL}" in executor and "Your admissible actions" in executor
    assert "[Observation 1:" not in executor  # no game step yet
    later = keychest_prompt(episode.contexts[3])
    assert "[Observation 1: 'You are in the cellar. Exits: north.', Action 1: 'go north']" in later
    with pytest.raises(ValueError, match=r"context.role in \('planner', 'executor'\), got None"):
        keychest_prompt(PromptContext("task", [], "obs", [], 0, 2))


def test_prompt_context_defaults_keep_single_agent_templates_working() -> None:
    context = PromptContext("task", [], "obs", ["look"], 0, 2)
    assert (context.role, context.team_context) == (None, ())
    assert "Task: task" in envs.get_prompt_renderer("keychest")(context)


# ----------------------------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    ("env", "env_config", "message"),
    [
        (
            "keychest_team",
            {"num_room": 3},
            r"KeyChestTeamEnv has no setting 'num_room' \(did you mean 'num_rooms'",
        ),
        ("keychest_team", {"replan_every": 0}, r"replan_every must be a positive int, got 0"),
        ("keychest_team", {"max_turns": 2.5}, r"max_turns must be None or a positive int, got 2.5"),
        ("keychest_team", {"answer_format": "plan_execute"}, r"has no setting 'answer_format'"),
        ("keychest_team", {"num_rooms": 1}, r"num_rooms must be an int in \[2, "),
        ("webshop_team", {"split": "valid"}, r"split must be one of"),
        ("webshop_team", {"replan_every": 2}, r"WebShopTeamEnv has no setting 'replan_every'"),
        ("alfworld_team", {"max_stepz": 3}, r"did you mean 'max_steps'"),
        ("alfworld_team", {"task_types": "pick"}, r"task_types must be a non-empty subset"),
    ],
)
def test_bad_settings_are_one_line_value_errors_naming_the_key(
    env: str, env_config: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        envs.check_env_config(env, env_config)
    assert "\n" not in str(refused.value)


def test_the_constructor_runs_the_same_check() -> None:
    with pytest.raises(ValueError, match=r"KeyChestTeamEnv has no setting 'num_room'"):
        KeyChestTeamEnv(num_room=3)
    with pytest.raises(ValueError, match=r"replan_every must be a positive int"):
        KeyChestTeamEnv(replan_every=-1)
    envs.check_env_config("keychest_team", {"num_rooms": 3, "max_turns": 9, "replan_every": 2})


# ------------------------------------------------------------------------------ registry and RLlib
@pytest.mark.parametrize(
    ("name", "gym_id", "cls"),
    [
        ("webshop_team", "hgpo/WebShopTeam-v0", WebShopTeamEnv),
        ("alfworld_team", "hgpo/ALFWorldTeam-v0", ALFWorldTeamEnv),
        ("keychest_team", "hgpo/KeyChestTeam-v0", KeyChestTeamEnv),
    ],
)
def test_the_teams_are_registered(name: str, gym_id: str, cls: type) -> None:
    assert envs.get_env_spec(gym_id) is envs.get_env_spec(name) is envs.TEAM_ENV_SPECS[name]
    assert name not in envs.ENV_SPECS  # the single-agent list stays single-agent
    assert envs.env_class(name) is cls and gym.spec(gym_id).entry_point == f"{cls.__module__}:{cls.__name__}"
    assert envs.get_prompt_renderer(name) is importlib.import_module(cls.__module__).render_prompt
    assert _global_registry.contains(ENV_CREATOR, name)
    assert envs.TeamTextEnv is TeamTextEnv


def test_keychest_team_builds_through_make_env_gym_and_rllibs_own_env_creation() -> None:
    assert isinstance(envs.make_env("keychest_team", {"max_turns": 5}), KeyChestTeamEnv)
    assert gym.make("hgpo/KeyChestTeam-v0", max_steps=7).unwrapped.game.max_steps == 7
    # what RLlib's MultiAgentEnvRunner.make_env does with config.environment("keychest_team")
    creator = _global_registry.get(ENV_CREATOR, "keychest_team")
    entry = functools.partial(creator, EnvContext({"replan_every": 2}, worker_index=1))
    gym.register("test-team-envs-keychest-v0", entry_point=entry, disable_env_checker=True)
    vector = make_vec("test-team-envs-keychest-v0", num_envs=2)
    check_multiagent_environments(vector.envs[0].unwrapped)
    observations, _ = vector.reset(seed=0)
    assert [list(o) for o in observations] == [[PLANNER], [PLANNER]]
    assert vector.envs[1].unwrapped.replan_every == 2


def test_keychest_team_tokenizer_corpus_has_every_roles_prompts_and_answers() -> None:
    corpus = envs.get_tokenizer_corpus("keychest_team")
    assert any(text.startswith("You are the planner") for text in corpus)
    assert any(text.startswith("You are the executor") and "- planner: " in text for text in corpus)
    assert any(text.endswith("<report>done</report>") for text in corpus)
    assert (
        f"<think>The next part of the task: {KEY_SUBGOAL}.</think><subgoal>{KEY_SUBGOAL}</subgoal>" in corpus
    )
    assert "<think></think><action>take key</action>" in corpus  # KeyChest's own corpus too


@pytest.mark.slow
@pytest.mark.parametrize("name", ["webshop_team", "alfworld_team"])
def test_the_big_games_team_corpora(name: str) -> None:
    corpus = envs.get_tokenizer_corpus(name)
    assert sum(text.startswith("You are the") for text in corpus) >= 4


# ----------------------------------------------------------------------------- RLlib's episode
def play_into_episode(
    env: TeamTextEnv, answer: Callable[[str], str], **reset_kwargs: Any
) -> tuple[MultiAgentEpisode, TeamEpisode]:
    """Play with ``answer`` and record every returned dict in RLlib's ``MultiAgentEpisode``."""
    played = play_team(env, answer, **reset_kwargs)
    episode = MultiAgentEpisode(
        observation_space=gym.spaces.Dict(env.observation_spaces),
        action_space=gym.spaces.Dict(env.action_spaces),
    )
    observations, infos = played.reset
    episode.add_env_reset(observations=observations, infos=infos)
    for actions, observations, rewards, terminateds, truncateds, infos in played.steps:
        episode.add_env_step(
            observations, actions, rewards, infos, terminateds=terminateds, truncateds=truncateds
        )
    return episode, played


def check_agent_episodes(episode: MultiAgentEpisode, played: TeamEpisode, outcome: float) -> None:
    """Each role's SingleAgentEpisode holds its turns: its answers, the validity of each in the info
    after it, 0 per turn and the outcome on its last."""
    for role, agent in episode.agent_episodes.items():
        answers = [step[0][role] for step in played.steps if role in step[0]]
        validity = [step[5][role]["is_action_valid"] for step in played.steps if role in step[0]]
        assert list(agent.get_actions()) == answers
        assert [info["is_action_valid"] for info in agent.get_infos()[1:]] == validity
        assert [info["step"] for info in agent.get_infos()] == list(range(len(answers) + 1))
        assert list(agent.get_rewards()) == [0.0] * (len(answers) - 1) + [outcome]
        assert agent.is_done


def test_rllibs_multi_agent_episode_takes_a_keychest_team_episode_with_invalid_turns() -> None:
    env = KeyChestTeamEnv(require_tags=True)
    turns = itertools.count()

    def answer(role: str) -> str:  # turns 2 and 5 (counting from 0) are answered badly
        return "no tags at all" if next(turns) in (2, 5) else env.expert_action(role)

    episode, played = play_into_episode(env, answer, seed=0)
    assert episode.is_terminated and episode.get_return() == 2 * WIN_REWARD
    check_agent_episodes(episode, played, WIN_REWARD)
    assert not all(step[5][next(iter(step[0]))]["is_action_valid"] for step in played.steps)


def test_rllibs_multi_agent_episode_takes_a_truncated_episode() -> None:
    env = KeyChestTeamEnv(max_turns=4)
    episode, played = play_into_episode(env, lambda role: "garbage", seed=0)
    assert episode.is_truncated and len(played.steps) == 4
    check_agent_episodes(episode, played, 0.0)


def test_rllibs_multi_agent_episode_takes_a_webshop_team_episode(webshop: WebShopTeamEnv) -> None:
    episode, played = play_into_episode(webshop, webshop.expert_action, options={"goal_index": 1})
    assert set(episode.agent_episodes) == {VERIFIER, SEARCHER, BUYER}
    check_agent_episodes(episode, played, 1.0)  # the purchase scores 1.0
    assert len(episode.agent_episodes[VERIFIER]) == sum(VERIFIER in step[0] for step in played.steps)


def test_a_webshop_team_earns_the_score_of_a_partial_purchase() -> None:
    """The team reward is the purchase's score, so the goal's item bought without its options
    still pays its partial match (0.8 on goal 0)."""
    env = WebShopTeamEnv(data_dir=CATALOG_DIR, max_steps=6)
    env.reset(options={"goal_index": 0})
    turn(env, VERIFIER, verdict("no"))
    turn(env, SEARCHER, env.expert_action(SEARCHER))  # the goal's instruction as the query
    turn(env, VERIFIER, verdict("yes"))
    turn(env, BUYER, env.expert_action(BUYER))  # the goal's item
    turn(env, VERIFIER, verdict("yes"))
    _, rewards, terminateds, _, infos = turn(env, BUYER, tagged("click[buy now]"))
    score = infos[BUYER]["score"]
    assert terminateds[ALL] and 0.0 < score < 1.0 and not infos[BUYER]["won"]
    assert rewards == dict.fromkeys((VERIFIER, SEARCHER, BUYER), score)
