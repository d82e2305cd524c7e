"""The algorithms (≈ ``rllib/algorithms/``): what every text-agent algorithm shares at this level
(:mod:`~hgpo_rllib.algorithms.text_agent`: config and iteration; validation; the env-runner pool; the
learner group; the token loss, torch learner and FSDP in ``torch/``), and one sub-package per
algorithm: ``hgpo/`` (HGPO, with GRPO and GiGPO as its estimator settings) and ``hiper/`` (HiPER:
plan-execute answers, Hierarchical Advantage Estimation and a three-head critic; ``HiPER`` and
``HiPERConfig`` from :mod:`hgpo_rllib.algorithms.hiper` or :mod:`hgpo_rllib`)."""

from hgpo_rllib._imports import lazy_getattr

__all__ = ["HGPO", "HGPOConfig", "TextAgent", "TextAgentConfig"]

__getattr__ = lazy_getattr(
    __name__,
    {
        "HGPO": "hgpo_rllib.algorithms.hgpo.hgpo",
        "HGPOConfig": "hgpo_rllib.algorithms.hgpo.hgpo",
        "TextAgent": "hgpo_rllib.algorithms.text_agent",
        "TextAgentConfig": "hgpo_rllib.algorithms.text_agent",
    },
)
