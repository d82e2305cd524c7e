"""HGPO (Hierarchy-of-Groups Policy Optimization) for LLM agents, as a Ray RLlib algorithm.

Importing the package registers the algorithm with Ray Tune as "HGPO" (``tune.Tuner("HGPO", ...)``).
"""

from ray.tune.registry import register_trainable

from hgpo_rllib.hgpo import HGPO, HGPOConfig

register_trainable("HGPO", HGPO)

__all__ = ["HGPO", "HGPOConfig"]
