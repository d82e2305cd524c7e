"""Group-relative advantages for multi-agent LLM systems: Dr. MAS's agent-wise normalisation and the
vanilla multi-agent GRPO it replaces (Feng et al., "Dr. MAS", arXiv 2602.08847, §3; ``docs/drmas.md``).

One row is one agent turn (one LLM call). Every turn of every agent of a trajectory is rewarded with
the team's outcome, less that turn's own invalid-format penalty (:func:`agent_turn_rewards`).

- Vanilla GRPO (:func:`multi_agent_grpo_advantages`): each trajectory's turns are averaged first,
  those means are normalised over the group's trajectories, and every turn of every agent of a
  trajectory gets its trajectory's advantage. One baseline for all agents: an agent whose rewards
  differ in mean or scale from the pooled ones gets advantages of systematically larger magnitude
  (E[A^2 | agent] = (sigma_k^2 + (mu_k - mu)^2) / sigma^2), which Dr. MAS links to gradient spikes.
- Dr. MAS (:func:`agent_wise_advantages`): the GRPO rule with (group, agent) as the group key: each
  agent's turns in a group are normalised with that agent's own statistics over its turns.

For the step-level estimators (GiGPO, HGPO) agent-wise normalisation means each agent's turns of a
trajectory form their own sub-trajectory (:func:`per_agent_view`): every level's groups are then per
agent, and the team outcome is the reward of the agent's last turn in it, so discounted returns do
not grow with how often an agent acts.

Pure numpy like the other estimators, rows in any order, ids any hashable keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hgpo_rllib.advantages.grouping import (
    FloatArray,
    IntArray,
    Keys,
    check_epsilon,
    dense_ids,
    episode_advantages,
    finite_column,
    finite_scalar,
    flag_column,
    intern_keys,
    n_rows,
    pair_codes,
    trajectory_layout,
)


def agent_turn_rewards(
    team_rewards: npt.ArrayLike, is_valid: npt.ArrayLike, *, invalid_penalty: float = 0.1
) -> FloatArray:
    """Each turn's reward: its trajectory's team outcome (given per row) less ``invalid_penalty`` if
    the turn's answer broke its role's format (the authors' episode reward with their penalty)."""
    n_rows(team_rewards=team_rewards, is_valid=is_valid)
    rewards = finite_column(team_rewards, "team_rewards")
    penalty = finite_scalar(invalid_penalty, "invalid_penalty")
    return rewards - penalty * ~flag_column(is_valid, "is_valid")


def agent_group_ids(group_ids: Keys, agent_ids: Keys, name: str = "group_ids") -> IntArray:
    """One code per (group, agent) pair: the groups of agent-wise normalisation (or, given
    trajectory ids as ``group_ids``, the agents' sub-trajectories)."""
    group, _ = intern_keys(group_ids, name)
    agent, n_agents = intern_keys(agent_ids, "agent_ids")
    return pair_codes(group, agent, n_agents)


def agent_wise_advantages(
    group_ids: Keys,
    agent_ids: Keys,
    rewards: npt.ArrayLike,
    *,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> FloatArray:
    """Dr. MAS: per (group, agent), over all of that agent's turns in the group's trajectories,
    ``A = (r - mean) / (unbiased std + epsilon)``; a (group, agent) with one turn gets ``A = r``. This is
    :func:`~hgpo_rllib.advantages.grpo_advantages`'s rule on (group, agent) keys; ``norm_by_std=False``
    drops the division."""
    n = n_rows(group_ids=group_ids, agent_ids=agent_ids, rewards=rewards)
    check_epsilon(epsilon)
    values = finite_column(rewards, "rewards")
    if n == 0:
        return values
    return episode_advantages(agent_group_ids(group_ids, agent_ids), values, norm_by_std, epsilon)


def multi_agent_grpo_advantages(
    group_ids: Keys,
    traj_ids: Keys,
    rewards: npt.ArrayLike,
    *,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> FloatArray:
    """Vanilla GRPO in a multi-agent system, as the authors' baseline computes it: ``s_j`` = the mean
    reward of trajectory j's turns (all agents), normalised over the group's trajectories (each
    trajectory counts once; unbiased std; a group of one trajectory uses mean 0 and std 1); every turn
    of trajectory j gets that advantage. A trajectory must not span groups (ValueError)."""
    n = n_rows(group_ids=group_ids, traj_ids=traj_ids, rewards=rewards)
    check_epsilon(epsilon)
    values = finite_column(rewards, "rewards")
    if n == 0:
        return values
    group, _ = intern_keys(group_ids, "group_ids")
    traj, n_traj = dense_ids(intern_keys(traj_ids, "traj_ids")[0])  # one entry per trajectory
    traj_group = np.full(n_traj, -1, dtype=np.int64)
    traj_group[traj] = group
    if (traj_group[traj] != group).any():
        raise ValueError("traj_ids: a trajectory's rows carry more than one group id")
    means = np.bincount(traj, weights=values, minlength=n_traj) / np.bincount(traj, minlength=n_traj)
    return episode_advantages(traj_group, means, norm_by_std, epsilon)[traj]


@dataclass(frozen=True)
class AgentView:
    """A multi-agent batch re-keyed per agent, aligned with the input rows: the (group, agent) and
    (trajectory, agent) codes, each turn's index within its agent's sub-trajectory, and the rewards
    (the team outcome on each sub-trajectory's last turn, 0 on the others)."""

    group_ids: IntArray
    traj_ids: IntArray
    step_idx: IntArray
    rewards: FloatArray


def per_agent_view(
    group_ids: Keys, traj_ids: Keys, agent_ids: Keys, step_idx: npt.ArrayLike, team_rewards: npt.ArrayLike
) -> AgentView:
    """The inputs of :func:`~hgpo_rllib.advantages.step_returns_and_scores` and of GiGPO / HGPO with
    agent-wise normalisation: pass the view's ids, steps and rewards where the single-agent
    estimators take a trajectory's (``team_rewards``: the trajectory's outcome, given on any of its
    rows; the sub-trajectory's last row's value is used)."""
    n = n_rows(
        group_ids=group_ids,
        traj_ids=traj_ids,
        agent_ids=agent_ids,
        step_idx=step_idx,
        team_rewards=team_rewards,
    )
    outcome = finite_column(team_rewards, "team_rewards")
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return AgentView(empty, empty.copy(), empty.copy(), outcome)
    sub_traj = agent_group_ids(traj_ids, agent_ids, "traj_ids")
    layout = trajectory_layout(sub_traj, step_idx)
    sub_step = np.empty(n, dtype=np.int64)
    sub_step[layout.order] = layout.pos
    last = np.zeros(n, dtype=bool)
    last[layout.order] = layout.remaining == 0
    return AgentView(agent_group_ids(group_ids, agent_ids), sub_traj, sub_step, np.where(last, outcome, 0.0))
