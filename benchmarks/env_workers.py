"""Parallel env stepping: one wave of sub-envs reset and stepped in 1 vs 2 worker processes.

Run: ``python benchmarks/env_workers.py [--env alfworld] [--envs 16] [--steps 10] [--workers 1 2]``.
Measures what ``GroupedEnvRunner`` does per wave with ``num_env_workers=N``
(hgpo_rllib/env_runner/env_pool.py):
reset all sub-envs (groups of 8 share a task seed), then step them in lock-step with random admissible
commands (seeded). Prints a table and writes
``docs/results/env_workers_<env>.md``. Wall-clock times: run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

from hgpo_rllib.env_runner.env_pool import EnvCrash, EnvWorkerPool
from hgpo_rllib.help_text import doc_summary

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
GROUP_SIZE = 8


def _actions(rng: random.Random, infos: list[dict]) -> list[str]:
    """A random admissible command per env (seeded, so every worker count replays the same wave), in
    the policy's output format: a bare command is format-invalid and the env would not execute it."""
    commands = [rng.choice(info.get("admissible_actions") or ["look"]) for info in infos]
    return [f"<think>benchmark</think><action>{command}</action>" for command in commands]


def measure(env: str, num_envs: int, num_steps: int, workers: int, seed: int) -> dict[str, float]:
    """Seconds for the wave's resets and its steps, after a warm-up wave (worker start, imports)."""
    pool = EnvWorkerPool(env, {"max_steps": 50}, workers)
    try:
        seeds = [(i, seed + i // GROUP_SIZE) for i in range(num_envs)]
        pool.reset([(i, seed - 1000) for i in range(num_envs)])  # warm-up: start, import, first build
        start = time.perf_counter()
        resets = pool.reset(seeds)
        reset_s = time.perf_counter() - start
        infos = [info for _, info in resets]
        active = list(range(num_envs))
        rng = random.Random(seed)
        steps, step_s = 0, 0.0
        for _ in range(num_steps):
            if not active:
                break
            actions = _actions(rng, [infos[i] for i in active])
            start = time.perf_counter()
            results = pool.step(list(zip(active, actions, strict=True)))
            step_s += time.perf_counter() - start
            steps += len(active)
            still = []
            for i, result in zip(active, results, strict=True):
                if isinstance(result, EnvCrash):
                    raise RuntimeError(result.message)
                _, _, terminated, truncated, infos[i] = result
                if not (terminated or truncated):
                    still.append(i)
            active = still
    finally:
        pool.close()
    return {
        "reset_s": reset_s,
        "resets_per_s": num_envs / reset_s,
        "steps": steps,
        "steps_per_s": steps / max(step_s, 1e-9),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--env", default="alfworld")
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = {n: measure(args.env, args.envs, args.steps, n, args.seed) for n in args.workers}
    base = rows[args.workers[0]]
    lines = [
        f"{args.env}, a wave of {args.envs} envs (groups of {GROUP_SIZE}), {args.steps} lock-step turns, "
        f"{os.cpu_count()} CPU cores",
        "",
        "| env workers | resets/s | reset of the wave (s) | steps/s | steps | resets speed-up "
        "| steps speed-up |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in rows.items():
        lines.append(
            f"| {n} | {r['resets_per_s']:.2f} | {r['reset_s']:.2f} | {r['steps_per_s']:.1f} | {r['steps']} | "
            f"{r['resets_per_s'] / base['resets_per_s']:.2f}x | "
            f"{r['steps_per_s'] / base['steps_per_s']:.2f}x |"
        )
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"env_workers_{args.env}.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
