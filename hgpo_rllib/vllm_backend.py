"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.rl_module.vllm_generation`."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.rl_module.vllm_generation import (  # noqa: F401
    VLLMGenerator,
    WeightSyncExtension,
    engine_state,
)

warn_moved_module(__name__, "hgpo_rllib.rl_module.vllm_generation")
