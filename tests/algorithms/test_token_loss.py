"""The token-level loss terms (hgpo_rllib.algorithms.torch.token_loss): verl's dual-clip PPO and k3 KL
per token, checked element by element; per-token advantages; naming non-finite terms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hgpo_rllib.algorithms.torch.token_loss import non_finite_terms, rows_with_gradient, token_loss_terms


def test_token_loss_terms_match_the_per_element_formulas() -> None:
    torch.manual_seed(0)
    logp = -torch.rand(4, 5) * 3
    old_logp = logp + torch.randn(4, 5)  # ratios far outside the clip range, both ways
    ref_logp = logp + torch.randn(4, 5) * 0.5
    advantages = torch.tensor([1.5, -2.0, 0.0, -0.3])
    terms = token_loss_terms(
        logp=logp, old_logp=old_logp, advantages=advantages, ref_logp=ref_logp, clip_param=0.2, dual_clip=3.0
    )
    for i in range(4):
        a = float(advantages[i])
        for t in range(5):
            r = float(torch.exp(logp[i, t] - old_logp[i, t]))
            pg = max(-a * r, -a * min(max(r, 0.8), 1.2))
            if a < 0:
                pg = min(pg, -a * 3.0)
            d = float(ref_logp[i, t] - logp[i, t])
            assert float(terms.pg[i, t]) == pytest.approx(pg, rel=1e-5, abs=1e-6)
            assert float(terms.kl[i, t]) == pytest.approx(np.exp(d) - d - 1, rel=1e-5, abs=1e-6)
            assert float(terms.ratio[i, t]) == pytest.approx(r, rel=1e-5)
    assert terms.dual_clipped.sum() > 0 and terms.clipped.sum() > 0
    assert torch.all(terms.dual_clipped[0] == 0)  # only negative advantages are dual-clipped
    without_ref = token_loss_terms(
        logp=logp, old_logp=old_logp, advantages=advantages, ref_logp=None, clip_param=0.2, dual_clip=3.0
    )
    assert without_ref.kl is None


def test_per_token_advantages_equal_row_advantages_broadcast_over_the_row() -> None:
    """[N, T] advantages (one per token) give each token the loss of its own advantage; a row's
    constant advantage [N] is the same as that value repeated over its tokens."""
    torch.manual_seed(1)
    logp = -torch.rand(3, 4) * 3
    old_logp = logp + torch.randn(3, 4)
    row_adv = torch.tensor([0.7, -1.2, 0.0])
    options = {"logp": logp, "old_logp": old_logp, "ref_logp": None, "clip_param": 0.2, "dual_clip": 3.0}
    rows = token_loss_terms(advantages=row_adv, **options)
    tokens = token_loss_terms(advantages=row_adv[:, None].expand(3, 4), **options)
    for name in ("pg", "ratio", "clipped", "dual_clipped"):
        torch.testing.assert_close(getattr(tokens, name), getattr(rows, name), rtol=0, atol=0)
    per_token = torch.tensor([[0.5, -0.5, 2.0, 0.0]] * 3)
    mixed = token_loss_terms(advantages=per_token, **options)
    for t in range(4):
        column = token_loss_terms(advantages=per_token[:, t], **options)
        torch.testing.assert_close(mixed.pg[:, t], column.pg[:, t], rtol=0, atol=0)
    assert mixed.pg.shape == (3, 4) and not torch.equal(mixed.pg, rows.pg)


def test_non_finite_terms_are_named_only_where_tokens_are_valid() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    pg = torch.zeros(2, 3)
    pg[0, 2] = float("nan")  # a padding token: ignored
    kl = torch.zeros(2, 3)
    kl[1, 0] = float("inf")
    entropy = torch.tensor([0.0, float("nan")])  # a per-row term counts at any row
    assert non_finite_terms(mask, {"pg": pg, "kl": kl, "ref": None, "entropy": entropy}) == ["kl", "entropy"]
    assert non_finite_terms(mask, {"pg": pg}) == []


def test_a_row_carries_gradient_only_with_a_non_zero_advantage_on_a_loss_token() -> None:
    """Per row: zero, non-zero (either sign), non-zero on a row without loss tokens, NaN. Per token
    (HiPER's spans): non-zero only outside the loss mask, and on one loss token."""
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 1]])
    per_row = torch.tensor([0.0, -0.5, 2.0, 1e-9, np.nan])
    assert rows_with_gradient(per_row, mask).tolist() == [False, True, False, True, True]
    per_token = torch.tensor([[0.0, 0.0, 3.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, -1.0, 0.0], [0.0] * 3])
    assert rows_with_gradient(per_token, mask).tolist() == [False, False, False, True, False]
    # Where A = 0 the token's clipped (and dual-clipped) loss and its gradient are 0 whatever the ratio.
    logp = torch.tensor([[-3.0, 0.5, -9.0]], requires_grad=True)
    terms = token_loss_terms(
        logp=logp,
        old_logp=torch.tensor([[0.0, -4.0, 9.0]]),
        advantages=torch.zeros(1),
        ref_logp=None,
        clip_param=0.2,
        dual_clip=3.0,
    )
    terms.pg.sum().backward()
    assert terms.pg.abs().sum() == 0 and logp.grad.abs().sum() == 0
