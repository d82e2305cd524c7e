"""``rllib sft``: demonstrations rendered with RL's own prompts, a loadable and resumable warm start,
and the ALFWorld searcher that looks for what it has not seen."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

import envs
from envs.alfworld.searcher import Memory, Searcher
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
class PlannerOnly:
    """Stands in for ALFWorldEnv: a planner that knows the apple is in drawer 3."""

    unwrapped: Any

    def __init__(self, plan: list[str]):
        self.plan = plan
        self.unwrapped = self
        self.calls = 0

    def expert_plan(self) -> list[str]:
        self.calls += 1
        return list(self.plan)


ROOM = ("You are in the middle of a room. Looking quickly around you, you see a countertop 1, a drawer 3, "
        "a fridge 1, and a garbagecan 1.\n\nYour task is to: put some apple in fridge.")
ADMISSIBLE = ["go to countertop 1", "go to drawer 3", "go to fridge 1", "go to garbagecan 1", "look"]


def test_searcher_looks_for_an_unseen_object_instead_of_following_the_planner() -> None:
    env = PlannerOnly(["go to drawer 3", "open drawer 3", "take apple 1 from drawer 3", "go to fridge 1",
                       "open fridge 1", "put apple 1 in/on fridge 1"])
    searcher = Searcher()
    thought, command = searcher.act(env, [ROOM], [], ADMISSIBLE)
    assert command == "go to countertop 1" and "not seen" in thought  # first place an apple can be
    assert "I am in the middle of the room; the countertop 1" in thought
    observations = [ROOM, "You arrive at loc 1. On the countertop 1, you see a apple 2, and a knife 1."]
    commands = ["go to countertop 1"]
    admissible = [*ADMISSIBLE, "take apple 2 from countertop 1"]
    thought, command = searcher.act(env, observations, commands, admissible)
    assert command == "take apple 2 from countertop 1"  # the seen apple, not the planner's apple 1
    assert thought.startswith("I need a apple. The apple 2 is here")  # the type first, then the match
    observations.append("You pick up the apple 2 from the countertop 1.")
    commands.append(command)
    env.plan = ["go to fridge 1", "open fridge 1", "put apple 2 in/on fridge 1"]
    assert searcher.act(env, observations, commands, ADMISSIBLE)[1] == "go to fridge 1"
    observations.append("You arrive at loc 3. The fridge 1 is closed.")
    commands.append("go to fridge 1")
    assert searcher.act(env, observations, commands, ADMISSIBLE)[1] == "open fridge 1"
    assert env.calls == 2  # the planner is asked again only after the searcher left its plan


@pytest.mark.parametrize("put", ["put apple 2 in/on fridge 1", "move apple 2 to fridge 1"])
def test_memory_reads_both_grammars(put: str) -> None:
    memory = Memory.from_history(
        [ROOM, "You arrive at drawer 3. The drawer 3 is closed.",
         "You open the drawer 3. The drawer 3 is open. In it, you see a apple 2, and a egg 1.",
         "You pick up the apple 2 from the drawer 3.",
         "You arrive at fridge 1. On the fridge 1, you see nothing.",
         f"You {put.split()[0]} the apple 2 {'in/on' if 'in/on' in put else 'to'} the fridge 1."],
        ["go to drawer 3", "open drawer 3", "take apple 2 from drawer 3", "go to fridge 1", put],
    )
    assert memory.seen == {"egg 1": "drawer 3", "apple 2": "fridge 1"}
    assert memory.looked_into == {"drawer 3", "fridge 1"} and not memory.closed and not memory.holding
    assert memory.placed == {"apple 2"} and memory.location == "fridge 1"


def test_searcher_wins_a_real_game_and_shows_searching() -> None:
    env = envs.make_env("alfworld", {"split": "train", "max_steps": 50})
    searcher = Searcher()
    observation, info = env.reset(seed=1)
    observations, commands, thoughts = [observation], [], []
    done = False
    while not done:
        thought, command = searcher.act(env, observations, commands, info["admissible_actions"])
        observation, _, terminated, truncated, info = env.step(sft.response_text(thought, command))
        observations.append(observation)
        commands.append(info["command"])
        thoughts.append(thought)
        done = terminated or truncated
    assert info["won"] and info["is_action_valid"]
    assert any("have not seen" in t for t in thoughts)


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
    monkeypatch.setattr(sft, "DEMONSTRATION_FORMAT", sft.DEMONSTRATION_FORMAT + 1)
    with pytest.raises(pytest.fail.Exception, match="rebuilt"):  # new demonstration texts: a new build
        sft.cached_warm_start(recipe)


def test_the_suite_runs_with_a_temporary_home() -> None:
    """conftest.py points HOME at a temporary directory before Ray is imported, so algorithms built
    outside Tune log there, not into the user's ~/ray_results."""
    from ray.train.constants import DEFAULT_STORAGE_PATH

    home = Path.home()
    assert home.name.startswith("hgpo-tests-home-") and Path(DEFAULT_STORAGE_PATH).parent == home
