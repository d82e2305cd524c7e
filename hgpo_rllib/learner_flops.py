"""The learner's floating-point operations per update, from the tokens its passes compute (pure).

Why: a learner's seconds say little without the work done in them. Counted here is the work the
model needs (model FLOPs, PaLM's MFU convention), so that achieved FLOP/s over the machine's measured
matmul rate (``benchmarks/machine_limit.py``) is the fraction of the machine the learner uses. One
multiply-add is 2 FLOPs. Per token of a pass, with ``W`` the decoder's linear weights (q, k, v, o and
the gated MLP's three matrices over all layers, :class:`~hgpo_rllib.model_shape.ModelShape`; embeddings,
norms and biases not counted):

- trained (forward 2 + backward 4, the gradients of inputs and of weights): ``6 W``;
  forward only (the old-log-prob and the reference passes): ``2 W``;
- the LM head (``hidden x vocab``) only on the tokens it scores (valid response tokens): ``6`` or ``2``
  x ``hidden x vocab`` per scored token;
- attention, per (query, key) pair a token attends over (causal: itself and the tokens before it in its
  row, or its ancestors in a prefix tree; padding and masked pairs excluded): ``2 d`` for ``Q K^T`` and
  ``2 d`` for ``A V`` per layer (``d`` = heads x head_dim), times 3 when trained;
- LoRA as it runs: the frozen base computes no weight gradients, so a trained token costs ``4 W``
  (forward, and the inputs' gradients the adapters below need) and ``4 x hidden x vocab`` per scored
  token, plus ``6 r (in + out)`` per adapted matrix (``2`` in a forward pass with the adapters on; the
  reference pass runs the base with them off).

Recomputation is not counted: gradient checkpointing and the head's checkpointed chunks
(:mod:`~hgpo_rllib.rl_module.logprobs`) run forwards again, which costs time but is not model work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

import numpy as np

from hgpo_rllib.model_shape import ModelShape

#: The learner's passes: the training pass (gradients), a forward-only pass of the policy (the old
#: log-probs) and the frozen reference's forward (the KL term; the base alone under LoRA).
PassKind = Literal["trained", "forward", "reference"]


@dataclasses.dataclass(frozen=True)
class PassTokens:
    """What one pass (or several of one kind, added up) computes."""

    tokens: int = 0  # tokens the backbone computes (padding excluded, a shared prefix once)
    pairs: int = 0  # attention (query, key) pairs over those tokens (causal: depth + 1 each)
    scored: int = 0  # tokens the LM head scores
    positions: int = 0  # positions of the backbone's input, padding included (no FLOPs counted)

    def __add__(self, other: PassTokens) -> PassTokens:
        return PassTokens(
            *(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True))
        )


def row_pass_tokens(prompt_mask: np.ndarray, resp_mask: np.ndarray) -> PassTokens:
    """The plain (unshared) pass over token rows: each row's real prompt and response tokens, each
    attending over itself and the row's tokens before it (``L (L + 1) / 2`` pairs for ``L`` tokens),
    in an input without the columns that are padding in every row (``hidden_states.row_states``)."""
    prompt_mask, resp_mask = np.asarray(prompt_mask), np.asarray(resp_mask)
    scored = resp_mask.sum(axis=1).astype(np.int64)
    lengths = prompt_mask.sum(axis=1).astype(np.int64) + scored
    prompt_used, resp_used = np.flatnonzero(prompt_mask.any(axis=0)), np.flatnonzero(resp_mask.any(axis=0))
    width = (prompt_mask.shape[1] - prompt_used[0] if prompt_used.size else 0) + (
        resp_used[-1] + 1 if resp_used.size else 0
    )
    return PassTokens(
        int(lengths.sum()),
        int((lengths * (lengths + 1) // 2).sum()),
        int(scored.sum()),
        len(lengths) * int(width),
    )


def tree_pairs(lengths: Iterable[int], shared: Iterable[int]) -> int:
    """Attention pairs of a prefix tree: each row adds its tokens past the prefix it shares with the
    tree, each attending over its depth + 1 ancestors (``sum L (L + 1) / 2 - s (s + 1) / 2``)."""
    return sum(n * (n + 1) // 2 - s * (s + 1) // 2 for n, s in zip(lengths, shared, strict=True))


def pass_flops(shape: ModelShape, counts: PassTokens, kind: PassKind, lora_weights: int | None = None) -> int:
    """FLOPs of a pass of ``kind`` (the module docstring's formula). ``lora_weights``: None for full
    fine-tuning, else the adapters' weights (:meth:`ModelShape.lora_weights`) of a LoRA learner."""
    trained = kind == "trained"
    base = (4 if lora_weights is not None else 6) if trained else 2
    flops = base * (shape.linear_weights * counts.tokens + shape.head_weights * counts.scored)
    flops += (3 if trained else 1) * 4 * shape.attention_width * shape.layers * counts.pairs
    if lora_weights is not None and kind != "reference":
        flops += (6 if trained else 2) * lora_weights * counts.tokens
    return flops


def update_flops(
    shape: ModelShape, passes: Mapping[PassKind, PassTokens], lora_weights: int | None = None
) -> int:
    """FLOPs of one update: the sum of :func:`pass_flops` over the passes of each kind that ran."""
    return sum(pass_flops(shape, counts, kind, lora_weights) for kind, counts in passes.items())


def matmul_shapes(
    shape: ModelShape, tokens: int, fit: Callable[[int], int] | None = None
) -> list[tuple[str, int, int, int]]:
    """The distinct matmuls of a pass over ``tokens`` tokens, as (name, m, k, n) of an ``[m, k] x
    [k, n]`` product (2 m k n FLOPs): each linear layer's forward ``X W`` and its backward's two,
    ``dY W^T`` (the input's gradient) and ``X^T dY`` (the weight's); layers of one shape once.
    ``fit``: the tokens a layer's products take instead, given its ``in x out`` weights (a benchmark
    that cuts slow products short)."""
    groups: dict[tuple[int, int], list[str]] = {}
    for name, dims in [*shape.matrices().items(), ("lm_head", (shape.hidden, shape.vocab))]:
        groups.setdefault(dims, []).append(name)
    rows = []
    for (a, b), names in groups.items():
        label, t = "/".join(names), tokens if fit is None else fit(a * b)
        rows += [
            (f"{label} forward", t, a, b),
            (f"{label} input grad", t, b, a),
            (f"{label} weight grad", a, t, b),
        ]
    return rows
