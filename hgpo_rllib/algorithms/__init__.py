"""The algorithms (≈ ``rllib/algorithms/``): what every text-agent algorithm shares at this level
(:mod:`~hgpo_rllib.algorithms.text_agent`: config and iteration; checkpoint housekeeping; validation;
the env-runner pool; the learner group; the token loss, torch learner and FSDP in ``torch/``), and one
sub-package per algorithm: ``hgpo/`` (HGPO, with GRPO and GiGPO as its estimator settings) and
``hiper/`` (HiPER: plan-execute answers, Hierarchical Advantage Estimation and a three-head critic)."""

from hgpo_rllib._imports import lazy_getattr

__all__ = ["HGPO", "HGPOConfig", "HiPER", "HiPERConfig", "TextAgent", "TextAgentConfig"]

__getattr__ = lazy_getattr(
    __name__,
    {
        "HGPO": "hgpo_rllib.algorithms.hgpo.hgpo",
        "HGPOConfig": "hgpo_rllib.algorithms.hgpo.hgpo",
        "HiPER": "hgpo_rllib.algorithms.hiper.hiper",
        "HiPERConfig": "hgpo_rllib.algorithms.hiper.hiper",
        "TextAgent": "hgpo_rllib.algorithms.text_agent",
        "TextAgentConfig": "hgpo_rllib.algorithms.text_agent",
    },
)
