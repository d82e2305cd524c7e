"""The token-level clipped policy loss, as verl-agent trains the actor (docs/hgpo_algorithm.md §5).

Per valid response token, with ratio r = exp(logp - old_logp) and the token's advantage A:

* clipped policy loss ``pg = max(-A r, -A clip(r, 1 - clip_param, 1 + clip_param))``, and the dual
  clip for A < 0: ``pg = min(pg, -A dual_clip)`` (verl's ``clip_ratio_c``);
* k3 KL to the frozen reference: ``exp(ref - logp) - (ref - logp) - 1``, clamped to [-10, 10];
* entropy of the policy at that position.

With overlapped sampling the rows come from the policy one version before the one the update starts
from (the proximal policy, whose log-probs the learner recomputes): the ratio and its clip stay
relative to the proximal policy and the policy term of each token is weighted by the truncated
importance weight ``min(pi_prox / pi_behaviour, cap)`` (:func:`behaviour_weights`), the decoupled
PPO objective (Hilton et al. 2022, as AReaL trains) with verl's truncation instead of AReaL's
dropping of tokens above the cap: every token keeps a bounded say.

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


def rows_with_gradient(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The rows ([N] bool) with a non-zero advantage on at least one loss token (``mask`` [N, T];
    ``advantages`` [N] or [N, T]). Where A = 0 a token's policy loss is 0 whatever its ratio (the
    clip and the dual clip alike), so the other rows add exactly nothing to the policy term or its
    gradient. A non-finite advantage counts as non-zero."""
    adv = advantages if advantages.dim() == 2 else advantages.unsqueeze(-1)
    return ((adv != 0) & mask.bool()).any(dim=-1)


def behaviour_weights(
    proximal_logp: torch.Tensor, behaviour_logp: torch.Tensor, cap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token truncated importance weights ``min(exp(proximal - behaviour), cap)`` (no gradient)
    and a 0/1 float marking the tokens held at the cap."""
    with torch.no_grad():
        weights = torch.exp((proximal_logp - behaviour_logp).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT))
        capped = weights > cap
        return weights.clamp(max=cap), capped.float()


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
