"""The token-level clipped policy loss, as verl-agent trains the actor (docs/hgpo_algorithm.md §5).

Per valid response token, with ratio r = exp(logp - old_logp) and the token's advantage A:

* clipped policy loss ``pg = max(-A r, -A clip(r, 1 - clip_param, 1 + clip_param))``, and the dual
  clip for A < 0: ``pg = min(pg, -A dual_clip)`` (verl's ``clip_ratio_c``);
* k3 KL to the frozen reference: ``exp(ref - logp) - (ref - logp) - 1``, clamped to [-10, 10];
* entropy of the policy at that position.

``loss = pg - entropy_coeff * entropy + kl_coeff * kl``, each a token mean over the valid response
tokens of the minibatch (``loss_agg_mode = token-mean``). Pure torch: no RLlib, tested on its own.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

_LOG_RATIO_LIMIT = 20.0  # verl clamps log-ratios before exp() as well
_KL_LIMIT = 10.0


class TokenLossTerms(NamedTuple):
    """Per-token loss pieces, all ``[N, T]``; ``clipped``/``dual_clipped`` are 0/1 floats."""

    pg: torch.Tensor
    kl: torch.Tensor | None
    ratio: torch.Tensor
    clipped: torch.Tensor
    dual_clipped: torch.Tensor


def token_loss_terms(
    *,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    ref_logp: torch.Tensor | None,
    clip_param: float,
    dual_clip: float,
) -> TokenLossTerms:
    """verl's dual-clip PPO policy loss and k3 ("low_var_kl") KL per token (module docstring).

    ``advantages`` holds one scalar per row [N], broadcast over that row's response tokens, or one
    per token [N, T] (an advantage per span of the response, as HiPER assigns them).
    """
    adv = advantages.to(logp.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    ratio = torch.exp((logp - old_logp).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT))
    pg_unclipped = -adv * ratio
    pg_clipped = -adv * ratio.clamp(1.0 - clip_param, 1.0 + clip_param)
    pg = torch.maximum(pg_unclipped, pg_clipped)
    dual_bound = -adv * dual_clip
    negative = (adv < 0).expand_as(pg)
    dual_clipped = negative & (pg > dual_bound)
    pg = torch.where(negative, torch.minimum(pg, dual_bound), pg)
    kl = None
    if ref_logp is not None:
        diff = (ref_logp - logp).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
        kl = (torch.exp(diff) - diff - 1.0).clamp(-_KL_LIMIT, _KL_LIMIT)
    return TokenLossTerms(pg, kl, ratio, (pg_clipped > pg_unclipped).float(), dual_clipped.float())


def non_finite_terms(mask: torch.Tensor, terms: dict[str, torch.Tensor | None]) -> list[str]:
    """Names of the terms with a NaN/inf at a valid response token (per-row terms: at any row)."""
    valid = mask.bool()
    names = []
    for name, value in terms.items():
        if value is None:
            continue
        picked = value[valid] if value.shape == valid.shape else value
        if not bool(torch.isfinite(picked).all()):
            names.append(name)
    return names
