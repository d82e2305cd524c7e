"""Run names, as the authors' scripts name runs (``k2_hgpo_alpha1.0_base0``), made from a run's final
config so that a ``--config`` or ``--module`` change shows in its name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def estimator_run_name(history_length: Any, estimator: Any, alpha: Any, base_group: Any) -> str:
    """The authors' run naming, e.g. ``k2_hgpo_alpha1.0_base0``."""
    return f"k{history_length}_{estimator}_alpha{alpha}_base{int(bool(base_group))}"


def config_run_name(config: Any) -> str:
    """:func:`estimator_run_name` of a config with an advantage estimator (HGPO, GiGPO, GRPO), else
    ``k<K>`` (HiPER)."""
    if not hasattr(config, "estimator"):
        return f"k{config.history_length}"
    return estimator_run_name(
        config.history_length, config.estimator, config.length_weight_alpha, config.base_group
    )


def run_name(prefix: str) -> Callable[[Any], str]:
    """An experiment file's ``name``: ``prefix`` and :func:`config_run_name` of the final config."""
    return lambda config: f"{prefix}{config_run_name(config)}"
