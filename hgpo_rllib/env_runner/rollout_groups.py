"""What every grouped runner shares: task seeds and ids of its rollout groups, and their checkpointed state.

Group-relative estimators compare the n rollouts of one task (docs/hgpo_algorithm.md §1), so a runner
draws one task seed per group and stamps a unique group id into every episode of the group. The seed
stream is part of the runner's state: a restarted or restored runner goes on with new tasks instead of
replaying the ones it already played.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from hgpo_rllib.columns import TASK_GENERATOR

_MAX_TASK_SEED = 2**31 - 1


class RolloutGroupsMixin:
    """Mixed into an RLlib env runner (before it in the bases): ``_init_rollout_groups()`` after the
    runner's ``__init__``; ``_new_group_seeds(n)`` draws the next n groups."""

    config: Any
    worker_index: int
    _seed: int | None

    def _init_rollout_groups(self) -> None:
        # self._seed is config.seed + worker_index (+ 1e6 on evaluation runners), or None.
        self._task_rng = np.random.default_rng(self._seed)
        # A fresh nonce per runner process keeps group ids unique across runner restarts.
        self._group_prefix = f"r{self.worker_index or 0}-{uuid.uuid4().hex[:8]}"
        self._num_groups_started = 0

    @property
    def group_size(self) -> int:
        """Episodes per rollout group: ``config.group_size``, or 1 on evaluation runners."""
        return 1 if self.config.in_evaluation else int(self.config.group_size)

    def _new_group_seeds(self, num_groups: int) -> tuple[list[str], list[int]]:
        seeds = [int(s) for s in self._task_rng.integers(0, _MAX_TASK_SEED, size=num_groups)]
        ids = [f"{self._group_prefix}-g{self._num_groups_started + k}" for k in range(num_groups)]
        self._num_groups_started += num_groups
        return ids, seeds

    def _check_sample_request(
        self, num_timesteps: int | None, num_episodes: int | None, random_actions: bool
    ) -> int:
        """The number of groups ``sample(num_episodes=...)`` asks for, or a ValueError naming what
        a grouped runner cannot do."""
        name = type(self).__name__
        if num_timesteps is not None or num_episodes is None:
            raise ValueError(
                f"{name} samples whole rollout groups: call sample(num_episodes=...) "
                "(batch_mode='complete_episodes', evaluation_duration_unit='episodes')"
            )
        if random_actions:
            raise ValueError(f"{name} does not support random_actions: actions are LLM text")
        if num_episodes % self.group_size:
            raise ValueError(f"num_episodes={num_episodes} is not a multiple of group_size={self.group_size}")
        return num_episodes // self.group_size

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        """The runner's RLlib state plus the task-seed generator."""
        state = super().get_state(components, not_components=not_components, **kwargs)  # type: ignore[misc]
        if self._check_component(TASK_GENERATOR, components, not_components):  # type: ignore[attr-defined]
            state[TASK_GENERATOR] = {
                "bit_generator": self._task_rng.bit_generator.state,
                "num_groups_started": self._num_groups_started,
            }
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)  # type: ignore[misc]
        if TASK_GENERATOR in state:
            self._task_rng.bit_generator.state = state[TASK_GENERATOR]["bit_generator"]
            self._num_groups_started = int(state[TASK_GENERATOR]["num_groups_started"])
