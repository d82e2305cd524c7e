"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.algorithms.hgpo` (``from hgpo_rllib import HGPO,
HGPOConfig`` is the public import). Kept because checkpoints pickle this path."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.algorithms.hgpo.hgpo import HGPO, HGPOConfig  # noqa: F401

warn_moved_module(__name__, "hgpo_rllib.algorithms.hgpo")
