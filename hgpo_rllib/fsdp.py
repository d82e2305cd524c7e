"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.algorithms.torch.fsdp`."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.algorithms.torch.fsdp import (  # noqa: F401
    FORWARD_METHODS,
    full_optimizer_state,
    full_state_dict,
    load_full_optimizer_state,
    load_full_state_dict,
    shard_module,
)

warn_moved_module(__name__, "hgpo_rllib.algorithms.torch.fsdp")
