"""HGPO (Hierarchy-of-Groups Policy Optimization) for LLM agents, as a Ray RLlib algorithm.

``from hgpo_rllib import HGPO, HGPOConfig`` imports RLlib and registers the algorithm with Ray Tune
as "HGPO" (``tune.Tuner("HGPO", ...)``). The maths (:mod:`hgpo_rllib.advantages`) imports no Ray,
so this package loads RLlib only when the algorithm is asked for.
"""

from typing import Any

__all__ = ["HGPO", "HGPOConfig"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from hgpo_rllib import hgpo

        return getattr(hgpo, name)
    raise AttributeError(f"module 'hgpo_rllib' has no attribute {name!r}")
