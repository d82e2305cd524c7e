"""HGPO, with GiGPO and GRPO one switch away (≈ ``rllib/algorithms/ppo/``): config and algorithm in
:mod:`~hgpo_rllib.algorithms.hgpo.hgpo`, the learner's advantage piece in
:mod:`~hgpo_rllib.algorithms.hgpo.hgpo_learner`, the torch learner in ``torch/``."""

from hgpo_rllib._imports import lazy_getattr

__all__ = ["HGPO", "HGPOConfig"]

__getattr__ = lazy_getattr(
    __name__, {"HGPO": "hgpo_rllib.algorithms.hgpo.hgpo", "HGPOConfig": "hgpo_rllib.algorithms.hgpo.hgpo"}
)
