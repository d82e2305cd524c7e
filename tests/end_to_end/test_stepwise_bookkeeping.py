"""The step-wise bookkeeping class of bugs, end to end (issue 62, item 6): in ``Algorithm.train()``
every step row's advantage reaches exactly that step's response tokens in the loss (no turn masked
to 0, none counted twice), and the optimiser steps are as many as the config's minibatches.

Peers shipped this class silently (SkyRL #1492: earlier turns' advantages masked to 0). The hooks
record the episodes the advantage connector receives and the rows each loss call receives; the
expected advantages are computed here by hand from the episodes' rewards (GRPO: each row's episode
score, the total reward less the row's invalid-action penalty, which a length-cut turn gets too,
normalised over its rollout group's rows with the unbiased std)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pytest
from helpers import keychest_config

from hgpo_rllib.algorithms.torch.text_agent_torch_learner import TextAgentTorchLearner, loss_mask
from hgpo_rllib.columns import (
    ADVANTAGES,
    LENGTH_CUT,
    PROMPT_IDS,
    PROMPT_MASK,
    RESP_IDS,
    RESP_MASK,
    group_id_of,
)
from hgpo_rllib.connectors.learner.group_advantages import GroupAdvantages

pytestmark = pytest.mark.usefixtures("ray_session")

INVALID_PENALTY = 0.1  # the default invalid_action_penalty
EPSILON = 1e-6  # grpo_advantages' default


def row_key(prompt: Any, response: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(int(t) for t in prompt), tuple(int(t) for t in response)


def hand_computed_rows(episodes: list[Any]) -> Counter:
    """(prompt tokens, response tokens, advantage rounded to 1e-5) of every step of ``episodes``."""
    rows = []
    for episode in episodes:
        total = float(sum(episode.get_rewards()))
        valid = [bool(info["is_action_valid"]) for info in episode.get_infos()[1:]]
        prompts = episode.get_extra_model_outputs(PROMPT_IDS)
        masks = episode.get_extra_model_outputs(RESP_MASK)
        cut = episode.get_extra_model_outputs(LENGTH_CUT)
        for step, action in enumerate(episode.get_actions()):
            score = total - INVALID_PENALTY * (not valid[step] or bool(cut[step]))
            response = np.asarray(action)[np.asarray(masks[step]).astype(bool)]
            rows.append((group_id_of(episode), row_key(prompts[step], response), score))
    scores: dict[str, list[float]] = {}
    for group, _, score in rows:
        scores.setdefault(group, []).append(score)
    expected = Counter()
    for group, key, score in rows:
        members = np.asarray(scores[group])
        mean, std = (members.mean(), members.std(ddof=1)) if len(members) > 1 else (0.0, 1.0)
        expected[(*key, round((score - mean) / (std + EPSILON), 5))] += 1
    return expected


def test_grpo_gives_each_step_row_its_advantage_on_exactly_its_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    episodes: list[Any] = []
    losses: list[dict[str, np.ndarray]] = []
    advantage_call = GroupAdvantages.__call__
    loss_call = TextAgentTorchLearner.compute_loss_for_module

    def record_episodes(self: Any, **kwargs: Any) -> Any:
        episodes.extend(kwargs["episodes"])
        return advantage_call(self, **kwargs)

    def record_loss(self: Any, **kwargs: Any) -> Any:
        batch = kwargs["batch"]
        columns = {k: batch[k] for k in (ADVANTAGES, PROMPT_IDS, PROMPT_MASK, RESP_IDS, RESP_MASK)}
        losses.append({k: v.detach().cpu().numpy() for k, v in {**columns, "loss": loss_mask(batch)}.items()})
        return loss_call(self, **kwargs)

    monkeypatch.setattr(GroupAdvantages, "__call__", record_episodes)
    monkeypatch.setattr(TextAgentTorchLearner, "compute_loss_for_module", record_loss)
    config = keychest_config(remote_runners=0, estimator="grpo", minibatch_size=10, micro_batch_size=5)
    algo = config.build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()

    seen = Counter()
    for rows in losses:
        for i in range(len(rows[ADVANTAGES])):
            response_tokens = rows[RESP_MASK][i].astype(bool)
            # The loss covers exactly the response's tokens, each with the row's one advantage.
            assert np.array_equal(rows["loss"][i].astype(bool), response_tokens)
            advantage = np.broadcast_to(rows[ADVANTAGES][i], response_tokens.shape)[response_tokens]
            assert np.all(advantage == advantage[0])
            prompt = rows[PROMPT_IDS][i][rows[PROMPT_MASK][i].astype(bool)]
            key = row_key(prompt, rows[RESP_IDS][i][response_tokens])
            seen[(*key, round(float(advantage[0]), 5))] += 1
    expected = hand_computed_rows(episodes)
    assert sum(expected.values()) == result["learners"]["default_policy"]["num_step_rows"]
    assert seen == expected
    assert any(advantage != 0 for *_, advantage in expected)  # else a zeroed turn would go unseen
    minibatches = math.ceil(sum(expected.values()) / 10)
    assert result["learners"]["default_policy"]["num_optimizer_steps"] == minibatches
