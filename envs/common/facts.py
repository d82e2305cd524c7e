"""What the package's generic code needs to know about an env beyond the :class:`TextEnv` contract:
how ``rllib evaluate`` splits and reports it, how its warm start is demonstrated and built, and its
settings in the paper's presets.

An env class declares them as its ``FACTS`` (:class:`EnvFacts`); :func:`envs.env_facts` finds them
for any env name. The defaults fit a plain user env: no split choice, success only, the expert
demonstrates, no paper preset. This module imports nothing of RLlib or of ``hgpo_rllib`` (the
``envs`` package sits below both).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

#: The version of the demonstrators' texts of an env that names none (part of every warm start's
#: cache name: a bump builds new warm starts instead of reusing ones trained on the old texts).
DEMONSTRATION_FORMAT = 3
DEMONSTRATORS = ("expert", "searcher")


class DemonstrationCost(NamedTuple):
    """One demonstration episode: seconds to play it in one process, the examples it leaves (steps
    of won episodes) and their typical tokens at the env's usual K (a build's time estimates)."""

    seconds: float
    examples: float
    tokens: float


#: ALFWorld's measured cost (envs/alfworld/facts.py): an env that measured none is estimated like it.
DEFAULT_DEMONSTRATION_COST = DemonstrationCost(3.2, 13.7, 490)


@dataclass(frozen=True)
class EvaluationFacts:
    """How ``rllib evaluate`` (:mod:`hgpo_rllib.evaluation.protocol`) plays and reports the env."""

    #: ``--split`` choice -> the ``env_config["split"]`` values it plays, one table row each; empty:
    #: the env has no split choice.
    splits: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: The choice played without ``--split`` (one of ``splits``) unless ``env_config`` names a split.
    default_split: str | None = None
    #: env_config entries the evaluation plays unless the user's ``env_config`` sets them (a
    #: ``"split"`` here labels the table as a split does).
    env_config: Mapping[str, Any] = field(default_factory=dict)
    #: Episode column whose values group success into one column per category (the rollout's
    #: ``task_type``: ``info["task_category"]``, else ``info["task_type"]``); None: no such columns.
    category_column: str | None = None
    #: The categories reported, in table order (a category not played is NaN).
    categories: tuple[str, ...] = ()
    #: Final-``info`` values in [0, 1] reported beside success, in percent (an episode without one
    #: counts ``won``).
    score_columns: tuple[str, ...] = ()
    #: Each split is a fixed list of ``env.unwrapped.num_games`` games, all played by default.
    fixed_games: bool = False

    def __post_init__(self) -> None:
        if self.splits and self.default_split not in self.splits:
            raise ValueError(
                f"default_split must be one of {sorted(self.splits)}, got {self.default_split!r}"
            )
        if not self.splits and self.default_split is not None:
            raise ValueError("default_split needs splits to choose from")
        if self.categories and self.category_column is None:
            raise ValueError("categories need a category_column to read them from")


@dataclass(frozen=True)
class WarmStartFacts:
    """How a warm start of the env is demonstrated and built (:mod:`hgpo_rllib.warm_start`)."""

    #: env_config of the demonstrations, under the user's own (training tasks, step limits).
    env_config: Mapping[str, Any] = field(default_factory=dict)
    #: The demonstrator without ``--demonstrator``: "expert" (``expert_action()``) or "searcher".
    demonstrator: str = "expert"
    #: "module:Class" of a demonstrator that decides from what the prompt shows, built with K; None:
    #: the env has none.
    searcher: str | None = None
    #: "module:function" (unwrapped env before the command, command) -> the expert's subgoal, which
    #: plan-execute demonstrations by the expert need; None: its expert names no subgoals.
    expert_subgoal: str | None = None
    cost: DemonstrationCost = DEFAULT_DEMONSTRATION_COST
    #: Bump it when the demonstrators' thoughts or commands change (a new cache name).
    demonstration_format: int = DEMONSTRATION_FORMAT
    #: The env's own warm-start recipe (:mod:`hgpo_rllib.warm_start.cache`), if it has one.
    recipe: Mapping[str, Any] | None = None
    #: Recipes of a pretrained base's warm start (its LoRA adapter, ``rllib sft --model``), by the
    #: base's short name (``model_config["model"]``); the real-model CPU examples start from one that
    #: is built or shipped.
    base_recipes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.demonstrator not in DEMONSTRATORS:
            raise ValueError(f"demonstrator must be one of {DEMONSTRATORS}, got {self.demonstrator!r}")
        if self.demonstrator == "searcher" and self.searcher is None:
            raise ValueError("demonstrator 'searcher' needs a searcher ('module:Class')")
        for base, recipe in self.base_recipes.items():
            if recipe.get("base") != base:
                raise ValueError(f"base_recipes[{base!r}] must train that base, not {recipe.get('base')!r}")


@dataclass(frozen=True)
class PaperFacts:
    """The env's settings in the paper's presets (:mod:`hgpo_rllib.experiments.paper`)."""

    max_steps: int
    #: env_config of the validation during training, over the run's own.
    validation_env_config: Mapping[str, Any]
    #: Per-GPU micro-batch of the authors' scripts, per preset ("paper-1.5b", "paper-7b").
    micro_batch: Mapping[str, int]
    #: HGPO's advantage normalisation and minibatch size.
    adv_mode: str
    minibatch_size: int
    #: HiPER's penalty for keeping a subgoal, and whether it bootstraps truncated episodes.
    hiper_keep_penalty: float
    hiper_bootstrap_truncated: bool


@dataclass(frozen=True)
class EnvFacts:
    """An env's facts (an env class's ``FACTS``); see the module docstring."""

    evaluation: EvaluationFacts = field(default_factory=EvaluationFacts)
    warm_start: WarmStartFacts = field(default_factory=WarmStartFacts)
    #: None: the env has no paper preset.
    paper: PaperFacts | None = None

    def of_team(self) -> EnvFacts:
        """The facts of a team of roles playing this env: evaluated and run at paper scale as the
        env is; its warm start is its expert team's, of the default settings."""
        return EnvFacts(evaluation=self.evaluation, paper=self.paper)
