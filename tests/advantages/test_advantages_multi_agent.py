"""Dr. MAS (docs/drmas.md): agent-wise normalisation and the vanilla multi-agent GRPO baseline against
plain-Python versions written from the formulas, on random shuffled batches."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from helpers import SETTINGS
from hypothesis import given
from hypothesis import strategies as st

from hgpo_rllib.advantages import (
    agent_turn_rewards,
    agent_wise_advantages,
    gigpo_advantages,
    grpo_advantages,
    hgpo_advantages,
    multi_agent_grpo_advantages,
    per_agent_view,
    step_returns_and_scores,
)

EPS = 1e-6


def normalised(values: list[float], x: float, by_std: bool) -> float:
    """The GRPO rule for one value of a group: mean 0 and std 1 for a group of one."""
    if len(values) == 1:
        mean, std = 0.0, 1.0
    else:
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return (x - mean) / (std + EPS) if by_std else x - mean


def agent_wise_reference(groups, agents, rewards, by_std):
    members = defaultdict(list)
    for g, a, r in zip(groups, agents, rewards, strict=True):
        members[g, a].append(r)
    return [normalised(members[g, a], r, by_std) for g, a, r in zip(groups, agents, rewards, strict=True)]


def multi_agent_grpo_reference(groups, trajs, rewards, by_std):
    turns = defaultdict(list)
    group_of = {}
    for g, t, r in zip(groups, trajs, rewards, strict=True):
        turns[t].append(r)
        group_of[t] = g
    means = {t: sum(v) / len(v) for t, v in turns.items()}
    per_group = defaultdict(list)
    for t, m in means.items():
        per_group[group_of[t]].append(m)
    return [normalised(per_group[g], means[t], by_std) for g, t in zip(groups, trajs, strict=True)]


@st.composite
def team_batches(draw):
    """Groups of trajectories whose turns belong to up to three agents, rows shuffled."""
    rows = []
    for g in range(draw(st.integers(1, 3))):
        for j in range(draw(st.integers(1, 4))):
            outcome = draw(st.sampled_from([0.0, 1.0, 0.5]))
            for _ in range(draw(st.integers(1, 5))):
                agent = draw(st.sampled_from(["router", "searcher", "answerer"]))
                valid = draw(st.booleans())
                rows.append((f"g{g}", f"g{g}t{j}", agent, outcome, valid))
    order = draw(st.permutations(range(len(rows))))
    return [rows[i] for i in order]


@SETTINGS
@given(batch=team_batches(), by_std=st.booleans())
def test_both_match_the_plain_python_versions(batch, by_std) -> None:
    groups, trajs, agents, outcomes, valid = (list(c) for c in zip(*batch, strict=True))
    rewards = agent_turn_rewards(outcomes, valid, invalid_penalty=0.1)
    assert np.allclose(rewards, [o - 0.1 * (not v) for o, v in zip(outcomes, valid, strict=True)])
    got = agent_wise_advantages(groups, agents, rewards, norm_by_std=by_std)
    assert np.allclose(got, agent_wise_reference(groups, agents, list(rewards), by_std), atol=1e-9)
    got = multi_agent_grpo_advantages(groups, trajs, rewards, norm_by_std=by_std)
    assert np.allclose(got, multi_agent_grpo_reference(groups, trajs, list(rewards), by_std), atol=1e-9)


@SETTINGS
@given(batch=team_batches())
def test_with_one_agent_agent_wise_is_grpo_over_turns(batch) -> None:
    groups = [row[0] for row in batch]
    rewards = np.array([row[3] for row in batch])
    assert np.array_equal(
        agent_wise_advantages(groups, ["solo"] * len(batch), rewards), grpo_advantages(groups, rewards)
    )


def test_agent_wise_normalisation_evens_out_the_agents_scales() -> None:
    """Under one baseline for all, agent k's E[A^2] is (sigma_k^2 + (mu_k - mu)^2) / sigma^2 (docs/drmas.md):
    here 0.67 for a router whose rewards sit apart and 1.33 for a noisy answerer; under each agent's
    own statistics it is (n-1)/n for both."""
    rng = np.random.default_rng(0)
    agents = np.repeat(["router", "answerer"], 200)
    rewards = np.where(agents == "router", rng.normal(2.0, 0.1, 400), rng.normal(0.0, 1.0, 400))
    groups = np.zeros(400, dtype=int)
    pooled = grpo_advantages(groups, rewards)
    own = agent_wise_advantages(groups, agents, rewards)
    sigma2 = rewards.var(ddof=1)
    for agent in ("router", "answerer"):
        rows = agents == agent
        predicted = (rewards[rows].var() + (rewards[rows].mean() - rewards.mean()) ** 2) / sigma2
        assert (pooled[rows] ** 2).mean() == pytest.approx(predicted, rel=1e-3)
        assert (own[rows] ** 2).mean() == pytest.approx(199 / 200, rel=1e-4)
    assert (pooled[agents == "router"] ** 2).mean() < 0.75 < 1.25 < (pooled[agents == "answerer"] ** 2).mean()


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="more than one group"):
        multi_agent_grpo_advantages(["a", "b"], ["t", "t"], [1.0, 0.0])
    with pytest.raises(ValueError, match="rewards"):
        agent_wise_advantages(["a"], ["x"], [float("nan")])
    assert agent_wise_advantages([], [], []).shape == (0,)


def test_per_agent_view_splits_trajectories_by_agent_and_pays_the_outcome_once() -> None:
    # One trajectory, turns of router (r) and answerer (a) interleaved, rows shuffled.
    agents = ["r", "a", "r", "a", "a"]
    steps = [0, 1, 2, 3, 4]
    order = [3, 0, 4, 2, 1]
    view = per_agent_view(
        ["g"] * 5, ["t"] * 5, [agents[i] for i in order], [steps[i] for i in order], [1.0] * 5
    )
    by_row = {steps[i]: (int(view.step_idx[k]), float(view.rewards[k])) for k, i in enumerate(order)}
    assert by_row == {0: (0, 0.0), 1: (0, 0.0), 2: (1, 1.0), 3: (1, 0.0), 4: (2, 1.0)}
    assert len(set(view.traj_ids.tolist())) == 2 and len(set(view.group_ids.tolist())) == 2


@SETTINGS
@given(batch=team_batches(), k=st.integers(0, 2))
def test_agent_wise_step_estimators_equal_running_each_agent_alone(batch, k) -> None:
    """normalize_by='agent': HGPO and GiGPO on the whole batch equal the single-agent estimators run
    on each agent's rows alone (its sub-trajectories), so every group is per agent."""
    n = len(batch)
    groups, trajs, agents, outcomes, valid = (np.array(c) for c in zip(*batch, strict=True))
    steps = np.zeros(n, dtype=int)
    for t in set(trajs):
        rows = np.flatnonzero(trajs == t)
        steps[rows] = np.arange(len(rows))
    obs = np.array([f"o{(i * 7) % 3}" for i in range(n)])  # repeated observations make real groups
    view = per_agent_view(groups, trajs, agents, steps, outcomes)
    returns, scores = step_returns_and_scores(view.traj_ids, view.step_idx, view.rewards, valid, 0.95)
    hgpo = hgpo_advantages(
        groups, trajs, steps, obs, returns, scores, history_length=k, normalize_by="agent", agent_ids=agents
    )
    gigpo = gigpo_advantages(groups, obs, returns, scores, normalize_by="agent", agent_ids=agents)
    for agent in set(agents):
        rows = np.flatnonzero(agents == agent)
        alone = hgpo_advantages(
            groups[rows],
            view.traj_ids[rows],
            view.step_idx[rows],
            obs[rows],
            returns[rows],
            scores[rows],
            history_length=k,
        )
        assert np.allclose(hgpo[rows], alone, atol=1e-12)
        assert np.allclose(
            gigpo[rows], gigpo_advantages(groups[rows], obs[rows], returns[rows], scores[rows])
        )
    with pytest.raises(ValueError, match="needs agent_ids"):
        gigpo_advantages(groups, obs, returns, scores, normalize_by="agent")
