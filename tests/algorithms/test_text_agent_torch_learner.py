"""The torch learner's update leaves out the rows that carry no gradient (``skip_zero_advantage_rows``,
issue 63): with the policy term as the whole loss, a row whose advantage is 0 on every loss token adds
exactly nothing, so the update with them left out takes the same step and reports the same loss."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from helpers import GROUP_SIZE, GROUPS, keychest_config

import envs
from hgpo_rllib.algorithms.hiper.hiper_learner import HiPERLearner
from hgpo_rllib.algorithms.text_agent_learner import TextAgentLearner
from hgpo_rllib.columns import ADVANTAGES, PROMPT_MASK, RESP_MASK
from hgpo_rllib.connectors.learner.prompt_sharing import PromptSharing
from hgpo_rllib.env_runner import GroupedEnvRunner
from hgpo_rllib.learner_flops import row_pass_tokens

pytestmark = pytest.mark.usefixtures("ray_session")

POLICY = "default_policy"
METRICS = (
    "policy_loss",
    "total_loss",
    "num_optimizer_steps",
    "learner_rows_skipped_frac",
    "learner_tokens_skipped_frac",
)


@pytest.fixture(scope="module")
def episodes() -> list[Any]:
    """One KeyChest batch of the tiny model (3 groups of 2 episodes, up to 4 steps each)."""
    sampler = GroupedEnvRunner(config=keychest_config(remote_runners=0), worker_index=1)
    sampled = sampler.sample(num_episodes=GROUPS * GROUP_SIZE)
    sampler.stop()
    return sampled


#: The connector piece's own call, before a test wraps it.
SORT_ROWS = PromptSharing.__call__


def nonzero_advantages(num_rows: int) -> np.ndarray:
    """+-0.5 to 0.8, alternating in sign."""
    rows = np.arange(num_rows)
    return (np.where(rows % 2 == 0, 1.0, -1.0) * (0.5 + 0.1 * (rows % 4))).astype(np.float32)


def mixed_advantages(num_rows: int) -> np.ndarray:
    """Rows in threes alternately zero and non-zero: some minibatches part zero."""
    return np.where((np.arange(num_rows) // 3) % 2 == 0, 0.0, nonzero_advantages(num_rows)).astype(np.float32)


def zero_advantages(num_rows: int) -> np.ndarray:
    return np.zeros(num_rows, dtype=np.float32)


class Learner:
    """A KeyChest learner (no KL, no entropy bonus unless given) whose batches' advantages are set
    by a function of the row count (in sampling order, before the length buckets reorder them in
    each minibatch); it keeps the last batch and the policy's pass counts. The latest one built
    sets the advantages."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, skip: bool, **training: Any):
        settings = {"kl_coeff": 0.0, "entropy_coeff": 0.0, "skip_zero_advantage_rows": skip}
        config = keychest_config(**(settings | training))
        self.learner = config.build_learner(env=envs.make_env(config.env, config.env_config))
        self.module = self.learner.module[POLICY].unwrapped()
        self.advantages = mixed_advantages
        self.batch: dict[str, np.ndarray] = {}
        self.passes: dict[str, Any] = {}
        # Every optimiser step's gradients, by parameter name, as they are applied.
        self.grads: list[dict[str, torch.Tensor]] = []
        names = {param: name for name, param in self.learner.module[POLICY].named_parameters()}
        apply = self.learner.apply_gradients

        def recorded(grads: dict[Any, torch.Tensor]) -> None:
            self.grads.append({names[param]: grad.clone() for param, grad in grads.items()})
            apply(grads)

        self.learner.apply_gradients = recorded
        # The FLOP meter takes the passes' counts at the end of each update: the last take is its.
        take = self.module.take_pass_tokens

        def counted() -> dict[str, Any]:
            self.passes = take()
            return self.passes

        self.module.take_pass_tokens = counted

        def with_advantages(piece: Any, *args: Any, batch: dict, **kwargs: Any) -> dict:
            rows = batch[POLICY]
            rows[ADVANTAGES] = self.advantages(len(rows[ADVANTAGES]))
            out = SORT_ROWS(piece, *args, batch=batch, **kwargs)
            self.batch = {key: np.asarray(value) for key, value in out[POLICY].items()}
            return out

        monkeypatch.setattr(PromptSharing, "__call__", with_advantages)

    def update(self, episodes: list[Any], **kwargs: Any) -> dict[str, float]:
        """One update; its metrics that these tests read."""
        metrics = self.learner.update(episodes=episodes, **kwargs)[POLICY]
        return {key: float(metrics[key]) for key in METRICS}

    def weights(self) -> dict[str, torch.Tensor]:
        return {name: p.detach().clone() for name, p in self.learner.module[POLICY].named_parameters()}


def assert_same_steps(skipping: Learner, full: Learner, before: dict[str, torch.Tensor]) -> None:
    """Every optimiser step's gradient agrees within 1e-5 of its tensor's largest entry (float
    rounding: the passes sum other rows together), and the weights after the update within 1e-3 of
    the largest change it made: AdamW divides each gradient entry by its magnitude plus 1e-8, which
    turns the rounding of entries near 1e-8 into ~1e-4 of a step."""
    assert len(skipping.grads) == len(full.grads) > 0
    for step, plain in zip(skipping.grads, full.grads, strict=True):
        assert step.keys() == plain.keys()
        for name, grad in plain.items():
            atol = 1e-5 * float(grad.abs().max())
            torch.testing.assert_close(step[name], grad, rtol=0, atol=atol)
    after, full_after = skipping.weights(), full.weights()
    change = max(float((full_after[name] - before[name]).abs().max()) for name in before)
    assert change > 0
    for name, weight in full_after.items():
        torch.testing.assert_close(after[name], weight, rtol=0, atol=1e-3 * change)


@pytest.mark.parametrize(
    ("update", "training"),
    [
        ({}, {"minibatch_size": 4096}),  # one minibatch: one step, no old-log-prob pass
        ({"minibatch_size": 8}, {}),  # minibatches of 8 in micro-batches of 4, old log-probs
        ({"minibatch_size": 8, "num_epochs": 2}, {"num_epochs": 2}),
    ],
)
def test_skipping_zero_advantage_rows_takes_the_same_step(monkeypatch, episodes, update, training):
    """Rows in threes alternately zero and non-zero advantage: on and off take the same step and
    report the same loss; the skipped fractions are the zero rows' and their real tokens' shares;
    the training (and old-log-prob) passes computed the other rows' tokens only."""
    runs = {}
    for skip in (False, True):
        learner = Learner(monkeypatch, skip, **training)
        before = learner.weights()
        metrics = learner.update(episodes, **update)
        runs[skip] = (learner, before, metrics)
    (full, before, full_metrics), (skipping, skip_before, metrics) = runs[False], runs[True]
    for name, weight in before.items():
        assert torch.equal(skip_before[name], weight)
    assert_same_steps(skipping, full, before)
    for key in ("policy_loss", "total_loss"):  # the update's, and its last minibatch's
        assert metrics[key] == pytest.approx(full_metrics[key], rel=1e-6, abs=1e-9)
    assert metrics["num_optimizer_steps"] == full_metrics["num_optimizer_steps"]

    rows = skipping.batch
    zero = rows[ADVANTAGES] == 0
    real = rows[PROMPT_MASK].sum(axis=1) + rows[RESP_MASK].sum(axis=1)
    assert 0 < zero.sum() < len(zero)
    assert metrics["learner_rows_skipped_frac"] == zero.sum() / len(zero)
    assert metrics["learner_tokens_skipped_frac"] == real[zero].sum() / real.sum()
    assert full_metrics["learner_rows_skipped_frac"] == full_metrics["learner_tokens_skipped_frac"] == 0
    epochs = update.get("num_epochs", 1)
    computed = row_pass_tokens(rows[PROMPT_MASK][~zero], rows[RESP_MASK][~zero]).tokens
    assert skipping.passes["trained"].tokens == epochs * computed
    assert full.passes["trained"].tokens == epochs * real.sum()
    if "forward" in full.passes:  # the old-log-prob pass ran
        assert skipping.passes["forward"].tokens == computed
    assert ("forward" in full.passes) == bool(update)


def test_a_minibatch_of_zero_advantages_still_steps_the_optimizer(monkeypatch, episodes):
    """After a first update (no zero advantage: both learners alike), an update whose one minibatch
    has only zero advantages computes nothing with skipping, and still moves every weight as the
    full pass's zero gradient does: AdamW's momentum and weight decay."""
    runs = {}
    for skip in (False, True):
        learner = Learner(monkeypatch, skip, minibatch_size=4096)
        learner.advantages = nonzero_advantages
        learner.update(episodes)
        before = learner.weights()
        learner.advantages = zero_advantages
        metrics = learner.update(episodes)
        runs[skip] = (learner.weights(), before, metrics, learner.passes)
    (full, before, full_metrics, _), (skipped, skip_before, metrics, passes) = runs[False], runs[True]
    for name, weight in before.items():
        assert torch.equal(skip_before[name], weight)
        assert torch.equal(skipped[name], full[name])
        assert not torch.equal(full[name], weight)  # moved, by momentum and decay
    assert "trained" not in passes and metrics["learner_rows_skipped_frac"] == 1.0
    assert metrics["policy_loss"] == full_metrics["policy_loss"] == 0.0
    assert metrics["num_optimizer_steps"] == full_metrics["num_optimizer_steps"] == 1


@pytest.mark.parametrize("training", [{"kl_coeff": 0.01}, {"entropy_coeff": 0.001}])
def test_nothing_is_skipped_where_the_loss_has_another_term(monkeypatch, episodes, training):
    learner = Learner(monkeypatch, True, minibatch_size=4096, **training)
    metrics = learner.update(episodes)
    real = learner.batch[PROMPT_MASK].sum() + learner.batch[RESP_MASK].sum()
    assert metrics["learner_rows_skipped_frac"] == metrics["learner_tokens_skipped_frac"] == 0
    assert learner.passes["trained"].tokens == real


@pytest.mark.parametrize(
    ("settings", "distributed", "skips"),
    [
        ({}, False, True),
        ({"skip_zero_advantage_rows": False}, False, False),
        ({"kl_coeff": 0.01}, False, False),
        ({"entropy_coeff": 0.001}, False, False),
        ({}, True, False),  # several learners would run different passes and collectives
    ],
)
def test_rows_are_skipped_only_where_the_policy_term_is_the_whole_loss_on_one_learner(
    settings, distributed, skips
):
    defaults = {"skip_zero_advantage_rows": True, "kl_coeff": 0.0, "entropy_coeff": 0.0}
    module_config = SimpleNamespace(**(defaults | settings))
    learner = SimpleNamespace(
        config=SimpleNamespace(get_config_for_module=lambda mid: module_config), distributed=distributed
    )
    assert TextAgentLearner.skips_zero_advantage_rows(learner, POLICY) is skips
    assert HiPERLearner.skips_zero_advantage_rows(learner, POLICY) is False  # its critic trains on every row


def test_each_update_ends_by_handing_its_freed_memory_back(monkeypatch, episodes):
    """After the update's passes and metrics (its activations freed), once per update."""
    from hgpo_rllib.algorithms.torch import text_agent_torch_learner

    learner = Learner(monkeypatch, skip=False)
    releases: list[dict[str, Any]] = []
    monkeypatch.setattr(
        text_agent_torch_learner, "release_freed_memory", lambda: releases.append(dict(learner.passes))
    )
    learner.update(episodes)
    learner.update(episodes)
    assert len(releases) == 2 and releases[-1] == learner.passes and learner.passes
