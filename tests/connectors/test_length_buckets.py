"""Length buckets (issue 63, item 5): without prefix sharing, each minibatch's rows are sorted by length
before the learner cuts them into micro-batches, so each micro-batch pads to about its own rows' length;
the minibatches keep their rows, so the token-mean loss and its gradient do not change."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from helpers import GROUP_SIZE, GROUPS, keychest_config

import envs
from hgpo_rllib.algorithms.text_agent_learner import TextAgentLearner
from hgpo_rllib.columns import PROMPT_MASK, RESP_MASK
from hgpo_rllib.connectors.learner.prompt_sharing import PromptSharing, length_order
from hgpo_rllib.env_runner import GroupedEnvRunner
from hgpo_rllib.learner_flops import row_pass_tokens


def test_rows_are_sorted_by_length_inside_each_span_only():
    lengths = np.array([9, 3, 5, 3, 8, 1, 2])
    assert length_order(lengths, [0, 4, 7]).tolist() == [1, 3, 2, 0, 5, 6, 4]
    assert length_order(lengths, [0, 7]).tolist() == [5, 6, 1, 3, 2, 4, 0]  # ties keep their order


def token_rows(lengths: list[tuple[int, int]]) -> dict[str, np.ndarray]:
    """Rows of (prompt, response) lengths: left-padded prompts, right-padded responses."""
    prompt_width, resp_width = (max(column) for column in zip(*lengths, strict=True))
    prompt_mask = np.zeros((len(lengths), prompt_width), dtype=np.int64)
    resp_mask = np.zeros((len(lengths), resp_width), dtype=np.int64)
    for n, (prompt, response) in enumerate(lengths):
        prompt_mask[n, prompt_width - prompt :] = 1
        resp_mask[n, :response] = 1
    ids = {"prompt_ids": prompt_mask * 7, "resp_ids": resp_mask * 8}
    return {**ids, PROMPT_MASK: prompt_mask, RESP_MASK: resp_mask, "row": np.arange(len(lengths))}


def positions(rows: dict[str, np.ndarray], micro: int) -> int:
    """Input positions of the plain passes over micro-batches of ``micro`` consecutive rows."""
    return sum(
        row_pass_tokens(rows[PROMPT_MASK][s : s + micro], rows[RESP_MASK][s : s + micro]).positions
        for s in range(0, len(rows["row"]), micro)
    )


def test_a_batch_of_mixed_lengths_pads_less_in_buckets():
    """Four rows of (prompt, response) lengths (6, 1), (2, 1), (6, 3), (2, 3), 24 real tokens, in
    micro-batches of 2. As they come: 2 x (6 + 1) + 2 x (6 + 3) = 32 input positions; by length
    (3, 5, 7, 9 tokens): 2 x (2 + 3) + 2 x (6 + 3) = 28."""
    rows = token_rows([(6, 1), (2, 1), (6, 3), (2, 3)])
    assert positions(rows, 2) == 32 and row_pass_tokens(rows[PROMPT_MASK], rows[RESP_MASK]).tokens == 24
    piece = PromptSharing(micro_batch_size={"p": 2}, reorder=False, length_spans=lambda n: [0, n])
    bucketed = piece(rl_module=None, batch={"p": rows}, episodes=None)["p"]
    assert bucketed["row"].tolist() == [1, 3, 0, 2] and positions(bucketed, 2) == 28
    for plain in (PromptSharing(micro_batch_size={"p": 2}, reorder=False), piece):
        if plain is piece:
            plain.length_spans = lambda n: None  # no cut holds every epoch: the rows keep their order
        assert plain(rl_module=None, batch={"p": rows}, episodes=None)["p"]["row"].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("settings", "distributed", "rows", "spans"),
    [
        ({}, False, 10, [0, 4, 8, 10]),  # a lone learner: PerModuleMiniBatches' cuts, the last shorter
        ({"minibatches_per_module": 3}, False, 10, [0, 3, 7, 10]),
        ({"minibatch_size": None}, False, 10, [0, 10]),
        ({}, True, 8, [0, 4, 8]),  # several learners: cyclic minibatches that divide the rows
        ({}, True, 10, None),  # ... else one wraps round to the first rows
        ({"shuffle_batch_per_epoch": True, "num_epochs": 2}, False, 10, None),
        ({"shuffle_batch_per_epoch": True}, False, 10, [0, 4, 8, 10]),  # one epoch: never shuffled
    ],
)
def test_the_spans_are_where_every_epochs_minibatches_cut(settings, distributed, rows, spans):
    config = {"minibatch_size_per_learner": 4, "minibatches_per_module": None, "num_epochs": 1}
    config |= {"shuffle_batch_per_epoch": False} | settings
    if "minibatch_size" in settings:
        config["minibatch_size_per_learner"] = settings["minibatch_size"]
    learner = SimpleNamespace(config=SimpleNamespace(**config), distributed=distributed)
    assert TextAgentLearner.minibatch_spans(learner, rows) == spans


@pytest.mark.usefixtures("ray_session")
def test_buckets_keep_every_minibatch_gradient_and_compute_fewer_positions(monkeypatch) -> None:  # noqa: ANN001
    """KeyChest rows (their prompts grow with the history), minibatches of 8 in micro-batches of 4,
    the old-log-prob pass too: each minibatch's gradient with length buckets equals the one without
    within float rounding, and the passes' inputs hold exactly the positions of their micro-batches,
    fewer in buckets; ``learner_padding_frac`` reports them."""
    sampler = GroupedEnvRunner(config=keychest_config(remote_runners=0), worker_index=1)
    episodes = sampler.sample(num_episodes=GROUPS * GROUP_SIZE)
    sampler.stop()
    seen: dict[bool, Any] = {}
    call, batches = PromptSharing.__call__, []
    monkeypatch.setattr(
        PromptSharing, "__call__", lambda *a, **kw: batches.append(call(*a, **kw)) or batches[-1]
    )
    for buckets in (False, True):
        config = keychest_config(kl_coeff=0.0, length_buckets=buckets)
        learner = config.build_learner(env=envs.make_env(config.env, config.env_config))
        grads, passes = [], []
        # Gradients recorded, not applied: every minibatch starts from the same weights.
        names = {param: name for name, param in learner.module["default_policy"].named_parameters()}
        learner.apply_gradients = lambda g, grads=grads, names=names: grads.append(
            {names[param]: grad.clone() for param, grad in g.items()}
        )
        module = learner.module["default_policy"].unwrapped()
        take = module.take_pass_tokens
        module.take_pass_tokens = lambda take=take, passes=passes: passes.append(take()) or passes[-1]
        metrics = learner.update(episodes=episodes, minibatch_size=8, num_epochs=1)["default_policy"]
        seen[buckets] = (grads, passes[-1], batches[-1]["default_policy"], metrics)

    (plain_grads, plain_passes, plain_rows, plain_metrics) = seen[False]
    (grads, passes, rows, metrics) = seen[True]
    num_rows = len(rows[RESP_MASK])
    assert num_rows > 8 and len(grads) == len(plain_grads) == -(-num_rows // 8)
    for step, plain in zip(grads, plain_grads, strict=True):
        assert step.keys() == plain.keys()
        for key, grad in plain.items():
            torch.testing.assert_close(step[key], grad, rtol=1e-5, atol=1e-9)
    counts = {}
    for buckets, (_, passes_, rows_, metrics_) in seen.items():
        rows_ = {k: np.asarray(v) for k, v in rows_.items()} | {"row": np.arange(num_rows)}
        expected = positions(rows_, 4)  # 8-row minibatches: their 4-row micro-batches are the chunks
        assert passes_["trained"].positions == passes_["forward"].positions == expected
        tokens = 2 * passes_["trained"].tokens
        assert float(metrics_["learner_padding_frac"]) == pytest.approx(
            1 - tokens / (2 * expected), abs=1e-12
        )
        counts[buckets] = expected
    assert counts[True] < counts[False]
    print(f"input positions per pass: {counts[False]} as sampled, {counts[True]} in length buckets")
