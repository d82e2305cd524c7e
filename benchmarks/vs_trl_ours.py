"""This package's side of ``benchmarks/vs_trl.py``: GRPO (``HGPOConfig``, estimator "grpo") driven
through RLlib's Python API on WebShop's first step, in one process (a local env runner and a local
learner), for one block of a :class:`~vs_trl_task.Spec`.

The env (:class:`FirstSearchStep`, registered as ``vs_trl_first_search``) serves the spec's rows: a
WebShop goal's search page in, one answer out, :func:`~vs_trl_task.answer_reward` as the reward. The
rows are played in the spec's order (:class:`ScheduledRunner`: the n-th sub-env reset plays row n),
so this side sees exactly the prompts TRL's side is given. Seconds come from the algorithm's
per-iteration timers (``iteration_seconds``); the positions each model computes are counted by a hook
on its decoder (the runner's model generates, the learner's learns).

Run by ``vs_trl.py``: ``python benchmarks/vs_trl_ours.py SPEC.json OUT.json``.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray
import torch
from ray.tune.registry import register_env
from vs_trl_task import (  # benchmarks/ is on sys.path when run as a script
    CLIP,
    ENTROPY_COEFF,
    GRAD_CLIP,
    KL_COEFF,
    TEMPERATURE,
    WEIGHT_DECAY,
    Spec,
    query_reward,
)

from envs.common.text_env import Observation, TextEnv
from envs.webshop.prompts import render_prompt
from hgpo_rllib import HGPOConfig
from hgpo_rllib.columns import NUM_ROW_TOKENS
from hgpo_rllib.env_runner.grouped_env_runner import GroupedEnvRunner

ENV_NAME = "vs_trl_first_search"


class FirstSearchStep(TextEnv):
    """WebShop's first step alone: reset with seed n shows row n's search page, and the one answer
    is rewarded by :func:`~vs_trl_task.query_reward` of its command (a malformed answer gets 0)."""

    render_prompt = staticmethod(render_prompt)  # WebShop's template: the prompt the registry renders

    def __init__(self, rows: Sequence[Sequence[Any]] = (), max_steps: int = 1):
        super().__init__(max_steps=max_steps)
        self.rows = rows

    def _start_episode(self, seed: int | None, options: dict[str, Any]) -> tuple[Observation, str, str]:
        task, observation, actions = self.rows[seed or 0]
        return Observation(observation, list(actions)), task, "search"

    def _execute(self, command: str) -> Observation:
        return Observation("", [], reward=query_reward(command, self.task), terminated=True)

    def _observation_unchanged(self) -> str:
        return self._current.text


register_env(ENV_NAME, lambda env_config: FirstSearchStep(**env_config))


class ScheduledRunner(GroupedEnvRunner):
    """Plays the rows in order: the n-th sub-env reset of this runner gets seed n (the env's row n)
    instead of its group's random task seed; sub-envs are reset in index order, a group's together."""

    def __init__(self, *, config: Any, **kwargs: Any):
        super().__init__(config=config, **kwargs)
        self.rows_played = 0

    def _reset_sub_envs(self, calls: list[tuple[int, int]]) -> list[tuple[Any, dict]]:
        first, self.rows_played = self.rows_played, self.rows_played + len(calls)
        return super()._reset_sub_envs([(index, first + n) for n, (index, _) in enumerate(calls)])


def build_config(spec: Spec) -> HGPOConfig:
    """The settings of ``vs_trl_task.settings_rows``' first column."""
    rows = [[row["task"], row["observation"], row["actions"]] for batch in spec.batches for row in batch]
    b, c = spec.batch_size, spec.new_tokens
    return (
        HGPOConfig()
        .environment(ENV_NAME, env_config={"rows": rows})
        .env_runners(
            num_env_runners=0,
            create_local_env_runner=True,
            num_envs_per_env_runner=b,
            env_runner_cls=ScheduledRunner,
        )
        .learners(num_learners=0)
        .rl_module(
            model_config={"model": spec.model_dir, "torch_dtype": "float32", "inference_backend": "hf"}
        )
        .training(
            estimator="grpo",
            group_size=spec.group_size,
            groups_per_iteration=b // spec.group_size,
            max_new_tokens=c,
            min_new_tokens=c,
            temperature=TEMPERATURE,
            kl_coeff=KL_COEFF,
            entropy_coeff=ENTROPY_COEFF,
            clip_param=CLIP,
            weight_decay=WEIGHT_DECAY,
            grad_clip=GRAD_CLIP,
            invalid_action_penalty=0.0,
            lr=spec.lr,
            minibatch_size=b,
            micro_batch_size=spec.micro_batch_size,
            num_epochs=1,
            share_prompt_prefixes=spec.share_prompt_prefixes,
            # The same work as TRL's, which computes every row: no row left out for a zero advantage.
            skip_zero_advantage_rows=False,
        )
        .reporting(progress_interval_s=0)
        .debugging(seed=spec.seed)
    )


def count_positions(model: torch.nn.Module, counts: Counter, key: str) -> None:
    """Add the positions every forward of ``model``'s decoder computes (padding included) to
    ``counts[key]``."""
    backbone = getattr(model, model.base_model_prefix)

    def hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        shape = ids.shape if ids is not None else kwargs["inputs_embeds"].shape[:2]
        counts[key] += shape.numel()

    backbone.register_forward_pre_hook(hook, with_kwargs=True)


def run_block(spec: Spec) -> list[dict[str, float]]:
    """Train on every batch of ``spec`` (the first is the warm-up); per update: seconds (generation,
    update = learner + weight sync, total) and tokens (positions computed in generation and in the
    learner, the rows' real tokens)."""
    algo = build_config(spec).build_algo()
    counts: Counter = Counter()
    try:
        count_positions(algo.env_runner.module.lm, counts, "generation")
        algo.learner_group.foreach_learner(
            lambda learner: count_positions(learner.module["default_policy"].lm, counts, "learner")
        )
        updates = []
        for _ in spec.batches:
            counts.clear()
            result = algo.train()
            phases = result["iteration_seconds"]
            learner = result["learners"]["default_policy"]
            updates.append(
                {
                    "generation_s": phases["sampling"],
                    "update_s": phases["learner_update"] + phases["weight_sync"],
                    "total_s": result["time_this_iter_s"],
                    "generation_positions": counts["generation"],
                    "learner_positions": counts["learner"],
                    "real_tokens": int(learner[NUM_ROW_TOKENS]),
                }
            )
    finally:
        algo.stop()
    return updates


def main() -> None:
    spec = Spec.loads(Path(sys.argv[1]).read_text())
    torch.set_num_threads(spec.threads)
    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        updates = run_block(spec)
    finally:
        ray.shutdown()
    Path(sys.argv[2]).write_text(json.dumps(updates))


if __name__ == "__main__":
    main()
