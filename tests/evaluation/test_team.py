"""A team's evaluation records and tables (``hgpo_rllib.evaluation.team``): the shares of cut turns
over all agents, from the modules' flags as training counts them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
from helpers import keychest_team_config
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from hgpo_rllib.columns import LENGTH_CUT, PROMPT_CUT, TASK_SEED
from hgpo_rllib.evaluation.team import play_team, summarize_team, team_records, team_runner


def _agent(flags: dict[str, list[bool]], turns: int) -> SingleAgentEpisode:
    """An agent's episode of ``turns`` valid turns, each carrying ``flags`` as the runner stores them."""
    episode = SingleAgentEpisode()
    episode.add_env_reset(observation="o", infos={TASK_SEED: 7, "task_type": "keychest"})
    for t in range(turns):
        episode.add_env_step(
            "o",
            "a",
            0.0,
            infos={"is_action_valid": True, "won": False},
            terminated=t == turns - 1,
            extra_model_outputs={key: values[t] for key, values in flags.items()},
        )
    return episode


def _team(planner: dict[str, list[bool]], executor: dict[str, list[bool]]) -> Any:
    return SimpleNamespace(agent_episodes={"planner": _agent(planner, 2), "executor": _agent(executor, 2)})


def test_a_teams_cut_turns_are_shares_of_all_its_agents_turns() -> None:
    """3 of the 4 turns length-cut and 2 of them with a cut prompt: 0.75 and 0.5. An episode whose
    steps carry no flags reports NaN, and the seed's rate is the mean over the episodes that do."""
    cut = _team(
        {LENGTH_CUT: [True, False], PROMPT_CUT: [True, True]},
        {LENGTH_CUT: [True, True], PROMPT_CUT: [False, False]},
    )
    records = team_records([cut, _team({}, {})], samples=2)
    assert [(r["sample"], r["length_cut_rate"], r["prompt_cut_rate"]) for r in records[:1]] == [
        (0, 0.75, 0.5)
    ]
    assert np.isnan(records[1]["length_cut_rate"]) and np.isnan(records[1]["prompt_cut_rate"])
    per_seed, summary = summarize_team(
        pd.DataFrame([{"policy": "checkpoint", "seed": 1, **r} for r in records])
    )
    assert list(per_seed.columns) == [
        "policy",
        "seed",
        "success",
        "pass_at_k",
        "score",
        "steps",
        "invalid_rate",
        "invalid_rate_planner",
        "invalid_rate_executor",
        "length_cut_rate",
        "prompt_cut_rate",
    ]
    assert per_seed[["length_cut_rate", "prompt_cut_rate"]].values.tolist() == [[0.75, 0.5]]
    assert summary[["length_cut_rate", "prompt_cut_rate"]].values.tolist() == [["0.75 ± 0.0", "0.5 ± 0.0"]]


def test_a_team_that_cuts_every_turn_reports_it() -> None:
    """The tiny KeyChest team (one shared LLM, its modules as built: a team of warm starts) may not end
    an answer before ``max_new_tokens`` and fits no prompt into 16 tokens: both shares are 1.0 in
    every record, played through the runner it trains with (local, no Ray)."""
    config = keychest_team_config(shared=True, min_new_tokens=8).training(max_prompt_tokens=16)
    runner = team_runner(config, {"max_steps": 3}, None, batch_size=2)
    try:
        records = play_team(runner, [11, 12], samples=1, seed=0)
    finally:
        runner.stop()
    assert [(r["length_cut_rate"], r["prompt_cut_rate"]) for r in records] == [(1.0, 1.0)] * 2
