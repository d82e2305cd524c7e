"""KeyChest's facts (:class:`~envs.common.facts.EnvFacts`): no split, its expert's warm start with
subgoals, no paper preset."""

from __future__ import annotations

from envs.common.facts import EnvFacts, WarmStartFacts

KEYCHEST_FACTS = EnvFacts(
    warm_start=WarmStartFacts(
        env_config={"max_steps": 10}, expert_subgoal="envs.keychest.env:expert_subgoal"
    ),
)
#: Its planner/executor team (envs/keychest/team.py).
KEYCHEST_TEAM_FACTS = KEYCHEST_FACTS.of_team()
