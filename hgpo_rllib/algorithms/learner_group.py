"""A LearnerGroup that never splits a rollout group across learners (docs/rllib_notes.md §5.5).

With ``num_learners > 1`` RLlib shards episodes by length and may split groups and even slice
episodes, so each learner would normalise advantages over fragments of groups (observed: groups of
4 arriving as 2 + 2). Here whole groups are dealt to the learners, largest first onto the learner
with the fewest steps, and every learner runs the same number of optimiser steps (DDP all-reduces
each step, so a learner with an extra step would wait forever).

Sharded learners (``learner_sharding="fsdp"``) gather their full state with a collective, so a state
request (weight sync, checkpoint) goes to all of them and rank 0's answer is kept; RLlib's
LearnerGroup asks the first learner only, which would wait forever for the others.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import ray
import torch.distributed as dist
from ray.rllib.core import COMPONENT_LEARNER
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.learner_group import LearnerGroup
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override

from hgpo_rllib.columns import group_id_of


def shard_whole_groups(
    episodes: Sequence[SingleAgentEpisode], num_shards: int
) -> list[list[SingleAgentEpisode]]:
    """Split episodes into ``num_shards`` lists of whole rollout groups, balancing step counts."""
    groups: dict[str, list[SingleAgentEpisode]] = defaultdict(list)
    for episode in episodes:
        groups[group_id_of(episode)].append(episode)
    shards: list[list[SingleAgentEpisode]] = [[] for _ in range(num_shards)]
    steps = [0] * num_shards
    for members in sorted(groups.values(), key=lambda g: -sum(map(len, g))):
        target = steps.index(min(steps))
        shards[target] += members
        steps[target] += sum(map(len, members))
    return shards


def _rank_and_state(learner: Learner, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    return dist.get_rank(), learner.get_state(**kwargs)


class GroupShardingLearnerGroup(LearnerGroup):
    """``update(episodes=...)`` with remote learners deals out whole rollout groups; sharded
    learners are all asked for their state."""

    @property
    def sharded(self) -> bool:
        """Remote learners that shard the model: every state request is a collective."""
        return not self.is_local and self.config.learner_sharding == "fsdp"

    @override(LearnerGroup)
    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        if not (self.sharded and self._check_component(COMPONENT_LEARNER, components, not_components)):
            return super().get_state(components, not_components=not_components, **kwargs)
        results = self._get_results(
            self._worker_manager.foreach_actor(
                _rank_and_state,
                kwargs={
                    "components": self._get_subcomponents(COMPONENT_LEARNER, components),
                    "not_components": self._get_subcomponents(COMPONENT_LEARNER, not_components),
                    **kwargs,
                },
            )
        )
        return {COMPONENT_LEARNER: next(state for rank, state in results if rank == 0)}

    def runner_weights(self, *, force: bool = False) -> ray.ObjectRef:
        """The learners' ``put_runner_weights``: a reference to the weights for the env runners,
        put into the object store by the learner that holds them (a local learner: this process).
        Sharded learners all gather (a collective) and rank 0's copy is sent; otherwise the first
        learner's, as RLlib's ``get_state`` asks."""
        if self.is_local:
            return self._learner.put_runner_weights(force=force)
        if not self.sharded:
            (ref,) = self._get_results(
                self._worker_manager.foreach_actor(
                    lambda learner: learner.put_runner_weights(force=force),
                    remote_actor_ids=[self._worker_manager.healthy_actor_ids()[0]],
                )
            )
            return ref
        results = self._get_results(
            self._worker_manager.foreach_actor(
                lambda learner: (dist.get_rank(), learner.put_runner_weights(force=force))
            )
        )
        return next(ref for rank, ref in results if rank == 0)

    @override(LearnerGroup)
    def save_to_path(self, path: Any = None, *, state: dict[str, Any] | None = None, **kwargs: Any) -> str:
        """RLlib saves a remote learner's state by asking the first learner alone; sharded learners
        hand it the state gathered from all of them."""
        if self.sharded and state is None:
            state = self.get_state()
        return super().save_to_path(path, state=state, **kwargs)

    @override(LearnerGroup)
    def update(
        self,
        *,
        episodes: list[SingleAgentEpisode] | None = None,
        timesteps: dict[str, Any] | None = None,
        async_update: bool = False,
        return_state: bool = False,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        if self.is_local or episodes is None:
            return super().update(
                episodes=episodes,
                timesteps=timesteps,
                async_update=async_update,
                return_state=return_state,
                **kwargs,
            )
        if async_update:
            raise ValueError("HGPO updates synchronously: async_update=True is not supported")
        shards = shard_whole_groups(episodes, len(self))
        if not all(shards):
            raise ValueError(
                f"{len({group_id_of(e) for e in episodes})} rollout group(s) cannot feed "
                f"{len(self)} learners: raise groups_per_iteration or lower num_learners"
            )
        minibatch_size = kwargs.get("minibatch_size")
        if minibatch_size:
            # Every learner must take the same number of steps; the largest shard sets it (smaller
            # shards cycle, as RLlib's MiniBatchCyclicIterator does at the end of an epoch).
            rows = max(sum(map(len, shard)) for shard in shards)
            kwargs["num_total_minibatches"] = math.ceil(kwargs.get("num_epochs", 1) * rows / minibatch_size)
        results = self._worker_manager.foreach_actor(
            "update",
            kwargs=[
                dict(
                    training_data=TrainingData(episodes=shard),
                    timesteps=timesteps,
                    return_state=return_state and (i == 0 or self.sharded),  # a collective if sharded
                    **kwargs,
                )
                for i, shard in enumerate(shards)
            ],
        )
        return self._get_results(results)
