"""Text environments for LLM agents: ALFWorld, WebShop and the KeyChest memory probe, and the
registry that resolves a user's own (see :mod:`envs.registry`).

Importing this package registers ``hgpo/ALFWorld-v0``, ``hgpo/WebShop-v0`` and ``hgpo/KeyChest-v0``
with Gymnasium and ``alfworld``, ``webshop`` and ``keychest`` with Ray Tune / RLlib.
"""

from envs.common.actions import ParsedAction, parse_action
from envs.common.prompts import PromptContext, default_prompt
from envs.common.spaces import TextSpace
from envs.common.text_env import Observation, TextEnv
from envs.registry import (
    ENV_SPECS,
    adopt_env,
    check_env_config,
    env_class,
    env_class_path,
    env_creator,
    env_name,
    get_env_spec,
    get_prompt_renderer,
    get_tokenizer_corpus,
    make_env,
    register_all,
    register_with_tune,
)

register_all()

__all__ = [
    "ENV_SPECS",
    "Observation",
    "ParsedAction",
    "PromptContext",
    "TextEnv",
    "TextSpace",
    "adopt_env",
    "check_env_config",
    "default_prompt",
    "env_class",
    "env_class_path",
    "env_creator",
    "env_name",
    "get_env_spec",
    "get_prompt_renderer",
    "get_tokenizer_corpus",
    "make_env",
    "parse_action",
    "register_all",
    "register_with_tune",
]
