"""Each env's facts live with the env (issue 60, item 5): the built-in envs declare what the generic
modules used to know of them by name, and a user's env in its own file declares a split and a score
that ``rllib evaluate`` plays and reports."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import ROOT, run_python
from safetensors.torch import save_file

import envs
from envs import DemonstrationCost, EnvFacts, EvaluationFacts, PaperFacts, WarmStartFacts
from envs.file_import import load_object
from hgpo_rllib import cli
from hgpo_rllib.warm_start.cache import (
    demonstration_format,
    recipe_directory,
    shipped_warm_start,
    warm_start_recipe,
)
from hgpo_rllib.warm_start.demonstrations import make_demonstrator

ALFWORLD_SPLITS = {
    "in": ("eval_in_distribution",),
    "out": ("eval_out_of_distribution",),
    "all": ("eval_in_distribution", "eval_out_of_distribution"),
}


def test_alfworld_declares_its_splits_categories_searcher_and_paper_settings() -> None:
    facts = envs.env_facts("alfworld")
    assert facts.evaluation == EvaluationFacts(
        splits=ALFWORLD_SPLITS,
        default_split="out",
        category_column="task_type",
        categories=("Pick", "Look", "Clean", "Heat", "Cool", "Pick2"),
        fixed_games=True,
    )
    assert facts.warm_start.env_config == {"split": "train", "max_steps": 50}
    assert facts.warm_start.demonstrator == "searcher"
    assert facts.warm_start.searcher == "envs.alfworld.searcher:Searcher"
    assert facts.warm_start.expert_subgoal is None
    assert facts.warm_start.cost == DemonstrationCost(3.2, 13.7, 490)
    assert facts.warm_start.demonstration_format == 3
    assert facts.warm_start.recipe == {
        "env": "alfworld",
        "episodes": 800,
        "epochs": 1.5,
        "demonstrator": "searcher",
        "train_on_prompt": True,
        "dagger": {"rounds": 2, "episodes": 96},
    }
    assert facts.paper == PaperFacts(
        max_steps=50,
        validation_env_config={"split": "eval_in_distribution"},
        micro_batch={"paper-1.5b": 16, "paper-7b": 8},
        adv_mode="mean_std_norm",
        minibatch_size=256,
        hiper_keep_penalty=-0.3,
        hiper_bootstrap_truncated=True,
    )


def test_webshop_declares_its_test_goals_score_searcher_and_paper_settings() -> None:
    facts = envs.env_facts("hgpo/WebShop-v0")
    assert facts.evaluation == EvaluationFacts(env_config={"split": "test"}, score_columns=("score",))
    assert facts.warm_start.env_config == {"max_steps": 15}
    assert facts.warm_start.demonstrator == "expert"
    assert facts.warm_start.searcher == "envs.webshop.searcher:Searcher"
    assert facts.warm_start.expert_subgoal == "envs.webshop.expert:expert_subgoal"
    assert facts.warm_start.cost == DemonstrationCost(0.005, 4.9, 1380)
    assert facts.warm_start.demonstration_format == 4
    assert facts.warm_start.recipe == {
        "env": "webshop",
        "episodes": 1500,
        "demonstrator": "searcher",
        "epochs": 1.5,
        "history_length": 4,
        "train_on_prompt": True,
        "max_prompt_tokens": 3584,
        "max_new_tokens": 128,
        "whole_words": True,
    }
    assert facts.paper == PaperFacts(
        max_steps=30,
        validation_env_config={"split": "test"},
        micro_batch={"paper-1.5b": 4, "paper-7b": 2},
        adv_mode="mean_norm",
        minibatch_size=64,
        hiper_keep_penalty=-3.5,
        hiper_bootstrap_truncated=False,
    )


def test_keychest_has_the_defaults_but_its_step_limit_and_expert_subgoals() -> None:
    facts = envs.env_facts("keychest")
    assert facts == EnvFacts(
        warm_start=WarmStartFacts(
            env_config={"max_steps": 10}, expert_subgoal="envs.keychest.env:expert_subgoal"
        )
    )
    # The defaults: no split choice, success only, the expert, ALFWorld's cost, format 3, no paper preset.
    assert facts.evaluation == EvaluationFacts() and facts.paper is None
    assert facts.warm_start.cost == DemonstrationCost(3.2, 13.7, 490)
    assert facts.warm_start.demonstration_format == 3 and facts.warm_start.recipe is None


@pytest.mark.parametrize("game", ["alfworld", "webshop", "keychest"])
def test_a_team_is_evaluated_and_run_as_its_game_and_demonstrated_by_its_expert_team(game: str) -> None:
    team, own = envs.env_facts(f"{game}_team"), envs.env_facts(game)
    assert team.evaluation == own.evaluation and team.paper == own.paper
    assert team.warm_start == WarmStartFacts()  # as before: no env defaults, format 3


@pytest.mark.parametrize("spec", envs.registry.builtin_specs(), ids=lambda spec: spec.name)
def test_a_built_in_env_class_declares_the_facts_its_spec_names(spec: envs.registry.EnvSpec) -> None:
    assert load_object(spec.entry_point).FACTS is envs.env_facts(spec.name)


def test_a_built_in_envs_facts_are_read_without_importing_its_engine() -> None:
    """The cache names and the evaluation's splits need no game engine (nor RLlib, for a team)."""
    code = (
        "import sys, envs\n"
        "for name in ('alfworld', 'webshop', 'keychest', 'alfworld_team'): envs.env_facts(name)\n"
        "loaded = [m for m in ('envs.alfworld.env', 'envs.webshop.env', 'envs.keychest.env', 'ray.rllib')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    run_python(code, cwd=ROOT, timeout=120)


def test_the_recipes_keep_their_cache_names_and_find_the_shipped_warm_starts() -> None:
    """The digests include the demonstration format: the shipped warm starts are still found."""
    assert demonstration_format("alfworld") == 3 and demonstration_format("webshop") == 4
    assert demonstration_format("keychest") == demonstration_format("webshop_team") == 3
    main_job = envs.env_facts("alfworld").warm_start.recipe
    assert warm_start_recipe("alfworld") == warm_start_recipe("alfworld", 2) == main_job
    assert warm_start_recipe("webshop") == warm_start_recipe("webshop", 4)
    assert warm_start_recipe("alfworld", 4)["history_length"] == 4
    for history_length, answer_format, directory in [
        (2, None, "alfworld-94e6db4769"),
        (4, None, "alfworld-62e42d9e81"),
        (2, "plan_execute", "alfworld-a7eabedd13"),
    ]:
        shipped = shipped_warm_start(warm_start_recipe("alfworld", history_length, answer_format))
        assert shipped is not None and shipped.parent.name == directory
    with pytest.raises(ValueError, match="'keychest' has no warm-start recipe"):
        warm_start_recipe("keychest")


def test_a_pretrained_bases_recipe_is_named_after_the_bases_weights(tmp_path: Path) -> None:
    """WebShop's recipe for SmolLM2 is its facts' (K = 2, 1,000-token prompts, the answers' loss); a
    base's warm start is named after the base's weights, so another file under the same name is
    another warm start, and the same weights the same one."""
    assert warm_start_recipe("webshop", base="smollm2-135m-instruct") == {
        "env": "webshop",
        "base": "smollm2-135m-instruct",
        "episodes": 320,
        "demonstrator": "searcher",
        "epochs": 1.5,
        "batch_size": 4,
        "history_length": 2,
        "max_prompt_tokens": 1000,
    }
    assert warm_start_recipe("webshop", 4, base="smollm2-135m-instruct")["history_length"] == 4
    alfworld = warm_start_recipe("alfworld", base="smollm2-135m-instruct")
    assert (alfworld["episodes"], alfworld["epochs"], alfworld["history_length"]) == (128, 1.0, 2)
    with pytest.raises(ValueError, match="'webshop' has no warm-start recipe for the base 'other'"):
        warm_start_recipe("webshop", base="other")
    with pytest.raises(ValueError, match=r"base_recipes\['a'\] must train that base, not 'b'"):
        WarmStartFacts(base_recipes={"a": {"env": "webshop", "base": "b"}})

    def directory(weights: torch.Tensor, name: str = "base") -> Path:
        base = tmp_path / name
        base.mkdir(exist_ok=True)
        save_file({"w": weights}, base / "model.safetensors")
        return recipe_directory({"env": "webshop", "base": str(tmp_path / "base"), "episodes": 1})

    first = directory(torch.zeros(2))
    assert directory(torch.zeros(2)) == first
    assert directory(torch.ones(2)) != first
    assert first.parent == Path("warm_starts") and first.name.startswith("webshop-")


def test_demonstrators_come_from_the_facts() -> None:
    assert type(make_demonstrator("alfworld", "searcher")).__module__ == "envs.alfworld.searcher"
    assert make_demonstrator("keychest", "expert").subgoal_of is not None
    with pytest.raises(ValueError, match="'keychest' has no demonstrator 'searcher'"):
        make_demonstrator("keychest", "searcher")


def test_facts_refuse_what_cannot_be_played() -> None:
    with pytest.raises(ValueError, match="default_split must be one of"):
        EvaluationFacts(splits={"test": ("test",)})
    with pytest.raises(ValueError, match="categories need a category_column"):
        EvaluationFacts(categories=("a",))
    with pytest.raises(ValueError, match="needs a searcher"):
        WarmStartFacts(demonstrator="searcher")


USER_ENV = '''
from envs import EnvFacts, EvaluationFacts, Observation, TextEnv


class CoinEnv(TextEnv):
    """Call a coin toss; a holdout toss is another draw of the same seed."""

    default_require_tags = False
    FACTS = EnvFacts(
        evaluation=EvaluationFacts(
            splits={"holdout": ("holdout",), "both": ("train", "holdout")},
            default_split="holdout",
            score_columns=("score",),
            category_column="task_type",
            categories=("heads", "tails"),
        )
    )

    def __init__(self, split="train", max_steps=2, require_tags=None):
        super().__init__(max_steps=max_steps, require_tags=require_tags)
        self.split = split

    def _start_episode(self, seed, options):
        train_draw, holdout_draw = self.np_random.integers(2, size=2)
        self.side = ("heads", "tails")[holdout_draw if self.split == "holdout" else train_draw]
        return Observation("Heads or tails?", ["heads", "tails"]), "call the coin", self.side

    def _execute(self, command):
        won = command == self.side
        text = "Right." if won else "Wrong."
        return Observation(text, [], 1.0 * won, True, won, {"score": 0.5 + 0.5 * won})

    def _observation_unchanged(self):
        return "Say heads or tails."
'''


def test_a_user_env_in_its_own_file_is_evaluated_on_its_split_with_its_score(tmp_path: Path) -> None:
    """``rllib evaluate --env file.py:Class``: the env's default split choice is played and labelled,
    its score column and categories are reported beside success."""
    file = tmp_path / "coin.py"
    file.write_text(USER_ENV)
    env = f"{file}:CoinEnv"
    assert envs.env_facts(env).evaluation.score_columns == ("score",)
    common = ["evaluate", "--env", env, "--baselines", "random", "--seeds", "1", "2", "--episodes", "8"]
    assert cli.main([*common, "--output", str(tmp_path / "eval")]) == 0
    summary = pd.read_csv(tmp_path / "eval" / "summary.csv")
    assert list(summary.columns) == [
        "split",
        "policy",
        "success",
        "steps",
        "invalid_rate",
        "length_cut_rate",
        "prompt_cut_rate",
        "score",
        "heads",
        "tails",
    ]
    assert list(summary["split"]) == ["holdout"]
    # The random baseline generates nothing: no turn of it is cut or not.
    assert summary[["length_cut_rate", "prompt_cut_rate"]].isna().all().all()
    per_seed = pd.read_csv(tmp_path / "eval" / "per_seed.csv")
    # The score is 50% for a loss and 100% for a win, in percent as success is.
    assert ((per_seed["score"] - (50 + per_seed["success"] / 2)).abs() < 1e-6).all()
    assert "split `holdout`: 8 episodes per seed and policy" in (tmp_path / "eval" / "summary.md").read_text()
    # Another choice plays each of its splits, labelled; a choice the env has not is refused.
    assert cli.main([*common, "--split", "both", "--output", str(tmp_path / "both")]) == 0
    assert sorted(pd.read_csv(tmp_path / "both" / "summary.csv")["split"]) == ["holdout", "train"]
    assert cli.main([*common, "--split", "out", "--output", str(tmp_path / "refused")]) == 2
    assert not (tmp_path / "refused").exists()


GENERIC_MODULES = ROOT / "hgpo_rllib"
BUILT_IN_NAMES = {spec.name for spec in envs.registry.builtin_specs()}


def test_no_generic_module_compares_an_env_name() -> None:
    """Generic code asks the env's facts; a comparison with a built-in env's name is a branch on it."""
    found = []
    for path in sorted(GENERIC_MODULES.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                constants = [n for n in ast.walk(node) if isinstance(n, ast.Constant)]
                if any(isinstance(c.value, str) and c.value in BUILT_IN_NAMES for c in constants):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value in BUILT_IN_NAMES for k in node.keys
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} (a table keyed by env names)")
    assert not found, "\n".join(found)
