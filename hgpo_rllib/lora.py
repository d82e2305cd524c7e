"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.rl_module.lora` (``normalize_lora``:
:mod:`hgpo_rllib.rl_module.config`; ``export_merged``: :mod:`hgpo_rllib.evaluation`)."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.evaluation.policy_loading import export_merged  # noqa: F401
from hgpo_rllib.rl_module.config import LORA_KEYS, normalize_lora  # noqa: F401
from hgpo_rllib.rl_module.lora import (  # noqa: F401
    ADAPTER,
    ADAPTER_MARK,
    adapter_state_dict,
    add_adapters,
    merge_adapter_state,
    merged_state_dict,
)

warn_moved_module(__name__, "hgpo_rllib.rl_module.lora")
