"""A scripted buyer: the privileged baseline that knows the goal product and its options.

It searches the goal's instruction, pages through up to five result pages to the goal product (then
retries with the goal's product-type query), clicks each goal option value and buys. It reads only
``info["available_actions"]`` and drives the env through ``step()`` with well-formed tagged outputs,
like a policy. On the first 200 goals it scores 1.0 on 194 (the rest are goals whose options cannot
all be matched, or whose product no search finds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

MAX_RESULT_PAGES = 5  # WebShop returns 50 hits, 10 per page


class ScriptedBuyer:
    """Chooses the next command for one episode of ``goal`` from the page's available actions."""

    def __init__(self, goal: Mapping[str, Any]):
        if not goal.get("asin"):
            raise ValueError("the scripted buyer needs a goal with an asin")
        self.goal = goal
        self._queries = [goal["instruction_text"], goal["query"]]
        self._searches = 0
        self._result_pages = 0
        self._chosen: set[str] = set()

    def act(self, available_actions: Mapping[str, Any]) -> str:
        """The next command (``search[...]`` or ``click[...]``), given the original's available actions."""
        clickables = available_actions["clickables"]
        if "buy now" in clickables:  # on the goal product's page
            for value in self.goal["goal_options"].values():
                if value not in self._chosen and value in clickables:
                    self._chosen.add(value)
                    return f"click[{value}]"
            return "click[buy now]"
        target = self.goal["asin"].lower()
        if target in clickables:
            return f"click[{target}]"
        if "next >" in clickables and self._result_pages < MAX_RESULT_PAGES:
            self._result_pages += 1
            return "click[next >]"
        query = self._queries[min(self._searches, len(self._queries) - 1)]
        self._searches += 1
        self._result_pages = 1
        return f"search[{query}]"


def subgoal(command: str, available_actions: Mapping[str, Any]) -> str:
    """The buyer's phase that ``command`` belongs to, as a plan-execute subgoal (HiPER,
    docs/hiper.md): "search for QUERY", "choose the item" (results pages), "choose the options" and
    "buy it" (the product page, which alone offers "buy now"). Read from the command and the page,
    which the policy sees too, so a policy can learn when a phase ends."""
    if command.startswith("search[") and command.endswith("]"):
        return f"search for {command[len('search[') : -1]}"
    if command == "click[buy now]":
        return "buy it"
    return "choose the options" if "buy now" in available_actions["clickables"] else "choose the item"


def expert_subgoal(env: gym.Env, command: str) -> str:
    """:func:`subgoal` of the expert's ``command`` on ``env``'s current page (before it runs)."""
    return subgoal(command, env.unwrapped.session.available_actions)


def tagged(command: str) -> str:
    """A well-formed LLM output for ``command`` (the reference's ``<think>``/``<action>`` format)."""
    return f"<think>The goal product and options are known.</think><action>{command}</action>"


@dataclass
class Episode:
    """One played episode: ``observations[t]``/``infos[t]`` before answer ``t`` (index 0 from reset),
    and one more of each after the last answer."""

    observations: list[str] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)


def play_episode(env: gym.Env, **reset_kwargs: Any) -> Episode:
    """Run the scripted buyer for one episode through ``env.step`` (``reset_kwargs`` go to reset)."""
    observation, info = env.reset(**reset_kwargs)
    episode = Episode([observation], [info])
    done = False
    while not done:
        answer = tagged(env.unwrapped.expert_action())
        observation, _, terminated, truncated, info = env.step(answer)
        episode.answers.append(answer)
        episode.observations.append(observation)
        episode.infos.append(info)
        done = terminated or truncated
    return episode
