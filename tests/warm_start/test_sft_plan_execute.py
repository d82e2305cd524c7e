"""``rllib sft`` in HiPER's plan-execute answer format (docs/hiper.md): demonstrations and DAgger labels
are ``<switch><subgoal><action>`` answers whose subgoals name the demonstrator's phases, rendered with
the plan-execute prompt exactly as RL renders it; the think-action demonstrations stay byte-identical."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import TUNED, sft_args

import envs
from envs.keychest.prompts import PLAN_TAG_INSTRUCTION
from envs.webshop.expert import subgoal as webshop_subgoal
from hgpo_rllib import cli
from hgpo_rllib.connectors.env_to_module.history_window import prompt_connector
from hgpo_rllib.evaluation.rollout import new_episode, task_seeds
from hgpo_rllib.experiments.experiment_file import load_experiment_file
from hgpo_rllib.warm_start.cache import recipe_directory, recipe_record, warm_start_recipe
from hgpo_rllib.warm_start.demonstrations import (
    demonstrated_response,
    make_demonstrator,
    play_demonstration,
    prompt_renderer,
)
from hgpo_rllib.warm_start.format import DEMONSTRATIONS, SFT_CONFIG

PLAN_EXECUTE = {"answer_format": "plan_execute"}
#: The ALFWorld searcher's phases as subgoals (envs/alfworld/searcher.py ``next_step``).
SEARCHER_SUBGOAL = re.compile(
    r"find the \w+|take the \w+ \d+|(clean|heat|cool) the \w+ \d+ with the \w+|put the \w+ \d+ in the \w+"
    r"|use the \w+ \d+"
)


def check_answers(responses: list[str], shown: list[str | None]) -> list[str]:
    """Every response is a valid plan-execute answer whose switch is SWITCH exactly when its subgoal
    differs from the one its prompt shows (``shown``: None before any); returns the subgoals."""
    subgoals = []
    for response, current in zip(responses, shown, strict=True):
        parsed = envs.parse_plan_execute(response)
        assert parsed.is_valid and parsed.subgoal, response
        assert parsed.switch == ("KEEP" if parsed.subgoal == current else "SWITCH"), (response, current)
        subgoals.append(parsed.subgoal)
    return subgoals


def check_episode(steps: list[dict[str, str]]) -> list[str]:
    """A demonstrated episode: SWITCH at step 0, then KEEP (the subgoal copied exactly) until the
    phase's subgoal changes; each prompt shows the subgoal in force. Returns the subgoals."""
    subgoals = [envs.parse_plan_execute(step["response"]).subgoal for step in steps]
    shown = [None, *subgoals[:-1]]
    assert check_answers([step["response"] for step in steps], shown) == subgoals
    assert envs.parse_plan_execute(steps[0]["response"]).switch == "SWITCH"
    return subgoals


def phases(subgoals: list[str]) -> list[str]:
    """The subgoals with repeats merged: one entry per phase."""
    return [s for i, s in enumerate(subgoals) if i == 0 or s != subgoals[i - 1]]


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sft_plan_execute") / "model"
    assert cli.main(sft_args(out, "--env-config", json.dumps(PLAN_EXECUTE))) == 0
    return out


def test_rllib_sft_writes_plan_execute_demonstrations_with_the_prompts_rl_renders(warm_start: Path) -> None:
    settings = json.loads((warm_start / SFT_CONFIG).read_text())
    assert settings["finished"] and settings["env_config"] == {"max_steps": 10, **PLAN_EXECUTE}
    records = [json.loads(line) for line in (warm_start / DEMONSTRATIONS).read_text().splitlines()]
    assert [r["won"] for r in records] == [True, True]
    render = prompt_connector("keychest", settings["env_config"], settings["history_length"]).prompt_text
    for record in records:
        subgoals = check_episode(record["steps"])
        # KeyChest's expert: fetch the key, then open the chest.
        assert phases(subgoals) == ["take the key", "open the chest"]
        # Replayed through the env, each answer is executed and recorded as RL's would be, and the
        # connector renders each prompt (the current subgoal shown) exactly as written.
        env = envs.make_env("keychest", settings["env_config"])
        episode = new_episode(*env.reset(seed=record["task_seed"]))
        for step, subgoal, shown in zip(record["steps"], subgoals, ["None", *subgoals], strict=False):
            assert step["prompt"] == render(episode)
            assert step["prompt"].endswith(f"\nSubgoal: {shown}\n{PLAN_TAG_INSTRUCTION}")
            observation, reward, terminated, truncated, info = env.step(step["response"])
            assert info["is_action_valid"] and info["subgoal"] == subgoal
            episode.add_env_step(
                observation, step["response"], reward, infos=info, terminated=terminated, truncated=truncated
            )
        assert info["won"]


def test_dagger_labels_the_models_own_states_in_the_plan_execute_format(warm_start: Path) -> None:
    # --answer-format names the same env_config, so the finished warm start is reused and built on.
    dagger = ["--answer-format", "plan_execute", "--dagger-rounds", "1", "--dagger-episodes", "1"]
    assert cli.main([*sft_args(warm_start, "--env-config", json.dumps(PLAN_EXECUTE)), *dagger]) == 0
    (round_dir,) = warm_start.glob("dagger-*")
    (game,) = [json.loads(line) for line in (round_dir / "dagger_states.jsonl").read_text().splitlines()]
    assert len(game["states"]) == game["steps"] > 0
    # The label keeps or switches against the subgoal the model's own prompt shows (its own text).
    shown = [re.search(r"\nSubgoal: (.*)\n", s["prompt"])[1] for s in game["states"]]
    check_answers([s["response"] for s in game["states"]], [None if s == "None" else s for s in shown])
    assert {envs.parse_plan_execute(s["response"]).subgoal for s in game["states"]} <= {
        "take the key",
        "open the chest",
    }


def test_a_label_keeps_or_switches_against_the_subgoal_the_models_prompt_shows() -> None:
    """In the model's own states (DAgger) the subgoal in force is the model's text: the label copies
    it with KEEP when it names the demonstrator's phase, else SWITCHes to that phase's subgoal."""
    env = envs.make_env("keychest", PLAN_EXECUTE)
    demonstrator = make_demonstrator("keychest", "expert")
    labels = {}
    for own in ("take the key", "look around"):
        episode = new_episode(*env.reset(seed=0))
        answer = f"<switch>SWITCH</switch><subgoal>{own}</subgoal><action>go north</action>"
        observation, reward, terminated, truncated, info = env.step(answer)
        episode.add_env_step(
            observation, answer, reward, infos=info, terminated=terminated, truncated=truncated
        )
        labels[own] = demonstrated_response(demonstrator, env, episode)
    assert (
        labels["take the key"]
        == "<switch>KEEP</switch><subgoal>take the key</subgoal><action>go east</action>"
    )
    assert labels["look around"].startswith("<switch>SWITCH</switch><subgoal>take the key</subgoal>")


def test_answer_format_option_refuses_a_contradicting_env_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = sft_args(
        tmp_path / "m", "--env-config", json.dumps(PLAN_EXECUTE), "--answer-format", "think_action"
    )
    assert cli.main(command) == 2
    assert "contradicts" in capsys.readouterr().err and not (tmp_path / "m").exists()


def test_think_action_demonstrations_are_unchanged_and_plan_execute_plays_the_same_commands() -> None:
    config = {"max_steps": 10}
    demonstrator = make_demonstrator("keychest", "expert")
    seed = task_seeds(0, 1)[0]
    plain = play_demonstration(
        envs.make_env("keychest", config), demonstrator, prompt_renderer("keychest", config, 2), seed
    )
    # As written before the plan-execute format existed (demonstration format 3).
    assert [s["response"] for s in plain["steps"]] == [
        f"<think>The next step of my task is to {c}.</think><action>{c}</action>"
        for c in ["go north", "go east", "go north", "take key", "go south", "open chest"]
    ]
    assert plain["steps"][1]["prompt"] == (
        "Task: Take the key, then open the chest. Opening it without the key springs a trap.\n"
        "History:\n[Observation 1: 'You are in the cellar. Exits: north.', Action 1: 'go north']\n"
        "Now: You are in the study. Exits: south, east.\nActions: go south | go east"
    )
    config = {**config, **PLAN_EXECUTE}
    planned = play_demonstration(
        envs.make_env("keychest", config), demonstrator, prompt_renderer("keychest", config, 2), seed
    )
    subgoals = check_episode(planned["steps"])
    assert planned["won"] and len(planned["steps"]) == len(plain["steps"])
    for before, after, shown in zip(plain["steps"], planned["steps"], ["None", *subgoals], strict=False):
        assert (
            envs.parse_plan_execute(after["response"]).command
            == envs.parse_action(before["response"]).command
        )
        assert after["prompt"] == f"{before['prompt']}\nSubgoal: {shown}\n{PLAN_TAG_INSTRUCTION}"
    # The recipes' digests do not change (the format is an env_config entry they do not name).
    main_recipe = warm_start_recipe("alfworld", 2)
    assert str(recipe_directory(main_recipe)) == "warm_starts/alfworld-94e6db4769/dagger-eabffa2b-2"
    planned_recipe = warm_start_recipe("alfworld", 2, answer_format="plan_execute")
    assert recipe_record(planned_recipe)["env_config"]["answer_format"] == "plan_execute"
    assert recipe_directory(planned_recipe).parent != recipe_directory(main_recipe).parent


def test_the_alfworld_searcher_demonstrates_its_phases_as_subgoals() -> None:
    """Three training games (cool, heat, pick two), played only: valid answers that win, with
    subgoals that follow the searcher's phases and prompts that show the subgoal in force."""
    wanted = {
        "pick_cool_then_place_in_recep": ["find", "take", "cool", "put"],
        "pick_heat_then_place_in_recep": ["find", "take", "heat", "put"],
        "pick_two_obj_and_place": ["find", "take", "put", "find", "take", "put"],
    }
    config = {"split": "train", "max_steps": 50, **PLAN_EXECUTE}
    env, searcher = envs.make_env("alfworld", config), make_demonstrator("alfworld", "searcher", 2)
    render = prompt_renderer("alfworld", config, 2)
    for seed in (3, 4, 5):
        record = play_demonstration(env, searcher, render, seed)
        assert record["won"]
        subgoals = check_episode(record["steps"])
        assert all(SEARCHER_SUBGOAL.fullmatch(s) for s in subgoals), subgoals
        assert [s.split()[0] for s in phases(subgoals)] == wanted[record["task_type"]]
        for step, shown in zip(record["steps"], ["None", *subgoals], strict=False):
            assert step["prompt"].count(f"\nYour current subgoal is: {shown}\n") == 1


def test_each_expert_names_its_phases() -> None:
    """WebShop's buyer: search, choose the item, choose the options, buy (read from the command and
    the page); an env whose expert has no phases refuses the format in one clear error."""
    results, product = {"clickables": ["next >", "b0123"]}, {"clickables": ["red", "buy now"]}
    assert webshop_subgoal("search[red shoes]", results) == "search for red shoes"
    assert (
        webshop_subgoal("click[b0123]", results)
        == webshop_subgoal("click[next >]", results)
        == "choose the item"
    )
    assert webshop_subgoal("click[red]", product) == "choose the options"
    assert webshop_subgoal("click[buy now]", product) == "buy it"
    with pytest.raises(ValueError, match="names no subgoals.*use the searcher"):
        make_demonstrator("alfworld", "expert").subgoal(None, [], [], [], "go to desk 1")


def test_hiper_alfworld_from_a_warm_start_in_the_format_has_a_critic(
    warm_start: Path,
) -> None:
    """``--warm-start DIR`` on hiper_alfworld.py: the critic starts from the warm start's own
    weights (before, the config had no critic and its validation refused it)."""
    config = load_experiment_file(TUNED / "hiper_alfworld.py", {"warm_start": str(warm_start)}).config
    config.validate()
    assert config.user_model_config()["critic"] == config.user_model_config()["model"] == str(warm_start)
    settings = {"warm_start": str(warm_start), "critic": "tiny-qwen2"}
    named = load_experiment_file(TUNED / "hiper_alfworld.py", settings).config
    assert named.user_model_config()["critic"] == "tiny-qwen2"
