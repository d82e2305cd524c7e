"""Multi-agent (team) batches on the learner side (docs/drmas.md): RLlib's MultiAgentEpisodes -> one
row per agent turn, Dr. MAS's advantages, rows split per module. No Ray cluster."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from hgpo_rllib.advantages import (
    agent_turn_rewards,
    agent_wise_advantages,
    hgpo_advantages,
    multi_agent_grpo_advantages,
    step_returns_and_scores,
)
from hgpo_rllib.advantages.step_table import EstimatorSettings, StepTable, estimate_advantages
from hgpo_rllib.columns import ADVANTAGES, GROUP_ID, PROMPT_IDS, RESP_LOGP, RESP_MASK, TURN
from hgpo_rllib.connectors.learner.group_advantages import GroupAdvantages

PAD = 0
WIDTH = 3
OUTCOME = 10.0


def team_episode(
    group_id: str, roles: list[str], valid: list[bool], won: bool, module_of: dict[str, str]
) -> MultiAgentEpisode:
    """A turn-based team episode: ``roles[t]`` acts at turn t on observation ``f"o{t}"`` (each
    role's observations are the team's at its turns); at the end every role that acted gets the
    outcome and a final observation, as the team envs return them."""
    episode = MultiAgentEpisode(agent_to_module_mapping_fn=lambda agent, _episode: module_of[agent])
    info = {"task": "t", GROUP_ID: group_id, "admissible_actions": []}
    episode.add_env_reset(observations={roles[0]: "o0"}, infos={roles[0]: info})
    last_valid: dict[str, bool] = {}
    for t, role in enumerate(roles):
        last_valid[role] = valid[t]
        done = t == len(roles) - 1
        nxt = roles[t + 1] if not done else None
        acted = set(roles[: t + 1])
        if done:
            observations = {r: f"o{t + 1}" for r in acted}
            infos = {r: {**info, "is_action_valid": last_valid[r], "won": won} for r in acted}
            rewards = {r: OUTCOME * won for r in acted}
            terminateds = {"__all__": True, **{r: True for r in acted}}
        else:
            observations = {nxt: f"o{t + 1}"}
            infos = {nxt: {**info, "is_action_valid": last_valid.get(nxt, True)}}
            rewards = {role: 0.0}
            terminateds = {"__all__": False}
        mask = np.ones(WIDTH, dtype=np.int64)
        episode.add_env_step(
            observations=observations,
            actions={role: np.full(WIDTH, 10 + t)},
            rewards=rewards,
            infos=infos,
            terminateds=terminateds,
            truncateds={"__all__": False},
            extra_model_outputs={
                role: {
                    PROMPT_IDS: np.arange(1, 3 + t, dtype=np.int32),
                    RESP_MASK: mask,
                    RESP_LOGP: -0.5 * mask.astype(np.float32),
                    WEIGHTS_SEQ_NO: 1,
                    TURN: t,
                }
            },
        )
    return episode


def random_batch(seed: int, module_of: dict[str, str]) -> list[MultiAgentEpisode]:
    """Groups of team episodes with random routing (the planner acts first, then executor turns with
    a planner turn now and then), random validity and outcomes."""
    rng = random.Random(seed)
    episodes = []
    for g in range(3):
        for _ in range(4):
            roles = ["planner"] + [
                "executor" if rng.random() < 0.7 else "planner" for _ in range(rng.randint(1, 6))
            ]
            valid = [rng.random() < 0.8 for _ in roles]
            episodes.append(team_episode(f"g{g}", roles, valid, rng.random() < 0.5, module_of))
    return episodes


def test_a_team_episode_becomes_one_row_per_agent_turn_with_the_outcome_on_each_agents_last_turn() -> None:
    roles = ["planner", "executor", "executor", "planner", "executor"]
    valid = [True, False, True, True, True]
    episode = team_episode("g0", roles, valid, True, {"planner": "p", "executor": "e"})
    table = StepTable.from_episodes([episode])
    # Agents in sorted order: executor's turns 1, 2, 4, then planner's 0, 3.
    assert table.agent_ids == ["executor"] * 3 + ["planner"] * 2
    assert table.module_ids == ["e"] * 3 + ["p"] * 2
    assert table.step_idx.tolist() == [1, 2, 4, 0, 3]
    assert table.obs == ["o1", "o2", "o4", "o0", "o3"]
    assert table.rewards.tolist() == [0.0, 0.0, OUTCOME, 0.0, OUTCOME]
    assert table.is_action_valid.tolist() == [False, True, True, True, True]
    assert table.traj_ids == [episode.id_] * 5 and table.group_ids == ["g0"] * 5


@pytest.mark.parametrize("normalize_by", ["agent", "trajectory"])
def test_team_grpo_is_dr_mas_rule_on_per_turn_rewards(normalize_by: str) -> None:
    episodes = random_batch(0, {"planner": "shared", "executor": "shared"})
    table = StepTable.from_episodes(episodes)
    settings = EstimatorSettings(estimator="grpo", normalize_by=normalize_by, invalid_action_penalty=0.1)
    got = estimate_advantages(table, settings).advantages
    # Plain Python: every turn gets the team outcome less its own penalty.
    outcome = {
        ep.id_: OUTCOME * bool(next(iter(ep.agent_episodes.values())).get_infos(-1)["won"]) for ep in episodes
    }
    turn_rewards = [
        outcome[t] - 0.1 * (not v) for t, v in zip(table.traj_ids, table.is_action_valid, strict=True)
    ]
    assert np.allclose(
        agent_turn_rewards([outcome[t] for t in table.traj_ids], table.is_action_valid), turn_rewards
    )
    if normalize_by == "agent":
        expected = agent_wise_advantages(table.group_ids, table.agent_ids, turn_rewards)
    else:
        expected = multi_agent_grpo_advantages(table.group_ids, table.traj_ids, turn_rewards)
    assert np.allclose(got, expected)
    # Agent-wise and global differ on this batch (the planner's and executor's turn rewards differ).
    other = "trajectory" if normalize_by == "agent" else "agent"
    assert not np.allclose(
        got, estimate_advantages(table, EstimatorSettings(estimator="grpo", normalize_by=other)).advantages
    )


def test_team_hgpo_by_agent_is_hgpo_on_each_agents_sub_trajectories() -> None:
    episodes = random_batch(1, {"planner": "p", "executor": "e"})
    table = StepTable.from_episodes(episodes)
    settings = EstimatorSettings(estimator="hgpo", normalize_by="agent", history_length=2)
    got = estimate_advantages(table, settings).advantages
    # Each agent alone: its turns renumbered 0.., the outcome on its last turn, groups per agent.
    expected = np.zeros(len(got))
    for agent in ("planner", "executor"):
        rows = [i for i, a in enumerate(table.agent_ids) if a == agent]
        traj = [table.traj_ids[i] for i in rows]
        steps = [
            sorted(table.step_idx[[j for j in rows if table.traj_ids[j] == t]]).index(table.step_idx[i])
            for i, t in zip(rows, traj, strict=True)
        ]
        rewards = np.asarray([table.rewards[i] for i in rows])
        valid = table.is_action_valid[rows]
        returns, scores = step_returns_and_scores(traj, steps, rewards, valid, settings.gamma, 0.1)
        expected[rows] = hgpo_advantages(
            [table.group_ids[i] for i in rows],
            traj,
            steps,
            [table.obs[i] for i in rows],
            returns,
            scores,
            history_length=2,
        )
    assert np.allclose(got, expected)


def test_the_connector_gives_each_module_its_agents_rows_and_logs_per_agent() -> None:
    module_of = {"planner": "planner_llm", "executor": "executor_llm"}
    episodes = random_batch(2, module_of)
    fake = {
        m: SimpleNamespace(unwrapped=lambda: SimpleNamespace(pad_token_id=PAD)) for m in module_of.values()
    }
    settings = EstimatorSettings(estimator="grpo", normalize_by="agent")
    metrics = MetricsLogger()
    batch = GroupAdvantages(settings=settings)(rl_module=fake, batch={}, episodes=episodes, metrics=metrics)
    table = StepTable.from_episodes(episodes)
    advantages = estimate_advantages(table, settings).advantages
    assert set(batch) == {"planner_llm", "executor_llm"}
    for agent, module_id in module_of.items():
        mine = np.asarray(table.agent_ids) == agent
        assert np.allclose(batch[module_id][ADVANTAGES], advantages[mine])
        assert len(batch[module_id][PROMPT_IDS]) == mine.sum()
    logged = metrics.reduce()
    assert (
        logged["executor_llm"]["agent_executor_num_step_rows"]
        == (np.asarray(table.agent_ids) == "executor").sum()
    )
    # Agent-wise normalisation: each agent's advantages sum to 0 within each group (no agent acts
    # only once in a group here), so their mean over the batch is 0 too.
    assert abs(float(logged["planner_llm"]["agent_planner_advantage_mean"])) < 1e-6


def test_an_agent_mapped_to_two_modules_is_logged_under_each_with_its_own_rows() -> None:
    """The executor of group g0 has a module of its own (as in the two-learner test of
    tests/end_to_end/test_drmas_training.py): each module logs the executor rows it trains, not all of
    the executor's rows under the module of its first one."""
    apart = {"planner": "planner_llm", "executor": "executor_g0"}
    together = {"planner": "planner_llm", "executor": "executor_llm"}
    games = [("g0", "PEE", apart), ("g0", "PE", apart), ("g1", "PEEE", together), ("g1", "PEPE", together)]
    roles = {"P": "planner", "E": "executor"}
    episodes = [
        team_episode(group, [roles[r] for r in turns], [True] * len(turns), won, module_of)
        for (group, turns, module_of), won in zip(games, [True, False, True, False], strict=True)
    ]
    settings = EstimatorSettings(estimator="grpo", normalize_by="agent")
    metrics = MetricsLogger()
    fake = {
        m: SimpleNamespace(unwrapped=lambda: SimpleNamespace(pad_token_id=PAD))
        for m in ("planner_llm", "executor_g0", "executor_llm")
    }
    batch = GroupAdvantages(settings=settings)(rl_module=fake, batch={}, episodes=episodes, metrics=metrics)
    logged = metrics.reduce()
    # Executor turns: g0's 2 + 1, g1's 3 + 2; planner turns: 1 + 1 + 1 + 2.
    assert logged["executor_g0"]["agent_executor_num_step_rows"] == 3
    assert logged["executor_llm"]["agent_executor_num_step_rows"] == 5
    assert logged["planner_llm"]["agent_planner_num_step_rows"] == 5
    assert {m: len(rows[PROMPT_IDS]) for m, rows in batch.items()} == {
        "executor_g0": 3,
        "executor_llm": 5,
        "planner_llm": 5,
    }


def test_each_roles_prompt_names_its_role_and_team_context() -> None:
    """The history-window connector renders a team role's prompt from its own episode: the role and
    what its teammates said since the last game step come from the role's latest info."""
    import envs
    from envs.keychest.team import KeyChestTeamEnv, render_prompt
    from hgpo_rllib.connectors.env_to_module.history_window import episode_prompt_text

    env = KeyChestTeamEnv(max_steps=4)
    episode = MultiAgentEpisode(agent_to_module_mapping_fn=lambda agent, _episode: agent)
    observations, infos = env.reset(seed=3)
    episode.add_env_reset(observations=observations, infos=infos)
    rendered = {}
    for _ in range(3):
        ((role, _),) = observations.items()
        rendered[role] = episode_prompt_text(episode.agent_episodes[role], render_prompt, 2)
        expected = envs.PromptContext(**_context_of(episode.agent_episodes[role]))
        assert rendered[role] == render_prompt(expected)
        answer = env.expert_action(role)
        observations, rewards, terminateds, truncateds, infos = env.step({role: answer})
        episode.add_env_step(
            observations=observations,
            actions={role: answer},
            rewards=rewards,
            infos=infos,
            terminateds=terminateds,
            truncateds=truncateds,
        )
    assert set(rendered) == {"planner", "executor"}
    assert "<subgoal>" in rendered["planner"] and "<action>" in rendered["executor"]
    # The executor is told what the planner said (its team context) and the subgoal in force.
    first = episode.agent_episodes["executor"].get_infos(0)
    ((teammate, subgoal),) = first["team_context"]
    assert teammate == "planner" and subgoal == first["subgoal"] and subgoal in rendered["executor"]


def _context_of(agent_episode: Any) -> dict[str, Any]:
    """The prompt context as the connector builds it, written out independently."""
    observations, infos = agent_episode.get_observations(), agent_episode.get_infos()
    info = infos[-1]
    return {
        "task": info["task"],
        "history": [(observations[j], infos[j + 1]["command"]) for j in range(len(observations) - 1)],
        "observation": observations[-1],
        "admissible_actions": info["admissible_actions"],
        "step": len(observations) - 1,
        "history_length": 2,
        "current_subgoal": info.get("subgoal"),  # a planner/executor team's subgoal in force
        "role": info["role"],
        "team_context": tuple(info["team_context"]),
    }
