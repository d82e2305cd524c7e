"""``hgpo/WebShopTeam-v0``: Dr. MAS's search system (a router, a searcher and an answerer) on WebShop.

Dr. MAS's search orchestra (docs/drmas.md) routes every turn through a verifier: at each game turn
the verifier answers ``<think>...</think><verify>yes</verify>`` (the team knows enough to buy) or
``<verify>no</verify>``. No: the searcher acts, with ``<think>...</think><action>...</action>`` holding
``search[query]`` or a click that only looks (an item, back to search, next or previous page, an
item's description, features or reviews). Yes: the buyer acts, with any click (an item, an option,
``click[buy now]``) but no search. An unparseable verdict counts as yes (the authors' rule) and is
reported invalid; on the game's last turn the searcher is skipped and the buyer acts whatever the
verdict. Only the searcher's and the buyer's outputs step the game; a command the role may not use
(the buyer's search, the searcher's purchase) is invalid and changes nothing.

Settings: WebShop's own (``split``, ``goal_sampling``, ``data_dir``, ``max_steps``, ``require_tags``,
``render_mode``, ``catalog_file``, ``attributes_file``) plus ``max_turns`` (default ``3 * max_steps``:
each game step takes two turns). The team reward is WebShop's score of the purchase (0 to 1, 0 if
nothing is bought), as Dr. MAS rewards its search team by the answer's quality; the one-agent env's
reward is verl-agent's (10 for a score of 1.0, else 0), which a team of small models rarely earns.
``info["won"]`` is a score of 1.0.
"""

from __future__ import annotations

import os
from typing import Any

from envs.common.actions import parse_action, parse_tagged
from envs.common.prompts import PromptContext
from envs.common.team_env import RoleTurn, TeamTextEnv, check_role, play_team, role_prompt, team_corpus
from envs.webshop import pages, prompts
from envs.webshop.env import WebShopEnv
from envs.webshop.facts import WEBSHOP_TEAM_FACTS

VERIFIER = "verifier"
SEARCHER = "searcher"
BUYER = "buyer"
VERDICTS = ("yes", "no")
BUY_NOW = pages.BUY_NOW.lower()
#: Clicks that only move between result pages or back to the search page: the searcher's work.
_PAGE_TURNS = (pages.BACK_TO_SEARCH.lower(), pages.NEXT_PAGE.lower(), pages.PREV_PAGE.lower())


def search_query(command: str) -> str | None:
    """The query of ``search[query]``, else None."""
    return command[len("search[") : -1] if command.startswith("search[") and command.endswith("]") else None


def click_target(command: str) -> str | None:
    """The target of ``click[target]``, else None."""
    return command[len("click[") : -1] if command.startswith("click[") and command.endswith("]") else None


class WebShopTeamEnv(TeamTextEnv):
    """WebShop played by a verifier, a searcher and a buyer (see the module doc)."""

    ROLES = (VERIFIER, SEARCHER, BUYER)
    game_class = WebShopEnv
    FACTS = WEBSHOP_TEAM_FACTS

    #: The scripted buyer's next command and the game step it was decided at.
    _expert_step: tuple[int, str] | None = None

    def team_reward(self, reward: float, info: dict[str, Any]) -> float:
        """WebShop's score of the step (the purchase's, 0 on every other step)."""
        return float(info["score"])

    def _start_episode(self) -> None:
        self._expert_step = None

    def _first_role(self) -> str:
        return VERIFIER

    def _parse(self, role: str, output: str) -> RoleTurn:
        if role == VERIFIER:
            parsed = parse_tagged(output, "verify", require_think=self.game.require_tags, choices=VERDICTS)
            return RoleTurn(parsed.command, parsed.is_valid)
        parsed = parse_action(output, require_tags=self.game.require_tags)
        if not (parsed.is_valid and self._may_use(role, parsed.command)):
            return RoleTurn(parsed.command, False)
        return RoleTurn(parsed.command, True, game_command=parsed.command)

    def _next_role(self, role: str, turn: RoleTurn) -> str:
        if role != VERIFIER:
            return VERIFIER
        if self.game_step >= self.game.max_steps - 1:  # the last game turn: no more searching
            return BUYER
        return SEARCHER if turn.is_valid and turn.command == "no" else BUYER

    def _admissible(self, role: str) -> list[str]:
        if role == VERIFIER:
            return list(VERDICTS)
        return [a for a in self._game_info.get("admissible_actions", []) if self._may_use(role, a)]

    def _may_use(self, role: str, command: str) -> bool:
        """The searcher searches and looks around; the buyer clicks anything but never searches."""
        target = click_target(command)
        if role == BUYER:
            return target is not None
        if search_query(command) is not None:
            return True
        return target is not None and not self._is_purchase(target)

    def _is_purchase(self, target: str) -> bool:
        """``buy now``, or an option of the product on the current page."""
        clickable = self.game.session.page.clickables.get(target)
        return target == BUY_NOW or (clickable is not None and clickable.kind == "option")

    def expert_action(self, role: str) -> str:
        """The scripted buyer's plan (:class:`~envs.webshop.expert.ScriptedBuyer`, which knows the
        goal) split over the roles: the verifier says no while the next command searches or turns a
        page, yes once it clicks the goal item, its options or buy now; the searcher and the buyer give
        that command. The command is decided once per game step (the scripted buyer keeps count)."""
        if self._expert_step is None or self._expert_step[0] != self.game_step:
            command = self.game.expert_action()
            if command is None:
                raise RuntimeError("the expert has nothing left to do (the episode is over)")
            self._expert_step = (self.game_step, command)
        command = self._expert_step[1]
        if role == VERIFIER:
            searching = search_query(command) is not None or click_target(command) in _PAGE_TURNS
            verdict = "no" if searching else "yes"
            return f"<think>Next the team should {command}.</think><verify>{verdict}</verify>"
        return f"<think>The goal product and options are known.</think><action>{command}</action>"


_INTROS = {
    VERIFIER: (
        "You are the verifier of a three-agent shopping team in the WebShop e-commerce environment. "
        "You decide whether the team knows enough to buy: if so the buyer acts, else the searcher."
    ),
    SEARCHER: (
        "You are the searcher of a three-agent shopping team in the WebShop e-commerce environment. "
        "You search and look at items; the buyer chooses options and buys."
    ),
    BUYER: (
        "You are the buyer of a three-agent shopping team in the WebShop e-commerce environment. "
        "You click the item to buy, choose its options and buy it; you cannot search."
    ),
}
_ANSWERS = {
    VERIFIER: (
        "Think step by step inside <think> </think> tags, then answer <verify>yes</verify> if the team "
        "has enough information to buy, or <verify>no</verify> if it should search more."
    ),
    SEARCHER: (
        "Think step by step inside <think> </think> tags, then give one admissible action inside <action> "
        "</action> tags: search[your query], or a click on an item, a page button or an item's "
        "description, features or reviews."
    ),
    BUYER: (
        "Think step by step inside <think> </think> tags, then give one admissible click inside <action> "
        "</action> tags: the item, one of its options, or click[buy now]."
    ),
}


def render_prompt(context: PromptContext) -> str:
    """The prompt of ``context.role``; observations are shown as verl-agent's WebShop prompt shows
    them (:func:`~envs.webshop.prompts.format_observation`)."""
    role = check_role(context, WebShopTeamEnv.ROLES)
    return role_prompt(
        context,
        intro=_INTROS[role],
        answer=_ANSWERS[role],
        show=lambda observation: prompts.format_observation(observation, context.task),
    )


def tokenizer_corpus(data_dir: str | os.PathLike[str] | None = None, num_episodes: int = 5) -> list[str]:
    """WebShop's own corpus plus every role's prompts and answers in ``num_episodes`` expert games."""
    env = WebShopTeamEnv(data_dir=data_dir)
    episodes = [play_team(env, options={"goal_index": index}) for index in range(num_episodes)]
    own = prompts.tokenizer_corpus(data_dir)
    return list(dict.fromkeys([*own, *team_corpus(episodes, render_prompt)]))
