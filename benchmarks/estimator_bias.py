"""Bias / variance study of GRPO, GiGPO and HGPO advantages on small aliased POMDPs.

Run: ``python benchmarks/estimator_bias.py`` (about a minute on one core; ``--quick`` for a few
seconds). Writes ``study.csv`` and ``study.png`` to ``--output`` (default
``results/estimator_bias``; an existing directory is never reused: a free ``-2``, ``-3``...
suffix is picked) and prints markdown tables.

Question (paper §4, Proposition 4.1): grouping steps by the current observation alone
(GiGPO's step term = HGPO with K = 0) is biased when steps share an observation but not a
history; deeper HGPO levels remove that bias at the price of smaller, noisier groups, and the
weighted mix should lie between the current-state group and the deepest group.

Environments. Random POMDPs with ``n_pos`` positions (the observation), a hidden key bit and
``n_act`` actions. Moves are stochastic; one or two (position, action) pairs pick up the key
without changing the observation; reaching the goal position ends the episode with reward 1
if the key is held and 0 otherwise; a horizon of ``T`` steps ends the rest with 0. The same
observation is therefore reached by histories with different values, and observation-only
keys (what HGPO groups on, docs/hgpo_algorithm.md Q7) may or may not reveal the key. MDPs whose success
probability is below 10 % or above 90 % are redrawn. The policy is a fixed stochastic policy
of the current observation.

True advantage. The key bit is a deterministic function of the full history (observations
and actions), so the history-conditioned advantage ``A*(h_t, a_t) = Q(h_t, a_t) - V(h_t)``
equals ``Q_t(pos, key, a) - V_t(pos, key)``, computed exactly by backward induction over
(t, pos, key): dynamic programming over histories, collapsed to their sufficient statistic.
Discount ``gamma`` (0.95 as in the paper); the time index matters because of the horizon.

Fair comparison. Every estimator is run unnormalised, so its output is in return units like
A*: GRPO with ``norm_by_std=False`` (Dr.GRPO; its score is the undiscounted episode total, as in
the reference trainer), GiGPO (episode + step term, as used) and HGPO with
``mode="mean_norm"``; ``mean_std_norm`` outputs are in per-group std units and are not
comparable with A*. HGPO K = 0 is GiGPO's step term alone (population std aside, which
mean_norm does not use). An oracle ``R_t - V(h_t)`` (exact baseline) marks what Monte-Carlo
returns allow at best. "HGPO deepest" uses alpha = 200, which puts all weight on the deepest
level with a non-zero item: the "deepest group" end of Proposition 4.1 (falling back to
shallower levels where deeper groups are singletons, as the estimator itself does). "HGPO
adaptive" is ``weighting="adaptive"`` (per-step weights from the batch, no alpha).

Two error views, both decomposed the same way:

- ``adv_*``: e = estimate - A*, relative to E[A*^2]. A constant 0 scores 1 here, while any
  return-based estimate carries the return noise (the oracle scores ~4 in these tasks), so
  estimators that often output 0 (all-fail groups, singleton groups) look good on this view.
- ``base_*``: the implied baseline ``R_t - estimate`` against V(h_t), i.e. e = (R_t - V(h_t)) -
  estimate, relative to E[(R_t - V(h_t))^2]. The return noise common to all estimators is
  removed; the oracle scores 0 and an estimate of 0 (own return as baseline) scores 1. This is
  the quantity Proposition 4.1 is about: how well the group mean estimates V(h_t).

Decomposition: with the full history (h_t, a_t) as conditioning key k, MSE = E[e^2] =
E[b_k^2] + E[Var(e | k)] with b_k = E[e | k], estimated with per-key sample means and unbiased
variances (bias^2 uses m_k^2 - v_k / n_k, so bias^2 + variance = MSE exactly; single-sample
keys count entirely as bias^2, which leaves the oracle's adv bias^2 at ~0.04 instead of 0).
``corr`` is the scale-free correlation with A*; ``zero_frac`` the share of exact-zero
estimates. Everything is averaged over the random POMDPs.
"""

from __future__ import annotations

import os

if __name__ == "__main__":  # one thread, set before numpy loads; importers (tests) are left alone
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse  # noqa: E402
import csv  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import NamedTuple  # noqa: E402

import numpy as np  # noqa: E402

from hgpo_rllib.advantages import (  # noqa: E402
    discounted_returns,
    gigpo_advantages,
    grpo_advantages,
    hgpo_advantages,
)
from hgpo_rllib.help_text import doc_summary

DEEPEST_ALPHA = 200.0
OUTPUT_FILES = ("study.csv", "study.png")


# ----------------------------------------------------------------------------- environment


@dataclass(frozen=True)
class AliasedPOMDP:
    """Positions are observed; the key bit is hidden. ``goal`` is terminal."""

    moves: np.ndarray  # (n_pos, n_act, n_pos) next-position probabilities
    pickup: np.ndarray  # (n_pos, n_act) bool: this action picks up the key
    policy: np.ndarray  # (n_pos, n_act) action probabilities given the observation
    horizon: int
    gamma: float

    @property
    def goal(self) -> int:
        return self.moves.shape[0] - 1


def random_pomdp(
    rng: np.random.Generator, n_pos: int = 5, n_act: int = 3, horizon: int = 8, gamma: float = 0.95
) -> AliasedPOMDP:
    """Draw POMDPs until the policy's success probability from position 0 is in [0.1, 0.9]."""
    for _ in range(10_000):
        moves = np.zeros((n_pos, n_act, n_pos))
        for pos in range(n_pos - 1):
            for act in range(n_act):
                targets = rng.choice(n_pos, size=2)
                split = 1.0 if rng.random() < 0.5 else rng.uniform(0.2, 0.8)
                moves[pos, act, targets[0]] += split
                moves[pos, act, targets[1]] += 1.0 - split
        moves[n_pos - 1, :, n_pos - 1] = 1.0  # goal absorbs (never acted in)
        pickup = np.zeros((n_pos, n_act), dtype=bool)
        for _ in range(rng.integers(1, 3)):
            pickup[rng.integers(0, n_pos - 1), rng.integers(0, n_act)] = True
        policy = 0.9 * rng.dirichlet(np.ones(n_act), size=n_pos) + 0.1 / n_act
        pomdp = AliasedPOMDP(moves, pickup, policy, horizon, gamma)
        success = success_probability(pomdp)
        if 0.1 <= success <= 0.9:
            return pomdp
    raise RuntimeError("no POMDP with a success probability in [0.1, 0.9] in 10000 draws")


class Solution(NamedTuple):
    q: np.ndarray  # (horizon, n_pos, 2, n_act): Q_t(pos, key, a)
    v: np.ndarray  # (horizon + 1, n_pos, 2): V_t(pos, key), V_horizon = 0


def solve(pomdp: AliasedPOMDP, gamma: float | None = None) -> Solution:
    """Backward induction over (t, pos, key) under the fixed policy (exact)."""
    gamma = pomdp.gamma if gamma is None else gamma
    n_pos, n_act, _ = pomdp.moves.shape
    q = np.zeros((pomdp.horizon, n_pos, 2, n_act))
    v = np.zeros((pomdp.horizon + 1, n_pos, 2))
    not_goal = np.arange(n_pos) != pomdp.goal
    for t in reversed(range(pomdp.horizon)):
        for key in (0, 1):
            new_key = np.maximum(key, pomdp.pickup.astype(int))  # (n_pos, n_act)
            # value of landing on pos' with key k': reward at the goal, continuation elsewhere
            landing = np.stack([np.where(not_goal, gamma * v[t + 1, :, k], float(k)) for k in (0, 1)])
            q[t, :, key, :] = np.einsum("paq,paq->pa", pomdp.moves, landing[new_key])
        v[t] = np.einsum("pka,pa->pk", q[t], pomdp.policy)
    return Solution(q, v)


def success_probability(pomdp: AliasedPOMDP) -> float:
    """P(reaching the goal with the key) from position 0 without a key: V with gamma = 1."""
    return float(solve(pomdp, gamma=1.0).v[0, 0, 0])


class Rollouts(NamedTuple):
    """One row per step, trajectory-major; ``history`` identifies (o_0, a_0, ..., o_t, a_t)."""

    group: np.ndarray
    traj: np.ndarray
    step: np.ndarray
    obs: np.ndarray
    reward: np.ndarray
    true_advantage: np.ndarray
    oracle: np.ndarray  # R_t - V(h_t), filled in by sample()
    history: np.ndarray


def sample(
    pomdp: AliasedPOMDP, solution: Solution, n_groups: int, group_size: int, seed: Sequence[int]
) -> Rollouts:
    """Roll out all environments in lock-step; every group starts at position 0, no key."""
    rng = np.random.default_rng(seed)
    n_env = n_groups * group_size
    n_pos, n_act, _ = pomdp.moves.shape
    pos = np.zeros(n_env, dtype=np.int64)
    key = np.zeros(n_env, dtype=np.int64)
    history = np.zeros(n_env, dtype=np.int64)
    alive = np.ones(n_env, dtype=bool)
    columns: dict[str, list[np.ndarray]] = {
        name: [] for name in ("env", "step", "obs", "reward", "adv", "v", "hist")
    }
    for t in range(pomdp.horizon):
        env = np.flatnonzero(alive)
        if env.size == 0:
            break
        p, k = pos[env], key[env]
        act = _draw(rng, pomdp.policy[p])
        history[env] = history[env] * (n_pos * n_act + 1) + (p * n_act + act + 1)
        nxt = _draw(rng, pomdp.moves[p, act])
        k = np.maximum(k, pomdp.pickup[p, act])
        at_goal = nxt == pomdp.goal
        columns["env"].append(env)
        columns["step"].append(np.full(env.size, t))
        columns["obs"].append(p)
        columns["reward"].append(np.where(at_goal, k, 0).astype(float))
        columns["adv"].append(solution.q[t, p, key[env], act] - solution.v[t, p, key[env]])
        columns["v"].append(solution.v[t, p, key[env]])
        columns["hist"].append(history[env].copy())
        pos[env], key[env] = nxt, k
        alive[env] = ~at_goal
    flat = {name: np.concatenate(parts) for name, parts in columns.items()}
    order = np.lexsort((flat["step"], flat["env"]))
    flat = {name: values[order] for name, values in flat.items()}
    returns = discounted_returns(flat["env"], flat["step"], flat["reward"], pomdp.gamma)
    return Rollouts(
        group=flat["env"] // group_size,
        traj=flat["env"],
        step=flat["step"],
        obs=flat["obs"],
        reward=flat["reward"],
        true_advantage=flat["adv"],
        oracle=returns - flat["v"],
        history=flat["hist"],
    )


def _draw(rng: np.random.Generator, probabilities: np.ndarray) -> np.ndarray:
    """One categorical draw per row of ``probabilities``."""
    cumulative = probabilities.cumsum(axis=1)
    draws = (rng.random((len(probabilities), 1)) > cumulative).sum(axis=1)
    return np.minimum(draws, probabilities.shape[1] - 1)


# ----------------------------------------------------------------------------- estimators


class Estimator(NamedTuple):
    name: str
    history_length: int | None  # HGPO K
    alpha: float | None
    weighting: str | None
    run: Callable[[Rollouts, np.ndarray, np.ndarray], np.ndarray]  # (rollouts, returns, scores)


def estimators(max_k: int) -> list[Estimator]:
    """Everything unnormalised (module docstring). alpha = 0 makes both weightings uniform, so
    it is run once; K = 0 has a single level, so alpha and weighting do not matter."""
    table = [
        Estimator("oracle R-V(h)", None, None, None, lambda r, ret, sc: r.oracle),
        Estimator(
            "GRPO", None, None, None, lambda r, ret, sc: grpo_advantages(r.group, sc, norm_by_std=False)
        ),
        Estimator("GiGPO", None, None, None, lambda r, ret, sc: gigpo_advantages(r.group, r.obs, ret, sc)),
    ]

    def hgpo(
        k: int, alpha: float, weighting: str
    ) -> Callable[[Rollouts, np.ndarray, np.ndarray], np.ndarray]:
        return lambda r, ret, sc: hgpo_advantages(
            r.group,
            r.traj,
            r.step,
            r.obs,
            ret,
            sc,
            history_length=k,
            mode="mean_norm",
            alpha=alpha,
            weighting=weighting,
        )

    table.append(Estimator("HGPO", 0, 1.0, "any", hgpo(0, 1.0, "reference")))
    for k in range(1, max_k + 1):
        table.append(Estimator("HGPO", k, 0.0, "any", hgpo(k, 0.0, "reference")))
        for alpha in (1.0, 2.0):
            for weighting in ("reference", "paper"):
                table.append(Estimator("HGPO", k, alpha, weighting, hgpo(k, alpha, weighting)))
        table.append(
            Estimator("HGPO deepest", k, DEEPEST_ALPHA, "reference", hgpo(k, DEEPEST_ALPHA, "reference"))
        )
        table.append(Estimator("HGPO", k, None, "adaptive", hgpo(k, 0.0, "adaptive")))
    return table


# ----------------------------------------------------------------------------- metrics


def decomposition(err: np.ndarray, key: np.ndarray, power: float) -> tuple[float, float, float]:
    """(bias^2, variance, MSE) of ``err`` over dense conditioning-key ids, divided by ``power``."""
    count = np.bincount(key)
    mean = np.bincount(key, weights=err) / count
    sq_dev = np.bincount(key, weights=(err - mean[key]) ** 2)
    var = np.where(count > 1, sq_dev / np.maximum(count - 1, 1), 0.0)
    weight = count / len(err)
    bias2 = float(np.sum(weight * (mean**2 - var / count)))
    return bias2 / power, float(np.sum(weight * var)) / power, float(np.mean(err**2)) / power


def error_metrics(estimate: np.ndarray, data: Rollouts, key: np.ndarray) -> dict[str, float]:
    """Both error views of the module docstring, the correlation with A* and the zero share."""
    truth, noise = data.true_advantage, data.oracle
    metrics = {}
    for view, err, power in (
        ("adv", estimate - truth, np.mean(truth**2)),
        ("base", noise - estimate, np.mean(noise**2)),
    ):
        bias2, var, mse = decomposition(err, key, float(power))
        metrics |= {f"{view}_bias2": bias2, f"{view}_var": var, f"{view}_mse": mse}
    metrics["corr"] = float(np.corrcoef(estimate, truth)[0, 1]) if np.std(estimate) > 0 else float("nan")
    metrics["zero_frac"] = float(np.mean(estimate == 0.0))
    return metrics


# ----------------------------------------------------------------------------- study


def free_output_dir(requested: Path) -> Path:
    """``requested`` if it holds none of our files, else the first free ``-2``, ``-3``... sibling."""
    candidate, suffix = requested, 1
    while candidate.exists() and any((candidate / name).exists() for name in OUTPUT_FILES):
        suffix += 1
        candidate = requested.with_name(f"{requested.name}-{suffix}")
    candidate.mkdir(parents=True, exist_ok=True)
    return candidate


def run_study(n_mdps: int, rollouts: int, group_sizes: list[int], max_k: int, seed: int) -> list[dict]:
    """Per (POMDP, group size, estimator) metrics rows."""
    rows = []
    rng = np.random.default_rng(seed)  # POMDPs; rollouts use (seed, mdp, n) streams
    table = estimators(max_k)
    for mdp in range(n_mdps):
        pomdp = random_pomdp(rng)
        solution = solve(pomdp)
        for group_size in group_sizes:
            data = sample(pomdp, solution, rollouts // group_size, group_size, seed=(seed, mdp, group_size))
            returns = discounted_returns(data.traj, data.step, data.reward, pomdp.gamma)
            scores = np.bincount(data.traj, weights=data.reward)[data.traj]
            key = np.unique(data.history, return_inverse=True)[1]
            for est in table:
                metrics = error_metrics(est.run(data, returns, scores), data, key)
                rows.append(
                    {
                        "mdp": mdp,
                        "n": group_size,
                        "estimator": est.name,
                        "K": est.history_length,
                        "alpha": est.alpha,
                        "weighting": est.weighting,
                        "steps": len(returns),
                    }
                    | metrics
                )
    return rows


METRICS = ("adv_bias2", "adv_var", "adv_mse", "base_bias2", "base_var", "base_mse", "corr", "zero_frac")
CONFIG = ("n", "estimator", "K", "alpha", "weighting")


def aggregate(rows: list[dict]) -> list[dict]:
    """Mean of every metric over the POMDPs, per (n, estimator configuration)."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(row[c] for c in CONFIG), []).append(row)
    return [
        dict(zip(CONFIG, config, strict=True))
        | {m: float(np.nanmean([r[m] for r in members])) for m in METRICS}
        for config, members in groups.items()
    ]


def proposition_check(summary: list[dict]) -> dict[str, tuple[int, int]]:
    """Prop. 4.1: is HGPO(K, alpha > 0)'s metric between K = 0 and 'deepest' at the same K?
    Returns metric -> (configurations where it holds, configurations)."""
    index = {tuple(row[c] for c in CONFIG): row for row in summary}
    held = dict.fromkeys(("adv_bias2", "adv_var", "base_bias2", "base_var"), 0)
    total = 0
    for row in summary:
        if row["estimator"] != "HGPO" or not row["K"] or row["alpha"] in (0.0, None):
            continue
        total += 1
        current = index[(row["n"], "HGPO", 0, 1.0, "any")]
        deepest = index[(row["n"], "HGPO deepest", row["K"], DEEPEST_ALPHA, "reference")]
        for metric in held:
            low, high = sorted((current[metric], deepest[metric]))
            held[metric] += low <= row[metric] <= high
    return {metric: (count, total) for metric, count in held.items()}


def adaptive_check(summary: list[dict]) -> list[dict]:
    """Per group size: the best fixed HGPO setting (any K, alpha, weighting) by baseline MSE
    against adaptive weighting at each K (issue: adaptive should be at most the best fixed)."""
    table = []
    for n in sorted({row["n"] for row in summary}):
        hgpo = [row for row in summary if row["n"] == n and row["estimator"] == "HGPO"]
        best = min((row for row in hgpo if row["weighting"] != "adaptive"), key=lambda row: row["base_mse"])
        for row in hgpo:
            if row["weighting"] == "adaptive":
                table.append(
                    {
                        "n": n,
                        "K": row["K"],
                        "adaptive base_mse": row["base_mse"],
                        "best fixed (K, alpha, weighting)": (
                            f"({best['K']}, {best['alpha']:g}, {best['weighting']})"
                        ),
                        "best fixed base_mse": best["base_mse"],
                        "difference": row["base_mse"] - best["base_mse"],
                    }
                )
    return table


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def plot(path: Path, summary: list[dict], group_sizes: list[int], max_k: int) -> None:
    """Rows: bias^2 and variance of both error views and the baseline MSE; columns: group size;
    x: K."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ("adv_bias2", "adv_var", "base_bias2", "base_var", "base_mse")
    fig, axes = plt.subplots(
        len(metrics), len(group_sizes), figsize=(4.3 * len(group_sizes), 2.9 * len(metrics)), squeeze=False
    )
    ks = np.arange(max_k + 1)
    lines = [(0.0, "any", "-", "alpha=0")] + [
        (a, w, "-" if w == "reference" else "--", f"alpha={a:g} {w}")
        for a in (1.0, 2.0)
        for w in ("reference", "paper")
    ]
    for col, group_size in enumerate(group_sizes):
        rows = {
            (r["estimator"], r["K"], r["alpha"], r["weighting"]): r for r in summary if r["n"] == group_size
        }
        k0 = rows[("HGPO", 0, 1.0, "any")]
        for row_index, metric in enumerate(metrics):
            ax = axes[row_index][col]
            for alpha, weighting, style, label in lines:
                values = [k0[metric]] + [rows[("HGPO", k, alpha, weighting)][metric] for k in ks[1:]]
                ax.plot(ks, values, style, marker="o", label=f"HGPO {label}")
            deepest = [rows[("HGPO deepest", k, DEEPEST_ALPHA, "reference")][metric] for k in ks[1:]]
            ax.plot(ks, [k0[metric]] + deepest, ":", color="black", marker="s", label="HGPO deepest level")
            adaptive = [rows[("HGPO", k, None, "adaptive")][metric] for k in ks[1:]]
            ax.plot(ks, [k0[metric]] + adaptive, "-", color="red", lw=2, marker="D", label="HGPO adaptive")
            ax.set_title(
                f"n = {group_size}: {metric} (GiGPO {rows[('GiGPO', None, None, None)][metric]:.2f})"
            )
            ax.set_xlabel("history length K (K = 0: current state only)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        "HGPO error vs Q(h,a) - V(h) (adv_*) and of its implied baseline vs V(h) (base_*); mean over POMDPs"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:g}"
    return str(value)


def markdown(rows: list[dict], columns: tuple[str, ...]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--output", type=Path, default=Path("results/estimator_bias"))
    parser.add_argument("--mdps", type=int, default=16, help="random POMDPs to average over")
    parser.add_argument("--rollouts", type=int, default=65536, help="rollouts per (POMDP, group size)")
    parser.add_argument("--group-sizes", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--max-k", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="2 POMDPs x 2048 rollouts")
    args = parser.parse_args(argv)
    if args.quick:
        args.mdps, args.rollouts = 2, 2048

    start = time.perf_counter()
    rows = run_study(args.mdps, args.rollouts, args.group_sizes, args.max_k, args.seed)
    summary = aggregate(rows)
    output = free_output_dir(args.output)
    write_csv(output / "study.csv", rows)
    plot(output / "study.png", summary, args.group_sizes, args.max_k)

    print(markdown(summary, CONFIG + METRICS))
    print("\nProposition 4.1 (HGPO alpha > 0 between K = 0 and the deepest level at the same K):")
    for metric, (held, total) in proposition_check(summary).items():
        print(f"- {metric}: holds in {held}/{total} configurations")
    check = adaptive_check(summary)
    print("\nAdaptive weighting against the best fixed setting (baseline MSE, lower is better):")
    print(markdown(check, tuple(check[0])))
    print(f"\nwrote {output / 'study.csv'} and {output / 'study.png'} in {time.perf_counter() - start:.0f} s")
    return output


if __name__ == "__main__":
    main()
