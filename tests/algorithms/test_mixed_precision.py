"""bf16 runs: float32 master weights on the learner, bf16 generation on the runners, exact checkpoints,
and the old log-probs recomputed by the learner (issue 8, items 3 and 4)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from helpers import (
    GROUP_SIZE,
    GROUPS,
    TINY_MODEL,
    assert_same_tree,
    keychest_config,
    learner_weights,
    optimizer_state,
)

import envs
from hgpo_rllib import HGPO
from hgpo_rllib.columns import RESP_LOGP
from hgpo_rllib.env_runner import GroupedEnvRunner

pytestmark = pytest.mark.usefixtures("ray_session")

BF16 = {"torch_dtype": "bfloat16"}


def bf16_config(**training: Any) -> Any:
    return keychest_config(**training).rl_module(model_config={**TINY_MODEL, **BF16})


def changed_fraction(before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> float:
    """Fraction of the policy's weights (reference model left out) that differ after an update."""
    keys = [k for k in before if not k.startswith("ref_lm.")]
    changed = sum(int((before[k] != after[k]).sum()) for k in keys)
    return changed / sum(before[k].size for k in keys)


def learner_dtypes_of(learner: Any) -> dict[str, set[torch.dtype]]:
    module = learner.module["default_policy"]
    (optim,) = learner._named_optimizers.values()
    return {
        "policy": {p.dtype for p in module.lm.parameters()},
        "reference": {p.dtype for p in module.ref_lm.parameters()},
        "optimizer": {t.dtype for state in optim.state.values() for t in state.values() if t.dim() > 0},
    }


def test_bf16_learner_keeps_float32_masters_and_lr_1e6_moves_most_weights() -> None:
    """With bf16 weights, AdamW steps of lr 1e-6 round away (1.2% of the weights changed per
    iteration); float32 masters keep them, while runners still generate in bf16."""
    algo = bf16_config(lr=1e-6).build_algo()
    try:
        before = learner_weights(algo)
        algo.train()
        after = learner_weights(algo)
        (learner_dtypes,) = [r.get() for r in algo.learner_group.foreach_learner(learner_dtypes_of)]
        runner_dtypes = algo.env_runner_group.foreach_env_runner(
            lambda er: {p.dtype for p in er.module.lm.parameters()}, local_env_runner=False
        )
    finally:
        algo.stop()
    assert learner_dtypes == {
        "policy": {torch.float32},
        "reference": {torch.bfloat16},
        "optimizer": {torch.float32},
    }
    assert runner_dtypes == [{torch.bfloat16}]
    assert changed_fraction(before, after) >= 0.5


def test_bf16_checkpoint_round_trip_is_exact(tmp_path: Any) -> None:
    algo = bf16_config().build_algo()
    try:
        algo.train()
        path = algo.save_to_path(str(tmp_path / "ckpt"))
        saved_weights, saved_optim = learner_weights(algo), optimizer_state(algo)
    finally:
        algo.stop()
    restored = HGPO.from_checkpoint(path)
    try:
        assert_same_tree(learner_weights(restored), saved_weights)
        assert_same_tree(optimizer_state(restored), saved_optim)
        assert restored.train()["training_iteration"] == 2
    finally:
        restored.stop()


def test_bfloat16_optimizer_state_is_saved_as_float32_and_restored_exactly() -> None:
    """A custom bf16 optimizer state (numpy has no bf16) survives get_state/set_state bit for bit."""
    config = bf16_config()
    learner = config.build_learner(env=envs.make_env(config.env, config.env_config))
    (optim,) = learner._named_optimizers.values()
    for param in optim.param_groups[0]["params"]:
        optim.state[param] = {
            "step": torch.tensor(3.0),
            "exp_avg": torch.randn_like(param).bfloat16(),
            "exp_avg_sq": torch.rand_like(param).bfloat16(),
        }
    saved = learner.get_state(components="optimizer")
    first = optim.param_groups[0]["params"][0]
    expected = optim.state[first]["exp_avg"].clone()
    optim.state[first]["exp_avg"].zero_()
    learner.set_state(saved)
    # load_state_dict casts the float32 copy back to the float32 master's dtype.
    restored = optim.state[optim.param_groups[0]["params"][0]]["exp_avg"]
    torch.testing.assert_close(restored, expected.float(), rtol=0, atol=0)


@pytest.mark.parametrize("recompute", [True, False])
def test_recomputed_old_logp_make_the_first_ratio_exactly_one(recompute: bool) -> None:
    """The sampler's log-probs are perturbed by 0.5 nats: with the learner's own old log-probs
    (bf16 compute, the default) the first minibatch's ratio is exactly 1 and nothing clips; with the
    sampler's it is exp(0.5), outside the clip range. The gap metric measures the perturbation either way."""
    sampler = GroupedEnvRunner(config=keychest_config(remote_runners=0), worker_index=1)
    episodes = sampler.sample(num_episodes=GROUPS * GROUP_SIZE)
    sampler.stop()
    for episode in episodes:
        for logp in episode.get_extra_model_outputs(RESP_LOGP):
            logp -= 0.5  # in place; only valid tokens are compared (masked elsewhere)
    config = bf16_config(recompute_old_logp=recompute)
    learner = config.build_learner(env=envs.make_env(config.env, config.env_config))
    # One minibatch (the whole batch), one epoch: the only step starts from the sampled weights.
    metrics = learner.update(episodes=episodes, num_epochs=1)["default_policy"]
    assert abs(metrics["logp_gap_vs_sampler"] - 0.5) < 0.05
    if recompute:
        assert metrics["ratio_mean"] == 1.0 and metrics["clip_frac"] == 0.0
    else:
        assert metrics["ratio_mean"] > 1.5  # exp(0.5) = 1.65, beyond the clip range 1 + 0.2
