"""Benchmark of the vectorised estimators in ``hgpo_rllib.advantages`` against per-row Python.

Run: ``python benchmarks/advantages.py`` (``--quick`` for a short run). Prints a markdown table
of median wall times on one thread, kept in ``docs/results/advantages.md``. "spec" is
``docs/hgpo_algorithm.md``. The batches imitate
ALFWorld rollouts (spec §5, §6): G task groups x 8 rollouts x 50 steps, ~200-character
observation strings, random walks over a small room graph so states and short histories repeat
across and within trajectories, invalid
actions (obs unchanged, -0.1 penalty) and reward 10 on success. Every observation is a fresh
``str`` object, created env-step by env-step across all environments (as a vector env does),
while the batch rows are ordered trajectory by trajectory, as an episode buffer concatenates
them: the same memory pattern a trainer sees.

The baseline is written like the reference (dicts and per-row loops, spec §4.4 pseudo-code)
but in float64 with the same exact-zero rule, so both give the same numbers; the script
checks that before timing. (The reference's own O(N^2) return helper is far slower still:
16.8 s at 51.2k rows, spec §6.) The test suite reuses the baseline as an oracle.
"""

from __future__ import annotations

import os

if __name__ == "__main__":  # one thread, set before numpy loads; importers (tests) are left alone
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from collections.abc import Callable, Hashable, Sequence  # noqa: E402
from typing import NamedTuple  # noqa: E402

import numpy as np  # noqa: E402

from hgpo_rllib import advantages as vec  # noqa: E402
from hgpo_rllib.help_text import doc_summary

ZERO_RTOL = 1e-9  # same exact-zero rule as hgpo_rllib.advantages (spec Q1)


# ----------------------------------------------------------------------------- per-row baseline


def py_returns_and_scores(
    traj_ids: Sequence[Hashable],
    step_idx: Sequence[int],
    rewards: Sequence[float],
    is_action_valid: Sequence[bool],
    gamma: float,
    invalid_penalty: float = 0.1,
) -> tuple[list[float], list[float]]:
    """Spec §1.1 with a dict of trajectories and a backward loop over each one."""
    rows_by_traj: dict[Hashable, list[int]] = defaultdict(list)
    for row, traj in enumerate(traj_ids):
        rows_by_traj[traj].append(row)
    returns = [0.0] * len(rewards)
    scores = [0.0] * len(rewards)
    for rows in rows_by_traj.values():
        rows.sort(key=lambda row: step_idx[row])
        running = 0.0
        for row in reversed(rows):
            running = rewards[row] + gamma * running
            returns[row] = running
        total = sum(rewards[row] for row in rows)
        for row in rows:
            scores[row] = total
    for row, valid in enumerate(is_action_valid):
        if not valid:
            returns[row] -= invalid_penalty
            scores[row] -= invalid_penalty
    return returns, scores


def _py_centre(values: list[float], ddof: int) -> tuple[list[float], float]:
    """Deviations from the mean (exact-zero rule applied) and std with divisor n - ddof."""
    mean = sum(values) / len(values)
    devs = [value - mean for value in values]
    sq_dev = sum(dev * dev for dev in devs)
    rms = math.sqrt(sq_dev / len(values) + mean * mean)
    devs = [0.0 if abs(dev) <= ZERO_RTOL * rms else dev for dev in devs]
    std = math.sqrt(sq_dev / (len(values) - ddof)) if len(values) > 1 else 1.0
    return devs, std


def _py_group_rows(keys: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for row, key in enumerate(keys):
        groups[key].append(row)
    return groups


def py_episode_advantages(
    group_ids: Sequence[Hashable], scores: Sequence[float], by_std: bool, epsilon: float = 1e-6
) -> list[float]:
    """GRPO (spec §2): per-row statistics, unbiased std, a singleton group uses (0, 1)."""
    out = [0.0] * len(scores)
    for rows in _py_group_rows(group_ids).values():
        devs, std = _py_centre([scores[row] for row in rows], ddof=1)
        for row, dev in zip(rows, devs, strict=True):
            dev = scores[row] if len(rows) == 1 else dev
            out[row] = dev / (std + epsilon) if by_std else dev
    return out


def py_gigpo(
    group_ids: Sequence[Hashable],
    obs: Sequence[Hashable],
    step_returns: Sequence[float],
    episode_scores: Sequence[float],
    mode: str = "mean_norm",
    step_advantage_w: float = 1.0,
    epsilon: float = 1e-6,
) -> list[float]:
    """GiGPO (spec §3): episode term plus the anchor-state step term."""
    by_std = mode == "mean_std_norm"
    out = py_episode_advantages(group_ids, episode_scores, by_std, epsilon)
    for rows in _py_group_rows(list(zip(group_ids, obs, strict=True))).values():
        devs, std = _py_centre([step_returns[row] for row in rows], ddof=1)
        for row, dev in zip(rows, devs, strict=True):
            out[row] += step_advantage_w * (dev / (std + epsilon) if by_std else dev)
    return out


def py_hgpo(
    group_ids: Sequence[Hashable],
    traj_ids: Sequence[Hashable],
    step_idx: Sequence[int],
    obs: Sequence[Hashable],
    step_returns: Sequence[float],
    episode_scores: Sequence[float],
    history_length: int = 2,
    mode: str = "mean_std_norm",
    alpha: float = 1.0,
    base_group: bool = False,
    weighting: str = "reference",
    epsilon: float = 1e-6,
) -> list[float]:
    """HGPO, the spec §4.4 pseudo-code: a dict of (group, level, key tuple) -> rows."""
    by_std = mode == "mean_std_norm"
    clusters: dict[tuple[Hashable, int, tuple[Hashable, ...]], list[int]] = defaultdict(list)
    trajectories = _py_group_rows(list(zip(group_ids, traj_ids, strict=True)))
    for rows in trajectories.values():
        rows.sort(key=lambda row: step_idx[row])
        for t, row in enumerate(rows):
            for depth in range(1, min(history_length + 1, t + 1) + 1):
                window = tuple(obs[prev] for prev in rows[t - depth + 1 : t + 1])
                clusters[(group_ids[row], depth, window)].append(row)
    items: list[list[tuple[int, float]]] = [[] for _ in step_returns]
    if base_group:
        for row, value in enumerate(py_episode_advantages(group_ids, episode_scores, by_std, epsilon)):
            items[row].append((0, value))
    for (_, depth, _), rows in clusters.items():
        if len(rows) < 2:
            continue
        devs, std = _py_centre([step_returns[row] for row in rows], ddof=0)
        for row, dev in zip(rows, devs, strict=True):
            items[row].append((depth, dev / (std + epsilon) if by_std else dev))
    offset = 0 if weighting == "paper" and not base_group else 1
    out = []
    for row_items in items:
        kept = [(1 if depth == 0 else depth + offset, value) for depth, value in row_items if value != 0.0]
        total = sum(length**alpha for length, _ in kept)
        out.append(sum(length**alpha * value for length, value in kept) / (total + epsilon) if kept else 0.0)
    return out


# ----------------------------------------------------------------------------- batches


class Batch(NamedTuple):
    """One rollout batch in trajectory-major row order."""

    group_ids: np.ndarray
    traj_ids: np.ndarray
    step_idx: np.ndarray
    obs: list[str]
    rewards: np.ndarray
    is_action_valid: np.ndarray


def make_batch(
    n_groups: int, group_size: int = 8, steps: int = 50, n_rooms: int = 40, seed: int = 0
) -> Batch:
    """ALFWorld-like rollouts: random walks on a ring of rooms with shortcuts (revisits and
    shared histories), 10 % invalid actions, success (reward 10 at the last step) w.p. 0.3."""
    rng = np.random.default_rng(seed)
    n_env = n_groups * group_size
    group = np.repeat(np.arange(n_groups), group_size)
    room = np.zeros(n_env, dtype=np.int64)
    rows_obs: list[list[str]] = [[] for _ in range(n_env)]
    valid = rng.random((n_env, steps)) > 0.1
    for t in range(steps):  # a vector env: all environments step together
        for env in range(n_env):
            rows_obs[env].append(
                f"-= Task {group[env]} =- You are in room {room[env]} of the house. Looking quickly "
                f"around you, you see a cabinet {room[env] % 7 + 1}, a countertop {room[env] % 3 + 1}, "
                f"a drawer {room[env] % 5 + 1}, a fridge 1 and a sinkbasin 1. Your task is to: clean "
                f"some mug {group[env] % 4 + 1}."
            )
        jump = rng.random(n_env) < 0.2
        moved = np.where(jump, rng.integers(0, n_rooms, n_env), (room + rng.integers(-1, 2, n_env)) % n_rooms)
        room = np.where(valid[:, t], moved, room)
    success = rng.random(n_env) < 0.3
    rewards = np.zeros((n_env, steps))
    rewards[:, -1] = 10.0 * success
    return Batch(
        group_ids=np.repeat(group, steps),
        traj_ids=np.repeat(np.arange(n_env), steps),
        step_idx=np.tile(np.arange(steps), n_env),
        obs=[text for env_obs in rows_obs for text in env_obs],
        rewards=rewards.ravel(),
        is_action_valid=valid.ravel(),
    )


# ----------------------------------------------------------------------------- timing


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` calls after one warm-up call, in milliseconds."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def cases(
    batch: Batch, returns: np.ndarray, scores: np.ndarray
) -> dict[str, tuple[Callable, Callable | None]]:
    """Name -> (vectorised call, baseline call or None where there is no per-row version)."""
    listed = (batch.group_ids.tolist(), batch.traj_ids.tolist(), batch.step_idx.tolist())
    groups, trajs, steps = listed
    r_list, s_list = returns.tolist(), scores.tolist()
    table: dict[str, tuple[Callable, Callable | None]] = {
        "returns+scores (§1.1)": (
            lambda: vec.step_returns_and_scores(
                batch.traj_ids, batch.step_idx, batch.rewards, batch.is_action_valid, 0.95
            ),
            lambda: py_returns_and_scores(
                trajs, steps, batch.rewards.tolist(), batch.is_action_valid.tolist(), 0.95
            ),
        ),
        "GRPO": (
            lambda: vec.grpo_advantages(batch.group_ids, scores),
            lambda: py_episode_advantages(groups, s_list, by_std=True),
        ),
        "GiGPO (mean_std_norm)": (
            lambda: vec.gigpo_advantages(batch.group_ids, batch.obs, returns, scores, mode="mean_std_norm"),
            lambda: py_gigpo(groups, batch.obs, r_list, s_list, mode="mean_std_norm"),
        ),
    }
    # The last case shows the share of string interning: the same batch with int observation ids,
    # as an env runner could hand over if it interned each observation when it was produced.
    obs_ids = np.unique(batch.obs, return_inverse=True)[1]
    hgpo_cases = [(k, base, batch.obs, "") for k in (2, 4) for base in (False, True)]
    for k, base, obs, note in hgpo_cases + [(4, True, obs_ids, " (int obs ids)")]:
        name = f"HGPO K={k}" + (" + base" if base else "") + note
        table[name] = (
            lambda k=k, base=base, obs=obs: vec.hgpo_advantages(
                batch.group_ids,
                batch.traj_ids,
                batch.step_idx,
                obs,
                returns,
                scores,
                history_length=k,
                base_group=base,
            ),
            lambda k=k, base=base, obs=obs: py_hgpo(
                groups, trajs, steps, list(obs), r_list, s_list, history_length=k, base_group=base
            ),
        )
    table["HGPO K=4 adaptive"] = (
        lambda: vec.hgpo_advantages(
            batch.group_ids,
            batch.traj_ids,
            batch.step_idx,
            batch.obs,
            returns,
            scores,
            history_length=4,
            weighting="adaptive",
        ),
        None,
    )
    return table


def warm_allocator() -> None:
    """Put glibc malloc in the state of a long-running trainer.

    In a fresh process glibc serves every >=128 KiB array with mmap and hands freed memory
    back to the OS, so each N-sized numpy temporary costs ~100 page faults: at 51.2k rows that
    is about half the estimator's time. Freeing one large block raises glibc's dynamic mmap
    and trim thresholds, as a trainer that has held rollout and tensor buffers has long done.
    """
    block = np.ones(2**21)  # 16 MiB
    del block


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--repeats", type=int, default=21, help="timed calls per vectorised case")
    parser.add_argument("--baseline-repeats", type=int, default=3, help="timed calls per baseline case")
    parser.add_argument("--quick", action="store_true", help="16-group batch only, few repeats")
    parser.add_argument(
        "--fresh-allocator",
        action="store_true",
        help="skip warm_allocator() and the baseline (whose big dicts warm it too): fresh-process timings",
    )
    args = parser.parse_args()
    if not args.fresh_allocator:
        warm_allocator()
    sizes = (16,) if args.quick else (16, 128)
    repeats, baseline_repeats = (5, 1) if args.quick else (args.repeats, args.baseline_repeats)

    lines: list[str] = []

    def emit(line: str) -> None:
        print(line)
        lines.append(line)

    emit("| batch | rows | estimator | vectorised (ms) | per-row Python (ms) | speed-up |")
    emit("|---|---:|---|---:|---:|---:|")
    for n_groups in sizes:
        batch = make_batch(n_groups)
        returns, scores = vec.step_returns_and_scores(
            batch.traj_ids, batch.step_idx, batch.rewards, batch.is_action_valid, 0.95
        )
        label = f"{n_groups}x8x50"
        totals: dict[str, float] = {}
        for name, (fast, slow) in cases(batch, returns, scores).items():
            fast_ms = median_ms(fast, repeats)
            totals[name] = fast_ms
            baseline = "not run | n/a"
            if not args.fresh_allocator and slow is not None:
                np.testing.assert_allclose(np.asarray(fast()), np.asarray(slow()), rtol=1e-9, atol=1e-9)
                slow_ms = median_ms(slow, baseline_repeats)
                baseline = f"{slow_ms:.1f} | {slow_ms / fast_ms:.0f}x"
            emit(f"| {label} | {len(returns)} | {name} | {fast_ms:.2f} | {baseline} |")
        combined = totals["returns+scores (§1.1)"] + totals["HGPO K=4 + base"]
        target = 5.0 if n_groups == 16 else 25.0
        verdict = "meets" if combined <= target else "MISSES"
        emit(
            f"| {label} | {len(returns)} | **returns + HGPO K=4 + base** | **{combined:.2f}** "
            f"| target <= {target:.0f} ms | {verdict} |"
        )
        fixed = totals["returns+scores (§1.1)"] + totals["HGPO K=4"]
        adaptive = totals["returns+scores (§1.1)"] + totals["HGPO K=4 adaptive"]
        verdict = "meets" if adaptive <= 2 * fixed else "MISSES"
        print(
            f"| {label} | {len(returns)} | **returns + HGPO K=4 adaptive** | **{adaptive:.2f}** "
            f"| {adaptive / fixed:.2f}x returns + HGPO K=4 ({fixed:.2f} ms), target <= 2x | {verdict} |"
        )

    from results_file import write_result  # benchmarks/ is on sys.path when run as a script

    write_result("advantages", "Advantage estimators: median wall time on one thread", "\n".join(lines))


if __name__ == "__main__":
    main()
