"""Plain-Python HAE, one trajectory and one turn at a time, for tests only.

A direct transcription of the formulas of ``docs/hiper.md`` §HAE segments / low level / high
level / termination and §Rewards: explicit segment lists, backward loops and textbook
recursions, no vectorisation. Slow and obviously correct; :mod:`hae` must agree with it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence


def _by_trajectory(traj_ids: Sequence[Hashable], step_idx: Sequence[int]) -> dict[Hashable, list[int]]:
    """Input rows of each trajectory, ordered by step; steps must be 0..T-1."""
    rows: dict[Hashable, list[int]] = defaultdict(list)
    for row, traj in enumerate(traj_ids):
        rows[traj].append(row)
    for traj, members in rows.items():
        members.sort(key=lambda row: step_idx[row])
        if [step_idx[row] for row in members] != list(range(len(members))):
            raise ValueError(f"step_idx of trajectory {traj!r} is not 0..T-1")
    return rows


def reference_hae(
    traj_ids: Sequence[Hashable],
    step_idx: Sequence[int],
    rewards: Sequence[float],
    dones: Sequence[bool],
    switches: Sequence[bool],
    values_low: Sequence[float],
    values_high: Sequence[float],
    values_term: Sequence[float],
    *,
    gamma: float = 1.0,
    lam_turn: float = 1.0,
    lam_seg: float = 0.95,
    bootstrap_truncated: bool = True,
) -> dict[str, list[float] | list[bool]]:
    """The six per-row arrays and ``segment_start`` of :func:`hae.hae_advantages`, as lists."""
    n = len(traj_ids)
    out: dict[str, list] = {
        key: [0.0] * n for key in ("adv_low", "adv_high", "adv_term", "ret_low", "ret_high", "ret_term")
    }
    out["segment_start"] = [False] * n

    for members in _by_trajectory(traj_ids, step_idx).values():
        T = len(members)
        r = [float(rewards[row]) for row in members]
        d = [bool(dones[row]) for row in members]
        vl = [float(values_low[row]) for row in members]
        vh = [float(values_high[row]) for row in members]
        vt = [float(values_term[row]) for row in members]
        if any(d[:-1]):
            raise ValueError("dones: terminated before the last turn")

        # Segments: turn 0 and every SWITCH turn start one.
        starts = [t for t in range(T) if t == 0 or switches[members[t]]]
        segments = [(s, (starts[k + 1] - 1) if k + 1 < len(starts) else T - 1) for k, s in enumerate(starts)]
        K = len(segments)

        # boot_k: what segment k hands over to at its end.
        boots = []
        for k, (s, e) in enumerate(segments):
            if d[e]:
                boots.append(0.0)
            elif k + 1 < K:
                boots.append(vh[segments[k + 1][0]])
            else:
                boots.append(vh[s] if bootstrap_truncated else 0.0)

        # Low level: GAE restarted in every segment.
        adv_low = [0.0] * T
        for k, (s, e) in enumerate(segments):
            following = 0.0  # A_L(e_k + 1) := 0
            for t in range(e, s - 1, -1):
                if t < e:
                    v_next = vl[t + 1]
                elif not d[t] and k + 1 < K:
                    v_next = vh[segments[k + 1][0]]
                elif not d[t] and bootstrap_truncated:
                    v_next = vl[t]
                else:
                    v_next = 0.0
                not_done = 0.0 if d[t] else 1.0
                delta = r[t] + gamma * not_done * v_next - vl[t]
                adv_low[t] = delta + gamma * lam_turn * not_done * following
                following = adv_low[t]

        # High level: SMDP GAE over segments.
        adv_high = [0.0] * K
        following = 0.0  # A_H(K) := 0
        for k in range(K - 1, -1, -1):
            s, e = segments[k]
            n_k = e - s + 1
            seg_return = sum(gamma ** (j - s) * r[j] for j in range(s, e + 1))
            not_done = 0.0 if d[e] else 1.0
            delta = seg_return + gamma**n_k * not_done * boots[k] - vh[s]
            adv_high[k] = delta + gamma**n_k * lam_seg * not_done * following
            following = adv_high[k]

        # Termination: return to the segment end plus the discounted bootstrap.
        g_term = [0.0] * T
        for k, (s, e) in enumerate(segments):
            not_done = 0.0 if d[e] else 1.0
            for t in range(s, e + 1):
                g_term[t] = sum(gamma ** (j - t) * r[j] for j in range(t, e + 1))
                g_term[t] += gamma ** (e - t + 1) * not_done * boots[k]

        for t, row in enumerate(members):
            out["adv_low"][row] = adv_low[t]
            out["ret_low"][row] = adv_low[t] + vl[t]
            out["adv_term"][row] = g_term[t] - vt[t]
            out["ret_term"][row] = g_term[t]
        for k, (s, _e) in enumerate(segments):
            row = members[s]
            out["segment_start"][row] = True
            out["adv_high"][row] = adv_high[k]
            out["ret_high"][row] = adv_high[k] + vh[s]
    return out


def reference_step_rewards(
    env_rewards: Sequence[float],
    is_valid: Sequence[bool],
    switches: Sequence[bool],
    traj_ids: Sequence[Hashable],
    subgoal_changed: Sequence[bool],
    subgoals_nonempty: Sequence[bool],
    *,
    invalid_penalty: float = 0.1,
    keep_penalty: float = -0.3,
    keep_penalty_mode: str = "normalized",
    keep_consistency_penalty: float = -0.3,
    keep_consistency_requires_both: bool = True,
) -> list[float]:
    """Row by row: r_env - c_inv * invalid + keep term + consistency term (§Rewards)."""
    turns: dict[Hashable, int] = defaultdict(int)
    for traj in traj_ids:
        turns[traj] += 1
    out = []
    for i, reward in enumerate(env_rewards):
        value = float(reward)
        if not is_valid[i]:
            value -= invalid_penalty
        keep = not switches[i]
        if keep:
            value += keep_penalty if keep_penalty_mode == "fixed" else keep_penalty / turns[traj_ids[i]]
            if subgoal_changed[i] and (subgoals_nonempty[i] or not keep_consistency_requires_both):
                value += keep_consistency_penalty
        out.append(value)
    assert all(math.isfinite(v) for v in out)
    return out
