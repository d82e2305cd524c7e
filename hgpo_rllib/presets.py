"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.experiments.presets` (``run_as_script``:
:mod:`hgpo_rllib.cli.scripts`)."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.cli.scripts import run_as_script  # noqa: F401
from hgpo_rllib.experiments.presets import (  # noqa: F401
    PRESETS,
    RunSettings,
    apply_paper_preset,
    tiny_cpu_config,
    warm_start_cpu_config,
)

warn_moved_module(__name__, "hgpo_rllib.experiments.presets")
