"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.experiments.memory_plan`; ``python -m hgpo_rllib.memory``
(:mod:`hgpo_rllib.cli.memory`) still prints a memory plan."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.cli.memory import main
from hgpo_rllib.experiments.memory_plan import *  # noqa: F403

if __name__ == "__main__":
    raise SystemExit(main())
else:
    warn_moved_module(__name__, "hgpo_rllib.experiments.memory_plan")
