"""Deprecated package path (0.2.0): the torch learners live in :mod:`hgpo_rllib.algorithms.torch` and
:mod:`hgpo_rllib.algorithms.hgpo.torch`."""
