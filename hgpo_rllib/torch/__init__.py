"""Torch implementation of the HGPO learner."""

from hgpo_rllib.torch.hgpo_torch_learner import HGPOTorchLearner

__all__ = ["HGPOTorchLearner"]
