"""Adaptive level weights (``weighting="adaptive"``, ours, beyond the paper): per class of steps, the
weights that minimise an estimate of the baseline's error (docs/results.md, "Adaptive level
weights")."""

from __future__ import annotations

import itertools

import numpy as np

from hgpo_rllib.advantages.grouping import FloatArray
from hgpo_rllib.advantages.history import Hierarchy


def simplex_quadratic_min(gram: FloatArray, linear: FloatArray) -> FloatArray:
    """argmin ``w' G w + 2 h' w`` over the probability simplex (G symmetric positive semi-definite).

    Exact: the minimiser solves the equality-constrained problem on its own support. The full
    support is tried first (if its solution is >= 0 it is the optimum: the usual case); otherwise
    every support (2**D - 1 of them for D <= K + 1 levels: 31 at K = 4) is solved and the best
    one with non-negative weights kept. A ridge of 1e-10 (relative) keeps the
    solves finite when levels coincide (identical groups give identical columns); if G and h
    are both 0 (every item 0) any weights give the same advantage and uniform ones are returned.
    """
    dim = len(linear)
    size = np.trace(gram) / dim + np.abs(linear).max()
    if size == 0.0:
        return np.full(dim, 1.0 / dim)
    gram = gram / size + 1e-10 * np.eye(dim)  # same minimiser, entries of order 1
    linear = linear / size
    best, best_value = np.eye(dim)[0], np.inf
    for support_size in range(dim, 0, -1):  # a feasible full-support solution is the optimum
        for support in itertools.combinations(range(dim), support_size):
            idx = list(support)
            rhs = np.stack([np.ones(support_size), linear[idx]], axis=1)
            ones_dir, lin_dir = np.linalg.solve(gram[np.ix_(idx, idx)], rhs).T
            candidate = (1.0 + lin_dir.sum()) / ones_dir.sum() * ones_dir - lin_dir
            if candidate.min() < -1e-12:
                continue
            weights = np.zeros(dim)
            weights[idx] = np.maximum(candidate, 0.0) / np.maximum(candidate, 0.0).sum()
            value = weights @ gram @ weights + 2.0 * linear @ weights
            if value < best_value:
                best, best_value = weights, value
        if support_size == dim and best_value < np.inf:
            return best
    return best


def adaptive_weights(hierarchy: Hierarchy, returns: FloatArray) -> FloatArray:
    """Level weights that minimise an estimate of the baseline's MSE (docs/results.md, "Adaptive
    level weights"); >= 0, summing to 1 over each step's shared levels, 0 elsewhere.

    With weights w summing to 1, the ``mean_norm`` advantage is ``R - b`` with the baseline
    b = sum_d w_d m_d (the group means), whose error against the step's value V is
    ``e = sum_d w_d (m_d - V)``. Writing ``m_d - V = (R - V) - x_d`` with the raw item
    x_d = R - m_d, and noting that the step's own return noise (and, through revisits, that of
    its trajectory: c_d of the n_d members) enters m_d with weight c_d / n_d, Stein's unbiased
    risk estimate gives ``E[e^2] = E[(sum_d w_d x_d)^2] + 2 s2 E[sum_d w_d c_d / n_d] - s2``
    with s2 = Var(R | history). For s2 we take the unbiased variance of the step's
    current-state group: an upper bound (it includes the spread between histories) measured on
    the largest group, so errors lean towards the shallow, low-variance levels. Steps are pooled
    by their number D of shared levels (a batch holds hundreds to thousands of steps per class),
    and each class gets the weights that minimise the estimate over the simplex (a D x D
    quadratic programme). K = 0, or a step with one shared level, gives weight 1 on level 1.
    """
    assert hierarchy.means is not None and hierarchy.spreads is not None and hierarchy.selves is not None
    shared = hierarchy.sizes >= 2  # a prefix of the levels: groups are nested
    depth = shared.sum(axis=0)
    weights = np.zeros(hierarchy.means.shape)
    for n_shared in range(1, len(weights) + 1):
        rows = np.flatnonzero(depth == n_shared)
        if rows.size == 0:
            continue
        if n_shared == 1:
            weights[0, rows] = 1.0
            continue
        raw = returns[rows] - hierarchy.means[:n_shared, rows]
        noise = hierarchy.spreads[0, rows]
        gram = raw @ raw.T / rows.size
        linear = (noise * hierarchy.selves[:n_shared, rows] / hierarchy.sizes[:n_shared, rows]).mean(axis=1)
        weights[:n_shared, rows] = simplex_quadratic_min(gram, linear)[:, None]
    return weights
