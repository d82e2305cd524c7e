"""HGPO's torch learner: HGPO's advantage piece with the shared token-level clipped loss."""

from __future__ import annotations

from hgpo_rllib.algorithms.hgpo.hgpo_learner import HGPOLearner
from hgpo_rllib.algorithms.torch.text_agent_torch_learner import TextAgentTorchLearner


class HGPOTorchLearner(HGPOLearner, TextAgentTorchLearner):
    """verl's actor update (dual-clip PPO on tokens, k3 KL, entropy) on HGPO's advantages."""
