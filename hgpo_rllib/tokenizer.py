"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.rl_module.tokenizer`."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.rl_module.tokenizer import (  # noqa: F401
    CHATML_TEMPLATE,
    ENDOFTEXT,
    IM_END,
    IM_START,
    SPECIAL_TOKENS,
    TINY_MODEL_DEFAULTS,
    build_tiny_model,
    build_tiny_tokenizer,
)

warn_moved_module(__name__, "hgpo_rllib.rl_module.tokenizer")
