"""Overlapped sampling (issue 29 item 4): the runners sample the next iteration's groups during the
update, with the weights one version before; the loss weighs each token by the truncated importance
weight; the staleness is a metric; a checkpoint keeps the task positions of the groups trained on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import keychest_config

from hgpo_rllib import HGPO
from hgpo_rllib.algorithms.torch.token_loss import behaviour_weights
from hgpo_rllib.columns import TASK_SEED


def test_behaviour_weights_are_importance_ratios_truncated_at_the_cap() -> None:
    proximal = torch.tensor([[-1.0, -0.5, -3.0], [-2.0, -2.0, -0.1]], requires_grad=True)
    behaviour = torch.tensor([[-1.0, -1.5, -2.0], [-2.5, -0.5, -9.0]])
    weights, capped = behaviour_weights(proximal, behaviour, cap=2.0)
    expected = torch.exp(proximal.detach() - behaviour)
    assert torch.allclose(weights, expected.clamp(max=2.0))
    assert capped.tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert not weights.requires_grad  # a weight on the policy term, not a term of its own


def task_seeds(episodes: list) -> list[int]:
    return sorted(ep.get_infos(0)[TASK_SEED] for ep in episodes)


@pytest.mark.usefixtures("ray_session")
def test_async_run_trains_one_version_behind_and_its_checkpoint_resamples_what_was_ahead(
    tmp_path: Path,
) -> None:
    algo = keychest_config(async_sampling=True).build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        learner = [r["learners"]["default_policy"] for r in results]
        # The first batch is sampled before any update; each later one during the previous update.
        assert [m["policy_staleness"] for m in learner] == [0.0, 1.0, 1.0]
        assert all(0.0 <= m["behaviour_weight_capped_frac"] <= 1.0 for m in learner)
        assert all(r["num_groups_sampled"] == 3 for r in results)
        ahead = task_seeds(algo._sampled_episodes)  # sampled during update 3, not trained on yet
        algo.save_to_path(tmp_path / "checkpoint")
    finally:
        algo.stop()

    restored = HGPO.from_checkpoint(tmp_path / "checkpoint")
    try:
        # The checkpoint's task positions are those of the groups trained on: the restored run plays
        # the groups that were sampled ahead again, with its own weights (no staleness after restore).
        replies, failures = restored.runner_pool.sample_groups(restored.env_runner_group, None)
        assert failures == [] and task_seeds([ep for r in replies for ep in r.episodes]) == ahead
        result = restored.train()
        assert result["learners"]["default_policy"]["policy_staleness"] == 0.0
    finally:
        restored.stop()
