"""A LearnerGroup that never splits a rollout group across learners (docs/rllib_notes.md §5.5).

With ``num_learners > 1`` RLlib shards episodes by length and may split groups and even slice
episodes, so each learner would normalise advantages over fragments of groups (observed: groups of
4 arriving as 2 + 2). Here whole groups are dealt to the learners, largest first onto the learner
with the fewest steps, and every learner runs the same number of optimiser steps (DDP all-reduces
each step, so a learner with an extra step would wait forever).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from ray.rllib.core.learner.learner_group import LearnerGroup
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override

from hgpo_rllib.env_runner import group_id_of


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


class GroupShardingLearnerGroup(LearnerGroup):
    """``update(episodes=...)`` with remote learners deals out whole rollout groups."""

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
                episodes=episodes, timesteps=timesteps, async_update=async_update,
                return_state=return_state, **kwargs,
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
                    return_state=return_state and i == 0,
                    **kwargs,
                )
                for i, shard in enumerate(shards)
            ],
        )
        return self._get_results(results)
