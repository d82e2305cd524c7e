"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.algorithms.hgpo.torch.hgpo_torch_learner` (the shared
loss: :mod:`hgpo_rllib.algorithms.torch.token_loss`). Kept because checkpoints pickle this path."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.algorithms.hgpo.torch.hgpo_torch_learner import HGPOTorchLearner  # noqa: F401
from hgpo_rllib.algorithms.torch.token_loss import TokenLossTerms, non_finite_terms, token_loss_terms  # noqa: F401
from hgpo_rllib.columns import (  # noqa: F401
    CLIP_FRAC_KEY,
    DUAL_CLIP_FRAC_KEY,
    KL_KEY,
    LOGP_GAP_KEY,
    RATIO_MEAN_KEY,
)

warn_moved_module(__name__, "hgpo_rllib.algorithms.hgpo.torch.hgpo_torch_learner")
