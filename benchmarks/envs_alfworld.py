"""ALFWorld environment speed: reset and step times in realistic kitchens (generated games).

Run: ``.venv/bin/python benchmarks/envs_alfworld.py``. Targets: step <= 60 ms, reset <= 0.6 s.
Wall times depend on what else runs on the machine, so the CPU time of this process and the load
average are printed too.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym

import envs  # noqa: F401 - registers hgpo/ALFWorld-v0

KITCHEN_TASKS = ("pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep")  # kitchens only


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _summary(name: str, wall: list[float], cpu: list[float], unit: float, label: str) -> dict[str, float]:
    p95 = sorted(wall)[int(0.95 * (len(wall) - 1))]
    row = {"mean": statistics.mean(wall) * unit, "p95": p95 * unit, "cpu": statistics.mean(cpu) * unit}
    cells = "   ".join(f"{key} {value:7.1f} {label}" for key, value in row.items())
    print(f"  {name:<34} {cells}")
    return row


def alfworld_section(
    n_games: int = 12, steps_per_game: int = 15, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Print and return reset/step/expert-plan timings on generated kitchen games (split ``train``)."""
    env = gym.make(
        "hgpo/ALFWorld-v0",
        split="train",
        max_steps=steps_per_game + 1,
        source="generated",
        task_types=KITCHEN_TASKS,
    )
    env.reset(seed=10**6)  # warm-up: imports and the split's goal pool
    rng = random.Random(seed)
    times: dict[str, tuple[list[float], list[float]]] = {
        k: ([], []) for k in ("reset_new", "reset_same", "step", "expert_plan")
    }
    n_admissible = []

    def record(key: str, fn: Callable[[], Any]) -> Any:
        result, wall, cpu = _timed(fn)
        times[key][0].append(wall)
        times[key][1].append(cpu)
        return result

    for game in range(n_games):
        _, info = record("reset_new", lambda game=game: env.reset(seed=seed + game))
        for _ in range(steps_per_game):
            n_admissible.append(len(info["admissible_actions"]))
            action = f"<think>t</think><action>{rng.choice(info['admissible_actions'])}</action>"
            _, _, terminated, truncated, info = record("step", lambda action=action: env.step(action))
            if terminated or truncated:
                break
        record("reset_same", lambda game=game: env.reset(seed=seed + game))
        record("expert_plan", env.unwrapped.expert_plan)

    print(
        f"ALFWorld (generated kitchens, {n_games} games, {len(times['step'][0])} random admissible steps, "
        f"{statistics.mean(n_admissible):.0f} admissible commands on average; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    return {
        "reset_new_game": _summary("reset, new seed (generate+check)", *times["reset_new"], 1000.0, "ms"),
        "reset_same_game": _summary("reset, same seed again", *times["reset_same"], 1000.0, "ms"),
        "step": _summary("step", *times["step"], 1000.0, "ms"),
        "expert_plan": _summary("expert_plan (from the start)", *times["expert_plan"], 1000.0, "ms"),
    }


if __name__ == "__main__":
    alfworld_section()
