"""HiPER's Hierarchical Advantage Estimation (HAE), vectorised in numpy.

HiPER (Peng et al., "Hierarchical Plan-Execute RL", arXiv 2602.16165) has one LLM write, at every
environment turn, a ``<switch>`` decision (KEEP or SWITCH), a ``<subgoal>`` and an ``<action>``.
A SWITCH (and turn 0) opens a new *segment*, i.e. a new option of the planner. HAE then gives
three advantages per turn (``docs/hiper.md`` §HAE, written from the authors' code):

- low level (executor, action tokens): GAE inside the segment only, bootstrapped at the segment
  end to the planner's value of the next segment start (an SMDP boundary);
- high level (planner, subgoal tokens of segment starts): GAE over segments, each segment a
  single SMDP step discounted by ``gamma ** n_k``;
- termination (switch tokens): the return to the segment end (plus the same bootstrap) minus a
  learned baseline.

Rows are environment turns in any order; ``traj_ids`` (any hashable keys) and ``step_idx`` put
them in order. Everything is float64 with one sort, a few index passes and segmented
Hillis-Steele scans (O(N log L), L the longest segment or segment chain), so no Python runs per
row. Degenerate input is exact: zero rewards and values give exact zeros, and an empty batch gives
empty arrays.

Pure numpy, like the other estimators: the learner connector turns token spans, critic outputs and
env infos into the row arrays below.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hgpo_rllib.advantages.estimators import hgpo_advantages
from hgpo_rllib.advantages.grouping import (
    BoolArray,
    FloatArray,
    Keys,
    check_consecutive_steps,
    check_option,
    finite_column,
    finite_scalar,
    flag_column,
    intern_keys,
    n_rows,
    reverse_linear_scan,
    trajectory_layout,
    unit_interval,
)

#: ``keep_penalty_mode`` of :func:`hae_step_rewards`.
KEEP_PENALTY_MODES = ("fixed", "normalized")
_STD_EPS = 1e-8


# ----------------------------------------------------------------------------- public API


def parse_switch(text: str | None) -> bool:
    """True (SWITCH) unless the ``<switch>`` block's content says KEEP (``docs/hiper.md`` §Switch parsing).

    This is the rule HAE uses to re-derive segment boundaries from the model's text, which is
    laxer than the env's validity check (§Quirks, quirk 6): a missing tag (``None``) or an
    empty / whitespace-only content counts as KEEP, ``text.strip().upper() == "KEEP"`` is KEEP,
    and *any other* text (``"SWITCH"``, ``"Keep."``, ``"maybe"``) is SWITCH. Pass the content
    between the tags, not the whole response.
    """
    if text is None:
        return False
    if not isinstance(text, str):
        raise TypeError(f"text must be a str or None, got {type(text).__name__}")
    content = text.strip()
    return bool(content) and content.upper() != "KEEP"


def hae_step_rewards(
    env_rewards: npt.ArrayLike,
    is_valid: npt.ArrayLike,
    switches: npt.ArrayLike,
    traj_ids: Keys,
    subgoal_changed: npt.ArrayLike,
    subgoals_nonempty: npt.ArrayLike,
    *,
    invalid_penalty: float = 0.1,
    keep_penalty: float = -0.3,
    keep_penalty_mode: str = "normalized",
    keep_consistency_penalty: float = -0.3,
    keep_consistency_requires_both: bool = True,
    step_idx: npt.ArrayLike | None = None,
) -> FloatArray:
    """Per-turn reward fed to HAE (``docs/hiper.md`` §Rewards), aligned with the input rows.

    HiPER's formula (the authors' code), taken literally::

        r_t = env_rewards_t - invalid_penalty * [not is_valid_t]
              + keep term                                    (KEEP turns only)
              + keep_consistency_penalty * [KEEP_t and subgoal_changed_t
                                            and (subgoals_nonempty_t or not requires_both)]

    so ``invalid_penalty`` is a positive coefficient that is *subtracted*, while ``keep_penalty``
    and ``keep_consistency_penalty`` are given as negative numbers and *added* (the defaults,
    ALFWorld's, subtract 0.3). The keep term is ``keep_penalty`` on every KEEP turn in mode
    ``"fixed"``; in mode ``"normalized"`` (HiPER's default) it is ``keep_penalty / T`` per KEEP
    turn, T the trajectory's number of turns (rows of its ``traj_ids`` in the batch), so a
    trajectory pays ``keep_penalty * K / T`` in total for K KEEP turns whatever its length.

    The penalties push the planner to re-plan instead of coasting on stale subgoals (keep term)
    and make a KEEP honest: a KEEP turn is supposed to copy the current subgoal verbatim, and
    ``subgoal_changed[t]`` says its subgoal tokens differ from turn t-1's. With
    ``keep_consistency_requires_both`` the penalty needs ``subgoals_nonempty[t]``, i.e. both
    this turn's and the previous turn's subgoal spans non-empty. ``switches[t]`` is True for
    SWITCH (see :func:`parse_switch`).

    Turn 0 has no previous turn, so it never gets the consistency penalty: the caller should
    give ``subgoal_changed = False`` there, and when ``step_idx`` is passed the rows with step 0
    are exempted regardless. A KEEP at turn 0 does get the keep term, as in the code (its
    ``keep_penalty_skip_first`` option is not wired, §Quirks quirk 7).
    """
    columns: dict[str, object] = {
        "env_rewards": env_rewards,
        "is_valid": is_valid,
        "switches": switches,
        "traj_ids": traj_ids,
        "subgoal_changed": subgoal_changed,
        "subgoals_nonempty": subgoals_nonempty,
    }
    if step_idx is not None:
        columns["step_idx"] = step_idx
    n = n_rows(**columns)
    check_option(keep_penalty_mode, KEEP_PENALTY_MODES, "keep_penalty_mode")
    invalid_penalty = finite_scalar(invalid_penalty, "invalid_penalty")
    keep_penalty = finite_scalar(keep_penalty, "keep_penalty")
    keep_consistency_penalty = finite_scalar(keep_consistency_penalty, "keep_consistency_penalty")
    rewards = finite_column(env_rewards, "env_rewards")
    valid = flag_column(is_valid, "is_valid")
    keep = ~flag_column(switches, "switches")
    changed = flag_column(subgoal_changed, "subgoal_changed")
    nonempty = flag_column(subgoals_nonempty, "subgoals_nonempty")
    if n == 0:
        return rewards
    if step_idx is not None:
        # Validates 0..T-1 per trajectory as hae_advantages does; turn 0 has no previous subgoal.
        check_consecutive_steps(trajectory_layout(traj_ids, step_idx), step_idx)
        changed &= np.asarray(step_idx) != 0
    codes, _ = intern_keys(traj_ids, "traj_ids")

    out = rewards.copy()
    out[~valid] -= invalid_penalty
    if keep_penalty_mode == "fixed":
        out[keep] += keep_penalty
    else:
        turns = np.bincount(codes)[codes].astype(np.float64)
        out[keep] += keep_penalty / turns[keep]
    inconsistent = keep & changed
    if keep_consistency_requires_both:
        inconsistent &= nonempty
    out[inconsistent] += keep_consistency_penalty
    return out


@dataclass(frozen=True)
class HAEResult:
    """Per-row output of :func:`hae_advantages`, aligned with the input rows.

    ``adv_low``/``ret_low`` train the action tokens and critic head 0, ``adv_high``/``ret_high``
    the subgoal tokens of segment starts and head 1 (0.0 on every other row), and
    ``adv_term``/``ret_term`` the switch tokens of every turn and head 2. ``segment_start`` marks
    turn 0 and the SWITCH turns. ``ret_* = adv_* + value_*`` on the rows where they are defined.
    """

    adv_low: FloatArray
    adv_high: FloatArray
    adv_term: FloatArray
    ret_low: FloatArray
    ret_high: FloatArray
    ret_term: FloatArray
    segment_start: BoolArray


def hae_advantages(
    traj_ids: Keys,
    step_idx: npt.ArrayLike,
    rewards: npt.ArrayLike,
    dones: npt.ArrayLike,
    switches: npt.ArrayLike,
    values_low: npt.ArrayLike,
    values_high: npt.ArrayLike,
    values_term: npt.ArrayLike,
    *,
    gamma: float = 1.0,
    lam_turn: float = 1.0,
    lam_seg: float = 0.95,
    bootstrap_truncated: bool = True,
) -> HAEResult:
    """Low-level, high-level and termination advantages and value targets of HAE.

    Inputs are row-aligned, one row per turn, rows in any order. ``step_idx`` must run exactly
    over 0..T-1 within each trajectory. ``rewards`` are the shaped per-turn rewards (see
    :func:`hae_step_rewards`). ``dones[t]`` is gymnasium's ``terminated``: it can only be True at
    a trajectory's last turn (ValueError otherwise: an episode cannot go on after it terminated),
    and a last turn with ``dones=False`` is a truncation. ``switches[t]`` is True for SWITCH.
    ``values_low``/``values_term`` are read on every row; ``values_high`` only on segment starts,
    so other rows may hold anything, NaN included.

    With segments ``[s_k, e_k]`` (turn 0 and each SWITCH turn open one; ``docs/hiper.md``
    §HAE segments), ``n_k = e_k - s_k + 1`` and ``d`` the terminal flag of the segment's end:

    - ``boot_k`` = ``V_H(s_{k+1})`` for an inner segment, ``V_H(s_k)`` for a truncated last one
      with ``bootstrap_truncated`` (quirk: the segment's *own* start value), else 0;
    - low level (§HAE low level): TD errors ``r_t + gamma * V_next - V_L(t)`` with ``V_next`` =
      ``V_L(t+1)`` inside the segment, ``V_H(s_{k+1})`` at an inner segment end (SMDP
      bootstrap to the planner), ``V_L(t)`` at a truncated last turn with
      ``bootstrap_truncated`` (quirk: self-bootstrap), 0 at a terminal turn; then GAE with
      ``gamma * lam_turn`` that restarts at every segment end;
    - high level (§HAE high level): ``delta_k = R_k + gamma**n_k * boot_k - V_H(s_k)`` with
      ``R_k`` the segment's discounted reward, and ``A_H(k) = delta_k + gamma**n_k * lam_seg *
      A_H(k+1)`` over the trajectory's segments;
    - termination (§HAE termination): ``G_T(t) = sum_{j=t..e_k} gamma**(j-t) r_j +
      gamma**(e_k-t+1) * boot_k`` and ``A_T = G_T - V_T(t)``.

    Since ``R_k + gamma**n_k * boot_k`` is ``G_T(s_k)``, the high level reuses the termination
    scan. Nothing is standardised here; see :func:`standardize` (§Normalisation).
    """
    n = n_rows(
        traj_ids=traj_ids,
        step_idx=step_idx,
        rewards=rewards,
        dones=dones,
        switches=switches,
        values_low=values_low,
        values_high=values_high,
        values_term=values_term,
    )
    gamma = unit_interval(gamma, "gamma")
    lam_turn = unit_interval(lam_turn, "lam_turn")
    lam_seg = unit_interval(lam_seg, "lam_seg")
    if not isinstance(bootstrap_truncated, bool | np.bool_):
        raise TypeError(f"bootstrap_truncated must be a bool, got {bootstrap_truncated!r}")
    r_in = finite_column(rewards, "rewards")
    done_in = flag_column(dones, "dones")
    switch_in = flag_column(switches, "switches")
    v_low_in = finite_column(values_low, "values_low")
    v_high_in = finite_column(values_high, "values_high", check_finite=False)
    v_term_in = finite_column(values_term, "values_term")
    if n == 0:
        empty = np.zeros(0)
        return HAEResult(
            empty, empty.copy(), empty.copy(), empty.copy(), empty.copy(), empty.copy(), np.zeros(0, bool)
        )

    layout = trajectory_layout(traj_ids, step_idx)
    check_consecutive_steps(layout, step_idx)
    traj_end = layout.remaining == 0
    order = layout.order
    r, done, v_low, v_high, v_term = (
        r_in[order],
        done_in[order],
        v_low_in[order],
        v_high_in[order],
        v_term_in[order],
    )
    early = np.flatnonzero(done & ~traj_end)
    if early.size:
        raise ValueError(
            f"dones: input row {int(order[early[0]])} is terminated but is not its trajectory's last turn"
        )

    # Segments (§HAE segments): a run of sorted rows opened by turn 0 or a SWITCH turn.
    start = switch_in[order] | (np.r_[True, traj_end[:-1]])
    seg_end = np.r_[start[1:], True]
    first = np.flatnonzero(start)  # s_k of every segment, in sorted-row coordinates
    last = np.flatnonzero(seg_end)  # e_k
    seg_id = np.cumsum(start) - 1
    to_seg_end = last[seg_id] - np.arange(n)
    if not np.isfinite(v_high[first]).all():
        raise ValueError("values_high contains non-finite values on segment-start rows")

    # boot_k: the value the segment hands over to (§HAE high level). An inner segment's end is
    # followed, in sorted order, by the next segment's start, hence ``last + 1``.
    final = traj_end[last]
    alive = ~done[last]  # (1 - d_{e_k}); False only for a terminated trajectory's last segment
    boot = np.zeros(len(first))
    inner = np.flatnonzero(~final)
    boot[inner] = v_high[last[inner] + 1]
    truncated = np.flatnonzero(final & alive)
    if bootstrap_truncated:
        boot[truncated] = v_high[first[truncated]]

    # Low level (§HAE low level): one-step TD errors, then GAE within each segment.
    v_next = np.zeros(n)
    v_next[:-1] = v_low[1:]
    v_next[last] = 0.0
    v_next[last[inner]] = v_high[last[inner] + 1]
    if bootstrap_truncated:
        v_next[last[truncated]] = v_low[last[truncated]]
    delta = r + gamma * v_next - v_low  # v_next is 0 wherever done, so (1 - d_t) is implicit
    adv_low = reverse_linear_scan(delta, np.full(n, gamma * lam_turn), to_seg_end)

    # Termination (§HAE termination): discounted return to the segment end plus gamma * boot_k.
    tail = r.copy()
    tail[last] += gamma * np.where(alive, boot, 0.0)
    ret_term = reverse_linear_scan(tail, np.full(n, gamma), to_seg_end)

    # High level (§HAE high level): SMDP GAE over the segments of each trajectory.
    seg_delta = ret_term[first] - v_high[first]
    seg_coef = gamma ** (last - first + 1).astype(np.float64) * lam_seg
    segs_left = seg_id[first + layout.remaining[first]] - np.arange(len(first))
    seg_adv = reverse_linear_scan(seg_delta, seg_coef, segs_left)

    out = {
        name: np.zeros(n) for name in ("adv_low", "adv_high", "adv_term", "ret_low", "ret_high", "ret_term")
    }
    out["adv_low"][order] = adv_low
    out["ret_low"][order] = adv_low + v_low
    out["adv_term"][order] = ret_term - v_term
    out["ret_term"][order] = ret_term
    out["adv_high"][order[first]] = seg_adv
    out["ret_high"][order[first]] = seg_adv + v_high[first]
    segment_start = np.zeros(n, dtype=bool)
    segment_start[order] = start
    return HAEResult(segment_start=segment_start, **out)


def segment_group_advantages(
    group_ids: Keys,
    traj_ids: Keys,
    step_idx: npt.ArrayLike,
    obs: Keys,
    segment_start: npt.ArrayLike,
    segment_returns: npt.ArrayLike,
    *,
    history_length: int = 2,
    mode: str = "mean_std_norm",
    alpha: float = 1.0,
    weighting: str = "reference",
) -> FloatArray:
    """HAE's high level without the critic's high head (ours; ``docs/hiper.md`` §A critic-free
    high level): HGPO (docs/hgpo_algorithm.md §4) over the semi-MDP whose steps are segments.

    The rows that enter are the segment starts (``segment_start``; turn 0 always starts one), the
    k-th start of a trajectory its step k, ``obs`` its observation and ``segment_returns`` its
    return to the episode's end (HAE's ``ret_high`` with ``lam_seg=1``: Monte-Carlo over the
    segments, with HAE's truncation bootstrap). A segment start's level-d group holds the starts of
    the same rollout group whose last d segment-start observations are the same. Returns one value
    per input row: HGPO's aggregate on segment starts, 0 elsewhere (rows in any order).
    """
    n = n_rows(
        group_ids=group_ids,
        traj_ids=traj_ids,
        step_idx=step_idx,
        obs=obs,
        segment_start=segment_start,
        segment_returns=segment_returns,
    )
    start = flag_column(segment_start, "segment_start")
    returns = finite_column(segment_returns, "segment_returns", check_finite=False)
    out = np.zeros(n)
    if n == 0:
        return out
    layout = trajectory_layout(traj_ids, step_idx)
    check_consecutive_steps(layout, step_idx)
    opens = start[layout.order] | (layout.pos == 0)
    count = np.cumsum(opens)
    segment_number = count - count[np.arange(n) - layout.pos]  # k of each sorted start row
    rows = layout.order[opens]
    if not np.isfinite(returns[rows]).all():
        raise ValueError("segment_returns contains non-finite values on segment-start rows")
    picked = [np.asarray(keys, dtype=object)[rows] for keys in (group_ids, traj_ids, obs)]
    out[rows] = hgpo_advantages(
        picked[0],
        picked[1],
        segment_number[opens],
        picked[2],
        returns[rows],
        np.zeros(len(rows)),  # episode scores: only the base item reads them, and it is off
        history_length=history_length,
        mode=mode,
        alpha=alpha,
        weighting=weighting,
    )
    return out


def standardize(values: npt.ArrayLike, mask: npt.ArrayLike, *, eps: float = _STD_EPS) -> FloatArray:
    """``(A - mean) / (pop_std + eps)`` over the rows where ``mask`` is True (§Normalisation).

    HiPER standardises each of A_L, A_H and A_T separately over the whole batch (not per group
    or trajectory), with the population std and eps 1e-8, each over the turns that carry the
    tokens it trains. Rows outside ``mask`` are returned unchanged (0 for ``adv_high`` off
    segment starts). If all masked values are equal the result there is exactly 0, so float
    noise in ``A - mean`` is never divided by a near-zero std. Non-finite values are refused
    on masked rows only.
    """
    n_rows(values=values, mask=mask)
    arr = finite_column(values, "values", check_finite=False)
    chosen = flag_column(mask, "mask")
    eps = finite_scalar(eps, "eps")
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps!r}")
    picked = arr[chosen]
    if not np.isfinite(picked).all():
        raise ValueError("values contains non-finite values on masked rows")
    if picked.size == 0:
        return arr
    if picked.min() == picked.max():
        arr[chosen] = 0.0
        return arr
    dev = picked - picked.mean()
    arr[chosen] = dev / (np.sqrt(np.mean(dev * dev)) + eps)
    return arr
