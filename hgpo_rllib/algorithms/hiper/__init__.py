"""HiPER (Peng et al., arXiv 2602.16165): one LLM that plans and acts each turn, trained with
Hierarchical Advantage Estimation and a three-head critic (docs/hiper.md). Config and algorithm in
:mod:`~hgpo_rllib.algorithms.hiper.hiper`, the learner's advantage piece in
:mod:`~hgpo_rllib.algorithms.hiper.hiper_learner`, the torch learner (with the critic's loss) in
``torch/``."""

from hgpo_rllib._imports import lazy_getattr

__all__ = ["HiPER", "HiPERConfig"]

__getattr__ = lazy_getattr(
    __name__,
    {"HiPER": "hgpo_rllib.algorithms.hiper.hiper", "HiPERConfig": "hgpo_rllib.algorithms.hiper.hiper"},
)
