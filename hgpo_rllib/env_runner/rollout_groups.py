"""What every grouped runner shares: task seeds and ids of its rollout groups, and their checkpointed state.

Group-relative estimators compare the n rollouts of one task (docs/hgpo_algorithm.md §1), so a runner
draws one task seed per group and stamps a unique group id into every episode of the group. The seed
stream is part of the runner's state: a restarted or restored runner goes on with new tasks instead of
replaying the ones it already played.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
from ray.rllib.utils.metrics import (
    ENV_TO_MODULE_CONNECTOR,
    MODULE_TO_ENV_CONNECTOR,
    RLMODULE_INFERENCE_TIMER,
)

from hgpo_rllib.columns import (
    FORCE_WEIGHTS,
    GENERATED_TOKENS_PER_S,
    NUM_GENERATED_TOKENS,
    PROMPT_IDS,
    PROMPT_MASK,
    RESP_MASK,
    TASK_GENERATOR,
)

_MAX_TASK_SEED = 2**31 - 1


class RolloutGroupsMixin:
    """Mixed into an RLlib env runner (before it in the bases): ``_init_rollout_groups()`` after the
    runner's ``__init__``; ``_new_group_seeds(n)`` draws the next n groups."""

    config: Any
    worker_index: int
    _seed: int | None
    metrics: Any
    num_env_steps_sampled_lifetime: int
    module: Any
    _env_to_module: Any
    _module_to_env: Any
    _shared_data: dict
    _weights_seq_no: int

    def _close_generators(self) -> None:
        """Shut down every module's generation engine (called by the runner's ``stop``, before Ray
        ends the process: a vLLM engine's shared memory is freed only by its own shutdown)."""
        modules = self.module.values() if isinstance(self.module, MultiRLModule) else [self.module]
        for module in modules:
            close = getattr(module.unwrapped(), "close_generator", None)
            if close is not None:
                close()

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
        """RLlib's, plus the task generator; with :data:`FORCE_WEIGHTS` the weights load whatever
        this runner's version, which becomes the one sent (RLlib's own way to force, version 0,
        would leave the runner's later version in place and its rows' staleness wrong)."""
        if state.get(FORCE_WEIGHTS):
            self._weights_seq_no = 0
        super().set_state(state)  # type: ignore[misc]
        if TASK_GENERATOR in state:
            self._task_rng.bit_generator.state = state[TASK_GENERATOR]["bit_generator"]
            self._num_groups_started = int(state[TASK_GENERATOR]["num_groups_started"])

    def _generate(
        self, module: Any, episodes: Sequence[Any], explore: bool, metrics_key: tuple[str, ...] = ()
    ) -> tuple[dict, list[np.ndarray]]:
        """One batched generation by ``module`` for ``episodes`` (single-agent episodes) through the
        connector pipelines; its token counts are logged under ``metrics_key`` (a module id or none).

        Returns the module-to-env output and each prompt's token ids without padding.
        """
        common = {
            "explore": explore,
            "rl_module": module,
            "shared_data": self._shared_data,
            "metrics": self.metrics,
        }
        to_module = self._env_to_module(
            episodes=list(episodes), batch={}, metrics_prefix_key=(ENV_TO_MODULE_CONNECTOR,), **common
        )
        start = time.perf_counter()
        with self.metrics.log_time(RLMODULE_INFERENCE_TIMER):
            if explore:
                to_env = module.forward_exploration(to_module, t=self.num_env_steps_sampled_lifetime)
            else:
                to_env = module.forward_inference(to_module)
        elapsed = time.perf_counter() - start
        to_env = self._module_to_env(
            episodes=list(episodes), batch=to_env, metrics_prefix_key=(MODULE_TO_ENV_CONNECTOR,), **common
        )
        num_tokens = int(np.asarray(to_env[RESP_MASK]).sum())
        self.metrics.log_value((*metrics_key, NUM_GENERATED_TOKENS), num_tokens, reduce="sum")
        self.metrics.log_value(
            (*metrics_key, GENERATED_TOKENS_PER_S), num_tokens / max(elapsed, 1e-9), window=20
        )
        ids = np.asarray(to_module[PROMPT_IDS].cpu())
        mask = np.asarray(to_module[PROMPT_MASK].cpu()).astype(bool)
        return to_env, [row[keep].astype(np.int32) for row, keep in zip(ids, mask, strict=True)]
