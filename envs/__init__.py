"""Text environments for LLM agents: ALFWorld, WebShop and the KeyChest memory probe, and the
registry that resolves a user's own (see :mod:`envs.registry`; a path's file: :mod:`envs.file_import`;
a tiny tokenizer's text: :mod:`envs.corpora`).

Importing this package registers ``hgpo/ALFWorld-v0``, ``hgpo/WebShop-v0`` and ``hgpo/KeyChest-v0``
with Gymnasium and ``alfworld``, ``webshop`` and ``keychest`` with Ray Tune / RLlib, and likewise their
turn-based multi-agent teams (docs/drmas.md): ``hgpo/ALFWorldTeam-v0`` / ``alfworld_team``,
``hgpo/WebShopTeam-v0`` / ``webshop_team`` and ``hgpo/KeyChestTeam-v0`` / ``keychest_team``.

``TeamTextEnv`` (:mod:`envs.common.team_env`) and ``PlannerExecutorTeam``
(:mod:`envs.common.planner_executor`) are imported on first use: they subclass RLlib's
``MultiAgentEnv``, and importing RLlib would make every ``import envs`` seconds slower.
"""

import importlib
from typing import Any

from envs.common.actions import (
    ANSWER_FORMATS,
    PLAN_EXECUTE,
    THINK_ACTION,
    ParsedAction,
    current_subgoal,
    parse_action,
    parse_plan_execute,
    plan_execute_blocks,
    subgoals_of_blocks,
)
from envs.common.facts import DemonstrationCost, EnvFacts, EvaluationFacts, PaperFacts, WarmStartFacts
from envs.common.prompts import PromptContext, PromptTurns, default_prompt, default_prompt_turns
from envs.common.spaces import TextSpace
from envs.common.text_env import Observation, TextEnv
from envs.corpora import get_tokenizer_corpus, get_tokenizer_whole_words
from envs.registry import (
    ENV_SPECS,
    TEAM_ENV_SPECS,
    adopt_env,
    adopt_received_env,
    check_env_config,
    env_class,
    env_class_path,
    env_creator,
    env_facts,
    env_name,
    get_env_spec,
    get_prompt_renderer,
    get_prompt_turns_renderer,
    make_env,
    register_all,
    register_with_tune,
)

register_all()

#: The team classes, by the module that defines each.
_TEAM_CLASSES = {"PlannerExecutorTeam": "envs.common.planner_executor", "TeamTextEnv": "envs.common.team_env"}


def __getattr__(name: str) -> Any:
    if name in _TEAM_CLASSES:
        return getattr(importlib.import_module(_TEAM_CLASSES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ANSWER_FORMATS",
    "DemonstrationCost",
    "ENV_SPECS",
    "EnvFacts",
    "EvaluationFacts",
    "Observation",
    "PLAN_EXECUTE",
    "PaperFacts",
    "ParsedAction",
    "PlannerExecutorTeam",
    "PromptContext",
    "PromptTurns",
    "TEAM_ENV_SPECS",
    "TeamTextEnv",
    "TextEnv",
    "THINK_ACTION",
    "TextSpace",
    "WarmStartFacts",
    "adopt_env",
    "adopt_received_env",
    "check_env_config",
    "current_subgoal",
    "default_prompt",
    "default_prompt_turns",
    "env_class",
    "env_class_path",
    "env_creator",
    "env_facts",
    "env_name",
    "get_env_spec",
    "get_prompt_renderer",
    "get_prompt_turns_renderer",
    "get_tokenizer_corpus",
    "get_tokenizer_whole_words",
    "make_env",
    "parse_action",
    "parse_plan_execute",
    "plan_execute_blocks",
    "register_all",
    "register_with_tune",
    "subgoals_of_blocks",
]
