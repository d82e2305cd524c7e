"""Text environments for LLM agents: ALFWorld, WebShop and the KeyChest memory probe.

Importing this package registers ``hgpo/ALFWorld-v0``, ``hgpo/WebShop-v0`` and ``hgpo/KeyChest-v0``
with Gymnasium and ``alfworld``, ``webshop`` and ``keychest`` with Ray Tune / RLlib.
"""

from envs.common.actions import ParsedAction, parse_action
from envs.common.spaces import TextSpace
from envs.registry import (
    ENV_SPECS,
    check_env_config,
    get_env_spec,
    get_prompt_renderer,
    get_tokenizer_corpus,
    make_env,
    register_all,
)

register_all()

__all__ = [
    "ENV_SPECS",
    "ParsedAction",
    "TextSpace",
    "check_env_config",
    "get_env_spec",
    "get_prompt_renderer",
    "get_tokenizer_corpus",
    "make_env",
    "parse_action",
    "register_all",
]
