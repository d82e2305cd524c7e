"""The primitives every estimator shares: input checks, key interning, the (trajectory, step) layout
and within-group statistics (docs/hgpo_algorithm.md §1-§4).

Everything is computed in float64 with one sort and a few ``np.bincount`` passes, so the cost is
O(N log N) with no per-row Python in the numeric part (string keys are interned once with a dict,
which is the fastest exact way measured).

Exact-zero rule (docs/hgpo_algorithm.md §4.7 Q1). The reference drops HGPO items whose advantage is
exactly 0, but in float32 a group of identical returns yields ``r - mean(r) = ±1e-7`` and the item is
kept with a large normalised value. Here every within-group deviation with
``|r - mean| <= 1e-9 * rms(group)`` is set to exactly 0, where ``rms = sqrt(mean(r**2))``.
The float64 rounding error of a deviation is at most about ``n**1.5 * 2.2e-16 * rms`` (below
1e-11 * rms for groups of up to 1000 rows), so equal values (and a member sitting exactly at
the mean of a varying group) always give exact zeros, while any real difference in returns is
orders of magnitude larger. The rule is scale-free (it does not assume rewards of order 1) and
depends on the group only, not on row order.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Keys = Sequence[object] | npt.ArrayLike

ZERO_RTOL = 1e-9
#: ``mode`` of the step-level estimators: ``R - mean`` or ``(R - mean) / (std + eps)`` in each group.
ADV_MODES = ("mean_norm", "mean_std_norm")
#: HGPO's level weightings (docs/hgpo_algorithm.md §4.4; "adaptive" is ours).
WEIGHTINGS = ("reference", "paper", "adaptive")


# ----------------------------------------------------------------------------- validation


def n_rows(**columns: object) -> int:
    """Common length of row-aligned inputs; ValueError naming the first mismatch."""
    names = list(columns)
    lengths = [len(columns[name]) for name in names]  # type: ignore[arg-type]
    for name, length in zip(names[1:], lengths[1:], strict=True):
        if length != lengths[0]:
            raise ValueError(f"{name} has {length} rows but {names[0]} has {lengths[0]}")
    return lengths[0]


def finite_column(values: npt.ArrayLike, name: str, *, check_finite: bool = True) -> FloatArray:
    """1-D float64 copy of a numeric column; non-finite values would poison whole groups."""
    arr = np.array(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if check_finite and not np.isfinite(arr).all():
        raise ValueError(f"{name} contains non-finite values")
    return arr


def flag_column(values: npt.ArrayLike, name: str) -> BoolArray:
    """1-D bool column from bools or 0/1 integers (floats are refused rather than guessed)."""
    arr = np.asarray(values)
    if arr.size == 0:
        arr = arr.astype(bool)
    if arr.ndim != 1 or arr.dtype.kind not in "biu" or ((arr != 0) & (arr != 1)).any():
        raise ValueError(f"{name} must be a one-dimensional boolean (or 0/1) array")
    return arr.astype(bool)


def finite_scalar(value: float, name: str) -> float:
    """A finite real number (a bool is not one)."""
    if isinstance(value, bool) or not (
        isinstance(value, int | float | np.floating | np.integer) and np.isfinite(value)
    ):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def unit_interval(value: float, name: str) -> float:
    """A discount or trace parameter in [0, 1]; larger ones would let the scans blow up."""
    if not 0.0 <= finite_scalar(value, name) <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")
    return float(value)


def check_option(value: str, allowed: tuple[str, ...], name: str) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def check_epsilon(epsilon: float) -> None:
    """epsilon > 0 keeps (r - mean) / (std + eps) and the weight ratio finite (§2, §4.4)."""
    if not (np.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite positive number, got {epsilon!r}")


def check_history_length(history_length: int) -> int:
    """K as a Python int >= 0 (§4.1); floats are refused rather than truncated."""
    try:
        history_length = operator.index(history_length)
    except TypeError as err:
        raise TypeError(f"history_length must be an integer, got {history_length!r}") from err
    if history_length < 0:
        raise ValueError(f"history_length must be >= 0, got {history_length!r}")
    return history_length


# ----------------------------------------------------------------------------- interning and layout


def intern_keys(keys: Keys, name: str) -> tuple[IntArray, int]:
    """Map hashable keys to int64 codes in [0, bound) with equal keys <-> equal codes.

    Codes need not be dense (every consumer is a bincount or a pair code). Integer arrays
    with a compact range are used as they are; other numeric arrays go through ``np.unique``;
    anything else through one C-level dict pass (the code is the row of the key's first
    occurrence), measured ~5x faster than ``pd.factorize`` on ~200-character strings.
    """
    if isinstance(keys, np.ndarray):
        if keys.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional, got shape {keys.shape}")
        kind = keys.dtype.kind
        if keys.size and (kind in "bi" or (kind == "u" and keys.dtype.itemsize < 8)):
            ints = keys.astype(np.int64, copy=False)
            low = int(ints.min())
            span = int(ints.max()) - low + 1
            if span <= 4 * len(ints):
                return ints - low, span
        if kind in "biuf":
            return dense_ids(keys)
        keys = keys.tolist()
    table: dict[object, int] = {}
    try:
        codes = np.fromiter(map(table.setdefault, keys, range(len(keys))), np.int64, len(keys))
    except TypeError as err:
        raise TypeError(f"{name} must contain hashable keys: {err}") from err
    return codes, len(keys)


def dense_ids(values: npt.NDArray[np.generic]) -> tuple[IntArray, int]:
    """Dense ids 0..m-1 of the distinct values, and m (sort-based: ~0.6 ms at 51.2k rows)."""
    uniques, ids = np.unique(values, return_inverse=True)
    return ids.astype(np.int64, copy=False), len(uniques)


class Layout(NamedTuple):
    """Rows sorted by (trajectory, step): ``order[i]`` is the original row of sorted row i."""

    order: IntArray
    traj: IntArray  # trajectory code of each sorted row
    pos: IntArray  # 0-based position of the row inside its trajectory
    remaining: IntArray  # number of later rows in the same trajectory


def trajectory_layout(traj_ids: Keys, step_idx: npt.ArrayLike) -> Layout:
    """Sort rows by (trajectory, step) with one int64 argsort and locate trajectory segments.

    A single combined key is ~8x faster than ``np.lexsort``; duplicates are rejected, so the
    unstable sort is deterministic.
    """
    traj, n_traj = intern_keys(traj_ids, "traj_ids")
    steps = np.asarray(step_idx)
    if steps.size == 0:
        steps = steps.astype(np.int64)
    if steps.ndim != 1 or steps.dtype.kind not in "iu":
        raise ValueError("step_idx must be a one-dimensional array of integers")
    steps = steps.astype(np.int64, copy=False)
    n = len(steps)
    if n == 0:
        empty = np.zeros(0, np.int64)
        return Layout(empty, empty, empty, empty)
    lo = int(steps.min())
    span = int(steps.max()) - lo + 1
    if n_traj * span < 2**62:
        key = traj * span + (steps - lo)
        order = np.argsort(key)
        key = key[order]
        duplicate = key[1:] == key[:-1]
    else:  # astronomically sparse step numbers: fall back to a two-key sort
        order = np.lexsort((steps, traj))
        duplicate = (traj[order][1:] == traj[order][:-1]) & (steps[order][1:] == steps[order][:-1])
    if duplicate.any():
        row = int(order[1:][duplicate][0])
        raise ValueError(f"step_idx: duplicate (traj_id, step_idx) pair at row {row}")
    traj_sorted = traj[order]
    is_start = np.ones(n, dtype=bool)
    is_start[1:] = traj_sorted[1:] != traj_sorted[:-1]
    starts = np.flatnonzero(is_start)
    lengths = np.diff(starts, append=n)
    rows = np.arange(n)
    return Layout(
        order, traj_sorted, rows - np.repeat(starts, lengths), np.repeat(starts + lengths - 1, lengths) - rows
    )


# ----------------------------------------------------------------------------- group statistics


def check_consecutive_steps(layout: Layout, step_idx: npt.ArrayLike) -> None:
    """Every trajectory's steps must be exactly 0..T-1 (no gap, none missing at the start): the
    estimators that bootstrap from the next turn need the turn that follows to be there."""
    steps = np.asarray(step_idx)[layout.order]
    bad = np.flatnonzero(steps != layout.pos)
    if bad.size:
        row = int(layout.order[bad[0]])
        raise ValueError(
            f"step_idx: every trajectory's steps must be exactly 0..T-1; input row {row} has step "
            f"{int(steps[bad[0]])} where {int(layout.pos[bad[0]])} was expected (a gap, or not starting at 0)"
        )


# ----------------------------------------------------------------------------- scans


def reverse_linear_scan(a: FloatArray, b: FloatArray, remaining: IntArray) -> FloatArray:
    """Solve ``x_i = a_i + b_i * x_{i+1}`` backwards within runs of consecutive rows.

    ``remaining[i]`` is the number of later rows in row i's run; the last row of a run has
    ``x = a`` (nothing is carried in from outside the run). A segmented Hillis-Steele scan: after
    the pass with offset s each row holds ``x_i = a_i + b_i * x_{i+2s}`` over the next 2s rows, so
    ceil(log2(longest run)) vectorised passes replace the per-row recursion (the reference's O(N^2)
    returns loop, Q11). Composing two affine maps only adds and multiplies, and with every ``b`` in
    [0, 1] nothing overflows; rows with equal suffixes get bit-identical results.
    """
    x = a.copy()
    coef = b.copy()
    longest = int(remaining.max(initial=-1)) + 1
    shift = 1
    while shift < longest:
        reach = remaining >= shift  # the row's partial sum has not reached the run's end yet
        x_ahead = np.zeros_like(x)
        x_ahead[:-shift] = x[shift:]
        x_ahead[~reach] = 0.0
        coef_ahead = np.zeros_like(coef)
        coef_ahead[:-shift] = coef[shift:]
        x += coef * x_ahead
        coef *= coef_ahead  # rows that already reached the end keep a harmless 0 here
        shift *= 2
    return x


# ----------------------------------------------------------------------------- group statistics


class GroupAdvantage(NamedTuple):
    """Per-row result of :func:`group_advantages`."""

    value: FloatArray
    shared: npt.NDArray[np.bool_]  # the row's group has at least two members
    count: IntArray  # members of each group code (indexed by code, not by row)
    mean: FloatArray  # mean value of each group code
    sq_dev: FloatArray  # sum of squared deviations from the mean of each group code


def group_advantages(
    ids: IntArray,
    values: FloatArray,
    *,
    ddof: int,
    by_std: bool,
    epsilon: float,
    lone_mean_zero: bool = False,
) -> GroupAdvantage:
    """``(r - mean) / (std + eps)`` of every row within its group (``r - mean`` if not by_std).

    The std has divisor n - ddof (Q4). Two-pass statistics for accuracy; deviations
    within 1e-9 * rms of the group become exactly 0 (module docstring, Q1). A one-row group
    has std 1 and, for the step levels, mean = its value, so its advantage is 0 (§3,
    §4.3); ``lone_mean_zero`` gives it mean 0 instead, the episode-term rule of §2.
    In-place updates keep N-sized temporaries (and their page faults) to a minimum.
    """
    count = np.bincount(ids)
    filled = np.maximum(count, 1)  # ids need not be dense: unused codes have count 0
    mean = np.bincount(ids, weights=values) / filled
    if lone_mean_zero:
        mean[count == 1] = 0.0
    dev = mean[ids]
    np.subtract(values, dev, out=dev)
    work = dev * dev
    sq_dev = np.bincount(ids, weights=work)
    limit = ZERO_RTOL * np.sqrt(sq_dev / filled + mean * mean)
    np.abs(dev, out=work)
    dev[work <= limit[ids]] = 0.0
    shared = count > 1
    if by_std:
        scale = np.ones_like(mean)
        scale[shared] = np.sqrt(sq_dev[shared] / (count[shared] - ddof))
        scale += epsilon
        dev /= scale[ids]
    return GroupAdvantage(dev, shared[ids], count, mean, sq_dev)


def episode_advantages(group: IntArray, scores: FloatArray, by_std: bool, epsilon: float) -> FloatArray:
    """GRPO / GiGPO-episode / HGPO-base term: step rows each count (length weighting, Q5),
    unbiased std, and a one-row group uses mean 0 and std 1 (§2)."""
    return group_advantages(group, scores, ddof=1, by_std=by_std, epsilon=epsilon, lone_mean_zero=True).value


def pair_codes(first: IntArray, second: IntArray, n_second: int) -> IntArray:
    """Dense ids of (first, second) pairs; both codes are below the row count (or a compact
    id range), so ``first * n_second + second`` cannot overflow int64."""
    return dense_ids(first * n_second + second)[0]
