"""``hgpo/KeyChestTeam-v0``: a planner and an executor playing KeyChest, the fast CPU team system.

The planner/executor shape of :class:`~envs.common.planner_executor.PlannerExecutorTeam` (docs/drmas.md) on
the tiny KeyChest game (:mod:`envs.keychest.env`): the planner's subgoals carry what the observations
hide (whether the key is carried), so the team can win where a memoryless executor cannot. Settings:
KeyChest's own (``num_rooms``, ``num_layouts``, ``max_steps``, ``require_tags``, ``render_mode``) plus
``max_turns`` and ``replan_every``. Bare commands stay valid for the executor unless
``require_tags=True``, as in the single-agent game.
"""

from __future__ import annotations

from collections.abc import Sequence

from envs.common.planner_executor import PlannerExecutorTeam, planner_executor_prompt
from envs.common.prompts import PromptContext
from envs.common.team_env import play_team, team_corpus
from envs.keychest import prompts
from envs.keychest.env import CHEST_SUBGOAL, KEY_SUBGOAL, OPEN_CHEST, TAKE_KEY, KeyChestEnv
from envs.keychest.facts import KEYCHEST_TEAM_FACTS

GAME = "KeyChest, a text game of rooms"


class KeyChestTeamEnv(PlannerExecutorTeam):
    """KeyChest played by a planner and an executor (see the module doc)."""

    game_class = KeyChestEnv
    FACTS = KEYCHEST_TEAM_FACTS

    def _expert_phase(self, plan: Sequence[str]) -> tuple[str, str]:
        """Fetch the key (ends with "take key"), then open the chest (ends the game)."""
        return (KEY_SUBGOAL, TAKE_KEY) if TAKE_KEY in plan else (CHEST_SUBGOAL, OPEN_CHEST)


def render_prompt(context: PromptContext) -> str:
    """The planner's or the executor's prompt (``context.role``)."""
    return planner_executor_prompt(context, GAME)


def tokenizer_corpus(num_episodes: int = 5) -> list[str]:
    """KeyChest's own corpus plus every role's prompts and answers in ``num_episodes`` expert games."""
    env = KeyChestTeamEnv()
    episodes = [play_team(env, seed=seed) for seed in range(num_episodes)]
    return list(dict.fromkeys([*prompts.tokenizer_corpus(), *team_corpus(episodes, render_prompt)]))
