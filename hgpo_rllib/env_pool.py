"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.env_runner.env_pool`."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.env_runner.env_pool import EnvCrash, EnvWorkerPool  # noqa: F401

warn_moved_module(__name__, "hgpo_rllib.env_runner.env_pool")
