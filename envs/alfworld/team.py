"""``hgpo/ALFWorldTeam-v0``: a planner and an executor playing ALFWorld.

The planner/executor shape of :class:`~envs.common.planner_executor.PlannerExecutorTeam` (docs/drmas.md) on
the ALFWorld engine (:mod:`envs.alfworld.env`): the planner names the next part of the household task,
the executor plays commands until it reports the part done or failed (or ``replan_every`` turns
pass). Settings: ALFWorld's own (``split``, ``max_steps``, ``source``, ``data_dir``, ``task_types``,
``grammar``, ``require_tags``, ``render_mode``) plus ``max_turns`` and ``replan_every``. The team
reward is the game's (10 on a win).
"""

from __future__ import annotations

from collections.abc import Sequence

from envs.alfworld import prompts
from envs.alfworld.env import ALFWorldEnv
from envs.alfworld.facts import ALFWORLD_TEAM_FACTS
from envs.common.planner_executor import PlannerExecutorTeam, planner_executor_prompt
from envs.common.prompts import PromptContext
from envs.common.team_env import play_team, team_corpus

GAME = "the ALFRED household environment"
#: Expert commands that only lead up to an interaction (moving, opening and closing receptacles).
_APPROACH = ("go to ", "open ", "close ")


class ALFWorldTeamEnv(PlannerExecutorTeam):
    """ALFWorld played by a planner and an executor (see the module doc)."""

    game_class = ALFWorldEnv
    FACTS = ALFWORLD_TEAM_FACTS

    def _expert_phase(self, plan: Sequence[str]) -> tuple[str, str]:
        """One phase per interaction with an object: the subgoal is the plan's next command that is
        not an approach (take, move, heat, clean, cool, use, ...), which also completes it."""
        target = next((command for command in plan if not command.startswith(_APPROACH)), plan[-1])
        return target, target


def render_prompt(context: PromptContext) -> str:
    """The planner's or the executor's prompt (``context.role``)."""
    return planner_executor_prompt(context, GAME)


def tokenizer_corpus(num_episodes: int = 2) -> list[str]:
    """ALFWorld's own corpus plus every role's prompts and answers in ``num_episodes`` expert games
    (generated games, no download)."""
    env = ALFWorldTeamEnv(source="generated")
    episodes = [play_team(env, seed=seed) for seed in range(num_episodes)]
    return list(dict.fromkeys([*prompts.tokenizer_corpus(), *team_corpus(episodes, render_prompt)]))
