"""HGPO on a two-node Ray cluster (issue 29): the learner on the head node, the env runners and the
evaluation runner on a second node, as on a cluster of machines (``ray.cluster_utils.Cluster`` starts
both nodes on this machine): weights cross the nodes every iteration, a checkpoint restores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from helpers import keychest_config, learner_weights, max_abs_diff
from ray.cluster_utils import Cluster

from hgpo_rllib import HGPO

#: A custom resource only the second node has: the runners ask for it, so they can only start there.
RUNNER_NODE = "runner_node"


@pytest.fixture
def two_nodes() -> Iterator[Cluster]:
    """A head node (the driver, the learner) and a runner node; the test session's own Ray comes back
    afterwards if it was running."""
    was_running = ray.is_initialized()
    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    cluster.add_node(num_cpus=2, resources={RUNNER_NODE: 2})
    ray.init(address=cluster.address)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        if was_running:
            ray.init(num_cpus=4, include_dashboard=False)


def node_ids(algo: HGPO, *, evaluation: bool = False) -> list[str]:
    runners = algo.eval_env_runner_group if evaluation else algo.env_runner_group
    return runners.foreach_env_runner(
        lambda _: ray.get_runtime_context().get_node_id(), local_env_runner=False
    )


def runners_hold(algo: HGPO, weights: dict) -> bool:
    (runner_weights,) = algo.env_runner_group.foreach_env_runner(
        lambda er: er.module.get_state(), local_env_runner=False
    )
    return max_abs_diff({k: v for k, v in weights.items() if k in runner_weights}, runner_weights) == 0.0


def test_hgpo_trains_with_its_runners_on_a_second_node(two_nodes: Cluster, tmp_path: Path) -> None:
    head = ray.get_runtime_context().get_node_id()
    config = keychest_config().env_runners(custom_resources_per_env_runner={RUNNER_NODE: 1})
    config.evaluation(evaluation_interval=1, evaluation_duration=2, evaluation_num_env_runners=1)
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(2)]
        runner_nodes = set(node_ids(algo)) | set(node_ids(algo, evaluation=True))
        assert len(runner_nodes) == 1 and head not in runner_nodes  # all on the runner node
        assert all(r["learners"]["default_policy"]["num_optimizer_steps"] >= 1 for r in results)
        assert results[-1]["evaluation"]["env_runners"]["num_episodes"] >= 2
        # Weight sync crossed the nodes: the runners sample with the learner's weights.
        trained = learner_weights(algo)
        assert runners_hold(algo, trained)
        checkpoint = algo.save_to_path(tmp_path / "checkpoint")
        algo.train()  # moves the weights on
        assert not runners_hold(algo, trained)
        algo.restore_from_path(checkpoint)
        assert max_abs_diff(learner_weights(algo), trained) == 0.0 and algo.iteration == 2
        assert runners_hold(algo, trained)  # the restored weights reached the runner node
    finally:
        algo.stop()
