"""KeyChest env throughput: steps per second of a random admissible policy, resets included.

Why: KeyChest drives the CPU learning benchmark and the CPU smoke tests, so the env must never be the
bottleneck next to a tiny model (target: >= 20k steps/s). Measured through ``gymnasium.make``, the
way RLlib builds it, with the action parsing of every step.
"""

from __future__ import annotations

import random
import time

import gymnasium as gym

import envs  # noqa: F401 - registers hgpo/KeyChest-v0


def keychest_steps_per_second(
    num_steps: int = 200_000, seed: int = 0, action_template: str = "{}", **env_kwargs: object
) -> float:
    """Run ``num_steps`` env steps with a uniform random admissible policy; return steps per second.

    ``action_template`` wraps each command as the model would write it (e.g. in reference tags).
    """
    env = gym.make("hgpo/KeyChest-v0", **env_kwargs)
    rng = random.Random(seed)
    _, info = env.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(num_steps):
        _, _, terminated, truncated, info = env.step(
            action_template.format(rng.choice(info["admissible_actions"]))
        )
        if terminated or truncated:
            _, info = env.reset()
    return num_steps / (time.perf_counter() - start)


if __name__ == "__main__":
    print(f"KeyChest (defaults): {keychest_steps_per_second():,.0f} env steps/s")
    tagged = keychest_steps_per_second(
        action_template="<think>I should move.</think><action>{}</action>", require_tags=True
    )
    print(f"KeyChest (require_tags=True, tagged outputs): {tagged:,.0f} env steps/s")
