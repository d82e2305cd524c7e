"""Per-token log-probs and entropies of response tokens without a [rows, tokens, vocabulary] tensor.

With a 152k vocabulary one fp32 [16, 512, V] tensor is 5 GB, and the log-softmax, probabilities and
p log p each add one. Here only the valid (unmasked) response positions are scored, ``chunk_tokens``
of them at a time, each chunk under activation checkpointing: the forward keeps just the hidden
states, and the backward recomputes one chunk's logits at a time. Values and gradients equal the
unchunked computation's (tests/experiments/test_memory.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.checkpoint import checkpoint

#: Masked logits: exp() underflows to exactly 0 while p * log p stays finite (-inf would give NaN).
MASKED_LOGIT = -1e9


def _score_chunk(
    hidden: torch.Tensor,
    tokens: torch.Tensor,
    allowed: torch.Tensor | None,
    head: torch.nn.Module,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each token and entropy of its distribution, for [n, hidden] states."""
    logits = head(hidden).float() / temperature
    if allowed is not None:
        logits = logits.masked_fill(~allowed, MASKED_LOGIT)
    logp_all = logits.log_softmax(-1)
    logp = logp_all.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else torch.zeros_like(logp)
    return logp, entropy


def _without_early_stops(
    allowed: torch.Tensor | None,
    early: torch.Tensor,
    stop_ids: Sequence[int],
    vocab: int,
    device: torch.device,
) -> torch.Tensor:
    """``allowed`` (None, [V] or [n, V]) as an [n, V] mask that also bars ``stop_ids`` where ``early``."""
    stops = torch.zeros(vocab, dtype=torch.bool, device=device)
    stops[list(stop_ids)] = True
    barred = early.to(device)[:, None] & stops[None, :]
    return ~barred if allowed is None else allowed & ~barred


def token_logp_entropy(
    hidden: torch.Tensor,
    head: torch.nn.Module,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float,
    allowed: torch.Tensor | None = None,
    stop_ids: Sequence[int] = (),
    min_new_tokens: int = 0,
    chunk_tokens: int | None = 1024,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, entropies), both ``[N, T]`` float32 and 0 where ``mask`` is 0.

    ``hidden`` [N, T, H] are the states that predict ``tokens`` [N, T]; ``allowed`` is None, a [V]
    mask for every row or an [N, V] mask per row; ``stop_ids`` are masked too at response positions
    below ``min_new_tokens`` (as the sampler masked them there); ``chunk_tokens=None`` scores all
    valid tokens at once.
    """
    rows, width = tokens.shape
    flat = mask.reshape(-1).nonzero().squeeze(-1)
    states = hidden.reshape(rows * width, -1).index_select(0, flat)
    picked = tokens.reshape(-1).index_select(0, flat.to(tokens.device))
    row_of = flat // width
    early = flat % width < min_new_tokens if min_new_tokens and len(stop_ids) else None
    step = chunk_tokens or max(len(flat), 1)
    parts = []
    for start in range(0, len(flat), step):
        stop = start + step
        allowed_part = None
        if allowed is not None:
            allowed_part = allowed if allowed.dim() == 1 else allowed.index_select(0, row_of[start:stop])
        if early is not None:
            allowed_part = _without_early_stops(
                allowed_part, early[start:stop], stop_ids, head.weight.shape[0], states.device
            )
        args = (states[start:stop], picked[start:stop], allowed_part, head, temperature, with_entropy)
        if torch.is_grad_enabled() and chunk_tokens is not None:
            parts.append(checkpoint(_score_chunk, *args, use_reentrant=False))
        else:
            parts.append(_score_chunk(*args))
    # New [N, T] tensors, not views of flat ones: a view returned from an FSDP2 unit (this runs inside
    # the sharded module's forward methods) would lose FSDP's backward hook to any in-place op on it.
    logp = hidden.new_zeros(rows, width, dtype=torch.float32)
    entropy = hidden.new_zeros(rows, width, dtype=torch.float32)
    if parts:
        where = (row_of, flat % width)
        logp = logp.index_put(where, torch.cat([p[0] for p in parts]))
        entropy = entropy.index_put(where, torch.cat([p[1] for p in parts]))
    return logp, entropy
