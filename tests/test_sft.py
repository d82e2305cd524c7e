"""``rllib sft``: demonstrations rendered with RL's own prompts, a loadable and resumable warm start,
and the ALFWorld searcher that decides from the prompt's window alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

import envs
from envs.alfworld.logic import TASK_TYPES
from envs.alfworld.searcher import Searcher, Task, View, decide, parse_task
from hgpo_rllib import cli, sft
from hgpo_rllib.evaluation import CheckpointPolicy, evaluate

MICRO = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
         "num_key_value_heads": 1}


def sft_args(out: Path, *extra: str) -> list[str]:
    return ["sft", "--env", "keychest", "--episodes", "2", "--output", str(out), "--model", json.dumps(MICRO),
            "--vocab-size", "300", "--max-new-tokens", "16", "--batch-size", "4", "--epochs", "1",
            "--save-steps", "1", *extra]


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A micro warm start, trained in two sessions: one stopped by the time limit, then resumed."""
    out = tmp_path_factory.mktemp("sft") / "model"
    assert cli.main(sft_args(out, "--max-minutes", "0")) == 0
    first = json.loads((out / sft.SFT_CONFIG).read_text())
    assert first["optimizer_steps"] == 1 and not first["finished"]
    assert (out / "config.json").is_file()  # usable already
    assert cli.main(sft_args(out)) == 0
    return out


def test_sft_resumes_and_then_refuses_to_overwrite(
    warm_start: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = json.loads((warm_start / sft.SFT_CONFIG).read_text())
    assert settings["finished"] and settings["optimizer_steps"] == -(-settings["examples"] // 4) > 1
    assert settings["episodes_won"] == 2 and settings["env"] == "keychest"
    assert cli.main(sft_args(warm_start)) == 2
    assert "already holds a finished warm start" in capsys.readouterr().err
    assert cli.main(sft_args(warm_start.parent / "other", "--seed", "1")) == 0  # a new directory is fine
    assert cli.main([*sft_args(warm_start.parent / "other"), "--lr", "0.1"]) == 2


def test_dagger_rounds_learn_the_demonstrators_answers_in_the_models_own_states(
    warm_start: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dagger = ["--dagger-rounds", "2", "--dagger-episodes", "2"]
    assert cli.main([*sft_args(warm_start), *dagger]) == 0  # the finished warm start is built on
    rounds = sorted(warm_start.glob("dagger-*"))
    assert [r.name[-2:] for r in rounds] == ["-1", "-2"]
    for round_, model_dir in enumerate(rounds, start=1):
        settings = json.loads((model_dir / sft.SFT_CONFIG).read_text())
        assert settings["finished"] and settings["dagger_round"] == round_ and settings["played"] == 2
        played = [json.loads(line) for line in (model_dir / "dagger_states.jsonl").read_text().splitlines()]
        # New tasks each round, after the demonstrations' (0 and 1); every state the model met is labelled.
        assert [r["task_seed"] for r in played] == [2 * round_, 2 * round_ + 1]
        assert [len(r["states"]) for r in played] == [r["steps"] for r in played] and played[0]["steps"]
        assert all(s["response"].startswith("<think>The next step") for r in played for s in r["states"])
    states = [json.loads(line)["steps"] for r in rounds for line in (r / "dagger_states.jsonl").open()]
    assert settings["dagger_states"] == sum(states)  # the last round learns every round's states
    assert f"written to {rounds[-1]}" in capsys.readouterr().out
    assert CheckpointPolicy(rounds[-1]).config.history_length == 2  # a model directory like the warm start
    assert cli.main([*sft_args(warm_start), *dagger]) == 2  # finished: never trained over
    assert "already holds a finished warm start" in capsys.readouterr().err
    assert cli.main([*sft_args(warm_start), "--lr", "0.1", *dagger]) == 2  # not the warm start it was
    assert "finished run with other settings (lr)" in capsys.readouterr().err


def episode_of(observations: list[str], actions: list[str], infos: list[dict[str, Any]]) -> Any:
    """An RLlib episode as the env runner builds it from the steps so far."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    episode = SingleAgentEpisode()
    episode.add_env_reset(observation=observations[0], infos=infos[0])
    for observation, action, info in zip(observations[1:], actions, infos[1:], strict=True):
        episode.add_env_step(observation, action, 0.0, infos=info)
    return episode


def test_sft_prompts_are_the_tokens_rl_feeds_the_policy(warm_start: Path) -> None:
    """Replaying the stored demonstrations, the warm start's RL prompt pipeline (as ``rllib evaluate``
    and the env runners build it, K = 2) reproduces every training example's prompt token for token."""
    policy = CheckpointPolicy(warm_start)
    assert policy.config.history_length == 2
    settings = json.loads((warm_start / sft.SFT_CONFIG).read_text())
    records = [json.loads(line) for line in (warm_start / sft.DEMONSTRATIONS).read_text().splitlines()]
    steps = [s for r in records for s in r["steps"]]
    rows = iter(sft.tokenize_examples(policy.module.tokenizer, steps, settings["max_prompt_tokens"]).rows)
    env = envs.make_env("keychest", settings["env_config"])
    checked = 0
    for record in records:
        observation, info = env.reset(seed=record["task_seed"])
        observations, actions, infos = [observation], [], [info]
        for step in record["steps"]:
            row = next(rows)
            expected = [t for t, label in zip(row["input_ids"], row["labels"], strict=True)
                        if label == sft.IGNORE_INDEX]
            episode = episode_of(observations, actions, infos)
            batch = policy.prompt_pipeline(
                rl_module=policy.module, batch={}, episodes=[episode], explore=False
            )
            assert batch["prompt_ids"][0][batch["prompt_mask"][0].bool()].tolist() == expected
            observation, _, _, _, info = env.step(step["response"])
            observations.append(observation)
            actions.append(step["response"])
            infos.append(info)
            checked += 1
    assert checked >= 8 and len(observations) > 3  # some prompts show a full K = 2 history window


def test_train_on_prompt_puts_labels_on_the_prompt_too(warm_start: Path) -> None:
    tokenizer = CheckpointPolicy(warm_start).module.tokenizer
    steps = [{"prompt": "You are in room 1. Your task is to: open the chest.",
              "response": "<think>go</think><action>go east</action>"}]
    response_only = sft.tokenize_examples(tokenizer, steps, 64)
    whole = sft.tokenize_examples(tokenizer, steps, 64, train_on_prompt=True)
    prompt_tokens = whole.prompt_tokens[0]
    assert response_only.prompt_tokens == [prompt_tokens] and 0 < prompt_tokens < len(whole.rows[0]["labels"])
    assert whole.rows[0]["labels"] == whole.rows[0]["input_ids"] == response_only.rows[0]["input_ids"]
    labels = response_only.rows[0]["labels"]
    assert labels[:prompt_tokens] == [sft.IGNORE_INDEX] * prompt_tokens
    assert labels[prompt_tokens:] == whole.rows[0]["input_ids"][prompt_tokens:]


def test_warm_start_is_a_model_dir_for_rl_and_evaluate(warm_start: Path, tmp_path: Path) -> None:
    module = sft.warm_start_module(sft.warm_start_config(warm_start))
    prompts = module.encode_prompts(["You are in room 1."])
    out = module.forward_inference(prompts)
    assert out["actions"].shape == (1, 16) and isinstance(out["action_text"][0], str)
    assert torch.equal(module.lm.get_input_embeddings().weight, module.lm.get_output_embeddings().weight)
    out_dir = tmp_path / "eval"
    summary = evaluate(warm_start, env="keychest", seeds=[1], episodes=2, output=out_dir, baselines=[],
                       env_config={"max_steps": 2})
    assert list(summary["policy"]) == ["checkpoint"]
    assert len(pd.read_csv(out_dir / "episodes.csv")) == 2


def test_sft_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="alfworld only"):
        sft.make_demonstrator("keychest", "searcher")
    with pytest.raises(ValueError, match="episodes >= 1"):
        sft.train_warm_start(tmp_path / "a", env="keychest", episodes=0)
    with pytest.raises(ValueError, match="unknown environment"):
        sft.train_warm_start(tmp_path / "b", env="chess", episodes=1)


# ------------------------------------------------------------------------------------------ searcher
ROOM = ("You are in the middle of a room. Looking quickly around you, you see a countertop 1, a drawer 3, "
        "a fridge 1, and a garbagecan 1.\n\nYour task is to: put some apple on fridge.")
GO = ["go to countertop 1", "go to drawer 3", "go to fridge 1", "go to garbagecan 1"]


def view(task: str, window: list[tuple[str, str]], observation: str, admissible: list[str]) -> View:
    return View(parse_task(task), window, observation, admissible)


@pytest.mark.parametrize(("text", "task"), [
    ("put some apple on fridge.", ("pick_and_place_simple", "apple", "fridge")),
    ("look at mug under the desklamp.", ("look_at_obj_in_light", "mug", "desklamp")),
    ("examine the keychain with the floorlamp.", ("look_at_obj_in_light", "keychain", "floorlamp")),
    ("clean some soapbar and put it in toilet.", ("pick_clean_then_place_in_recep", "soapbar", "toilet")),
    ("put a hot egg in countertop.", ("pick_heat_then_place_in_recep", "egg", "countertop")),
    ("put a cool tomato in diningtable.", ("pick_cool_then_place_in_recep", "tomato", "diningtable")),
    ("find two pen and put them in desk.", ("pick_two_obj_and_place", "pen", "desk")),
])
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
    tail_observations = ["You arrive at garbagecan 1. On the garbagecan 1, you see nothing.",
                         "You arrive at countertop 1. On the countertop 1, you see a knife 1."]
    tail_commands = ["go to garbagecan 1", "go to countertop 1"]
    admissible = [a for a in GO if a != "go to countertop 1"]
    decisions = {
        searcher.act(None, [ROOM, *older, *tail_observations], [*older_commands, *tail_commands], admissible)
        for older, older_commands in [([], []), (["You arrive at drawer 3. The drawer 3 is closed."],
                                                 ["go to drawer 3"])]
    }
    assert decisions == {("I need a apple. There is none at the countertop 1. Next I check the fridge 1.",
                          "go to fridge 1")}


def test_the_searcher_carries_treats_and_puts_at_the_first_target() -> None:
    task = "put a hot apple in countertop."
    took = "You pick up the apple 2 from the fridge 1."
    elsewhere = ["go to countertop 1", "go to countertop 2", "go to microwave 1", "examine apple 2"]
    window = [("You open the fridge 1.", "take apple 2 from fridge 1")]
    assert decide(view(task, window, took, elsewhere)) == (
        "I have the apple 2. I heat it at the microwave 1.", "go to microwave 1")
    at_tool = ["go to countertop 1", "go to countertop 2", "examine apple 2", "heat apple 2 with microwave 1"]
    window = [("You open the fridge 1.", "take apple 2 from fridge 1"), (took, "go to microwave 1")]
    assert decide(view(task, window, "You arrive at microwave 1.", at_tool))[1] == (
        "heat apple 2 with microwave 1")
    window = [(took, "go to microwave 1"), ("You arrive at microwave 1.", "heat apple 2 with microwave 1")]
    thought, command = decide(view(task, window, "You heat the apple 2 using the microwave 1.", elsewhere))
    assert command == "go to countertop 1" and thought.startswith("The apple 2 is hot")
    # At the target the move goes there, not to another receptacle that shares the spot.
    at_home = ["go to countertop 2", "go to microwave 1", "examine apple 2", "move apple 2 to garbagecan 1",
               "move apple 2 to countertop 1"]
    window = [("You arrive at microwave 1.", "heat apple 2 with microwave 1"),
              ("You heat the apple 2 using the microwave 1.", "go to countertop 1")]
    assert decide(view(task, window, "You arrive at countertop 1.", at_home))[1] == (
        "move apple 2 to countertop 1")


def test_the_searcher_knows_what_it_carries_where_it_cannot_put_it() -> None:
    """No receptacle here takes a baseball bat, so only ``examine`` shows that the agent holds one."""
    task = "examine the baseballbat with the desklamp."
    admissible = ["examine baseballbat 1", "examine desk 1", "go to bed 1", "go to desk 2", "look"]
    window = [("You arrive at bed 1.", "take baseballbat 1 from bed 1"), ("You pick up ...", "go to desk 1")]
    thought, command = decide(view(task, window, "You arrive at desk 1.", admissible))
    assert command == "go to desk 2" and thought.startswith("I have the baseballbat 1 and need a desklamp")
    lamp_here = [*admissible, "use desklamp 1"]
    assert decide(view(task, window, "You arrive at desk 1.", lamp_here))[1] == "use desklamp 1"


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
            observation, _, terminated, truncated, info = env.step(sft.response_text(thought, command))
            observations.append(observation)
            commands.append(info["command"])
            done = terminated or truncated
        won.setdefault(info["task_type"], []).append(info["won"] and info["is_action_valid"])
    assert set(won) == set(TASK_TYPES) and all(all(w) for w in won.values())


def test_alfworld_cpu_run_can_start_from_a_warm_start(
    warm_start: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HGPO_WARM_START`` switches the main job's CPU default to the warm start, in free text."""
    monkeypatch.setenv("HGPO_WARM_START", str(warm_start))
    example = Path(__file__).parents[1] / "tuned_examples" / "hgpo_alfworld.py"
    experiment = cli.load_experiment_file(example)
    config = experiment.config
    config.validate()
    assert config.model_config["model"] == str(warm_start.resolve())
    assert not config.model_config.get("constrain_to_admissible")
    assert "action_vocabulary" not in config.model_config
    assert "require_tags" not in config.env_config and config.history_length == 2
    assert config.kl_coeff > 0 and config.lr <= 1e-5  # RL stays near the warm start (README, ALFWorld on CPU)
    assert experiment.stop == {"time_total_s": 1800}
    monkeypatch.setenv("HGPO_K", "4")
    with pytest.raises(ValueError, match="warm start's K=2"):
        cli.load_experiment_file(example)


def test_the_main_job_builds_its_warm_start_on_first_use(
    warm_start: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``HGPO_WARM_START`` the CPU main job starts from the cached ALFWorld warm start."""
    recipes = []
    monkeypatch.setattr(sft, "cached_warm_start", lambda recipe: recipes.append(recipe) or warm_start)
    monkeypatch.delenv("HGPO_WARM_START")
    experiment = cli.load_experiment_file(Path(__file__).parents[1] / "tuned_examples" / "hgpo_alfworld.py")
    assert recipes == [sft.ALFWORLD_WARM_START]
    assert experiment.config.model_config["model"] == str(warm_start.resolve())
    assert experiment.stop == {"time_total_s": 1800}


def test_cached_warm_start_is_built_once_per_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = {"env": "keychest", "episodes": 2, "model": MICRO, "vocab_size": 300, "max_new_tokens": 16,
              "batch_size": 4, "epochs": 1.0}
    built = sft.cached_warm_start(recipe, cache_dir=tmp_path)
    assert json.loads((built / sft.SFT_CONFIG).read_text())["finished"]
    monkeypatch.setattr(sft, "train_warm_start", lambda *a, **k: pytest.fail("rebuilt a cached warm start"))
    assert sft.cached_warm_start(recipe, cache_dir=tmp_path) == built
    monkeypatch.setenv("HGPO_CACHE", str(tmp_path))  # the variable names the same cache
    assert sft.cached_warm_start(recipe) == built
    with pytest.raises(pytest.fail.Exception, match="rebuilt"):  # another recipe is another directory
        sft.cached_warm_start({**recipe, "epochs": 2.0}, cache_dir=tmp_path)
    # DAgger rounds build on the recipe's warm start, in a directory of their own inside it.
    dagger = {**recipe, "dagger": {"rounds": 1, "episodes": 1}}
    with_dagger = sft.cached_warm_start(dagger, cache_dir=tmp_path)
    assert with_dagger.parent == built and json.loads((with_dagger / sft.SFT_CONFIG).read_text())["finished"]
    monkeypatch.setattr(sft, "DEMONSTRATION_FORMAT", sft.DEMONSTRATION_FORMAT + 1)
    with pytest.raises(pytest.fail.Exception, match="rebuilt"):  # new demonstration texts: a new build
        sft.cached_warm_start(recipe)


def test_the_suite_runs_with_a_temporary_home() -> None:
    """conftest.py points HOME at a temporary directory before Ray is imported, so algorithms built
    outside Tune log there, not into the user's ~/ray_results."""
    from ray.train.constants import DEFAULT_STORAGE_PATH

    home = Path.home()
    assert home.name.startswith("hgpo-tests-home-") and Path(DEFAULT_STORAGE_PATH).parent == home
